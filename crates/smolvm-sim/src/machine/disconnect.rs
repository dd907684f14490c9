//! smolvm's agent kills an exec'd command when the client that asked for it goes away
//! (`crates/smolvm-agent/src/main.rs` ClientDisconnected: the command's process tree gets
//! SIGKILL, exit 137, "client disconnected"). Here the client *is* the `machine exec`
//! process, so something else has to notice its death: a tiny watcher
//! (`smolvm-sim _exec-watch`), in a session of its own so a kill of the client's process
//! group (box's deadline kill) does not reach it. It holds the read end of a pipe whose
//! write end only the client has: EOF without the word "done" means the client died, and
//! the watcher kills the command and everything it started.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::output::{SimError, VerbResult, agent};
use crate::registry;

/// The client's end: dropping it without [`Watch::release`] (or dying) kills the command.
pub struct Watch {
    pipe: Option<ChildStdin>,
    child: Child,
}

/// Starts the watcher for the command at host PID `pid`.
pub fn watch(pid: i32) -> Result<Watch, SimError> {
    let start = registry::proc_start_time(pid).unwrap_or(0);
    let exe = std::env::current_exe().map_err(|e| agent("exec", e.to_string()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("_exec-watch")
        .arg("--pid")
        .arg(pid.to_string())
        .arg("--start-time")
        .arg(start.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| agent("exec", format!("start the disconnect watcher: {e}")))?;
    let pipe = child.stdin.take();
    Ok(Watch { pipe, child })
}

impl Watch {
    /// The command finished while the client was there: the watcher leaves it alone.
    pub fn release(mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // An error path that returns without release(): the pipe closes here and the
        // watcher treats it like a vanished client. Reap it so no zombie is left.
        self.pipe.take();
        let _ = self.child.wait();
    }
}

/// The `_exec-watch` entry point.
pub fn run_watcher(pid: i32, start_time: u64) -> VerbResult {
    let mut said = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut said);
    if said.starts_with(b"done") {
        return Ok(0);
    }
    if pid > 1 && registry::proc_start_time(pid) == Some(start_time) {
        kill_tree(pid);
    }
    Ok(0)
}

/// smolvm's `kill_process_tree`: stop the root so it cannot fork more, collect its
/// descendants (by parent link, plus anything still in the session it made with setsid),
/// SIGKILL them all, and wait until they are gone.
fn kill_tree(root: i32) {
    // SAFETY: kill(2) on the command whose start time we verified.
    unsafe { libc::kill(root, libc::SIGSTOP) };
    let procs = all_procs();
    let mut tree = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for &(pid, ppid, sid) in &procs {
            if !tree.contains(&pid) && (tree.contains(&ppid) || sid == root) {
                tree.push(pid);
                grew = true;
            }
        }
    }
    for &p in &tree {
        // SAFETY: kill(2) on processes of the command's tree.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let t0 = Instant::now();
    while tree.iter().any(|p| registry::proc_start_time(*p).is_some())
        && t0.elapsed() < Duration::from_secs(2)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `(pid, ppid, session)` of every process, from /proc/*/stat.
fn all_procs() -> Vec<(i32, i32, i32)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((pid, f.get(1)?.parse().ok()?, f.get(3)?.parse().ok()?))
        })
        .collect()
}
