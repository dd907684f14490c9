//! Operation locks: `flock(2)` on `<state>/locks/<key>.lock`, never blocking.
//!
//! The kernel drops a dead holder's lock, so there is no stale-lock logic, and the lock file
//! is never deleted (unlinking it while others wait would let two processes hold "the" lock
//! on different inodes). The holder writes what it is doing into the file, only so that a
//! contender can say who holds it. Files are opened close-on-exec, so child processes
//! (smolvm, gpg, an opener) never keep a lock alive.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use box_proto::BoxName;

use super::StateDir;

/// What a lock protects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockKey {
    /// The check-create-register window and row removal.
    Registry,
    /// Every mutation of one box.
    Box(BoxName),
    /// Building a base (one at a time).
    Base,
}

impl LockKey {
    /// The key as users see it in messages.
    pub fn label(&self) -> &str {
        match self {
            LockKey::Registry => "registry",
            LockKey::Box(name) => name.as_str(),
            LockKey::Base => "base",
        }
    }

    /// Box locks get a prefix so that a box named `registry` cannot share the registry's file.
    fn file_name(&self) -> String {
        match self {
            LockKey::Registry => "registry.lock".into(),
            LockKey::Box(name) => format!("box-{name}.lock"),
            LockKey::Base => "base.lock".into(),
        }
    }
}

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another operation ({holder}) holds the '{key}' lock; try again when it has finished")]
    Busy { key: String, holder: String },
    #[error(transparent)]
    Io(#[from] anyhow::Error),
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct LockGuard {
    key: LockKey,
    _file: File,
}

impl LockGuard {
    pub fn key(&self) -> &LockKey {
        &self.key
    }
}

fn lock_path(state: &StateDir, key: &LockKey) -> PathBuf {
    state.locks_dir().join(key.file_name())
}

/// Opens (creating, 0600, never truncating: it may name the holder) a lock file in the
/// state dir's private locks dir.
pub fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open lock file {}", path.display()))
}

/// Tries to take `key` for `operation` (e.g. `box save alpha`) without waiting.
pub fn try_acquire(
    state: &StateDir,
    key: LockKey,
    operation: &str,
) -> Result<LockGuard, LockError> {
    let dir = state.locks_dir();
    StateDir::ensure_private_dir(&dir)?;
    let path = lock_path(state, &key);
    let mut file = open_lock_file(&path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            // The holder may be rewriting the file right now; an empty read is fine.
            let _ = file.read_to_string(&mut text);
            return Err(LockError::Busy {
                key: key.label().to_string(),
                holder: describe_holder(&text),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(LockError::Io(
                anyhow::Error::new(e).context(format!("cannot lock {}", path.display())),
            ));
        }
    }
    let record = format!(
        "pid={}\noperation={}\nstarted={}\n",
        std::process::id(),
        operation.replace('\n', " "),
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
    );
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(record.as_bytes()))
        .with_context(|| format!("cannot record ownership in {}", path.display()))?;
    Ok(LockGuard { key, _file: file })
}

fn describe_holder(text: &str) -> String {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(|v| v.chars().filter(|c| !c.is_control()).collect::<String>())
    };
    match (field("operation"), field("pid")) {
        (Some(op), Some(pid)) => format!("{op}, pid {pid}"),
        (None, Some(pid)) => format!("pid {pid}"),
        _ => "a process that has not said what it is doing".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_taker_is_told_who_holds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().to_path_buf());
        let alpha = LockKey::Box(BoxName::parse("alpha").unwrap());
        let held = try_acquire(&state, alpha.clone(), "box save alpha").unwrap();
        let err = try_acquire(&state, alpha.clone(), "box stop alpha").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "another operation (box save alpha, pid {}) holds the 'alpha' lock; try again when it has finished",
                std::process::id()
            )
        );
        drop(held);
        try_acquire(&state, alpha, "box stop alpha").unwrap();
    }

    #[test]
    fn a_box_named_registry_does_not_share_the_registry_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().to_path_buf());
        let _reg = try_acquire(&state, LockKey::Registry, "box new registry").unwrap();
        let named = LockKey::Box(BoxName::parse("registry").unwrap());
        try_acquire(&state, named, "box new registry").unwrap();
    }
}
