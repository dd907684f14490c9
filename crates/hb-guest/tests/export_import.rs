//! `hb export` → `hb import`: round trips, ownership and modes, the pause marker, the part
//! index checks, refusal of unsafe data, and the rollback of a failed swap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod export_import_support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use export_import_support::*;
use hb_guest::archive::export::{ExportOptions, export};
use hb_guest::archive::import::{FaultInjection, import, import_with};
use proptest::prelude::*;

fn sample(root: &Path) {
    build(root, &[]);
    let home = root.join("home/agent");
    fs::create_dir_all(home.join(".config/hermes-box")).unwrap();
    fs::create_dir_all(home.join("workspace/node_modules/pkg")).unwrap();
    fs::create_dir_all(home.join(".hermes/tmp")).unwrap();
    fs::write(
        home.join(".config/hermes-box/runtime-manifest"),
        "box=0.1.0\n",
    )
    .unwrap();
    fs::write(home.join(".config/hermes-box/quiesced"), "").unwrap();
    fs::write(home.join("workspace/node_modules/pkg/index.js"), "x").unwrap();
    fs::write(home.join("workspace/a.txt"), "a\n").unwrap();
    fs::write(home.join(".hermes/state.db"), "db").unwrap();
    fs::write(home.join(".hermes/state.db-wal"), "wal").unwrap();
    fs::write(home.join(".hermes/gateway.pid"), "1").unwrap();
    fs::write(home.join(".hermes/tmp/t"), "t").unwrap();
    std::os::unix::fs::symlink("a.txt", home.join("workspace/a-link")).unwrap();
    fs::write(root.join("logs/x.log"), "log\n").unwrap();
    backdate(root);
}

fn do_export(root: &Path, out: &Path, part: u64) -> Vec<String> {
    let warnings = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let w = warnings.clone();
    export(
        &ExportOptions::new(root, out, part),
        Box::new(move |m| w.borrow_mut().push(m.to_string())),
    )
    .unwrap();
    warnings.borrow().clone()
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn round_trip_into_an_existing_root_with_excludes_marker_and_modes() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    unsafe_fifo(&src.join("home/agent/pipe"));
    let parts = t.path().join("parts");
    let warnings = do_export(&src, &parts, 100);
    assert_eq!(
        warnings,
        vec!["skipping FIFO ./home/agent/pipe".to_string()]
    );
    assert_eq!(mode(&parts), 0o700);
    assert!(fs::read_dir(&parts).unwrap().count() > 2, "several parts");

    let dst = t.path().join("dst");
    fs::create_dir_all(dst.join("home/agent")).unwrap();
    fs::write(dst.join("home/agent/old.txt"), "old").unwrap();
    fs::write(dst.join(".hidden-old"), "old").unwrap();
    let summary = import(&dst, &parts).unwrap();
    assert!(summary.members > 5);

    let mut want = snapshot(&src);
    want.remove("home/agent/pipe");
    let mut got = snapshot(&dst);
    // Root-owned 0711 on the root and on home, whatever they were.
    assert_eq!(mode(&dst), 0o711);
    assert_eq!(mode(&dst.join("home")), 0o711);
    want.remove("home");
    got.remove("home");
    // Import writes the pause marker after extraction: that dir's time is new.
    let marker_dir = ["home/agent/.config/hermes-box"];
    let (got, want) = (
        without_mtime_of(got, &marker_dir),
        without_mtime_of(want, &marker_dir),
    );
    // The pause marker is re-armed (it is excluded from the backup, so not in `want`).
    assert!(dst.join("home/agent/.config/hermes-box/quiesced").exists());
    assert_eq!(
        mode(&dst.join("home/agent/.config/hermes-box/quiesced")),
        0o600
    );
    assert_eq!(got, want);
    assert!(!dst.join("home/agent/old.txt").exists());
    assert!(
        !dst.join(".hidden-old").exists(),
        "hidden old state is removed too"
    );
    assert!(!dst.join("home/agent/workspace/node_modules").exists());
    assert!(!dst.join("home/agent/.hermes/state.db-wal").exists());
    assert!(!dst.join("home/agent/.hermes/gateway.pid").exists());
    assert!(!dst.join("home/agent/.hermes/tmp").exists());
    assert!(dst.join("home/agent/.hermes/state.db").exists());
    let leftovers: Vec<_> = fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".hb-restore"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn unsafe_fifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn export_is_deterministic_and_refuses_an_existing_out_dir() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    do_export(&src, &t.path().join("a"), 1 << 20);
    do_export(&src, &t.path().join("b"), 1 << 20);
    assert_eq!(
        fs::read_to_string(t.path().join("a/parts.index")).unwrap(),
        fs::read_to_string(t.path().join("b/parts.index")).unwrap()
    );
    let err = export(
        &ExportOptions::new(&src, &t.path().join("a"), 1 << 20),
        Box::new(|_| {}),
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("must not exist"), "{err:#}");
}

