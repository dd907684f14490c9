//! What can go wrong when driving smolvm, each with the call that failed and what to do.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
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

    /// smolvm itself reported a failure (`Error: …` on stderr, exit 1).
    #[error("`{call}` failed: {message}")]
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

fn tail(stderr: &str) -> String {
    let last: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(3)
        .collect();
    if last.is_empty() {
        String::new()
    } else {
        let text: Vec<&str> = last.into_iter().rev().collect();
        format!(": {}", text.join(" | "))
    }
}
