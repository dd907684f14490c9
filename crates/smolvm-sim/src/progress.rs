//! smolvm's byte-transfer progress bar (`src/cli/mod.rs` ProgressBar, 1.0.4 and 1.9), used by
//! `machine cp`: on stderr, the first update drawn at once, later ones at most every 250 ms,
//! each as `\r<line>` with no newline; the total is never drawn by `update` (only `finish`
//! prints the last line, with a newline). A transfer that fails after an update therefore
//! leaves `\r<progress>` right before smolvm's `Error: …` on the same line, which is the
//! stderr shape callers must cope with.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::output::format_bytes;

const THROTTLE: Duration = Duration::from_millis(250);

pub struct ProgressBar {
    label: String,
    total: Option<u64>,
    started: Instant,
    last_print: Option<Instant>,
    printed: bool,
}

impl ProgressBar {
    pub fn new(label: impl Into<String>, total: Option<u64>) -> Self {
        Self {
            label: label.into(),
            total,
            started: Instant::now(),
            last_print: None,
            printed: false,
        }
    }

    /// The running total; throttled, so it can be called for every chunk.
    pub fn update(&mut self, so_far: u64) {
        if self.total.is_some_and(|t| t > 0 && so_far >= t) {
            return;
        }
        let now = Instant::now();
        if self
            .last_print
            .is_some_and(|t| now.duration_since(t) < THROTTLE)
        {
            return;
        }
        self.last_print = Some(now);
        self.printed = true;
        let mut err = std::io::stderr();
        let _ = write!(err, "\r{}", self.line(so_far));
        let _ = err.flush();
    }

    /// The summary line, with a newline.
    pub fn finish(self, total: u64) {
        let line = self.line(total);
        if self.printed {
            eprintln!("\r{line}");
        } else {
            eprintln!("{line}");
        }
    }

    fn line(&self, so_far: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = format!("{}/s", format_bytes((so_far as f64 / secs) as u64));
        match self.total {
            Some(t) if t > 0 => format!(
                "{}: {} / {} ({:.1}%, {rate})",
                self.label,
                format_bytes(so_far),
                format_bytes(t),
                (so_far as f64 * 100.0 / t as f64).min(100.0)
            ),
            _ => format!("{}: {} ({rate})", self.label, format_bytes(so_far)),
        }
    }
}