#[test]
fn the_hb_binary_exports_and_imports() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let hb = env!("CARGO_BIN_EXE_hb");
    let out = Command::new(hb)
        .args(["export", "--root"])
        .arg(&src)
        .arg("--out")
        .arg(t.path().join("p"))
        .args(["--part-size", "1000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dst = t.path().join("dst");
    fs::create_dir(&dst).unwrap();
    let out = Command::new(hb)
        .args(["import", "--root"])
        .arg(&dst)
        .arg("--from")
        .arg(t.path().join("p"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got = snapshot(&dst);
    let mut want = snapshot(&src);
    for s in [&mut got, &mut want] {
        s.remove("home/agent/.config/hermes-box/quiesced");
        s.remove("home/agent/.config/hermes-box");
    }
    assert_eq!(
        without_mode_of(got, &["home"]),
        without_mode_of(want, &["home"]),
        "hb import restores what hb export wrote: contents, modes, mtimes"
    );
}

#[test]
fn a_bad_part_index_or_part_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let dst = t.path().join("dst");
    fs::create_dir_all(dst.join("home/agent")).unwrap();
    fs::write(dst.join("home/agent/keep.txt"), "keep").unwrap();
    let before = snapshot(&dst);
    let fresh = |name: &str| {
        let p = t.path().join(name);
        do_export(&src, &p, 100);
        p
    };
    // A flipped byte in a part.
    let p = fresh("flip");
    let part = p.join("part-000001");
    let mut b = fs::read(&part).unwrap();
    b[10] ^= 1;
    fs::write(&part, b).unwrap();
    let e = import(&dst, &p).unwrap_err();
    assert!(
        format!("{e:#}").contains("does not match the index"),
        "{e:#}"
    );
    // A missing part.
    let p = fresh("missing");
    fs::remove_file(p.join("part-000000")).unwrap();
    assert!(format!("{:#}", import(&dst, &p).unwrap_err()).contains("missing part"));
    // A part replaced by a symlink.
    let p = fresh("link");
    fs::rename(p.join("part-000000"), t.path().join("elsewhere")).unwrap();
    std::os::unix::fs::symlink(t.path().join("elsewhere"), p.join("part-000000")).unwrap();
    assert!(format!("{:#}", import(&dst, &p).unwrap_err()).contains("not a regular file"));
    // An index naming a path.
    let p = fresh("path");
    let idx = fs::read_to_string(p.join("parts.index")).unwrap();
    fs::write(
        p.join("parts.index"),
        idx.replace("part-000000", "../../etc/x"),
    )
    .unwrap();
    assert!(format!("{:#}", import(&dst, &p).unwrap_err()).contains("bad part index"));
    assert_eq!(snapshot(&dst), before);
}

#[test]
fn unsafe_data_is_refused_before_the_root_is_touched() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    // An absolute symlink escaping the root: export would skip it, so the parts are made
    // by hand, as a hostile or foreign backup would arrive (rule 6 refuses it).
    let p = t.path().join("p");
    {
        let parts = hb_guest::archive::parts::PartWriter::create(&p, 1 << 20).unwrap();
        let mut tar = tar::Builder::new(zstd::stream::write::Encoder::new(parts, 3).unwrap());
        for dir in ["./", "./home/", "./home/agent/"] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            tar.append_data(&mut h, dir, std::io::empty()).unwrap();
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        tar.append_link(&mut h, "./home/agent/escape", "/etc")
            .unwrap();
        // Written through the link, this would land in /etc.
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(0);
        tar.append_data(&mut h, "./home/agent/escape/passwd", std::io::empty())
            .unwrap();
        let encoder = tar.into_inner().unwrap();
        encoder
            .finish()
            .unwrap()
            .finish(box_proto::archive::compress::Compression::Zstd)
            .unwrap();
    }
    let dst = t.path().join("dst");
    fs::create_dir_all(dst.join("home/agent")).unwrap();
    fs::write(dst.join("home/agent/keep.txt"), "keep").unwrap();
    let before = snapshot(&dst);
    let e = format!("{:#}", import(&dst, &p).unwrap_err());
    assert!(
        e.contains("unsafe archive: archive member is nested beneath a link:")
            && e.contains("home/agent/escape/passwd"),
        "{e}"
    );
    assert_eq!(snapshot(&dst), before);
    assert_eq!(fs::read_dir(&dst).unwrap().count(), 1);
}

#[test]
fn a_failed_swap_rolls_back_at_every_step() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let p = t.path().join("p");
    do_export(&src, &p, 1 << 20);
    for n in 0..5 {
        let dst = t.path().join(format!("dst{n}"));
        fs::create_dir_all(dst.join("home/agent")).unwrap();
        fs::create_dir_all(dst.join("logs")).unwrap();
        fs::write(dst.join("home/agent/keep.txt"), "keep").unwrap();
        fs::write(dst.join(".dot"), "dot").unwrap();
        let before = snapshot(&dst);
        let e = import_with(
            &dst,
            &p,
            FaultInjection {
                fail_after_moves: Some(n),
            },
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("previous state was put back"),
            "{e:#}"
        );
        assert_eq!(snapshot(&dst), before, "after {n} moves");
        assert_eq!(
            fs::read_dir(&dst).unwrap().count(),
            3,
            "no stage or rollback left"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn export_import_reproduces_generated_trees(nodes in nodes()) {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        build(&src, &nodes);
        backdate(&src);
        let p = t.path().join("p");
        let warnings = do_export(&src, &p, 777);
        // Symlinks are data, wherever they point: export skips none of them...
        prop_assert!(warnings.is_empty(), "{:?}", warnings);
        let dst = t.path().join("dst");
        fs::create_dir(&dst).unwrap();
        // ...and import brings back everything.
        let imported = import(&dst, &p);
        prop_assert!(imported.is_ok(), "export wrote what import refuses: {:?}", imported.err());
        let mut got = snapshot(&dst);
        got.remove("home/agent/.config/hermes-box/quiesced");
        got.remove("home/agent/.config/hermes-box");
        got.remove("home/agent/.config");
        let want = snapshot(&src);
        let got = without_mode_of(got, &["home"]);
        let want = without_mode_of(want, &["home"]);
        // Re-arming the pause marker creates .config/hermes-box when the tree had no
        // .config: only then is home/agent's time the import's own.
        let (got, want) = if want.contains_key("home/agent/.config") {
            (got, want)
        } else {
            (
                without_mtime_of(got, &["home/agent"]),
                without_mtime_of(want, &["home/agent"]),
            )
        };
        prop_assert_eq!(got, want);
    }
}

#[test]
fn an_output_dir_inside_the_root_is_not_archived() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let out = src.join("home/agent/.export-tmp");
    do_export(&src, &out, 100);
    let dst = t.path().join("dst");
    fs::create_dir(&dst).unwrap();
    import(&dst, &out).unwrap();
    assert!(dst.join("home/agent/workspace/a.txt").exists());
    assert!(!dst.join("home/agent/.export-tmp").exists());
}

/// A live /data holds links of every kind: a venv's absolute `python`, an editor's dangling
/// lock link, one that climbs out, a loop. Each is data: exported as it is, with no warning,
/// and imported with the very same target (issue 30).
#[test]
fn every_symlink_comes_back_with_its_target() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let ws = src.join("home/agent/workspace");
    let links = [
        ("python", "/usr/bin/python3"),
        (".#notes.md", "agent@box.4242:1764000000"),
        ("escape", "../../../../etc"),
        ("loop-a", "loop-b"),
        ("loop-b", "loop-a"),
    ];
    for (name, target) in links {
        std::os::unix::fs::symlink(target, ws.join(name)).unwrap();
    }
    let parts = t.path().join("parts");
    let warnings = do_export(&src, &parts, 1 << 20);
    assert!(warnings.is_empty(), "{warnings:#?}");
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    import(&dst, &parts).unwrap();
    let ws = dst.join("home/agent/workspace");
    for (name, target) in links {
        assert_eq!(
            fs::read_link(ws.join(name)).unwrap(),
            Path::new(target),
            "{name}"
        );
    }
    assert_eq!(
        fs::read_link(ws.join("a-link")).unwrap(),
        Path::new("a.txt")
    );
}

