//! Progress of one phase of a transfer (copying parts out or in): bytes of the total, rate
//! and ETA, redrawn on stderr at most every 250 ms — on a terminal only, and never with
//! `BOX_NO_PROGRESS` set. A finished phase leaves one summary line.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::backup::progress::human;

pub struct Phase {
    label: String,
    total: Option<u64>,
    done: u64,
    start: Instant,
    last: Option<Instant>,
    enabled: bool,
}

/// `m:ss` or `h:mm:ss`.
pub fn clock(secs: u64) -> String {
    if secs >= 3600 {
        format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
    } else {
        format!("{}:{:02}", secs / 60, secs % 60)
    }
}

impl Phase {
    pub fn new(label: impl Into<String>, total: Option<u64>) -> Self {
        Phase {
            label: label.into(),
            total,
            done: 0,
            start: Instant::now(),
            last: None,
            enabled: std::io::stderr().is_terminal()
                && std::env::var_os("BOX_NO_PROGRESS").is_none(),
        }
    }

    pub fn add(&mut self, n: u64) {
        self.done += n;
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(250));
        if self.enabled && due {
            self.last = Some(Instant::now());
            let line = self.line();
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[2K  {line}");
            let _ = err.flush();
        }
    }

    /// `copying out 1.2 GiB of 3.0 GiB, 40.0 MiB/s, ETA 0:45`.
    pub fn line(&self) -> String {
        let secs = self.start.elapsed().as_secs_f64().max(0.001);
        let rate = self.done as f64 / secs;
        let mut s = format!("{} {}", self.label, human(self.done));
        if let Some(total) = self.total {
            s.push_str(&format!(" of {}", human(total)));
        }
        s.push_str(&format!(", {}/s", human(rate as u64)));
        if let Some(total) = self.total
            && rate > 0.0
            && total > self.done
        {
            let eta = ((total - self.done) as f64 / rate).ceil() as u64;
            s.push_str(&format!(", ETA {}", clock(eta)));
        }
        s
    }

    /// Clears the live line; returns the elapsed time.
    pub fn finish(&mut self) -> Duration {
        if self.enabled && self.last.is_some() {
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
        self.last = None;
        self.start.elapsed()
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks() {
        assert_eq!(clock(5), "0:05");
        assert_eq!(clock(125), "2:05");
        assert_eq!(clock(3725), "1:02:05");
    }

    #[test]
    fn line_has_total_rate_and_eta() {
        let mut p = Phase::new("copying out", Some(10 << 20));
        p.enabled = false;
        std::thread::sleep(Duration::from_millis(20));
        p.add(1 << 20);
        let l = p.line();
        assert!(l.starts_with("copying out 1.0 MiB of 10.0 MiB, "), "{l}");
        assert!(l.contains("/s, ETA "), "{l}");
    }
}
