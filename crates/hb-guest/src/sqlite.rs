//! The SQLite databases the box's services and agents keep, made self-contained for a
//! backup and checked on both ends of one.
//!
//! * [`checkpoint`]: after their writers stopped, `PRAGMA wal_checkpoint(TRUNCATE)` moves
//!   every committed page from the `-wal` file into the main file (Executor's data.db
//!   keeps most of its data in the WAL right after start).
//! * [`integrity_check`]: `PRAGMA integrity_check`, with the `-wal` as SQLite itself reads
//!   it. `hb quiesce` runs it and warns (a backup of a damaged box beats none); `hb import`
//!   runs it on the restored tree before the swap and refuses a damaged one.
//!
//! Only the databases the box's software owns are checked: a `*.db` in a workspace is the
//! user's data, restored as it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use rusqlite::{Connection, OpenFlags};

use crate::paths::Paths;

/// The SQLite header every database file starts with.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The databases the box's services and agents keep, those that exist: every SQLite file
/// directly in Executor's data dir (its `data.db`), the Hermes home (`state.db` and any
/// other) and each Hermes profile, and Codex's home. A file counts by its header, not its
/// name; sidecars (`-wal`, `-shm`, `-journal`) are not databases of their own.
///
/// Only real directories are looked in, every step from the data root checked without
/// following a link: a restored backup may hold a link where such a directory was (a
/// symlink is data), and nothing after a restore follows one.
pub fn databases(paths: &Paths) -> Vec<PathBuf> {
    let real_dir = |dir: &Path| real_dir_under(&paths.data, dir);
    let mut dirs = vec![paths.executor_data(), paths.hermes_home()];
    let profiles_dir = paths.hermes_home().join("profiles");
    if real_dir(&profiles_dir)
        && let Ok(entries) = std::fs::read_dir(&profiles_dir)
    {
        let mut profiles: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        profiles.sort();
        dirs.extend(profiles);
    }
    dirs.push(paths.codex_home());
    let mut out = Vec::new();
    for dir in dirs {
        if !real_dir(&dir) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| is_database(p))
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// The databases whose writers `hb quiesce` stops (Executor's, Hermes's): the ones it
/// checkpoints. Codex may be running in the agent's shell; its databases are only checked.
pub fn quiesced_databases(paths: &Paths) -> Vec<PathBuf> {
    let codex = paths.codex_home();
    databases(paths)
        .into_iter()
        .filter(|p| !p.starts_with(&codex))
        .collect()
}

/// Whether `dir` is a directory reached from `root` through directories only (no link on
/// the way, none at the end).
fn real_dir_under(root: &Path, dir: &Path) -> bool {
    let Ok(rel) = dir.strip_prefix(root) else {
        return false;
    };
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
            return false;
        }
    }
    true
}

fn is_database(path: &Path) -> bool {
    use std::io::Read as _;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    if ["-wal", "-shm", "-journal"]
        .iter()
        .any(|s| name.ends_with(s))
    {
        return false;
    }
    // Never follow a link: the box's own databases are plain files.
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == SQLITE_MAGIC)
}

/// Runs `PRAGMA integrity_check` on one database, with its `-wal` (SQLite reads it as it
/// opens the file). `Err` holds what SQLite reported, its first lines.
pub fn integrity_check(path: &Path) -> Result<(), String> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open it: {e}"))?;
    let _ = conn.busy_timeout(Duration::from_secs(10));
    let mut stmt = conn
        .prepare("PRAGMA integrity_check(20)")
        .map_err(|e| e.to_string())?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| e.to_string())?;
    if rows.len() == 1 && rows[0] == "ok" {
        return Ok(());
    }
    let mut shown: Vec<String> = rows.iter().take(3).cloned().collect();
    if rows.len() > 3 {
        shown.push(format!("and {} more", rows.len() - 3));
    }
    Err(shown.join("; "))
}

/// Whether a checkpoint failed because the file is damaged (a warning at save time), not
/// because a writer still holds it (which must stop the save).
pub fn is_damage(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<rusqlite::Error>()
            .and_then(rusqlite::Error::sqlite_error_code)
            .is_some_and(|code| {
                matches!(
                    code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                )
            })
    })
}

/// Outcome for one database.
#[derive(Debug)]
pub struct Checked {
    pub path: PathBuf,
    /// Frames that were in the WAL.
    pub wal_frames: i64,
}

/// Checkpoints (TRUNCATE) one database.
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
    Ok(Checked {
        path: path.to_path_buf(),
        wal_frames,
    })
}
