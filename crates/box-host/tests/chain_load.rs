//! `box load` of the newest link of a chain of incremental backups, through the simulator
//! with the real `hb`: the chain is found beside it, validated link by link before any VM
//! exists, each link copied into its own guest dir and `hb import` applies them in order:
//! the new box holds that moment's tree (an edit, a deletion, a rename, a file replaced by
//! a directory, a directory by a symlink, an unchanged file kept from the full backup).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use std::fs;
use std::process::Command;

use save_load_support::{World, prerequisites, serial};

#[test]
fn a_chain_loads_into_a_new_box() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let src = w.dir.path().join("src");
    let work = w.dir.path().join("work");
    fs::create_dir_all(&work).unwrap();
    backup_support::sample_tree(&src);
    // hb import checks real SQLite databases: the sample's stand-in is not one.
    fs::remove_file(src.join("home/agent/.hermes/state.db")).unwrap();
    let ws = src.join("home/agent/workspace");
    let sh = |script: &str| {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&ws)
            .status()
            .unwrap();
        assert!(ok.success(), "{script}");
    };
    let pass = w.passphrase.clone();
    let (_, d0) =
        backup_support::save_link(&src, &work, &w.backups(), "20261201-100000", None, &pass);
    sh(
        "printf 'edited\\n' > probe.txt && rm blob.bin && mv probe-link renamed-link \
        && mkdir dirnow && printf 'inside\\n' > dirnow/x && mkdir -p src/deep && printf d > src/deep/f",
    );
    let (_, d1) = backup_support::save_link(
        &src,
        &work,
        &w.backups(),
        "20261201-110000",
        Some(d0),
        &pass,
    );
    sh("rm -r src && ln -s dirnow src && rm -r dirnow/x && printf 'later\\n' > dirnow/y");
    let (tip, _) = backup_support::save_link(
        &src,
        &work,
        &w.backups(),
        "20261201-120000",
        Some(d1),
        &pass,
    );

    let load = w.run(&["load", tip.to_str().unwrap(), "beta"], &[]);
    assert!(load.ok(), "box load of a chain: {}", load.all());
    assert!(load.all().contains("link 3 of a chain"), "{}", load.all());
    let got = w.sh(
        "beta",
        "cd /data/home/agent/workspace && ls -A | sort && cat probe.txt dirnow/y && readlink src renamed-link && ls dirnow && stat -c %U probe.txt",
    );
    assert_eq!(
        got,
        "dirnow\nprobe-hard\nprobe.txt\nrenamed-link\nsrc\nedited\nlater\ndirnow\nprobe.txt\ny\nagent\n"
    );
    w.assert_running_unpaused("beta");
    w.assert_no_plaintext(&["beta"]);
    w.scan_secrets();
}
