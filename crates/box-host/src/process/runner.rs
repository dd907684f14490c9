//! Spawning smolvm: one call at a time, with a deadline, captured output and an error that
//! names the call.
//!
//! Every call runs in its own process group, for two reasons: a timeout kills the whole
//! tree (smolvm, or the simulator, may have children), and a Ctrl-C on the terminal reaches
//! only `box`, which decides what to do (the cleanup rules of `box new` defer signals while
//! `machine create` runs). Interactive calls (`exec -it`) are the exception: they stay in
//! the terminal's process group so the guest shell gets the terminal.
//!
//! smolvm gets an allowlisted environment ([`crate::child_env`]), never box's own: a real
//! smolvm's VMM keeps its environment for the box's lifetime, and box's may hold the backup
//! passphrase.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::error::SmolvmError;
use crate::child_env::{self, ChildKind};

/// How long to keep reading a finished call's output when a grandchild still holds the pipe.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// How often the wait loop wakes up to check the child, the deadline and pending signals.
const TICK: Duration = Duration::from_millis(20);

/// Which of the child's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What a finished call left behind. `Debug` shows only the sizes of the streams: one
/// call's stdout is Executor's token (`hb token`), and a `{:?}` must never leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Output {
    /// The exit code; `None` when the process was killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output")
            .field("code", &self.code)
            .field("stdout", &format_args!("<{} bytes>", self.stdout.len()))
            .field("stderr", &format_args!("<{} bytes>", self.stderr.len()))
            .field("elapsed", &self.elapsed)
            .finish()
    }
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// smolvm's own failure message: the last stderr line, when it starts with `Error: `
    /// (smolvm prints `eprintln!("Error: {e}")` and exits 1; docs/smolvm.md, "Conventions").
    /// A guest command that fails prints whatever it likes, but never as smolvm's last word
    /// with exit status 1 unless it imitates smolvm exactly; see `exec` in the driver.
    ///
    /// smolvm draws `cp` and pull progress as `\r`-redrawn text with no newline, so a
    /// transfer that fails mid-way leaves `\r<progress>Error: …` as its last line (smolvm
    /// a5df5001 `src/cli/mod.rs` L114-133): the error starts after the last `\r`, or right
    /// after the progress text.
    pub fn smolvm_error(&self) -> Option<&str> {
        if self.code != Some(1) {
            return None;
        }
        let last = self
            .stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())?
            .trim_end();
        if let Some(msg) = last.strip_prefix("Error: ") {
            return Some(msg);
        }
        // Progress was drawn on this line: only its `\r` segments can carry the error, and
        // the last segment is what stayed on screen.
        let seg = last.rsplit('\r').find(|s| !s.trim().is_empty())?;
        if let Some(msg) = seg.strip_prefix("Error: ") {
            return Some(msg);
        }
        let at = seg.find(")Error: ").filter(|_| last.contains('\r'))?;
        Some(&seg[at + ")Error: ".len()..])
    }
}

/// A callback that sees every output line as it arrives.
pub type LineSink<'a> = &'a mut dyn FnMut(Stream, &str);

/// Options of one call.
pub struct CallOpts<'a> {
    /// Kill the call (and its process group) after this long.
    pub timeout: Duration,
    /// Called with every output line as it arrives (provisioning progress).
    pub on_line: Option<LineSink<'a>>,
    /// When set and it becomes non-zero (a pending HUP/INT/TERM), the call is killed and
    /// `Interrupted` returned. Calls that must finish (`machine create`) leave it unset.
    pub cancel: Option<&'a AtomicUsize>,
    /// Extra environment for smolvm itself (its own knobs, e.g.
    /// `SMOLVM_PACK_CACHE_MAX_BYTES`), on top of the allowlisted one. The one secret it may
    /// carry is a local `machine start`'s API keys (`Smolvm::start_with_keys`), where it is
    /// that child's own environment; over ssh it is written on the remote's command line,
    /// so a remote call never carries one here (remote keys go on stdin).
    pub env: Vec<(String, String)>,
}

impl<'a> CallOpts<'a> {
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            timeout,
            on_line: None,
            cancel: None,
            env: Vec::new(),
        }
    }
}

enum Event {
    Line(Stream, String),
    Eof,
}

/// Spawns `bin args…` and waits for it within the deadline. `call` is the human name of
/// the call used in errors (e.g. `smolvm machine start --name alpha`); argv never holds a
/// secret, so it may be shown.
pub fn run(
    bin: &OsString,
    args: &[OsString],
    call: &str,
    opts: CallOpts<'_>,
) -> Result<Output, SmolvmError> {
    run_as(bin, args, call, opts, ChildKind::Smolvm)
}

