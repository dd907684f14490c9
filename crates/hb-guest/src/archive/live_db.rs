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
//!
//! A database at or above the export's block threshold is not copied (the copy would need
//! scratch space its size): it is kept in blocks (`super::blocked`), read during the walk
//! as its page image inside one read transaction ([`sqlite::PageImage`]). Here it is only
//! opened once, to find a database SQLite refuses (archived as it is) or one a writer holds.
//!
//! A copy that fails is never a silent loss: the main file of a WAL database lacks every
//! transaction since the last checkpoint and still passes SQLite's checks. So a copy that
//! fails for an ordinary reason (a writer holding the file, a full disk) is tried again a
//! few times, then fails the export naming the database and why. Only a damaged database
//! (SQLite says so, or the copy fails its check) is archived as it is, with its sidecars,
//! and is not recorded in the snapshot: the next save copies it again rather than keeping
//! it from a parent that holds it damaged.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use box_proto::escape::shown;
use box_proto::manifest::SqliteCheck;

use super::blocked;
use super::incremental::{Snapshot, Stamp};
use crate::paths::Paths;
use crate::sqlite::{self, CopyFailure};

/// How often a copy is tried before the export fails.
const TRIES: u32 = 3;
/// How long one try waits for a writer that holds the database.
const HOLD_WAIT: Duration = Duration::from_secs(2);
/// The pause before the second try; each next one waits twice as long.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

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
    /// In blocks, read from its page image during the walk ([`read_pages`]).
    Pages,
    /// The file as it is, with its sidecars: it is damaged. A backup of a damaged box
    /// beats none; its restore stops at it and says so.
    AsIs,
}

/// Every database of the data root, prepared.
#[derive(Debug, Default)]
pub struct LiveDatabases {
    by_path: HashMap<PathBuf, Prepared>,
    /// The sidecars of the databases archived as copies or kept: left out.
    left_out: HashSet<PathBuf>,
    /// The sidecars of the databases archived as they are: always written (even beneath
    /// `.hermes`, whose sidecars the seed's excludes leave out), never kept from a parent
    /// that left them out.
    with_as_is: HashSet<PathBuf>,
    /// What the next save compares with: each copied or kept database's stamp and its
    /// `-wal`'s, taken before it was copied (a write after the copy shows as a change next
    /// time). A database archived as it is has none.
    pub stamps: Vec<(Vec<u8>, Stamp)>,
    /// The `-wal` of each database this export reads (copied or in blocks): its path, key
    /// and stamp before the read, for [`Self::settle_wal_stamps`].
    wal_reads: Vec<(PathBuf, Vec<u8>, Stamp)>,
    /// Copied and checked in this export.
    pub copied: usize,
    /// Kept from the parent, unread.
    pub unchanged: usize,
    /// Those found damaged (archived as they are), data-root-relative, with why.
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
    /// `parent` (all of them without one), but those of `block_threshold` bytes or more
    /// (0: none), kept in blocks. Fails when a copy fails for any reason but damage, naming
    /// the database and why.
    pub fn prepare(
        root: &Path,
        scratch: &Path,
        parent: Option<&Snapshot>,
        block_threshold: u64,
    ) -> Result<Self> {
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
        // A snapshot of an hb that recorded a database archived as it is like a copied one
        // vouches for none of them.
        let parent = parent.filter(|p| !p.legacy);
        for (n, db) in databases.into_iter().enumerate() {
            let Some(key) = key_of(root, &db) else {
                continue;
            };
            let wal = sqlite::sidecar(&db, "-wal");
            let wal_key = key_of(root, &wal).unwrap_or_default();
            let (Ok(db_meta), wal_stamp) = (fs::symlink_metadata(&db), stamp_at(&wal)) else {
                continue;
            };
            let db_stamp = Stamp::of(&db_meta);
            // What its page image may hold: its pages, and those its WAL has not yet
            // written back.
            let wal_len = wal_stamp.map_or(0, |s| s.size);
            let may_block = blocked::may_block(&db, &db_meta);
            let mut stamps = vec![(key.clone(), db_stamp)];
            if let Some(s) = wal_stamp {
                stamps.push((wal_key.clone(), s));
            }
            let wal_read = wal_stamp.map(|s| (wal.clone(), wal_key.clone(), s));
            // Kept from the parent in the form it has there: blocks need room for them.
            let unchanged = parent.is_some_and(|p| {
                (may_block || !p.blocks.contains_key(&key))
                    && p.unchanged(&key, &db_stamp)
                    && match &wal_stamp {
                        Some(s) => p.unchanged(&wal_key, s),
                        None => !p.entries.contains_key(&wal_key),
                    }
            });
            let archive = if unchanged {
                live.unchanged += 1;
                Archive::Kept
            } else if may_block && blocked::large_enough(db_meta.len() + wal_len, block_threshold) {
                let probe = || sqlite::PageImage::open(&db, HOLD_WAIT).and_then(|p| p.finish());
                match retried(&db, probe) {
                    Ok(Tried::Done(())) => Archive::Pages,
                    Ok(Tried::Gone) => continue,
                    Ok(Tried::Damaged(why)) => {
                        live.damaged
                            .push((String::from_utf8_lossy(&key).into_owned(), why));
                        Archive::AsIs
                    }
                    Err(failure) => return Err(db_failed("read", &key, &db, &failure)),
                }
            } else {
                let copy = copies.join(format!("{n}.db"));
                let copy_checked = || {
                    remove_copy(&copy);
                    sqlite::snapshot(&db, &copy, HOLD_WAIT)
                        .and_then(|()| sqlite::quick_check(&copy))
                        .inspect_err(|_| remove_copy(&copy))
                };
                match retried(&db, copy_checked) {
                    Ok(Tried::Done(())) => Archive::Copy(copy),
                    Ok(Tried::Gone) => continue,
                    Ok(Tried::Damaged(why)) => {
                        live.damaged
                            .push((String::from_utf8_lossy(&key).into_owned(), why));
                        Archive::AsIs
                    }
                    Err(failure) => {
                        let failure = out_of_room(failure, &copies, db_meta.len());
                        return Err(db_failed("copy", &key, &db, &failure));
                    }
                }
            };
            if !matches!(archive, Archive::Kept) {
                live.copied += 1;
            }
            let sidecars = sqlite::SIDECARS.iter().map(|s| sqlite::sidecar(&db, s));
            if matches!(archive, Archive::AsIs) {
                live.with_as_is.extend(sidecars);
            } else {
                live.left_out.extend(sidecars);
                live.stamps.extend(stamps);
                if !matches!(archive, Archive::Kept) {
                    live.wal_reads.extend(wal_read);
                }
            }
            live.by_path.insert(db, Prepared { archive });
        }
        Ok(live)
    }

