//! Backups off the machine, end to end through the simulator with the real `hb`:
//! `box backups copy` copies the newest backup's whole chain to a second directory (a USB
//! stick), skips what is there already, never overwrites another file of the same name,
//! and the copy restores after the first directory is gone. `BACKUP_MIRROR` gets each save's
//! chain, an unmounted mirror is only a warning, and `box backups prune` removes from both.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use save_load_support::{World, prerequisites, serial};

const PROJ: &str = "/data/home/agent/workspace/proj";

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// No passphrase anywhere: a verb that needed one would fail to ask (no terminal).
const NO_PASSPHRASE: &[(&str, &str)] = &[("BOX_PASSPHRASE_FILE", "")];

#[test]
fn a_chain_copied_off_the_machine_restores_there() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    let mirror = w.dir.path().join("nas");
    let mirror_env = [("BACKUP_MIRROR", mirror.to_str().unwrap())];
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {PROJ} && cd {PROJ}; printf 'v1\\n' > notes.md
             head -c 300000 /dev/urandom > data.bin; chown -R agent:agent /data/home/agent/workspace"
        ),
    );
    // An older chain, then the one that counts: a full backup and two links. The first
    // save's mirror is not mounted: a warning, the save stands.
    let old = w.run(&["save", "alpha"], &mirror_env);
    assert!(old.ok(), "{}", old.all());
    assert!(
        old.stderr.contains("is not there (not mounted?)"),
        "{}",
        old.all()
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let full = w.run(&["save", "alpha", "--full"], &[]);
    assert!(full.ok(), "{}", full.all());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    w.sh("alpha", &format!("cd {PROJ} && printf 'v2\\n' > notes.md"));
    w.save_alpha("(incremental: link 2 of its chain)");
    w.sh("alpha", &format!("cd {PROJ} && printf 'v3\\n' > notes.md"));
    std::fs::create_dir(&mirror).unwrap();
    let third = w.run(&["save", "alpha"], &mirror_env);
    assert!(third.ok(), "{}", third.all());
    let published = w.backups_published();
    assert_eq!(published.len(), 4, "{published:?}");
    let chain: Vec<String> = published[1..].iter().map(|p| name(p)).collect();
    // The mirror came up for the third save: it got the whole chain, not only the new file.
    assert!(third.stdout.contains("Mirrored to"), "{}", third.all());
    assert_eq!(names(&mirror), chain, "{}", third.all());

    // The newest chain to a USB stick: three files, each read back.
    let usb = w.dir.path().join("usb");
    let r = w.run(&["backups", "copy", "alpha", usb.to_str().unwrap()], &[]);
    assert!(r.ok(), "{}", r.all());
    assert!(
        r.stdout.contains("3 file(s) copied")
            && r.stdout.contains("and read back, 0 already there"),
        "{}",
        r.all()
    );
    assert_eq!(names(&usb), chain);
    for f in &published[1..] {
        assert_eq!(
            std::fs::read(f).unwrap(),
            std::fs::read(usb.join(name(f))).unwrap()
        );
    }
    // Again: nothing written (same inodes), all "already there".
    let inodes = |dir: &Path| -> Vec<u64> {
        names(dir)
            .iter()
            .map(|n| std::fs::metadata(dir.join(n)).unwrap().ino())
            .collect()
    };
    let before = inodes(&usb);
    let r = w.run(&["backups", "copy", "alpha", usb.to_str().unwrap()], &[]);
    assert!(
        r.ok() && r.stdout.contains("3 already there"),
        "{}",
        r.all()
    );
    assert_eq!(inodes(&usb), before);

    // Another file under one of the names: named, never overwritten, the rest copied; exit 1.
    let stick = w.dir.path().join("stick");
    std::fs::create_dir(&stick).unwrap();
    std::fs::write(stick.join(&chain[1]), b"my own file").unwrap();
    let r = w.run(&["backups", "copy", "alpha", stick.to_str().unwrap()], &[]);
    assert_eq!(r.code, Some(1), "{}", r.all());
    assert!(
        r.stderr.contains(&format!(
            "{} is there and is another file",
            stick.join(&chain[1]).display()
        )) && r.stderr.contains("not overwritten"),
        "{}",
        r.all()
    );
    assert_eq!(
        std::fs::read(stick.join(&chain[1])).unwrap(),
        b"my own file"
    );
    assert!(stick.join(&chain[0]).exists() && stick.join(&chain[2]).exists());

    // --all: every file of the box, no passphrase needed (digests only).
    let all = w.dir.path().join("all");
    let r = w.run(
        &["backups", "copy", "--all", all.to_str().unwrap()],
        NO_PASSPHRASE,
    );
    assert!(r.ok(), "{}", r.all());
    assert_eq!(names(&all).len(), 4, "{}", r.all());

    // The laptop's backups gone: the copy on the stick restores, chain and all.
    let pristine: PathBuf = w.dir.path().join("pristine");
    std::fs::rename(w.backups(), &pristine).unwrap();
    let tip = usb.join(&chain[2]);
    let load = w.run(&["load", tip.to_str().unwrap(), "beta"], &[]);
    assert!(load.ok(), "box load from the copy: {}", load.all());
    assert_eq!(
        w.sh("beta", &format!("cat {PROJ}/notes.md")).trim(),
        "v3",
        "the restore is the newest link's moment"
    );
    std::fs::rename(&pristine, w.backups()).unwrap();

    // Prune keeps the mirror as it keeps the backup dir.
    let r = w.run(
        &["backups", "prune", "alpha", "--keep-last", "3"],
        &mirror_env,
    );
    assert!(r.ok(), "{}", r.all());
    assert_eq!(names(&w.backups()), chain, "{}", r.all());
    assert_eq!(names(&mirror), chain, "{}", r.all());
    let r = w.run(
        &["backups", "prune", "alpha", "--keep-last", "0"],
        &mirror_env,
    );
    assert!(r.ok(), "{}", r.all());
    assert_eq!(names(&mirror), names(&w.backups()), "{}", r.all());
}

