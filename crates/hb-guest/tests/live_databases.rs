//! The box's databases in an export, with real SQLite writers: never a silent loss of
//! committed rows (issue 39). A copy that fails for an ordinary reason (a writer holding
//! the file, a full disk) fails the export naming the database and why; a damaged database
//! is archived as it is with its `-wal`, whose rows a restore then has; and the next link of
//! a chain copies it again rather than keeping it from its parent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod export_import_support;

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use export_import_support::data_root;
use hb_guest::archive::export::{ChainOptions, ExportOptions, ExportSummary, export};
use hb_guest::archive::import::import;
use hb_guest::archive::incremental::{self, next_path};

const HERMES_DB: &str = "home/agent/.hermes/state.db";
const CODEX_DB: &str = "home/agent/.codex/logs.db";

/// A Python process that opens `db` with `journal_mode=WAL`, `wal_autocheckpoint=0` and
/// `locking_mode=EXCLUSIVE`, commits `rows` rows one by one, says `ready`, and holds its
/// connection until its stdin closes. Without python3: `None` (a failure under CI=true).
struct ExclusiveWriter {
    child: Child,
}

const EXCLUSIVE_WRITER: &str = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA locking_mode=EXCLUSIVE")
assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
for i in range(int(sys.argv[2])):
    db.execute("INSERT INTO t(v) VALUES (?)", ("row %d %s" % (i, "x" * 200),))
print("ready", flush=True)
sys.stdin.read()
"#;

impl ExclusiveWriter {
    fn start(db: &Path, rows: u32) -> Option<Self> {
        let python = common::require_tool("python3")?;
        let mut child = Command::new(python)
            .arg("-c")
            .arg(EXCLUSIVE_WRITER)
            .arg(db)
            .arg(rows.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the writer did not commit its rows");
        Some(ExclusiveWriter { child })
    }
}

impl Drop for ExclusiveWriter {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A data root in `dir` with Hermes's home made: the root, and where Hermes's database goes.
fn hermes_root(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("src");
    data_root(&src);
    let db = src.join(HERMES_DB);
    fs::create_dir_all(db.parent().unwrap()).unwrap();
    (src, db)
}

/// `hb export --root root --out out`, as box runs it: (success, stderr).
fn hb_export(root: &Path, out: &Path) -> (bool, String) {
    let e = Command::new(common::hb_bin())
        .args(["export", "--root"])
        .arg(root)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    (
        e.status.success(),
        String::from_utf8_lossy(&e.stderr).into_owned(),
    )
}

fn rows_in(db: &Path, table: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{}: {e}", db.display()))
}

/// A writer holding its database exclusively through the export: the export has all 500
/// committed rows after a restore, or it fails naming the database and what to do. (The
/// online backup cannot read such a database at all, so today it fails; before issue 39
/// its main file went alone, without the rows in its `-wal`.)
#[test]
fn an_exclusive_writer_through_an_export_loses_no_row() {
    let t = tempfile::tempdir().unwrap();
    let (src, db) = hermes_root(t.path());
    let Some(writer) = ExclusiveWriter::start(&db, 500) else {
        return;
    };
    let pid = writer.child.id();
    let out = t.path().join("out");
    let (ok, err) = hb_export(&src, &out);
    drop(writer);
    if ok {
        let dst = t.path().join("dst");
        fs::create_dir(&dst).unwrap();
        import(&dst, &out).unwrap();
        assert_eq!(rows_in(&dst.join(HERMES_DB), "t"), 500);
        return;
    }
    assert!(
        err.contains(&format!("cannot copy the database {HERMES_DB}"))
            && err.contains("it is locked by ")
            && err.contains(&format!(" (pid {pid})"))
            && err.contains("locking_mode=EXCLUSIVE")
            && err.contains("close it, then save again"),
        "{err}"
    );
    assert!(!out.exists(), "a failed export leaves no plaintext behind");
}

/// A copy that cannot be written (the disk under the export is full) fails the export
/// naming the database and the full disk, after its tries; nothing is archived as it is.
#[test]
fn a_full_disk_fails_the_export_naming_the_database() {
    if !nix::unistd::Uid::effective().is_root() {
        let why = "the full-disk export needs root, for a small tmpfs in a mount namespace";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (src, db) = hermes_root(t.path());
    make_db(&db, 1000);
    let small = t.path().join("small");
    fs::create_dir(&small).unwrap();
    let run = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs -o size=64k tmpfs \"$1\" || exit 99; exec \"$2\" export --root \"$3\" --out \"$1/out\"",
            "sh",
        ])
        .arg(&small)
        .arg(common::hb_bin())
        .arg(&src)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_ne!(run.status.code(), Some(99), "no tmpfs: {err}");
    assert!(!run.status.success(), "{err}");
    assert!(
        err.contains(&format!("cannot copy the database {HERMES_DB}"))
            && err.contains("the disk is full")
            && err.contains("free space in the box"),
        "{err}"
    );
    assert!(!err.contains("saved as it is"), "{err}");
}

/// Makes a WAL database at `path` whose `rows` rows are all checkpointed into its file.
fn make_db(path: &Path, rows: u32) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; CREATE TABLE t(v TEXT);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < {rows})
         INSERT INTO t SELECT printf('%0200d', i) FROM n;
         PRAGMA wal_checkpoint(TRUNCATE);"
    ))
    .unwrap();
}

