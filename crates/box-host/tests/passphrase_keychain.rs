//! The keychain as a Linux desktop user has it: a session bus and GNOME Keyring's Secret
//! Service, unlocked (as a login unlocks it), both real and private to this test (its own
//! bus, its own keyring files under a temp home). `box passphrase store` (the passphrase
//! typed twice on a terminal), `status`, then a `box extract` with no passphrase variable
//! set at all takes it from the keychain without a prompt; `forget` removes it, after which
//! an extract without a terminal fails naming every source.
//!
//! Needs `dbus-daemon` and `gnome-keyring-daemon` (scripts/setup.sh installs them); without
//! them: SKIPPED (a failure under CI=true).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
mod pty_support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use backup_support::*;

/// A private session bus and a Secret Service on it, unlocked; both end when this drops.
struct Keyring {
    bus: Child,
    address: String,
    home: PathBuf,
}

impl Keyring {
    fn start(home: &Path) -> Option<Self> {
        let missing: Vec<&str> = ["dbus-daemon", "gnome-keyring-daemon"]
            .into_iter()
            .filter(|tool| {
                !Command::new("sh")
                    .args(["-c", &format!("command -v {tool}")])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{missing:?} needed (scripts/setup.sh installs them)"
            );
            println!("SKIPPED: {missing:?} not found");
            return None;
        }
        std::fs::create_dir_all(home.join("run")).unwrap();
        let mut bus = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .env("HOME", home)
            .env("XDG_RUNTIME_DIR", home.join("run"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut address = String::new();
        BufReader::new(bus.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        let address = address.trim().to_string();
        assert!(address.starts_with("unix:"), "{address:?}");
        // As a login unlocks it: the login keyring made (or opened) with this password,
        // only the secrets component.
        let mut unlock = Command::new("gnome-keyring-daemon")
            .args(["--unlock", "--components=secrets"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_RUNTIME_DIR", home.join("run"))
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        unlock
            .stdin
            .take()
            .unwrap()
            .write_all(b"keyring-login-password")
            .unwrap();
        assert!(
            unlock.wait().unwrap().success(),
            "gnome-keyring-daemon --unlock"
        );
        Some(Keyring {
            bus,
            address,
            home: home.to_path_buf(),
        })
    }

    /// `box ARGS` as a user of this desktop session runs it: no passphrase variable set.
    fn box_cmd(&self, t: &Path, args: &[&str]) -> Command {
        let mut cmd = box_cmd(t);
        cmd.env("DBUS_SESSION_BUS_ADDRESS", &self.address)
            .env("XDG_RUNTIME_DIR", self.home.join("run"))
            .args(args);
        cmd
    }
}

impl Drop for Keyring {
    fn drop(&mut self) {
        // The keyring daemon leaves with its bus; its files are in the temp home.
        let _ = self.bus.kill();
        let _ = self.bus.wait();
    }
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_keychain_holds_the_passphrase_for_every_verb() {
    let t = tempfile::tempdir().unwrap();
    let Some(keyring) = Keyring::start(&t.path().join("session")) else {
        return;
    };
    let root = t.path().join("data");
    sample_tree(&root);
    export(&root, &t.path().join("parts"), 1 << 20);
    let file = t.path().join("alpha-20261129-120000.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &file, PASS);

    // Stored as a user stores it: typed twice on a terminal, never echoed.
    let mut pty = pty_support::spawn(keyring.box_cmd(t.path(), &["passphrase", "store"]));
    pty.expect("Passphrase: ", Duration::from_secs(30));
    pty.send(format!("{PASS}\n").as_bytes());
    pty.expect("Confirm passphrase: ", Duration::from_secs(30));
    pty.send(format!("{PASS}\n").as_bytes());
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(status.success(), "{shown}");
    assert!(shown.contains("Secret Service"), "{shown}");
    assert!(!shown.contains(PASS), "echoed:\n{shown}");

    let status = keyring
        .box_cmd(t.path(), &["passphrase", "status"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", text(&status));
    assert!(
        text(&status).contains("Passphrase source now: the keychain"),
        "{}",
        text(&status)
    );
    assert!(!text(&status).contains(PASS));

    // No variable, no terminal: the keychain answers, nothing asks.
    let out = t.path().join("out");
    let extract = keyring
        .box_cmd(t.path(), &["extract"])
        .arg(&file)
        .arg(&out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(extract.status.success(), "{}", text(&extract));
    assert!(!text(&extract).contains(PASS));
    assert_eq!(snapshot(&out), expected_after_excludes(&root));

    // Forgotten: the next one has nowhere to take it from, and says where it looked.
    let forget = keyring
        .box_cmd(t.path(), &["passphrase", "forget"])
        .output()
        .unwrap();
    assert!(forget.status.success(), "{}", text(&forget));
    let again = keyring
        .box_cmd(t.path(), &["extract"])
        .arg(&file)
        .arg(t.path().join("out2"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    for source in ["BOX_PASSPHRASE_FILE", "BOX_PASSPHRASE_COMMAND", "keychain"] {
        assert!(
            text(&again).contains(source),
            "{source} in {}",
            text(&again)
        );
    }
    assert!(!t.path().join("out2").exists());
}
