//! `box backups check` end to end through the simulator with the real `hb`: a chain of
//! three links (the third saved with `box save --check`) checks sound, with and without
//! `--read-data`; one byte flipped in the middle link names that file as damaged and the
//! link after it as standing on it; the middle link deleted names it as missing and the
//! link it takes down. No check writes into the backup directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use box_proto::BoxName;
use save_load_support::{Run, World, prerequisites, serial};

const PROJ: &str = "/data/home/agent/workspace/proj";

/// Every entry of `dir`: name, length, mtime and ctime to the nanosecond, inode. A check
/// that wrote, renamed, touched or left anything there changes it.
fn listing(dir: &Path) -> Vec<(String, u64, i64, i64, i64, i64, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
                m.ino(),
            )
        })
        .collect();
    v.sort();
    v
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// The report line of the backup `file`.
fn line_of<'a>(r: &'a Run, file: &Path) -> &'a str {
    r.stdout
        .lines()
        .find(|l| l.contains(&name(file)) && !l.trim_start().starts_with("missing"))
        .unwrap_or_else(|| panic!("no line for {} in {}", name(file), r.all()))
}

/// `box backups check alpha` with `extra`, asserting the backup dir is left as it was.
fn check(w: &World, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let before = listing(&w.backups());
    let mut args = vec!["backups", "check", "alpha"];
    args.extend_from_slice(extra);
    let r = w.run(&args, env);
    assert_eq!(
        listing(&w.backups()),
        before,
        "box backups check {extra:?} changed the backup dir: {}",
        r.all()
    );
    r
}

/// The report of a chain whose middle link's bytes changed: the full backup sound, the
/// middle file damaged (its digest not the one its save recorded, and `how`), the last
/// link damaged by standing on it; exit 3.
fn assert_middle_damaged(r: &Run, [full, middle, last]: [&Path; 3], how: &str) {
    assert_eq!(r.code, Some(3), "damage exits 3: {}", r.all());
    assert!(
        line_of(r, full).trim_start().starts_with("sound"),
        "{}",
        r.all()
    );
    let mid_line = line_of(r, middle);
    assert!(
        mid_line.trim_start().starts_with("damaged")
            && mid_line.contains("its SHA-256 differs from the one its save recorded")
            && mid_line.contains(how),
        "the middle file is damaged ({how}): {}",
        r.all()
    );
    let last_line = line_of(r, last);
    assert!(
        last_line.trim_start().starts_with("damaged")
            && last_line.contains(&format!("stands on {}, which is damaged", name(middle))),
        "the last link stands on it: {}",
        r.all()
    );
}

/// No passphrase anywhere: a check that needed one would fail to ask (no terminal).
const NO_PASSPHRASE: &[(&str, &str)] = &[("BOX_PASSPHRASE_FILE", "")];

