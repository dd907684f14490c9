//! Each source of the backup passphrase set the way a user sets it, through a real
//! `box extract` of a backup made with it: `BOX_PASSPHRASE_FILE`, `BOX_PASSPHRASE`,
//! `BOX_PASSPHRASE_COMMAND` (its stderr shown, its failures named by its words and never
//! its output, its environment the allowlisted one), the order when several are set, and
//! the keychain that is not there (no Secret Service on this headless machine, nor on a
//! user's SSH session): said in one line on the terminal before the prompt.
//!
//! The keychain's happy path, against a real Secret Service, is `passphrase_keychain.rs`;
//! its store, forget and status logic is also unit-tested on an in-memory keychain
//! (`passphrase::keychain::Memory`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod pty_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use backup_support::*;

/// A backup of the sample tree made with [`PASS`].
fn backup(t: &Path) -> PathBuf {
    let root = t.join("data");
    sample_tree(&root);
    export(&root, &t.join("parts"), 1 << 20);
    let out = t.join("alpha-20261129-120000.tar.zst.gpg");
    save_parts(&t.join("parts"), &out, PASS);
    out
}

/// An executable script at `t/name`.
fn script(t: &Path, name: &str, body: &str) -> PathBuf {
    let path = t.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `box extract FILE t/out` with `env` (nothing else of a passphrase: box_cmd clears it).
fn extract(t: &Path, file: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = box_cmd(t);
    cmd.arg("extract").arg(file).arg(t.join("out"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn shown(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The extract restored the tree, and said nothing of the passphrase.
fn assert_restored(t: &Path, out: &Output) {
    let text = shown(out);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(PASS), "the passphrase was printed:\n{text}");
    assert_eq!(
        snapshot(&t.join("out")),
        expected_after_excludes(&t.join("data"))
    );
}

/// The extract failed with exit 1, saying each of `said`, never the passphrase, and made
/// no directory.
fn assert_refused(t: &Path, out: &Output, said: &[&str]) {
    let text = shown(out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for s in said {
        assert!(text.contains(s), "{s:?} in:\n{text}");
    }
    assert!(!text.contains(PASS), "the passphrase was printed:\n{text}");
    assert!(!t.join("out").exists());
}

#[test]
fn from_a_file_its_first_line() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let pass_file = t.path().join("pass");
    std::fs::write(&pass_file, format!("{PASS}\nnotes on the second line\n")).unwrap();
    let out = extract(
        t.path(),
        &file,
        &[("BOX_PASSPHRASE_FILE", pass_file.to_str().unwrap())],
    );
    assert_restored(t.path(), &out);
}

#[test]
fn from_the_environment() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let out = extract(t.path(), &file, &[("BOX_PASSPHRASE", PASS)]);
    assert_restored(t.path(), &out);
}

/// A password manager's command: `pass show box`'s shape (the passphrase on its first line,
/// notes after it), a word with a space in quotes, a message on stderr that the user sees.
/// It runs without a shell, with the allowlisted environment: not `BOX_PASSPHRASE_COMMAND`
/// itself, not an API key from the user's shell, not box's own knobs.
#[test]
fn from_a_command_its_first_line_with_its_stderr_shown() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let seen = t.path().join("seen");
    let store = t.path().join("store");
    std::fs::write(&store, format!("{PASS}\nurl: example\n")).unwrap();
    let manager = script(
        t.path(),
        "fake-pass",
        &format!(
            "{{ printf 'argv:'; printf ' [%s]' \"$@\"; echo; env; }} > '{}'\n\
             echo 'fake-pass: unlocking the store' >&2\n\
             cat '{}'",
            seen.display(),
            store.display()
        ),
    );
    let command = format!("{} show 'box backups'", manager.display());
    let out = extract(
        t.path(),
        &file,
        &[
            ("BOX_PASSPHRASE_COMMAND", &command),
            ("ANTHROPIC_API_KEY", "sk-decoy-key"),
            ("GNUPGHOME", "/home/u/.gnupg"),
        ],
    );
    assert_restored(t.path(), &out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("fake-pass: unlocking the store"),
        "{}",
        shown(&out)
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert!(seen.starts_with("argv: [show] [box backups]\n"), "{seen}");
    for absent in ["BOX_PASSPHRASE", "sk-decoy-key", "BOX_HOME", PASS] {
        assert!(
            !seen.contains(absent),
            "{absent} reached the command:\n{seen}"
        );
    }
    assert!(seen.contains("GNUPGHOME=/home/u/.gnupg"), "{seen}");
}

/// A command that fails, prints nothing or is not there: exit 1, the command named by its
/// words, never what it printed, and nothing extracted.
#[test]
fn a_failing_command_is_named_and_its_output_never_shown() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let failing = script(
        t.path(),
        "locked-store",
        &format!("echo '{PASS}'\necho 'store is locked' >&2\nexit 1"),
    );
    let empty = script(t.path(), "empty-store", "echo\necho notes");
    let missing = t.path().join("no-such-manager");
    for (command, said) in [
        (
            format!("{} show box", failing.display()),
            "exited with status 1",
        ),
        (empty.display().to_string(), "printed no passphrase"),
        (missing.display().to_string(), "cannot be run: no program"),
    ] {
        let out = extract(t.path(), &file, &[("BOX_PASSPHRASE_COMMAND", &command)]);
        let named = format!("the passphrase command `{command}` (BOX_PASSPHRASE_COMMAND)");
        assert_refused(t.path(), &out, &[&named, said]);
    }
    // Its stderr was the user's to see; its stdout (the passphrase) was never shown.
    let out = extract(
        t.path(),
        &file,
        &[("BOX_PASSPHRASE_COMMAND", failing.to_str().unwrap())],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("store is locked"));
    let out = extract(t.path(), &file, &[("BOX_PASSPHRASE_COMMAND", "pass 'show")]);
    assert_refused(t.path(), &out, &["BOX_PASSPHRASE_COMMAND cannot be read"]);
}

/// The first source set wins: a file over the command (which is never run), the variable
/// over the command; a wrong passphrase from the winner is an error, not a reason to try
/// the next.
#[test]
fn the_first_source_set_wins_and_the_command_then_never_runs() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let ran = t.path().join("ran");
    let command = script(
        t.path(),
        "manager",
        &format!("touch '{}'\necho '{PASS}'", ran.display()),
    );
    let command = command.to_str().unwrap();
    let pass_file = t.path().join("pass");
    std::fs::write(&pass_file, format!("{PASS}\n")).unwrap();
    let out = extract(
        t.path(),
        &file,
        &[
            ("BOX_PASSPHRASE_FILE", pass_file.to_str().unwrap()),
            ("BOX_PASSPHRASE_COMMAND", command),
        ],
    );
    assert_restored(t.path(), &out);
    assert!(!ran.exists(), "the command ran although a file was set");
    std::fs::remove_dir_all(t.path().join("out")).unwrap();

    let out = extract(
        t.path(),
        &file,
        &[
            ("BOX_PASSPHRASE", "not the passphrase"),
            ("BOX_PASSPHRASE_COMMAND", command),
        ],
    );
    assert_refused(t.path(), &out, &["wrong passphrase"]);
    assert!(
        !ran.exists(),
        "the command ran although BOX_PASSPHRASE was set"
    );

    // An empty BOX_PASSPHRASE_FILE counts as unset (as before): the command is used.
    let out = extract(
        t.path(),
        &file,
        &[
            ("BOX_PASSPHRASE_FILE", ""),
            ("BOX_PASSPHRASE_COMMAND", command),
        ],
    );
    assert_restored(t.path(), &out);
    assert!(ran.exists());
}

/// A session bus address that leads nowhere: what an SSH session or a headless server
/// looks like to the keychain (and never the developer's own keychain).
fn no_bus(t: &Path) -> String {
    format!("unix:path={}", t.join("no-session-bus").display())
}

/// No keychain to ask: box says so in one line on the terminal, then prompts, and the
/// typed passphrase opens the backup.
#[test]
fn an_absent_keychain_is_said_and_the_prompt_asked() {
    let t = tempfile::tempdir().unwrap();
    let file = backup(t.path());
    let mut cmd = box_cmd(t.path());
    cmd.env("DBUS_SESSION_BUS_ADDRESS", no_bus(t.path()))
        .arg("extract")
        .arg(&file)
        .arg(t.path().join("out"));
    let mut pty = pty_support::spawn(cmd);
    pty.expect("Passphrase: ", Duration::from_secs(30));
    pty.send(format!("{PASS}\n").as_bytes());
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(status.success(), "{shown}");
    let note = shown
        .lines()
        .find(|l| l.contains("keychain"))
        .unwrap_or_else(|| panic!("no word of the keychain:\n{shown}"))
        .trim_end();
    assert!(
        note.starts_with("The keychain is not available (the Secret Service cannot be reached")
            && note.ends_with("asking instead."),
        "{shown}"
    );
    assert!(shown.find(note) < shown.find("Passphrase: "), "{shown}");
    assert_eq!(shown.matches("Passphrase:").count(), 1, "{shown}");
    assert!(!shown.contains(PASS), "echoed:\n{shown}");
    assert_eq!(
        snapshot(&t.path().join("out")),
        expected_after_excludes(&t.path().join("data"))
    );
}

/// `box passphrase status|store|forget` with no keychain: status names the source it
/// would use and why the keychain is not there; store and forget fail saying why, store
/// after asking twice (nothing is stored anywhere else).
#[test]
fn passphrase_verbs_without_a_keychain_say_why() {
    let t = tempfile::tempdir().unwrap();
    let verb = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = box_cmd(t.path());
        cmd.env("DBUS_SESSION_BUS_ADDRESS", no_bus(t.path()))
            .arg("passphrase")
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    };
    let out = verb(&["status"], &[]).output().unwrap();
    let text = shown(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with("Passphrase source now: the prompt"),
        "{text}"
    );
    assert!(text.contains("keychain: not available (the Secret Service cannot be reached"));

    let out = verb(&["status"], &[("BOX_PASSPHRASE", PASS)])
        .output()
        .unwrap();
    let text = shown(&out);
    assert!(
        text.starts_with("Passphrase source now: BOX_PASSPHRASE\n"),
        "{text}"
    );
    assert!(!text.contains(PASS), "{text}");

    let mut pty = pty_support::spawn(verb(&["store"], &[]));
    pty.expect("Passphrase: ", Duration::from_secs(30));
    pty.send(format!("{PASS}\n").as_bytes());
    pty.expect("Confirm passphrase: ", Duration::from_secs(30));
    pty.send(format!("{PASS}\n").as_bytes());
    let status = pty.wait(Duration::from_secs(60));
    let text = pty.shown();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot store the passphrase in the Secret Service")
            && text.contains("BOX_PASSPHRASE_COMMAND"),
        "{text}"
    );
    assert!(!text.contains(PASS), "{text}");

    let out = verb(&["forget"], &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(shown(&out).contains("cannot reach the Secret Service"));
}
