//! `machine ls`: JSON (pretty, alphabetical keys, shuffled order) or the text table.

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use serde_json::{Value, json};

use crate::cli::LsCmd;
use crate::context::Ctx;
use crate::output::{self, VerbResult};
use crate::registry::{self, Record};

/// The per-machine object shared by `ls --json` and `status --json` (smolvm's
/// `machine_status_json`), keys sorted alphabetically as serde_json without preserve_order.
pub fn status_json(ctx: &Ctx, r: &Record) -> Value {
    let mut m: BTreeMap<&str, Value> = BTreeMap::new();
    m.insert("name", json!(r.name));
    m.insert("state", json!(r.live_state(&ctx.faults).as_str()));
    m.insert("cpus", json!(r.cpus));
    m.insert("memory_mib", json!(r.mem));
    m.insert("pid", json!(r.live_pid()));
    m.insert("mounts", json!(r.mounts.len()));
    m.insert("ports", json!(r.ports.len()));
    m.insert("created_at", json!(r.created_at));
    m.insert("storage_gb", json!(r.storage_gb));
    m.insert("overlay_gb", json!(r.overlay_gb));
    m.insert("image", json!(r.image));
    m.insert("entrypoint", json!(r.entrypoint));
    m.insert("cmd", json!(r.cmd));
    m.insert("ephemeral", json!(false));
    m.insert("gpu", json!(r.gpu));
    m.insert("gpu_vram_mib", json!(r.gpu_vram_mib));
    m.insert("restart_policy", json!("never"));
    m.insert("restart_max_retries", json!(0));
    m.insert("restart_count", json!(0));
    m.insert("health_cmd", Value::Null);
    m.insert("health_interval_secs", Value::Null);
    m.insert("health_timeout_secs", Value::Null);
    m.insert("health_retries", Value::Null);
    m.insert("health_startup_grace_secs", Value::Null);
    m.insert("network", json!(r.network));
    if ctx.personality.is_head() {
        m.insert("cuda", json!(false));
        m.insert("forkable", json!(false));
        m.insert("cuda_fork_pool_size", Value::Null);
        m.insert("cuda_vram_limit_mib", Value::Null);
        m.insert("forkpoint_held", json!(false));
        m.insert("labels", json!(r.labels));
    }
    if ctx.personality.is_current() {
        // `machine_status_json` at smolvm 5240fda5 (`src/cli/vm_common.rs`): the branch
        // vocabulary beside the older fork keys, the block I/O engine, attached disks.
        // `block_io`'s string is assumed (serde's lowercase of the default `Sync`); box
        // reads none of these.
        m.insert("block_io", json!("sync"));
        m.insert("disks", json!([]));
        m.insert("detached", json!(false));
        m.insert("branchable", json!(false));
        m.insert("parent_machine", Value::Null);
        m.insert("cuda_branch_pool_size", Value::Null);
        m.insert("branchpoint_held", json!(false));
    }
    json!(m)
}

pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".to_string())
}

pub fn run(ctx: &Ctx, c: LsCmd) -> VerbResult {
    let mut vms = registry::list()?;
    ctx.fault_point("ls", "")?;
    if vms.is_empty() {
        println!("{}", if c.json { "[]" } else { output::NO_MACHINES });
        return Ok(0);
    }
    if ctx.personality.is_current() {
        // ~1.33 keeps its machines in a BTreeMap "so every listing comes out the same way"
        // (`src/config.rs` at 090d4512).
        vms.sort_by(|a, b| a.name.cmp(&b.name));
    } else {
        // 1.0.4-1.17 iterate a HashMap: the order is arbitrary. Shuffle so callers never
        // rely on it.
        vms.shuffle(&mut rand::rng());
    }
    if c.json {
        let arr: Vec<Value> = vms.iter().map(|r| status_json(ctx, r)).collect();
        println!("{}", pretty(&Value::Array(arr)));
        return Ok(0);
    }
    println!(
        "{:<20} {:<12} {:>5} {:>10} {:>7} {:>7} {:>8} {:>8}",
        "NAME", "STATE", "CPUS", "MEMORY", "MOUNTS", "PORTS", "STORAGE", "OVERLAY"
    );
    println!("{}", "-".repeat(88));
    for r in &vms {
        println!(
            "{:<20} {:<12} {:>5} {:>10} {:>7} {:>7} {:>8} {:>8}",
            output::truncate(&r.name, 18),
            r.live_state(&ctx.faults).as_str(),
            r.cpus,
            format!("{} MiB", r.mem),
            r.mounts.len(),
            r.ports.len(),
            format!("{} GiB", r.storage_gb.unwrap_or(20)),
            format!("{} GiB", r.overlay_gb.unwrap_or(10)),
        );
        if c.verbose {
            if let Some(pid) = r.live_pid() {
                println!("  PID: {pid}");
            }
            for m in &r.mounts {
                let mut parts = m.splitn(3, ':');
                let h = parts.next().unwrap_or_default();
                let g = parts.next().unwrap_or_default();
                let ro = if parts.next() == Some("ro") {
                    " (ro)"
                } else {
                    ""
                };
                println!("  Mount: {h} -> {g}{ro}");
            }
            for (h, g) in &r.ports {
                println!("  Port: {h} -> {g}");
            }
            if r.network {
                println!("  Network: enabled");
            }
            for i in &r.init {
                println!("  Init: {i}");
            }
            for (k, v) in &r.env {
                println!("  Env: {k}={v}");
            }
            if let Some(w) = &r.workdir {
                println!("  Workdir: {w}");
            }
            println!("  Created: {}", rfc3339(r.created_at));
            println!();
        }
    }
    Ok(0)
}

/// `YYYY-MM-DDTHH:MM:SSZ` from Unix seconds (civil-from-days).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}
