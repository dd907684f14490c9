//! Large files in blocks (issue 41), the writer's side: `hb export --block-files-above`
//! archives a large file as `NAME.box-blocks/` (1 MiB blocks and an index), a link of a
//! chain holds only the blocks that changed, and the stock restore (`zstd -d | tar -x -g
//! /dev/null` per link, then `cat NAME.box-blocks/b* > NAME`) gives the exact bytes at
//! every link. A live database of the box's software is read as its page image in one read
//! transaction while its writer goes on. Needs GNU tar and zstd (and python3 for the
//! writer); without them: SKIPPED (a failure under CI=true).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod export_import_support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::{FileExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use box_proto::archive::blocks::{BlockIndex, DEFAULT_BLOCK_SIZE};
use box_proto::archive::incremental::{Code, Dumpdir};
use box_proto::archive::part_hash::{PartHash, PartHashAlgo};
use export_import_support::data_root;
use hb_guest::archive::export::{ExportOptions, ExportSummary, export};

/// Small enough for quick tests: every file of 256 KiB or more goes in blocks.
const THRESHOLD: u64 = 256 << 10;
const MIB: usize = 1 << 20;
const WS: &str = "home/agent/workspace";
const HERMES_DB: &str = "home/agent/.hermes/state.db";

fn tools() -> bool {
    let zstd = Command::new("zstd").arg("--version").output().is_ok();
    if !zstd {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "zstd is needed (scripts/setup.sh installs it)"
        );
        println!("SKIPPED: zstd not found");
    }
    zstd && export_import_support::gnu_tar()
}

/// One chain-mode export of `src` into `out` with the test's threshold, on the committed
/// snapshot when `parent` is its digest; then commits this export's snapshot.
fn link(src: &Path, out: &Path, parent: Option<&str>) -> (ExportSummary, String) {
    export_import_support::chain_link(src, out, parent, 1 << 30, Some(THRESHOLD))
}

fn compressed(out: &Path, summary: &ExportSummary) -> Vec<u8> {
    let mut all = Vec::new();
    for part in &summary.index.parts {
        all.extend(fs::read(out.join(&part.name)).unwrap());
    }
    all
}

/// One member of a link: its type flag, mode and data.
struct Member {
    kind: u8,
    mode: u32,
    data: Vec<u8>,
}

/// Every member of a link by name (`./…`), read with the tar crate.
fn members(out: &Path, summary: &ExportSummary) -> BTreeMap<String, Member> {
    let tar = zstd::decode_all(compressed(out, summary).as_slice()).unwrap();
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut found = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
        let (kind, mode) = (
            entry.header().entry_type().as_byte(),
            entry.header().mode().unwrap(),
        );
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        found.insert(name, Member { kind, mode, data });
    }
    found
}

/// The names a directory member's dumpdir lists with `code`.
fn listed(members: &BTreeMap<String, Member>, dir: &str, code: Code) -> Vec<String> {
    let member = &members[&format!("./{dir}/")];
    assert_eq!(member.kind, b'D', "{dir} has a dumpdir");
    Dumpdir::parse(&member.data)
        .unwrap()
        .entries()
        .iter()
        .filter(|(c, _)| *c == code)
        .map(|(_, n)| String::from_utf8(n.clone()).unwrap())
        .collect()
}

/// The members of a link under `dir/` (names relative to it).
fn written_in(members: &BTreeMap<String, Member>, dir: &str) -> Vec<String> {
    let prefix = format!("./{dir}/");
    members
        .keys()
        .filter_map(|k| k.strip_prefix(&prefix))
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

/// The README's loop for one link into `target`.
fn stock_apply(out: &Path, summary: &ExportSummary, target: &Path) {
    export_import_support::tar_g_apply(&compressed(out, summary), target);
}

/// The documented stock command, run by the shell in the file's directory: what it gives.
fn stock_cat(target: &Path, file: &str) -> Vec<u8> {
    let path = target.join(file);
    let (dir, name) = (path.parent().unwrap(), path.file_name().unwrap());
    let name = name.to_str().unwrap();
    let cmd = box_proto::archive::blocks::STOCK_COMMAND.replace("NAME", name);
    let st = Command::new("sh")
        .arg("-c")
        .arg(&cmd)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "{cmd}");
    let bytes = fs::read(&path).unwrap();
    fs::remove_file(&path).unwrap();
    bytes
}

