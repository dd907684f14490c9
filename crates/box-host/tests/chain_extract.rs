//! A chain of incremental backups (hb's chain-mode export, encrypted as box encrypts)
//! restored by `box extract` of any link, and by the README's stock-tool loop: each gives
//! exactly the tree of that link's moment, through an edit, an addition, a deletion, a
//! rename, a chmod, a file replaced by a directory and a directory by a symlink. A chain
//! whose middle link was deleted is refused, naming the link, before anything is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use backup_support::{PASS, Tree, box_cmd, expected_after_excludes, sample_tree, save_link};

/// `src` (the sample tree), `backups` and `work` dirs under `root`.
fn sandbox(root: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (src, backups, work) = (root.join("src"), root.join("backups"), root.join("work"));
    fs::create_dir_all(&backups).unwrap();
    fs::create_dir_all(&work).unwrap();
    sample_tree(&src);
    (src, backups, work)
}

fn box_extract(sandbox: &Path, file: &Path, target: &Path) -> std::process::Output {
    box_cmd(sandbox)
        .env("BOX_PASSPHRASE", PASS)
        .arg("extract")
        .arg(file)
        .arg(target)
        .output()
        .unwrap()
}

/// A tree without the directory times a restore cannot share with its source (the
/// root's, whose entry is not compared) and without the snapshot dir, never backed up.
fn tree(root: &Path) -> Tree {
    expected_after_excludes(root)
}

#[test]
fn any_link_extracts_to_its_moment_and_stock_tools_agree() {
    if !backup_support::trees::gnu_tar() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (src, backups, work) = sandbox(t.path());
    let w = src.join("home/agent/workspace");

    let (full, d0) = save_link(&src, &work, &backups, "20261201-100000", None, PASS);
    let at_full = tree(&src);
    let sh = |script: &str| {
        assert!(
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(&w)
                .status()
                .unwrap()
                .success(),
            "{script}"
        );
    };
    sh(
        "printf 'edited\\n' >> src/main.rs && printf 'new\\n' > added.txt && rm blob.bin \
        && mv probe-link renamed-link && chmod 0600 probe.txt && mkdir -p d2l/in && printf x > d2l/in/x",
    );
    let (first, d1) = save_link(&src, &work, &backups, "20261201-110000", Some(d0), PASS);
    let at_first = tree(&src);
    sh(
        "rm added.txt && mkdir added.txt && printf 'now a dir\\n' > added.txt/inside \
        && rm -r d2l && ln -s src d2l",
    );
    let (second, _) = save_link(&src, &work, &backups, "20261201-120000", Some(d1), PASS);
    let at_second = tree(&src);

    for (link, moment, name) in [
        (&full, &at_full, "full"),
        (&first, &at_first, "first"),
        (&second, &at_second, "second"),
    ] {
        let out = t.path().join(format!("out-{name}"));
        let r = box_extract(t.path(), link, &out);
        assert!(
            r.status.success(),
            "box extract {name}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(&tree(&out), moment, "box extract of the {name} link");
    }
    let by_stock = t.path().join("by-stock");
    backup_support::stock_loop(&work, PASS, &[&full, &first, &second], &by_stock);
    assert_eq!(
        tree(&by_stock),
        tree(&t.path().join("out-second")),
        "the README loop equals box extract"
    );

    // The middle link gone: refused before anything is written, naming the link.
    fs::remove_file(&first).unwrap();
    let out = t.path().join("out-broken");
    let r = box_extract(t.path(), &second, &out);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success());
    assert!(
        err.contains("alpha-20261201-120000") && err.contains("missing a link"),
        "{err}"
    );
    assert!(!out.exists());
}

/// `box backups --json` groups by chain; prune keeps what a kept backup needs.
#[test]
fn backups_lists_chains_and_prune_keeps_what_kept_ones_need() {
    let t = tempfile::tempdir().unwrap();
    let (src, backups, work) = sandbox(t.path());
    let w = src.join("home/agent/workspace");
    let (a1, d) = save_link(&src, &work, &backups, "20261130-100000", None, PASS);
    fs::write(w.join("probe.txt"), "changed\n").unwrap();
    let (a2, _) = save_link(&src, &work, &backups, "20261130-110000", Some(d), PASS);
    let (b1, _) = save_link(&src, &work, &backups, "20261201-100000", None, PASS);
    let boxes = |args: &[&str]| {
        let out = box_cmd(t.path())
            .env("BOX_PASSPHRASE", PASS)
            .env("BACKUP_DIR", &backups)
            .arg("backups")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let json: serde_json::Value = serde_json::from_str(&boxes(&["--json"])).unwrap();
    let rows: Vec<(String, String, String)> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["file"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string(),
                r["kind"].as_str().unwrap().to_string(),
                r["chain"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        rows,
        [
            (name(&a1), "full".into(), name(&a1)),
            (name(&a2), "incremental".into(), name(&a1)),
            (name(&b1), "full".into(), name(&b1)),
        ]
    );
    assert!(boxes(&[]).contains("chain alpha-20261130-100000.tar.zst.gpg: 2 backup(s)"));
    // Keeping the newest two keeps a2, so a1 (its full backup) stays too.
    let dry = boxes(&["prune", "--keep-last", "2", "--dry-run"]);
    assert!(!dry.contains("would remove"), "{dry}");
    let dry = boxes(&["prune", "--keep-last", "1", "--dry-run"]);
    assert!(
        dry.contains(&format!("would remove {}", a1.display())),
        "{dry}"
    );
    assert!(a1.exists() && a2.exists(), "a dry run removes nothing");
    boxes(&["prune", "--keep-last", "1"]);
    assert!(!a1.exists() && !a2.exists() && b1.exists());
}
