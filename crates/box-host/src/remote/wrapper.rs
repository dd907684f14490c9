//! The remote wrapper: a few lines of POSIX sh sent inline with every call (nothing is
//! installed on the remote host).
//!
//! It runs the call in a process group of its own (`setsid`), and
//! * kills that group when the connection's stdin reaches EOF (box died, the local ssh was
//!   killed, the connection dropped: sshd then closes the session's stdin), or when the
//!   wrapper itself gets HUP/INT/TERM/PIPE. Calls that read stdin (`copy_in`) check their
//!   own byte count instead.
//! * ends with a trailer on stderr, `\x1ebox-exit <nonce> <code>`, which the runner strips.
//!   ssh exits 255 when the connection fails, and a guest command may exit 255 too: with a
//!   trailer it is the call's own status, without one the connection is what failed.
//!
//! The kill is TERM, then KILL two seconds later, so the copy scripts' traps can remove
//! their temp dirs.
//!
//! The script is one line (`;`-separated) because the remote login shell, whatever it is,
//! parses the quoted text first.

use super::quote::{command_line, quote};

/// What the call's standard input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`; EOF on the connection's stdin means "give up".
    Watch,
    /// The call reads the connection's stdin itself (streamed copies).
    Pass,
}

/// Arguments: nonce, stdin mode, smolvm binary, inner script, inner args. The inner script
/// runs as `sh -c SCRIPT box-call SMOLVM ARGS…`, so `$1` is smolvm (with a leading `~/`
/// made `$HOME/`).
const WRAPPER: &str = concat!(
    r#"n=$1; m=$2; b=$3; s=$4; shift 4; "#,
    r#"t() { printf '\036box-exit %s %s\n' "$n" "$1" >&2; }; "#,
    r#"case $b in '~/'*) b="$HOME/${b#??}";; esac; "#,
    r#"command -v "$b" >/dev/null 2>&1 || { t missing; exit 127; }; "#,
    r#"command -v setsid >/dev/null 2>&1 || setsid() { "$@"; }; "#,
    r#"exec 3<&0; "#,
    r#"if [ "$m" = pass ]; then setsid sh -c "$s" box-call "$b" "$@" <&3 3<&- & "#,
    r#"else setsid sh -c "$s" box-call "$b" "$@" </dev/null 3<&- & fi; "#,
    r#"p=$!; w=; k=; "#,
    // Once only: the trailer's write to a closed stderr raises PIPE after an EOF did.
    r#"trap 'if [ -z "$k" ]; then k=1; kill -TERM -$p 2>/dev/null || kill -TERM $p 2>/dev/null; sleep 2; kill -KILL -$p 2>/dev/null || kill -KILL $p 2>/dev/null; fi' USR1 HUP INT TERM PIPE; "#,
    r#"if [ "$m" != pass ]; then { while read -r _; do :; done; kill -USR1 $$; } <&3 3<&- >/dev/null 2>&1 & w=$!; fi; "#,
    r#"exec 3<&-; "#,
    // A trap interrupts `wait`; the call's own status comes from waiting again.
    r#"wait $p; c=$?; if [ -n "$k" ]; then wait $p; c=$?; fi; "#,
    r#"[ -z "$w" ] || kill -KILL $w 2>/dev/null; "#,
    r#"t $c; exit $c"#
);

/// The inner script of a plain call: smolvm with the call's arguments.
pub const PLAIN: &str = r#"exec "$@""#;

/// The remote command line (what ssh gets after `--`) for one call.
pub fn command(
    nonce: &str,
    stdin: Stdin,
    smolvm: &str,
    inner_script: &str,
    args: &[String],
) -> String {
    let mode = match stdin {
        Stdin::Watch => "watch",
        Stdin::Pass => "pass",
    };
    let mut words: Vec<&str> = vec![nonce, mode, smolvm, inner_script];
    words.extend(args.iter().map(String::as_str));
    format!("sh -c {} box {}", quote(WRAPPER), command_line(&words))
}

/// The inner script of a plain call with `K=V` set for smolvm (box's own knobs, never
/// box's environment and never a secret).
pub fn plain_with_env(env: &[(String, String)]) -> String {
    let mut s = String::new();
    for (k, v) in env {
        s.push_str(k);
        s.push('=');
        s.push_str(&quote(v));
        s.push(' ');
    }
    s.push_str(PLAIN);
    s
}

/// A fresh nonce: a guest cannot print a trailer it does not know.
pub fn nonce() -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}

/// What the trailer said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trailer {
    /// The call's own exit status.
    Exit(i32),
    /// The smolvm binary is not on the remote.
    Missing,
}