/// A hostile backup's link to a file outside the data root: the import makes the link and
/// nothing after it (modes, owners, the database check) follows it.
#[test]
fn an_import_never_follows_a_restored_link() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    fs::write(&victim, "secret").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o640)).unwrap();
    let victim_dir = t.path().join("victim-dir");
    fs::create_dir(&victim_dir).unwrap();
    fs::set_permissions(&victim_dir, fs::Permissions::from_mode(0o750)).unwrap();
    let before = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.mode(), m.uid(), m.gid(), m.mtime())
    };
    let src = t.path().join("src");
    sample(&src);
    let home = src.join("home/agent");
    std::os::unix::fs::symlink(&victim, home.join("x")).unwrap();
    // Where the box's own databases and logs live: links, not directories. A "database"
    // there that an integrity check would refuse, if it went through the link.
    fs::write(
        victim_dir.join("state.db"),
        b"SQLite format 3\0 but nothing after the header",
    )
    .unwrap();
    fs::remove_dir_all(home.join(".hermes")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, home.join(".hermes")).unwrap();
    fs::remove_dir_all(src.join("logs")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, src.join("logs")).unwrap();
    let parts = t.path().join("parts");
    do_export(&src, &parts, 1 << 20);
    let (file_was, dir_was) = (before(&victim), before(&victim_dir));
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    import(&dst, &parts).unwrap();
    assert_eq!(fs::read_link(dst.join("home/agent/x")).unwrap(), victim);
    assert_eq!(fs::read_link(dst.join("logs")).unwrap(), victim_dir);
    assert_eq!(before(&victim), file_was);
    assert_eq!(before(&victim_dir), dir_was);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "secret");
}