/// A Codex database damaged in its file (a page of `t`) while its writer holds it open
/// with 500 more rows committed only to its `-wal` (table `recent`): Codex's databases are
/// restored as they are, so a restore shows whether those rows came along.
fn damaged_codex_db_with_rows_in_its_wal(root: &Path) -> rusqlite::Connection {
    use std::os::unix::fs::FileExt;
    let db = root.join(CODEX_DB);
    fs::create_dir_all(db.parent().unwrap()).unwrap();
    make_db(&db, 2000);
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer
        .execute_batch(
            "PRAGMA wal_autocheckpoint=0; CREATE TABLE recent(v TEXT);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 500)
             INSERT INTO recent SELECT printf('recent %d', i) FROM n;",
        )
        .unwrap();
    let f = fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.write_all_at(&[0xA5; 4096], 4 * 4096).unwrap();
    writer
}

fn exported(root: &Path, out: &Path, chain: Option<ChainOptions>) -> (ExportSummary, Vec<String>) {
    let warnings = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let w = warnings.clone();
    let mut opts = ExportOptions::new(root, out, 1 << 20);
    opts.chain = chain;
    let summary = export(&opts, Box::new(move |m| w.borrow_mut().push(m.to_string()))).unwrap();
    let warnings = warnings.borrow().clone();
    (summary, warnings)
}

fn sqlite_check(root: &Path) -> String {
    let text = fs::read_to_string(root.join(box_proto::layout::RUNTIME_MANIFEST)).unwrap();
    let manifest = box_proto::RuntimeManifest::parse(&text).unwrap();
    manifest
        .get(box_proto::manifest::SQLITE_CHECK_KEY)
        .unwrap_or("(none)")
        .to_string()
}

/// A damaged database is archived as it is with its `-wal`: the restore has the rows
/// committed since its last checkpoint (before issue 39 it had none of them).
#[test]
fn a_damaged_database_is_restored_with_the_rows_of_its_wal() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    data_root(&src);
    let writer = damaged_codex_db_with_rows_in_its_wal(&src);
    let out = t.path().join("out");
    let (_, warnings) = exported(&src, &out, None);
    assert!(
        warnings.iter().any(|w| w.contains(&format!(
            "the database {CODEX_DB} fails SQLite's quick_check"
        ))),
        "{warnings:?}"
    );
    assert!(sqlite_check(&src).starts_with(&format!("damaged {CODEX_DB}")));
    drop(writer);
    let dst = t.path().join("dst");
    fs::create_dir(&dst).unwrap();
    import(&dst, &out).unwrap();
    assert_eq!(rows_in(&dst.join(CODEX_DB), "recent"), 500);
}

/// One chain-mode export of `root` against the committed snapshot of the backup `parent`;
/// commits its own snapshot under its digest.
fn link(root: &Path, out: &Path, parent: Option<&str>) -> (String, Vec<String>) {
    let current = snapshot_path(root);
    let parent = parent.and_then(|d| incremental::parent_for(&current, d, 24).unwrap().0);
    let (summary, warnings) = exported(
        root,
        out,
        Some(ChainOptions {
            parent,
            record: next_path(&current),
        }),
    );
    let digest = hex::encode(summary.index.total_sha256.unwrap());
    incremental::commit(&current, &digest).unwrap();
    (digest, warnings)
}

fn snapshot_path(root: &Path) -> PathBuf {
    root.join(box_proto::layout::BACKUP_SNAPSHOT)
        .join("current")
}

/// The next link after one that archived a database as it is copies it again, and so
/// checks it again and says it is damaged, rather than keeping the parent's and reporting
/// `ok`; its `-wal` is in that link too, though unchanged since the parent.
#[test]
fn a_database_archived_as_it_is_is_copied_again_by_the_next_link() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    data_root(&src);
    let _writer = damaged_codex_db_with_rows_in_its_wal(&src);
    let (first, _) = link(&src, &t.path().join("l0"), None);
    assert!(sqlite_check(&src).starts_with(&format!("damaged {CODEX_DB}")));

    let l1 = t.path().join("l1");
    let (_, warnings) = link(&src, &l1, Some(&first));
    assert!(
        sqlite_check(&src).starts_with(&format!("damaged {CODEX_DB}")),
        "{} {warnings:?}",
        sqlite_check(&src)
    );
    let members = common::archived(&l1);
    assert_eq!(
        members.get(&format!("./{CODEX_DB}")),
        Some(&fs::read(src.join(CODEX_DB)).unwrap())
    );
    assert!(
        members.contains_key(&format!("./{CODEX_DB}-wal")),
        "{:?}",
        members.keys()
    );
}

/// A database copied and checked is kept unread by the next link; but a snapshot written
/// by an hb from before issue 39 (version 1, which recorded a database archived as it is
/// like a copied one) vouches for no database: the next link copies them all again.
#[test]
fn a_snapshot_of_an_older_hb_keeps_no_database() {
    let t = tempfile::tempdir().unwrap();
    let (src, db) = hermes_root(t.path());
    make_db(&db, 100);
    let (first, _) = link(&src, &t.path().join("l0"), None);
    assert_eq!(sqlite_check(&src), "ok");
    let (second, _) = link(&src, &t.path().join("l1"), Some(&first));
    assert_eq!(
        sqlite_check(&src),
        "ok (0 checked, 1 unchanged since the last save)"
    );

    let current = snapshot_path(&src);
    let text = fs::read_to_string(&current).unwrap();
    let older = text.replacen("box-snapshot 3 ", "box-snapshot 1 ", 1);
    assert_ne!(older, text, "{text}");
    fs::write(&current, older).unwrap();
    let l2 = t.path().join("l2");
    link(&src, &l2, Some(&second));
    assert_eq!(sqlite_check(&src), "ok");
    assert!(common::archived(&l2).contains_key(&format!("./{HERMES_DB}")));
}
