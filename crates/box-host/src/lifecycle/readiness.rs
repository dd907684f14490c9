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

/// The full readiness check after a start: agent, `hb up`, and the host handshake when the
/// web UI is exposed. `executor` says whether this box runs Executor at all.
pub fn wait_until_ready(smolvm: &Smolvm, record: &BoxRecord, executor: bool) -> Result<()> {
    wait_for_agent(smolvm, &record.machine)?;
    if !executor {
        return Ok(());
    }
    guest::hb_ok(smolvm, &record.machine, &["up"], Duration::from_secs(180))?;
    if let Some(port) = record.web_port {
        let token = guest::read_token(smolvm, &record.machine)?;
        guest::host_handshake(port, &token, 30, None)?;
    }
    Ok(())
}
