//! The durable pause: a marker file under the agent's config dir. While it exists the
//! workload keeps Executor stopped, across VM restarts too (it lives on /data).

use std::time::Duration;

use anyhow::{Result, bail};
use nix::unistd::{Gid, Uid};

use crate::executor;
use crate::fsutil::write_private;
use crate::paths::Paths;

/// How long `down`/`quiesce` wait for Executor's port to close.
pub const STOP_WAIT: Duration = Duration::from_secs(30);

pub fn is_paused(paths: &Paths) -> bool {
    paths.quiesced_marker().exists()
}

/// Writes the marker (idempotent). Returns whether it was newly created.
pub fn set(paths: &Paths, owner: Option<(Uid, Gid)>) -> Result<bool> {
    if is_paused(paths) {
        return Ok(false);
    }
    if !paths.hb_config().is_dir() {
        bail!(
            "{} does not exist; run `hb init` (as root) first",
            paths.hb_config().display()
        );
    }
    let text = format!("paused by hb at {}\n", chrono::Utc::now().to_rfc3339());
    write_private(&paths.quiesced_marker(), text.as_bytes(), 0o600, owner)?;
    Ok(true)
}

/// Removes the marker. Returns whether it existed.
pub fn clear(paths: &Paths) -> Result<bool> {
    match std::fs::remove_file(paths.quiesced_marker()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "cannot remove the pause marker {}",
            paths.quiesced_marker().display()
        ))),
    }
}

/// Waits for Executor's port to close (the workload stops it once the marker exists).
pub fn wait_stopped(port: u16) -> Result<()> {
    if executor::wait_port(port, false, STOP_WAIT) {
        Ok(())
    } else {
        bail!(
            "Executor still listens on 127.0.0.1:{port} after {}s; is `hb workload` running? (see `hb logs workload`)",
            STOP_WAIT.as_secs()
        )
    }
}
