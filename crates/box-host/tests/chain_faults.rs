//! Faults of an incremental save, through the simulator with the real `hb`: `box save`
//! SIGKILLed while the increment is exported in the guest, while its first part is copied
//! out, and while the published link's snapshot is being committed. After each kill:
//! nothing half-published beside the backups (no new backup under a backup's name), the
//! guest's snapshot not advanced by a save that published nothing; the next save finds a
//! correct parent (an increment on the newest published backup, or a full one when the
//! snapshot is of another backup), and `box load` of the newest link gives the box's tree.
//! A newest backup whose bytes changed under the same metadata gets no link, whatever the
//! memo of the chain's files says. (A chain whose middle link was deleted is refused by
//! `box load` before any VM: tests/chain_hostile.rs.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::path::PathBuf;

use nix::sys::signal::Signal;
use save_load_support::{World, prerequisites, serial, tree_listing};

const PROJ: &str = "/data/home/agent/workspace/proj";
const PART: (&str, &str) = ("BOX_PART_SIZE", "1048576");
const SNAPSHOT: &str = "/data/.hb-backup-snapshot/current";

fn snapshot_digest(w: &World) -> String {
    w.sh("alpha", &format!("sha256sum {SNAPSHOT}"))
}

/// `box save alpha` with the smolvm call containing `needle` held 3 s, SIGKILLed while it
/// is; returns once the call it left behind has finished.
fn killed_save(w: &World, verb: &str, needle: &str) {
    let spec = format!("{verb}:slow@{needle}");
    let from = w.calls().len();
    let child = w.spawn(
        &["save", "alpha"],
        &[
            PART,
            ("SMOLVM_SIM_FAIL", &spec),
            ("SMOLVM_SIM_SLOW_SECS", "3"),
        ],
    );
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    assert!(
        w.wait_for_call(from, needle, 120),
        "the call '{needle}' never came"
    );
    nix::sys::signal::kill(pid, Signal::SIGKILL).unwrap();
    let r = w.finish(&["save", "alpha"], child, 240);
    assert_eq!(r.code, None, "killed: {}", r.all());
    // The smolvm call in flight outlives box, as with real smolvm: let it finish.
    std::thread::sleep(std::time::Duration::from_secs(5));
}

#[test]
fn a_killed_incremental_save_leaves_the_chain_sound() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {PROJ} && cd {PROJ} && head -c 3000000 /dev/urandom > base.bin
             printf 'v1\\n' > note.txt; chown -R agent:agent /data/home/agent/workspace"
        ),
    );
    let mut tip = w.save_alpha("(full: starts a chain)");

    // Killed before anything was published: the export itself, and the copy-out of its
    // first part (each increment holds 3 MB of new data: several parts).
    for (round, (verb, needle)) in [("exec", "hb export"), ("cp", "/part-000000")]
        .into_iter()
        .enumerate()
    {
        w.sh(
            "alpha",
            &format!(
                "set -e; cd {PROJ} && head -c 3000000 /dev/urandom > new-{round}.bin
                 printf 'v{round}\\n' >> note.txt; chown -R agent:agent /data/home/agent/workspace"
            ),
        );
        let published = w.backups_published();
        let snapshot = snapshot_digest(&w);
        killed_save(&w, verb, needle);
        assert_eq!(
            w.backups_published()
                .into_iter()
                .filter(|p| p.to_string_lossy().ends_with(".tar.zst.gpg"))
                .collect::<Vec<_>>(),
            published,
            "killed during {needle}: nothing published"
        );
        assert_eq!(
            snapshot_digest(&w),
            snapshot,
            "killed during {needle}: the snapshot the next save compares with did not move"
        );
        // The next save builds on the newest published backup (the load at the end
        // restores every link of the chain, these included).
        tip = w.save_alpha(&format!("(incremental: link {} of its chain)", round + 2));
        let leftovers: Vec<PathBuf> = w
            .backups_published()
            .into_iter()
            .filter(|p| !p.to_string_lossy().ends_with(".tar.zst.gpg"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "temporaries beside the backups: {leftovers:?}"
        );
    }

    // One load of the newest link applies every link saved after a kill.
    let moment = tree_listing(&w, "alpha", PROJ);
    let load = w.run(&["load", tip.to_str().unwrap(), "after"], &[]);
    assert!(load.ok(), "box load after killed saves: {}", load.all());
    assert!(load.all().contains("link 3 of a chain"), "{}", load.all());
    assert_eq!(tree_listing(&w, "after", PROJ), moment);
    assert!(w.run(&["rm", "after", "--force"], &[]).ok());

    // Killed while the published link's snapshot is committed: the link is there and
    // whole; the next save builds on it or starts a new chain, never on a wrong parent.
    w.sh(
        "alpha",
        &format!("cd {PROJ} && printf 'late\\n' >> note.txt && chown agent:agent note.txt"),
    );
    let published = w.backups_published();
    // (Not the `commit-snapshot --help` probe that comes before the export.)
    killed_save(&w, "exec", "commit-snapshot --digest");
    let killed: Vec<PathBuf> = w
        .backups_published()
        .into_iter()
        .filter(|p| !published.contains(p))
        .collect();
    assert_eq!(killed.len(), 1, "published before the commit: {killed:?}");
    w.sh(
        "alpha",
        &format!("cd {PROJ} && printf 'after\\n' >> note.txt && chown agent:agent note.txt"),
    );
    // The held commit finished after the kill (as smolvm's exec outlives box), or not:
    // whichever backup the guest's snapshot names decides what the next save is.
    let killed_digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&killed[0]).unwrap()))
    };
    let committed = w
        .sh("alpha", &format!("head -n 1 {SNAPSHOT}"))
        .contains(&killed_digest);
    let r = w.run(&["save", "alpha"], &[PART]);
    assert!(r.ok(), "{}", r.all());
    let expected = if committed {
        "(incremental: link 5 of its chain)"
    } else {
        "(full: starts a chain)"
    };
    assert!(r.stdout.contains(expected), "{expected} in {}", r.all());
    let tip = w
        .backups_published()
        .into_iter()
        .find(|p| !published.contains(p) && !killed.contains(p))
        .unwrap();
    let moment = tree_listing(&w, "alpha", PROJ);
    let load = w.run(&["load", tip.to_str().unwrap(), "last"], &[]);
    assert!(load.ok(), "box load: {}", load.all());
    assert_eq!(tree_listing(&w, "last", PROJ), moment);
    w.assert_running_unpaused("alpha");
    w.assert_no_plaintext(&["alpha", "last"]);
}

