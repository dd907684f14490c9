//! `box drill` end to end through the simulator with the real `hb`: a box with some files
//! and a chain of two saves; the drill restores the chain into a throwaway box, passes, and
//! leaves no box and no machine behind; a source changed after the save is said, not taken
//! for damage; `--keep` keeps the throwaway box; a SIGINT mid-drill leaves nothing behind;
//! a damaged link fails the drill naming the file, before any box is made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};

use save_load_support::{World, prerequisites, serial};

/// Registered boxes and simulator machines whose names start like a throwaway box's.
fn throwaways(w: &World) -> (Vec<String>, Vec<String>) {
    let rows = box_host::state::Registry::new(&w.state())
        .list()
        .unwrap()
        .records
        .into_iter()
        .map(|r| r.name.to_string())
        .filter(|n| n.starts_with("drill-"))
        .collect();
    let machines = w
        .machines()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.contains("drill-"))
        .collect();
    (rows, machines)
}

fn assert_nothing_left(w: &World, after: &str) {
    let (rows, machines) = throwaways(w);
    assert!(rows.is_empty(), "{after}: registry rows left: {rows:?}");
    assert!(machines.is_empty(), "{after}: machines left: {machines:?}");
    let tmp = w.home().join("tmp");
    let scratch: Vec<_> = std::fs::read_dir(&tmp)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        scratch.is_empty(),
        "{after}: host scratch left: {scratch:?}"
    );
}

/// Flips one byte in the middle of `file` (a damaged backup on disk).
fn flip_a_byte(file: &std::path::Path) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let at = f.metadata().unwrap().len() / 2;
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x10]).unwrap();
}

#[test]
fn a_drill_restores_compares_and_leaves_nothing_behind() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh(
        "alpha",
        "set -e; mkdir -p /data/home/agent/workspace/proj/sub && cd /data/home/agent/workspace/proj
         printf 'notes v1\\n' > notes.md; head -c 300000 /dev/urandom > blob.bin
         printf 'secret\\n' > sub/private; chmod 0600 sub/private; ln -s notes.md latest
         chown -R agent:agent /data/home/agent/workspace",
    );
    let full = w.save_alpha("(full: starts a chain)");
    w.sh(
        "alpha",
        "set -e; cd /data/home/agent/workspace/proj
         printf 'notes v2\\n' > notes.md; rm blob.bin; printf 'new\\n' > added.txt
         chown agent:agent notes.md added.txt",
    );
    let second = w.save_alpha("(incremental: link 2 of its chain)");

    // The newest backup (the chain of two) restores, checks and equals its listing; the
    // source has not changed since.
    let r = w.run(&["drill", "alpha"], &[]);
    assert!(r.ok(), "box drill alpha: {}", r.all());
    assert!(r.stdout.contains("2 link(s)"), "{}", r.all());
    assert!(r.stdout.contains("hb doctor passed"), "{}", r.all());
    assert!(
        r.stdout
            .contains("the restored /data equals the backup's listing"),
        "{}",
        r.all()
    );
    // The source runs: its Executor may have written its database since the save (said),
    // but none of the user's files changed, and none is named.
    assert!(
        r.stdout.contains("is unchanged since the save")
            || r.stdout.contains("changed since the save"),
        "{}",
        r.all()
    );
    assert!(!r.stdout.contains("workspace/proj"), "{}", r.all());
    assert!(r.stdout.contains("drill passed"), "{}", r.all());
    assert_nothing_left(&w, "a drill that passed");
    w.assert_running_unpaused("alpha");

    // The source changes after the save: said, not damage; the restore still passes.
    w.sh(
        "alpha",
        "printf 'after the save\\n' > /data/home/agent/workspace/proj/later.txt",
    );
    let r = w.run(&["drill", "alpha", "--json"], &[]);
    assert!(r.ok(), "box drill alpha --json: {}", r.all());
    let report: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(report["passed"], true, "{report}");
    assert_eq!(report["differences"], serde_json::json!([]), "{report}");
    assert_eq!(report["source"]["state"], "changed", "{report}");
    let changed = report["source"]["differences"].to_string();
    assert!(
        changed.contains("home/agent/workspace/proj/later.txt")
            && changed.contains("the backup does not have"),
        "{report}"
    );
    assert_nothing_left(&w, "a drill of a changed source");

    // --keep keeps the throwaway box, by the name it says.
    let r = w.run(&["drill", "alpha", "--keep"], &[]);
    assert!(r.ok(), "box drill alpha --keep: {}", r.all());
    let (rows, machines) = throwaways(&w);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(machines.len(), 1, "{machines:?}");
    assert!(
        r.stdout
            .contains(&format!("kept the throwaway box '{}'", rows[0])),
        "{}",
        r.all()
    );
    let rm = w.run(&["rm", &rows[0], "--force"], &[]);
    assert!(rm.ok(), "box rm: {}", rm.all());
    assert_nothing_left(&w, "box rm of a kept throwaway box");

    // A SIGINT once the throwaway box exists: it goes, and the drill says it was cut.
    let calls = w.calls().len();
    let child = w.spawn(&["drill", "alpha"], &[]);
    let pid = child.id();
    assert!(
        w.wait_for_call(calls, "machine start", 300),
        "the drill never started its box"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let r = w.finish(&["drill", "alpha"], child, 300);
    assert_eq!(r.code, Some(130), "{}", r.all());
    assert!(r.stderr.contains("interrupted by SIGINT"), "{}", r.all());
    assert_nothing_left(&w, "a drill cut by SIGINT");

    // A damaged backup: the drill fails naming it and what is wrong, and no box was made.
    // The tip: its integrity check fails. The full backup under it: it no longer is the
    // file the tip names by digest, so the chain lacks a link.
    let tip_bytes = std::fs::read(&second).unwrap();
    let tip_name = second.file_name().unwrap().to_str().unwrap().to_string();
    for (damaged, says) in [(&second, "corrupt"), (&full, "missing a link")] {
        if damaged == &full {
            std::fs::write(&second, &tip_bytes).unwrap();
        }
        flip_a_byte(damaged);
        let calls = w.calls().len();
        let r = w.run(&["drill", "alpha", &tip_name], &[]);
        assert_eq!(r.code, Some(1), "{}", r.all());
        assert!(
            r.stderr.contains(&tip_name) && r.stderr.contains(says),
            "the failure says {says:?} of {}: {}",
            damaged.display(),
            r.all()
        );
        assert!(r.stderr.contains("no box was made"), "{}", r.all());
        assert!(
            !w.calls_since(calls)
                .iter()
                .any(|c| c.contains("machine create")),
            "a VM was made for a backup that does not restore"
        );
    }
    assert_nothing_left(&w, "a drill of a damaged backup");
    w.scan_secrets();
}
