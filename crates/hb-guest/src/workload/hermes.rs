//! The Hermes services' supervisor: each enabled service (`hermes gateway run`, the cron
//! ticker) runs as one process of the agent, started at boot once the box is provisioned,
//! started again with Executor's backoff when it exits, stopped when it is disabled, on
//! shutdown and under every pause but a save's ([`crate::pause::stops_hermes`]).
//!
//! This is the only code that starts them, and it holds at most one process per service:
//! never two gateways polling one messaging account (the original tool's double spawn came
//! from two starters racing). The gateway also gets `--replace`, so one a user started by
//! hand gives way to the supervised one instead of both running.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use box_proto::HermesService;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::backoff::{Backoff, FIRST_BACKOFF};
use super::logfile::{self, MAX_LOG_BYTES, RotatingLog, SharedLog};
use super::reaper::{exit_code, is_clean_stop};
use super::supervisor::{STOP_GRACE, WAIT_RETRY};
use crate::account::{self, Agent};
use crate::executor::{self, TOOL_BIN_DIR};
use crate::hermes_services::{self, Enabled};
use crate::paths::Paths;
use crate::workload_state::{ExitRecord, ServiceRun};

/// How often the cron ticker runs `hermes cron tick`: Hermes's own gateway ticks its
/// scheduler every 60 s, and jobs are scheduled to the minute.
const CRON_TICK_SECS: u32 = 60;

/// What a service runs, after the login environment: `program args…`.
fn service_argv(service: HermesService, hermes: &Path) -> Vec<String> {
    let hermes = hermes.display().to_string();
    match service {
        // In the foreground; `--replace` ends another gateway of this HERMES_HOME (one
        // started by hand) instead of refusing to start next to it.
        HermesService::Gateway => vec![hermes, "gateway".into(), "run".into(), "--replace".into()],
        // Hermes (0.19) runs cron jobs only inside its gateway, or once per `hermes cron
        // tick`; its tick holds a file lock, so a tick never overlaps the gateway's own.
        HermesService::Cron => vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("while :; do \"$0\" cron tick; sleep {CRON_TICK_SECS}; done"),
            hermes,
        ],
    }
}

/// The service as the agent, in its own process group, with the environment a login
/// shell of the agent has: a clean base naming the durable homes, then the login profile
/// provisioning installed (tool PATH, proxies and CA certificates, API-key placeholders;
/// root's file, sourced by the agent's own process).
fn service_command(service: HermesService, hermes: &Path, paths: &Paths, agent: &Agent) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("hb_profile=$1; shift; if [ -r \"$hb_profile\" ]; then . \"$hb_profile\"; fi; exec \"$@\"")
        .arg("hb-service")
        .arg(account::login_profile())
        .args(service_argv(service, hermes));
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let home = paths.home();
    let cwd = if paths.workspace().is_dir() {
        paths.workspace()
    } else {
        home.clone()
    };
    cmd.env_clear()
        .env("PATH", format!("{TOOL_BIN_DIR}:{path}"))
        .env("HOME", &home)
        .env("USER", &agent.name)
        .env("LOGNAME", &agent.name)
        .env("LANG", "C.UTF-8")
        .env("HERMES_HOME", paths.hermes_home())
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        // In-chat restarts and updates exit back to us instead of spawning a detached
        // gateway we would not know of (Hermes reads it as `--external-supervisor`; an
        // older Hermes ignores the variable where it would refuse the flag).
        .env("HERMES_GATEWAY_EXTERNAL_SUPERVISOR", "1")
        .current_dir(cwd)
        .process_group(0);
    cmd.envs(crate::netenv::vars());
    if agent.must_switch() {
        cmd.uid(agent.uid.as_raw()).gid(agent.gid.as_raw());
    }
    cmd
}

#[derive(Debug)]
enum Run {
    Down,
    Running {
        pid: Pid,
        started: Instant,
        started_unix: i64,
    },
    Stopping {
        pid: Pid,
        started_unix: i64,
        deadline: Instant,
        killed: bool,
    },
}

/// One service's process and history this boot.
struct Slot {
    service: HermesService,
    /// Its own log, `/data/logs/<service name>.log`.
    log: SharedLog,
    run: Run,
    backoff: Backoff,
    next_start: Instant,
    restarts: u32,
    last_exit: Option<ExitRecord>,
    state: &'static str,
    note: String,
}

/// Why the supervisor stops or keeps a service down this tick.
#[derive(Debug, Clone, Copy)]
pub struct Conditions {
    /// A pause that stops Hermes ([`crate::pause::stops_hermes`]).
    pub paused: bool,
    pub shutting_down: bool,
}

pub struct HermesSupervisor {
    paths: Paths,
    /// The workload's log.
    log: SharedLog,
    slots: Vec<Slot>,
    enabled: Enabled,
    /// (inode, size, mtime) of the set file when last read; `None`: not read yet or absent.
    seen: Option<Option<(u64, u64, i64, i64)>>,
}

