//! Executor's supervisor: start it as the agent, restart it with backoff, stop it while
//! the durable pause marker exists or on shutdown.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::backoff::{Backoff, FIRST_BACKOFF};
use super::logfile::{self, SharedLog};
use super::reaper::{exit_code, is_clean_stop};
use crate::account::Agent;
use crate::executor;
use crate::paths::Paths;
use crate::token;
use crate::workload_state::ExecutorRun;

/// How long Executor gets to exit after SIGTERM before SIGKILL (it needs ~50 ms).
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a "waiting for ..." condition is re-checked: every tick, since each check is a
/// few `stat`s. A box from a base gets its agent's home from `hb init` in the middle of
/// its per-box provisioning; Executor (2 s to start) then starts at once and is up by the
/// time provisioning ends, where a 3 s retry had `box new` wait for it after (issue 32).
pub const WAIT_RETRY: Duration = Duration::from_millis(200);

#[derive(Debug)]
enum Exec {
    Down,
    Running {
        pid: Pid,
        started: Instant,
        started_unix: i64,
        ready: bool,
    },
    Stopping {
        pid: Pid,
        started_unix: i64,
        deadline: Instant,
        killed: bool,
    },
}

pub struct Supervisor {
    paths: Paths,
    port: u16,
    install_executor: bool,
    log: SharedLog,
    exec_log: SharedLog,
    exec: Exec,
    backoff: Backoff,
    next_start: Instant,
    pub token_source: Option<token::Source>,
    pub note: String,
}

impl Supervisor {
    pub fn new(
        paths: Paths,
        port: u16,
        install_executor: bool,
        log: SharedLog,
        exec_log: SharedLog,
    ) -> Self {
        Self {
            paths,
            port,
            install_executor,
            log,
            exec_log,
            exec: Exec::Down,
            backoff: Backoff::default(),
            next_start: Instant::now(),
            token_source: None,
            note: "starting".into(),
        }
    }

    fn say(&self, text: &str) {
        eprintln!("hb workload: {text}");
        if let Ok(mut l) = self.log.lock() {
            l.line(text);
        }
    }

    /// Notes a waiting condition once (not every retry).
    fn wait_for(&mut self, why: &str) {
        if self.note != why {
            self.say(why);
            self.note = why.to_string();
        }
        self.next_start = Instant::now() + WAIT_RETRY;
    }

    pub fn is_running(&self) -> bool {
        matches!(self.exec, Exec::Running { .. })
    }

    pub fn run_info(&self) -> Option<ExecutorRun> {
        match &self.exec {
            Exec::Running {
                pid,
                started_unix,
                ready,
                ..
            } => Some(ExecutorRun {
                pid: pid.as_raw() as u32,
                started_at: *started_unix,
                ready: *ready,
            }),
            Exec::Stopping {
                pid, started_unix, ..
            } => Some(ExecutorRun {
                pid: pid.as_raw() as u32,
                started_at: *started_unix,
                ready: false,
            }),
            Exec::Down => None,
        }
    }

    /// Reacts to reaped children (only Executor's pid matters; orphans are just reaped).
    pub fn on_exits(&mut self, exits: &[(Pid, WaitStatus)]) {
        for (pid, status) in exits {
            let (ours, stopping, started) = match &self.exec {
                Exec::Running {
                    pid: p, started, ..
                } => (p == pid, false, Some(*started)),
                Exec::Stopping { pid: p, .. } => (p == pid, true, None),
                Exec::Down => (false, false, None),
            };
            if !ours {
                continue;
            }
            // Whatever is left of its process group (the inner binary if the launcher was
            // killed) would hold the port: clear it before any restart.
            let _ = killpg(*pid, Signal::SIGKILL);
            let code = exit_code(status).unwrap_or(-1);
            self.exec = Exec::Down;
            if stopping {
                self.say(&format!("executor stopped (exit {code})"));
                self.next_start = Instant::now();
                self.backoff.reset();
            } else if is_clean_stop(code) {
                self.say(&format!(
                    "executor exited cleanly (exit {code}) without being asked; starting it again in {}s",
                    FIRST_BACKOFF.as_secs()
                ));
                self.backoff.reset();
                self.next_start = Instant::now() + FIRST_BACKOFF;
            } else {
                let delay = self.backoff.after_failure(started.map(|s| s.elapsed()));
                self.say(&format!(
                    "executor exited with {code}; restarting in {}s (see {})",
                    delay.as_secs(),
                    self.paths.log("executor").display()
                ));
                self.next_start = Instant::now() + delay;
            }
        }
    }

