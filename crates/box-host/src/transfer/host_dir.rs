//! The host scratch dir of one transfer: `<state>/tmp/<kind>-<pid>-<random>`, mode 0700,
//! registered with the engine's cleanup (removed on exit, panic, HUP, INT and TERM). It
//! holds one plaintext part at a time, each 0600. A SIGKILL leaves it behind: the next save
//! or load sweeps dirs whose pid is gone, `box doctor` reports them and `--fix` sweeps.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::backup::cleanup::Temp;
use crate::state::StateDir;

pub fn parent(state: &StateDir) -> PathBuf {
    state.root().join("tmp")
}

/// Creates the scratch dir for `kind` (`save` or `load`).
pub fn create(state: &StateDir, kind: &str) -> Result<Temp> {
    let dir = parent(state);
    StateDir::ensure_private_dir(&dir)?;
    Temp::create_dir(&dir, &format!("{kind}-{}-", std::process::id()))
        .with_context(|| format!("cannot create a scratch directory in {}", dir.display()))
}

/// The pid in `<kind>-<pid>-<random>`.
fn pid_of(name: &str) -> Option<i32> {
    let mut it = name.splitn(3, '-');
    let kind = it.next()?;
    if kind != "save" && kind != "load" {
        return None;
    }
    let pid = it.next()?.parse::<i32>().ok()?;
    it.next()?;
    Some(pid)
}

fn alive(pid: i32) -> bool {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e != nix::errno::Errno::ESRCH,
    }
}

/// Removes scratch dirs whose process is gone; returns how many.
pub fn sweep_stale(state: &StateDir) -> usize {
    sweep_in(&parent(state))
}

/// Scratch dirs whose process is gone (a save or load killed with SIGKILL), with the bytes
/// of plaintext parts each still holds: what `box doctor` reports.
pub fn stale(state: &StateDir) -> Vec<(PathBuf, u64)> {
    stale_in(&parent(state))
        .into_iter()
        .map(|dir| {
            let bytes = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum();
            (dir, bytes)
        })
        .collect()
}

fn stale_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            pid_of(&name).is_some_and(|pid| pid != std::process::id() as i32 && !alive(pid))
        })
        .map(|entry| entry.path())
        .collect()
}

fn sweep_in(dir: &Path) -> usize {
    let mut removed = 0;
    for path in stale_in(dir) {
        if std::fs::remove_dir_all(&path).is_ok() {
            tracing::info!("removed stale scratch {}", path.display());
            removed += 1;
        }
    }
    removed
}

/// Removes unpublished (encrypted) temp files of this box's default-named backups that a
/// killed save left in `backup_dir`: `.<name>-<stamp>.tar.zst.gpg.tmp-*`. Only call it
/// under the box lock (no other save of this box is running).
pub fn sweep_backup_temps(backup_dir: &Path, name: &box_proto::BoxName) -> usize {
    let Ok(entries) = std::fs::read_dir(backup_dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if is_backup_temp_of(&file, name.as_str())
            && entry.file_type().is_ok_and(|t| t.is_file())
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

fn is_backup_temp_of(file: &str, name: &str) -> bool {
    let Some(rest) = file
        .strip_prefix('.')
        .and_then(|f| f.strip_prefix(name))
        .and_then(|f| f.strip_prefix('-'))
    else {
        return false;
    };
    rest.get(..15)
        .is_some_and(box_proto::archive::naming::is_stamp)
        && rest[15..].starts_with(".tar.zst.gpg.tmp-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_temps_of_one_box_only() {
        assert!(is_backup_temp_of(
            ".alpha-20261129-120000.tar.zst.gpg.tmp-abc",
            "alpha"
        ));
        assert!(!is_backup_temp_of(
            ".alpha-2-20261129-120000.tar.zst.gpg.tmp-abc",
            "alpha"
        ));
        assert!(is_backup_temp_of(
            ".alpha-2-20261129-120000.tar.zst.gpg.tmp-abc",
            "alpha-2"
        ));
        assert!(!is_backup_temp_of(
            "alpha-20261129-120000.tar.zst.gpg",
            "alpha"
        ));
        assert!(!is_backup_temp_of(
            ".alpha-20261129-120000.tar.zst.gpg",
            "alpha"
        ));
    }

    #[test]
    fn names() {
        assert_eq!(pid_of("save-123-abc"), Some(123));
        assert_eq!(pid_of("load-9-x"), Some(9));
        assert_eq!(pid_of("save-123"), None);
        assert_eq!(pid_of("other-1-x"), None);
    }

    #[test]
    fn sweeps_only_dead_owners() {
        let d = tempfile::tempdir().unwrap();
        // A pid far above pid_max is never alive.
        std::fs::create_dir(d.path().join("save-999999999-x")).unwrap();
        std::fs::write(d.path().join("save-999999999-x/part-000000"), b"x").unwrap();
        let mine = format!("load-{}-y", std::process::id());
        std::fs::create_dir(d.path().join(&mine)).unwrap();
        std::fs::create_dir(d.path().join("unrelated")).unwrap();
        assert_eq!(sweep_in(d.path()), 1);
        assert!(!d.path().join("save-999999999-x").exists());
        assert!(d.path().join(&mine).exists());
        assert!(d.path().join("unrelated").exists());
    }
}
