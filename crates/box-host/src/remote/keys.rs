//! API keys bound to hosts (box.env's CREDENTIALS) for one `machine start` on a remote host.
//! smolvm reads a key from the environment of `machine start`; box hands it there over the
//! connection's stdin, never on a command line (the remote's argv is readable by every
//! account there) and never in a file:
//!
//! ```text
//! NAME=value\n  (one line per key; a value has no control character)
//! .\n           (the end)
//! ```
//!
//! The inner script reads those lines into its own environment (nothing else reads them),
//! exports them for smolvm alone, and starts it with stdin closed. The connection's stdin
//! stays open while the start runs: its EOF means box is gone, and the start is stopped, as
//! the wrapper does for every other call (a call that reads stdin has no wrapper watcher).

use secrecy::ExposeSecret as _;
use zeroize::Zeroizing;

/// The inner script (`$1` smolvm, then its arguments). Exit 125: the key lines were not
/// what box sends (a name that is no variable name, the stream cut short).
pub const START_WITH_KEYS: &str = concat!(
    r#"l=; while IFS= read -r l; do [ "$l" = . ] && break; "#,
    r#"case ${l%%=*} in ''|[0-9]*|*[!A-Za-z0-9_]*) exit 125;; esac; "#,
    r#"case $l in *=*) ;; *) exit 125;; esac; export "$l"; l=; done; "#,
    // smolvm's logging stays off in the start that holds the keys (RUST_LOG at debug or
    // trace could log the requests it puts them into).
    r#"[ "$l" = . ] || exit 125; unset l RUST_LOG; "#,
    // An asynchronous list reads /dev/null unless told otherwise (POSIX): the watcher
    // gets the connection through fd 3.
    r#"exec 3<&0; "$@" </dev/null 3<&- & p=$!; "#,
    r#"{ while read -r _; do :; done; kill -TERM $p 2>/dev/null; } <&3 3<&- & w=$!; exec 3<&-; "#,
    r#"wait $p; c=$?; kill $w 2>/dev/null; exit $c"#
);

/// What box writes to the call's stdin: each key as a line, then the end line.
pub fn stdin_lines(keys: &[(String, secrecy::SecretString)]) -> Zeroizing<Vec<u8>> {
    let mut out = Zeroizing::new(Vec::new());
    for (name, value) in keys {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.expose_secret().as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b".\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::process::{Command, Stdio};

    /// Runs the inner script as the wrapper would (`sh -c SCRIPT box-call PROGRAM ARGS`)
    /// with `input` on stdin, held open (as box holds the connection) until it exits; its
    /// exit code and stdout.
    fn run(input: &[u8], program: &str, args: &[&str]) -> (Option<i32>, String) {
        run_then(input, true, program, args)
    }

    /// [`run`]; `hold: false` closes stdin right after `input` (a stream cut short).
    fn run_then(input: &[u8], hold: bool, program: &str, args: &[&str]) -> (Option<i32>, String) {
        let mut child = spawn(program, args);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).unwrap();
        let stdin = hold.then_some(stdin);
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = child.wait().unwrap();
        drop(stdin);
        (status.code(), out)
    }

    fn spawn(program: &str, args: &[&str]) -> std::process::Child {
        Command::new("/bin/sh")
            .arg("-c")
            .arg(START_WITH_KEYS)
            .arg("box-call")
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn keys_reach_the_program_environment_and_nothing_else() {
        let keys = vec![
            (
                "ANTHROPIC_API_KEY".to_string(),
                secrecy::SecretString::from("sk-ant $(id) 'q\" \\x"),
            ),
            ("K2".to_string(), secrecy::SecretString::from("v=2")),
        ];
        let input = stdin_lines(&keys);
        let (code, out) = run(
            &input,
            "/bin/sh",
            &[
                "-c",
                r#"printf '%s|%s|%s\n' "$ANTHROPIC_API_KEY" "$K2" "$*"; read -r x && echo "stdin: $x" || echo "stdin closed""#,
                "sh",
                "arg",
            ],
        );
        assert_eq!(code, Some(0));
        assert_eq!(out, "sk-ant $(id) 'q\" \\x|v=2|arg\nstdin closed\n");
    }

    #[test]
    fn lines_that_are_not_keys_stop_before_the_program_runs() {
        for bad in [
            &b"1X=v\n.\n"[..],
            b"A-B=v\n.\n",
            b"=v\n.\n",
            b"NOEQUALS\n.\n",
            b"K=v\n",
            b"",
        ] {
            let (code, out) = run_then(bad, false, "/bin/echo", &["ran"]);
            assert_eq!(code, Some(125), "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(out, "");
        }
    }

    /// The connection closing (box gone) while smolvm starts stops it.
    #[test]
    fn eof_after_the_keys_stops_the_program() {
        let mut child = spawn("/bin/sleep", &["300"]);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"K=v\n.\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(stdin);
        let started = std::time::Instant::now();
        let status = child.wait().unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(status.code(), Some(143));
    }

    #[test]
    fn the_programs_own_status_comes_back() {
        let (code, _) = run(b".\n", "/bin/sh", &["-c", "exit 7"]);
        assert_eq!(code, Some(7));
    }
}
