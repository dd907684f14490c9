//! `box start <name>`: under the box lock, `machine start`, then a bounded readiness loop
//! (agent, `hb resume`, and the MCP handshake through the published port).

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::lifecycle::{boxes, readiness};
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::NameArg) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let _lock = boxes::lock(ctx, &record, &format!("box start {}", record.name))?;
    let smolvm = boxes::smolvm(ctx, &record)?;
    boxes::machine(&smolvm, &record)?;
    start_and_wait(ctx, &smolvm, &record)?;
    Ok(ExitCode::SUCCESS)
}

/// Starts a box whose lock the caller holds (with its API keys) and waits until it is
/// healthy (also `box egress --restart`).
pub fn start_and_wait(
    ctx: &Context,
    smolvm: &crate::smolvm::Smolvm,
    record: &crate::state::BoxRecord,
) -> Result<()> {
    ui::say(format!("Starting '{}'", record.name));
    crate::lifecycle::containment::start_box(smolvm, record, None)?;
    match readiness::wait_until_ready(smolvm, record, ctx.config.env.install_executor)? {
        readiness::Readiness::Ready => ui::say(format!("'{}' is running and healthy", record.name)),
        readiness::Readiness::ExecutorPaused => ui::say(format!(
            "'{}' is running; Executor stays paused as you left it (resume it inside with: hb up)",
            record.name
        )),
    }
    Ok(())
}
