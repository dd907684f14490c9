//! Interop with real GnuPG, both ways, and the round trip through `box extract`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod sim_support;

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
    // Stock tools skipped the host facts box sealed in front; box reads them back.
    let validated = box_host::backup::load::validate_backup(&out, &secret(PASS)).unwrap();
    assert_eq!(
        validated.sealing,
        box_host::backup::host_facts::Sealing::Sealed(Box::new(sample_facts()))
    );
    assert_eq!(published.facts, Some(sample_facts()));
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
        let out = box_extract(t.path(), &enc, &target);
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
    // The default target is in the current directory (box_cmd runs in t), as tar's.
    let target = t.path().join("alpha-20261129-120000-extracted");
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
        err.contains("decryption failed (wrong passphrase, or its first bytes are damaged)")
            && err.contains(&out.display().to_string()),
        "{err}"
    );
    assert!(!err.contains("not a valid archive"));
    assert!(!other.exists());
    assert_eq!(listing(&backups), vec!["alpha-20261129-120000.tar.zst.gpg"]);
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

/// gpg's symmetric AES-256 files have a key packet without an encrypted session key (any
/// passphrase derives some key) and go to load's bulk reader: uncompressed (`-z 0`, the
/// hand-written pipeline's) it reads them; compressed (gpg's default) it hands them to
/// sequoia once the key opened them. Either way a wrong passphrase reads as one and the
/// right one restores the tree.
#[test]
fn gpg_files_the_bulk_reader_opens_tell_a_wrong_passphrase_and_restore() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    let tgz = seed_archive(&root);
    let home = gpg_home(t.path());
    for (n, compress) in ["none", "zlib"].into_iter().enumerate() {
        let args = [
            "--cipher-algo",
            "AES256",
            "--compress-algo",
            compress,
            "--s2k-count",
            "65536",
            "--symmetric",
            "-o",
            "-",
        ];
        let enc = t.path().join(format!("gpg{n}.tar.gz.gpg"));
        fs::write(&enc, run_gpg(Gpg::Host, &home, &args, &tgz).unwrap()).unwrap();
        let wrong = box_host::backup::load::validate_backup(&enc, &secret("not the passphrase"));
        assert!(
            matches!(
                wrong
                    .as_ref()
                    .map_err(|e| e.downcast_ref::<box_host::backup::BackupError>()),
                Err(Some(box_host::backup::BackupError::WrongPassphrase))
            ),
            "{compress}: {:?}",
            wrong.err()
        );
        let target = t.path().join(format!("out{n}"));
        let out = box_extract(t.path(), &enc, &target);
        assert!(
            out.status.success(),
            "{compress}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(snapshot(&target) == snapshot(&root), "{compress}");
    }
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
    // As box prints it: the file named, then what is wrong with it.
    let err = format!("{err:#}");
    assert!(
        err.contains("backup changed between passes") && err.contains(&out.display().to_string()),
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
        // A named temp: what another process could change (an unnamed one has no path).
        let mut p = save::Pipeline::begin_named_temp(&out, &pass).unwrap();
        p.feed_parts_dir(&t.path().join("parts")).unwrap();
        let sealed = p.finish().unwrap();
        let temp = sealed.temp_path().unwrap().to_path_buf();
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

/// `box extract FILE TARGET` with the passphrase from the environment.
fn box_extract(
    sandbox: &std::path::Path,
    file: &std::path::Path,
    target: &std::path::Path,
) -> std::process::Output {
    box_cmd(sandbox)
        .env("BOX_PASSPHRASE", PASS)
        .arg("extract")
        .arg(file)
        .arg(target)
        .output()
        .unwrap()
}

/// Where scripts/gpg24-chroot.sh (run by scripts/setup.sh) puts Debian 13's GnuPG 2.4.
const GPG24_ROOT: &str = "/var/cache/hermes-box-tests/gpg24/rootfs";

/// A GnuPG a user may have written their backup with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gpg {
    /// This host's (Debian 12: 2.2.40).
    Host,
    /// Debian 13's 2.4.7, in its chroot.
    V24,
}

/// Runs `gpg ARGS` with the passphrase line and then `input` on stdin (`--passphrase-fd
/// 0`: gpg reads the passphrase up to its newline and the data after it; never argv).
/// Returns stdout, or stderr when gpg failed.
fn run_gpg(
    which: Gpg,
    home: &std::path::Path,
    args: &[&str],
    input: &[u8],
) -> Result<Vec<u8>, String> {
    const FIXED: [&str; 7] = [
        "--batch",
        "--yes",
        "--quiet",
        "--pinentry-mode",
        "loopback",
        "--passphrase-fd",
        "0",
    ];
    let mut cmd = match which {
        Gpg::Host => {
            let mut c = Command::new("gpg");
            c.arg("--homedir").arg(home).args(FIXED);
            c
        }
        Gpg::V24 => {
            // A fresh homedir inside the chroot per call, removed after (the chroot is a
            // shared cache, so nothing else is written into it).
            let mut c = Command::new("chroot");
            c.env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .args([GPG24_ROOT, "/bin/sh", "-c"])
                .arg(r#"h=$(mktemp -d) || exit 2; gpg --homedir "$h" "$@"; rc=$?; gpgconf --homedir "$h" --kill all 2>/dev/null; rm -rf "$h"; exit $rc"#)
                .arg("sh")
                .args(FIXED);
            c
        }
    };
    let mut child = cmd
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut data = format!("{PASS}\n").into_bytes();
    data.extend_from_slice(input);
    // Fed from a thread: gpg writes output while it still reads.
    let feeder = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = stdin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// What must become of a backup gpg wrote with some options.
#[derive(Clone, Copy, Debug)]
enum Verdict {
    /// `box extract` reproduces the tree exactly.
    Restores,
    /// Refused before anything is decrypted, never called corrupt; the message holds this
    /// text and the way out (`gpg -d` piped into a re-encryption box reads).
    Refused(&'static str),
}

use Verdict::{Refused, Restores};

/// The seed's `tar czf - . | gpg --symmetric` with the options users' gpg (or gpg.conf)
/// adds. Beyond this list, `BOX_TEST_GPG_ALL=1` adds the other old ciphers and S2K modes.
fn gpg_cases() -> Vec<(Gpg, Vec<&'static str>, Verdict)> {
    const CAST5: Verdict = Refused("is encrypted with CAST5, an old 64-bit-block cipher");
    const NO_MDC: Verdict = Refused("has no integrity check");
    const OCB: Verdict = Refused("is encrypted with AEAD (AES256-OCB");
    let mut cases = Vec::new();
    for gpg in [Gpg::Host, Gpg::V24] {
        // Every case but the S2K ones with a cheap S2K count: gpg's calibrated default
        // costs about a second per file (gpg, then box's two passes) in a debug build.
        let mut add = |args: &[&'static str], v| {
            let mut args = args.to_vec();
            if !args.is_empty() && !args.iter().any(|a| a.starts_with("--s2k")) {
                args.extend(["--s2k-count", "65536"]);
            }
            cases.push((gpg, args, v))
        };
        add(&[], Restores);
        for algo in ["AES256", "AES128", "CAMELLIA256", "TWOFISH"] {
            add(&["--cipher-algo", algo], Restores);
        }
        for algo in ["zlib", "bzip2", "none"] {
            add(&["--compress-algo", algo], Restores);
        }
        add(&["--armor"], Restores);
        add(&["--s2k-mode", "1"], Restores);
        add(&["--rfc2440"], NO_MDC);
        match gpg {
            Gpg::Host => add(&["--cipher-algo", "CAST5"], CAST5),
            Gpg::V24 => {
                // 2.4 encrypts with CAST5 only when told old ciphers are fine.
                add(
                    &["--cipher-algo", "CAST5", "--allow-old-cipher-algos"],
                    CAST5,
                );
                add(&["--force-aead"], OCB);
                // 2.4 writes OCB even when asked for EAX (EAX it only decrypts).
                add(&["--force-aead", "--aead-algo", "eax"], OCB);
                add(&["--force-aead", "--armor"], OCB);
                // RFC 4880 mode's default cipher is 3DES; with AEAD forced too, 2.4 hides
                // it in an encrypted session key: refused once the passphrase opened it.
                add(
                    &["--force-aead", "--rfc4880"],
                    Refused("is encrypted with 3DES"),
                );
            }
        }
        if std::env::var_os("BOX_TEST_GPG_ALL").is_some() {
            add(&["--s2k-mode", "0"], Restores);
            add(
                &["--s2k-digest-algo", "SHA1", "--s2k-count", "1024"],
                Restores,
            );
            add(&["--cipher-algo", "AES192"], Restores);
            for (algo, text) in [
                ("3DES", "is encrypted with 3DES"),
                ("IDEA", "is encrypted with IDEA"),
                ("BLOWFISH", "is encrypted with BLOWFISH"),
            ] {
                let mut args = vec!["--cipher-algo", algo];
                if gpg == Gpg::V24 {
                    args.push("--allow-old-cipher-algos");
                }
                cases.push((gpg, args, Refused(text)));
            }
        }
    }
    cases
}

/// GnuPG 2.2 (this host) and 2.4 (Debian 13's, in a chroot): every seed-style backup either
/// restores exactly through `box extract` or is refused for its true reason, with a way out
/// that works.
#[test]
fn seed_backups_from_gnupg_2_2_and_2_4_restore_or_are_refused_for_their_true_reason() {
    let mut missing = Vec::new();
    if !std::path::Path::new(GPG24_ROOT)
        .join("usr/bin/gpg")
        .exists()
    {
        missing.push(format!(
            "GnuPG 2.4 in {GPG24_ROOT} (scripts/setup.sh builds it: scripts/gpg24-chroot.sh)"
        ));
    }
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (to chroot into GnuPG 2.4's tree)".into());
    }
    if !sim_support::require("gpg 2.4 interop", &missing) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    let home = gpg_home(t.path());
    let tgz = seed_archive(&root);
    let want = snapshot(&root);
    let mut failures = Vec::new();
    for (n, (gpg, args, verdict)) in gpg_cases().into_iter().enumerate() {
        let case = format!("{gpg:?} gpg --symmetric {}", args.join(" "));
        let mut full = args.clone();
        full.extend(["--symmetric", "-o", "-"]);
        let enc = t.path().join(format!("case{n}.tar.gz.gpg"));
        let written = run_gpg(gpg, &home, &full, &tgz)
            .unwrap_or_else(|e| panic!("{case}: gpg failed to write it: {e}"));
        fs::write(&enc, written).unwrap();
        let target = t.path().join(format!("case{n}-out"));
        let out = box_extract(t.path(), &enc, &target);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        match verdict {
            Restores if !out.status.success() => failures.push(format!("{case}: refused: {err}")),
            Restores if snapshot(&target) != want => {
                failures.push(format!("{case}: restored, but not the same tree"))
            }
            Restores => {}
            Refused(_) if out.status.success() => failures.push(format!("{case}: restored")),
            Refused(text) => {
                if !err.contains(text) || err.contains("corrupt or truncated") || target.exists() {
                    failures.push(format!("{case}: wanted `{text}`, got: {err}"));
                    continue;
                }
                // The library's reader refuses it the same way (box load's path).
                match box_host::backup::load::validate_backup(&enc, &secret(PASS)) {
                    Err(e) if e.to_string().contains(text) => {}
                    other => failures.push(format!("{case}: validate_backup: {other:?}")),
                }
                if let Err(e) = way_out_restores(gpg, &home, &enc, &err, t.path(), &want) {
                    failures.push(format!("{case}: the way out: {e}"));
                }
            }
        }
        assert!(!err.contains(PASS) && !String::from_utf8_lossy(&out.stdout).contains(PASS));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Follows the refusal's advice with the gpg that wrote the file: decrypt it and pipe it
/// into `gpg --symmetric --rfc4880 --cipher-algo AES256`; box must restore that exactly.
fn way_out_restores(
    gpg: Gpg,
    home: &std::path::Path,
    enc: &std::path::Path,
    message: &str,
    dir: &std::path::Path,
    want: &Tree,
) -> Result<(), String> {
    const REENCRYPT: [&str; 4] = ["--rfc4880", "--cipher-algo", "AES256", "--symmetric"];
    let decrypt: &[&str] = if message.contains("gpg --ignore-mdc-error -d ") {
        &["--ignore-mdc-error", "-d"]
    } else {
        &["-d"]
    };
    let advice = format!(
        "gpg {} {} | gpg --symmetric --rfc4880 --cipher-algo AES256 -o ",
        decrypt.join(" "),
        enc.display()
    );
    if !message.contains(&advice) {
        return Err(format!("no `{advice}` in: {message}"));
    }
    let plain = run_gpg(gpg, home, decrypt, &fs::read(enc).unwrap())?;
    let fixed = dir.join(format!(
        "{}.aes256.gpg",
        enc.file_name().unwrap().to_string_lossy()
    ));
    let mut args = REENCRYPT.to_vec();
    args.extend(["--s2k-count", "65536", "-o", "-"]);
    fs::write(&fixed, run_gpg(gpg, home, &args, &plain)?).unwrap();
    let target = dir.join(format!("{}-fixed", fixed.display()));
    let out = box_extract(dir, &fixed, &target);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    if &snapshot(&target) != want {
        return Err("the re-encrypted backup restored another tree".into());
    }
    Ok(())
}

/// RFC 9580's AEAD (SKESK v6 + SEIPD v2, as sq, rpgp, PGPainless and OpenPGP.js write it)
/// restores exactly: sequoia reads it, with OCB, EAX and GCM.
#[test]
fn rfc9580_seipd_v2_backups_restore_exactly() {
    use sequoia_openpgp::serialize::stream::{Encryptor, LiteralWriter, Message};
    use sequoia_openpgp::types::{AEADAlgorithm, SymmetricAlgorithm};
    use std::io::Write as _;
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    let tgz = seed_archive(&root);
    for aead in [AEADAlgorithm::OCB, AEADAlgorithm::EAX, AEADAlgorithm::GCM] {
        let enc = t.path().join(format!("v6-{aead:?}.tar.gz.gpg"));
        let mut sink = Vec::new();
        {
            let message = Message::new(&mut sink);
            let message = Encryptor::with_passwords(message, Some(PASS))
                .symmetric_algo(SymmetricAlgorithm::AES256)
                .aead_algo(aead)
                .build()
                .unwrap();
            let mut w = LiteralWriter::new(message).build().unwrap();
            w.write_all(&tgz).unwrap();
            w.finalize().unwrap();
        }
        // It really is RFC 9580's: an SKESK (tag 3) of version 6 first.
        assert_eq!((sink[0] & 0x3f, sink[2]), (3, 6), "{aead:?}");
        fs::write(&enc, &sink).unwrap();
        let target = t.path().join(format!("v6-{aead:?}-out"));
        let out = box_extract(t.path(), &enc, &target);
        assert!(
            out.status.success(),
            "{aead:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(snapshot(&target), snapshot(&root), "{aead:?}");
    }
}

/// The seed's archive of `root`: `tar czf - -C <root> .`.
fn seed_archive(root: &std::path::Path) -> Vec<u8> {
    let out = Command::new("tar")
        .args(["-czf", "-", "-C", root.to_str().unwrap(), "."])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
