//! `hb status [--json]`: Executor running/paused/stopped with pid and uptime, its port,
//! each Hermes service (enabled, pid, restarts, last exit), the wiring, disk and memory of
//! /data, tool versions (from the runtime manifest).

use std::process::ExitCode;

use anyhow::Result;
use box_proto::RuntimeManifest;
use box_proto::mcp::executor_url;
use serde::Serialize;

use crate::context::Context;
use crate::fsutil::read_optional;
use crate::hermes_services::{self, ServiceView, uptime};
use crate::paths::Paths;
use crate::workload_state::{WorkloadState, pid_alive};
use crate::{config, executor, pause, token, wiring};

#[derive(Debug, Serialize)]
pub struct Status {
    pub executor: ExecutorStatus,
    pub workload: Option<u32>,
    /// Every Hermes service hb can run, enabled or not.
    pub services: Vec<ServiceView>,
    pub wiring: String,
    pub data: Option<Space>,
    pub memory: Space,
    pub tools: Vec<(String, String)>,
}

#[derive(Debug, Serialize)]
pub struct ExecutorStatus {
    /// running, starting, paused, stopped or disabled
    pub state: String,
    pub pid: Option<u32>,
    pub uptime_secs: Option<i64>,
    pub port: u16,
    pub listening: bool,
    pub token_source: Option<String>,
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Space {
    pub total_bytes: u64,
    pub available_bytes: u64,
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

pub fn collect(ctx: &Context) -> Result<Status> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let live = WorkloadState::read_live(&paths);
    let listening = executor::port_open(cfg.executor_port);
    let run = live
        .as_ref()
        .and_then(|s| s.executor.clone())
        .filter(|r| pid_alive(r.pid));
    let paused = pause::is_paused(&paths);
    let state = if !cfg.install_executor {
        "disabled"
    } else if paused {
        "paused"
    } else if run.is_some() && listening {
        "running"
    } else if run.is_some() {
        "starting"
    } else {
        "stopped"
    };
    let now = chrono::Utc::now().timestamp();
    let preferred = live.as_ref().and_then(|s| s.token_source());
    let tok = token::current(&paths, preferred).ok().flatten();
    let url = executor_url(cfg.executor_port);
    let wiring = if !cfg.wire_executor_mcp {
        "disabled".to_string()
    } else {
        match &tok {
            Some((t, _)) if wiring::is_current(&paths, &url, t, &wiring::clients(&paths)) => {
                let names: Vec<&str> = wiring::clients(&paths).iter().map(|c| c.name()).collect();
                format!("wired ({}) for {}", wiring::WIRE_VERSION, names.join(", "))
            }
            _ if paths.wire_marker().exists() => "stale (run `hb wire-mcp`)".into(),
            _ => "not wired".into(),
        }
    };
    let data = {
        let disks = sysinfo::Disks::new_with_refreshed_list();
        let canon = std::fs::canonicalize(&paths.data).unwrap_or(paths.data.clone());
        disks
            .list()
            .iter()
            .filter(|d| canon.starts_with(d.mount_point()))
            .max_by_key(|d| d.mount_point().as_os_str().len())
            .map(|d| Space {
                total_bytes: d.total_space(),
                available_bytes: d.available_space(),
            })
    };
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let memory = Space {
        total_bytes: sys.total_memory(),
        available_bytes: sys.available_memory(),
    };
    let tools = read_optional(&paths.manifest())
        .ok()
        .flatten()
        .and_then(|t| RuntimeManifest::parse(&t).ok())
        .map(|m| {
            m.entries()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    Ok(Status {
        executor: ExecutorStatus {
            state: state.into(),
            pid: run.as_ref().map(|r| r.pid),
            uptime_secs: run.as_ref().map(|r| (now - r.started_at).max(0)),
            port: cfg.executor_port,
            listening,
            token_source: tok.map(|(_, s)| s.key().to_string()),
            note: live.as_ref().map(|s| s.note.clone()),
        },
        workload: live.map(|s| s.workload_pid),
        services: hermes_services::views(&paths),
        wiring,
        data,
        memory,
        tools,
    })
}

pub fn run(ctx: &Context, args: &crate::cli::JsonArg) -> Result<ExitCode> {
    let s = collect(ctx)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    let e = &s.executor;
    let detail = match (e.pid, e.uptime_secs) {
        (Some(pid), Some(up)) => format!(" (pid {pid}, up {})", uptime(up)),
        _ => String::new(),
    };
    println!(
        "executor: {}{detail}, port 127.0.0.1:{} {}",
        e.state,
        e.port,
        if e.listening { "open" } else { "closed" }
    );
    println!(
        "workload: {}",
        s.workload
            .map_or("not running".into(), |p| format!("running (pid {p})"))
    );
    for v in &s.services {
        println!("{}: {}", v.name, v.summary());
    }
    println!(
        "token:    {}",
        e.token_source.as_deref().unwrap_or("none yet")
    );
    println!("mcp:      {}", s.wiring);
    match &s.data {
        Some(d) => println!(
            "data:     {} free of {}",
            gib(d.available_bytes),
            gib(d.total_bytes)
        ),
        None => println!("data:     unknown"),
    }
    println!(
        "memory:   {} available of {}",
        gib(s.memory.available_bytes),
        gib(s.memory.total_bytes)
    );
    let tools: Vec<String> = s
        .tools
        .iter()
        .filter(|(k, _)| ["node", "claude", "codex", "hermes", "executor"].contains(&k.as_str()))
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "tools:    {}",
        if tools.is_empty() {
            "unknown (hb write-manifest)".into()
        } else {
            tools.join(", ")
        }
    );
    Ok(ExitCode::SUCCESS)
}
