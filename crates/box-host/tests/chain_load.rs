//! Incremental saves end to end through the simulator with the real `hb`: a full save,
//! then saves that write only what changed (an edit, an addition, a deletion, a rename, a
//! chmod, a file replaced by a directory and a directory by a symlink; an unchanged 2.5 MB
//! file is not in them), `box load` of the newest link restores the box's tree of that
//! moment exactly, and the README's stock-tool loop over the chain equals `box extract`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use save_load_support::{World, prerequisites, serial, tree_listing};

const PROJ: &str = "/data/home/agent/workspace/proj";

#[test]
fn incremental_saves_load_and_extract_each_moment() {
    if !prerequisites() || !backup_support::trees::gnu_tar() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh(
        "alpha",
        "set -e; mkdir -p /data/home/agent/workspace/proj/d2l/in && cd /data/home/agent/workspace/proj
         printf 'v1\\n' > edit.txt; printf 'bye\\n' > gone.txt; printf 'r\\n' > old-name
         printf 'm\\n' > mode.txt; printf 'file\\n' > f2d; printf x > d2l/in/x
         head -c 2500000 /dev/urandom > big.bin
         chown -R agent:agent /data/home/agent/workspace",
    );
    let full = w.save_alpha("(full: starts a chain)");
    w.sh(
        "alpha",
        "set -e; cd /data/home/agent/workspace/proj
         printf 'v2, longer\\n' > edit.txt; rm gone.txt; mv old-name new-name; chmod 0600 mode.txt
         rm f2d; mkdir f2d; printf 'now a dir\\n' > f2d/inner; rm -r d2l; ln -s edit.txt d2l
         printf 'added\\n' > added.txt
         # Only what changed: a chown sets the ctime even to the same owner.
         chown agent:agent edit.txt new-name f2d f2d/inner added.txt; chown -h agent:agent d2l",
    );
    let second = w.save_alpha("(incremental: link 2 of its chain)");
    let (full_size, second_size) = (
        std::fs::metadata(&full).unwrap().len(),
        std::fs::metadata(&second).unwrap().len(),
    );
    assert!(
        second_size * 10 < full_size,
        "the increment leaves the unchanged 2.5 MB out: {second_size} vs {full_size} bytes"
    );
    w.sh(
        "alpha",
        "cd /data/home/agent/workspace/proj && printf 'v3\\n' > added.txt && rm big.bin",
    );
    let third = w.save_alpha("(incremental: link 3 of its chain)");
    let moment = tree_listing(&w, "alpha", PROJ);

    // box load of the newest link: that moment, exactly.
    let load = w.run(&["load", third.to_str().unwrap(), "beta"], &[]);
    assert!(load.ok(), "box load: {}", load.all());
    assert!(load.all().contains("link 3 of a chain"), "{}", load.all());
    assert_eq!(
        tree_listing(&w, "beta", PROJ),
        moment,
        "box load of the chain"
    );
    w.assert_running_unpaused("beta");

    // The README's loop equals box extract, on the host.
    let extracted = w.dir.path().join("extracted");
    let ex = w.run(
        &[
            "extract",
            third.to_str().unwrap(),
            extracted.to_str().unwrap(),
        ],
        &[],
    );
    assert!(ex.ok(), "box extract: {}", ex.all());
    let by_stock = w.dir.path().join("by-stock");
    backup_support::stock_loop(
        w.dir.path(),
        &w.passphrase,
        &[&full, &second, &third],
        &by_stock,
    );
    let proj = "home/agent/workspace/proj";
    assert_eq!(
        backup_support::snapshot(&by_stock.join(proj)),
        backup_support::snapshot(&extracted.join(proj)),
        "the stock-tool loop equals box extract"
    );

    // --full starts a new chain.
    let r = w.run(&["save", "alpha", "--full"], &[]);
    assert!(
        r.ok() && r.stdout.contains("(full: starts a chain)"),
        "{}",
        r.all()
    );
    w.assert_running_unpaused("alpha");
    w.assert_no_plaintext(&["alpha", "beta"]);
    w.scan_secrets();
}
