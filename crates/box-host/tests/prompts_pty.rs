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

/// A registered box `alpha` whose smolvm is a recorder: any call means the prompt let
/// `box save` through.
fn registered_box(t: &Path) -> (Command, std::path::PathBuf) {
    std::fs::create_dir_all(t.join("backups")).unwrap();
    let state = StateDir::at(t.join(".box-home"));
    Registry::new(&state)
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
    let mut cmd = box_cmd(t);
    cmd.env("SMOLVM", &smolvm)
        .env("BACKUP_DIR", t.join("backups"))
        .args(["save", "alpha"]);
    (cmd, calls)
}

#[test]
fn save_asks_twice_and_refuses_a_mismatch_before_touching_the_box() {
    let t = tempfile::tempdir().unwrap();
    let (cmd, calls) = registered_box(t.path());
    let mut pty = pty_support::spawn(cmd);
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
    let (cmd, calls) = registered_box(&t.path().join("again"));
    let mut pty = pty_support::spawn(cmd);
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
    let mut cmd = box_cmd(t.path());
    cmd.env("SMOLVM", t.path().join("smolvm"))
        .env("BACKUP_DIR", t.path().join("backups"))
        .args(["rm", "alpha", "--force"]);
    let mut pty = pty_support::spawn(cmd);
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(!shown.contains("Passphrase"), "rm --force asked:\n{shown}");
    assert!(shown.contains("not checking that it restores"), "{shown}");
    // (The recorder smolvm fails its calls: whatever rm then says, it did not wait.)
    let _ = status;
}
