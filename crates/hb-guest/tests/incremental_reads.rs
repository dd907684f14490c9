//! The change detection of an incremental export reads metadata only: an unchanged
//! 100 MB file is not read at all (the bytes this process read, /proc/self/io's `rchar`,
//! grow by far less than its size), while the full export before it did read it (so the
//! counter sees reads). Alone in its test binary: no other test's reads are counted.
//! (A same-second same-size rewrite is caught by the ctime: tests/incremental.rs and
//! archive::incremental's unit test.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod export_import_support;

use std::fs;
use std::io::Write;
use std::path::Path;

use export_import_support::data_root;
use hb_guest::archive::export::{ChainOptions, ExportOptions, export};
use hb_guest::archive::incremental::{self, next_path};

/// Bytes this process has read through read(2) and friends so far.
fn rchar() -> u64 {
    let io = fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A chain-mode export of `src` into `out` (on the committed snapshot when `parent`),
/// committed under its digest; returns the digest and how many bytes were read.
fn link(src: &Path, out: &Path, parent: Option<&str>) -> (String, u64, usize) {
    let current = src.join(box_proto::layout::BACKUP_SNAPSHOT).join("current");
    let parent = parent.and_then(|d| incremental::parent_for(&current, d, 24).unwrap().0);
    let mut opts = ExportOptions::new(src, out, 64 << 20);
    opts.chain = Some(ChainOptions {
        parent,
        record: next_path(&current),
    });
    let before = rchar();
    let summary = export(&opts, Box::new(|_| {})).unwrap();
    let read = rchar() - before;
    let digest = hex::encode(summary.index.total_sha256.unwrap());
    incremental::commit(&current, &digest).unwrap();
    (digest, read, summary.index.parts.len())
}

#[test]
fn an_incremental_export_does_not_read_unchanged_files() {
    const BIG: u64 = 100 << 20;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let w = data_root(&src);
    {
        // Written data (no holes to skip), quick to compress.
        let mut f = fs::File::create(w.join("big.bin")).unwrap();
        let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8 + 1).collect();
        for _ in 0..(BIG >> 20) {
            f.write_all(&block).unwrap();
        }
    }
    fs::write(w.join("small.txt"), "v1\n").unwrap();

    let (d0, full_read, _) = link(&src, &t.path().join("l0"), None);
    assert!(
        full_read >= BIG,
        "the full export read the big file: {full_read} bytes read"
    );
    fs::write(w.join("small.txt"), "v2, changed\n").unwrap();
    let (_, inc_read, _) = link(&src, &t.path().join("l1"), Some(&d0));
    eprintln!("read: full {full_read} bytes, incremental {inc_read} bytes");
    assert!(
        inc_read < BIG / 10,
        "the incremental export read {inc_read} bytes: the unchanged 100 MB file was read"
    );
}
