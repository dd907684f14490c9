//! The transcript of an operation on a box (new, load, save, repair, base build).
//!
//! The full output of every guest step goes to `<state>/logs/<name>-<verb>-<ts>.log`
//! (0600); the terminal shows only what `ui` makes of it (provisioning's step lines, see
//! `ui::progress::StepProgress`). On failure box prints where the transcript is.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::state::StateDir;

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

#[cfg(test)]
mod tests {
    use super::*;

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