/// The start of this call's trailer line.
pub fn marker(nonce: &str) -> String {
    format!("\x1ebox-exit {nonce} ")
}

/// Takes the trailer off the end of `stderr` (it may be glued to a last line that had no
/// newline). `None` when the stream did not end with this call's trailer.
pub fn strip_trailer(stderr: &mut String, nonce: &str) -> Option<Trailer> {
    let marker = marker(nonce);
    let body = stderr.strip_suffix('\n').unwrap_or(stderr);
    let at = body.rfind(&marker)?;
    let value = &body[at + marker.len()..];
    if value.contains('\n') {
        return None;
    }
    let trailer = match value {
        "missing" => Trailer::Missing,
        v => Trailer::Exit(v.parse().ok()?),
    };
    stderr.truncate(at);
    Some(trailer)
}

/// Whether a streamed stderr line is (or ends with) the trailer: the callback must not see
/// it. Returns the text before it, which is the call's own.
pub fn line_before_trailer<'a>(line: &'a str, nonce: &str) -> Option<&'a str> {
    line.find(&marker(nonce)).map(|at| &line[..at])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Runs a command line as ssh's remote side would, its stdin held open by the runner
    /// (as over ssh) until it ends.
    fn run_locally(cmd_line: &str) -> crate::process::Output {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(cmd_line);
        crate::process::runner::run_command(
            cmd,
            &crate::process::runner::Program::Smolvm("sh".into()),
            "test",
            crate::process::runner::CallOpts::with_timeout(std::time::Duration::from_secs(20)),
            crate::process::runner::Io {
                stdin: crate::process::runner::Feed::Hold,
                stdout: crate::process::runner::Sink::Capture,
                ..crate::process::runner::Io::default()
            },
        )
        .unwrap()
        .0
    }

    #[test]
    fn the_trailer_carries_the_calls_own_status_even_255() {
        let n = nonce();
        let line = command(
            &n,
            Stdin::Watch,
            "/bin/sh",
            PLAIN,
            &[
                "-c".into(),
                "echo out; printf 'no newline' >&2; exit 255".into(),
            ],
        );
        let out = run_locally(&line);
        assert_eq!(out.code, Some(255));
        assert_eq!(out.stdout, "out\n");
        let mut err = out.stderr;
        assert_eq!(strip_trailer(&mut err, &n), Some(Trailer::Exit(255)));
        assert_eq!(err, "no newline");
    }

    #[test]
    fn a_missing_smolvm_is_said_not_run() {
        let n = nonce();
        let line = command(&n, Stdin::Watch, "/nonexistent/smolvm", PLAIN, &[]);
        let mut err = run_locally(&line).stderr;
        assert_eq!(strip_trailer(&mut err, &n), Some(Trailer::Missing));
    }

    #[test]
    fn a_forged_or_foreign_trailer_is_not_taken() {
        let mut err = "\x1ebox-exit 0000 0\n".to_string();
        assert_eq!(strip_trailer(&mut err, "1111"), None);
        let mut err = "\x1ebox-exit 1111 0\nlater\n".to_string();
        assert_eq!(strip_trailer(&mut err, "1111"), None);
        let mut err = "x\n\x1ebox-exit 1111 zz\n".to_string();
        assert_eq!(strip_trailer(&mut err, "1111"), None);
        let mut err = "x\n\x1ebox-exit 1111 3\n".to_string();
        assert_eq!(strip_trailer(&mut err, "1111"), Some(Trailer::Exit(3)));
        assert_eq!(err, "x\n");
    }

    #[test]
    fn env_values_are_quoted_for_the_inner_shell() {
        let n = nonce();
        let line = command(
            &n,
            Stdin::Watch,
            "/bin/sh",
            &plain_with_env(&[("K".into(), "a b'$(id)".into())]),
            &["-c".into(), "printf %s \"$K\"".into()],
        );
        assert_eq!(run_locally(&line).stdout, "a b'$(id)");
    }

    /// EOF on stdin (the connection went away) kills the call's whole process group.
    #[test]
    fn eof_on_stdin_kills_the_calls_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let n = nonce();
        let line = command(
            &n,
            Stdin::Watch,
            "/bin/sh",
            PLAIN,
            &[
                "-c".into(),
                format!(
                    "sleep 300 & echo $$ $! > {}; wait",
                    quote(&pids.to_string_lossy())
                ),
            ],
        );
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(&line)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !pids.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&pids).unwrap();
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(143), "TERM'd call's status");
        for pid in text.split_whitespace() {
            let stat = format!("/proc/{pid}/stat");
            let gone = std::fs::read_to_string(&stat).map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            });
            assert!(gone, "{pid} still runs after EOF");
        }
    }
}
