//! Each link of a chain is a moment: through the simulator with the real `hb`, a full save
//! and two incremental ones of a box whose sparse image grows across them (holes kept:
//! the allocation compared, not only the bytes), whose hard links are made and broken
//! and whose files are re-dated; `box load` of *each* link gives exactly the tree of the
//! moment that link was saved (bytes, types, modes, owners, mtimes, hard-link groups,
//! allocation). Then a chain older than BACKUP_CHAIN_MAX_AGE_DAYS is closed by the next
//! save, which says why.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::collections::{BTreeMap, BTreeSet};

use save_load_support::{World, prerequisites, serial, tree_listing};

const PROJ: &str = "/data/home/agent/workspace/proj";

/// What `tree_listing` does not show: which files are one inode (as groups of paths,
/// inode numbers differ between boxes), and each file's allocated 512-byte blocks.
#[derive(Debug, PartialEq)]
struct Shape {
    hard_links: BTreeSet<Vec<String>>,
    blocks: BTreeMap<String, u64>,
}

fn shape(w: &World, machine: &str) -> Shape {
    let out = w.sh(
        machine,
        &format!("cd {PROJ} && find . -type f -printf '%i %b %p\\n'"),
    );
    let mut by_inode: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut blocks = BTreeMap::new();
    for line in out.lines() {
        let mut words = line.splitn(3, ' ');
        let (inode, b, path) = (
            words.next().unwrap(),
            words.next().unwrap(),
            words.next().unwrap(),
        );
        by_inode
            .entry(inode.to_string())
            .or_default()
            .push(path.to_string());
        blocks.insert(path.to_string(), b.parse().unwrap());
    }
    let hard_links = by_inode
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    Shape { hard_links, blocks }
}

/// The tree and shape of alpha now.
struct Moment {
    listing: String,
    shape: Shape,
}

fn moment(w: &World, machine: &str) -> Moment {
    Moment {
        listing: tree_listing(w, machine, PROJ),
        shape: shape(w, machine),
    }
}

/// `image` of `machine` is still sparse and allocated as much as at `was` (within the
/// 64 KiB a restore may round a data run to).
fn assert_same_allocation(was: &Shape, now: &Shape, what: &str) {
    assert_eq!(
        was.blocks.keys().collect::<Vec<_>>(),
        now.blocks.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (path, &before) in &was.blocks {
        let after = now.blocks[path];
        assert!(
            after.abs_diff(before) * 512 <= 64 << 10,
            "{what}: {path} allocates {after} blocks, was {before}"
        );
    }
}

#[test]
fn each_link_loads_to_its_moment() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    let own = "chown -R agent:agent /data/home/agent/workspace";
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {PROJ} && cd {PROJ}
             truncate -s 64M sparse.img; printf 'first run' | dd of=sparse.img bs=1 seek=1048576 conv=notrunc 2>/dev/null
             printf 'shared\\n' > a.txt; ln a.txt a-hard.txt
             printf 'dated\\n' > dated.txt; touch -d '2020-01-02 03:04:05' dated.txt
             printf 'old\\n' > old.txt; touch -d '2019-06-07 08:09:10' old.txt
             {own}"
        ),
    );
    let at_full = moment(&w, "alpha");
    let sparse_blocks = at_full.shape.blocks["./sparse.img"];
    assert!(
        sparse_blocks * 512 < 1 << 20,
        "the source image is sparse ({sparse_blocks} blocks)"
    );
    let full = w.save_alpha("(full: starts a chain)");

    // The image grows (a hole, then data at 100 MiB), a third name for a.txt, an old
    // file re-dated to another old time.
    w.sh(
        "alpha",
        &format!(
            "set -e; cd {PROJ}
             truncate -s 128M sparse.img; printf 'second run' | dd of=sparse.img bs=1 seek=104857600 conv=notrunc 2>/dev/null
             ln a.txt a-third.txt
             touch -d '2021-03-04 05:06:07' old.txt
             {own}"
        ),
    );
    let at_second = moment(&w, "alpha");
    let second = w.save_alpha("(incremental: link 2 of its chain)");

    // It grows again and ends in a hole; a hard link broken, a new pair made.
    w.sh(
        "alpha",
        &format!(
            "set -e; cd {PROJ}
             printf 'third run' | dd of=sparse.img bs=1 seek=125829120 conv=notrunc 2>/dev/null; truncate -s 256M sparse.img
             rm a-hard.txt; printf 'pair\\n' > b.txt; ln b.txt b-hard.txt
             touch -d '2022-02-02 02:02:02' b.txt
             {own}"
        ),
    );
    let at_third = moment(&w, "alpha");
    let third = w.save_alpha("(incremental: link 3 of its chain)");
    // The moments differ where the test means them to.
    let groups = |m: &Moment| -> Vec<Vec<String>> { m.shape.hard_links.iter().cloned().collect() };
    assert_eq!(groups(&at_full), [["./a-hard.txt", "./a.txt"]]);
    assert_eq!(
        groups(&at_second),
        [["./a-hard.txt", "./a-third.txt", "./a.txt"]]
    );
    assert_eq!(
        groups(&at_third),
        [["./a-third.txt", "./a.txt"], ["./b-hard.txt", "./b.txt"]]
    );
    assert!(
        at_third.shape.blocks["./sparse.img"] * 512 < 1 << 20,
        "the grown image is still sparse in the source: {:?}",
        at_third.shape.blocks
    );

    for (i, (link, at)) in [
        (&full, &at_full),
        (&second, &at_second),
        (&third, &at_third),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("moment{i}");
        let load = w.run(&["load", link.to_str().unwrap(), &name], &[]);
        assert!(load.ok(), "box load of link {}: {}", i + 1, load.all());
        let got = moment(&w, &name);
        assert_eq!(got.listing, at.listing, "box load of link {} (tree)", i + 1);
        assert_eq!(
            got.shape.hard_links,
            at.shape.hard_links,
            "box load of link {} (hard links)",
            i + 1
        );
        assert_same_allocation(
            &at.shape,
            &got.shape,
            &format!("box load of link {}", i + 1),
        );
        // Each VM costs memory on a shared machine: gone once compared.
        let rm = w.run(&["rm", &name, "--force"], &[]);
        assert!(rm.ok(), "{}", rm.all());
    }

    // Chain closing by age: the full backup's name moved 8 days back (what a chain
    // started then looks like; its digest, and so the chain, unchanged).
    let eight_days_ago =
        (chrono::Utc::now() - chrono::Duration::days(8) - chrono::Duration::hours(1))
            .format("%Y%m%d-%H%M%S")
            .to_string();
    let aged = w
        .backups()
        .join(format!("alpha-{eight_days_ago}.tar.zst.gpg"));
    std::fs::rename(&full, &aged).unwrap();
    let fourth = w.save_alpha("(full: starts a chain)");
    let said = w.transcript.borrow().clone();
    assert!(
        said.contains("chain started 8 days ago") && said.contains("starting a new one"),
        "box save says why it starts a new chain: {said}"
    );
    assert!(
        std::fs::metadata(&fourth).unwrap().len() > std::fs::metadata(&third).unwrap().len(),
        "a full backup"
    );
    // A fresh chain is built on again.
    w.save_alpha("(incremental: link 2 of its chain)");
    w.assert_no_plaintext(&["alpha"]);
    w.scan_secrets();
}
