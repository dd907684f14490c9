//! The databases the box's software keeps (Executor's, Hermes's, Codex's: see
//! [`crate::sqlite::databases`]), archived as consistent copies taken while their writers
//! go on, so a save never stops an agent: a Hermes chat in `box enter` runs through it.
//!
//! Before the walk, each database that changed since the parent backup (its file or its
//! `-wal`, by the same stamps as every file) is copied with SQLite's online backup into the
//! export's private directory and checked there (`quick_check`: what changed is checked at
//! save, in proportion to what changed; a restore checks every database fully before it
//! swaps anything in). The walk then archives the copy under the database's own name and
//! metadata, and leaves its `-wal`, `-shm` and `-journal` out: the copy holds every
//! committed row. An unchanged database is kept from the parent without being read.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::incremental::{Snapshot, Stamp};
use crate::paths::Paths;
use crate::sqlite;

/// One database, ready for the walk.
#[derive(Debug)]
pub struct Prepared {
    pub archive: Archive,
}

/// What the walk archives for a database.
#[derive(Debug)]
pub enum Archive {
    /// Unchanged since the parent: kept from it, unread.
    Kept,
    /// The consistent copy at this path, in its place.
    Copy(PathBuf),
    /// The file as it is: it is damaged (its copy failed, or failed the check). A backup
    /// of a damaged box beats none; its restore stops at it and says so.
    AsIs,
}

/// Every database of the data root, prepared.
#[derive(Debug, Default)]
pub struct LiveDatabases {
    by_path: HashMap<PathBuf, Prepared>,
    sidecars: HashSet<PathBuf>,
    /// What the next save compares with: each database's stamp and its `-wal`'s, taken
    /// before it was copied (a write after the copy shows as a change next time).
    pub stamps: Vec<(Vec<u8>, Stamp)>,
    /// Copied and checked in this export.
    pub copied: usize,
    /// Kept from the parent, unread.
    pub unchanged: usize,
    /// Those whose copy failed `quick_check`, data-root-relative, with why.
    pub damaged: Vec<(String, String)>,
}

fn key_of(root: &Path, path: &Path) -> Option<Vec<u8>> {
    Some(
        path.strip_prefix(root)
            .ok()?
            .as_os_str()
            .as_bytes()
            .to_vec(),
    )
}

fn stamp_at(path: &Path) -> Option<Stamp> {
    fs::symlink_metadata(path).ok().map(|m| Stamp::of(&m))
}

impl LiveDatabases {
    /// Copies into `scratch/live-db/` (0700) every database of `root` that changed since
    /// `parent` (all of them without one).
    pub fn prepare(root: &Path, scratch: &Path, parent: Option<&Snapshot>) -> Result<Self> {
        let mut live = LiveDatabases::default();
        let databases = sqlite::databases(&Paths::new(root));
        if databases.is_empty() {
            return Ok(live);
        }
        let copies = scratch.join("live-db");
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&copies)
            .with_context(|| format!("cannot create {}", copies.display()))?;
        for (n, db) in databases.into_iter().enumerate() {
            let Some(key) = key_of(root, &db) else {
                continue;
            };
            let wal = sqlite::sidecar(&db, "-wal");
            let wal_key = key_of(root, &wal).unwrap_or_default();
            let (Some(db_stamp), wal_stamp) = (stamp_at(&db), stamp_at(&wal)) else {
                continue;
            };
            for suffix in sqlite::SIDECARS {
                live.sidecars.insert(sqlite::sidecar(&db, suffix));
            }
            let unchanged = parent.is_some_and(|p| {
                p.unchanged(&key, &db_stamp)
                    && match &wal_stamp {
                        Some(s) => p.unchanged(&wal_key, s),
                        None => !p.entries.contains_key(&wal_key),
                    }
            });
            live.stamps.push((key.clone(), db_stamp));
            if let Some(s) = wal_stamp {
                live.stamps.push((wal_key, s));
            }
            if unchanged {
                live.unchanged += 1;
                live.by_path.insert(
                    db,
                    Prepared {
                        archive: Archive::Kept,
                    },
                );
                continue;
            }
            let copy = copies.join(format!("{n}.db"));
            let checked = sqlite::snapshot(&db, &copy)
                .map_err(|e| format!("{e:#}"))
                .and_then(|()| sqlite::quick_check(&copy));
            live.copied += 1;
            let archive = match checked {
                Ok(()) => Archive::Copy(copy),
                Err(why) => {
                    let _ = fs::remove_file(&copy);
                    live.damaged
                        .push((String::from_utf8_lossy(&key).into_owned(), why));
                    Archive::AsIs
                }
            };
            live.by_path.insert(db, Prepared { archive });
        }
        Ok(live)
    }

    /// What to archive for the entry at `path`, when it is a database.
    pub fn get(&self, path: &Path) -> Option<&Prepared> {
        self.by_path.get(path)
    }

    /// Whether `path` is a sidecar of a database archived as a copy: left out.
    pub fn is_sidecar(&self, path: &Path) -> bool {
        self.sidecars.contains(path)
    }

    /// The runtime manifest's `sqlite_check`: `ok`, or `damaged <db> …`, and what was not
    /// read because it did not change.
    pub fn verdict(&self) -> String {
        let mut verdict = if self.damaged.is_empty() {
            "ok".to_string()
        } else {
            let names: Vec<&str> = self.damaged.iter().map(|(d, _)| d.as_str()).collect();
            format!("damaged {}", names.join(" "))
        };
        if self.unchanged > 0 {
            verdict.push_str(&format!(
                " ({} checked, {} unchanged since the last save)",
                self.copied, self.unchanged
            ));
        }
        verdict
    }
}
