//! Which Hermes services (`hermes-gateway`, `hermes-cron`) this box runs, and how each is
//! doing, for the workload and every verb that shows them.
//!
//! The set lives in the agent's durable config dir ([`Paths::hermes_services`]), so it
//! travels with save, load and clone; box.env's `HERMES_SERVICES` only seeds it at the
//! first `hb init` of a new box (`hb init --seed-services`). The agent can write the file:
//! it is read as hostile data with a size cap, one name a line, and all it decides is
//! which Hermes processes hb runs as the agent, which the agent can run itself anyway.

use std::io::Read as _;

use anyhow::{Result, bail};
use box_proto::HermesService;
use nix::unistd::{Gid, Uid};

use crate::fsutil::write_private;
use crate::paths::Paths;
use crate::workload_state::{ServiceRun, WorkloadState, pid_alive};

/// The most of the file read: two names fit many times over.
pub const MAX_FILE_BYTES: u64 = 4096;

/// The set as read, and what was wrong with the file (each line for a log or a warning:
/// the file's words escaped and cut short).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enabled {
    pub set: Vec<HermesService>,
    pub problems: Vec<String>,
}

impl Enabled {
    pub fn has(&self, service: HermesService) -> bool {
        self.set.contains(&service)
    }
}

/// Reads the set; no file is none enabled. A file larger than [`MAX_FILE_BYTES`], not
/// UTF-8, a symlink or unreadable enables nothing (and says why); an unknown name is left
/// out (and named).
pub fn read(paths: &Paths) -> Enabled {
    let path = paths.hermes_services();
    let mut bytes = Vec::new();
    let read = match crate::fsutil::open_regular(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Enabled::default(),
        Err(e) => Err(e),
        Ok(f) => f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes),
    };
    let refused = |why: String| Enabled {
        set: Vec::new(),
        problems: vec![format!(
            "{}: {why}; no Hermes service runs until it is fixed (`hb service enable` rewrites it)",
            path.display()
        )],
    };
    if let Err(e) = read {
        return refused(format!("cannot read it ({e})"));
    }
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return refused(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return refused("not UTF-8 text".into());
    };
    parse(&text)
}

/// The file's text: a service name (or its box.env word) a line; blank lines and `#`
/// comments skipped.
pub fn parse(text: &str) -> Enabled {
    let mut out = Enabled::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match HermesService::parse(line) {
            Some(s) if !out.has(s) => out.set.push(s),
            Some(_) => {}
            None => out.problems.push(format!(
                "ignored \"{}\" in the Hermes services: not one of {}",
                box_proto::guest_output::quoted(line, 60),
                HermesService::ALL.map(|s| s.name()).join(", ")
            )),
        }
    }
    out.set.sort();
    out
}

/// Writes the set atomically (0600, the agent's).
pub fn write(paths: &Paths, set: &[HermesService], owner: Option<(Uid, Gid)>) -> Result<()> {
    if !paths.hb_config().is_dir() {
        bail!(
            "{} does not exist; run `hb init` (as root) first",
            paths.hb_config().display()
        );
    }
    let mut text =
        String::from("# Hermes processes hb's workload runs (hb service enable|disable)\n");
    for s in set {
        text.push_str(s.name());
        text.push('\n');
    }
    write_private(&paths.hermes_services(), text.as_bytes(), 0o600, owner)
}

/// `hb init --seed-services`: a new box's set from box.env's `HERMES_SERVICES`, unless the
/// box has a set already (a file, even an empty one). Returns what it enabled.
pub fn seed(
    paths: &Paths,
    configured: &[HermesService],
    owner: Option<(Uid, Gid)>,
) -> Result<Vec<HermesService>> {
    if configured.is_empty() || std::fs::symlink_metadata(paths.hermes_services()).is_ok() {
        return Ok(Vec::new());
    }
    write(paths, configured, owner)?;
    Ok(configured.to_vec())
}

/// Asks the workload to restart the Hermes services that run, so they read what changed
/// (the MCP wiring in `$HERMES_HOME`). Nothing to do when none is enabled.
pub fn request_restart(paths: &Paths, owner: Option<(Uid, Gid)>, why: &str) -> Result<bool> {
    if read(paths).set.is_empty() {
        return Ok(false);
    }
    write_private(
        &paths.hermes_restart_request(),
        format!("{why}\n").as_bytes(),
        0o600,
        owner,
    )?;
    Ok(true)
}