/// Issue 13: a sparse file comes back from `hb export` → `hb import` sparse (same size and
/// bytes, holes kept): export writes an old GNU sparse member, import (box-proto's shared
/// unpacker) writes the runs at their offsets.
#[test]
fn sparse_files_round_trip_sparse() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let file = src.join("home/agent/workspace/disk.img");
    {
        let mut f = fs::File::create(&file).unwrap();
        f.write_all(b"head").unwrap();
        f.seek(SeekFrom::Start(16 << 20)).unwrap();
        f.write_all(b"tail").unwrap();
        f.set_len(32 << 20).unwrap();
    }
    if fs::metadata(&file).unwrap().blocks() * 512 >= 1 << 20 {
        println!("SKIPPED: this filesystem does not keep holes");
        return;
    }
    let parts = t.path().join("parts");
    do_export(&src, &parts, 1 << 20);
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    import(&dst, &parts).unwrap();
    let back = dst.join("home/agent/workspace/disk.img");
    let m = fs::metadata(&back).unwrap();
    assert_eq!(m.len(), 32 << 20);
    assert!(
        m.blocks() * 512 < 1 << 20,
        "{} blocks: holes written out",
        m.blocks()
    );
    assert_eq!(fs::read(&back).unwrap(), fs::read(&file).unwrap());
}

#[test]
fn stock_tar_reads_every_member_size_exactly() {
    // hb writes each member's header, data and padding itself, the data in 1 MiB reads:
    // sizes at the 512-byte block and the 1 MiB read boundaries must come out whole in
    // GNU tar.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    build(&root, &[]);
    let dir = root.join("home/agent/sizes");
    fs::create_dir_all(&dir).unwrap();
    let mib = 1usize << 20;
    let sizes = [
        0,
        1,
        511,
        512,
        513,
        8191,
        8193,
        mib - 1,
        mib,
        mib + 1,
        3 * mib + 7,
    ];
    let content = |n: usize| -> Vec<u8> { (0..n).map(|i| (i * 31 % 251) as u8).collect() };
    for n in sizes {
        fs::write(dir.join(format!("f{n}")), content(n)).unwrap();
    }
    let out = t.path().join("out");
    do_export(&root, &out, 1 << 30);
    let stream = t.path().join("all.tar.zst");
    fs::copy(out.join("part-000000"), &stream).unwrap();
    let x = t.path().join("x");
    fs::create_dir(&x).unwrap();
    let status = Command::new("tar")
        .args(["--zstd", "-xf"])
        .arg(&stream)
        .arg("-C")
        .arg(&x)
        .status()
        .unwrap();
    assert!(status.success());
    for n in sizes {
        let got = fs::read(x.join(format!("home/agent/sizes/f{n}"))).unwrap();
        assert!(
            got == content(n),
            "size {n}: GNU tar read {} bytes",
            got.len()
        );
    }
}