    /// Once every read is done: the stamps the next save compares with for the `-wal`s
    /// this export read, where only their ctime moved. SQLite, run as root, gives the
    /// `-wal` it opens to the database's owner (an fchown to the owner it already has),
    /// which sets the ctime and nothing else; left in, every later save would take the
    /// database for changed and read all of it again. A write between the first stamp and
    /// now moves the size or the mtime, and then the first stamp stays, so the write is
    /// seen next time.
    pub fn settle_wal_stamps(&self, entries: &mut HashMap<Vec<u8>, Stamp>) {
        for (wal, key, before) in &self.wal_reads {
            let Some(now) = stamp_at(wal) else {
                continue;
            };
            let only_ctime_moved = Stamp {
                ctime_ns: before.ctime_ns,
                ..now
            } == *before;
            if only_ctime_moved {
                entries.insert(key.clone(), now);
            }
        }
    }

    /// What to archive for the entry at `path`, when it is a database.
    pub fn get(&self, path: &Path) -> Option<&Prepared> {
        self.by_path.get(path)
    }

    /// Whether `path` is a sidecar of a database archived as a copy or kept: left out.
    pub fn is_left_out(&self, path: &Path) -> bool {
        self.left_out.contains(path)
    }

    /// Whether `path` is a sidecar of a database archived as it is: written whatever the
    /// excludes and the parent say.
    pub fn is_with_as_is(&self, path: &Path) -> bool {
        self.with_as_is.contains(path)
    }

    /// The runtime manifest's `sqlite_check`.
    pub fn verdict(&self) -> String {
        SqliteCheck {
            damaged: self.damaged.iter().map(|(d, _)| d.clone()).collect(),
            checked: self.copied,
            unchanged: self.unchanged,
        }
        .render()
    }
}