/// `box load`/`box extract` of a link whose parents are gone name each missing file (as the
/// saves recorded it) with its SHA-256, every place box looked, and the other place that
/// holds it (here `BACKUP_MIRROR`), with the `--chain-dir` that restores from there.
#[test]
fn a_link_without_its_parents_names_each_and_where_box_looked() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    let mirror = w.dir.path().join("nas");
    std::fs::create_dir(&mirror).unwrap();
    let env = [("BACKUP_MIRROR", mirror.to_str().unwrap())];
    w.sh(
        "alpha",
        &format!("set -e; mkdir -p {PROJ}; printf 'v1\\n' > {PROJ}/notes.md; chown -R agent:agent /data/home/agent/workspace"),
    );
    for (i, text) in ["v1", "v2", "v3"].iter().enumerate() {
        w.sh("alpha", &format!("printf '{text}\\n' > {PROJ}/notes.md"));
        let r = w.run(&["save", "alpha"], &env);
        assert!(r.ok(), "save {i}: {}", r.all());
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let published = w.backups_published();
    assert_eq!(published.len(), 3);
    let [full, middle, tip] = [&published[0], &published[1], &published[2]];
    let sha = |p: &Path| {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()))
    };
    let (full_sha, middle_sha) = (sha(full), sha(middle));
    std::fs::remove_file(full).unwrap();
    std::fs::remove_file(middle).unwrap();
    let out = w.dir.path().join("out");
    for args in [
        vec!["load", tip.to_str().unwrap(), "beta"],
        vec!["extract", tip.to_str().unwrap(), out.to_str().unwrap()],
    ] {
        let r = w.run(&args, &env);
        assert_eq!(r.code, Some(1), "{}", r.all());
        for words in [
            format!("missing: {} (SHA-256 {middle_sha})", name(middle)),
            format!("missing: {} (SHA-256 {full_sha})", name(full)),
            format!("looked in: {} (beside it)", w.backups().display()),
            mirror.display().to_string(),
            format!(
                "{} has that SHA-256: restore with --chain-dir {}",
                mirror.join(name(middle)).display(),
                mirror.display()
            ),
        ] {
            assert!(r.stderr.contains(&words), "{words:?} in {}", r.all());
        }
        assert!(!out.exists());
    }
    assert!(!w.registered("beta"));
    // As it says: restored from the mirror.
    let r = w.run(
        &[
            "load",
            tip.to_str().unwrap(),
            "beta",
            "--chain-dir",
            mirror.to_str().unwrap(),
        ],
        &env,
    );
    assert!(r.ok(), "{}", r.all());
    assert_eq!(w.sh("beta", &format!("cat {PROJ}/notes.md")).trim(), "v3");
}
