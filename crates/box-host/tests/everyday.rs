//! Everyday use of one box from the host, end to end through the smolvm simulator with the
//! real `hb`, provisioning and Executor (save_load_support's world):
//!
//! * `box exec`: the command's exit code (a signal's too) is box's, stdin reaches it byte
//!   for byte, stdout and stderr stay apart, words are never re-read by a shell, `agent` by
//!   default and root with `--root`, a pty only on a terminal; a stopped or unknown box
//!   and a missing command are clear errors;
//! * `box logs`: a service's log, `-n`, and `-f` following it as it grows;

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pty_support;
mod save_load_support;

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use save_load_support::{World, prerequisites, serial};

/// `box exec alpha <args>` with `stdin` fed in; (exit code, stdout bytes, stderr).
fn exec(w: &World, args: &[&str], stdin: &[u8]) -> (Option<i32>, Vec<u8>, String) {
    let mut full = vec!["exec", "alpha"];
    full.extend_from_slice(args);
    let mut child = w
        .command(&full, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    (
        out.status.code(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn exec_text(w: &World, args: &[&str]) -> (Option<i32>, String, String) {
    let (code, out, err) = exec(w, args, b"");
    (code, String::from_utf8_lossy(&out).into_owned(), err)
}

#[test]
fn exec_and_logs_on_a_running_box() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let new = w.run(&["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha: {}", new.all());

    // Exit codes are the command's, a signal's as a shell reports it (128 + n).
    for (script, want) in [("exit 0", 0), ("exit 7", 7), ("exit 255", 255)] {
        let (code, _, err) = exec_text(&w, &["--", "sh", "-c", script]);
        assert_eq!(code, Some(want), "{script}: {err}");
    }
    let (code, _, _) = exec_text(&w, &["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(code, Some(128 + 15));
    // stdout and stderr apart, as the command wrote them.
    let (code, out, err) = exec_text(&w, &["--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!((code, out.as_str()), (Some(3), "out\n"));
    assert!(err.contains("err\n") && !err.contains("out"), "{err}");
    // The words arrive as they were given: no shell re-reads quotes, `$` or spaces.
    let (code, out, err) = exec_text(&w, &["--", "printf", "%s|", "a b", "$HOME", "it's", "-q"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "a b|$HOME|it's|-q|"),
        "{err}"
    );
    // As agent with its login environment (which starts in ~/workspace, as box enter
    // does); --root as root.
    let (_, out, _) = exec_text(&w, &["--", "sh", "-c", "id -un; pwd; command -v hb"]);
    assert_eq!(
        out,
        "agent\n/data/home/agent/workspace\n/usr/local/bin/hb\n"
    );
    let (_, out, _) = exec_text(&w, &["--root", "--", "id", "-un"]);
    assert_eq!(out, "root\n");
    // stdin reaches the command byte for byte, and its stdout comes back the same: 1 MiB
    // of every byte value, no pty in the way (no CR added, no ^D or ^C read as keys).
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 256) as u8).collect();
    let (code, out, err) = exec(&w, &["--", "cat"], &data);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out == data,
        "cat returned {} bytes, not the same",
        out.len()
    );
    let (code, out, _) = exec(
        &w,
        &["--", "sh", "-c", "read a; read b; echo \"$b $a\""],
        b"one\ntwo\n",
    );
    assert_eq!(
        (code, String::from_utf8_lossy(&out).as_ref()),
        (Some(0), "two one\n")
    );
    // No terminal: the command has none either.
    let (code, out, _) = exec_text(&w, &["--", "sh", "-c", "tty || true"]);
    assert_eq!((code, out.as_str()), (Some(0), "not a tty\n"));
    // On a terminal: a pty in the guest, the exit code still the command's.
    let mut cmd = w.command(&["exec", "alpha", "--", "sh", "-c", "tty; exit 4"], &[]);
    cmd.env("TERM", "xterm");
    let mut pty = pty_support::spawn(cmd);
    let status = pty.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(4), "{}", pty.shown());
    assert!(pty.shown().contains("/dev/pts/"), "{}", pty.shown());

    // A command that does not exist: the shell's 127 and its message.
    let (code, _, err) = exec_text(&w, &["--", "no-such-command-x"]);
    assert_eq!(code, Some(127), "{err}");
    assert!(err.contains("no-such-command-x"), "{err}");
    // Usage errors exit 2 before anything runs.
    let calls = w.calls().len();
    for args in [
        &["exec", "alpha"][..],
        &["exec", "alpha", "--"],
        &["logs", "alpha"],
    ] {
        let r = w.run(args, &[]);
        assert_eq!(r.code, Some(2), "{args:?}: {r}");
    }
    assert_eq!(w.calls().len(), calls, "a usage error called smolvm");
    // An unknown box.
    let r = w.run(&["exec", "nosuch", "--", "true"], &[]);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("no box named 'nosuch'"), "{r}");

    // Logs: the tail, -n, an unknown service, and -f following new lines.
    w.sh(
        "alpha",
        "for i in 1 2 3 4 5; do echo tail-$i; done >> /data/logs/workload.log",
    );
    let r = w.run(&["logs", "alpha", "workload", "-n", "3"], &[]);
    assert!(r.ok(), "{r}");
    assert_eq!(r.stdout, "tail-3\ntail-4\ntail-5\n", "{r}");
    let r = w.run(&["logs", "alpha", "nosuch"], &[]);
    assert_eq!(r.code, Some(1), "{r}");
    assert!(r.stderr.contains("unknown service"), "{r}");
    w.sh("alpha", "printf 'first-line\\n' >> /data/logs/workload.log");
    let mut follow = w.spawn(&["logs", "alpha", "workload", "-f", "-n", "1"], &[]);
    let mut stdout = follow.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let shows = |needle: &str| {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if String::from_utf8_lossy(&seen.lock().unwrap()).contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    assert!(shows("first-line"), "box logs -f never showed the tail");
    w.sh("alpha", "printf 'later-line\\n' >> /data/logs/workload.log");
    assert!(shows("later-line"), "box logs -f did not follow the log");
    let _ = follow.kill();
    let _ = follow.wait();

    // A stopped box: exec and logs say how to start it.
    let stop = w.run(&["stop", "alpha"], &[]);
    assert!(stop.ok(), "{stop}");
    for args in [
        &["exec", "alpha", "--", "true"][..],
        &["logs", "alpha", "executor"],
    ] {
        let r = w.run(args, &[]);
        assert_eq!(r.code, Some(1), "{args:?}: {r}");
        assert!(r.stderr.contains("start it with: box start alpha"), "{r}");
    }
}

/// The backup a save writes names the `box`, `hb` and smolvm that made it.
#[test]
fn a_backup_names_the_box_hb_and_smolvm_that_made_it() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::new();
    let new = w.run(&["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha: {}", new.all());
    let backup = w.save_alpha("Saved and verified");

    let extracted = w.dir.path().join("extracted");
    let ex = w.run(
        &[
            "extract",
            backup.to_str().unwrap(),
            extracted.to_str().unwrap(),
        ],
        &[],
    );
    assert!(ex.ok(), "box extract: {ex}");
    let text =
        std::fs::read_to_string(extracted.join("home/agent/.config/hermes-box/runtime-manifest"))
            .unwrap();
    let manifest = box_proto::RuntimeManifest::parse(&text).unwrap();
    let version_of = |bin: &std::path::Path| {
        let out = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // `box 0.1.0 (abc)`, `hb 0.1.0 (abc)`, `smolvm 1.9.2`: the manifest holds the version.
    let box_version = version_of(&save_load_support::box_bin());
    let hb_version = version_of(&save_load_support::sibling("hb"));
    let smolvm_version = version_of(&save_load_support::sibling("smolvm-sim"));
    assert_eq!(
        manifest.get("box"),
        box_version.strip_prefix("box "),
        "{text}"
    );
    assert_eq!(manifest.get("hb"), hb_version.strip_prefix("hb "), "{text}");
    assert_eq!(
        manifest.get("smolvm"),
        smolvm_version.split_whitespace().last(),
        "{text}"
    );
}