/// [`run`] with the environment of a child of `kind` (a start holding API keys gets less).
pub fn run_as(
    bin: &OsString,
    args: &[OsString],
    call: &str,
    opts: CallOpts<'_>,
    kind: ChildKind,
) -> Result<Output, SmolvmError> {
    let mut cmd = Command::new(bin);
    child_env::apply(&mut cmd, kind);
    cmd.args(args);
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    let program = Program::Smolvm(bin.to_string_lossy().into_owned());
    run_command(cmd, &program, call, opts, Io::default()).map(|(out, _)| out)
}

/// What a spawned program is, for the error when it cannot be found.
#[derive(Debug, Clone)]
pub(crate) enum Program {
    Smolvm(String),
    Ssh(String),
}

impl Program {
    fn missing(&self) -> SmolvmError {
        match self {
            Program::Smolvm(bin) => SmolvmError::Missing { bin: bin.clone() },
            Program::Ssh(bin) => SmolvmError::SshMissing { bin: bin.clone() },
        }
    }
}

/// Where a call's stdin comes from.
#[derive(Default)]
pub(crate) enum Feed {
    /// `/dev/null`.
    #[default]
    Null,
    /// A pipe box keeps open until the call ends: the remote wrapper takes its EOF as
    /// "box is gone" (see `remote::wrapper`).
    Hold,
    /// The file's bytes, as many as announced to the far side (the second field); then the
    /// pipe is held open like [`Feed::Hold`] until the call ends, so the remote copy script
    /// can tell a lost connection while smolvm copies the part in (see `remote::copy`). A
    /// file that gave fewer bytes than announced closes the pipe at once: the far side
    /// must see a short stream then, not wait for the rest until the deadline.
    File(std::fs::File, u64),
    /// Secret bytes (API keys for a remote `machine start`), then held open like
    /// [`Feed::Hold`]; wiped from memory once written.
    Secret(zeroize::Zeroizing<Vec<u8>>),
}

/// Where a call's stdout goes.
#[derive(Default)]
pub(crate) enum Sink {
    /// Into `Output::stdout`, line by line.
    #[default]
    Capture,
    /// Byte for byte into the file; the count comes back.
    File(std::fs::File),
}

#[derive(Default)]
pub(crate) struct Io {
    pub stdin: Feed,
    pub stdout: Sink,
    /// A stderr line holding this means the call is over (the remote wrapper's trailer),
    /// even if the process is still there: ssh waits for every holder of the remote
    /// session's pipes, and a daemon the call started may hold them for good. Like a local
    /// grandchild holding a pipe, it gets [`PIPE_GRACE`], then the process is killed.
    pub done_marker: Option<String>,
}

