//! The save-path driver for `just bench`; see `tests/backup_support/harness.rs`, and
//! `tests/backup_support/stages.rs` for `stages` (each pass of a save alone: the limit).

#[path = "../tests/backup_support/harness.rs"]
mod harness;
#[path = "../tests/backup_support/stages.rs"]
mod stages;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [verb, data, parts, scratch] = args.as_slice()
        && verb == "stages"
    {
        return match stages::run(data.as_ref(), parts.as_ref(), scratch.as_ref()) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    harness::main_with_args(&args)
}
