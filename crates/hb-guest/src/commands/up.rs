//! `hb up`: clear the durable pause and wait until Executor passes the MCP handshake and
//! the enabled Hermes services have started.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use box_proto::mcp;

use crate::context::Context;
use crate::paths::Paths;
use crate::workload_state::WorkloadState;
use crate::{config, hermes_services, pause, token};

/// How long `up`/`resume` wait for Executor to answer.
pub const READY_WAIT: Duration = Duration::from_secs(60);
/// How often the wait looks again.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long to wait for a workload that has not written its state yet.
const WORKLOAD_GRACE: Duration = Duration::from_secs(10);

/// Waits until the workload runs Executor and it completes the MCP handshake.
pub fn wait_healthy(paths: &Paths, port: u16, wait: Duration) -> Result<mcp::Healthy> {
    let start = Instant::now();
    let url = mcp::executor_url(port);
    let mut last = String::from("Executor has not started yet");
    while start.elapsed() < wait {
        let Some(state) = WorkloadState::read_live(paths) else {
            // The workload may be just starting (box installs hb, the launcher execs it).
            if start.elapsed() < WORKLOAD_GRACE {
                std::thread::sleep(PROBE_EVERY);
                continue;
            }
            bail!(
                "the workload is not running (`hb workload` is the box's main process); Executor starts when it runs. Restart the box (`box stop` / `box start`) and see `hb logs workload`"
            );
        };
        let tok = token::current(paths, state.token_source())?;
        match mcp::probe(
            &url,
            tok.as_ref().map(|(t, _)| t),
            &mcp::ProbeOptions::default(),
        ) {
            Ok(h) => return Ok(h),
            Err(e) => last = format!("{e} [{}]", state.note),
        }
        // A refused connect costs nothing, and Executor's first answer ends every save,
        // load and new: look often.
        std::thread::sleep(PROBE_EVERY);
    }
    bail!(
        "Executor did not pass the MCP handshake within {}s: {last}; see `hb logs executor`",
        wait.as_secs()
    )
}

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    // The pause holds the Hermes services too, with or without Executor.
    let cleared = pause::clear(&paths)?;
    if !cfg.install_executor {
        println!("executor: disabled (INSTALL_EXECUTOR=0)");
    } else {
        if cleared {
            println!("executor: pause cleared; starting");
        }
        let h = wait_healthy(&paths, cfg.executor_port, READY_WAIT)?;
        println!(
            "executor: ready on 127.0.0.1:{} (MCP {} handshake ok, server {} {})",
            cfg.executor_port, h.protocol_version, h.server.name, h.server.version
        );
    }
    // Reported, never failed on: `hb doctor` says what is wrong with one that does not run.
    let enabled = hermes_services::read(&paths).set;
    for view in hermes_services::wait_settled(&paths, &enabled, super::service::START_WAIT) {
        println!("{}", super::service::outcome(&paths, &view));
    }
    Ok(ExitCode::SUCCESS)
}