    /// One step: stop while paused or shutting down, start when due, notice readiness,
    /// escalate a stop that takes too long.
    pub fn tick(&mut self, paused: bool, shutting_down: bool) {
        let now = Instant::now();
        match &mut self.exec {
            Exec::Running {
                pid,
                started_unix,
                ready,
                ..
            } => {
                let (pid, started_unix) = (*pid, *started_unix);
                if paused || shutting_down {
                    let why = if shutting_down {
                        "shutdown"
                    } else {
                        "durable pause marker present"
                    };
                    self.say(&format!("stopping executor (pid {pid}): {why}"));
                    let _ = killpg(pid, Signal::SIGTERM);
                    self.exec = Exec::Stopping {
                        pid,
                        started_unix,
                        deadline: now + STOP_GRACE,
                        killed: false,
                    };
                    self.note = if shutting_down {
                        "shutting down".into()
                    } else {
                        "paused".into()
                    };
                } else if !*ready && executor::port_open(self.port) {
                    *ready = true;
                    self.backoff.reset();
                    self.note = "running".into();
                    self.say(&format!("executor ready on 127.0.0.1:{}", self.port));
                }
            }
            Exec::Stopping {
                pid,
                deadline,
                killed,
                ..
            } => {
                if !*killed && now >= *deadline {
                    let pid = *pid;
                    *killed = true;
                    self.say(&format!(
                        "executor (pid {pid}) did not stop within {}s; sending SIGKILL",
                        STOP_GRACE.as_secs()
                    ));
                    let _ = killpg(pid, Signal::SIGKILL);
                }
            }
            Exec::Down => {
                if paused {
                    if self.note != "paused" {
                        self.note = "paused".into();
                        self.say("executor durably paused (hb up resumes it)");
                    }
                } else if !shutting_down && now >= self.next_start {
                    self.start();
                }
            }
        }
    }

    fn start(&mut self) {
        if !self.install_executor {
            self.wait_for("executor disabled (INSTALL_EXECUTOR=0)");
            return;
        }
        let Some(bin) = executor::find_tool("executor") else {
            self.wait_for("waiting for provisioning: executor is not installed yet");
            return;
        };
        let agent = match Agent::resolve() {
            Ok(a) => a,
            Err(e) => {
                self.wait_for(&format!("waiting for provisioning: {e:#}"));
                return;
            }
        };
        if !self.paths.home().is_dir() {
            self.wait_for(
                "waiting for provisioning: the agent's home does not exist yet (hb init)",
            );
            return;
        }
        let owner = agent.owner_if_root();
        for log in [&self.log, &self.exec_log] {
            if let Ok(mut l) = log.lock() {
                l.set_owner(owner);
            }
        }
        if let Err(e) = crate::fsutil::ensure_dir(&self.paths.executor_data(), 0o700, owner) {
            self.wait_for(&format!("cannot prepare Executor's data dir: {e:#}"));
            return;
        }
        let version = executor::installed_version(&bin);
        let token = if executor::reads_auth_json(version) {
            self.token_source = Some(token::Source::AuthJson);
            None
        } else {
            match token::ensure_minted(&self.paths, owner) {
                Ok(t) => {
                    self.token_source = Some(token::Source::Minted);
                    Some(t)
                }
                Err(e) => {
                    self.wait_for(&format!("cannot mint an Executor token: {e:#}"));
                    return;
                }
            }
        };
        let mut cmd =
            executor::daemon_command(&bin, &self.paths, self.port, &agent, token.as_ref());
        match logfile::spawn_logged(&mut cmd, &self.exec_log) {
            Ok(pid) => {
                let v =
                    version.map_or("unknown version".into(), |(a, b, c)| format!("{a}.{b}.{c}"));
                let src = self.token_source.map_or("", |s| s.key());
                self.say(&format!(
                    "started executor {v} as {} (pid {pid}, port {}, token: {src})",
                    agent.name, self.port
                ));
                self.note = "starting executor".into();
                self.exec = Exec::Running {
                    pid,
                    started: Instant::now(),
                    started_unix: chrono::Utc::now().timestamp(),
                    ready: false,
                };
            }
            Err(e) => {
                let delay = self.backoff.after_failure(None);
                self.say(&format!(
                    "cannot start {}: {e}; retrying in {}s",
                    bin.display(),
                    delay.as_secs()
                ));
                self.next_start = Instant::now() + delay;
            }
        }
    }

    /// Whether Executor has fully stopped (for shutdown).
    pub fn is_down(&self) -> bool {
        matches!(self.exec, Exec::Down)
    }
}
