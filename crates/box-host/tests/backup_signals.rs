//! SIGINT/SIGTERM at random points of encrypt, verify and extract: no plaintext and no temp
//! left, nothing published, the destination untouched. Runs the real `box` binary and the
//! save harness (tests/backup_support/harness.rs, run by re-executing this binary), which
//! drives the same pipeline `box save` does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use backup_support::*;
use rand::Rng;

fn kill(pid: u32, sig: i32) {
    // SAFETY: signalling a child we spawned.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

fn prepare(t: &Path) -> std::path::PathBuf {
    let root = t.join("data");
    sample_tree(&root);
    // Enough parts that the encrypt phase lasts (each part is followed by a pause).
    export(&root, &t.join("parts"), 200_000);
    root
}

/// Not a test of its own: the entry point of the harness processes the tests below spawn
/// (they re-run this binary with `--ignored --exact harness_entry`).
#[test]
#[ignore = "entry point of the harness child processes, not a test"]
fn harness_entry() {
    backup_support::harness_entry();
}

#[test]
fn signals_during_encrypt_verify_publish_leave_nothing() {
    let t = tempfile::tempdir().unwrap();
    prepare(t.path());
    let mut rng = rand::rng();
    for (phase, sig) in [
        ("encrypt", libc::SIGINT),
        ("encrypt", libc::SIGTERM),
        ("verify", libc::SIGTERM),
        ("verify", libc::SIGINT),
        ("publish", libc::SIGHUP),
    ] {
        let backups = t.path().join(format!("backups-{phase}-{sig}"));
        std::fs::create_dir(&backups).unwrap();
        let out = backups.join("a-20261129-120000.tar.zst.gpg");
        let mut child = harness(&[
            "save",
            t.path().join("parts").to_str().unwrap(),
            out.to_str().unwrap(),
        ])
        .env("BOX_PASSPHRASE", PASS)
        .env("HARNESS_PAUSE_MS", "300")
        .env("HARNESS_PHASES", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            let line = lines.next().expect("phase line").unwrap();
            if line == format!("phase: {phase}") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..250)));
        kill(child.id(), sig);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.code(),
            Some(128 + sig),
            "{phase}/{sig}: {status:?} {:?}",
            status.signal()
        );
        assert!(
            listing(&backups).is_empty(),
            "{phase}/{sig}: left {:?}",
            listing(&backups)
        );
    }
}

#[test]
fn signals_during_box_extract_leave_nothing() {
    let t = tempfile::tempdir().unwrap();
    let root = prepare(t.path());
    let backups = t.path().join("backups");
    let out = backups.join("a-20261129-120000.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &out, PASS);
    let mut rng = rand::rng();
    // How long a whole extract takes here, to spread the signals over it.
    let start = Instant::now();
    let probe = t.path().join("probe-out");
    let ok = box_cmd(t.path())
        .env("BOX_PASSPHRASE", PASS)
        .arg("extract")
        .arg(&out)
        .arg(&probe)
        .output()
        .unwrap();
    assert!(ok.status.success());
    let full = start.elapsed().as_millis() as u64;
    std::fs::remove_dir_all(&probe).unwrap();
    let dest_parent = t.path().join("x");
    std::fs::create_dir(&dest_parent).unwrap();
    let mut interrupted = 0;
    // Each run gets a signal at a random point of the time a whole extract took; when a
    // run finishes first (the machine was faster this time), later signals come sooner.
    let mut window = full.max(20);
    for i in 0..24 {
        if i >= 6 && interrupted >= 3 {
            break;
        }
        let target = dest_parent.join(format!("out{i}"));
        let sig = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP][i % 3];
        let child = box_cmd(t.path())
            .env("BOX_PASSPHRASE", PASS)
            .arg("extract")
            .arg(&out)
            .arg(&target)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = child;
        std::thread::sleep(Duration::from_millis(
            rng.random_range(window / 10..window * 9 / 10),
        ));
        kill(child.id(), sig);
        let status = child.wait().unwrap();
        if status.success() {
            // Finished before the signal: then it must be complete.
            assert_eq!(snapshot(&target), expected_after_excludes(&root));
            std::fs::remove_dir_all(&target).unwrap();
            window = (window * 2 / 3).max(20);
        } else {
            interrupted += 1;
            assert_eq!(status.code(), Some(128 + sig), "{status:?}");
            assert!(!target.exists(), "a partial extraction was promoted");
        }
        assert!(
            listing(&dest_parent).is_empty(),
            "left {:?}",
            listing(&dest_parent)
        );
        assert_eq!(listing(&backups), vec!["a-20261129-120000.tar.zst.gpg"]);
    }
    assert!(interrupted >= 3, "only {interrupted} runs were interrupted");
}

#[test]
fn truncated_flipped_empty_and_foreign_inputs_fail_cleanly() {
    let t = tempfile::tempdir().unwrap();
    prepare(t.path());
    let good = t.path().join("good.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &good, PASS);
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated",
            bytes[..bytes.len() * 2 / 3].to_vec(),
            "corrupt or truncated",
        ),
        (
            "flipped",
            {
                let mut b = bytes.clone();
                let at = b.len() / 2;
                b[at] ^= 0x40;
                b
            },
            "corrupt or truncated",
        ),
        ("empty", Vec::new(), "not an encrypted OpenPGP backup"),
        (
            "foreign",
            b"PK\x03\x04 this is a zip file, not OpenPGP".to_vec(),
            "not an encrypted OpenPGP backup",
        ),
        (
            "plain-literal",
            {
                // An OpenPGP literal data packet: valid OpenPGP, but not encrypted.
                let mut v = vec![0xcb, 0x0d, b'b', 0, 0, 0, 0, 0];
                v.extend_from_slice(b"hello");
                v
            },
            "not an encrypted OpenPGP backup",
        ),
    ];
    let work = t.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for (name, data, want) in cases {
        let f = t.path().join(format!("{name}.tar.zst.gpg"));
        std::fs::write(&f, data).unwrap();
        let target = work.join(name);
        let out = box_cmd(t.path())
            .env("BOX_PASSPHRASE", PASS)
            .arg("extract")
            .arg(&f)
            .arg(&target)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} accepted");
        assert!(err.contains(want), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(
            listing(&work).is_empty(),
            "{name} wrote {:?}",
            listing(&work)
        );
    }
}

/// A backup cut off anywhere in its first bytes (headers, session key, the start of the
/// encrypted packet) is refused with an error: sequoia's parser panics on some of these
/// lengths, and box must turn that into "corrupt or truncated", never crash or abort.
#[test]
fn a_backup_cut_anywhere_in_its_head_is_refused_cleanly() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    std::fs::create_dir_all(root.join("home/agent")).unwrap();
    std::fs::write(root.join("home/agent/x"), "hi\n").unwrap();
    export(&root, &t.path().join("parts"), 1 << 20);
    let good = t.path().join("good.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &good, PASS);
    let bytes = std::fs::read(&good).unwrap();
    let work = t.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for len in 1..bytes.len().min(96) {
        let f = t.path().join("cut.tar.zst.gpg");
        std::fs::write(&f, &bytes[..len]).unwrap();
        let out = box_cmd(t.path())
            .env("BOX_PASSPHRASE", PASS)
            .arg("extract")
            .arg(&f)
            .arg(work.join("out"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "cut at {len}: {err}");
        assert!(err.contains("error: "), "cut at {len}: {err}");
        assert!(!err.contains("panicked"), "cut at {len}: {err}");
        assert!(listing(&work).is_empty(), "cut at {len} wrote something");
    }
}