/// One service as `hb status`, `hb doctor` and `hb service list` show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServiceView {
    pub name: &'static str,
    pub enabled: bool,
    /// running, starting, paused, stopping, waiting (for provisioning), restarting (after
    /// an exit), stopped (no workload runs) or disabled
    pub state: String,
    pub pid: Option<u32>,
    pub uptime_secs: Option<i64>,
    /// Exits the workload restarted it after, this boot.
    pub restarts: u32,
    /// The exit code of its last run this boot (128 + signal for a signal), and when.
    pub last_exit: Option<crate::workload_state::ExitRecord>,
    /// What the workload says it is doing about it.
    pub note: Option<String>,
    #[serde(skip)]
    pub service: HermesService,
}

/// Every service's view: the set, the workload's live state and the pause.
pub fn views(paths: &Paths) -> Vec<ServiceView> {
    let enabled = read(paths);
    let live = WorkloadState::read_live(paths);
    let stopped_by_pause = crate::pause::stops_hermes(paths);
    let now = chrono::Utc::now().timestamp();
    HermesService::ALL
        .into_iter()
        .map(|service| {
            let run: Option<&ServiceRun> = live
                .as_ref()
                .and_then(|l| l.services.iter().find(|r| r.name == service.name()));
            let pid = run.and_then(|r| r.pid).filter(|p| pid_alive(*p));
            let on = enabled.has(service);
            let state = match (on, pid, run) {
                (true, Some(_), _) if stopped_by_pause => "stopping",
                (true, Some(_), _) => "running",
                (false, Some(_), _) => "stopping",
                (false, None, _) => "disabled",
                (true, None, _) if stopped_by_pause => "paused",
                (true, None, None) => "stopped",
                // The workload has not seen the set or the pause change yet.
                (true, None, Some(r)) if matches!(r.state.as_str(), "disabled" | "paused") => {
                    "starting"
                }
                (true, None, Some(r)) => r.state.as_str(),
            };
            ServiceView {
                name: service.name(),
                enabled: on,
                state: state.to_string(),
                pid,
                uptime_secs: pid
                    .and(run.and_then(|r| r.started_at))
                    .map(|t| (now - t).max(0)),
                restarts: run.map_or(0, |r| r.restarts),
                last_exit: run.and_then(|r| r.last_exit.clone()),
                note: run.map(|r| r.note.clone()).filter(|n| !n.is_empty()),
                service,
            }
        })
        .collect()
}