/// Pseudo-random bytes (incompressible, so a link's size says what it holds).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The index a link wrote for `file`, checked against the bytes it stands for.
fn index_of(members: &BTreeMap<String, Member>, file: &str, bytes: &[u8]) -> BlockIndex {
    let index = &members[&format!("./{file}.box-blocks/index")];
    assert_eq!(index.mode & 0o7777, 0o600);
    let index = BlockIndex::parse(&index.data).unwrap();
    assert_eq!(index.size, bytes.len() as u64);
    assert_eq!(index.block_size, DEFAULT_BLOCK_SIZE);
    assert_eq!(index.file_hash, PartHash::of(PartHashAlgo::Xxh3_128, bytes));
    for (i, block) in bytes.chunks(MIB).enumerate() {
        assert_eq!(
            index.blocks[i],
            PartHash::of(PartHashAlgo::Xxh3_128, block),
            "block {i}"
        );
    }
    index
}

#[test]
fn a_large_file_is_kept_in_blocks_and_each_link_holds_only_its_changed_blocks() {
    if !tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let w = data_root(&src);
    let big_rel = format!("{WS}/big.bin");
    let big = src.join(&big_rel);
    let mut bytes = noise(3 * MIB + MIB / 2, 1);
    fs::write(&big, &bytes).unwrap();
    fs::set_permissions(&big, fs::Permissions::from_mode(0o640)).unwrap();
    let small = noise(100_000, 2);
    fs::write(w.join("small.bin"), &small).unwrap();
    let restored = t.path().join("restored");
    fs::create_dir(&restored).unwrap();
    let dir = format!("{big_rel}.box-blocks");

    // The full link: the block directory instead of the file, every block in it.
    let l0 = t.path().join("l0");
    let (full, d0) = link(&src, &l0, None);
    let m = members(&l0, &full);
    assert!(
        !m.contains_key(&format!("./{big_rel}")),
        "the file is not a member"
    );
    assert!(
        m.contains_key(&format!("./{WS}/small.bin")),
        "a small file stays whole"
    );
    assert_eq!(m[&format!("./{dir}/")].mode & 0o7777, 0o700);
    assert_eq!(listed(&m, WS, Code::Directory), ["big.bin.box-blocks"]);
    let all = ["b00000000", "b00000001", "b00000002", "b00000003", "index"];
    assert_eq!(written_in(&m, &dir), all);
    assert_eq!(listed(&m, &dir, Code::Included), all);
    assert_eq!(m[&format!("./{dir}/b00000003")].data.len(), MIB / 2);
    assert_eq!(m[&format!("./{dir}/b00000001")].mode & 0o7777, 0o600);
    let index = index_of(&m, &big_rel, &bytes);
    assert_eq!(index.mode, 0o640, "the index keeps the file's mode");
    stock_apply(&l0, &full, &restored);
    assert_eq!(stock_cat(&restored, &big_rel), bytes, "the full link");

    // One byte changed: its block and the index, nothing else.
    bytes[MIB + 12_345] ^= 0xff;
    big_file(&big)
        .write_all_at(&bytes[MIB + 12_345..MIB + 12_346], (MIB + 12_345) as u64)
        .unwrap();
    let l1 = t.path().join("l1");
    let (first, d1) = link(&src, &l1, Some(&d0));
    let m = members(&l1, &first);
    assert_eq!(written_in(&m, &dir), ["b00000001", "index"]);
    assert_eq!(
        listed(&m, &dir, Code::Unchanged),
        ["b00000000", "b00000002", "b00000003"]
    );
    assert!(
        first.index.total_size < (MIB + MIB / 4) as u64,
        "one block, not the file: {} bytes",
        first.index.total_size
    );
    index_of(&m, &big_rel, &bytes);
    stock_apply(&l1, &first, &restored);
    assert_eq!(
        stock_cat(&restored, &big_rel),
        bytes,
        "after a changed byte"
    );

    // Appended: the grown last block and a new one.
    let tail = noise(MIB, 3);
    fs::OpenOptions::new()
        .append(true)
        .open(&big)
        .unwrap()
        .write_all(&tail)
        .unwrap();
    bytes.extend_from_slice(&tail);
    let l2 = t.path().join("l2");
    let (second, d2) = link(&src, &l2, Some(&d1));
    let m = members(&l2, &second);
    assert_eq!(written_in(&m, &dir), ["b00000003", "b00000004", "index"]);
    index_of(&m, &big_rel, &bytes);
    stock_apply(&l2, &second, &restored);
    assert_eq!(stock_cat(&restored, &big_rel), bytes, "after an append");

    // Truncated into its second block: that block shorter, the ones past the end unlisted
    // (tar -g purges them).
    bytes.truncate(MIB + MIB / 2);
    big_file(&big).set_len(bytes.len() as u64).unwrap();
    let l3 = t.path().join("l3");
    let (third, d3) = link(&src, &l3, Some(&d2));
    let m = members(&l3, &third);
    assert_eq!(written_in(&m, &dir), ["b00000001", "index"]);
    assert_eq!(listed(&m, &dir, Code::Unchanged), ["b00000000"]);
    stock_apply(&l3, &third, &restored);
    let mut left: Vec<String> = fs::read_dir(restored.join(&dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["b00000000", "b00000001", "index"]);
    assert_eq!(stock_cat(&restored, &big_rel), bytes, "after a truncation");

    // Unchanged: the block directory all kept, not a block read or written.
    let l4 = t.path().join("l4");
    let (fourth, _) = link(&src, &l4, Some(&d3));
    let m = members(&l4, &fourth);
    assert!(written_in(&m, &dir).is_empty());
    assert_eq!(
        listed(&m, &dir, Code::Unchanged),
        ["b00000000", "b00000001", "index"]
    );
    stock_apply(&l4, &fourth, &restored);
    assert_eq!(
        stock_cat(&restored, &big_rel),
        bytes,
        "after an unchanged link"
    );
    assert_eq!(
        fs::read(restored.join(WS).join("small.bin")).unwrap(),
        small
    );
}

fn big_file(path: &Path) -> fs::File {
    fs::OpenOptions::new().write(true).open(path).unwrap()
}

/// Without the flag (and with 0) an export is what it was: the file whole.
#[test]
fn without_a_threshold_nothing_is_blocked() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let w = data_root(&src);
    fs::write(w.join("big.bin"), noise(2 * MIB, 4)).unwrap();
    let out = t.path().join("out");
    let summary = export(&ExportOptions::new(&src, &out, 1 << 30), Box::new(|_| {})).unwrap();
    let m = members(&out, &summary);
    assert_eq!(m[&format!("./{WS}/big.bin")].data.len(), 2 * MIB);
    assert!(!m.keys().any(|k| k.contains(".box-blocks")));
}