/// Runs a prepared command (argv and environment set) in its own process group within the
/// deadline. With `Sink::File`, the second value is the number of bytes written, or the
/// write error.
pub(crate) fn run_command(
    mut cmd: Command,
    program: &Program,
    call: &str,
    mut opts: CallOpts<'_>,
    io: Io,
) -> Result<(Output, Option<std::io::Result<u64>>), SmolvmError> {
    let start = Instant::now();
    let done_marker = io.done_marker;
    let mut marker_at: Option<Instant> = None;
    cmd.stdin(match io.stdin {
        Feed::Null => Stdio::null(),
        Feed::Hold | Feed::File(..) | Feed::Secret(_) => Stdio::piped(),
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = spawn_program(&mut cmd, program, call)?;
    // Held until this function returns: the pipe's EOF tells the remote wrapper box is gone.
    let held_stdin = std::sync::Arc::new(std::sync::Mutex::new(None));
    match io.stdin {
        Feed::Null => {}
        Feed::Hold => {
            if let Ok(mut held) = held_stdin.lock() {
                *held = child.stdin.take();
            }
        }
        Feed::Secret(bytes) => {
            if let Some(mut pipe) = child.stdin.take() {
                let held = std::sync::Arc::clone(&held_stdin);
                std::thread::spawn(move || {
                    use std::io::Write as _;
                    if pipe.write_all(&bytes).and_then(|()| pipe.flush()).is_ok()
                        && let Ok(mut slot) = held.lock()
                    {
                        *slot = Some(pipe);
                    }
                });
            }
        }
        Feed::File(mut file, announced) => {
            if let Some(mut pipe) = child.stdin.take() {
                let held = std::sync::Arc::clone(&held_stdin);
                // A write error (the far side stopped reading) is the far side's to report:
                // it checks the byte count. After the bytes, the pipe is handed back to be
                // held; it closes when this call returns and the last holder lets go.
                std::thread::spawn(move || {
                    let sent = std::io::copy(&mut file, &mut pipe);
                    if matches!(sent, Ok(n) if n == announced)
                        && let Ok(mut slot) = held.lock()
                    {
                        *slot = Some(pipe);
                    }
                });
            }
        }
    }
    let (tx, rx) = mpsc::channel();
    let mut copied = None;
    if let Some(out) = child.stdout.take() {
        match io.stdout {
            Sink::Capture => reader(out, Stream::Stdout, tx.clone()),
            Sink::File(file) => copied = Some(file_writer(out, file, tx.clone())),
        }
    }
    if let Some(err) = child.stderr.take() {
        reader(err, Stream::Stderr, tx);
    }
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut open_streams = 2;
    let mut exited: Option<(Option<i32>, Instant)> = None;
    loop {
        match rx.recv_timeout(TICK) {
            Ok(Event::Line(stream, line)) => {
                if stream == Stream::Stderr
                    && marker_at.is_none()
                    && done_marker.as_deref().is_some_and(|m| line.contains(m))
                {
                    marker_at = Some(Instant::now());
                }
                if let Some(cb) = opts.on_line.as_mut() {
                    cb(stream, line.trim_end_matches(['\n', '\r']));
                }
                match stream {
                    Stream::Stdout => stdout.push_str(&line),
                    Stream::Stderr => stderr.push_str(&line),
                }
            }
            Ok(Event::Eof) => open_streams -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open_streams = 0,
        }
        if exited.is_none()
            && let Some(at) = marker_at
            && at.elapsed() > PIPE_GRACE
        {
            // The call said it is over; what still holds its pipes is not the call.
            kill_group(&mut child);
            exited = Some((None, at));
        }
        if exited.is_none() {
            match child.try_wait() {
                Ok(Some(status)) => exited = Some((status.code(), Instant::now())),
                Ok(None) => {}
                Err(e) => {
                    kill_group(&mut child);
                    return Err(SmolvmError::Spawn {
                        call: call.to_string(),
                        problem: format!("cannot wait for it: {e}"),
                    });
                }
            }
        }
        if let Some((code, at)) = exited {
            // Done when both pipes closed, or a grandchild keeps one open past the grace.
            if open_streams <= 0 || at.elapsed() > PIPE_GRACE {
                // Argv never holds a secret; durations let `box` time itself without smolvm.
                tracing::debug!(
                    call,
                    code = ?code,
                    elapsed_ms = start.elapsed().as_secs_f64() * 1000.0,
                    "smolvm call finished"
                );
                let written =
                    copied.map(|handle: std::thread::JoinHandle<std::io::Result<u64>>| {
                        // After its EOF the writer only returns; past the grace it may be stuck.
                        if open_streams <= 0 || handle.is_finished() {
                            handle.join().unwrap_or_else(|_| {
                                Err(std::io::Error::other("the copying thread panicked"))
                            })
                        } else {
                            Err(std::io::Error::other(
                                "the output stream was still open after the call ended",
                            ))
                        }
                    });
                return Ok((
                    Output {
                        code,
                        stdout,
                        stderr,
                        elapsed: start.elapsed(),
                    },
                    written,
                ));
            }
            continue;
        }
        if let Some(flag) = opts.cancel {
            let signal = flag.load(Ordering::SeqCst);
            if signal != 0 {
                kill_group(&mut child);
                return Err(SmolvmError::Interrupted {
                    call: call.to_string(),
                    signal,
                });
            }
        }
        if start.elapsed() > opts.timeout {
            kill_group(&mut child);
            return Err(SmolvmError::Timeout {
                call: call.to_string(),
                after: opts.timeout,
            });
        }
    }
}

/// What an attached call's output is to box's own stdout and stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// The call's streams are box's: its bytes as they are (a person's own session, a
    /// script's pipe).
    AsIs,
    /// Guest bytes for a person to read (a log): where box's stream is a terminal, they
    /// pass through [`crate::ui::terminal_text`] so nothing in them acts on it; piped, as
    /// they are.
    EscapedOnTerminals,
}

/// Runs an interactive call attached to the terminal (`exec -it`) and returns its exit
/// code. There is no deadline: the user ends the session.
pub fn run_interactive(
    bin: &OsString,
    args: &[OsString],
    call: &str,
    passed: Passed,
) -> Result<i32, SmolvmError> {
    let mut cmd = Command::new(bin);
    child_env::apply(&mut cmd, ChildKind::Smolvm);
    cmd.args(args);
    run_interactive_command(
        cmd,
        &Program::Smolvm(bin.to_string_lossy().into_owned()),
        call,
        passed,
    )
}

/// [`run_interactive`] for a prepared command (the ssh transport's `ssh -t`).
pub(crate) fn run_interactive_command(
    mut cmd: Command,
    program: &Program,
    call: &str,
    passed: Passed,
) -> Result<i32, SmolvmError> {
    use std::io::IsTerminal;
    let escaped = passed == Passed::EscapedOnTerminals;
    if escaped && std::io::stdout().is_terminal() {
        cmd.stdout(Stdio::piped());
    }
    if escaped && std::io::stderr().is_terminal() {
        cmd.stderr(Stdio::piped());
    }
    let mut child = spawn_program(&mut cmd, program, call)?;
    use crate::ui::terminal_text::copy_escaped;
    let copies = [
        child
            .stdout
            .take()
            .map(|out| std::thread::spawn(move || copy_escaped(out, std::io::stdout()))),
        child
            .stderr
            .take()
            .map(|err| std::thread::spawn(move || copy_escaped(err, std::io::stderr()))),
    ];
    let status = child.wait().map_err(|e| SmolvmError::Spawn {
        call: call.to_string(),
        problem: format!("cannot wait for it: {e}"),
    })?;
    // What the call printed last is shown before box says anything after it.
    for copy in copies.into_iter().flatten() {
        let _ = copy.join();
    }
    Ok(status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    }))
}