/// Waits until the workload has acted on the set and the pause for each of `services`:
/// none is starting or stopping any more, or `timeout` passed. Returns their views.
pub fn wait_settled(
    paths: &Paths,
    services: &[HermesService],
    timeout: std::time::Duration,
) -> Vec<ServiceView> {
    let start = std::time::Instant::now();
    loop {
        let mine: Vec<ServiceView> = views(paths)
            .into_iter()
            .filter(|v| services.contains(&v.service))
            .collect();
        let moving = mine
            .iter()
            .any(|v| v.state == "starting" || v.state == "stopping");
        if !moving || start.elapsed() >= timeout {
            return mine;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// [`request_restart`], then waits until the workload took the request and the services
/// run again; returns their views (none when none is enabled or no workload runs).
pub fn restart(
    paths: &Paths,
    owner: Option<(Uid, Gid)>,
    why: &str,
    timeout: std::time::Duration,
) -> Result<Vec<ServiceView>> {
    if !request_restart(paths, owner, why)? {
        return Ok(Vec::new());
    }
    let start = std::time::Instant::now();
    while paths.hermes_restart_request().exists() {
        if WorkloadState::read_live(paths).is_none() || start.elapsed() >= timeout {
            return Ok(Vec::new());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let enabled = read(paths).set;
    Ok(wait_settled(
        paths,
        &enabled,
        timeout.saturating_sub(start.elapsed()),
    ))
}

/// `12s`, `4m 2s`, `3h 5m`.
pub fn uptime(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

impl ServiceView {
    /// One line: `running (pid 7, up 3s, 0 restarts)`, `waiting: …`.
    pub fn summary(&self) -> String {
        let mut out = self.state.clone();
        let restarts = format!(
            "{} restart{}",
            self.restarts,
            if self.restarts == 1 { "" } else { "s" }
        );
        if let Some(pid) = self.pid {
            out.push_str(&format!(
                " (pid {pid}, up {}, {restarts})",
                uptime(self.uptime_secs.unwrap_or(0)),
            ));
        } else {
            if let Some(note) = self.note.as_ref().filter(|n| **n != self.state) {
                out.push_str(&format!(": {note}"));
            }
            if let Some(e) = &self.last_exit {
                out.push_str(&format!(
                    "; last exit {} at {}",
                    e.code,
                    chrono::DateTime::from_timestamp(e.at, 0)
                        .map_or_else(|| e.at.to_string(), |t| t.format("%H:%M:%SZ").to_string())
                ));
            }
            if self.restarts > 0 {
                out.push_str(&format!("; {restarts}"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HermesService::{Cron, Gateway};

    fn paths() -> (tempfile::TempDir, Paths) {
        let d = tempfile::tempdir().unwrap();
        let p = Paths::new(d.path());
        std::fs::create_dir_all(p.hb_config()).unwrap();
        (d, p)
    }

    #[test]
    fn the_file_names_services_a_line_and_nothing_else_counts() {
        let e = parse("# comment\n\nhermes-cron\n  gateway  \nhermes-cron\n");
        assert_eq!(e.set, [Gateway, Cron]);
        assert!(e.problems.is_empty());
        let e = parse("hermes-gateway\nhermes-dashboard\n\x1b]0;x\x07\nsh -c reboot\n");
        assert_eq!(e.set, [Gateway]);
        assert_eq!(e.problems.len(), 3, "{:?}", e.problems);
        assert!(e.problems.iter().all(|p| !p.chars().any(char::is_control)));
        assert!(
            e.problems[0].contains("hermes-dashboard"),
            "{:?}",
            e.problems
        );
    }

    #[test]
    fn a_written_set_reads_back_and_a_bad_file_enables_nothing() {
        let (_d, p) = paths();
        assert_eq!(read(&p), Enabled::default());
        write(&p, &[Gateway, Cron], None).unwrap();
        assert_eq!(read(&p).set, [Gateway, Cron]);
        assert_eq!(crate::fsutil::mode_of(&p.hermes_services()), Some(0o600));
        write(&p, &[], None).unwrap();
        assert!(read(&p).set.is_empty());

        let file = p.hermes_services();
        let big = format!("hermes-gateway\n{}", "#".repeat(MAX_FILE_BYTES as usize));
        std::fs::write(&file, big).unwrap();
        let e = read(&p);
        assert!(
            e.set.is_empty() && e.problems[0].contains("larger than"),
            "{e:?}"
        );
        std::fs::write(&file, b"hermes-gateway\n\xff\n").unwrap();
        assert!(read(&p).problems[0].contains("not UTF-8"));
        std::fs::remove_file(&file).unwrap();
        let elsewhere = p.data.join("elsewhere");
        std::fs::write(&elsewhere, "hermes-gateway\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        let e = read(&p);
        assert!(
            e.set.is_empty() && e.problems[0].contains("cannot read"),
            "{e:?}"
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert!(read(&p).set.is_empty());
        // A FIFO neither blocks the reader (the workload, PID 1) nor enables anything.
        std::fs::remove_dir(&file).unwrap();
        nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read(&p);
        assert!(
            e.set.is_empty() && e.problems[0].contains("not a regular file"),
            "{e:?}"
        );
    }

    #[test]
    fn box_env_seeds_only_a_box_without_a_set() {
        let (_d, p) = paths();
        assert!(seed(&p, &[], None).unwrap().is_empty());
        assert!(!p.hermes_services().exists());
        assert_eq!(seed(&p, &[Gateway], None).unwrap(), [Gateway]);
        assert_eq!(read(&p).set, [Gateway]);
        // The box's own choice stands: a later seed (a repair, a second init) changes nothing.
        write(&p, &[], None).unwrap();
        assert!(seed(&p, &[Gateway, Cron], None).unwrap().is_empty());
        assert!(read(&p).set.is_empty());
    }

    #[test]
    fn a_restart_is_asked_for_only_when_a_service_is_enabled() {
        let (_d, p) = paths();
        assert!(!request_restart(&p, None, "wiring").unwrap());
        assert!(!p.hermes_restart_request().exists());
        write(&p, &[Cron], None).unwrap();
        assert!(request_restart(&p, None, "wiring").unwrap());
        assert!(p.hermes_restart_request().exists());
    }
}
