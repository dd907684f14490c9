//! Incremental exports (chain mode) restored with stock tools alone: a full export, then
//! links after an edit, an addition, a deletion, a rename, a chmod, a file replaced by a
//! directory, a directory replaced by a symlink, and a same-second same-size rewrite
//! whose mtime was put back; each link applied in order with `zstd -d | tar -x -g
//! /dev/null` gives exactly the source tree of that moment, and an unchanged file is not
//! in a link. Needs GNU tar and zstd; without them: SKIPPED (a failure under CI=true).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod export_import_support;

use std::fs;
use std::path::Path;
use std::process::Command;

use box_proto::archive::chain_state::ChainState;
use box_proto::archive::validate::{Report, Rule, validate_link};
use export_import_support::{backdate, data_root, set_mtime_nofollow, snapshot as tree};
use hb_guest::archive::export::ExportSummary;
use hb_guest::archive::import::import_chain;

fn tools() -> bool {
    let zstd = Command::new("zstd").arg("--version").output().is_ok();
    if !zstd {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "zstd is needed (scripts/setup.sh installs it)"
        );
        println!("SKIPPED: zstd not found");
    }
    zstd && export_import_support::gnu_tar()
}

/// One chain-mode export of `src` into `out`, against the committed snapshot when
/// `parent` is its digest; then commits this export's snapshot under its own digest.
fn link(src: &Path, out: &Path, parent: Option<&str>) -> (ExportSummary, String) {
    export_import_support::chain_link(src, out, parent, 1 << 20, None)
}

/// The README's loop for one link: its parts in order | zstd -d | tar -x -g /dev/null.
fn stock_apply(parts: &Path, summary: &ExportSummary, target: &Path) {
    let mut compressed = Vec::new();
    for part in &summary.index.parts {
        compressed.extend(fs::read(parts.join(&part.name)).unwrap());
    }
    export_import_support::tar_g_apply(&compressed, target);
}

/// box's own validator over one link's parts, after the tree its chain built (`prior`).
fn validated(
    parts: &Path,
    summary: &ExportSummary,
    prior: Option<&ChainState>,
) -> Result<(Report, ChainState), box_proto::archive::ArchiveError> {
    let mut all = Vec::new();
    for part in &summary.index.parts {
        all.extend(fs::read(parts.join(&part.name)).unwrap());
    }
    let prior = prior.map(|p| std::rc::Rc::new(p.clone()));
    validate_link(all.as_slice(), &Default::default(), prior)
}

