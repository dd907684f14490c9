//! The durable pause: a marker file under the agent's config dir. While it exists the
//! workload keeps Executor stopped, across VM restarts too (it lives on /data), and the
//! Hermes services too unless the pause is a save's ([`stops_hermes`]).

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

/// Writes the marker (idempotent), naming the operation that paused (`hb down`,
/// `hb quiesce`) and when, for `hb doctor`. Returns whether it was newly created.
pub fn set(paths: &Paths, owner: Option<(Uid, Gid)>, operation: &str) -> Result<bool> {
    if is_paused(paths) {
        return Ok(false);
    }
    if !paths.hb_config().is_dir() {
        bail!(
            "{} does not exist; run `hb init` (as root) first",
            paths.hb_config().display()
        );
    }
    let text = format!(
        "paused by {operation} at {}\n",
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    write_private(&paths.quiesced_marker(), text.as_bytes(), 0o600, owner)?;
    Ok(true)
}

/// The most of the marker read: its one line is tens of bytes, and the agent can write it.
const MARKER_READ_LIMIT: u64 = 512;

/// Who paused Executor and when, from the marker: `("hb quiesce", "2026-…Z")`. Markers of
/// older hb versions say only `paused by hb at …`; the marker a restore re-arms is empty.
pub fn paused_by(paths: &Paths) -> Option<(String, String)> {
    use std::io::Read as _;
    let mut text = String::new();
    crate::fsutil::open_regular(&paths.quiesced_marker())
        .ok()?
        .take(MARKER_READ_LIMIT)
        .read_to_string(&mut text)
        .ok()?;
    let line = text.lines().next()?.strip_prefix("paused by ")?;
    let (op, at) = line.rsplit_once(" at ")?;
    Some((op.trim().to_string(), at.trim().to_string()))
}

/// The pause a save makes (`hb quiesce`): it stops Executor only. A save never stops
/// Hermes, so the Hermes services go on through it.
pub const SAVE_PAUSE: &str = "hb quiesce";

/// Whether the pause in place stops the Hermes services too: every pause but a save's
/// (`hb down`, a box about to be restored into, a restored box until `hb up`).
pub fn stops_hermes(paths: &Paths) -> bool {
    is_paused(paths) && paused_by(paths).is_none_or(|(op, _)| op != SAVE_PAUSE)
}

/// Waits until the workload has seen the pause (its note says so) and the Executor
/// process it last reported has exited (a zombie its parent has yet to reap counts as
/// gone): a closed port alone does not say an Executor started a moment ago (it takes
/// seconds to listen) is gone, and a restore must not swap /data under it. True at once
/// when no workload runs.
fn wait_down(paths: &Paths, timeout: Duration) -> bool {
    use crate::workload_state::{WorkloadState, pid_alive};
    let start = std::time::Instant::now();
    loop {
        let running = WorkloadState::read_live(paths).is_some_and(|state| {
            state.note != "paused" || state.executor.is_some_and(|run| pid_alive(run.pid))
        });
        if !running {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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
pub fn wait_stopped(paths: &Paths, port: u16) -> Result<()> {
    if executor::wait_port(port, false, STOP_WAIT) && wait_down(paths, STOP_WAIT) {
        Ok(())
    } else {
        bail!(
            "Executor still listens on 127.0.0.1:{port} after {}s; is `hb workload` running? (see `hb logs workload`)",
            STOP_WAIT.as_secs()
        )
    }
}
