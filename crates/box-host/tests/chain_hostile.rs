//! Hostile and broken chains at the CLI: links written as `box save` writes them (hb's
//! chain-mode export, encrypted as box encrypts), some then edited byte for byte (their
//! plaintext decrypted, changed, compressed and encrypted again with the right passphrase,
//! so only the rules can tell): a link whose parent digest points at another full backup,
//! two links claiming one parent, a dumpdir naming `../`, a dumpdir deleting `home/agent`,
//! parents out of order (a loop of SHA-256 digests cannot be built: it would need a
//! fixed point; chain.rs's unit test covers the walk's loop check), and a chain whose middle
//! link was deleted. `box load` and `box extract` refuse each before any VM exists and
//! before anything is written, naming the rule and the link. `box rm` will not delete a box
//! without `--force` when its newest backup's chain is broken or damaged, or cannot be
//! checked (no passphrase, another one): refused before the name is asked for.
//!
//! No VM is started here: every refusal happens before one would be.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod save_load_support;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use backup_support::{encrypt_bytes, sample_tree, save_link};
use box_host::state::{BoxRecord, Registry};
use box_proto::BoxName;
use save_load_support::World;

/// A chain of three links of `alpha` in the world's backup dir (full, then two
/// increments), from a sample tree with a file `abc` that the increments keep unchanged.
struct Chain {
    src: PathBuf,
    work: PathBuf,
    links: Vec<(PathBuf, [u8; 32])>,
}

fn chain(w: &World) -> Chain {
    let src = w.dir.path().join("src");
    let work = w.dir.path().join("work");
    fs::create_dir_all(&work).unwrap();
    sample_tree(&src);
    let ws = src.join("home/agent/workspace");
    fs::write(ws.join("abc"), "kept by every increment\n").unwrap();
    let mut links = Vec::new();
    let l0 = save_link(
        &src,
        &work,
        &w.backups(),
        "20261201-100000",
        None,
        &w.passphrase,
    );
    links.push(l0.clone());
    fs::write(ws.join("probe.txt"), "changed once\n").unwrap();
    let l1 = save_link(
        &src,
        &work,
        &w.backups(),
        "20261201-110000",
        Some(l0.1),
        &w.passphrase,
    );
    links.push(l1.clone());
    fs::write(ws.join("added.txt"), "added\n").unwrap();
    let l2 = save_link(
        &src,
        &work,
        &w.backups(),
        "20261201-120000",
        Some(l1.1),
        &w.passphrase,
    );
    links.push(l2);
    Chain { src, work, links }
}

/// The tar stream inside an encrypted link.
fn plaintext_tar(file: &Path, pass: &str) -> Vec<u8> {
    let mut r =
        box_host::backup::crypto::DecryptReader::open(file, &backup_support::secret(pass)).unwrap();
    let mut compressed = Vec::new();
    r.read_to_end(&mut compressed).unwrap();
    zstd::decode_all(compressed.as_slice()).unwrap()
}

/// Rewrites `file` with `from` replaced by `to` (same length, exactly one occurrence) in
/// its tar stream: tar checks no member's content, the OpenPGP layer is made anew.
fn edit_link(file: &Path, pass: &str, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut tar = plaintext_tar(file, pass);
    let at: Vec<usize> = tar
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        at.len(),
        1,
        "{:?} occurs {} times in {}",
        String::from_utf8_lossy(from),
        at.len(),
        file.display()
    );
    tar[at[0]..at[0] + to.len()].copy_from_slice(to);
    fs::remove_file(file).unwrap();
    encrypt_bytes(&backup_support::zstd(&tar), file, pass);
}

/// `box load FILE beta` and `box extract FILE DIR` both refuse, each output containing
/// every one of `words`, and no machine was created, nothing extracted.
fn both_refuse(w: &World, file: &Path, words: &[&str]) {
    let before = w.calls().len();
    let load = w.run(&["load", file.to_str().unwrap(), "beta"], &[]);
    assert!(
        !load.ok(),
        "box load accepted {}: {}",
        file.display(),
        load.all()
    );
    for word in words {
        assert!(
            load.all().contains(word),
            "{word:?} in box load's {}",
            load.all()
        );
    }
    let creates: Vec<String> = w
        .calls_since(before)
        .into_iter()
        .filter(|c| c.contains("machine create"))
        .collect();
    assert!(creates.is_empty(), "a VM was created: {creates:?}");
    assert!(!w.registered("beta"));
    let target = w.dir.path().join("extracted");
    let ex = w.run(
        &["extract", file.to_str().unwrap(), target.to_str().unwrap()],
        &[],
    );
    assert!(
        !ex.ok(),
        "box extract accepted {}: {}",
        file.display(),
        ex.all()
    );
    for word in words {
        assert!(
            ex.all().contains(word),
            "{word:?} in box extract's {}",
            ex.all()
        );
    }
    assert!(!target.exists(), "box extract wrote {}", target.display());
}

fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn hostile_chains_are_refused_before_any_vm() {
    if !save_load_support::prerequisites() || !backup_support::trees::gnu_tar() {
        return;
    }
    let _serial = save_load_support::serial();

    // The untouched chain loads as far as validation: the edits below are what is refused.
    {
        let w = World::new();
        let c = chain(&w);
        let target = w.dir.path().join("whole");
        let ex = w.run(
            &[
                "extract",
                c.links[2].0.to_str().unwrap(),
                target.to_str().unwrap(),
            ],
            &[],
        );
        assert!(ex.ok(), "the sound chain: {}", ex.all());
    }

    // A parent digest pointing elsewhere: the tip names another full backup of alpha
    // (an older tree without blob.bin, which the tip keeps from its real chain).
    {
        let w = World::new();
        let c = chain(&w);
        let other_src = w.dir.path().join("other-src");
        sample_tree(&other_src);
        fs::remove_file(other_src.join("home/agent/workspace/blob.bin")).unwrap();
        let (other, other_d) = save_link(
            &other_src,
            &c.work,
            &w.backups(),
            "20261201-090000",
            None,
            &w.passphrase,
        );
        let (tip, _) = &c.links[2];
        let real_parent = c.links[1].1;
        edit_link(
            tip,
            &w.passphrase,
            format!("chain_parent={}", hex(&real_parent)).as_bytes(),
            format!("chain_parent={}", hex(&other_d)).as_bytes(),
        );
        fs::remove_file(&c.links[0].0).unwrap();
        fs::remove_file(&c.links[1].0).unwrap();
        both_refuse(
            &w,
            tip,
            &[
                &name_of(tip),
                "keeps files from earlier backups",
                "which has no such file",
            ],
        );
        assert!(other.exists());
    }

    // Two links claiming one parent: a copy of the middle link under a later name.
    {
        let w = World::new();
        let c = chain(&w);
        let copy = w.backups().join("alpha-20261201-130000.tar.zst.gpg");
        fs::copy(&c.links[1].0, &copy).unwrap();
        both_refuse(
            &w,
            &c.links[2].0,
            &["both claim", &name_of(&c.links[1].0), &name_of(&copy)],
        );
    }

    // A dumpdir naming `../` (where the increment listed `abc`, kept unchanged).
    {
        let w = World::new();
        let c = chain(&w);
        let (tip, _) = &c.links[2];
        edit_link(tip, &w.passphrase, b"Nabc\0", b"N../\0");
        both_refuse(
            &w,
            tip,
            &[&name_of(tip), "dumpdir", "not a name inside its directory"],
        );
    }

    // A dumpdir of home that no longer lists agent: applying it deletes home/agent.
    {
        let w = World::new();
        let c = chain(&w);
        let (tip, _) = &c.links[2];
        edit_link(tip, &w.passphrase, b"Dagent\0", b"Dagenx\0");
        both_refuse(&w, tip, &[&name_of(tip), "would delete home/agent"]);
    }

    // Parents out of order (what a loop of names comes to): the middle link renamed to
    // a time before the full backup it builds on.
    {
        let w = World::new();
        let c = chain(&w);
        let moved = w.backups().join("alpha-20261201-090000.tar.zst.gpg");
        fs::rename(&c.links[1].0, &moved).unwrap();
        both_refuse(
            &w,
            &c.links[2].0,
            &["not older", &name_of(&moved), &name_of(&c.links[0].0)],
        );
    }

    // The middle link deleted: refused naming the link that misses its parent.
    {
        let w = World::new();
        let c = chain(&w);
        fs::remove_file(&c.links[1].0).unwrap();
        both_refuse(
            &w,
            &c.links[2].0,
            &[&name_of(&c.links[2].0), "missing a link"],
        );
        drop(c.src);
    }
}

