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
            "pivot",
            "unsafe archive: archive link resolves outside the extraction root",
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

#[test]
fn decompression_bomb_is_refused_by_ratio() {
    let tar = good_tar(|b| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(32 << 20);
        b.append_data(
            &mut h,
            "home/agent/zeros",
            std::io::repeat(0).take(32 << 20),
        )
        .unwrap();
    });
    let limits = Limits {
        ratio_floor: 4 << 20,
        max_ratio: 100,
        ..Limits::default()
    };
    let err = validate(zstd(&tar).as_slice(), &limits).unwrap_err();
    assert_eq!(err.rule(), Some(Rule::CompressionRatio), "{err}");
    let err = validate(gzip(&tar).as_slice(), &limits).unwrap_err();
    assert_eq!(err.rule(), Some(Rule::CompressionRatio), "{err}");
    // A total-size cap too.
    let limits = Limits {
        max_total_bytes: 1 << 20,
        ..Limits::default()
    };
    let err = validate(zstd(&tar).as_slice(), &limits).unwrap_err();
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
