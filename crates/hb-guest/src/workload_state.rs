//! The workload's runtime state file: which pids run, since when, with which token source.
//!
//! It lives in the durable config dir so every `hb` verb (run by `box` as the agent) can
//! read it, but it describes one boot only: a copy from another boot (a VM restart, a
//! restored backup) is recognised by the boot id and ignored.

use nix::unistd::{Gid, Uid};
use serde::{Deserialize, Serialize};

use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorRun {
    pub pid: u32,
    /// Unix seconds.
    pub started_at: i64,
    /// Its port answered at least once since this start.
    pub ready: bool,
}

/// How a process's run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The exit code, or 128 + the signal that ended it.
    pub code: i32,
    /// Unix seconds.
    pub at: i64,
}

/// One Hermes service as the workload runs it (see [`crate::hermes_services`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRun {
    /// `hermes-gateway`, `hermes-cron`.
    pub name: String,
    /// running, stopping, waiting, restarting, stopped, paused or disabled
    pub state: String,
    pub pid: Option<u32>,
    /// Unix seconds.
    pub started_at: Option<i64>,
    /// Exits (crashes, or ends nobody asked for) it was started again after, this boot.
    pub restarts: u32,
    pub last_exit: Option<ExitRecord>,
    /// One line on what the workload is doing or waiting for.
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadState {
    pub boot_id: String,
    pub workload_pid: u32,
    pub port: u16,
    pub web_port: Option<u16>,
    /// `auth-json` or `minted` (see [`crate::token::Source`]).
    pub token_source: Option<String>,
    pub executor: Option<ExecutorRun>,
    /// One line on what the workload is doing or waiting for.
    pub note: String,
    /// The Hermes services (a workload of an older hb lists none).
    #[serde(default)]
    pub services: Vec<ServiceRun>,
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn pid_alive(pid: u32) -> bool {
    pid > 0 && std::path::Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

impl WorkloadState {
    /// The state of a workload running in this boot, if any.
    pub fn read_live(paths: &Paths) -> Option<WorkloadState> {
        let text = read_optional(&paths.workload_state()).ok()??;
        let state: WorkloadState = serde_json::from_str(&text).ok()?;
        (state.boot_id == boot_id() && pid_alive(state.workload_pid)).then_some(state)
    }

    pub fn write(&self, paths: &Paths, owner: Option<(Uid, Gid)>) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        write_private(&paths.workload_state(), text.as_bytes(), 0o600, owner)
    }

    /// The token source the running Executor uses.
    pub fn token_source(&self) -> Option<crate::token::Source> {
        match self.token_source.as_deref() {
            Some("auth-json") => Some(crate::token::Source::AuthJson),
            Some("minted") => Some(crate::token::Source::Minted),
            _ => None,
        }
    }
}