/// Registers `alpha` without a VM (as a box whose machine is gone): `box rm` reaches its
/// backup check, then removes the row.
fn register_alpha(w: &World) {
    Registry::new(&w.state())
        .insert(&BoxRecord {
            name: BoxName::parse("alpha").unwrap(),
            machine: "alpha".into(),
            web_port: None,
            created_at: "2026-12-01T09:00:00Z".into(),
            box_version: "test".into(),
            base_image: "debian:12".into(),
            incomplete: false,
            kept_after_failure: None,
            machine_label: None,
            host: None,
            containment: None,
            backup_dir: None,
        })
        .unwrap();
}

#[test]
fn rm_refuses_when_the_newest_backups_chain_is_broken() {
    if !save_load_support::prerequisites() || !backup_support::trees::gnu_tar() {
        return;
    }
    let _serial = save_load_support::serial();
    let w = World::new();
    register_alpha(&w);
    let c = chain(&w);
    let tip = name_of(&c.links[2].0);

    // Whole: rm says the chain checks out (and, with no terminal, asks for --force).
    let r = w.run(&["rm", "alpha"], &[]);
    assert!(!r.ok());
    assert!(r.all().contains(&tip), "{}", r.all());
    assert!(r.all().contains("link 3 of a chain"), "{}", r.all());
    assert!(r.all().contains("non-interactive"), "{}", r.all());

    // The middle link damaged in its salt: with any other passphrase it would read as
    // "another passphrase", but the passphrase opens the tip, which was saved on it under
    // the same one: refused as damaged, naming the link, before the name is asked for.
    let middle = fs::read(&c.links[1].0).unwrap();
    let mut damaged = middle.clone();
    damaged[7] ^= 0x01;
    fs::write(&c.links[1].0, &damaged).unwrap();
    let r = w.run(&["rm", "alpha"], &[]);
    assert!(!r.ok());
    for word in [
        "does not restore",
        &name_of(&c.links[1].0),
        "it is damaged",
        "--force",
    ] {
        assert!(r.all().contains(word), "{word:?} in {}", r.all());
    }
    assert!(!r.all().contains("non-interactive"), "{}", r.all());
    assert!(w.registered("alpha"));
    fs::write(&c.links[1].0, &middle).unwrap();

    // The middle link gone: refused for that reason, naming the link; the box stays.
    fs::remove_file(&c.links[1].0).unwrap();
    let r = w.run(&["rm", "alpha"], &[]);
    assert!(!r.ok());
    for word in ["does not restore", "missing a link", &tip, "--force"] {
        assert!(r.all().contains(word), "{word:?} in {}", r.all());
    }
    assert!(!r.all().contains("non-interactive"), "{}", r.all());
    assert!(w.registered("alpha"));

    // Without the passphrase it cannot check: refused for that reason, before the name
    // would be asked for (on a terminal it would be asked for: tests/prompts_pty.rs).
    let r = w.run(&["rm", "alpha"], &[("BOX_PASSPHRASE_FILE", "")]);
    assert!(!r.ok());
    for word in ["cannot check", "passphrase is needed", "--force"] {
        assert!(r.all().contains(word), "{word:?} in {}", r.all());
    }
    assert!(!r.all().contains("non-interactive"), "{}", r.all());
    assert!(w.registered("alpha"));

    // Another passphrase from the environment cannot check it: refused as that, not taken
    // for a broken chain, and never asked again (nobody types it).
    let other = w.dir.path().join("other-passphrase");
    fs::write(&other, "not the one\n").unwrap();
    let r = w.run(
        &["rm", "alpha"],
        &[("BOX_PASSPHRASE_FILE", other.to_str().unwrap())],
    );
    assert!(!r.ok());
    for word in ["cannot check", "does not open", &tip, "--force"] {
        assert!(r.all().contains(word), "{word:?} in {}", r.all());
    }
    assert!(!r.all().contains("does not restore"), "{}", r.all());
    assert!(!r.all().contains("non-interactive"), "{}", r.all());
    assert!(!r.all().contains("try again"), "{}", r.all());
    assert!(w.registered("alpha"));

    // --force deletes anyway, saying what is lost.
    let r = w.run(&["rm", "alpha", "--force"], &[]);
    assert!(r.ok(), "{}", r.all());
    assert!(r.all().contains("does not restore"), "{}", r.all());
    assert!(!w.registered("alpha"));

    // --force with no terminal and no passphrase anywhere: it asks nothing, says it did not
    // check, and deletes (issue 31: it used to wait for a passphrase).
    register_alpha(&w);
    let started = std::time::Instant::now();
    let r = w.run(&["rm", "alpha", "--force"], &[("BOX_PASSPHRASE_FILE", "")]);
    assert!(r.ok(), "{}", r.all());
    assert!(
        r.all().contains("not checking that it restores"),
        "{}",
        r.all()
    );
    assert!(!r.all().contains("Passphrase"), "{}", r.all());
    assert!(!w.registered("alpha"));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// A link taken away from its chain (mailed, copied to a stick): `box extract` finds the
/// rest with `--chain-dir`, and without it says the chain is incomplete.
#[test]
fn a_link_elsewhere_finds_its_chain_with_chain_dir() {
    if !save_load_support::prerequisites() || !backup_support::trees::gnu_tar() {
        return;
    }
    let w = World::new();
    let c = chain(&w);
    let away = w.dir.path().join("away");
    fs::create_dir_all(&away).unwrap();
    let tip = away.join(name_of(&c.links[2].0));
    fs::rename(&c.links[2].0, &tip).unwrap();
    let alone = w.dir.path().join("alone");
    let ex = w.run(
        &["extract", tip.to_str().unwrap(), alone.to_str().unwrap()],
        &[],
    );
    assert!(!ex.ok(), "a link without its chain extracted: {}", ex.all());
    assert!(!alone.exists());
    let target = w.dir.path().join("extracted");
    let ex = w.run(
        &[
            "extract",
            tip.to_str().unwrap(),
            target.to_str().unwrap(),
            "--chain-dir",
            w.backups().to_str().unwrap(),
        ],
        &[],
    );
    assert!(ex.ok(), "box extract --chain-dir: {}", ex.all());
    let ws = target.join("home/agent/workspace");
    assert_eq!(fs::read_to_string(ws.join("added.txt")).unwrap(), "added\n");
    assert_eq!(
        fs::read_to_string(ws.join("probe.txt")).unwrap(),
        "changed once\n"
    );
    drop(c.src);
}

/// A link rewritten between finding the chain (its digest taken) and validating it, even
/// byte for byte the same: the restore says it changed and restores nothing, rather than
/// trust a digest of a file that is no longer the one read.
#[test]
fn a_link_that_changes_after_it_was_hashed_is_refused() {
    let w = World::new();
    let c = chain(&w);
    let pass = backup_support::secret(&w.passphrase);
    let tip = &c.links[2].0;
    let links = box_host::backup::chain::discover_links(tip, None, &|p| {
        box_host::backup::load::peek_place(p, &pass)
    })
    .unwrap();
    assert_eq!(links.len(), 3);
    // Unchanged: the chain validates.
    assert!(box_host::backup::load::validate_chain(&links, &pass).is_ok());
    let middle = &c.links[1].0;
    let bytes = fs::read(middle).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(middle, &bytes).unwrap();
    let e = box_host::backup::load::validate_chain(&links, &pass)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&name_of(middle)) && e.contains("changed while it was being read"),
        "{e}"
    );
}

