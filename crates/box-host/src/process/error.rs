//! What can go wrong when driving smolvm, each with the call that failed and what to do.

use std::time::Duration;

use crate::ui::terminal_text::quoted;

#[derive(Debug, Clone, thiserror::Error)]
pub enum SmolvmError {
    #[error(
        "smolvm not found ('{bin}'): install smolvm (https://smolmachines.com) or set SMOLVM to its path"
    )]
    Missing { bin: String },

    #[error("could not run `{call}`: {problem}")]
    Spawn { call: String, problem: String },

    #[error(
        "`{call}` did not finish within {}s and was stopped; smolvm may be hung (see `box doctor`)",
        secs(after)
    )]
    Timeout { call: String, after: Duration },

    /// smolvm itself reported a failure (`Error: …` on stderr, exit 1). Quoted when shown:
    /// a `machine exec`'s stderr is the guest command's.
    #[error("`{call}` failed: {}", quoted(message))]
    Failed { call: String, message: String },

    /// smolvm exited non-zero without its `Error:` line (a crash, a usage error).
    #[error("`{call}` exited with {code}{}", tail(stderr))]
    Unexpected {
        call: String,
        code: String,
        stderr: String,
    },

    /// smolvm's output could not be understood.
    #[error("`{call}` printed output box cannot read: {problem}")]
    BadOutput { call: String, problem: String },

    /// smolvm is not on the remote host (the wrapper's `command -v` found nothing).
    #[error(
        "smolvm not found on {host} ('{bin}'): install smolvm there, or set BOX_REMOTE_SMOLVM to its path (non-interactive ssh shells often lack ~/.local/bin on PATH)"
    )]
    RemoteMissing { host: String, bin: String },

    /// The ssh client is not installed (or `BOX_SSH_COMMAND` names nothing).
    #[error(
        "ssh not found ('{bin}'): install the OpenSSH client, or set BOX_SSH_COMMAND to the ssh command to use"
    )]
    SshMissing { bin: String },

    /// ssh could not open the connection (unreachable, refused login, host key).
    #[error("cannot connect to {host}: {problem}")]
    Connect { host: String, problem: String },

    /// The connection went away during a call: ssh exited (255) and the remote wrapper's
    /// trailer never came, so this is not the call's own status.
    #[error("lost the connection to {host} during `{call}` (ssh said: {ssh_said})")]
    ConnectionLost {
        host: String,
        call: String,
        ssh_said: String,
    },

    /// A streamed copy arrived short or could not be written.
    #[error("`{call}` failed: {problem}")]
    Transfer { call: String, problem: String },

    /// A HUP/INT/TERM arrived while a call that may be cut short was running.
    #[error("`{call}` was interrupted by signal {signal}")]
    Interrupted { call: String, signal: usize },
}

impl SmolvmError {
    /// smolvm's `vm not found: NAME` (and the `status --json` variant), which callers of
    /// `delete` treat as "already gone".
    pub fn is_not_found(&self) -> bool {
        matches!(self, SmolvmError::Failed { message, .. }
            if message.starts_with("vm not found:") || message.ends_with("not found"))
    }
}

fn secs(d: &Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

/// The last lines of a call's stderr, quoted ([`quoted`]): a `machine exec`'s stderr is
/// the guest command's.
fn tail(stderr: &str) -> String {
    let last: Vec<String> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(3)
        .map(quoted)
        .collect();
    if last.is_empty() {
        String::new()
    } else {
        let text: Vec<String> = last.into_iter().rev().collect();
        format!(": {}", text.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_call_printed_is_quoted_in_its_error() {
        let failed = SmolvmError::Failed {
            call: "smolvm machine exec".into(),
            message: "no\x1b]52;c;eA==\x07".into(),
        };
        assert_eq!(
            failed.to_string(),
            "`smolvm machine exec` failed: no\\x1b]52;c;eA==\\x07"
        );
        let unexpected = SmolvmError::Unexpected {
            call: "smolvm machine exec".into(),
            code: "status 2".into(),
            stderr: "a\n\x1b[2Jb\rc\n".into(),
        };
        assert_eq!(
            unexpected.to_string(),
            "`smolvm machine exec` exited with status 2: a | \\x1b[2Jb\\x0dc"
        );
    }
}
