//! The save-path driver for `just bench`; see `tests/backup_support/harness.rs`.

#[path = "../tests/backup_support/harness.rs"]
mod harness;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    harness::main_with_args(&args)
}
