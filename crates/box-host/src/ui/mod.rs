//! Human output: `==>` progress lines on stdout, `warning:`/`error:` on stderr, and the
//! progress of long work ([`progress`]).
//!
//! Colour only on a terminal and never with `NO_COLOR`. Everything printed here is for
//! people; scripts use `--json` (and `--progress=json`).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

pub mod progress;
pub mod terminal_text;
pub mod timings;

static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

fn colour(stream_is_tty: bool) -> bool {
    stream_is_tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn paint(code: &str, text: &str, tty: bool) -> String {
    if colour(tty) {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// A step of progress. Suppressed by `--quiet`.
pub fn say(msg: impl AsRef<str>) {
    if !QUIET.load(Ordering::Relaxed) {
        let tty = std::io::stdout().is_terminal();
        progress::suspend_bars(|| println!("{} {}", paint("36", "==>", tty), msg.as_ref()));
    }
}

/// Something the user should know about; the operation goes on.
pub fn warn(msg: impl AsRef<str>) {
    let tty = std::io::stderr().is_terminal();
    progress::suspend_bars(|| eprintln!("{} {}", paint("33", "warning:", tty), msg.as_ref()));
}

/// The final error of a failed command.
pub fn error(msg: impl AsRef<str>) {
    let tty = std::io::stderr().is_terminal();
    progress::suspend_bars(|| eprintln!("{} {}", paint("31", "error:", tty), msg.as_ref()));
}
