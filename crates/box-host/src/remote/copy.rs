//! Streamed copies between the laptop and a guest on a remote host.
//!
//! smolvm's `machine cp` reads and writes files on the host it runs on, so a part crosses
//! the connection through a private remote temp dir: `umask 077; mktemp -d`, removed by
//! traps on EXIT/HUP/INT/TERM/PIPE whatever happens. One part at a time; nothing is kept
//! between calls. The byte count goes along and is checked on the far side: a dropped
//! connection gives a short stream, which is an error, never a truncated part copied on.

/// The exit status the copy scripts use for a short or failed stream (EX_TEMPFAIL), with
/// a `box-copy: …` line on stderr.
pub const SHORT_STREAM: i32 = 75;
/// The prefix of the copy scripts' own stderr lines.
pub const PREFIX: &str = "box-copy: ";

/// Common head: a private temp dir that the traps remove. The caller's umask is kept in
/// `$u` and given back to smolvm: only the temp dir and the part are box's to make private
/// (the simulator, like any program, creates what it makes with the umask it inherits).
const TEMP_DIR: &str = concat!(
    r#"u=$(umask); umask 077; d=$(mktemp -d "${TMPDIR:-/tmp}/box-part.XXXXXXXX") || { echo "box-copy: cannot make a temp dir" >&2; exit 75; }; "#,
    r#"trap 'rm -rf "$d"' EXIT; trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 141' PIPE; "#,
);

/// `$1` smolvm, `$2` the byte count, `$3` `NAME:/guest/path`. Reads exactly `$2` bytes of
/// stdin into the temp dir, then `machine cp`s them in. box keeps the stream open after the
/// bytes until the call ends, so its EOF while `machine cp` runs means the connection (or
/// box) is gone: the copy is killed and the part removed at once, not left on the remote
/// disk for as long as the copy would have taken, and the call fails (75) whatever the
/// killed copy's own status.
///
/// The kill is TERM, then KILL two seconds later: a TERM can be lost. The shell forks the
/// background copy with this script's own TERM trap still installed until the child
/// clears its traps (dash records the signal as a pending trap, then drops it with the
/// trap), so a TERM landing in that window left `machine cp` running to the end and the
/// script exiting 0, a killed copy reported as copied (9 runs in 300 on a busy machine).
pub fn copy_in_script() -> String {
    format!(
        "{TEMP_DIR}{}",
        concat!(
            r#"head -c "$2" > "$d/part" || { echo "box-copy: cannot write the part on the remote host" >&2; exit 75; }; "#,
            r#"g=$(wc -c < "$d/part"); g=$((g)); "#,
            r#"if [ "$g" -ne "$2" ]; then echo "box-copy: the stream ended after $g of $2 bytes" >&2; exit 75; fi; "#,
            // A background list's stdin is /dev/null unless redirected: fd 4 is the stream.
            r#"umask "$u"; exec 4<&0; "$1" machine cp "$d/part" "$3" & c=$!; "#,
            // The watcher: at EOF, say so in `$d/gone` first, then TERM, then KILL.
            r#"{ cat >/dev/null 2>&1; : > "$d/gone"; kill -TERM $c 2>/dev/null; sleep 2 </dev/null; kill -KILL $c 2>/dev/null; } <&4 >/dev/null 2>&1 & w=$!; exec 4<&-; "#,
            // `2>/dev/null`: the shell's own "Terminated" for a killed copy is no message of box's.
            r#"wait $c 2>/dev/null; r=$?; kill -KILL $w 2>/dev/null; "#,
            r#"if [ -e "$d/gone" ]; then echo "box-copy: the stream ended while smolvm copied the part in" >&2; exit 75; fi; exit $r"#
        )
    )
}