/// Makes a WAL-mode SQLite database at `path` with `rows` rows in table `t`.
fn make_db(path: &Path, rows: u32) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);")
        .unwrap();
    for i in 0..rows {
        conn.execute(
            "INSERT INTO t(v) VALUES (?1)",
            [format!("row {i} {}", "x".repeat(200))],
        )
        .unwrap();
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
}

/// Overwrites one b-tree page in the middle of a database with garbage: still a SQLite
/// file by its header, but `PRAGMA integrity_check` fails.
fn damage_db(path: &Path) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    assert!(len > 8 * 4096, "{len}");
    f.write_all_at(&[0xA5; 4096], 4 * 4096).unwrap();
}

/// Sticky and setgid directories, set-id files and a dense file of zeros come back
/// exactly, the zeros as holes (a 1777 dir came back 0777 and a 2775 one 0775 before
/// issue 21).
#[test]
fn every_mode_bit_and_dense_zeros_round_trip() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let home = src.join("home/agent");
    for (dir, m) in [("tmp", 0o1777), ("shared", 0o2775)] {
        fs::create_dir(home.join(dir)).unwrap();
        fs::set_permissions(home.join(dir), fs::Permissions::from_mode(m)).unwrap();
    }
    fs::write(home.join("tool"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(home.join("tool"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(home.join("zeros.img"), vec![0u8; 32 << 20]).unwrap();
    backdate(&src);
    let parts = t.path().join("parts");
    do_export(&src, &parts, 64 << 20);
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    import(&dst, &parts).unwrap();
    let back = dst.join("home/agent");
    assert_eq!(mode(&back.join("tmp")), 0o1777);
    assert_eq!(mode(&back.join("shared")), 0o2775);
    assert_eq!(mode(&back.join("tool")), 0o4755);
    let zeros = back.join("zeros.img");
    assert_eq!(fs::read(&zeros).unwrap(), vec![0u8; 32 << 20]);
    assert!(
        fs::metadata(&zeros).unwrap().blocks() * 512 < 1 << 20,
        "the zeros were written out"
    );
}

/// A damaged database of the box's own software stops the import before the swap, names
/// it and says how to get the files out; the same damage in a workspace `*.db` is the
/// user's data and restores as it is.
#[test]
fn a_damaged_service_database_stops_the_import_and_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src);
    let state = src.join("home/agent/.hermes/state.db");
    fs::remove_file(&state).unwrap();
    fs::remove_file(src.join("home/agent/.hermes/state.db-wal")).unwrap();
    make_db(&state, 500);
    let users = src.join("home/agent/workspace/mine.db");
    make_db(&users, 500);
    damage_db(&users);
    // Codex's database is the agent's data too (Codex may write through a save): damaged,
    // it is restored as it is, said, and never stops the import.
    let codex = src.join("home/agent/.codex/logs.db");
    fs::create_dir_all(codex.parent().unwrap()).unwrap();
    make_db(&codex, 500);
    damage_db(&codex);
    let parts = t.path().join("parts");
    do_export(&src, &parts, 64 << 20);
    // Healthy service database, damaged user and Codex databases: restored, the rows all
    // there.
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    import(&dst, &parts).unwrap();
    let conn = rusqlite::Connection::open(dst.join("home/agent/.hermes/state.db")).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 500);
    assert_eq!(
        fs::read(dst.join("home/agent/workspace/mine.db")).unwrap(),
        fs::read(&users).unwrap()
    );
    assert_eq!(
        fs::read(dst.join("home/agent/.codex/logs.db")).unwrap(),
        fs::read(&codex).unwrap()
    );

    damage_db(&state);
    let parts = t.path().join("parts-damaged");
    do_export(&src, &parts, 64 << 20);
    let dst = t.path().join("dst2");
    fs::create_dir_all(dst.join("home/agent")).unwrap();
    fs::write(dst.join("home/agent/old.txt"), "old").unwrap();
    let before = snapshot(&dst);
    let e = format!("{:#}", import(&dst, &parts).unwrap_err());
    assert!(
        e.contains("home/agent/.hermes/state.db") && e.contains("integrity check"),
        "{e}"
    );
    assert!(e.contains("box extract"), "{e}");
    assert_eq!(snapshot(&dst), before, "the old state is intact");
}