/// Files that stay whole however large: more names than one, holes, a name with no room
/// for the suffix, a sibling of the block directory's name. And a user's directory that a
/// restore would take for a block directory is refused, naming it.
#[test]
fn files_that_cannot_be_blocked_stay_whole() {
    if !tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let w = data_root(&src);
    let data = noise(MIB, 5);
    fs::write(w.join("linked"), &data).unwrap();
    fs::hard_link(w.join("linked"), w.join("linked-too")).unwrap();
    let sparse = fs::File::create(w.join("sparse")).unwrap();
    sparse
        .write_all_at(b"data at the end", 4 * MIB as u64)
        .unwrap();
    let long = "l".repeat(250);
    fs::write(w.join(&long), &data).unwrap();
    fs::write(w.join("shadowed"), &data).unwrap();
    fs::create_dir(w.join("shadowed.box-blocks")).unwrap();
    fs::write(w.join("shadowed.box-blocks/mine"), b"the user's").unwrap();
    fs::write(w.join("blocked"), &data).unwrap();
    let out = t.path().join("out");
    let (summary, _) = link(&src, &out, None);
    // GNU tar's own listing: the tar crate cannot read an old GNU sparse member.
    let list = Command::new("sh")
        .arg("-c")
        .arg("cat \"$1\"/part-* | zstd -d -q | tar -tvf -")
        .arg("sh")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let list = String::from_utf8(list.stdout).unwrap();
    let names: Vec<&str> = list
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    for whole in ["linked", "sparse", &long, "shadowed"] {
        assert!(
            names.contains(&format!("./{WS}/{whole}").as_str()),
            "{whole} whole: {list}"
        );
        assert!(!list.contains(&format!("{whole}.box-blocks/b")), "{whole}");
    }
    assert!(
        list.contains(&format!("./{WS}/linked-too link to ./{WS}/linked")),
        "{list}"
    );
    assert!(names.contains(&format!("./{WS}/shadowed.box-blocks/mine").as_str()));
    assert!(names.contains(&format!("./{WS}/blocked.box-blocks/index").as_str()));
    let restored = t.path().join("restored");
    fs::create_dir(&restored).unwrap();
    stock_apply(&out, &summary, &restored);
    assert_eq!(fs::read(restored.join(WS).join("shadowed")).unwrap(), data);
    assert_eq!(stock_cat(&restored, &format!("{WS}/blocked")), data);

    fs::write(
        w.join("shadowed.box-blocks/index"),
        "hermes-box-blocks 1\nsize 5\n",
    )
    .unwrap();
    let opts = ExportOptions::new(&src, &t.path().join("refused"), 1 << 30);
    let err = format!("{:#}", export(&opts, Box::new(|_| {})).unwrap_err());
    assert!(
        err.contains(&format!(
            "./{WS}/shadowed.box-blocks is a directory a restore would take"
        )),
        "{err}"
    );
}