/// `$1` smolvm, `$2` `NAME:/guest/path`. `machine cp`s the file out into the temp dir, says
/// its size on stderr (`box-size N`), then streams it on stdout.
pub fn copy_out_script() -> String {
    format!(
        "{TEMP_DIR}{}",
        concat!(
            r#"umask "$u"; "$1" machine cp "$2" "$d/part" || exit $?; "#,
            r#"n=$(wc -c < "$d/part") || exit 75; n=$((n)); "#,
            r#"printf 'box-size %s\n' "$n" >&2; cat "$d/part""#
        )
    )
}

/// The size line `copy_out_script` printed last on stderr (before the trailer), removed
/// from `stderr`.
pub fn take_size(stderr: &mut String) -> Option<u64> {
    let body = stderr.strip_suffix('\n').unwrap_or(stderr);
    let start = body.rfind('\n').map_or(0, |i| i + 1);
    let n = body[start..].strip_prefix("box-size ")?.parse().ok()?;
    stderr.truncate(start);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// A stand-in `smolvm` whose `machine cp A B` is `cp`, with `NAME:` stripped.
    fn fake_cp(dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("smolvm");
        let src = dir.join("smolvm.sh");
        std::fs::write(
            &src,
            format!(
                "#!/bin/sh\n[ \"$1 $2\" = 'machine cp' ] || exit 9\numask > {}\ncp \"${{3#vm:}}\" \"${{4#vm:}}\"\n",
                dir.join("umask-seen").display()
            ),
        )
        .unwrap();
        let ok = Command::new("install")
            .args(["-m", "755"])
            .arg(&src)
            .arg(&path)
            .status()
            .unwrap();
        assert!(ok.success());
        path
    }

    /// Runs a copy script with `input` on stdin, which then stays open until the script
    /// ends, as box's runner holds it (`Feed::File`).
    fn run(
        script: &str,
        args: &[&str],
        input: &[u8],
        tmp: &std::path::Path,
    ) -> std::process::Output {
        run_then(script, args, input, tmp, true)
    }

    /// [`run`], or with stdin closed right after `input` when `hold` is false: what a
    /// dropped connection looks like from the remote side.
    fn run_then(
        script: &str,
        args: &[&str],
        input: &[u8],
        tmp: &std::path::Path,
        hold: bool,
    ) -> std::process::Output {
        // 027: the caller's umask, which smolvm must get back.
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("umask 027; {script}"))
            .arg("box-call")
            .args(args)
            .env("TMPDIR", tmp)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(input);
        if !hold {
            drop(stdin);
            return child.wait_with_output().unwrap();
        }
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        out
    }

    #[test]
    fn copy_in_takes_exactly_the_announced_bytes_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let bin = fake_cp(dir.path());
        let dst = dir.path().join("in-guest");
        let out = run(
            &copy_in_script(),
            &[bin.to_str().unwrap(), "5", &format!("vm:{}", dst.display())],
            b"hello",
            tmp.path(),
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read(&dst).unwrap(), b"hello");
        // smolvm runs with the caller's umask, not the temp dir's 077.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("umask-seen")).unwrap(),
            "0027\n"
        );
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_short_stream_is_refused_and_nothing_is_copied() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let bin = fake_cp(dir.path());
        let dst = dir.path().join("in-guest");
        let out = run_then(
            &copy_in_script(),
            &[
                bin.to_str().unwrap(),
                "10",
                &format!("vm:{}", dst.display()),
            ],
            b"hello",
            tmp.path(),
            false,
        );
        assert_eq!(out.status.code(), Some(SHORT_STREAM));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "box-copy: the stream ended after 5 of 10 bytes\n"
        );
        assert!(!dst.exists(), "a truncated part was copied in");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn copy_out_says_the_size_then_streams() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let bin = fake_cp(dir.path());
        let src = dir.path().join("guest-file");
        std::fs::write(&src, b"part bytes\n\x00\x01").unwrap();
        let out = run(
            &copy_out_script(),
            &[bin.to_str().unwrap(), &format!("vm:{}", src.display())],
            b"",
            tmp.path(),
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"part bytes\n\x00\x01");
        let mut err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(take_size(&mut err), Some(13));
        assert_eq!(err, "");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        // smolvm's own failure passes through, and the temp dir still goes.
        let out = run(
            &copy_out_script(),
            &[bin.to_str().unwrap(), "vm:/nonexistent/x"],
            b"",
            tmp.path(),
        );
        assert!(!out.status.success());
        let mut err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(take_size(&mut err), None);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    /// A stand-in `smolvm` whose `machine cp` takes 30 s (one process, as smolvm's is);
    /// `ignoring_term`: one that a TERM does not stop (what a TERM lost to the fork window
    /// looks like, every time).
    fn slow_cp(dir: &std::path::Path, ignoring_term: bool) -> std::path::PathBuf {
        let slow = dir.join("smolvm");
        let body = if ignoring_term {
            "#!/bin/sh\ntrap '' TERM\nexec sleep 30\n"
        } else {
            "#!/bin/sh\nexec sleep 30\n"
        };
        std::fs::write(dir.join("slow.sh"), body).unwrap();
        assert!(
            Command::new("install")
                .args(["-m", "755"])
                .arg(dir.join("slow.sh"))
                .arg(&slow)
                .status()
                .unwrap()
                .success()
        );
        slow
    }

    /// The part arrives whole, then the stream ends (box, or its connection, is gone) while
    /// `slow` copies: the call fails at once with the stream's status, the copy is stopped
    /// and the temp dir (plaintext of /data on a load) is gone.
    fn assert_a_lost_stream_stops_the_copy(slow: &std::path::Path) {
        let tmp = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let out = run_then(
            &copy_in_script(),
            &[slow.to_str().unwrap(), "5", "vm:/x"],
            b"hello",
            tmp.path(),
            false,
        );
        assert_eq!(out.status.code(), Some(SHORT_STREAM), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "box-copy: the stream ended while smolvm copied the part in\n"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the copy ran on for {:?} after the connection went",
            started.elapsed()
        );
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            0,
            "the part (plaintext of /data on a load) outlived the connection"
        );
    }

    #[test]
    fn a_connection_lost_while_smolvm_copies_kills_the_copy_and_removes_the_part() {
        let dir = tempfile::tempdir().unwrap();
        assert_a_lost_stream_stops_the_copy(&slow_cp(dir.path(), false));
    }

    /// A copy the TERM does not stop is killed two seconds later, and the call still fails:
    /// a lost TERM once let `machine cp` finish and the script report the part copied.
    #[test]
    fn a_copy_that_outlives_its_term_is_killed_and_never_reported_copied() {
        let dir = tempfile::tempdir().unwrap();
        assert_a_lost_stream_stops_the_copy(&slow_cp(dir.path(), true));
    }

    /// The race itself, many times over (`BOX_TEST_COPY_RACE_RUNS`, 300 by default) on a
    /// machine busy with other work: opt-in, a minute or more.
    #[test]
    #[ignore = "stress: hundreds of runs of the lost-connection copy; run with --ignored"]
    fn a_connection_lost_while_smolvm_copies_holds_under_load() {
        let runs: usize = std::env::var("BOX_TEST_COPY_RACE_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300);
        let dir = tempfile::tempdir().unwrap();
        let slow = slow_cp(dir.path(), false);
        let started = std::time::Instant::now();
        let mut killed = 0;
        for _ in 0..runs {
            let one = std::time::Instant::now();
            assert_a_lost_stream_stops_the_copy(&slow);
            // Over the 2 s to the KILL: the TERM was lost (the race the KILL is there for).
            if one.elapsed() >= std::time::Duration::from_millis(1900) {
                killed += 1;
            }
        }
        let _ = writeln!(
            std::io::stderr(),
            "copy race: {runs} runs held in {:.1} s; {killed} lost their TERM and were killed",
            started.elapsed().as_secs_f64()
        );
    }
}
