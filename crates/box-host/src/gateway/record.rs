//! Where a running gateway is found: `<state>/gateways/` (0700) holds, per box, the
//! control socket `<name>.sock` (0600) and `<name>.json` (pid, host name, port: no
//! secret), written by the gateway after it is listening and removed when it exits.
//! `<state>/locks/gateway-<name>.lock` serialises starting one, so two `box open` at once
//! share a single gateway.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::state::StateDir;

/// What a gateway says about itself (the `status` reply and the `.json` file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayInfo {
    #[serde(rename = "box")]
    pub box_name: String,
    pub pid: u32,
    /// The host name the gateway answers to (`box-<name>.localhost`, see the `host_name`
    /// module); empty from a gateway of an older box, which answered to 127.0.0.1.
    #[serde(default)]
    pub host: String,
    /// The gateway's own port on 127.0.0.1.
    pub port: u16,
    /// The box's published Executor port it forwards to.
    pub upstream_port: u16,
    /// RFC 3339, UTC.
    pub started: String,
}

impl GatewayInfo {
    /// `http://<host>:<port>`, where a browser reaches the gateway.
    pub fn url(&self) -> String {
        if self.host.is_empty() {
            return format!("http://127.0.0.1:{}", self.port);
        }
        format!("http://{}:{}", self.host, self.port)
    }

    /// Whether the gateway serves the box at its own host name (one of an older box did
    /// not, and must be replaced).
    pub fn has_host_name(&self) -> bool {
        !self.host.is_empty()
    }
}

pub fn dir(state: &StateDir) -> PathBuf {
    state.root().join("gateways")
}

pub fn socket_path(state: &StateDir, name: &str) -> PathBuf {
    dir(state).join(format!("{name}.sock"))
}

pub fn info_path(state: &StateDir, name: &str) -> PathBuf {
    dir(state).join(format!("{name}.json"))
}

pub fn log_path(state: &StateDir, name: &str) -> PathBuf {
    state.logs_dir().join(format!("gateway-{name}.log"))
}

/// The start lock of `name`'s gateway, waited for up to `wait` (another `box open` may be
/// starting the same gateway right now; it takes seconds, not minutes).
pub fn start_lock(state: &StateDir, name: &str, wait: Duration) -> Result<File> {
    let locks = state.locks_dir();
    StateDir::ensure_private_dir(&locks)?;
    let path = locks.join(format!("gateway-{name}.lock"));
    let file = crate::state::locks::open_lock_file(&path)?;
    let deadline = Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::WouldBlock) => bail!(
                "another `box open {name}` has been starting its gateway for {}s; try again, or see {}",
                wait.as_secs(),
                log_path(state, name).display()
            ),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(
                    anyhow::Error::new(e).context(format!("cannot lock {}", path.display()))
                );
            }
        }
    }
}