/// `chain_link` and `chain_parent` of the runtime manifest inside a link.
fn chain_keys(report: &Report) -> (String, String) {
    let m = box_proto::RuntimeManifest::parse_bytes(report.manifest.as_deref().unwrap()).unwrap();
    let get = |k: &str| m.get(k).unwrap_or("(absent)").to_string();
    (get("chain_link"), get("chain_parent"))
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

#[test]
fn a_chain_applied_with_stock_tar_is_each_moment_exactly() {
    if !tools() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    let w = data_root(&src);
    sh(
        &w,
        "printf 'edit me\\n' > edit.txt && printf 'bye\\n' > del.txt && printf 'r\\n' > ren-old.txt \
         && printf 'm\\n' > mode.txt && printf 'file\\n' > f2d && mkdir d2l && printf 'in\\n' > d2l/inner \
         && printf 'aaaa' > same.txt && mkdir unchanged && head -c 1000000 /dev/urandom > unchanged/big.bin \
         && printf 'log\\n' > ../../../logs/x.log",
    );
    backdate(&src);

    let (full, d0) = link(&src, &t.path().join("l0"), None);
    assert_eq!(full.link, Some(0));
    stock_apply(&t.path().join("l0"), &full, &out);
    assert_eq!(tree(&out), tree(&src), "the full link");

    let same_mtime = fs::metadata(w.join("same.txt")).unwrap();
    sh(
        &w,
        "printf 'edited, longer\\n' > edit.txt && rm del.txt && mv ren-old.txt ren-new.txt \
         && chmod 0600 mode.txt && rm f2d && mkdir f2d && printf 'now a dir\\n' > f2d/x \
         && rm -r d2l && ln -s edit.txt d2l && printf 'bbbb' > same.txt && printf 'new\\n' > added.txt",
    );
    // Same size, and the mtime put back to the second: only the ctime tells.
    set_mtime_nofollow(
        &w.join("same.txt"),
        std::os::unix::fs::MetadataExt::mtime(&same_mtime),
    );
    let (first, d1) = link(&src, &t.path().join("l1"), Some(&d0));
    assert_eq!(first.link, Some(1), "an increment on the full link");
    assert!(
        first.unchanged >= 2,
        "big.bin and x.log left out: {}",
        first.unchanged
    );
    assert!(
        first.index.total_size < 20_000,
        "the unchanged 1 MB is not in the link: {} bytes",
        first.index.total_size
    );
    stock_apply(&t.path().join("l1"), &first, &out);
    assert_eq!(tree(&out), tree(&src), "after the first increment");
    // box's validator takes a full chain-mode link as any backup, refuses an increment on
    // its own (it would miss every unchanged file), and takes it after its chain.
    let (report, after_full) = validated(&t.path().join("l0"), &full, None).unwrap();
    assert_eq!(chain_keys(&report), ("0".into(), String::new()));
    let alone = validated(&t.path().join("l1"), &first, None).unwrap_err();
    assert_eq!(alone.rule(), Some(Rule::IncrementalLink), "{alone}");
    let (report, after_first) = validated(&t.path().join("l1"), &first, Some(&after_full)).unwrap();
    // The parent is named inside the link, by the digest of the backup it builds on.
    assert_eq!(chain_keys(&report), ("1".into(), d0.clone()));
    assert_eq!(
        fs::read(out.join("home/agent/workspace/same.txt")).unwrap(),
        b"bbbb"
    );

    // Nothing changed: a link of directories only, and the tree is still exact.
    let (second, d2) = link(&src, &t.path().join("l2"), Some(&d1));
    assert_eq!(second.link, Some(2));
    stock_apply(&t.path().join("l2"), &second, &out);
    assert_eq!(tree(&out), tree(&src), "after an empty increment");
    validated(&t.path().join("l2"), &second, Some(&after_first)).unwrap();

    // hb import of the chain (each link's parts in its own dir, oldest first) restores the
    // same tree, staged and swapped in once; one increment alone is refused.
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    let links: Vec<_> = ["l0", "l1", "l2"]
        .iter()
        .map(|l| t.path().join(l))
        .collect();
    import_chain(&dst, &links).unwrap();
    let imported = tree(&dst);
    let restored = tree(&out);
    let names =
        |t: &export_import_support::Snapshot| -> Vec<String> { t.keys().cloned().collect() };
    assert_eq!(names(&imported), names(&restored), "hb import of the chain");
    for (k, v) in &restored {
        // Contents and link targets; owners and modes follow import's data-root policy.
        assert_eq!((imported[k].0, &imported[k].2), (v.0, &v.2), "{k}");
    }
    let dst2 = t.path().join("dst2");
    fs::create_dir_all(&dst2).unwrap();
    let alone = format!("{:#}", import_chain(&dst2, &links[1..2]).unwrap_err());
    assert!(alone.contains("kept from an earlier backup"), "{alone}");

    // A parent that is not the snapshot's backup: a full export, never a wrong increment.
    let (again, _) = link(&src, &t.path().join("l3"), Some(&d0));
    assert_eq!(again.link, Some(0), "a stale parent starts a new chain");
    let _ = d2;
}

/// Entries deleted, created and replaced (a file by a link, a link by a file) while
/// exports run: every link lists exactly what it holds or keeps, never a name it then
/// leaves out (which a restore would fill with the parent's old file), and each link
/// validates strictly on the tree the one before it built.
#[test]
fn a_tree_changing_under_an_export_never_lists_what_it_leaves_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let w = data_root(&src);
    let churn = w.join("churn");
    fs::create_dir_all(&churn).unwrap();
    for i in 0..400 {
        fs::write(churn.join(format!("f{i}")), format!("{i}\n")).unwrap();
    }
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let worker = {
        let (stop, churn) = (stop.clone(), churn.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let p = churn.join(format!("f{}", n % 400));
                match n % 3 {
                    0 => drop(fs::remove_file(&p)),
                    1 => {
                        let _ = fs::remove_file(&p);
                        let _ = std::os::unix::fs::symlink("/usr/bin/python3", &p);
                    }
                    _ => {
                        let _ = fs::remove_file(&p);
                        let _ = fs::write(&p, n.to_string());
                    }
                }
                n += 1;
            }
        })
    };
    let mut prior: Option<ChainState> = None;
    let mut parent: Option<String> = None;
    for i in 0..6 {
        let out = t.path().join(format!("l{i}"));
        let (summary, digest) = link(&src, &out, parent.as_deref());
        // Every name a listing says is in this link (`Y`) is a member of it.
        let mut all = Vec::new();
        for part in &summary.index.parts {
            all.extend(fs::read(out.join(&part.name)).unwrap());
        }
        let (mut members, mut listed) = (std::collections::HashSet::new(), Vec::new());
        box_proto::archive::validate::walk_link(
            all.as_slice(),
            &Default::default(),
            prior.clone().map(std::rc::Rc::new),
            |entry, key| -> Result<(), std::io::Error> {
                members.insert(key.to_vec());
                if let Some(d) = entry.dumpdir {
                    for (code, name) in d.entries() {
                        if *code == box_proto::archive::incremental::Code::Included {
                            let mut k = key.to_vec();
                            if !k.is_empty() {
                                k.push(b'/');
                            }
                            k.extend_from_slice(name);
                            listed.push(k);
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("link {i}: {e:?}"));
        for key in &listed {
            assert!(
                members.contains(key),
                "link {i} lists {} as in it, without it",
                String::from_utf8_lossy(key)
            );
        }
        let strict = prior.clone().map(ChainState::strict);
        let (_, after) = validated(&out, &summary, strict.as_ref())
            .unwrap_or_else(|e| panic!("link {i} does not fit its chain: {e}"));
        prior = Some(after);
        parent = Some(digest);
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
}