/// What came of reading one database (copying it, or its page image).
pub enum Tried<T> {
    /// It worked.
    Done(T),
    /// SQLite found the database damaged: it is archived as it is.
    Damaged(String),
    /// It went away meanwhile: nothing to archive.
    Gone,
}

/// Runs `attempt` on the database `db`, trying again ([`TRIES`] in all, with growing
/// pauses) while it fails for a reason other than damage; `Err` holds the last failure.
fn retried<T>(
    db: &Path,
    mut attempt: impl FnMut() -> Result<T, CopyFailure>,
) -> Result<Tried<T>, CopyFailure> {
    let mut pause = FIRST_BACKOFF;
    let mut tries = 0;
    loop {
        tries += 1;
        let failure = match attempt() {
            Ok(done) => return Ok(Tried::Done(done)),
            Err(failure) => failure,
        };
        if fs::symlink_metadata(db).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Ok(Tried::Gone);
        }
        match failure {
            CopyFailure::Damaged(why) => return Ok(Tried::Damaged(why)),
            failure if tries >= TRIES => return Err(failure),
            _ => {
                std::thread::sleep(pause);
                pause *= 2;
            }
        }
    }
}

/// A copy (and the journal SQLite may have left beside it), gone.
/// A copy that failed for want of room, said as such: SQLite reports a write that found the
/// disk full as "disk I/O error" from some of its paths (its check of the copy does), so a
/// failure where `dir` has less room than the database needs is taken for a full disk.
fn out_of_room(failure: CopyFailure, dir: &Path, db_len: u64) -> CopyFailure {
    let CopyFailure::Other(said) = failure else {
        return failure;
    };
    match nix::sys::statvfs::statvfs(dir) {
        Ok(fs) => {
            let free = fs.blocks_available().saturating_mul(fs.fragment_size());
            if free < db_len.saturating_add(1 << 20) {
                CopyFailure::Full(format!(
                    "{said}; {free} bytes are free where the copy is made, for a database of {db_len}"
                ))
            } else {
                CopyFailure::Other(said)
            }
        }
        Err(_) => CopyFailure::Other(said),
    }
}

fn remove_copy(copy: &Path) {
    let _ = fs::remove_file(copy);
    for suffix in sqlite::SIDECARS {
        let _ = fs::remove_file(sqlite::sidecar(copy, suffix));
    }
}

/// Reads the page image of the database `db` (data-root-relative `key`) for the walk:
/// `attempt` opens it and makes its first pass, tried again as a copy is. Whatever stops
/// it fails the export naming the database: by now its listing names its blocks.
pub fn read_pages<T>(
    key: &[u8],
    db: &Path,
    mut attempt: impl FnMut(sqlite::PageImage) -> Result<T, CopyFailure>,
) -> Result<T> {
    let tried = retried(db, || {
        sqlite::PageImage::open(db, HOLD_WAIT).and_then(&mut attempt)
    });
    match tried {
        Ok(Tried::Done(done)) => Ok(done),
        Ok(Tried::Gone) => Err(anyhow!(
            "the database {} went away while the save ran; save again",
            shown(key)
        )),
        Ok(Tried::Damaged(why)) => Err(db_failed("read", key, db, &CopyFailure::Damaged(why))),
        Err(failure) => Err(db_failed("read", key, db, &failure)),
    }
}

/// The export's error for a database that could not be copied or read (`verb`): which,
/// why, what to do.
fn db_failed(verb: &str, key: &[u8], db: &Path, failure: &CopyFailure) -> anyhow::Error {
    let name = shown(key);
    let said = failure.said();
    let what = format!("cannot {verb} the database {name} for the backup ({TRIES} tries)");
    match failure {
        CopyFailure::Held(_) => {
            // Any of the programs that have it open may be the one.
            let holders = sqlite::holders(db, 3);
            let who = if holders.is_empty() {
                "another program".to_string()
            } else {
                holders.join(" or ")
            };
            anyhow!(
                "{what}: it is locked by {who} ({said}). A program that sets SQLite's \
                 `PRAGMA locking_mode=EXCLUSIVE` holds it for as long as it runs: close it, \
                 then save again"
            )
        }
        CopyFailure::Full(_) => {
            anyhow!("{what}: the disk is full ({said}); free space in the box, then save again")
        }
        CopyFailure::Damaged(_) | CopyFailure::Other(_) => {
            anyhow!("{what}: {said}; save again once that is fixed")
        }
    }
}
