//! The hostile-archive corpus: every case rejected with its rule, nothing extracted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use std::fs;
use std::path::Path;
use std::process::Command;

use backup_support::*;
use box_proto::archive::validate::{Limits, Rule, validate};

fn corpus(dir: &Path) -> Vec<(String, String)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/backup_support/hostile.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(dir)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once('\t').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect()
}

#[test]
fn every_hostile_case_is_rejected_with_its_rule_zstd_and_gzip() {
    let t = tempfile::tempdir().unwrap();
    let cases = corpus(t.path());
    assert!(cases.len() >= 30, "{}", cases.len());
    for (name, reason) in &cases {
        if reason == "KEPT" {
            continue;
        }
        let tar = fs::read(t.path().join(format!("{name}.tar"))).unwrap();
        for (kind, compressed) in [("zstd", zstd(&tar)), ("gzip", gzip(&tar))] {
            let err = validate(compressed.as_slice(), &Limits::default())
                .err()
                .unwrap_or_else(|| panic!("{name} ({kind}) was accepted"));
            let msg = err.to_string();
            assert!(msg.starts_with("unsafe archive: "), "{name}: {msg}");
            assert!(
                msg.contains(reason.as_str()),
                "{name} ({kind}): expected {reason:?}, got {msg:?}"
            );
        }
    }
    // The global-header bomb is refused fast, before its members cost anything.
    let bomb = zstd(&fs::read(t.path().join("pax-global-bomb.tar")).unwrap());
    let started = std::time::Instant::now();
    let err = validate(bomb.as_slice(), &Limits::default()).unwrap_err();
    assert_eq!(err.rule(), Some(Rule::GlobalHeaders), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    let good = fs::read(t.path().join("GOOD.tar")).unwrap();
    let report = validate(zstd(&good).as_slice(), &Limits::default()).unwrap();
    assert_eq!(report.members, 7);
}

#[test]
fn box_extract_rejects_before_extracting_anything() {
    let t = tempfile::tempdir().unwrap();
    corpus(t.path());
    let backups = t.path().join("backups");
    fs::create_dir(&backups).unwrap();
    for (name, reason) in [
        (
            "hardlink-absolute",
            "unsafe archive: archive hardlink target is not a member name (absolute, or with ..): ./home/agent/h -> /etc/shadow",
        ),
        (
            "fifo",
            "unsafe archive: archive contains a device, FIFO, socket, or unknown special file: ./home/agent/fifo",
        ),
        (
            "file-beneath-linked-parent",
            "unsafe archive: archive member is nested beneath a link: home/agent/up/owned",
        ),
    ] {
        let tar = fs::read(t.path().join(format!("{name}.tar"))).unwrap();
        let f = backups.join(format!("{name}.tar.zst.gpg"));
        encrypt_bytes(&zstd(&tar), &f, PASS);
        let target = t.path().join(format!("{name}-out"));
        let before = listing(t.path());
        let out = box_cmd(t.path())
            .env("BOX_PASSPHRASE", PASS)
            .arg("extract")
            .arg(&f)
            .arg(&target)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(reason), "{name}: {err}");
        assert!(!target.exists());
        assert_eq!(listing(t.path()), before, "{name} left something behind");
    }
}

/// The symlinks the seed refused for where they point are data: each validates, and `box
/// extract` makes each with exactly its target.
#[test]
fn symlinks_anywhere_validate_and_extract_verbatim() {
    let t = tempfile::tempdir().unwrap();
    let cases = corpus(t.path());
    let kept: Vec<&String> = cases
        .iter()
        .filter(|(_, r)| r == "KEPT")
        .map(|(n, _)| n)
        .collect();
    assert!(kept.len() >= 7, "{kept:?}");
    let backups = t.path().join("backups");
    fs::create_dir(&backups).unwrap();
    for name in kept {
        let tar = fs::read(t.path().join(format!("{name}.tar"))).unwrap();
        validate(zstd(&tar).as_slice(), &Limits::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let f = backups.join(format!("{name}.tar.zst.gpg"));
        encrypt_bytes(&zstd(&tar), &f, PASS);
        let target = t.path().join(format!("{name}-out"));
        extract_ok(box_cmd(t.path()), &f, &target, name);
        // Every symlink of the archive, as GNU tar lists it, is one with that target.
        let mut archive = tar::Archive::new(tar.as_slice());
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            if entry.header().entry_type() != tar::EntryType::Symlink {
                continue;
            }
            let path = target.join(entry.path().unwrap());
            let want = entry.link_name_bytes().unwrap().into_owned();
            let got = fs::read_link(&path).unwrap_or_else(|e| panic!("{name}: {path:?}: {e}"));
            use std::os::unix::ffi::OsStrExt;
            assert_eq!(got.as_os_str().as_bytes(), want.as_slice(), "{name}");
        }
    }
}

