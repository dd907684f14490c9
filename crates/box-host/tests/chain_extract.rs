//! A chain of incremental backups (hb's chain-mode export, encrypted as box encrypts)
//! restored by `box extract` of any link, and by the README's stock-tool loop: each gives
//! exactly the tree of that link's moment, through an edit, an addition, a deletion, a
//! rename, a chmod, a file replaced by a directory and a directory by a symlink. A chain
//! whose middle link was deleted is refused, naming the link, before anything is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use std::fs;
use std::path::Path;
use std::process::Command;

use backup_support::{PASS, Tree, box_cmd, expected_after_excludes, sample_tree, save_link};

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
    let (src, backups, work) = (
        t.path().join("src"),
        t.path().join("backups"),
        t.path().join("work"),
    );
    fs::create_dir_all(&backups).unwrap();
    fs::create_dir_all(&work).unwrap();
    sample_tree(&src);
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
