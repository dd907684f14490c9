//! `BOX_PASSPHRASE_COMMAND`: the passphrase printed by a command the user names, as
//! restic's `--password-command` and borg's `BORG_PASSCOMMAND` read theirs (`pass show
//! box`, `secret-tool lookup …`, `op read …`).
//!
//! The command is split into words as `BOX_SSH_COMMAND` is ([`split_words`]) and run
//! without a shell. It gets the allowlisted environment of [`ChildKind::PassphraseCommand`],
//! stdin from `/dev/null`, and box's own stderr, so whatever it says reaches the user. It
//! stays in box's process group: a command that asks on the terminal (gpg's pinentry,
//! `systemd-ask-password`) can read it. Its stdout is read as `BOX_PASSPHRASE_FILE` is
//! (`first_line`), at most `MAX_OUTPUT` bytes, into memory that is wiped.
//!
//! Not the smolvm runner ([`crate::process::runner`]): that one captures stderr, puts the
//! call in a process group of its own (no terminal) and keeps stdout in a plain `String`.
//! Errors name the command's words, never what it printed.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use secrecy::SecretString;
use zeroize::Zeroizing;

use super::{COMMAND_VAR, LineProblem, first_line};
use crate::child_env::{self, ChildKind};
use crate::remote::quote::split_words;

/// How long the command may take (a person may be typing into a pinentry).
pub const DEADLINE: Duration = Duration::from_secs(60);
/// More than this on stdout is not a passphrase (`cat` of the wrong file).
const MAX_OUTPUT: usize = 64 * 1024;
/// How long to wait for stdout to close after the command exited (a background process it
/// started may hold it).
const PIPE_GRACE: Duration = Duration::from_secs(2);
const TICK: Duration = Duration::from_millis(20);

/// Runs the command `text` and returns the first line it printed.
pub fn passphrase_from(text: &str, deadline: Duration) -> Result<SecretString> {
    let words =
        split_words(text).map_err(|problem| anyhow!("{COMMAND_VAR} cannot be read: {problem}"))?;
    // Named as the user wrote it (quotes and all), so they find it in their own files.
    let what = format!("the passphrase command `{}` ({COMMAND_VAR})", text.trim());
    let mut cmd = Command::new(&words[0]);
    child_env::apply(&mut cmd, ChildKind::PassphraseCommand);
    cmd.args(&words[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!(
            "{what} cannot be run: no program '{}' (not on PATH, or no such file)",
            words[0]
        ),
        _ => anyhow!("{what} cannot be run: {e}"),
    })?;
    let (tx, rx) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            // One byte past the limit tells "too much" from "exactly the limit"; the rest is
            // drained unread, so a command that prints too much is told as such rather than
            // killed by SIGPIPE half-way.
            let mut out = Zeroizing::new(Vec::new());
            let mut stdout = stdout;
            let read = (&mut stdout)
                .take(MAX_OUTPUT as u64 + 1)
                .read_to_end(&mut out)
                .and_then(|_| std::io::copy(&mut stdout, &mut std::io::sink()))
                .map(|_| out);
            let _ = tx.send(read);
        });
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{what} did not finish within {} s and was stopped",
                    deadline.as_secs()
                );
            }
            Ok(None) => std::thread::sleep(TICK),
            Err(e) => {
                let _ = child.kill();
                bail!("{what}: cannot wait for it: {e}");
            }
        }
    };
    if !status.success() {
        let how = match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            (None, None) => "failed".to_string(),
        };
        bail!("{what} {how}; no passphrase read");
    }
    let out = match rx.recv_timeout(PIPE_GRACE) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => bail!("{what}: its output cannot be read: {e}"),
        Err(_) => bail!(
            "{what} exited, but its output stayed open (a process it started in the background holds it)"
        ),
    };
    if out.len() > MAX_OUTPUT {
        bail!(
            "{what} printed more than {} KiB: that is not a passphrase",
            MAX_OUTPUT / 1024
        );
    }
    first_line(&out).map_err(|problem| match problem {
        LineProblem::Empty => anyhow!("{what} printed no passphrase (its first line is empty)"),
        LineProblem::NotUtf8 => anyhow!("{what} printed a first line that is not UTF-8 text"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    fn script(dir: &std::path::Path, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("pp-cmd");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    fn err(text: &str, deadline: Duration) -> String {
        format!("{:#}", passphrase_from(text, deadline).unwrap_err())
    }

    #[test]
    fn the_first_line_of_stdout_is_the_passphrase() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = script(dir.path(), "printf 'hunter 2\\r\\nsecond line\\n'");
        let got = passphrase_from(&cmd, DEADLINE).unwrap();
        assert_eq!(got.expose_secret(), "hunter 2");
        // Words, quoting and no shell: `$HOME` and `;` reach the program as they are.
        let got = passphrase_from("printf '%s' 'a $HOME;b'", DEADLINE).unwrap();
        assert_eq!(got.expose_secret(), "a $HOME;b");
        let got = passphrase_from("printf \"x\\\"y\"", DEADLINE).unwrap();
        assert_eq!(got.expose_secret(), "x\"y");
    }

    #[test]
    fn failures_name_the_command_and_never_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let failing = script(dir.path(), "echo leaked-out; exit 3");
        let e = err(&format!("{failing} --flag"), DEADLINE);
        assert!(
            e.contains(&format!("`{failing} --flag`")) && e.contains("exited with status 3"),
            "{e}"
        );
        assert!(!e.contains("leaked-out"), "{e}");

        let e = err("true", DEADLINE);
        assert!(
            e.contains("`true`") && e.contains("printed no passphrase"),
            "{e}"
        );

        let e = err("/nonexistent/pp-cmd arg", DEADLINE);
        assert!(
            e.contains("`/nonexistent/pp-cmd arg`") && e.contains("no program"),
            "{e}"
        );

        let slow = script(dir.path(), "echo early-out; exec sleep 30");
        let started = Instant::now();
        let e = err(&slow, Duration::from_millis(300));
        assert!(e.contains("did not finish within"), "{e}");
        assert!(!e.contains("early-out"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));

        let big = script(dir.path(), "head -c 70000 /dev/zero | tr '\\0' a");
        assert!(err(&big, DEADLINE).contains("more than 64 KiB"));

        let e = err("printf '\\377\\n'", DEADLINE);
        assert!(e.contains("not UTF-8"), "{e}");

        let e = err("pass 'open", DEADLINE);
        assert!(e.contains("BOX_PASSPHRASE_COMMAND cannot be read"), "{e}");
    }
}