/// A backup whose links point at a file outside the target: `box extract`, as root and
/// as another user, makes the links and never changes what they point at (owner, mode,
/// times, bytes), nor writes through one.
#[test]
fn box_extract_never_follows_a_link_it_made() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let t = tempfile::tempdir().unwrap();
    // Everyone may pass through: the second run is as nobody.
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let victim_dir = t.path().join("victim");
    fs::create_dir(&victim_dir).unwrap();
    let victim = victim_dir.join("shadow");
    fs::write(&victim, "root:secret\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let victim_s = victim.to_str().unwrap().to_string();
    let tar = good_tar(|b| {
        for (name, target) in [
            ("./home/agent/x", victim_s.as_str()),
            ("./home/agent/d", victim_dir.to_str().unwrap()),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(0o777);
            h.set_mtime(1);
            h.set_size(0);
            b.append_link(&mut h, name, target).unwrap();
        }
    });
    let state = |p: &Path| {
        let m = fs::symlink_metadata(p).unwrap();
        (m.mode(), m.uid(), m.gid(), m.mtime(), m.mtime_nsec())
    };
    let root = nix::unistd::geteuid().is_root();
    let runs: &[(&str, Option<u32>)] = if root {
        &[("as-root", None), ("as-nobody", Some(65534))]
    } else {
        &[("as-user", None)]
    };
    for (label, uid) in runs {
        let work = t.path().join(label);
        fs::create_dir(&work).unwrap();
        if let Some(uid) = uid {
            nix::unistd::chown(&work, Some((*uid).into()), Some((*uid).into())).unwrap();
            // The victim belongs to that user, as a user's own file would.
            for p in [&victim, &victim_dir] {
                nix::unistd::chown(p.as_path(), Some((*uid).into()), Some((*uid).into())).unwrap();
            }
        }
        let before = (
            state(&victim),
            state(&victim_dir),
            fs::read(&victim).unwrap(),
        );
        let f = work.join("hostile.tar.zst.gpg");
        encrypt_bytes(&zstd(&tar), &f, PASS);
        if let Some(uid) = uid {
            nix::unistd::chown(&f, Some((*uid).into()), Some((*uid).into())).unwrap();
        }
        let target = work.join("out");
        let mut cmd = box_cmd(&work);
        if let Some(uid) = uid {
            use std::os::unix::process::CommandExt;
            cmd.uid(*uid).gid(*uid);
        }
        extract_ok(cmd, &f, &target, label);
        assert_eq!(
            fs::read_link(target.join("home/agent/x")).unwrap(),
            victim,
            "{label}"
        );
        let after = (
            state(&victim),
            state(&victim_dir),
            fs::read(&victim).unwrap(),
        );
        assert_eq!(after, before, "{label}: the link's target changed");
    }
}

/// `box extract FILE TARGET` through `cmd`, which must succeed.
fn extract_ok(mut cmd: Command, file: &Path, target: &Path, what: &str) {
    let out = cmd
        .env("BOX_PASSPHRASE", PASS)
        .arg("extract")
        .arg(file)
        .arg(target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn good_tar(extra: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for d in ["./", "./home/", "./home/agent/"] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, d, std::io::empty()).unwrap();
    }
    extra(&mut b);
    b.into_inner().unwrap()
}

/// A file of zeros compresses a thousandfold and more: that is ordinary data (a `dd`-made
/// image), not a bomb. It used to be refused by a ratio guard, so a box holding one had
/// no backup; what protects a destination now is the room left there (unpack's tests).
#[test]
fn a_file_of_zeros_validates_and_the_total_cap_still_holds() {
    let tar = good_tar(|b| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(400 << 20);
        b.append_data(
            &mut h,
            "home/agent/zeros",
            std::io::repeat(0).take(400 << 20),
        )
        .unwrap();
    });
    let z = zstd(&tar);
    assert!(z.len() * 1000 < tar.len(), "{} from {}", z.len(), tar.len());
    let report = validate(z.as_slice(), &Limits::default()).unwrap();
    assert_eq!(report.files, 1);
    assert!(validate(gzip(&tar).as_slice(), &Limits::default()).is_ok());
    let limits = Limits {
        max_total_bytes: 1 << 20,
        ..Limits::default()
    };
    let err = validate(z.as_slice(), &limits).unwrap_err();
    assert_eq!(err.rule(), Some(Rule::TooLarge), "{err}");
}

