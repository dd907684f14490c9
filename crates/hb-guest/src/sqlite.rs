//! The SQLite databases the box's services and agents keep, made self-contained for a
//! backup and checked on both ends of one.
//!
//! * [`integrity_check`]: `PRAGMA integrity_check`, with the `-wal` as SQLite itself reads
//!   it. `hb import` runs it on the restored tree before the swap and refuses a damaged one
//!   of the box's services (Codex's are restored as they are, and said).
//! * [`snapshot`]: a consistent copy of a database while its writers go on (SQLite's online
//!   backup), which `hb export` archives in place of the live file; [`quick_check`] runs on
//!   that copy (a save checks what changed; a restore checks everything, fully). Either says
//!   why it failed ([`CopyFailure`]): damage, or a reason a later try may not meet.
//!
//! Only the databases the box's software owns are checked: a `*.db` in a workspace is the
//! user's data, restored as it is.

use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// `PRAGMA quick_check` of a database no one else has open (a [`snapshot`]): the checks of
/// [`integrity_check`] less the index contents, in one pass over the pages.
pub fn quick_check(path: &Path) -> Result<(), CopyFailure> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| CopyFailure::of(&e, "cannot open the copy"))?;
    let rows: Vec<String> = conn
        .prepare("PRAGMA quick_check(20)")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(|e| CopyFailure::of(&e, "cannot check the copy"))?;
    if rows.len() == 1 && rows[0] == "ok" {
        return Ok(());
    }
    Err(CopyFailure::Damaged(
        rows.into_iter().take(3).collect::<Vec<_>>().join("; "),
    ))
}

/// Why a database could not be copied, or its copy not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyFailure {
    /// The database itself is damaged: SQLite says so as it reads it (corrupt, not a
    /// database), or the copy fails its check. Trying again cannot help.
    Damaged(String),
    /// Another program holds it: SQLite stayed busy (or locked) for the whole wait.
    Held(String),
    /// The disk the copy is written to is full.
    Full(String),
    /// Anything else (an I/O error, too many open files): it may work when tried again.
    Other(String),
}

impl CopyFailure {
    /// What SQLite's error `e` (met while doing `what`) says about the database.
    fn of(e: &rusqlite::Error, what: &str) -> Self {
        use rusqlite::ErrorCode as Code;
        let said = format!("{what}: {e}");
        match e.sqlite_error_code() {
            Some(Code::DatabaseCorrupt | Code::NotADatabase) => CopyFailure::Damaged(said),
            Some(Code::DatabaseBusy | Code::DatabaseLocked) => CopyFailure::Held(said),
            Some(Code::DiskFull) => CopyFailure::Full(said),
            _ => CopyFailure::Other(said),
        }
    }

    /// What SQLite said.
    pub fn said(&self) -> &str {
        match self {
            CopyFailure::Damaged(s)
            | CopyFailure::Held(s)
            | CopyFailure::Full(s)
            | CopyFailure::Other(s) => s,
        }
    }
}

/// The sidecars SQLite keeps beside a database.
pub const SIDECARS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// `path` with `suffix` after its file name (`state.db` → `state.db-wal`).
pub fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A consistent copy of the database at `from`, as of now, written to `to` (a new file):
/// SQLite's online backup in one step, so inside one read transaction. A writer in WAL mode
/// (Hermes, Codex) goes on writing while it runs, and the copy holds exactly the
/// transactions committed when it began, never a torn page; a writer of a rollback-journal
/// database, or one that holds the file for itself (`PRAGMA locking_mode=EXCLUSIVE`),
/// makes it wait, `wait` at most ([`CopyFailure::Held`]). The sidecars our connection may
/// create (`-wal`, `-shm`) are given the database's owner, so its own software can still
/// open it.
pub fn snapshot(from: &Path, to: &Path, wait: Duration) -> Result<(), CopyFailure> {
    with_sidecars_owned(from, || {
        let src = Connection::open_with_flags(
            from,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| CopyFailure::of(&e, "cannot open it"))?;
        src.busy_timeout(wait)
            .map_err(|e| CopyFailure::of(&e, "cannot open it"))?;
        // Our own new file: whatever goes wrong with it says nothing of the database.
        let mut dst = Connection::open(to).map_err(|e| {
            let said = format!("cannot create the copy {}: {e}", to.display());
            match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::DiskFull) => CopyFailure::Full(said),
                _ => CopyFailure::Other(said),
            }
        })?;
        let backup = rusqlite::backup::Backup::new(&src, &mut dst)
            .map_err(|e| CopyFailure::of(&e, "cannot start the copy"))?;
        let started = std::time::Instant::now();
        loop {
            match backup.step(-1) {
                Ok(rusqlite::backup::StepResult::Done) => return Ok(()),
                Ok(_) if started.elapsed() >= wait => {
                    return Err(CopyFailure::Held(format!(
                        "still locked after {} s",
                        wait.as_secs_f32()
                    )));
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(CopyFailure::of(&e, "the copy failed")),
            }
        }
    })
}