/// Copies a stream into a file, byte for byte, then says EOF.
fn file_writer(
    mut pipe: impl Read + Send + 'static,
    mut file: std::fs::File,
    tx: mpsc::Sender<Event>,
) -> std::thread::JoinHandle<std::io::Result<u64>> {
    std::thread::spawn(move || {
        let res = std::io::copy(&mut pipe, &mut file).and_then(|n| file.sync_all().map(|()| n));
        let _ = tx.send(Event::Eof);
        res
    })
}

/// Spawns `cmd`; a missing program says how to get it ([`Program::missing`]).
fn spawn_program(cmd: &mut Command, program: &Program, call: &str) -> Result<Child, SmolvmError> {
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            program.missing()
        } else {
            SmolvmError::Spawn {
                call: call.to_string(),
                problem: e.to_string(),
            }
        }
    })
}

fn reader(pipe: impl Read + Send + 'static, stream: Stream, tx: mpsc::Sender<Event>) {
    std::thread::spawn(move || {
        let mut pipe = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match pipe.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if tx.send(Event::Line(stream, line)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

/// Kills the call's whole process group, then reaps the child.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Duration) -> Result<Output, SmolvmError> {
        let args = vec![OsString::from("-c"), OsString::from(script)];
        run(
            &OsString::from("/bin/sh"),
            &args,
            "test call",
            CallOpts::with_timeout(timeout),
        )
    }

    #[test]
    fn debug_never_shows_output_text() {
        let out = sh("echo secret-token-value", Duration::from_secs(10)).unwrap();
        let shown = format!("{out:?}");
        assert!(!shown.contains("secret-token-value"), "{shown}");
        assert!(shown.contains("stdout: <19 bytes>"), "{shown}");
    }

    #[test]
    fn captures_both_streams_and_the_code() {
        let out = sh("echo out; echo err >&2; exit 3", Duration::from_secs(10)).unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert!(out.smolvm_error().is_none());
    }

    #[test]
    fn recognises_smolvms_own_error_line() {
        let out = sh(
            "echo ' WARN something' >&2; echo 'Error: vm not found: alpha' >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.smolvm_error(), Some("vm not found: alpha"));
        // The same text with another exit status is a guest command's own output.
        let out = sh("echo 'Error: nope' >&2; exit 2", Duration::from_secs(10)).unwrap();
        assert_eq!(out.smolvm_error(), None);
        // Output after the Error line means it was not smolvm's last word.
        let out = sh(
            "echo 'Error: x' >&2; echo later >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.smolvm_error(), None);
    }

    /// A `cp` or pull that fails mid-way: `\r`-drawn progress with no newline, then smolvm's
    /// `Error:` on the same line (smolvm's ProgressBar, a5df5001 `src/cli/mod.rs` L114-133).
    #[test]
    fn finds_smolvms_error_after_carriage_return_progress() {
        let out = sh(
            "printf '\\rUploading a -> /b: 1.0 MB / 4.0 MB (25.0%%, 30.1 MB/s)' >&2; \
             echo 'Error: agent operation failed: write file: /b: No space left on device (os error 28)' >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(
            out.smolvm_error(),
            Some("agent operation failed: write file: /b: No space left on device (os error 28)")
        );
        // A pull prints "done." with a newline before the error, and the agent's message
        // can end in a blank line (crane's stderr).
        let out = sh(
            "printf 'Pulling ubuntu:99.04...\\nPulling image ubuntu:99.04...\\rPulling image ubuntu:99.04... done.   \\n' >&2; \
             printf 'Error: agent operation failed: pull image: crane manifest failed: MANIFEST_UNKNOWN\\n\\n' >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(
            out.smolvm_error(),
            Some("agent operation failed: pull image: crane manifest failed: MANIFEST_UNKNOWN")
        );
        // An error after a `\r` segment of its own.
        let out = sh(
            "printf '\\rDownloading /x -> y: 16.0 MB (1.0 GB/s)\\rError: agent operation failed: read file: gone\\n' >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(
            out.smolvm_error(),
            Some("agent operation failed: read file: gone")
        );
        // Progress text alone, or a guest's own words that merely contain "Error:", are not it.
        let out = sh(
            "printf '\\rUploading a -> /b: 1.0 MB / 4.0 MB (25.0%%, 30.1 MB/s)\\n' >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.smolvm_error(), None);
        let out = sh(
            "echo 'build (1)Error: x' >&2; exit 1",
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.smolvm_error(), None);
    }

    #[test]
    fn a_slow_call_is_killed_with_its_children_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let script = format!(
            "sleep 30 & echo $! > '{}'; sleep 30; wait",
            pid_file.display()
        );
        let start = Instant::now();
        let err = sh(&script, Duration::from_millis(300)).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            err.to_string(),
            "`test call` did not finish within 0.3s and was stopped; smolvm may be hung (see `box doctor`)"
        );
        // The background child died with the call: gone, or a zombie awaiting its reaper.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let dead = || {
            std::fs::read_to_string(&stat).map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        while !dead() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            dead(),
            "the call's background child {} still runs",
            pid.trim()
        );
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_block_forever() {
        let start = Instant::now();
        let out = sh("(sleep 20 &) ; echo done", Duration::from_secs(30)).unwrap();
        assert_eq!(out.stdout, "done\n");
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn lines_reach_the_callback_as_they_arrive() {
        let mut seen = Vec::new();
        let mut cb = |s: Stream, l: &str| seen.push((s, l.to_string()));
        let args = vec![
            OsString::from("-c"),
            OsString::from("echo one; echo two >&2; printf three"),
        ];
        let out = run(
            &OsString::from("/bin/sh"),
            &args,
            "t",
            CallOpts {
                timeout: Duration::from_secs(10),
                on_line: Some(&mut cb),
                cancel: None,
                env: Vec::new(),
            },
        )
        .unwrap();
        assert!(out.success());
        seen.sort_by_key(|(_, l)| l.clone());
        assert_eq!(
            seen,
            [
                (Stream::Stdout, "one".to_string()),
                (Stream::Stdout, "three".to_string()),
                (Stream::Stderr, "two".to_string())
            ]
        );
    }

    #[test]
    fn a_pending_signal_interrupts_a_cancellable_call() {
        let flag = AtomicUsize::new(0);
        let args = vec![OsString::from("-c"), OsString::from("sleep 30")];
        let setter = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                flag.store(15, Ordering::SeqCst);
            });
            run(
                &OsString::from("/bin/sh"),
                &args,
                "smolvm machine exec --name a -- x",
                CallOpts {
                    timeout: Duration::from_secs(30),
                    on_line: None,
                    cancel: Some(&flag),
                    env: Vec::new(),
                },
            )
        });
        assert!(matches!(
            setter,
            Err(SmolvmError::Interrupted { signal: 15, .. })
        ));
    }

    #[test]
    fn a_missing_binary_says_how_to_fix_it() {
        let err = run(
            &OsString::from("/nonexistent/smolvm"),
            &[],
            "smolvm --version",
            CallOpts::with_timeout(Duration::from_secs(5)),
        )
        .unwrap_err();
        assert!(err.to_string().contains("set SMOLVM"), "{err}");
    }
}