use std::io::Read as _;

#[test]
fn too_many_members_is_refused() {
    let tar = good_tar(|b| {
        for i in 0..20 {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(0);
            b.append_data(&mut h, format!("home/agent/f{i}"), std::io::empty())
                .unwrap();
        }
    });
    let limits = Limits {
        max_members: 10,
        ..Limits::default()
    };
    let err = validate(zstd(&tar).as_slice(), &limits).unwrap_err();
    assert_eq!(err.rule(), Some(Rule::TooManyMembers), "{err}");
    assert!(validate(zstd(&tar).as_slice(), &Limits::default()).is_ok());
}

#[test]
fn corrupt_footers_truncation_and_trailing_data_fail() {
    let tar = good_tar(|b| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        h.set_size(data.len() as u64);
        b.append_data(&mut h, "home/agent/data", data.as_slice())
            .unwrap();
    });
    let z = zstd(&tar);
    let g = gzip(&tar);
    assert!(validate(z.as_slice(), &Limits::default()).is_ok());
    assert!(validate(g.as_slice(), &Limits::default()).is_ok());
    let flip = |mut v: Vec<u8>, at: usize| {
        v[at] ^= 0x01;
        v
    };
    // zstd content checksum (last 4 bytes), gzip CRC32 (bytes -8..-4) and ISIZE (last 4).
    for (what, bad) in [
        ("zstd checksum", flip(z.clone(), z.len() - 2)),
        ("gzip crc", flip(g.clone(), g.len() - 6)),
        ("gzip isize", flip(g.clone(), g.len() - 1)),
        ("zstd truncated", z[..z.len() - 10].to_vec()),
        ("gzip truncated", g[..g.len() - 10].to_vec()),
        (
            "zstd trailing garbage",
            [z.clone(), b"garbage".to_vec()].concat(),
        ),
        (
            "gzip trailing garbage",
            [g.clone(), b"garbage!".to_vec()].concat(),
        ),
        ("not compressed", tar.clone()),
        ("empty", Vec::new()),
    ] {
        let err = validate(bad.as_slice(), &Limits::default())
            .err()
            .unwrap_or_else(|| panic!("{what} accepted"));
        assert!(
            err.to_string().starts_with("not a valid archive"),
            "{what}: {err}"
        );
    }
    // Data hidden after the end-of-archive marker.
    let mut hidden = tar.clone();
    let mut extra = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(1);
    extra
        .append_data(&mut h, "home/agent/hidden", &b"x"[..])
        .unwrap();
    hidden.extend(extra.into_inner().unwrap());
    let err = validate(zstd(&hidden).as_slice(), &Limits::default()).unwrap_err();
    assert!(
        err.to_string().contains("after the end-of-archive marker"),
        "{err}"
    );
}

/// A tar of what ordinary boxes hold: a hostile 0777 root, a sticky and a setgid
/// directory, a set-uid file and 400 MiB of dense zeros.
fn ordinary_box_tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add =
        |name: &str, kind: tar::EntryType, mode: u32, data: &mut dyn std::io::Read, size: u64| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(size);
            h.set_mtime(1_700_000_000);
            b.append_data(&mut h, name, data).unwrap();
        };
    let dir = tar::EntryType::Directory;
    let file = tar::EntryType::Regular;
    add("./", dir, 0o777, &mut std::io::empty(), 0);
    add("./home/", dir, 0o755, &mut std::io::empty(), 0);
    add("./home/agent/", dir, 0o700, &mut std::io::empty(), 0);
    add("./home/agent/tmp/", dir, 0o1777, &mut std::io::empty(), 0);
    add(
        "./home/agent/shared/",
        dir,
        0o2775,
        &mut std::io::empty(),
        0,
    );
    add(
        "./home/agent/tool",
        file,
        0o4755,
        &mut &b"#!/bin/sh\n"[..],
        10,
    );
    add(
        "./home/agent/disk.img",
        file,
        0o644,
        &mut std::io::repeat(0).take(400 << 20),
        400 << 20,
    );
    b.into_inner().unwrap()
}

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(p).unwrap().blocks() * 512
}

