//! Interop with real GnuPG, both ways, and the round trip through `box extract`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use std::fs;
use std::process::{Command, Stdio};

use backup_support::*;

#[test]
fn gpg_decrypts_our_backup_and_tar_reproduces_the_tree() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    export(&root, &t.path().join("parts"), 64 << 10);
    let out = t.path().join("backups/alpha-20261129-120000.tar.zst.gpg");
    let published = save_parts(&t.path().join("parts"), &out, PASS);
    assert_eq!(published.path, out);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        listing(&t.path().join("backups")),
        vec!["alpha-20261129-120000.tar.zst.gpg"]
    );

    let home = gpg_home(t.path());
    let plain = t.path().join("plain.tar.zst");
    let o = gpg(
        &home,
        PASS,
        &["-o", plain.to_str().unwrap(), "-d", out.to_str().unwrap()],
    );
    assert!(
        o.status.success(),
        "gpg -d: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dest = t.path().join("untarred");
    fs::create_dir(&dest).unwrap();
    let st = Command::new("tar")
        .args([
            "--zstd",
            "-xpf",
            plain.to_str().unwrap(),
            "-C",
            dest.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(snapshot(&dest), expected_after_excludes(&root));
    // The hardlink kept its inode sharing.
    use std::os::unix::fs::MetadataExt;
    let a = fs::metadata(dest.join("home/agent/workspace/probe.txt")).unwrap();
    let b = fs::metadata(dest.join("home/agent/workspace/probe-hard")).unwrap();
    assert_eq!(a.ino(), b.ino());
    // The SQLite sidecar under .hermes was left out, the database kept.
    assert!(dest.join("home/agent/.hermes/state.db").exists());
    assert!(!dest.join("home/agent/.hermes/state.db-wal").exists());
}

#[test]
fn our_extract_reads_gpg_symmetric_of_gzip_and_zstd_tars() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    let home = gpg_home(t.path());
    for (flag, name) in [("-z", "seed.tar.gz.gpg"), ("--zstd", "new.tar.zst.gpg")] {
        // The seed's pipeline: tar c… -C /data . | gpg --symmetric --cipher-algo AES256
        let tarball = t.path().join(format!("{name}.plain"));
        let st = Command::new("tar")
            .args([
                flag,
                "-cf",
                tarball.to_str().unwrap(),
                "-C",
                root.to_str().unwrap(),
                ".",
            ])
            .status()
            .unwrap();
        assert!(st.success());
        let enc = t.path().join(name);
        let o = gpg(
            &home,
            PASS,
            &[
                "--symmetric",
                "--cipher-algo",
                "AES256",
                "-o",
                enc.to_str().unwrap(),
                tarball.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let target = t.path().join(format!("{name}-out"));
        let out = box_cmd(t.path())
            .env("BOX_PASSPHRASE", PASS)
            .arg("extract")
            .arg(&enc)
            .arg(&target)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("base_image=ubuntu:24.04"),
            "prints the manifest: {stdout}"
        );
        assert!(
            stdout.contains(&format!("-> {}/", target.display())),
            "{stdout}"
        );
        // GNU tar archived everything (no excludes in the seed's V1): the same tree.
        let mut want = snapshot(&root);
        let mut got = snapshot(&target);
        // Directory modes are restored; the root's too.
        want.retain(|_, v| v.0 != 'x');
        got.retain(|_, v| v.0 != 'x');
        assert_eq!(got, want, "{name}");
        for s in [&stdout, &String::from_utf8_lossy(&out.stderr)] {
            assert!(!s.contains(PASS), "the passphrase leaked");
        }
    }
}

#[test]
fn box_extract_round_trip_default_dir_and_refusals() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    export(&root, &t.path().join("parts"), 1 << 20);
    let backups = t.path().join("backups");
    let out = backups.join("alpha-20261129-120000.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &out, PASS);

    let run = |args: &[&std::ffi::OsStr], pass: &str| {
        box_cmd(t.path())
            .env("BOX_PASSPHRASE", pass)
            .env("BACKUP_DIR", &backups)
            .arg("extract")
            .args(args)
            .output()
            .unwrap()
    };
    let ok = run(&[out.as_os_str()], PASS);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let target = backups.join("alpha-20261129-120000-extracted");
    assert_eq!(snapshot(&target), expected_after_excludes(&root));
    // An existing target is refused and left alone.
    let again = run(&[out.as_os_str()], PASS);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("refusing to overwrite existing directory")
    );
    assert_eq!(snapshot(&target), expected_after_excludes(&root));
    // Wrong passphrase: its own message, nothing created.
    let other = t.path().join("other");
    let wrong = run(&[out.as_os_str(), other.as_os_str()], "not the passphrase");
    assert!(!wrong.status.success());
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains("decryption failed (wrong passphrase?)"),
        "{err}"
    );
    assert!(!err.contains("not a valid archive"));
    assert!(!other.exists());
    assert_eq!(
        listing(&backups),
        vec![
            "alpha-20261129-120000-extracted",
            "alpha-20261129-120000.tar.zst.gpg"
        ]
    );
    assert_eq!(
        listing(t.path())
            .iter()
            .filter(|n| n.contains("extract-"))
            .count(),
        0
    );
}

