//! Progress for long work: bytes and rate, on a terminal only (stderr), quiet otherwise.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// A throttled one-line progress display.
pub struct Progress {
    label: &'static str,
    enabled: bool,
    start: Instant,
    last: Instant,
    bytes: u64,
    shown: bool,
}

/// `1.2 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

impl Progress {
    pub fn new(label: &'static str) -> Self {
        let enabled =
            std::io::stderr().is_terminal() && std::env::var_os("BOX_NO_PROGRESS").is_none();
        let now = Instant::now();
        Progress {
            label,
            enabled,
            start: now,
            last: now,
            bytes: 0,
            shown: false,
        }
    }

    pub fn add(&mut self, n: u64) {
        self.bytes += n;
        if self.enabled && self.last.elapsed() >= Duration::from_millis(250) {
            self.last = Instant::now();
            self.draw();
        }
    }

    fn draw(&mut self) {
        let secs = self.start.elapsed().as_secs_f64().max(0.001);
        let rate = (self.bytes as f64 / secs) as u64;
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2K  {} {} ({}/s)",
            self.label,
            human(self.bytes),
            human(rate)
        );
        let _ = err.flush();
        self.shown = true;
    }

    pub fn done(&mut self) {
        if self.enabled && self.shown {
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
        self.shown = false;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done();
    }
}
