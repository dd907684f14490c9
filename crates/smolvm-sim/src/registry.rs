//! Machine records under SMOLVM_SIM_HOME: one JSON file per machine, written atomically
//! (temp file + rename) while holding an exclusive flock on `registry.lock`, so concurrent
//! invocations behave like smolvm's DB reservation (exactly one `create` of a name wins).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::faults::Faults;
use crate::output::{SimError, storage};

use crate::home::home;

fn machines_dir() -> PathBuf {
    home().join("machines")
}

/// `<home>/vms/<first 16 hex of sha256(name)>`, like smolvm's per-machine data dir.
pub fn data_dir(name: &str) -> PathBuf {
    let h = Sha256::digest(name.as_bytes());
    home().join("vms").join(&hex::encode(h)[..16])
}

fn record_path(name: &str) -> PathBuf {
    machines_dir().join(format!("{name}.json"))
}

fn io_err(op: &str, path: &Path, e: std::io::Error) -> SimError {
    storage(op, format!("{}: {e}", path.display()))
}

/// Exclusive lock on the registry, released on drop (or by the kernel when we die).
pub struct RegistryLock {
    _file: File,
}

pub fn lock() -> Result<RegistryLock, SimError> {
    let h = home();
    fs::create_dir_all(&h).map_err(|e| io_err("open database", &h, e))?;
    let p = h.join("registry.lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&p)
        .map_err(|e| io_err("open database", &p, e))?;
    // Blocking: contenders queue, like SQLite's busy timeout.
    // SAFETY: flock on a valid fd we own.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) };
    if rc != 0 {
        return Err(io_err("lock database", &p, std::io::Error::last_os_error()));
    }
    Ok(RegistryLock { _file: f })
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Created,
    Running,
    Stopped,
    Failed,
    Unreachable,
    /// ~1.33 (`machine pause`, from 1.18): execution saved, the VM stopped.
    Paused,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Created => "created",
            State::Running => "running",
            State::Stopped => "stopped",
            State::Failed => "failed",
            State::Unreachable => "unreachable",
            State::Paused => "paused",
        }
    }
    /// Rust `{:?}` form, as smolvm's InvalidState error prints it.
    pub fn debug_name(self) -> &'static str {
        match self {
            State::Created => "Created",
            State::Running => "Running",
            State::Stopped => "Stopped",
            State::Failed => "Failed",
            State::Unreachable => "Unreachable",
            State::Paused => "Paused",
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Record {
    pub name: String,
    pub state: State,
    pub pid: Option<i32>,
    #[serde(default)]
    pub pid_start_time: Option<u64>,
    /// Host-view PID of the guest's PID 1 (what exec/cp join).
    #[serde(default)]
    pub init_pid: Option<i32>,
    #[serde(default)]
    pub slirp_pid: Option<i32>,
    /// Host PID and start time of the workload launched at the last start.
    #[serde(default)]
    pub workload_pid: Option<i32>,
    #[serde(default)]
    pub workload_start_time: Option<u64>,
    pub cpus: u8,
    pub mem: u32,
    pub image: Option<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub ports: Vec<(u16, u16)>,
    pub mounts: Vec<String>,
    pub network: bool,
    pub net_backend: Option<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub storage_gb: Option<u64>,
    pub overlay_gb: Option<u64>,
    pub init: Vec<String>,
    pub init_completed: bool,
    pub created_at: u64,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub secret_env: Vec<String>,
    #[serde(default)]
    pub secret_file: Vec<String>,
    #[serde(default)]
    pub gpu: bool,
    #[serde(default)]
    pub gpu_vram_mib: Option<u32>,
    #[serde(default)]
    pub allowed_cidrs: Vec<String>,
    /// The guest's root is the host's userland (SMOLVM_SIM_HOST_USERLAND=1 at create, the
    /// fast-test shortcut) instead of a pristine image. A record without the field predates
    /// images, when every guest was a host-userland one: it keeps booting as it did.
    #[serde(default = "predates_images")]
    pub host_userland: bool,
    /// The buildable image the guest boots (`image` itself, or its stand-in); `None` for an
    /// image smolvm-sim can neither build nor map (its first start fails like a pull).
    #[serde(default)]
    pub sim_image: Option<String>,
    /// The `.smolmachine` this machine was created from (smolvm's `source_smolmachine`);
    /// its start needs `<data dir>/pack/.smolvm-extracted`.
    #[serde(default)]
    pub source_smolmachine: Option<String>,
    /// `--allow-host` entries as given, and `--allow-host-pattern`s encoded (`=host`,
    /// `*.host`); `None`: no allow-host list.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// `--block-private` (1.33).
    #[serde(default)]
    pub block_private: bool,
    /// `--allow-private CIDR` (1.33; implies `block_private`).
    #[serde(default)]
    pub allow_private: Vec<String>,
    /// `--credential` bindings (1.18+); never a value.
    #[serde(default)]
    pub credentials: Vec<crate::policy::credential::Binding>,
    /// Each binding's placeholder, minted at create, stable for the machine's life.
    #[serde(default)]
    pub placeholders: BTreeMap<String, String>,
}

fn predates_images() -> bool {
    true
}

pub fn load(name: &str) -> Result<Option<Record>, SimError> {
    let p = record_path(name);
    match fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| storage("read machine record", format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read machine record", &p, e)),
    }
}

pub fn list() -> Result<Vec<Record>, SimError> {
    let d = machines_dir();
    let mut out = Vec::new();
    let rd = match fs::read_dir(&d) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err("list machines", &d, e)),
    };
    for ent in rd.flatten() {
        let fname = ent.file_name();
        let Some(n) = fname.to_str().and_then(|s| s.strip_suffix(".json")) else {
            continue;
        };
        if let Some(r) = load(n)? {
            out.push(r);
        }
    }
    Ok(out)
}