#[test]
fn valid_but_not_an_archive_is_told_apart_from_a_wrong_passphrase() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("x.tar.zst.gpg");
    encrypt_bytes(b"just some text, not a compressed tar", &f, PASS);
    let out = box_cmd(t.path())
        .env("BOX_PASSPHRASE", PASS)
        .arg("extract")
        .arg(&f)
        .arg(t.path().join("d"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("decrypted data is not a valid archive"),
        "{err}"
    );
    assert!(!t.path().join("d").exists());
}

#[test]
fn refusing_to_overwrite_an_existing_backup_before_any_work() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("a.tar.zst.gpg");
    fs::write(&out, b"old").unwrap();
    let err = box_host::backup::save::Pipeline::begin(&out, &secret(PASS))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        format!("refusing to overwrite existing backup: {}", out.display())
    );
    assert_eq!(listing(t.path()), vec!["a.tar.zst.gpg"]);
    assert_eq!(fs::read(&out).unwrap(), b"old");
}

#[test]
fn load_pass_two_hands_out_parts_matching_pass_one() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    let index = export(&root, &t.path().join("parts"), 1 << 20);
    let out = t.path().join("b.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &out, PASS);
    let pass = secret(PASS);
    let v = box_host::backup::load::validate_backup(&out, &pass).unwrap();
    assert_eq!(Some(v.sha256), index.total_sha256);
    assert_eq!(v.manifest.as_ref().unwrap().get("box"), Some("0.1.0"));
    let dir = t.path().join("p2");
    fs::create_dir(&dir).unwrap();
    let mut got = Vec::new();
    let idx =
        box_host::backup::load::write_parts(&out, &pass, &v.sha256, 100_000, &dir, |p, part| {
            got.push((part.name.clone(), fs::read(p).unwrap()));
            Ok(())
        })
        .unwrap();
    assert_eq!(idx.total_sha256, Some(v.sha256));
    assert_eq!(
        got.iter().map(|g| g.1.len() as u64).sum::<u64>(),
        index.total_size
    );
    assert!(
        listing(&dir).is_empty(),
        "part files are removed after each callback"
    );
    // A pass-1 hash that does not match fails.
    let err =
        box_host::backup::load::write_parts(&out, &pass, &[0; 32], 100_000, &dir, |_, _| Ok(()))
            .unwrap_err();
    assert!(
        err.to_string().contains("backup changed between passes"),
        "{err}"
    );
    assert!(listing(&dir).is_empty());
}

/// The verification catches a backup that changed on disk after it was written: a flipped
/// byte and a whole valid backup of other data swapped in. The verifier decrypts while the
/// file is written, so what it reports depends on when the change landed: read by the
/// verifier (the MDC, the parse or the hash fails) or after it (the file on disk no longer
/// matches what it decrypted; backup/save.rs tests that case deterministically). Either
/// way verification fails and nothing is published.
#[test]
fn verification_catches_a_temp_file_changed_after_encryption() {
    use box_host::backup::save;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    export(&root, &t.path().join("parts"), 1 << 20);
    let other = t.path().join("other");
    std::fs::create_dir_all(other.join("home/agent")).unwrap();
    std::fs::write(other.join("home/agent/x"), "other data").unwrap();
    export(&other, &t.path().join("other-parts"), 1 << 20);
    let decoy = t.path().join("decoy/x-20261129-120000.tar.zst.gpg");
    save_parts(&t.path().join("other-parts"), &decoy, PASS);

    let pass = secret(PASS);
    for what in ["flipped", "swapped"] {
        let out = t
            .path()
            .join(format!("{what}/a-20261129-120000.tar.zst.gpg"));
        let mut p = save::Pipeline::begin(&out, &pass).unwrap();
        p.feed_parts_dir(&t.path().join("parts")).unwrap();
        let sealed = p.finish().unwrap();
        let temp = sealed.temp_path().to_path_buf();
        if what == "flipped" {
            let mut bytes = std::fs::read(&temp).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0x01;
            std::fs::write(&temp, bytes).unwrap();
        } else {
            std::fs::copy(&decoy, &temp).unwrap();
        }
        let err = format!("{:#}", sealed.verify().err().expect("verify must fail"));
        assert!(
            err.contains("encrypted backup verification failed"),
            "{what}: {err}"
        );
        assert!(!out.exists(), "{what}: published");
    }
}