impl HermesSupervisor {
    pub fn new(
        paths: Paths,
        log: SharedLog,
        owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
    ) -> Self {
        let slots = HermesService::ALL
            .into_iter()
            .map(|service| Slot {
                service,
                log: RotatingLog::shared(paths.log(service.name()), MAX_LOG_BYTES, owner),
                run: Run::Down,
                backoff: Backoff::default(),
                next_start: Instant::now(),
                restarts: 0,
                last_exit: None,
                state: "disabled",
                note: String::new(),
            })
            .collect();
        Self {
            paths,
            log,
            slots,
            enabled: Enabled::default(),
            seen: None,
        }
    }

    fn say(log: &SharedLog, text: &str) {
        eprintln!("hb workload: {text}");
        if let Ok(mut l) = log.lock() {
            l.line(text);
        }
    }

    /// Re-reads the set when its file changed (a `stat` per tick otherwise).
    fn refresh_enabled(&mut self) {
        let sig = std::fs::symlink_metadata(self.paths.hermes_services())
            .ok()
            .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
        if self.seen == Some(sig) {
            return;
        }
        self.seen = Some(sig);
        let enabled = hermes_services::read(&self.paths);
        for problem in &enabled.problems {
            Self::say(&self.log, problem);
        }
        if enabled.set != self.enabled.set {
            let names: Vec<&str> = enabled.set.iter().map(|s| s.name()).collect();
            Self::say(
                &self.log,
                &format!(
                    "Hermes services enabled: {}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
            );
        }
        self.enabled = enabled;
    }

    /// A restart asked for (`hb wire-mcp`): taken once, by removing the request.
    fn take_restart_request(&self) -> bool {
        let request = self.paths.hermes_restart_request();
        if std::fs::symlink_metadata(&request).is_err() {
            return false;
        }
        let _ = std::fs::remove_file(&request);
        Self::say(
            &self.log,
            "restart of the Hermes services asked for (their configuration changed)",
        );
        true
    }

    /// One step for every service: stop what must not run, start what is due.
    pub fn tick(&mut self, when: Conditions) {
        self.refresh_enabled();
        let restart = !when.paused && !when.shutting_down && self.take_restart_request();
        let now = Instant::now();
        for slot in &mut self.slots {
            let enabled = self.enabled.has(slot.service);
            match &mut slot.run {
                Run::Running {
                    pid, started_unix, ..
                } => {
                    let why = if when.shutting_down {
                        "shutdown"
                    } else if !enabled {
                        "disabled"
                    } else if when.paused {
                        "paused"
                    } else if restart {
                        "restart asked for"
                    } else {
                        continue;
                    };
                    let (pid, started_unix) = (*pid, *started_unix);
                    let text = format!("stopping {} (pid {pid}): {why}", slot.service);
                    Self::say(&self.log, &text);
                    slot.line(&text);
                    let _ = killpg(pid, Signal::SIGTERM);
                    slot.run = Run::Stopping {
                        pid,
                        started_unix,
                        deadline: now + STOP_GRACE,
                        killed: false,
                    };
                    slot.state = "stopping";
                    slot.note = why.into();
                }
                Run::Stopping {
                    pid,
                    deadline,
                    killed,
                    ..
                } => {
                    if !*killed && now >= *deadline {
                        *killed = true;
                        let text = format!(
                            "{} (pid {pid}) did not stop within {}s; sending SIGKILL",
                            slot.service,
                            STOP_GRACE.as_secs()
                        );
                        Self::say(&self.log, &text);
                        let _ = killpg(*pid, Signal::SIGKILL);
                    }
                }
                Run::Down => {
                    if !enabled {
                        slot.state = "disabled";
                        slot.note.clear();
                    } else if when.paused {
                        slot.state = "paused";
                        slot.note = "paused with Executor (hb up resumes both)".into();
                    } else if !when.shutting_down && now >= slot.next_start {
                        slot.start(&self.paths, &self.log);
                    }
                }
            }
        }
    }

    /// Reacts to reaped children that are a service's process.
    pub fn on_exits(&mut self, exits: &[(Pid, WaitStatus)]) {
        for (pid, status) in exits {
            if let Some(slot) = self.slots.iter_mut().find(|s| s.pid() == Some(*pid)) {
                slot.exited(*pid, status, &self.log);
            }
        }
    }

    /// Every service's process has exited (for shutdown).
    pub fn is_down(&self) -> bool {
        self.slots.iter().all(|s| matches!(s.run, Run::Down))
    }

    /// What the state file records of each service.
    pub fn runs(&self) -> Vec<ServiceRun> {
        self.slots
            .iter()
            .map(|s| {
                let (pid, started_at) = match &s.run {
                    Run::Running {
                        pid, started_unix, ..
                    }
                    | Run::Stopping {
                        pid, started_unix, ..
                    } => (Some(pid.as_raw() as u32), Some(*started_unix)),
                    Run::Down => (None, None),
                };
                ServiceRun {
                    name: s.service.name().into(),
                    state: s.state.into(),
                    pid,
                    started_at,
                    restarts: s.restarts,
                    last_exit: s.last_exit.clone(),
                    note: s.note.clone(),
                }
            })
            .collect()
    }
}

impl Slot {
    fn pid(&self) -> Option<Pid> {
        match &self.run {
            Run::Running { pid, .. } | Run::Stopping { pid, .. } => Some(*pid),
            Run::Down => None,
        }
    }

