//! `hb service list|enable|disable`: which Hermes services the workload keeps running.
//! Enabling writes the box's set (see [`crate::hermes_services`]) and waits until the
//! workload has started the service; disabling waits until it has stopped.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use box_proto::HermesService;

use crate::cli::{ServiceAction, ServiceArgs};
use crate::context::Context;
use crate::hermes_services::{self, ServiceView};
use crate::paths::Paths;
use crate::workload::supervisor::STOP_GRACE;
use crate::{account, pause};

/// How long `enable` waits for the workload to start the service (a look every 50 ms
/// plus Python's start-up).
pub const START_WAIT: Duration = Duration::from_secs(15);

pub fn run(ctx: &Context, args: &ServiceArgs) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    match &args.action {
        ServiceAction::List(json) => list(&paths, json.json),
        ServiceAction::Enable(s) => change(&paths, s.service, true),
        ServiceAction::Disable(s) => change(&paths, s.service, false),
    }
}

fn list(paths: &Paths, json: bool) -> Result<ExitCode> {
    let views = hermes_services::views(paths);
    if json {
        println!("{}", serde_json::to_string_pretty(&views)?);
    } else {
        for problem in hermes_services::read(paths).problems {
            eprintln!("hb: warning: {problem}");
        }
        for v in &views {
            println!("{:<15} {}", v.name, v.summary());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a service's view says to someone who just enabled or disabled it.
pub fn outcome(paths: &Paths, view: &ServiceView) -> String {
    match view.state.as_str() {
        "paused" => format!(
            "{}: enabled; paused with Executor ({}): `hb up` starts both",
            view.name,
            pause::paused_by(paths).map_or("durable pause".into(), |(op, _)| format!("by {op}"))
        ),
        "stopped" => format!(
            "{}: enabled; the workload is not running, it starts the service at the next boot",
            view.name
        ),
        "running" => format!("{}: {}", view.name, view.summary()),
        _ => format!(
            "{}: {} (see `hb logs {}`)",
            view.name,
            view.summary(),
            view.name
        ),
    }
}

fn change(paths: &Paths, service: HermesService, on: bool) -> Result<ExitCode> {
    let current = hermes_services::read(paths);
    for problem in &current.problems {
        eprintln!("hb: warning: {problem}");
    }
    let mut set = current.set.clone();
    set.retain(|s| *s != service);
    if on {
        set.push(service);
        set.sort();
    }
    if set != current.set || !paths.hermes_services().is_file() {
        let owner = account::Agent::resolve()
            .ok()
            .and_then(|a| a.owner_if_root());
        hermes_services::write(paths, &set, owner)?;
    }
    let wait = if on {
        START_WAIT
    } else {
        STOP_GRACE + Duration::from_secs(5)
    };
    let Some(view) = hermes_services::wait_settled(paths, &[service], wait)
        .into_iter()
        .next()
    else {
        bail!("{service}: not a service hb knows");
    };
    if on {
        println!("{}", outcome(paths, &view));
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(pid) = view.pid {
        bail!(
            "{service}: disabled, but its process (pid {pid}) has not exited after {}s; see `hb logs workload`",
            wait.as_secs()
        );
    }
    println!("{service}: disabled; not running");
    Ok(ExitCode::SUCCESS)
}
