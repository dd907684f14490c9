//! `hb import --follow`: the parts arrive while the import runs, as `box load` copies them
//! in (box_proto::archive::follow). A thread plays the host: it copies each part of a
//! finished export into the import's directory in pieces, then its marker, then the index
//! and the end marker, with delays. The import restores exactly, takes no half-written
//! marker, removes each part it took, and refuses (stage gone, the root untouched) a
//! damaged part, a marker naming the wrong part, an index unlike what arrived, and a host
//! that stops before the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod export_import_support;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use box_proto::archive::follow::{END_MARKER, EndMarker, ready_marker};
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex};
use export_import_support::{backdate, build, snapshot, without_mode_of};
use hb_guest::archive::follow::Follow;
use hb_guest::archive::import::{STAGE_PREFIX, import_following};

/// A tree of a few files that do not compress much: several parts of [`PART`] bytes.
fn sample(root: &Path, seed: u8) {
    build(root, &[]);
    let work = root.join("home/agent/workspace");
    fs::create_dir_all(&work).unwrap();
    let mut x = u32::from(seed) * 7919 + 1;
    for f in 0..4 {
        let bytes: Vec<u8> = (0..3000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        fs::write(work.join(format!("f{f}.bin")), bytes).unwrap();
    }
    fs::write(root.join("logs/x.log"), format!("log {seed}\n")).unwrap();
    backdate(root);
}

const PART: u64 = 2000;

/// A finished export of `src` (chain mode, against `parent`'s snapshot when given) in
/// `out`: its index, and the digest the next link names.
fn exported(src: &Path, out: &Path, parent: Option<&str>) -> (PartIndex, String) {
    let (summary, digest) = export_import_support::chain_link(src, out, parent, PART, None);
    (summary.index, digest)
}

/// What the host thread does wrong, if anything.
#[derive(Clone, Copy, Default)]
struct Host {
    /// Flip a byte of this part (its marker keeps the true hash).
    damage: Option<usize>,
    /// Write this part's marker with the next part's line.
    misname: Option<usize>,
    /// Stop after the index, never writing the end marker.
    no_end: bool,
    /// The end marker counts one part more than were sent.
    end_miscounts: bool,
}

/// Writes `bytes` to `path` in place, in two halves with a pause: a reader that looks in
/// between sees half a file under its name (as `machine cp` may leave it).
fn write_in_place(path: &Path, bytes: &[u8], pause: Duration) {
    let mut f = fs::File::create(path).unwrap();
    let half = bytes.len() / 2;
    f.write_all(&bytes[..half]).unwrap();
    f.flush().unwrap();
    std::thread::sleep(pause);
    f.write_all(&bytes[half..]).unwrap();
}

/// The host's side for one directory: each part of the export in `from`, then its marker,
/// then the index and the end marker. Returns, for each part, whether the import had left
/// it alone while its marker was half written.
fn feed(from: &Path, to: &Path, index: &PartIndex, host: Host) -> Vec<bool> {
    let mut untouched = Vec::new();
    for (i, part) in index.parts.iter().enumerate() {
        let mut bytes = fs::read(from.join(&part.name)).unwrap();
        if host.damage == Some(i) {
            bytes[5] ^= 1;
        }
        write_in_place(&to.join(&part.name), &bytes, Duration::from_millis(5));
        let named: &Part = match host.misname {
            Some(m) if m == i => &index.parts[i + 1],
            _ => part,
        };
        let marker = format!("{}\n", named.render_ready());
        let marker_path = to.join(ready_marker(&part.name));
        let mut f = fs::File::create(&marker_path).unwrap();
        // All of the line but its break, for long enough that a reader that took it
        // would have read and removed the part.
        f.write_all(&marker.as_bytes()[..marker.len() - 1]).unwrap();
        f.flush().unwrap();
        std::thread::sleep(Duration::from_millis(60));
        untouched.push(to.join(&part.name).exists() && marker_path.exists());
        f.write_all(b"\n").unwrap();
        drop(f);
    }
    write_in_place(
        &to.join(INDEX_FILE),
        index.render().as_bytes(),
        Duration::from_millis(5),
    );
    if !host.no_end {
        let end = EndMarker {
            parts: index.parts.len() + usize::from(host.end_miscounts),
            total: index.total_size,
        };
        write_in_place(
            &to.join(END_MARKER),
            end.render().as_bytes(),
            Duration::from_millis(5),
        );
    }
    untouched
}

/// The import's stdout, shared with the test.
#[derive(Clone, Default)]
struct Out(Arc<Mutex<Vec<u8>>>);

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Out {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

struct Run {
    result: anyhow::Result<hb_guest::archive::import::ImportSummary>,
    said: String,
    fed: Vec<Vec<bool>>,
}

/// Imports the exports in `links` (each with its index) into `dst` while a thread feeds
/// each into an empty directory of its own, in order.
fn follow_import(
    t: &Path,
    dst: &Path,
    links: &[(PathBuf, PartIndex)],
    host: Host,
    patience: Duration,
) -> Run {
    let dirs: Vec<PathBuf> = (0..links.len())
        .map(|i| {
            let d = t.join(format!("in-{i}"));
            fs::create_dir(&d).unwrap();
            d
        })
        .collect();
    let out = Out::default();
    let mut stdout = out.clone();
    let feeding = {
        let links = links.to_vec();
        let dirs = dirs.clone();
        std::thread::spawn(move || {
            links
                .iter()
                .zip(&dirs)
                .map(|((from, index), to)| feed(from, to, index, host))
                .collect::<Vec<_>>()
        })
    };
    let result = import_following(
        dst,
        &dirs,
        Follow {
            out: &mut stdout,
            patience,
        },
    );
    let fed = feeding.join().unwrap();
    Run {
        result,
        said: out.text(),
        fed,
    }
}

fn comparable(root: &Path) -> export_import_support::Snapshot {
    let mut s = snapshot(root);
    s.remove("home/agent/.config/hermes-box/quiesced");
    s.remove("home/agent/.config/hermes-box");
    s.remove(box_proto::layout::BACKUP_SNAPSHOT);
    s.retain(|k, _| !k.starts_with(box_proto::layout::BACKUP_SNAPSHOT));
    without_mode_of(s, &["home"])
}

fn leftovers(root: &Path) -> Vec<String> {
    fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(STAGE_PREFIX) || n.starts_with(".hb-restore"))
        .collect()
}

/// One full export of a sample tree, and an existing root to restore into.
fn setup(t: &Path) -> (PathBuf, PathBuf, PartIndex, PathBuf) {
    let src = t.join("src");
    sample(&src, 1);
    let out = t.join("export-0");
    let (index, _) = exported(&src, &out, None);
    assert!(index.parts.len() >= 3, "several parts");
    let dst = t.join("dst");
    fs::create_dir_all(dst.join("home/agent")).unwrap();
    fs::write(dst.join("home/agent/keep.txt"), "keep").unwrap();
    (src, out, index, dst)
}

#[test]
fn parts_that_arrive_while_it_runs_restore_exactly_and_are_removed_once_taken() {
    let t = tempfile::tempdir().unwrap();
    let (src, out, index, dst) = setup(t.path());
    let run = follow_import(
        t.path(),
        &dst,
        &[(out, index.clone())],
        Host::default(),
        Duration::from_secs(30),
    );
    let summary = run.result.unwrap();
    assert_eq!(summary.index, index);
    assert_eq!(comparable(&dst), comparable(&src));
    assert!(!dst.join("home/agent/keep.txt").exists());
    assert!(leftovers(&dst).is_empty());
    // No half-written marker was taken: each part stayed until its marker was whole.
    assert!(run.fed[0].iter().all(|&u| u), "{:?}", run.fed);
    // It said each part it took, in order, and left none of them (nor their markers).
    let taken: Vec<&str> = run
        .said
        .lines()
        .filter(|l| l.starts_with("part-taken "))
        .collect();
    let want: Vec<String> = index
        .parts
        .iter()
        .map(|p| format!("part-taken {}", p.name))
        .collect();
    assert_eq!(taken, want);
    let mut left: Vec<String> = fs::read_dir(t.path().join("in-0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [END_MARKER, INDEX_FILE]);
}

#[test]
fn a_chain_of_two_directories_restores_its_last_tree() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    sample(&src, 1);
    let (index0, d0) = exported(&src, &t.path().join("export-0"), None);
    // The second link: one file changed, one gone, one new.
    let work = src.join("home/agent/workspace");
    fs::write(work.join("f1.bin"), vec![9u8; 5000]).unwrap();
    fs::remove_file(work.join("f2.bin")).unwrap();
    fs::write(work.join("new.txt"), "new").unwrap();
    let (index1, _) = exported(&src, &t.path().join("export-1"), Some(&d0));
    assert!(index0.parts.len() >= 3 && !index1.parts.is_empty());
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    let run = follow_import(
        t.path(),
        &dst,
        &[
            (t.path().join("export-0"), index0),
            (t.path().join("export-1"), index1),
        ],
        Host::default(),
        Duration::from_secs(30),
    );
    run.result.unwrap();
    let (got, want) = (comparable(&dst), comparable(&src));
    let names = |s: &export_import_support::Snapshot| s.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&got), names(&want));
    for (k, v) in &want {
        assert_eq!((got[k].0, &got[k].2), (v.0, &v.2), "{k}");
    }
    assert!(!dst.join("home/agent/workspace/f2.bin").exists());
}