/// The newest backup's bytes changed while its metadata stayed (a media error; sshfs, SMB
/// and FAT make up inodes and ctimes): the memo of the chain's files still has its row, in
/// the state the file is in now, with the digest of the bytes saved. The next save hashes
/// the newest backup whatever the memo says, finds it does not restore, says so and starts
/// a new chain: no link is published on it.
#[test]
fn a_newest_backup_changed_under_its_memo_row_gets_no_link() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh(
        "alpha",
        &format!(
            "set -e; mkdir -p {PROJ} && cd {PROJ} && head -c 300000 /dev/urandom > base.bin
             chown -R agent:agent /data/home/agent/workspace"
        ),
    );
    let tip = w.save_alpha("(full: starts a chain)");
    let saved = std::fs::read(&tip).unwrap();
    // A byte of its integrity check changed: its manifest still reads, it no longer
    // restores.
    let mut damaged = saved.clone();
    let at = damaged.len() - 5;
    damaged[at] ^= 0x01;
    std::fs::write(&tip, &damaged).unwrap();
    // The memo's row for it: the file's state as it is now, the digest of what was saved.
    let memo = w.state().root().join("chain-trees/alpha.known");
    let now = box_host::backup::chain::FileState::at(&tip)
        .unwrap()
        .encode();
    let text = std::fs::read_to_string(&memo).unwrap();
    let rows: Vec<String> = text
        .lines()
        .map(|line| {
            let mut f: Vec<&str> = line.splitn(5, '\t').collect();
            if f.len() == 5 && std::path::Path::new(f[4]) == tip {
                f[1] = &now;
            }
            f.join("\t")
        })
        .collect();
    std::fs::write(&memo, rows.join("\n") + "\n").unwrap();
    let known = box_host::backup::tree_cache::Known::load(
        &w.state(),
        &box_proto::BoxName::parse("alpha").unwrap(),
    );
    let state = box_host::backup::chain::FileState::at(&tip).unwrap();
    let digest = |b: &[u8]| -> [u8; 32] { <sha2::Sha256 as sha2::Digest>::digest(b).into() };
    assert_eq!(
        known.get(&tip, &state).map(|(d, _)| d),
        Some(digest(&saved)),
        "the memo vouches for the bytes saved, in the file's state now"
    );
    w.sh(
        "alpha",
        &format!("cd {PROJ} && printf 'after\\n' > note.txt && chown agent:agent note.txt"),
    );
    let (new, r) = w.save_alpha_saying("(full: starts a chain)");
    for said in ["does not restore", "starting a new one"] {
        assert!(r.all().contains(said), "{said:?} in {}", r.all());
    }
    let pass = secrecy::SecretString::from(w.passphrase.clone());
    let place = box_host::backup::load::peek_place(&new, &pass).unwrap();
    assert_eq!(place.map(|p| (p.link, p.parent)), Some((0, None)));
}
