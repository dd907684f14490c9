//! The passphrase prompt as a person meets it: `box save` and `box extract` with no
//! BOX_PASSPHRASE* set, on a real pseudo-terminal. What is typed is never shown, save asks
//! twice and refuses a mismatch before any smolvm call, extract asks once and the typed
//! bytes are the passphrase, and the terminal's settings are the same afterwards, also when
//! ^C interrupts the prompt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod pty_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use backup_support::*;
use box_host::state::{BoxRecord, Registry, StateDir};
use box_proto::BoxName;

const PROMPT: Duration = Duration::from_secs(20);

/// A backup of the sample tree, made with [`PASS`].
fn backup(t: &Path) -> std::path::PathBuf {
    let root = t.join("data");
    sample_tree(&root);
    export(&root, &t.join("parts"), 1 << 20);
    let out = t.join("backups/alpha-20261129-120000.tar.zst.gpg");
    save_parts(&t.join("parts"), &out, PASS);
    out
}

/// `box` with no passphrase in its environment (box_cmd clears it).
fn box_on_pty(t: &Path, args: &[&std::ffi::OsStr]) -> pty_support::Pty {
    let mut cmd = box_cmd(t);
    cmd.args(args);
    pty_support::spawn(cmd)
}

#[test]
fn extract_asks_once_without_echo_and_uses_what_was_typed() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let target = t.path().join("out");
    let mut pty = box_on_pty(
        t.path(),
        &["extract".as_ref(), file.as_ref(), target.as_ref()],
    );
    let before = pty.initial_stty.clone();
    pty.expect("Passphrase: ", PROMPT);
    pty.send(format!("{PASS}\n").as_bytes());
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(status.success(), "{shown}");
    assert!(
        !shown.contains(PASS),
        "the typed passphrase was echoed:\n{shown}"
    );
    assert_eq!(shown.matches("Passphrase:").count(), 1, "{shown}");
    assert!(!shown.contains("Confirm"), "decrypting asks once:\n{shown}");
    assert_eq!(
        snapshot(&target),
        expected_after_excludes(&t.path().join("data"))
    );
    assert_eq!(pty.stty(), before, "the terminal settings changed");
}

#[test]
fn extract_interrupted_at_the_prompt_restores_the_terminal() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let target = t.path().join("out");
    let mut pty = box_on_pty(
        t.path(),
        &["extract".as_ref(), file.as_ref(), target.as_ref()],
    );
    let before = pty.initial_stty.clone();
    pty.expect("Passphrase: ", PROMPT);
    // Half a passphrase, then ^C: the line discipline sends SIGINT to box.
    pty.send(b"correct hor");
    std::thread::sleep(Duration::from_millis(200));
    pty.send(b"\x03");
    let status = pty.wait(Duration::from_secs(30));
    let shown = pty.shown();
    assert!(!status.success(), "{shown}");
    assert!(!shown.contains("correct hor"), "echoed:\n{shown}");
    assert_eq!(
        pty.stty(),
        before,
        "SIGINT at the prompt left the terminal changed (echo off?)"
    );
    assert!(!target.exists());
}