fn flip_byte_at_middle(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(file, bytes).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    let ok = std::process::Command::new("cp")
        .args(["-a", from.to_str().unwrap(), to.to_str().unwrap()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

/// Brings the pristine copy back in place of the backup dir.
fn restore_dir(w: &World, pristine: &Path) {
    std::fs::remove_dir_all(w.backups()).unwrap();
    copy_dir(pristine, &w.backups());
}

#[test]
fn a_chain_of_three_checks_sound_then_damaged_then_incomplete() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {PROJ} && cd {PROJ}; printf 'v1\\n' > notes.md
             head -c 300000 /dev/urandom > data.bin; chown -R agent:agent /data/home/agent/workspace"
        ),
    );
    let full = w.save_alpha("(full: starts a chain)");
    w.sh(
        "alpha",
        &format!(
            "cd {PROJ} && head -c 200000 /dev/urandom > more.bin && printf 'v2\\n' > notes.md"
        ),
    );
    let middle = w.save_alpha("(incremental: link 2 of its chain)");
    w.sh("alpha", &format!("cd {PROJ} && printf 'v3\\n' > notes.md"));

    // The third link with box save --check: the chain it extended is checked after it.
    let before = w.backups_published();
    let saved = w.run(
        &["save", "alpha", "--check"],
        &[("BOX_PART_SIZE", "1048576")],
    );
    assert!(saved.ok(), "box save --check: {}", saved.all());
    assert!(
        saved.stdout.contains("(incremental: link 3 of its chain)"),
        "{}",
        saved.all()
    );
    assert!(
        saved.stdout.contains("Checking the chain of") && saved.stdout.contains("3 sound"),
        "save --check reports the chain it extended: {}",
        saved.all()
    );
    let last: Vec<PathBuf> = w
        .backups_published()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(last.len(), 1, "{last:?}");
    let last = last[0].clone();

    // Sound: metadata (no passphrase needed: the saves recorded every file) and every byte.
    let r = check(&w, &[], NO_PASSPHRASE);
    assert!(r.ok(), "check: {}", r.all());
    for f in [&full, &middle, &last] {
        assert!(
            line_of(&r, f).trim_start().starts_with("sound"),
            "{}",
            r.all()
        );
    }
    assert!(
        r.stdout
            .contains("3 sound, 0 damaged, 0 incomplete, 0 missing link(s): all sound"),
        "{}",
        r.all()
    );
    let r = check(&w, &["--read-data"], &[]);
    assert!(r.ok(), "check --read-data: {}", r.all());
    assert_eq!(
        r.stdout.matches("decrypted, MDC checked").count(),
        3,
        "every link decrypted and validated: {}",
        r.all()
    );
    let wrong = w.dir.path().join("wrong-passphrase");
    std::fs::write(&wrong, "not the passphrase\n").unwrap();
    let r = check(
        &w,
        &["--read-data"],
        &[("BOX_PASSPHRASE_FILE", wrong.to_str().unwrap())],
    );
    assert!(
        r.code == Some(1) && r.stderr.contains("wrong passphrase"),
        "a wrong passphrase is the user's to fix, not damage: {}",
        r.all()
    );
    let r = check(&w, &["--json"], NO_PASSPHRASE);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report["sound"], true, "{}", r.all());
    assert_eq!(report["counts"]["sound"], 3);
    assert_eq!(report["boxes"][0]["backups"][1]["link"], 2);

    // One byte flipped in the middle link (the original kept aside for the next case).
    let pristine = w.dir.path().join("pristine-backups");
    copy_dir(&w.backups(), &pristine);
    flip_byte_at_middle(&middle);
    let r = check(&w, &[], NO_PASSPHRASE);
    assert_middle_damaged(&r, [&full, &middle, &last], "same size (");
    assert!(r.stdout.contains("NOT all sound"), "{}", r.all());
    let r = check(&w, &["--read-data"], &[]);
    assert_middle_damaged(
        &r,
        [&full, &middle, &last],
        "decrypting it: backup is corrupt",
    );
    let r = check(&w, &["--read-data", "--json"], &[]);
    assert_eq!(r.code, Some(3));
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let backups = &report["boxes"][0]["backups"];
    assert_eq!(backups[1]["status"], "damaged");
    assert_eq!(backups[1]["damaged_file"], middle.display().to_string());
    assert_eq!(backups[2]["damaged_file"], middle.display().to_string());
    assert_eq!(report["counts"]["damaged"], 2);

    // The middle link gone: incomplete, naming it and the link it takes down.
    restore_dir(&w, &pristine);
    std::fs::remove_file(&middle).unwrap();
    let r = check(&w, &[], NO_PASSPHRASE);
    assert_eq!(r.code, Some(3), "{}", r.all());
    assert!(
        line_of(&r, &full).trim_start().starts_with("sound"),
        "{}",
        r.all()
    );
    assert!(
        line_of(&r, &last).trim_start().starts_with("incomplete")
            && line_of(&r, &last).contains("stands on link 2 of the chain, which is missing"),
        "{}",
        r.all()
    );
    let missing = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("missing"))
        .unwrap_or_else(|| panic!("a missing line: {}", r.all()));
    assert!(
        missing.contains(&name(&middle))
            && missing.contains(&format!("it takes down {}", name(&last))),
        "{}",
        r.all()
    );
    let r = check(&w, &["--read-data", "--json"], &[]);
    assert_eq!(r.code, Some(3), "{}", r.all());
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let m = &report["boxes"][0]["missing"][0];
    assert_eq!(m["was"], middle.display().to_string());
    assert_eq!(m["link"], 2);
    assert_eq!(
        m["takes_down"],
        serde_json::json!([last.display().to_string()])
    );
    assert_eq!(report["boxes"][0]["backups"][0]["status"], "sound");
    assert_eq!(report["boxes"][0]["backups"][1]["status"], "incomplete");

    // Without the saves' record (a backup dir from another install): each file's place is
    // read from its sealed facts, which needs the passphrase, and the report says its bytes
    // were not compared with a record.
    restore_dir(&w, &pristine);
    let memo = box_host::backup::tree_cache::kept_at(&w.state(), &BoxName::parse("alpha").unwrap())
        .with_extension("known");
    std::fs::remove_file(&memo).unwrap();
    let r = check(&w, &[], NO_PASSPHRASE);
    assert_eq!(
        r.code,
        Some(1),
        "no passphrase to read places with: {}",
        r.all()
    );
    let r = check(&w, &[], &[]);
    assert!(r.ok(), "{}", r.all());
    assert_eq!(
        r.stdout.matches("no save recorded its SHA-256").count(),
        3,
        "{}",
        r.all()
    );
    assert!(
        line_of(&r, &last).contains("link 3 of its chain"),
        "{}",
        r.all()
    );

    // Nothing to check is no pass; no box named is a usage error.
    let r = w.run(&["backups", "check", "nosuch"], &[]);
    assert!(
        r.code == Some(1) && r.stderr.contains("no backups of 'nosuch'"),
        "{}",
        r.all()
    );
    let r = w.run(&["backups", "check"], &[]);
    assert_eq!(r.code, Some(2), "{}", r.all());

    w.scan_secrets();
}