/// `box extract` as root and as a user, on the path users take: every mode bit as GNU tar
/// restores it (`-p` for the user; as root set-id files lose their bits), the target keeps
/// the user's own mode whatever the archive's root says, 400 MiB of zeros come back as
/// holes (the ratio guard refused them before issue 21) even into a 48 MiB filesystem,
/// and data that does not fit stops with the room named and nothing left behind.
#[test]
fn box_extract_restores_modes_and_zeros_and_stops_at_the_room_left() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").is_err(),
            "this test needs root under CI"
        );
        eprintln!("SKIPPED: box extract as root and as a user needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let backup = t.path().join("alpha-20261201-000000.tar.zst.gpg");
    encrypt_bytes(&zstd(&ordinary_box_tar()), &backup, PASS);
    fs::set_permissions(&backup, fs::Permissions::from_mode(0o644)).unwrap();
    // Run through `sh` to give box a known umask: the target must get 0750 from it, not
    // the archive root's 0777.
    let extract = |target: &Path, as_user: bool, mount_tmpfs: Option<&Path>| {
        let mut script = String::from("umask 027\n");
        if let Some(dir) = mount_tmpfs {
            script.push_str(&format!(
                "mkdir -p '{0}' && mount -t tmpfs -o size=48m,mode=0777 tmpfs '{0}' || exit 99\n",
                dir.display()
            ));
        }
        let runner = if as_user {
            "setpriv --reuid=65534 --regid=65534 --clear-groups "
        } else {
            ""
        };
        script.push_str(&format!(
            "{runner}\"$0\" extract '{}' '{}'; rc=$?\n",
            backup.display(),
            target.display()
        ));
        if let Some(dir) = mount_tmpfs {
            // What the extraction left, then the filesystem goes with the namespace.
            script.push_str(&format!(
                "echo LEFT:; ls -A '{}'; exit $rc\n",
                dir.display()
            ));
        } else {
            script.push_str("exit $rc\n");
        }
        let mut c = box_cmd(t.path());
        c.env("BOX_PASSPHRASE", PASS);
        let (prog, args): (&str, Vec<String>) = match mount_tmpfs {
            Some(_) => (
                "unshare",
                vec![
                    "-m".into(),
                    "sh".into(),
                    "-c".into(),
                    script,
                    env!("CARGO_BIN_EXE_box").into(),
                ],
            ),
            None => (
                "sh",
                vec!["-c".into(), script, env!("CARGO_BIN_EXE_box").into()],
            ),
        };
        // box_cmd's clean environment, for the shell that runs box.
        Command::new(prog)
            .args(args)
            .env_clear()
            .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
            .current_dir(t.path())
            .output()
            .unwrap()
    };
    for (who, as_user) in [("root", false), ("user", true)] {
        let target = t.path().join(format!("out-{who}"));
        let out = extract(&target, as_user, None);
        assert!(
            out.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let h = target.join("home/agent");
        assert_eq!(
            mode_of(&target),
            0o750,
            "{who}: the target keeps the user's own mode"
        );
        assert_eq!(mode_of(&h.join("tmp")), 0o1777, "{who}");
        assert_eq!(mode_of(&h.join("shared")), 0o2775, "{who}");
        let tool = if as_user { 0o4755 } else { 0o755 };
        assert_eq!(mode_of(&h.join("tool")), tool, "{who}");
        let img = h.join("disk.img");
        assert_eq!(fs::metadata(&img).unwrap().len(), 400 << 20, "{who}");
        assert!(
            allocated(&img) < 1 << 20,
            "{who}: {} bytes allocated",
            allocated(&img)
        );
        let mut f = fs::File::open(&img).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            assert!(buf[..n].iter().all(|b| *b == 0), "{who}");
        }
    }
    // Into a 48 MiB filesystem: the zeros fit as holes.
    let small = t.path().join("small");
    let out = extract(&small.join("out"), false, Some(&small));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 64 MiB that do not compress do not fit: refused with the room, nothing left.
    let noise: Vec<u8> = {
        let mut x: u64 = 0x9E3779B97F4A7C15;
        (0..64u32 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let noisy = good_tar(|b| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(noise.len() as u64);
        b.append_data(&mut h, "home/agent/noise", noise.as_slice())
            .unwrap();
    });
    fs::remove_file(&backup).unwrap();
    encrypt_bytes(&zstd(&noisy), &backup, PASS);
    fs::set_permissions(&backup, fs::Permissions::from_mode(0o644)).unwrap();
    let out = extract(&small.join("out"), false, Some(&small));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("not enough room in"), "{err}");
    assert!(err.contains("is kept free (the margin)"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let left = stdout.split_once("LEFT:").map(|(_, l)| l.trim());
    assert_eq!(
        left,
        Some(""),
        "the extraction left something behind: {stdout}"
    );
}
