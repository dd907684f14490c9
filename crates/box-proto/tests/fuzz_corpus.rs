#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Replays the checked-in fuzz corpus (`fuzz/corpus/<target>/`) and every minimised crash
//! (`fuzz/regressions/<target>/`) through the fuzz target bodies, on stable Rust, so CI
//! keeps each fixed bug fixed without running libFuzzer. `just fuzz` does the fuzzing.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn replay(kind: &str, min_files: usize) {
    let mut total = 0;
    for (target, body) in box_proto::fuzzing::TARGETS {
        let dir = fuzz_dir().join(kind).join(target);
        let inputs = files(&dir);
        assert!(
            inputs.len() >= min_files,
            "{}: expected at least {min_files} input(s)",
            dir.display()
        );
        for path in inputs {
            let data = std::fs::read(&path).unwrap();
            // A panic names the input that broke, so it can be run again under a debugger.
            let outcome = std::panic::catch_unwind(|| body(&data));
            assert!(outcome.is_ok(), "{target}: {} panicked", path.display());
            total += 1;
        }
    }
    eprintln!("replayed {total} {kind} input(s)");
}

#[test]
fn seed_corpus_replays_cleanly() {
    replay("corpus", 1);
}

#[test]
fn regressions_stay_fixed() {
    replay("regressions", 0);
}

#[test]
fn every_fuzz_binary_has_a_corpus_and_a_body() {
    let names: Vec<&str> = box_proto::fuzzing::TARGETS.iter().map(|t| t.0).collect();
    for entry in std::fs::read_dir(fuzz_dir().join("fuzz_targets")).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        assert!(names.contains(&stem.as_str()), "{stem} is not in TARGETS");
    }
    for name in names {
        assert!(fuzz_dir().join("corpus").join(name).is_dir(), "{name}");
    }
}
