//! `hb wire-mcp`: point Claude Code, Codex and (when installed) Hermes at Executor's MCP
//! endpoint with its bearer token. See [`crate::wiring`] for how the token travels.

use std::process::ExitCode;

use anyhow::{Result, bail};
use box_proto::mcp::{self, BearerToken};
use nix::unistd::{Gid, Uid};

use crate::context::Context;
use crate::paths::Paths;
use crate::workload::supervisor::STOP_GRACE;
use crate::workload_state::WorkloadState;
use crate::{account, config, executor, hermes_services, pause, token, wiring};

/// The token the clients must carry now. For Executor 1.5.9 it is the token `hb` mints
/// (and the workload passes to Executor); newer Executors write their own.
pub fn obtain_token(paths: &Paths, owner: Option<(Uid, Gid)>) -> Result<BearerToken> {
    let preferred = WorkloadState::read_live(paths).and_then(|s| s.token_source());
    if let Some((t, _)) = token::current(paths, preferred)? {
        return Ok(t);
    }
    let version = executor::find_tool("executor").and_then(|b| executor::installed_version(&b));
    if executor::reads_auth_json(version) {
        bail!(
            "Executor has not written {} yet; start it (`hb up`) and retry",
            paths.executor_auth_json().display()
        );
    }
    token::ensure_minted(paths, owner)
}

/// The Hermes services read their MCP configuration and token at start: the workload
/// restarts those that run so the new wiring takes effect.
fn restart_hermes_services(paths: &Paths, owner: Option<(Uid, Gid)>) -> Result<()> {
    let why = "hb wire-mcp changed Hermes's MCP wiring";
    let wait = STOP_GRACE + super::service::START_WAIT;
    for view in hermes_services::restart(paths, owner, why, wait)? {
        println!(
            "{} (restarted to read the new MCP wiring)",
            super::service::outcome(paths, &view)
        );
    }
    Ok(())
}

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let owner = account::Agent::resolve()
        .ok()
        .and_then(|a| a.owner_if_root());
    let url = mcp::executor_url(cfg.executor_port);
    if !cfg.wire_executor_mcp || !cfg.install_executor {
        // No wiring to a server that is not there: clients would retry it forever.
        let why = if cfg.install_executor {
            "WIRE_EXECUTOR_MCP=0"
        } else {
            "INSTALL_EXECUTOR=0"
        };
        let removed = wiring::unwire(&paths, &url, owner)?;
        if removed.contains(&"hermes") {
            restart_hermes_services(&paths, owner)?;
        }
        if removed.is_empty() {
            println!("executor MCP wiring disabled ({why}); nothing to remove");
        } else {
            println!(
                "executor MCP wiring disabled ({why}); removed hb's wiring from {}",
                removed.join(", ")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    if pause::is_paused(&paths) {
        bail!("the box is paused; run `hb up` before changing the MCP wiring");
    }
    let token = obtain_token(&paths, owner)?;
    let clients = wiring::clients(&paths);
    let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
    if wiring::is_current(&paths, &url, &token, &clients) {
        println!(
            "executor MCP wiring is current for {} ({}); nothing to do",
            names.join(", "),
            wiring::WIRE_VERSION
        );
        return Ok(ExitCode::SUCCESS);
    }
    let out = wiring::wire(&paths, &url, &token, &clients, owner)?;
    if out.changed.contains(&"hermes") {
        restart_hermes_services(&paths, owner)?;
    }
    println!(
        "executor HTTP MCP registered for {} at {url} ({}; {}; the token lives in 0600 files, never on argv)",
        names.join(", "),
        if out.changed.is_empty() {
            "files already current".to_string()
        } else {
            format!("updated {}", out.changed.join(", "))
        },
        wiring::WIRE_VERSION
    );
    Ok(ExitCode::SUCCESS)
}
