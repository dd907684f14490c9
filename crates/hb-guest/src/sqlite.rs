//! Making SQLite databases self-contained for a backup: after their writers stopped,
//! `PRAGMA wal_checkpoint(TRUNCATE)` moves every committed page from the `-wal` file into
//! the main file (Executor's data.db keeps most of its data in the WAL right after start),
//! then `PRAGMA quick_check` proves the result is readable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use rusqlite::{Connection, OpenFlags};

use crate::paths::Paths;

/// The databases the box's writers keep: Executor's `data.db`, Hermes's `state.db` and
/// each Hermes profile's `state.db`. Only those that exist.
pub fn databases(paths: &Paths) -> Vec<PathBuf> {
    let mut out = vec![
        paths.executor_data().join("data.db"),
        paths.hermes_home().join("state.db"),
    ];
    if let Ok(entries) = std::fs::read_dir(paths.hermes_home().join("profiles")) {
        let mut profiles: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("state.db"))
            .collect();
        profiles.sort();
        out.extend(profiles);
    }
    out.retain(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()));
    out
}

/// Outcome for one database.
#[derive(Debug)]
pub struct Checked {
    pub path: PathBuf,
    /// Frames that were in the WAL.
    pub wal_frames: i64,
}

/// Checkpoints (TRUNCATE) and quick-checks one database.
pub fn checkpoint(path: &Path) -> Result<Checked> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open {}", path.display()))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // Frames waiting in the WAL before the checkpoint (TRUNCATE reports 0 afterwards).
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_frames = std::fs::metadata(&wal)
        .map(|m| (m.len() as i64 - 32).max(0) / (page_size + 24))
        .unwrap_or(0);
    let (busy, _log, _done): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .with_context(|| format!("wal_checkpoint failed on {}", path.display()))?;
    if busy != 0 {
        bail!(
            "{}: the checkpoint could not finish because another process still uses the database; stop its writer and retry",
            path.display()
        );
    }
    let verdict: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .with_context(|| format!("quick_check failed on {}", path.display()))?;
    if verdict != "ok" {
        bail!("{}: quick_check reported: {verdict}", path.display());
    }
    Ok(Checked {
        path: path.to_path_buf(),
        wal_frames,
    })
}