/// Runs `open` (which opens the database at `db`), then gives the sidecars it created
/// (`-wal`, `-shm`: SQLite makes them as root) the database's owner, so its own software
/// can still open it.
fn with_sidecars_owned<T>(
    db: &Path,
    open: impl FnOnce() -> Result<T, CopyFailure>,
) -> Result<T, CopyFailure> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::symlink_metadata(db)
        .map_err(|e| CopyFailure::Other(format!("cannot read it: {e}")))?;
    let before: Vec<bool> = SIDECARS[..2]
        .iter()
        .map(|s| sidecar(db, s).exists())
        .collect();
    let opened = open();
    for (suffix, existed) in SIDECARS[..2].iter().zip(before) {
        let side = sidecar(db, suffix);
        if !existed && std::fs::symlink_metadata(&side).is_ok() {
            let _ = std::os::unix::fs::lchown(&side, Some(owner.uid()), Some(owner.gid()));
        }
    }
    opened
}

/// The processes that have the file at `path` open, as `name (pid N)`, at most `max`: who
/// holds a database a copy could not read. From /proc; whatever cannot be read is passed
/// over (hb runs as root in a guest, so little is).
pub fn holders(path: &Path, max: usize) -> Vec<String> {
    let Ok(target) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in procs.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        if !fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == target))
        {
            continue;
        }
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let name = box_proto::escape::shown(name.trim_end().as_bytes());
        found.push(format!("{name} (pid {pid})"));
        if found.len() == max {
            break;
        }
    }
    found
}

/// A live database's page image, read inside one read transaction that stays open for as
/// long as this lives: every read sees the same committed state, however long it takes and
/// whatever writers commit meanwhile (in WAL mode they go on; a rollback-journal writer
/// waits for it to end). Read with SQLite's `sqlite_dbpage` table, so nothing is copied to
/// scratch space: the file it stands for is the page image, `pages × page_size` bytes.
/// The connection is read-only; the sidecars it may create get the database's owner.
pub struct PageImage {
    conn: Connection,
    page_size: u64,
    pages: u64,
}

