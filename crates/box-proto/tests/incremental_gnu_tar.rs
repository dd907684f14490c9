//! The dumpdir format against stock GNU tar, both ways: what `tar -g` writes parses as
//! box reads it, and what box writes, `tar -x -g /dev/null` applies — deleting exactly
//! what [`Dumpdir::purge`] says (a deleted file, a deleted directory, a directory that
//! became a file, a file that became a directory, a directory that became a symlink).
//! Needs GNU tar; without it the test says SKIPPED (and fails under CI=true).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use box_proto::archive::incremental::{Code, DUMPDIR_TYPE, Dumpdir};

fn gnu_tar() -> bool {
    let ok = Command::new("tar")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("GNU tar"));
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "GNU tar is needed (scripts/setup.sh installs it)"
        );
        println!("SKIPPED: GNU tar not found");
    }
    ok
}

fn sh(dir: &Path, script: &str) {
    let st = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "{script}");
}

/// Every dumpdir in a tar: directory name → its entries.
fn dumpdirs(tar_file: &Path) -> BTreeMap<String, Dumpdir> {
    let mut archive = tar::Archive::new(std::fs::File::open(tar_file).unwrap());
    let mut out = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().as_byte() != DUMPDIR_TYPE {
            continue;
        }
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        out.insert(name, Dumpdir::parse(&data).unwrap());
    }
    out
}

fn codes(d: &Dumpdir) -> Vec<(char, String)> {
    d.entries()
        .iter()
        .map(|(c, n)| {
            (
                char::from(c.byte()),
                String::from_utf8_lossy(n).into_owned(),
            )
        })
        .collect()
}

#[test]
fn gnu_tar_level_one_archives_parse_as_box_reads_them() {
    if !gnu_tar() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // `new` is made before `gone` goes: a directory on a reused inode is a rename to GNU
    // tar (an `R` code, which box never writes), and the test would be about inode reuse.
    sh(
        d.path(),
        "mkdir -p t/sub t/gone && echo a > t/a && echo b > t/b && echo c > t/sub/c && echo g > t/gone/g \
         && tar -c -g snap -f full.tar -C t . \
         && sleep 1 && echo changed > t/a && rm t/b && mkdir t/new && echo n > t/new/n && rm -r t/gone && ln -s a t/gone \
         && tar -c -g snap -f inc.tar -C t .",
    );
    let dirs = dumpdirs(&d.path().join("inc.tar"));
    let root = dirs
        .get("./")
        .or_else(|| dirs.get("."))
        .expect("the root's dumpdir");
    assert_eq!(
        codes(root),
        vec![
            ('Y', "a".into()),
            ('Y', "gone".into()),
            ('D', "new".into()),
            ('D', "sub".into()),
        ],
        "b deleted (not listed), gone now a link (Y), a changed (Y)"
    );
    let sub = dirs
        .get("./sub/")
        .or_else(|| dirs.get("./sub"))
        .expect("sub's dumpdir");
    assert_eq!(
        codes(sub),
        vec![('N', "c".into())],
        "unchanged c not archived"
    );
}

/// A GNU header for `name` (written byte for byte: the tar crate would drop `./`).
fn header(name: &str, kind: u8, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(1_000_000_000);
    h.set_cksum();
    h
}

#[test]
fn gnu_tar_applies_box_dumpdirs_as_purge_predicts() {
    if !gnu_tar() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    sh(
        d.path(),
        "mkdir -p out/deleted-dir out/was-dir out/linked-dir/x && echo k > out/kept && echo y > out/deleted \
         && echo f > out/was-file && echo x > out/deleted-dir/x",
    );
    let root = Dumpdir::new([
        (Code::Unchanged, b"kept".to_vec()),
        (Code::Included, b"new".to_vec()),
        (Code::Included, b"was-dir".to_vec()),
        (Code::Directory, b"was-file".to_vec()),
        (Code::Included, b"linked-dir".to_vec()),
    ])
    .unwrap();
    let present: Vec<(&[u8], bool)> = vec![
        (b"kept", false),
        (b"deleted", false),
        (b"deleted-dir", true),
        (b"was-dir", true),
        (b"was-file", false),
        (b"linked-dir", true),
    ];
    let mut predicted: Vec<String> = root
        .purge(present)
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    predicted.sort();
    assert_eq!(
        predicted,
        [
            "deleted",
            "deleted-dir",
            "linked-dir",
            "was-dir",
            "was-file"
        ]
    );

    let mut b = tar::Builder::new(Vec::new());
    let data = root.render();
    b.append(
        &header("./", DUMPDIR_TYPE, data.len() as u64, 0o755),
        &data[..],
    )
    .unwrap();
    b.append(&header("./new", b'0', 4, 0o644), &b"new\n"[..])
        .unwrap();
    b.append(&header("./was-dir", b'0', 5, 0o644), &b"file\n"[..])
        .unwrap();
    let sub = Dumpdir::new([(Code::Included, b"inner".to_vec())])
        .unwrap()
        .render();
    b.append(
        &header("./was-file/", DUMPDIR_TYPE, sub.len() as u64, 0o755),
        &sub[..],
    )
    .unwrap();
    b.append(&header("./was-file/inner", b'0', 3, 0o644), &b"in\n"[..])
        .unwrap();
    let mut link = header("./linked-dir", b'2', 0, 0o777);
    link.set_link_name("kept").unwrap();
    link.set_cksum();
    b.append(&link, &[][..]).unwrap();
    std::fs::write(d.path().join("ours.tar"), b.into_inner().unwrap()).unwrap();

    sh(d.path(), "tar -x -g /dev/null -f ours.tar -C out");
    let listing = Command::new("sh")
        .arg("-c")
        .arg(
            "cd out && find . | sort && cat kept new was-dir was-file/inner && readlink linked-dir",
        )
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listing.stdout),
        ".\n./kept\n./linked-dir\n./new\n./was-dir\n./was-file\n./was-file/inner\nk\nnew\nfile\nin\nkept\n"
    );
}
