//! `hb down`: durable pause. The marker lives on /data, so Executor stays down across VM
//! restarts until `hb up`; the workload notices it and stops Executor.

use std::process::ExitCode;

use anyhow::Result;

use crate::context::Context;
use crate::paths::Paths;
use crate::{account, config, pause};

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let owner = account::Agent::resolve()
        .ok()
        .and_then(|a| a.owner_if_root());
    let created = pause::set(&paths, owner, "hb down")?;
    println!(
        "executor: {} (durable: survives restarts until `hb up`)",
        if created { "pausing" } else { "already paused" }
    );
    pause::wait_stopped(&paths, cfg.executor_port)?;
    println!("executor: stopped; port {} closed", cfg.executor_port);
    Ok(ExitCode::SUCCESS)
}
