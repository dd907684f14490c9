//! Reaping: as PID 1 of the box every orphan becomes our child, and an unreaped child
//! stays a zombie forever. One `waitpid(-1)` loop collects them all; the supervisor learns
//! about Executor's exit from the same loop (nothing else may wait for it, or the status
//! would be stolen).

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Collects every exited child without blocking.
pub fn reap() -> Vec<(Pid, WaitStatus)> {
    let mut out = Vec::new();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(status) => {
                if let Some(pid) = status.pid() {
                    out.push((pid, status));
                }
            }
        }
    }
    out
}

/// When `hb workload` is not PID 1 (tests, a debugging session), become a subreaper so
/// orphans of our children (Executor's inner binary, if its launcher dies) still come to us.
pub fn become_subreaper() {
    if std::process::id() != 1 {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integer arguments.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
    }
}

/// The exit code a shell would show: the code, or 128 + signal.
pub fn exit_code(status: &WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(*code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + *sig as i32),
        _ => None,
    }
}

/// Executor's launcher exits 130 on SIGINT/SIGTERM (observed on 1.5.9), other programs
/// 143; either (or death by those signals) is a clean stop, not a crash.
pub fn is_clean_stop(code: i32) -> bool {
    matches!(code, 0 | 130 | 143)
}