/// Write a record atomically. Call with the registry lock held.
pub fn save(r: &Record) -> Result<(), SimError> {
    let d = machines_dir();
    fs::create_dir_all(&d).map_err(|e| io_err("write machine record", &d, e))?;
    let fin = record_path(&r.name);
    let tmp = d.join(format!(".{}.json.tmp{}", r.name, std::process::id()));
    let body =
        serde_json::to_vec_pretty(r).map_err(|e| storage("serialize record", e.to_string()))?;
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io_err("write machine record", &tmp, e))?;
    f.write_all(&body)
        .and_then(|_| f.sync_all())
        .map_err(|e| io_err("write machine record", &tmp, e))?;
    fs::rename(&tmp, &fin).map_err(|e| io_err("write machine record", &fin, e))?;
    Ok(())
}

pub fn remove(name: &str) -> Result<(), SimError> {
    let p = record_path(name);
    match fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove machine record", &p, e)),
    }
}

/// Field 22 of /proc/PID/stat (start time in clock ticks), or None when the PID is gone or a
/// zombie.
pub fn proc_start_time(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Is the process that this record points at still the one we started?
pub fn pid_alive(pid: Option<i32>, start: Option<u64>) -> bool {
    match pid {
        Some(p) if p > 0 => match (proc_start_time(p), start) {
            (Some(now), Some(then)) => now == then,
            (Some(_), None) => true,
            _ => false,
        },
        _ => false,
    }
}

impl Record {
    /// Whether the machine carries an egress policy, which the gateway enforces (and which
    /// TSI cannot).
    pub fn has_policy(&self) -> bool {
        !self.allowed_cidrs.is_empty()
            || self.allowed_hosts.is_some()
            || self.block_private
            || !self.allow_private.is_empty()
            || !self.credentials.is_empty()
    }

    /// The record's env plus what credentials put in every workload and exec environment:
    /// placeholders and trust variables.
    pub fn guest_base_env(&self) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.extend(crate::policy::credential::guest_env(
            &self.credentials,
            &self.placeholders,
        ));
        env
    }

    /// The supervisor is alive and so is the guest's PID 1.
    pub fn really_running(&self) -> bool {
        self.state == State::Running
            && pid_alive(self.pid, self.pid_start_time)
            && self.init_pid.is_some_and(|p| proc_start_time(p).is_some())
    }

    /// The state smolvm would report: probed live, with `state:` faults applied.
    pub fn live_state(&self, faults: &Faults) -> State {
        let running = self.really_running();
        let base = if running {
            State::Running
        } else if self.state == State::Running {
            State::Stopped
        } else {
            self.state
        };
        if let Some(mode) = faults.state_override(&self.name) {
            match (mode.as_str(), running) {
                ("unreachable", true) => return State::Unreachable,
                ("failed", false) => return State::Failed,
                _ => {}
            }
        }
        base
    }

    /// Is the workload launched at the last start still running?
    pub fn workload_alive(&self) -> bool {
        self.really_running() && pid_alive(self.workload_pid, self.workload_start_time)
    }

    /// The PID smolvm would show (only while the process lives).
    pub fn live_pid(&self) -> Option<i32> {
        if self.really_running() {
            self.pid
        } else {
            None
        }
    }
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// smolvm's `validate_vm_name`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let label = "machine name";
    let Some(first) = name.chars().next() else {
        return Err(format!("{label} cannot be empty"));
    };
    if name.len() > 128 {
        return Err(format!(
            "{label} too long: {} characters (max 128)",
            name.len()
        ));
    }
    if !first.is_ascii_alphanumeric() {
        return Err(format!(
            "{label} must start with a letter or digit (got: {name:?})"
        ));
    }
    if name.ends_with('-') {
        return Err(format!("{label} cannot end with a hyphen (got: {name:?})"));
    }
    let mut prev_h = false;
    for c in name.chars() {
        if c == '-' {
            if prev_h {
                return Err(format!("{label} cannot contain consecutive hyphens"));
            }
            prev_h = true;
        } else {
            prev_h = false;
        }
        if !c.is_ascii_alphanumeric() && c != '-' && c != '_' {
            if c == '/' || c == '\\' {
                return Err(format!("{label} cannot contain path separators"));
            }
            return Err(format!("{label} contains invalid character: '{c}'"));
        }
    }
    Ok(())
}