/// A Python writer committing to a WAL database while exports run: `ready` once it made
/// `rows` rows (about 1 KiB each, so a database of several blocks), then one transaction
/// after another, each inserting a pair of rows with the same `txn` number, until its
/// stdin closes.
struct Writer {
    child: Child,
}

const WRITER: &str = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, txn INTEGER, v BLOB)")
db.execute("BEGIN")
for i in range(int(sys.argv[2])):
    db.execute("INSERT INTO t(txn, v) VALUES (?, randomblob(1000))", (-1,))
db.execute("COMMIT")
print("ready", flush=True)
import select, time
n = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    db.execute("BEGIN")
    db.execute("INSERT INTO t(txn, v) VALUES (?, randomblob(3000))", (n,))
    db.execute("INSERT INTO t(txn, v) VALUES (?, randomblob(3000))", (n,))
    db.execute("COMMIT")
    n += 1
    time.sleep(0.005)
"#;

impl Writer {
    fn start(db: &Path, rows: u32) -> Option<Self> {
        let python = common::require_tool("python3")?;
        let mut child = Command::new(python)
            .arg("-c")
            .arg(WRITER)
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
        assert_eq!(line.trim(), "ready", "the writer did not make its rows");
        Some(Writer { child })
    }

    fn stop(mut self) {
        self.child
            .stdin
            .take()
            .unwrap()
            .write_all(b"stop\n")
            .unwrap();
        self.child.wait().unwrap();
    }
}

