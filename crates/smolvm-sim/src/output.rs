//! smolvm's exact texts: its error type (printed as `Error: <msg>`, exit 1) and the
//! success lines callers may parse.

use std::fmt;

/// smolvm's `Error` Display forms (`src/data/errors.rs` at v1.0.4).
#[derive(Debug)]
pub enum SimError {
    VmNotFound(String),
    Config { op: String, reason: String },
    Agent { op: String, reason: String },
    InvalidState { expected: String, actual: String },
    Storage { op: String, reason: String },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::VmNotFound(n) => write!(f, "vm not found: {n}"),
            SimError::Config { op, reason } => write!(f, "config operation failed: {op}: {reason}"),
            SimError::Agent { op, reason } => write!(f, "agent operation failed: {op}: {reason}"),
            SimError::InvalidState { expected, actual } => {
                write!(f, "invalid vm state: expected {expected}, got {actual}")
            }
            SimError::Storage { op, reason } => {
                write!(f, "storage operation failed: {op}: {reason}")
            }
        }
    }
}

impl std::error::Error for SimError {}

pub fn not_found(name: &str) -> SimError {
    SimError::VmNotFound(name.to_string())
}
pub fn config(op: &str, reason: impl Into<String>) -> SimError {
    SimError::Config {
        op: op.to_string(),
        reason: reason.into(),
    }
}
pub fn agent(op: &str, reason: impl Into<String>) -> SimError {
    SimError::Agent {
        op: op.to_string(),
        reason: reason.into(),
    }
}
pub fn storage(op: &str, reason: impl Into<String>) -> SimError {
    SimError::Storage {
        op: op.to_string(),
        reason: reason.into(),
    }
}

/// Result of a verb: the process exit code, or a smolvm error.
pub type VerbResult = Result<i32, SimError>;

/// `exec`/`cp` on a machine that is not running.
pub fn not_running(name: &str) -> SimError {
    agent(
        "connect",
        format!("machine '{name}' is not running. Use 'smolvm machine start --name {name}' first."),
    )
}

pub fn create_success(
    name: &str,
    cpus: u8,
    mem: u32,
    mounts: usize,
    ports: usize,
    init: usize,
) -> String {
    let mut s = format!("Created machine: {name}\n  CPUs: {cpus}, Memory: {mem} MiB\n");
    if mounts > 0 {
        s += &format!("  Mounts: {mounts}\n");
    }
    if ports > 0 {
        s += &format!("  Ports: {ports}\n");
    }
    if init > 0 {
        s += &format!("  Init commands: {init}\n");
    }
    s += &format!("\nUse 'smolvm machine start --name {name}' to start the machine\n");
    s += &format!("Then use 'smolvm machine exec --name {name} -- <command>' to run commands\n");
    s
}

pub fn starting(name: &str, mounts: usize, ports: usize) -> String {
    let m = if mounts > 0 {
        format!(" with {mounts} mount(s)")
    } else {
        String::new()
    };
    let p = if ports > 0 {
        format!(" and {ports} port mapping(s)")
    } else {
        String::new()
    };
    format!("Starting machine '{name}'{m}{p}...")
}

pub fn pid_suffix(pid: Option<i32>) -> String {
    pid.map(|p| format!(" (PID: {p})")).unwrap_or_default()
}

/// smolvm's `truncate` for the ls table.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_string()
    } else if max <= 3 {
        "...".to_string()
    } else {
        format!("{}...", &s[..max - 3])
    }
}

pub fn format_bytes(bytes: u64) -> String {
    const KB: u64 = 1024;
    const MB: u64 = KB * 1024;
    const GB: u64 = MB * 1024;
    if bytes >= GB {
        format!("{:.1} GB", bytes as f64 / GB as f64)
    } else if bytes >= MB {
        format!("{:.1} MB", bytes as f64 / MB as f64)
    } else if bytes >= KB {
        format!("{:.1} KB", bytes as f64 / KB as f64)
    } else {
        format!("{bytes} B")
    }
}

/// A tracing-style warning line on stderr (smolvm logs at WARN through tracing).
pub fn warn(msg: &str) {
    eprintln!("WARN smolvm: {msg}");
}

// Lifecycle lines (smolvm's `src/cli/vm_common.rs` at v1.0.4; unchanged at 1.9.2).

pub fn already_running(name: &str, pid: Option<i32>) -> String {
    format!("Machine '{name}' already running{}", pid_suffix(pid))
}
pub fn unreachable_cleanup(name: &str, pid: i32) -> String {
    format!(
        "Machine '{name}' is unreachable (PID {pid} alive but agent unresponsive); cleaning up."
    )
}
pub fn init_skipped(n: usize) -> String {
    format!("Init already completed, skipping {n} command(s)")
}
pub fn running(name: &str, pid: i32) -> String {
    format!("Machine '{name}' running (PID: {pid})")
}
pub fn stopping(name: &str) -> String {
    format!("Stopping machine '{name}'...")
}
pub fn stopped(name: &str) -> String {
    format!("Stopped machine: {name}")
}
pub fn not_running_state(name: &str, state: &str) -> String {
    format!("Machine '{name}' is not running (state: {state})")
}
/// Written to stderr without a newline, then stdin is read.
pub fn delete_prompt(name: &str) -> String {
    format!("Delete machine '{name}'? [y/N] ")
}
pub const CANCELLED: &str = "Cancelled";
pub fn cleaning_up(name: &str) -> String {
    format!("Cleaning up data directory for vm: {name}")
}
pub fn deleted(name: &str) -> String {
    format!("Deleted machine: {name}")
}
pub fn status_line(label: &str, state: &str, pid: Option<i32>) -> String {
    if state == "running" {
        format!("Machine '{label}': running{}", pid_suffix(pid))
    } else {
        format!("Machine '{label}': {state}")
    }
}
pub const NO_MACHINES: &str = "No machines found";
pub const NO_CHANGES: &str = "No changes specified.";
pub fn updated(name: &str, changes: &[String]) -> String {
    let mut s = format!("Updated machine '{name}':\n");
    for c in changes {
        s += c;
        s.push('\n');
    }
    s + &format!("\nStart with: smolvm machine start --name {name}\n")
}
