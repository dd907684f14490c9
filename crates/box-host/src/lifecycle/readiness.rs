//! Waiting for a started box to be usable: the agent answers `exec`, hb brings Executor up,
//! and (with web exposure) the MCP handshake passes through the published port. Every wait
//! is bounded.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::guest;
use crate::smolvm::{ExecOpts, Smolvm};
use crate::state::BoxRecord;

/// How long the guest agent may take to answer after `machine start` returned.
const AGENT_WAIT: Duration = Duration::from_secs(60);

/// Waits until `exec -- true` succeeds.
pub fn wait_for_agent(smolvm: &Smolvm, machine: &str) -> Result<()> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < AGENT_WAIT {
        match smolvm.exec(
            machine,
            &["true"],
            ExecOpts {
                timeout: Some(Duration::from_secs(10)),
                ..ExecOpts::default()
            },
        ) {
            Ok(out) if out.success() => return Ok(()),
            Ok(out) => last = guest::status(&out),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    bail!(
        "box '{machine}' did not answer within {}s ({last}); try: box doctor {machine}",
        AGENT_WAIT.as_secs()
    )
}

/// What a started box turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Executor answers (through the published port when the web UI is exposed), or the
    /// box does not run Executor at all.
    Ready,
    /// The user paused Executor (`hb down`) before the box was stopped; it stays paused.
    ExecutorPaused,
}

/// The full readiness check after a start: agent, `hb resume` (undoes the quiesce that
/// `box stop` did, and only that, so a pause the user chose survives the restart), and the
/// host handshake when Executor runs and the web UI is exposed. `executor` says whether
/// this box runs Executor at all.
pub fn wait_until_ready(smolvm: &Smolvm, record: &BoxRecord, executor: bool) -> Result<Readiness> {
    wait_for_agent(smolvm, &record.machine)?;
    if !executor {
        return Ok(Readiness::Ready);
    }
    if resume_quiesced(smolvm, &record.machine)? {
        return Ok(Readiness::ExecutorPaused);
    }
    if let Some(port) = record.web_port {
        let token = guest::read_token(smolvm, &record.machine)?;
        // A remote box's port: through a forward, cancelled when `reach` goes.
        let reach = smolvm.reach_port(port)?;
        guest::host_handshake(reach.local_port(), &token, 30, None)?;
    }
    Ok(Readiness::Ready)
}

/// `hb resume`: undoes the quiesce of a `box stop` (or of a save or load that never
/// finished), and only that. Then says whether Executor is still paused: a pause the user
/// chose with `hb down`, which every verb keeps.
pub fn resume_quiesced(smolvm: &Smolvm, machine: &str) -> Result<bool> {
    guest::hb_ok(smolvm, machine, &["resume"], Duration::from_secs(180))?;
    executor_paused(smolvm, machine)
}

/// Asks `hb status --json` whether Executor is durably paused.
fn executor_paused(smolvm: &Smolvm, machine: &str) -> Result<bool> {
    let out = guest::hb_ok(
        smolvm,
        machine,
        &["status", "--json"],
        Duration::from_secs(30),
    )?;
    box_proto::guest_output::executor_paused(&out.stdout)
        .map_err(|e| anyhow::anyhow!("hb status --json in '{machine}' printed something else: {e}"))
}
