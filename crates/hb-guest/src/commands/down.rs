//! `hb down`: durable pause. The marker lives on /data, so Executor and the Hermes services
//! stay down across VM restarts until `hb up`; the workload notices it and stops them.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use box_proto::HermesService;

use crate::context::Context;
use crate::paths::Paths;
use crate::workload::supervisor::STOP_GRACE;
use crate::{account, config, hermes_services, pause};

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
    // The Hermes services stop with it (the workload sees the same marker).
    let wait = STOP_GRACE + Duration::from_secs(5);
    for view in hermes_services::wait_settled(&paths, &HermesService::ALL, wait) {
        if let Some(pid) = view.pid {
            bail!(
                "{}: its process (pid {pid}) has not exited after {}s; see `hb logs workload`",
                view.name,
                wait.as_secs()
            );
        }
        if view.enabled {
            println!("{}: stopped (until `hb up`)", view.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}