/// The root after a refused import: as it was, with no stage left.
fn refused(host: Host, patience: Duration, expect: &str) {
    let t = tempfile::tempdir().unwrap();
    let (_, out, index, dst) = setup(t.path());
    let before = snapshot(&dst);
    let run = follow_import(t.path(), &dst, &[(out, index)], host, patience);
    let err = format!("{:#}", run.result.unwrap_err());
    assert!(err.contains(expect), "{err}");
    // Said as what it is, not as a damaged archive.
    assert!(!err.contains("corrupt compressed stream"), "{err}");
    assert_eq!(snapshot(&dst), before, "the root was touched");
    assert!(leftovers(&dst).is_empty(), "{:?}", leftovers(&dst));
}

#[test]
fn a_part_unlike_its_marker_discards_the_stage() {
    refused(
        Host {
            damage: Some(1),
            ..Host::default()
        },
        Duration::from_secs(30),
        "part-000001 does not match the index",
    );
}

#[test]
fn a_marker_naming_another_part_is_refused() {
    refused(
        Host {
            misname: Some(1),
            ..Host::default()
        },
        Duration::from_secs(30),
        "part-000001.ready names part-000002 where part-000001 was next",
    );
}

#[test]
fn an_end_marker_unlike_what_arrived_is_refused() {
    refused(
        Host {
            end_miscounts: true,
            ..Host::default()
        },
        Duration::from_secs(30),
        "end.ready says",
    );
}

#[test]
fn a_host_that_stops_before_the_end_fails_it_after_its_patience() {
    refused(
        Host {
            no_end: true,
            ..Host::default()
        },
        Duration::from_millis(400),
        "no part arrived",
    );
}