/// A registered box `alpha` whose smolvm is a recorder (any call means a prompt let `box`
/// through); returns where the recorder writes the calls.
fn registered_box(t: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(t.join("backups")).unwrap();
    Registry::new(&state_of(t))
        .insert(&BoxRecord {
            name: BoxName::parse("alpha").unwrap(),
            machine: "alpha".into(),
            web_port: None,
            created_at: "2026-11-29T12:00:00Z".into(),
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
    let calls = t.join("smolvm-calls");
    let smolvm = t.join("smolvm");
    std::fs::write(
        &smolvm,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\necho 'no such machine' >&2\nexit 1\n",
            calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&smolvm, std::fs::Permissions::from_mode(0o755)).unwrap();
    calls
}

/// The state dir `box_cmd` gives box.
fn state_of(t: &Path) -> StateDir {
    StateDir::at(t.join(".box-home"))
}

/// `box <args>` for the box of [`registered_box`], with no passphrase in its environment.
fn box_at(t: &Path, args: &[&str]) -> Command {
    let mut cmd = box_cmd(t);
    cmd.env("SMOLVM", t.join("smolvm"))
        .env("BACKUP_DIR", t.join("backups"))
        .args(args);
    cmd
}

#[test]
fn save_asks_twice_and_refuses_a_mismatch_before_touching_the_box() {
    let t = tempfile::tempdir().unwrap();
    let calls = registered_box(t.path());
    let mut pty = pty_support::spawn(box_at(t.path(), &["save", "alpha"]));
    let before = pty.initial_stty.clone();
    pty.expect("Passphrase: ", PROMPT);
    pty.send(format!("{PASS}\n").as_bytes());
    pty.expect("Confirm passphrase: ", PROMPT);
    pty.send(b"correct horse battery stapler\n");
    let status = pty.wait(Duration::from_secs(30));
    let shown = pty.shown();
    assert_eq!(status.code(), Some(1), "{shown}");
    assert!(shown.contains("passphrases do not match"), "{shown}");
    assert!(!shown.contains("battery"), "echoed:\n{shown}");
    assert!(!calls.exists(), "smolvm was called after a mismatch");
    assert!(listing(&t.path().join("backups")).is_empty());
    assert_eq!(pty.stty(), before);

    // The same answer twice goes on to the box (here a smolvm that knows no machine).
    let again = t.path().join("again");
    let calls = registered_box(&again);
    let mut pty = pty_support::spawn(box_at(&again, &["save", "alpha"]));
    pty.expect("Passphrase: ", PROMPT);
    pty.send(format!("{PASS}\n").as_bytes());
    pty.expect("Confirm passphrase: ", PROMPT);
    pty.send(format!("{PASS}\n").as_bytes());
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(
        !status.success(),
        "the recorder smolvm fails every call: {shown}"
    );
    assert!(!shown.contains("do not match"), "{shown}");
    assert!(!shown.contains(PASS), "echoed:\n{shown}");
    assert!(calls.exists(), "box save stopped at the prompt:\n{shown}");
    assert_eq!(pty.stty(), before);
}

/// `box rm --force` on a terminal, with a backup to check and no passphrase in the
/// environment, never asks for one (issue 31): it says it does not check, and goes on.
#[test]
fn rm_force_never_asks_for_the_passphrase() {
    let t = tempfile::tempdir().unwrap();
    // The box and its recorder smolvm (what it answers does not matter here).
    registered_box(t.path());
    std::fs::write(
        t.path().join("backups/alpha-20261129-120000.tar.zst.gpg"),
        b"a backup it would need the passphrase to check",
    )
    .unwrap();
    let cmd = box_at(t.path(), &["rm", "alpha", "--force"]);
    let mut pty = pty_support::spawn(cmd);
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(!shown.contains("Passphrase"), "rm --force asked:\n{shown}");
    assert!(shown.contains("not checking that it restores"), "{shown}");
    // (The recorder smolvm fails its calls: whatever rm then says, it did not wait.)
    let _ = status;
}

/// `alpha` registered with a backup made with [`PASS`] as its newest; with `recorded`, also
/// what box recorded of it when it saved it (the memo a save keeps: its SHA-256 then).
/// Returns the backup.
fn box_with_a_backup(t: &Path, recorded: bool) -> std::path::PathBuf {
    registered_box(t);
    let file = backup(t);
    if recorded {
        let mut known = box_host::backup::tree_cache::Known::fresh();
        let full = box_host::backup::chain::Place {
            link: 0,
            parent: None,
        };
        let digest = box_host::backup::chain::file_digest(&file).unwrap();
        known.add(&file, digest, Some(full)).unwrap();
        let name = BoxName::parse("alpha").unwrap();
        known.store(&state_of(t), &name).unwrap();
    }
    file
}

/// A byte of the first block of the encrypted packet in a backup box wrote: 10 bytes after
/// its key packet (new-format tag 3), past the SEIP header and version byte (3 to 7 bytes),
/// inside the first 16 bytes of ciphertext.
fn first_block_byte(file: &[u8]) -> usize {
    assert_eq!(file[0], 0xC3, "a new-format key packet");
    let seip = 2 + usize::from(file[1]);
    assert_eq!(file[seip], 0xD2, "the SEIP packet follows");
    seip + 10
}

fn still_registered(t: &Path) -> bool {
    let name = BoxName::parse("alpha").unwrap();
    Registry::new(&state_of(t)).get(&name).unwrap().is_some()
}

fn flip(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(file, bytes).unwrap();
}

/// A passphrase that does not open the newest backup is asked for again (the backup's
/// bytes are those box saved: it is another passphrase), and the right one then leads on
/// to the name check; nothing typed is shown.
#[test]
fn rm_asks_again_after_another_passphrase_then_checks_and_asks_for_the_name() {
    let t = tempfile::tempdir().unwrap();
    box_with_a_backup(t.path(), true);
    let mut pty = pty_support::spawn(box_at(t.path(), &["rm", "alpha"]));
    let before = pty.initial_stty.clone();
    pty.expect("Passphrase: ", PROMPT);
    pty.send(b"not the one it was saved with\n");
    pty.expect_times("Passphrase: ", 2, Duration::from_secs(60));
    pty.send(format!("{PASS}\n").as_bytes());
    pty.expect("Type the box name 'alpha'", Duration::from_secs(60));
    pty.send(b"not-alpha\n");
    let status = pty.wait(Duration::from_secs(30));
    let shown = pty.shown();
    assert_eq!(status.code(), Some(1), "{shown}");
    for said in [
        "does not open",
        "saved under another passphrase",
        "try again",
        "it restores",
        "deletion cancelled",
    ] {
        assert!(shown.contains(said), "{said:?} in:\n{shown}");
    }
    assert!(!shown.contains("does not restore"), "{shown}");
    assert!(!shown.contains("not the one it"), "echoed:\n{shown}");
    assert!(!shown.contains(PASS), "echoed:\n{shown}");
    assert!(still_registered(t.path()));
    assert_eq!(pty.stty(), before);
}

/// A newest backup damaged in its first bytes, with the right passphrase typed: refused as
/// damaged, naming the file and `--force`, never asked again as if the passphrase were
/// wrong, never reaching the name check; the box stays registered. Both ways box tells:
/// the first block from the file alone (the key opens the file's end), the salt, the S2K
/// count and the encrypted session key only from the SHA-256 box recorded when it saved
/// the file (each derives another key, as another passphrase does).
#[test]
fn rm_refuses_a_newest_backup_damaged_in_its_first_bytes() {
    // Offsets in the key packet: 2 header bytes, then version, cipher, S2K type, hash,
    // 8 bytes of salt, the count, and the 33 bytes of encrypted session key.
    for (what, at, recorded) in [
        ("first block", None, false),
        ("salt", Some(2 + 4 + 3), true),
        ("S2K count", Some(2 + 12), true),
        ("session key", Some(2 + 13 + 9), true),
    ] {
        let t = tempfile::tempdir().unwrap();
        let file = box_with_a_backup(t.path(), recorded);
        let at = at.unwrap_or_else(|| first_block_byte(&std::fs::read(&file).unwrap()));
        flip(&file, at);
        let mut pty = pty_support::spawn(box_at(t.path(), &["rm", "alpha"]));
        pty.expect("Passphrase: ", PROMPT);
        pty.send(format!("{PASS}\n").as_bytes());
        let status = pty.wait(Duration::from_secs(60));
        let shown = pty.shown();
        assert_eq!(status.code(), Some(1), "{what}: {shown}");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for said in ["does not restore", &name, "damaged", "box rm alpha --force"] {
            assert!(shown.contains(said), "{what}: {said:?} in:\n{shown}");
        }
        assert_eq!(shown.matches("Passphrase:").count(), 1, "{what}: {shown}");
        assert!(!shown.contains("Type the box name"), "{what}: {shown}");
        assert!(still_registered(t.path()), "{what}");
    }
}