    /// A line in the service's own log, so `hb logs hermes-gateway` shows hb's part too.
    fn line(&self, text: &str) {
        if let Ok(mut l) = self.log.lock() {
            l.line(&format!("hb: {text}"));
        }
    }

    /// Notes a waiting condition once and looks again shortly.
    fn wait_for(&mut self, workload_log: &SharedLog, why: String) {
        if self.state != "waiting" || self.note != why {
            HermesSupervisor::say(workload_log, &format!("{}: {why}", self.service));
            self.note = why;
        }
        self.state = "waiting";
        self.next_start = Instant::now() + WAIT_RETRY;
    }

    fn start(&mut self, paths: &Paths, workload_log: &SharedLog) {
        let Some(hermes) = executor::find_tool("hermes") else {
            self.wait_for(
                workload_log,
                "waiting for provisioning: hermes is not installed".into(),
            );
            return;
        };
        let agent = match Agent::resolve() {
            Ok(a) => a,
            Err(e) => {
                self.wait_for(workload_log, format!("waiting for provisioning: {e:#}"));
                return;
            }
        };
        if !paths.home().is_dir() {
            self.wait_for(
                workload_log,
                "waiting for provisioning: the agent's home does not exist yet (hb init)".into(),
            );
            return;
        }
        if let Ok(mut l) = self.log.lock() {
            l.set_owner(agent.owner_if_root());
        }
        let mut cmd = service_command(self.service, &hermes, paths, &agent);
        match logfile::spawn_logged(&mut cmd, &self.log) {
            Ok(pid) => {
                let text = format!(
                    "started {} as {} (pid {pid}): {}",
                    self.service,
                    agent.name,
                    service_argv(self.service, &hermes).join(" ")
                );
                HermesSupervisor::say(workload_log, &text);
                self.line(&text);
                self.run = Run::Running {
                    pid,
                    started: Instant::now(),
                    started_unix: chrono::Utc::now().timestamp(),
                };
                self.state = "running";
                self.note.clear();
            }
            Err(e) => {
                let delay = self.backoff.after_failure(None);
                let text = format!(
                    "cannot start {}: {e}; retrying in {}s",
                    self.service,
                    delay.as_secs()
                );
                HermesSupervisor::say(workload_log, &text);
                self.state = "restarting";
                self.note = text;
                self.next_start = Instant::now() + delay;
            }
        }
    }

    fn exited(&mut self, pid: Pid, status: &WaitStatus, workload_log: &SharedLog) {
        // What is left of its process group (the tick the cron loop was running) goes too.
        let _ = killpg(pid, Signal::SIGKILL);
        let code = exit_code(status).unwrap_or(-1);
        self.last_exit = Some(ExitRecord {
            code,
            at: chrono::Utc::now().timestamp(),
        });
        let ran = match &self.run {
            Run::Running { started, .. } => Some(started.elapsed()),
            _ => None,
        };
        let asked = matches!(self.run, Run::Stopping { .. });
        self.run = Run::Down;
        let text = if asked {
            self.backoff.reset();
            self.next_start = Instant::now();
            self.state = "stopped";
            format!("{} stopped (exit {code})", self.service)
        } else {
            self.restarts += 1;
            let delay = if is_clean_stop(code) {
                self.backoff.reset();
                FIRST_BACKOFF
            } else {
                self.backoff.after_failure(ran)
            };
            self.next_start = Instant::now() + delay;
            self.state = "restarting";
            format!(
                "{} exited with {code} without being asked; starting it again in {}s",
                self.service,
                delay.as_secs()
            )
        };
        HermesSupervisor::say(workload_log, &text);
        self.line(&text);
        self.note = text;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_replaces_a_hand_started_one_and_cron_ticks_each_minute() {
        let hermes = Path::new("/opt/hermes-box/bin/hermes");
        assert_eq!(
            service_argv(HermesService::Gateway, hermes),
            ["/opt/hermes-box/bin/hermes", "gateway", "run", "--replace"]
        );
        let cron = service_argv(HermesService::Cron, hermes);
        assert_eq!(cron[..2], ["/bin/sh", "-c"]);
        assert_eq!(cron[2], "while :; do \"$0\" cron tick; sleep 60; done");
        assert_eq!(cron[3], "/opt/hermes-box/bin/hermes");
    }
}