/// Where a backup sits in its chain is read from its manifest before anything is
/// validated. A file damaged before it is read on to its integrity check and is that error,
/// never taken for a full backup: a save would build a link on it, a restore would end its
/// chain there. One that decrypts whole but holds no archive has no place; its validation
/// names why.
#[test]
fn a_backup_unreadable_up_to_its_manifest_has_no_place() {
    let w = World::new();
    let c = chain(&w);
    let pass = backup_support::secret(&w.passphrase);
    let peek = |p: &Path| box_host::backup::load::peek_place(p, &pass);
    let tip = &c.links[2].0;
    assert_eq!(peek(tip).unwrap().map(|p| p.link), Some(2));
    // A byte of its first compressed block changed (the manifest comes later).
    let mut damaged = fs::read(tip).unwrap();
    damaged[200] ^= 0x10;
    fs::write(tip, &damaged).unwrap();
    let e = format!("{:#}", peek(tip).unwrap_err());
    assert!(e.contains("corrupt or truncated"), "{e}");
    assert!(e.contains("integrity check"), "{e}");
    // Encrypted, authentic, but no archive inside.
    let words = w.backups().join("alpha-20261201-130000.tar.zst.gpg");
    encrypt_bytes(b"plain words, no archive", &words, &w.passphrase);
    assert_eq!(peek(&words).unwrap(), None);
    let e = format!(
        "{:#}",
        box_host::backup::load::validate_backup(&words, &pass).unwrap_err()
    );
    assert!(e.contains("not a valid archive"), "{e}");
    drop(c.src);
}
