//! Issue 30, every backup restores: through the simulator with the real `hb`, a workspace
//! holding what workspaces hold — a virtualenv's absolute `python` link, an editor's
//! dangling lock link, a hard-linked pair, a file later replaced by a symlink, and a
//! directory renamed so one name of a hard-linked inode moves — saved full, then twice
//! incrementally. `box extract` of *every* link, `box load` of the tip and the README's
//! stock-tool loop each give exactly the moment that link was saved (`find -printf '%p %y
//! %l %n'` and every file's bytes). On the way: the hb probe failing once never makes a
//! save outside the chain, a clock set back never names a link before its parent, `box
//! backups prune` beside a copied link keeps what the chain stands on, and `box rm` refuses
//! a box whose newest link does not restore, naming why, before it deletes anything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use save_load_support::{World, prerequisites, serial};

const W30: &str = "/data/home/agent/workspace/w30";
const W30_REL: &str = "home/agent/workspace/w30";

/// What a restore must reproduce: every entry's path, type, link target and hard-link
/// count, then every file's SHA-256 (C locale sort, so guest and host agree).
const LISTING: &str = "export LC_ALL=C; find . -printf '%p %y %l %n\\n' | sort && \
     find . -type f -print0 | sort -z | xargs -0 -r sha256sum";

fn in_guest(w: &World, machine: &str) -> String {
    w.sh(machine, &format!("cd {W30} && {LISTING}"))
}

