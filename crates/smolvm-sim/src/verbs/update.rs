//! `machine update`: change a stopped machine's record (its allow list too, where the
//! personality has the flags: [`super::update_egress`]).

use super::update_egress::{self, Amendment};
use crate::cli::UpdateCmd;
use crate::context::Ctx;
use crate::output::{self, SimError, VerbResult, config};
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, c: UpdateCmd) -> VerbResult {
    let _lock = registry::lock()?;
    let mut r = registry::load(&c.name)?
        .ok_or_else(|| config("update", format!("machine '{}' not found", c.name)))?;
    let st = if r.really_running() {
        State::Running
    } else {
        r.live_state(&ctx.faults)
    };
    if !matches!(st, State::Stopped | State::Created) {
        return Err(SimError::InvalidState {
            expected: "stopped".into(),
            actual: st.debug_name().into(),
        });
    }
    ctx.fault_point("update", &c.name)?;
    for spec in &c.env {
        if !spec.contains('=') {
            return Err(config(
                "update",
                format!("invalid env format '{spec}': expected KEY=VALUE"),
            ));
        }
    }
    let egress = Amendment {
        allow_hosts: ctx.extras.update_allow_hosts.clone(),
        allow_host_patterns: ctx.extras.allow_host_patterns.clone(),
        remove_allow_hosts: ctx.extras.remove_allow_hosts.clone(),
        allow_all: c.net,
    };
    // Checked before anything is changed: a refused amendment changes nothing.
    let amended = if egress.is_empty() {
        None
    } else {
        let a = update_egress::amend(
            &c.name,
            r.allowed_hosts.as_deref(),
            &r.allowed_cidrs,
            &r.credentials,
            &egress,
        )
        .map_err(|e| config("update", e))?;
        Some(a)
    };
    let mut ports = r.ports.clone();
    ports.retain(|p| !c.remove_port.contains(p));
    for p in &c.port {
        if ports.iter().any(|(h, _)| *h == p.0) {
            return Err(config(
                "update",
                format!(
                    "duplicate host port {}: each host port can only be mapped once",
                    p.0
                ),
            ));
        }
        ports.push(*p);
    }
    let mut changes: Vec<String> = Vec::new();
    for rm in &c.remove_volume {
        let before = r.mounts.len();
        r.mounts
            .retain(|m| !m.starts_with(&format!("{rm}:")) && m != rm);
        if r.mounts.len() < before {
            changes.push(format!("  removed volume: {rm}"));
        }
    }
    for v in &c.volume {
        r.mounts.push(v.clone());
        changes.push(format!("  added volume: {v}"));
    }
    for rm in &c.remove_port {
        if r.ports.contains(rm) {
            changes.push(format!("  removed port: {}:{}", rm.0, rm.1));
        }
    }
    for p in &c.port {
        changes.push(format!("  added port: {}:{}", p.0, p.1));
    }
    r.ports = ports;
    if let Some(cpus) = c.cpus {
        changes.push(format!("  cpus: {} → {cpus}", r.cpus));
        r.cpus = cpus;
    }
    if let Some(mem) = c.mem {
        changes.push(format!("  memory: {} MiB → {mem} MiB", r.mem));
        r.mem = mem;
    }
    if c.net {
        changes.push("  network: enabled".to_string());
        r.network = true;
    }
    if c.no_net {
        changes.push("  network: disabled".to_string());
        r.network = false;
        if !r.allowed_cidrs.is_empty() {
            changes.push("  cleared allow_cidrs".to_string());
            r.allowed_cidrs.clear();
        }
    }
    for k in &c.remove_env {
        let before = r.env.len();
        r.env.retain(|(ek, _)| ek != k);
        if r.env.len() < before {
            changes.push(format!("  removed env: {k}"));
        }
    }
    for spec in &c.env {
        if let Some((k, v)) = spec.split_once('=') {
            r.env.retain(|(ek, _)| ek != k);
            r.env.push((k.to_string(), v.to_string()));
            changes.push(format!("  env: {k}={v}"));
        }
    }
    if let Some(w) = &c.workdir {
        changes.push(format!("  workdir: {w}"));
        r.workdir = Some(w.clone());
    }
    if c.gpu {
        changes.push("  gpu: enabled".to_string());
        r.gpu = true;
    }
    if c.no_gpu {
        changes.push("  gpu: disabled".to_string());
        r.gpu = false;
    }
    if let Some(s) = c.storage {
        changes.push(format!(
            "  storage: {} GiB → {s} GiB",
            r.storage_gb.unwrap_or(20)
        ));
        r.storage_gb = Some(s);
    }
    if let Some(o) = c.overlay {
        changes.push(format!(
            "  overlay: {} GiB → {o} GiB",
            r.overlay_gb.unwrap_or(10)
        ));
        r.overlay_gb = Some(o);
    }
    if let Some(a) = amended {
        r.allowed_hosts = a.hosts;
        r.network = true;
        changes.extend(a.changes);
    }
    if changes.is_empty() {
        println!("{}", output::NO_CHANGES);
        return Ok(0);
    }
    registry::save(&r)?;
    print!("{}", output::updated(&c.name, &changes));
    Ok(0)
}
