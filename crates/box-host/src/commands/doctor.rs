//! `box doctor [<name>] [--json] [--fix]`: the host, the registry against smolvm (orphans
//! both ways), and per box its state, the guest's `hb doctor` and the MCP handshake from the
//! host through the published port. Read-only unless `--fix`, which drops rows whose
//! machine is gone and brings a stopped Executor back up, and says what it did.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use box_proto::BoxName;

use super::Context;
use crate::gateway;
use crate::lifecycle::guest;
use crate::lifecycle::host_checks::{self, Check, Status};
use crate::smolvm::{Machine, Smolvm};
use crate::state::{BoxRecord, LockKey, Registry, locks};
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::DoctorArgs) -> Result<ExitCode> {
    let only = args.name.as_deref().map(BoxName::parse).transpose()?;
    let smolvm = Smolvm::from_env();
    let mut checks = host_checks::run(&smolvm);
    let mut fixed: Vec<String> = Vec::new();
    let registry = Registry::new(&ctx.state);
    let listing = registry.list()?;
    for bad in &listing.corrupt {
        checks.push(Check::new(
            "registry",
            "record",
            Status::Fail,
            format!(
                "unreadable record {}: {} (inspect or remove it by hand)",
                bad.path.display(),
                bad.problem
            ),
        ));
    }
    let machines = match smolvm.list() {
        Ok(m) => Some(m),
        Err(e) => {
            checks.push(Check::new(
                "registry",
                "smolvm",
                Status::Fail,
                format!("cannot list machines: {e}"),
            ));
            None
        }
    };
    let records: Vec<&BoxRecord> = listing
        .records
        .iter()
        .filter(|r| only.as_ref().is_none_or(|n| &r.name == n))
        .collect();
    if let Some(n) = &only
        && records.is_empty()
    {
        anyhow::bail!("no box named '{n}' (see box ls)");
    }
    if let Some(list) = &machines {
        if only.is_none() {
            for m in list {
                if !listing.records.iter().any(|r| r.machine == m.name) {
                    checks.push(Check::new(
                        "registry",
                        "unmanaged",
                        Status::Ok,
                        format!(
                            "smolvm machine '{}' is not managed by box (left alone)",
                            m.name
                        ),
                    ));
                }
            }
        }
        for r in &records {
            let machine = list.iter().find(|m| m.name == r.machine);
            check_box(ctx, &smolvm, r, machine, args.fix, &mut checks, &mut fixed);
        }
    }
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if args.json {
        let report = serde_json::json!({
            "ok": !failed,
            "checks": checks,
            "fixed": fixed,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&checks, &fixed, failed);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn check_box(
    ctx: &Context,
    smolvm: &Smolvm,
    record: &BoxRecord,
    machine: Option<&Machine>,
    fix: bool,
    checks: &mut Vec<Check>,
    fixed: &mut Vec<String>,
) {
    let scope = format!("box {}", record.name);
    let s = scope.as_str();
    let _lock = match locks::try_acquire(
        &ctx.state,
        LockKey::Box(record.name.clone()),
        &format!("box doctor {}", record.name),
    ) {
        Ok(l) => l,
        Err(e) => {
            checks.push(Check::new(s, "lock", Status::Warn, format!("skipped: {e}")));
            return;
        }
    };
    let Some(machine) = machine else {
        if fix {
            match drop_stale_row(ctx, record) {
                Ok(()) => {
                    fixed.push(format!(
                        "removed the registry entry of '{}': its smolvm machine is gone",
                        record.name
                    ));
                    checks.push(Check::new(s, "machine", Status::Ok, "stale entry removed"));
                }
                Err(e) => checks.push(Check::new(
                    s,
                    "machine",
                    Status::Fail,
                    format!("cannot remove the stale entry: {e:#}"),
                )),
            }
        } else {
            checks.push(Check::new(
                s,
                "machine",
                Status::Fail,
                format!(
                    "smolvm machine '{}' is missing; `box doctor --fix` removes the stale entry",
                    record.machine
                ),
            ));
        }
        return;
    };
    if record.incomplete {
        // We hold the box lock, so no `box new`/`box load` is building it right now.
        checks.push(Check::new(
            s,
            "setup",
            Status::Fail,
            format!(
                "the run that created it never finished (killed?); finish it with: box repair {0}, or remove it with: box rm {0} --force",
                record.name
            ),
        ));
    }
    if !machine.state.is_running() {
        checks.push(Check::new(
            s,
            "state",
            Status::Ok,
            format!(
                "{} (start it with: box start {})",
                machine.state, record.name
            ),
        ));
        return;
    }
    checks.push(Check::new(s, "state", Status::Ok, "running"));
    if let Some(g) = gateway::running(&ctx.state, record.name.as_str()) {
        checks.push(Check::new(
            s,
            "gateway",
            Status::Ok,
            format!(
                "box open gateway running on {} (pid {}, since {})",
                g.url(),
                g.pid,
                g.started
            ),
        ));
    }
    let executor = ctx.config.env.install_executor;
    let mut found = Vec::new();
    let healthy = box_checks(smolvm, record, executor, s, &mut found);
    if !healthy && fix && executor {
        // The safe fix: (re)start Executor, e.g. after a `box stop` whose pause survived a
        // start by other means. Then check again and report only the second round.
        match guest::hb(smolvm, &record.machine, &["up"], Duration::from_secs(180)) {
            Ok(out) if out.success() => {
                fixed.push(format!("started Executor in '{}' (hb up)", record.name));
                found.clear();
                box_checks(smolvm, record, executor, s, &mut found);
            }
            Ok(out) => found.push(Check::new(
                s,
                "fix",
                Status::Fail,
                format!(
                    "hb up failed ({}){}",
                    guest::status(&out),
                    guest::last_lines(&out.stderr, &out.stdout)
                ),
            )),
            Err(e) => found.push(Check::new(s, "fix", Status::Fail, format!("hb up: {e:#}"))),
        }
    }
    checks.extend(found);
}

/// The guest's `hb doctor` and the host handshake; true when neither failed.
fn box_checks(
    smolvm: &Smolvm,
    record: &BoxRecord,
    executor: bool,
    s: &str,
    checks: &mut Vec<Check>,
) -> bool {
    let guest_ok = guest_doctor(smolvm, record, checks, s);
    let host_ok = match record.web_port {
        Some(port) if executor => {
            let result = guest::read_token(smolvm, &record.machine)
                .and_then(|token| guest::host_handshake(port, &token, 3, None));
            match result {
                Ok(h) => {
                    checks.push(Check::new(
                        s,
                        "host-mcp",
                        Status::Ok,
                        format!(
                            "host Executor MCP: healthy on http://127.0.0.1:{port} ({} {})",
                            h.server.name, h.server.version
                        ),
                    ));
                    true
                }
                Err(e) => {
                    checks.push(Check::new(s, "host-mcp", Status::Fail, format!("{e:#}")));
                    false
                }
            }
        }
        _ => {
            checks.push(Check::new(
                s,
                "host-mcp",
                Status::Skip,
                "host endpoint check skipped: web exposure is off",
            ));
            true
        }
    };
    guest_ok && host_ok
}

/// Runs `hb doctor` and records the result. Returns whether it passed.
fn guest_doctor(smolvm: &Smolvm, record: &BoxRecord, checks: &mut Vec<Check>, scope: &str) -> bool {
    let (ok, detail) = match guest::hb(
        smolvm,
        &record.machine,
        &["doctor"],
        Duration::from_secs(60),
    ) {
        Ok(out) if out.success() => (true, "hb doctor passed".to_string()),
        Ok(out) => (
            false,
            format!(
                "hb doctor failed ({}){}",
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            ),
        ),
        Err(e) => (false, format!("{e:#}")),
    };
    checks.push(Check::new(
        scope,
        "guest",
        if ok { Status::Ok } else { Status::Fail },
        detail,
    ));
    ok
}

fn drop_stale_row(ctx: &Context, record: &BoxRecord) -> Result<()> {
    let _reg = locks::try_acquire(
        &ctx.state,
        LockKey::Registry,
        &format!("box doctor --fix {}", record.name),
    )?;
    Registry::new(&ctx.state).remove(&record.name)?;
    Ok(())
}

fn print_report(checks: &[Check], fixed: &[String], failed: bool) {
    let mut scope = "";
    for c in checks {
        if c.scope != scope {
            scope = &c.scope;
            println!("{scope}");
        }
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        println!("  {mark}  {}", c.detail);
    }
    for f in fixed {
        ui::say(format!("fixed: {f}"));
    }
    if failed {
        println!("doctor found problems (see FAIL lines)");
    } else {
        println!("doctor passed");
    }
}