fn on_host(root: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd '{}' && {LISTING}",
            root.join(W30_REL).display()
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn extract(w: &World, link: &Path, into: &Path) -> String {
    let ex = w.run(
        &["extract", link.to_str().unwrap(), into.to_str().unwrap()],
        &[],
    );
    assert!(ex.ok(), "box extract {}: {}", link.display(), ex.all());
    on_host(into)
}

#[test]
fn every_link_of_a_workspace_chain_restores_its_moment() {
    if !prerequisites() || !backup_support::trees::gnu_tar() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let new = w.run(&["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha: {}", new.all());
    let own = "chown -hR agent:agent /data/home/agent/workspace";
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {W30}/env/bin {W30}/data {W30}/olddir && cd {W30}
             ln -s /usr/bin/python3 env/bin/python; ln -s python env/bin/python3
             printf 'notes\\n' > notes.md; ln -s agent@box.4242:1764000000 '.#notes.md'
             ln -s /nonexistent/anywhere dangling-abs; ln -s ../notes.md data/rel-link
             printf 'a\\n' > data/a.txt; ln data/a.txt data/a-hard.txt
             printf 'conf\\n' > config.yml
             printf 'x\\n' > olddir/x.txt; ln olddir/x.txt keep-x.txt
             {own}"
        ),
    );
    let mut moments = vec![in_guest(&w, "alpha")];
    assert!(
        moments[0].contains("./env/bin/python l /usr/bin/python3 1"),
        "{}",
        moments[0]
    );
    let mut links = vec![w.save_alpha("(full: starts a chain)")];

    // A file replaced by a symlink, a directory renamed (x.txt's name moves, keep-x.txt's
    // stays), an edit, the lock link re-pointed.
    w.sh(
        "alpha",
        &format!(
            "set -e; cd {W30}
             rm config.yml; ln -s /etc/hostname config.yml
             mv olddir newdir
             printf 'more notes\\n' >> notes.md; ln -sfn agent@box.4242:1764000099 '.#notes.md'
             {own}"
        ),
    );
    moments.push(in_guest(&w, "alpha"));
    assert!(moments[1].contains("./keep-x.txt f  2"), "{}", moments[1]);
    links.push(w.save_alpha("(incremental: link 2 of its chain)"));

    // A clock set back: the newest backup's name is later than now (its digest, and so the
    // chain, unchanged).
    let future = w.backups().join("alpha-20991231-235959.tar.zst.gpg");
    std::fs::rename(&links[1], &future).unwrap();
    links[1] = future;

    // A hard link broken, a new pair across directories, the lock link gone, one more
    // absolute link, the moved file touched (both its names go into the link).
    w.sh(
        "alpha",
        &format!(
            "set -e; cd {W30}
             rm data/a-hard.txt; printf 'b\\n' > b.txt; ln b.txt env/b-hard.txt
             rm '.#notes.md'; ln -s /usr/bin/python3.11 env/bin/python3.11
             printf 'x2\\n' >> newdir/x.txt
             {own}"
        ),
    );
    moments.push(in_guest(&w, "alpha"));

    // The probe that tells an hb with chains fails three times: the save fails, nothing
    // is published (it never downgrades to a backup outside the chain).
    let before = w.backups_published();
    let failed = w.run(
        &["save", "alpha"],
        &[("SMOLVM_SIM_FAIL", "exec:3@commit-snapshot --help")],
    );
    assert!(!failed.ok(), "{}", failed.all());
    assert!(
        failed
            .all()
            .contains("cannot tell whether the hb in box 'alpha' makes incremental saves"),
        "{}",
        failed.all()
    );
    assert_eq!(
        w.backups_published(),
        before,
        "a failed probe published something"
    );
    // Once: asked again, and the save is the next link.
    std::fs::remove_dir_all(w.sim_home().join("faults")).ok();
    let r = w.run(
        &["save", "alpha"],
        &[
            ("BOX_PART_SIZE", "1048576"),
            ("SMOLVM_SIM_FAIL", "exec:once@commit-snapshot --help"),
        ],
    );
    assert!(r.ok(), "{}", r.all());
    assert!(
        r.stdout.contains("(incremental: link 3 of its chain)"),
        "{}",
        r.all()
    );
    assert!(r.all().contains("the clock reads"), "{}", r.all());
    let third: Vec<PathBuf> = w
        .backups_published()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(
        third,
        [w.backups().join("alpha-21000101-000000.tar.zst.gpg")],
        "named a second after its parent"
    );
    links.push(third[0].clone());
    for saved in [&new, &r] {
        assert!(!saved.all().contains("skipping symlink"), "{}", saved.all());
    }

    // Every link extracts to its moment; the tip loads to the last.
    for (i, (link, moment)) in links.iter().zip(&moments).enumerate() {
        let into = w.dir.path().join(format!("extract-{i}"));
        assert_eq!(
            &extract(&w, link, &into),
            moment,
            "box extract of link {}",
            i + 1
        );
    }
    let load = w.run(&["load", links[2].to_str().unwrap(), "beta"], &[]);
    assert!(load.ok(), "box load: {}", load.all());
    assert_eq!(in_guest(&w, "beta"), moments[2], "box load of the tip");
    let rm = w.run(&["rm", "beta", "--force"], &[]);
    assert!(rm.ok(), "{}", rm.all());

    // The README's loop with stock gpg, zstd and GNU tar gives the same.
    let by_stock = w.dir.path().join("by-stock");
    backup_support::stock_loop(
        w.dir.path(),
        &w.passphrase,
        &links.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &by_stock,
    );
    assert_eq!(on_host(&by_stock), moments[2], "the stock-tool loop");

    // Prune beside a copy of link 2 under a later name (a fork): nothing any backup stands
    // on goes, and prune says which it cannot judge.
    let copy = w.backups().join("alpha-21000101-000500.tar.zst.gpg");
    std::fs::copy(&links[1], &copy).unwrap();
    let prune = w.run(&["backups", "prune", "alpha", "--keep-last", "1"], &[]);
    assert!(prune.ok(), "{}", prune.all());
    for kept in links.iter().chain([&copy]) {
        assert!(
            kept.exists(),
            "prune removed {}: {}",
            kept.display(),
            prune.all()
        );
    }
    assert!(prune.all().contains("cannot judge"), "{}", prune.all());
    std::fs::remove_file(&copy).unwrap();

    // The newest link damaged: box rm refuses, naming why, and deletes nothing.
    let mut bytes = std::fs::read(&links[2]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&links[2], &bytes).unwrap();
    let rm = w.run(&["rm", "alpha"], &[]);
    assert!(!rm.ok(), "{}", rm.all());
    assert!(rm.all().contains("does not restore"), "{}", rm.all());
    assert!(rm.all().contains("corrupt"), "{}", rm.all());
    assert!(w.registered("alpha"));
    // --force deletes it anyway, without a terminal and without asking.
    let rm = w.run(&["rm", "alpha", "--force"], &[]);
    assert!(rm.ok(), "{}", rm.all());
    assert!(!w.registered("alpha"));
    w.assert_no_plaintext(&[]);
    w.scan_secrets();
}