impl PageImage {
    /// Opens `path` and starts the read transaction (waiting `wait` at most for a writer
    /// that holds the database).
    pub fn open(path: &Path, wait: Duration) -> Result<Self, CopyFailure> {
        with_sidecars_owned(path, || {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| CopyFailure::of(&e, "cannot open it"))?;
            conn.busy_timeout(wait)
                .map_err(|e| CopyFailure::of(&e, "cannot open it"))?;
            // The database file's pages through a memory map, not one pread per page: a
            // 256 MiB scan took half the time (0.20 s against 0.40 s, release, this
            // machine loaded). SQLite caps the map (2 GiB in its default build) and reads
            // the rest, and every page the WAL holds, as before. Advice only: a build
            // without mmap answers 0 and nothing changes.
            conn.query_row("PRAGMA mmap_size = 1099511627776", [], |_| Ok(()))
                .map_err(|e| CopyFailure::of(&e, "cannot open it"))?;
            conn.execute_batch("BEGIN")
                .map_err(|e| CopyFailure::of(&e, "cannot start a read transaction"))?;
            // The first read takes the snapshot every later read of this transaction sees.
            let pragma = |name: &str| -> Result<u64, CopyFailure> {
                conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
                    .map_err(|e| CopyFailure::of(&e, &format!("cannot read its {name}")))
                    .and_then(|n| {
                        u64::try_from(n).map_err(|_| CopyFailure::Damaged(format!("{name} {n}")))
                    })
            };
            let pages = pragma("page_count")?;
            let page_size = pragma("page_size")?;
            if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
                return Err(CopyFailure::Damaged(format!("a page size of {page_size}")));
            }
            Ok(PageImage {
                conn,
                page_size,
                pages,
            })
        })
    }

    /// The size of the file the page image stands for.
    pub fn size(&self) -> u64 {
        self.pages * self.page_size
    }

    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Every page in order, handed to `each` (which may stop it with an error): one scan
    /// of `sqlite_dbpage`.
    pub fn scan(
        &self,
        each: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<(), CopyFailure> {
        let failed = |e: rusqlite::Error| CopyFailure::of(&e, "cannot read its pages");
        let mut stmt = self
            .conn
            .prepare("SELECT pgno, data FROM sqlite_dbpage")
            .map_err(failed)?;
        let mut rows = stmt.query([]).map_err(failed)?;
        let mut next = 1u64;
        while let Some(row) = rows.next().map_err(failed)? {
            let pgno: i64 = row.get(0).map_err(failed)?;
            let data = row
                .get_ref(1)
                .map_err(failed)?
                .as_blob()
                .map_err(|e| CopyFailure::Other(format!("page {pgno} is not a blob: {e}")))?;
            self.check_page(pgno, next, data)?;
            each(data).map_err(|e| CopyFailure::Other(e.to_string()))?;
            next += 1;
        }
        if next != self.pages + 1 {
            return Err(CopyFailure::Other(format!(
                "read {} of its {} pages",
                next - 1,
                self.pages
            )));
        }
        Ok(())
    }

    /// The bytes at `offset` (a multiple of the page size) into `buf` (whole pages), from
    /// the same read transaction as every other read.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), CopyFailure> {
        let failed = |e: rusqlite::Error| CopyFailure::of(&e, "cannot read its pages");
        let ps = self.page_size as usize;
        if !offset.is_multiple_of(self.page_size) || !buf.len().is_multiple_of(ps) {
            return Err(CopyFailure::Other(format!(
                "a read of {} bytes at {offset} is not of whole pages",
                buf.len()
            )));
        }
        let mut stmt = self
            .conn
            .prepare_cached("SELECT data FROM sqlite_dbpage WHERE pgno = ?1")
            .map_err(failed)?;
        for (n, page) in buf.chunks_mut(ps).enumerate() {
            let pgno = offset / self.page_size + n as u64 + 1;
            let pgno_sql =
                i64::try_from(pgno).map_err(|_| CopyFailure::Other("page number".into()))?;
            stmt.query_row([pgno_sql], |r| {
                let data = r.get_ref(0)?.as_blob()?;
                Ok(self
                    .check_page(pgno_sql, pgno, data)
                    .map(|()| page.copy_from_slice(data)))
            })
            .map_err(failed)??;
        }
        Ok(())
    }

    fn check_page(&self, pgno: i64, expected: u64, data: &[u8]) -> Result<(), CopyFailure> {
        if u64::try_from(pgno).ok() != Some(expected) || data.len() as u64 != self.page_size {
            return Err(CopyFailure::Other(format!(
                "sqlite_dbpage gave page {pgno} of {} bytes where page {expected} of {} was due",
                data.len(),
                self.page_size
            )));
        }
        Ok(())
    }

    /// Ends the read transaction.
    pub fn finish(self) -> Result<(), CopyFailure> {
        self.conn
            .execute_batch("COMMIT")
            .map_err(|e| CopyFailure::of(&e, "cannot end the read transaction"))
    }
}
