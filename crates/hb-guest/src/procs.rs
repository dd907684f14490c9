//! Finding processes through /proc (Hermes writers to stop before a checkpoint).

use std::path::Path;

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    /// Real uid (from /proc/<pid>/status).
    pub uid: Option<u32>,
    pub argv: Vec<String>,
}

fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every process whose argv we can read.
pub fn all() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<String> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            (!argv.is_empty()).then(|| Proc {
                pid,
                uid: uid_of(pid),
                argv,
            })
        })
        .collect()
}

fn base(arg: &str) -> &str {
    Path::new(arg)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(arg)
}

/// Hermes Agent processes (gateway, dashboard, cron, CLI): `hermes ...` or an interpreter
/// running a `hermes` script. They all write `state.db`.
pub fn is_hermes(p: &Proc) -> bool {
    let first = p.argv.first().map(|a| base(a)).unwrap_or("");
    if first == "hermes" {
        return true;
    }
    first.starts_with("python") && p.argv.get(1).is_some_and(|a| base(a) == "hermes")
}

/// Whether a Hermes process is the long-running gateway (the one `resume` restarts).
pub fn is_hermes_gateway(p: &Proc) -> bool {
    is_hermes(p)
        && p.argv
            .windows(2)
            .any(|w| w[0] == "gateway" && w[1] == "run")
}
