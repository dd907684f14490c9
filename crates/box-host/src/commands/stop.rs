//! `box stop <name>`: under the box lock, ask hb to stop services gracefully (smolvm has no
//! init system that would), then `machine stop`.
//!
//! The services are stopped with `hb quiesce`, not `hb down`: it also checkpoints SQLite,
//! and it records what it paused, so `box start` (`hb resume`) brings back only that. A
//! pause the user chose with `hb down` survives the stop and start.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::Context;
use crate::gateway;
use crate::lifecycle::{boxes, guest};
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::NameArg) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let _lock = boxes::lock(ctx, &record, &format!("box stop {}", record.name))?;
    // The UI gateway goes with the box (whatever state the VM is in).
    gateway::stop_with_box(&ctx.state, record.name.as_str());
    let smolvm = boxes::smolvm(ctx, &record)?;
    let machine = boxes::machine(&smolvm, &record)?;
    if !machine.state.is_running() {
        ui::say(format!(
            "'{}' is not running ({})",
            record.name, machine.state
        ));
        return Ok(ExitCode::SUCCESS);
    }
    stop_running(&smolvm, &record)?;
    Ok(ExitCode::SUCCESS)
}

/// Stops a running box whose lock the caller holds: its services through hb, then the VM
/// (also `box egress --restart`).
pub fn stop_running(
    smolvm: &crate::smolvm::Smolvm,
    record: &crate::state::BoxRecord,
) -> Result<()> {
    ui::say(format!("Stopping services in '{}'", record.name));
    match guest::hb(
        smolvm,
        &record.machine,
        &["quiesce"],
        Duration::from_secs(90),
    ) {
        Ok(out) if out.success() => {}
        Ok(out) => ui::warn(format!(
            "hb quiesce in '{}' failed ({}){}; stopping the VM anyway",
            record.name,
            guest::status(&out),
            guest::last_lines(&out.stderr, &out.stdout)
        )),
        Err(e) => ui::warn(format!("{e:#}; stopping the VM anyway")),
    }
    smolvm.stop(&record.machine)?;
    ui::say(format!("Stopped '{}'", record.name));
    Ok(())
}
