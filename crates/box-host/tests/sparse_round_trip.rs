//! `hb export` → `box extract` of a sparse source (issue 13): the sparse files come back
//! sparse (same logical bytes, same size, holes kept), not written out as zeros.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod sim_support;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;

use backup_support::*;

#[test]
fn hb_export_then_box_extract_keeps_sparse_files_sparse() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    let home = root.join("home/agent");
    // A 64 MiB file with data at its start, in its middle and a trailing hole, and one
    // with a map longer than the header's four entries (extension blocks).
    {
        let mut f = fs::File::create(home.join("disk.img")).unwrap();
        f.write_all(&[1u8; 5000]).unwrap();
        f.seek(SeekFrom::Start(32 << 20)).unwrap();
        f.write_all(b"middle").unwrap();
        f.set_len(64 << 20).unwrap();
        let mut g = fs::File::create(home.join("many-holes")).unwrap();
        for i in 0..40u64 {
            g.seek(SeekFrom::Start(i << 20)).unwrap();
            g.write_all(format!("run {i}").as_bytes()).unwrap();
        }
    }
    let before_disk = fs::metadata(home.join("disk.img")).unwrap();
    let holes = ["a TMPDIR on a filesystem that keeps holes".to_string()];
    if before_disk.blocks() * 512 >= 1 << 20 && !sim_support::require("sparse round trip", &holes) {
        return;
    }
    export(&root, &t.path().join("parts"), 1 << 20);
    let out = t.path().join("backups/alpha-20261129-120000.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &out, PASS);
    let sandbox = t.path().join("sandbox");
    fs::create_dir_all(&sandbox).unwrap();
    let target = t.path().join("restored");
    let done = box_cmd(&sandbox)
        .env("BOX_PASSPHRASE", PASS)
        .arg("extract")
        .arg(&out)
        .arg(&target)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    for name in ["disk.img", "many-holes"] {
        let a = home.join(name);
        let b = target.join("home/agent").join(name);
        assert_eq!(
            fs::read(&a).unwrap(),
            fs::read(&b).unwrap(),
            "{name}: bytes"
        );
        let (ma, mb) = (fs::metadata(&a).unwrap(), fs::metadata(&b).unwrap());
        assert_eq!(ma.len(), mb.len(), "{name}: size");
        assert!(
            mb.blocks() <= ma.blocks() + 8,
            "{name}: {} blocks restored, {} in the source: holes were filled",
            mb.blocks(),
            ma.blocks()
        );
    }
    // The rest of the sample tree is as it was.
    let want = expected_after_excludes(&root);
    let got = snapshot(&target);
    assert_eq!(got, want);
}
