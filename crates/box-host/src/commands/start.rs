//! `box start <name>`: under the box lock, `machine start`, then a bounded readiness loop
//! (agent, `hb up`, and the MCP handshake through the published port).

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::lifecycle::{boxes, readiness};
use crate::smolvm::Smolvm;
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::NameArg) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let _lock = boxes::lock(ctx, &record, &format!("box start {}", record.name))?;
    let smolvm = Smolvm::from_env();
    boxes::machine(&smolvm, &record)?;
    ui::say(format!("Starting '{}'", record.name));
    smolvm.start(&record.machine)?;
    readiness::wait_until_ready(&smolvm, &record, ctx.config.env.install_executor)?;
    ui::say(format!("'{}' is running and healthy", record.name));
    Ok(ExitCode::SUCCESS)
}