/// A name held by a `create --from` that is still extracting (smolvm's
/// `CreateVmReservation`): other creates of the name fail as if it existed, and nothing
/// lists it. The flock dies with its holder, so a killed create leaves no reservation.
pub struct Reservation {
    _file: File,
    path: PathBuf,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn reservation_path(name: &str) -> PathBuf {
    machines_dir().join(format!(".{name}.reserved"))
}

/// Is `name` reserved by a live `create --from`? Call with the registry lock held.
pub fn is_reserved(name: &str) -> bool {
    let Ok(f) = File::open(reservation_path(name)) else {
        return false;
    };
    // SAFETY: flock on a valid fd we own.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    rc != 0
}

/// Reserve `name`. Call with the registry lock held, after checking it is free.
pub fn reserve(name: &str) -> Result<Reservation, SimError> {
    let d = machines_dir();
    fs::create_dir_all(&d).map_err(|e| io_err("reserve machine", &d, e))?;
    let path = reservation_path(name);
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| io_err("reserve machine", &path, e))?;
    // SAFETY: flock on a valid fd we own.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    if rc != 0 {
        return Err(io_err(
            "reserve machine",
            &path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(Reservation { _file: f, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_like_smolvm() {
        assert!(validate_name("box-alpha_1").is_ok());
        assert_eq!(
            validate_name("").unwrap_err(),
            "machine name cannot be empty"
        );
        assert_eq!(
            validate_name("a-").unwrap_err(),
            "machine name cannot end with a hyphen (got: \"a-\")"
        );
        assert_eq!(
            validate_name("a/b").unwrap_err(),
            "machine name cannot contain path separators"
        );
        assert!(validate_name(&"a".repeat(129)).is_err());
    }

    /// A record written before images existed keeps its host-userland guest; a new one
    /// says what it is.
    #[test]
    fn records_from_before_images_boot_the_host_userland() {
        let old = r#"{"name":"a","state":"stopped","pid":null,"cpus":4,"mem":8192,
            "image":"ubuntu:24.04","entrypoint":[],"cmd":[],"ports":[],"mounts":[],
            "network":true,"net_backend":null,"env":[],"workdir":null,"storage_gb":null,
            "overlay_gb":null,"init":[],"init_completed":true,"created_at":1}"#;
        let r: Record = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.host_userland);
        assert_eq!(r.sim_image, None);
        let mut new = r.clone();
        new.host_userland = false;
        new.sim_image = Some("debian:13".into());
        let text = serde_json::to_string(&new).unwrap_or_default();
        let back: Record = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert!(!back.host_userland);
        assert_eq!(back.sim_image.as_deref(), Some("debian:13"));
    }

    #[test]
    fn proc_start_time_of_self() {
        assert!(proc_start_time(std::process::id() as i32).is_some());
        assert!(pid_alive(Some(std::process::id() as i32), None));
        assert!(!pid_alive(None, None));
    }
}
