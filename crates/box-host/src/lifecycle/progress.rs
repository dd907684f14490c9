//! Live provisioning progress and the transcript of `box new`.
//!
//! The full output of every guest step goes to `<state>/logs/<name>-new-<ts>.log` (0600);
//! the terminal shows only the `==> step: <name>` markers that `provision.sh` prints, each
//! with the elapsed time, so a user sees where a few minutes go without a wall of apt
//! output. On failure box prints where the transcript is.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result};

use crate::state::StateDir;
use crate::ui;

/// The transcript file of one operation.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: File,
}

impl Transcript {
    /// Creates `<state>/logs/<name>-<verb>-<YYYYmmdd-HHMMSS>.log`.
    pub fn create(state: &StateDir, name: &str, verb: &str) -> Result<Self> {
        let dir = state.logs_dir();
        StateDir::ensure_private_dir(&dir)?;
        let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
        let mut n = 0;
        loop {
            let suffix = if n == 0 {
                String::new()
            } else {
                format!("-{n}")
            };
            let path = dir.join(format!("{name}-{verb}-{stamp}{suffix}.log"));
            match OpenOptions::new()
                .append(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => return Ok(Self { path, file }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()));
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a line. A full disk must not fail the operation itself, so errors are
    /// reported once and otherwise ignored.
    pub fn line(&mut self, text: &str) {
        let _ = writeln!(self.file, "{text}");
    }

    /// Appends a whole block (a step's captured output).
    pub fn block(&mut self, label: &str, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        self.line(&format!("--- {label}"));
        let _ = self.file.write_all(text.as_bytes());
        if !text.ends_with('\n') {
            self.line("");
        }
    }
}

/// Turns streamed provisioning output into step lines on the terminal.
#[derive(Debug)]
pub struct StepProgress {
    started: Instant,
    step: Option<(String, Instant)>,
}

impl Default for StepProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl StepProgress {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            step: None,
        }
    }

    /// The step name in a `==> step: <name>` line.
    pub fn step_of(line: &str) -> Option<&str> {
        line.trim()
            .strip_prefix("==> step:")
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// Feeds one output line; prints a progress line when a new step begins.
    pub fn feed(&mut self, line: &str) {
        if let Some(name) = Self::step_of(line) {
            self.finish_step();
            let shown: String = name.chars().filter(|c| !c.is_control()).take(80).collect();
            ui::say(format!(
                "  [{}] {shown}",
                mmss(self.started.elapsed().as_secs())
            ));
            self.step = Some((shown, Instant::now()));
        }
    }

    fn finish_step(&mut self) {
        if let Some((name, at)) = self.step.take() {
            tracing::info!(
                "provision step '{name}' took {:.1}s",
                at.elapsed().as_secs_f64()
            );
        }
    }

    /// Ends the last step; returns the total elapsed seconds.
    pub fn done(&mut self) -> u64 {
        self.finish_step();
        self.started.elapsed().as_secs()
    }
}

pub fn mmss(secs: u64) -> String {
    format!("{:02}:{:02}", secs / 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_step_markers_only() {
        assert_eq!(
            StepProgress::step_of("==> step: apt packages"),
            Some("apt packages")
        );
        assert_eq!(StepProgress::step_of("  ==> step:node  "), Some("node"));
        assert_eq!(StepProgress::step_of("==> step: "), None);
        assert_eq!(StepProgress::step_of("Get:1 http://deb.debian.org"), None);
        assert_eq!(mmss(125), "02:05");
    }

    #[test]
    fn transcripts_are_private_and_unique() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().to_path_buf());
        let mut a = Transcript::create(&state, "alpha", "new").unwrap();
        let b = Transcript::create(&state, "alpha", "new").unwrap();
        assert_ne!(a.path(), b.path());
        a.block("uname", "x86_64\n");
        let text = std::fs::read_to_string(a.path()).unwrap();
        assert_eq!(text, "--- uname\nx86_64\n");
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