/// Every row of `db` as (id, txn, hash of v).
fn rows(db: &Path) -> Vec<(i64, i64, u64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, txn, v FROM t ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| {
        let v: Vec<u8> = r.get(2)?;
        Ok((r.get(0)?, r.get(1)?, xxhash_of(&v)))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

fn xxhash_of(v: &[u8]) -> u64 {
    match PartHash::of(PartHashAlgo::Xxh3_128, v) {
        PartHash::Xxh3_128(h) => u64::from_le_bytes(h[..8].try_into().unwrap()),
        PartHash::Sha256(_) => unreachable!(),
    }
}

/// The database the stock restore of `links` (in order) gives, checked: SQLite's
/// integrity_check says ok, and its rows are exactly the live database's rows as of one
/// moment: a prefix of them (whatever the writer committed before the read) with every
/// transaction whole.
fn check_restored(
    t: &Path,
    links: &[(PathBuf, &ExportSummary)],
    live: &[(i64, i64, u64)],
    at_least: usize,
) {
    let restored = t.join(format!("restored-{}", links.len()));
    fs::create_dir(&restored).unwrap();
    for (out, summary) in links {
        stock_apply(out, summary, &restored);
    }
    assert!(
        !restored.join(HERMES_DB).exists(),
        "the database is in blocks"
    );
    assert!(
        !restored.join(format!("{HERMES_DB}-wal")).exists(),
        "its WAL is left out"
    );
    let bytes = stock_cat(&restored, HERMES_DB);
    let db = restored.join("state.db");
    fs::write(&db, &bytes).unwrap();
    hb_guest::sqlite::integrity_check(&db).unwrap();
    let got = rows(&db);
    assert!(
        got.len() >= at_least,
        "{} rows, {at_least} committed before",
        got.len()
    );
    assert_eq!(got[..], live[..got.len()], "a moment of the live database");
    let last_txn = got.last().unwrap().1;
    if last_txn >= 0 {
        let pair = got.iter().filter(|r| r.1 == last_txn).count();
        assert_eq!(pair, 2, "transaction {last_txn} is whole");
    }
}

#[test]
fn a_live_database_is_read_in_blocks_while_its_writer_goes_on() {
    if !tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    data_root(&src);
    let db = src.join(HERMES_DB);
    fs::create_dir_all(db.parent().unwrap()).unwrap();
    let Some(writer) = Writer::start(&db, 3000) else {
        return;
    };
    let before = rows(&db).len();
    let l0 = t.path().join("l0");
    let (full, d0) = link(&src, &l0, None);
    let m = members(&l0, &full);
    assert!(
        !m.contains_key(&format!("./{HERMES_DB}")),
        "no copy of the database"
    );
    assert!(written_in(&m, &format!("{HERMES_DB}.box-blocks")).len() >= 4);
    assert!(!l0.join("live-db").exists(), "no scratch copy left");
    let between = rows(&db).len();
    let l1 = t.path().join("l1");
    let (next, _) = link(&src, &l1, Some(&d0));
    writer.stop();
    let live = rows(&db);
    let m1 = members(&l1, &next);
    let dir = format!("{HERMES_DB}.box-blocks");
    let kept = listed(&m1, &dir, Code::Unchanged);
    assert!(!kept.is_empty(), "the second link keeps unchanged blocks");
    assert_eq!(written_in(&m1, &dir), listed(&m1, &dir, Code::Included));
    check_restored(t.path(), &[(l0.clone(), &full)], &live, before);
    check_restored(t.path(), &[(l0, &full), (l1, &next)], &live, between);
}

/// A database nobody wrote to since the last save is not read again: not the large one in
/// blocks (its link would hold only its index, but every page would be hashed), not a
/// small one copied whole. Run as root (as `hb export` runs), SQLite gives the `-wal` it
/// opens to the database's owner, which moves the `-wal`'s ctime and made every later save
/// take the database for changed. A row written afterwards is seen by the next link.
#[test]
fn an_unchanged_live_database_is_not_read_again() {
    if !tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    data_root(&src);
    let large = src.join(HERMES_DB);
    let small = src.join("home/agent/.hermes/small.db");
    fs::create_dir_all(large.parent().unwrap()).unwrap();
    // Held open as an agent holds them, so each keeps its -wal between saves.
    let open = |path: &Path, rows: u32| {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);")
            .unwrap();
        for _ in 0..rows {
            conn.execute("INSERT INTO t(v) VALUES (randomblob(3000))", [])
                .unwrap();
        }
        conn
    };
    let large_conn = open(&large, 200);
    let _small_conn = open(&small, 3);
    assert!(sqlite_wal(&large).exists() && sqlite_wal(&small).exists());
    let dir = format!("{HERMES_DB}.box-blocks");
    let l0 = t.path().join("l0");
    let (full, d0) = link(&src, &l0, None);
    let m0 = members(&l0, &full);
    assert!(!written_in(&m0, &dir).is_empty());
    assert!(m0.contains_key("./home/agent/.hermes/small.db"));

    let l1 = t.path().join("l1");
    let (unchanged, d1) = link(&src, &l1, Some(&d0));
    let m1 = members(&l1, &unchanged);
    assert_eq!(
        written_in(&m1, &dir),
        Vec::<String>::new(),
        "the unchanged large database was read again"
    );
    assert!(
        !m1.contains_key("./home/agent/.hermes/small.db"),
        "the unchanged small database was copied again"
    );

    large_conn
        .execute("INSERT INTO t(v) VALUES (randomblob(3000))", [])
        .unwrap();
    let l2 = t.path().join("l2");
    let (changed, _) = link(&src, &l2, Some(&d1));
    let m2 = members(&l2, &changed);
    assert!(
        written_in(&m2, &dir).contains(&"index".to_string()),
        "a row written after the save was not seen: {:?}",
        written_in(&m2, &dir)
    );
}

fn sqlite_wal(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}
