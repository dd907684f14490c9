//! `box doctor [<name>] [--json] [--fix]`: the host, the registry against smolvm (orphans
//! both ways), and per box its state, the guest's `hb doctor` and the MCP handshake from the
//! host through the published port. Read-only unless `--fix`, which drops rows whose
//! machine is gone, deletes machines box made here that no row names (left by a run killed
//! between its `machine create` and its row, or by a killed base build) and brings a
//! stopped Executor back up, and says what it did.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use box_proto::BoxName;
use box_proto::guest_output::{self, DoctorFact};

use super::Context;
use crate::doctor::{Check, Status, base_check, host_checks, listeners, remote_checks};
use crate::gateway;
use crate::lifecycle::boxes;
use crate::lifecycle::guest;
use crate::lifecycle::guest_network::GuestNetwork;
use crate::smolvm::{Machine, Smolvm, labels};
use crate::state::{BoxRecord, LockKey, Registry, locks};
use crate::transfer::host_dir;
use crate::ui;
use crate::ui::progress::human;

pub fn run(ctx: &Context, args: &crate::cli::DoctorArgs) -> Result<ExitCode> {
    let only = args.name.as_deref().map(BoxName::parse).transpose()?;
    let smolvm = Smolvm::from_env();
    let mut checks = host_checks::run(&smolvm);
    // What new/load/repair would hand a box now (GUEST_CA_CERTS, PROPAGATE_PROXY), on the
    // host new boxes go to (a remote one gets proxies only when REMOTE_PROXY_HOSTS names it).
    checks.push(
        match GuestNetwork::from_host(&ctx.config.env, smolvm.host(), |k| std::env::var(k).ok()) {
            Ok(n) => Check::new(
                "host",
                "network",
                Status::Ok,
                format!("for boxes: {}", n.summary()),
            ),
            Err(e) => Check::new("host", "network", Status::Fail, format!("{e:#}")),
        },
    );
    checks.push(base_check::check(ctx));
    let mut fixed: Vec<String> = Vec::new();
    checks.extend(leftover_plaintext(ctx, args.fix, &mut fixed));
    // Each box's policy and smolvm's newest denials, for --json.
    let mut egress: Vec<serde_json::Value> = Vec::new();
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
    // Each host a box lives on is asked once: this machine, then every remote host.
    let also = ctx.host.as_ref().filter(|_| only.is_none());
    let hosts = boxes::hosts(&listing.records, also, &mut |e| {
        checks.push(Check::new(
            "registry",
            "host",
            Status::Fail,
            format!("{e:#}"),
        ))
    });
    for host in &hosts {
        let on_host: Vec<&BoxRecord> = records
            .iter()
            .copied()
            .filter(|r| r.remote_host().ok().flatten() == *host)
            .collect();
        let remote_smolvm;
        let smolvm = match host {
            None => &smolvm,
            Some(h) => {
                if on_host.is_empty() && only.is_some() {
                    continue;
                }
                remote_smolvm = Smolvm::for_host(Some(h), &ctx.config.env);
                checks.extend(remote_checks::checks(&remote_smolvm));
                &remote_smolvm
            }
        };
        let scope = |what: &str| match host {
            None => what.to_string(),
            Some(h) => format!("{what} on {h}"),
        };
        let machines = match smolvm.list() {
            Ok(m) => m,
            Err(e) => {
                checks.push(Check::new(
                    "registry",
                    "smolvm",
                    Status::Fail,
                    format!(
                        "cannot list machines{}: {e}",
                        host.as_ref()
                            .map(|h| format!(" on {h}"))
                            .unwrap_or_default()
                    ),
                ));
                continue;
            }
        };
        if only.is_none() {
            for m in &machines {
                if boxes::is_managed(&listing.records, host, &m.name) {
                    continue;
                }
                if labels::made_here(m.labels.as_ref(), &ctx.state) {
                    unrecorded_machine(ctx, smolvm, host, m, args.fix, &mut checks, &mut fixed);
                } else {
                    checks.push(Check::new(
                        "registry",
                        "unmanaged",
                        Status::Ok,
                        format!(
                            "{} '{}' is not managed by box (left alone)",
                            scope("smolvm machine"),
                            m.name
                        ),
                    ));
                }
            }
        }
        for r in on_host {
            let machine = machines.iter().find(|m| m.name == r.machine);
            check_box(ctx, smolvm, r, machine, args.fix, &mut checks, &mut fixed);
            if machine.is_some_and(|m| boxes::owned(m, r)) {
                egress_check(smolvm, r, &mut checks, &mut egress);
            }
        }
    }
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if args.json {
        let report = serde_json::json!({
            "ok": !failed,
            "checks": checks,
            "fixed": fixed,
            "egress": egress,
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

/// Host scratch dirs of a save or load killed with SIGKILL (nothing ran its cleanup):
/// they may hold a decrypted part of a backup, 0600 in a 0700 dir. The next save or load
/// sweeps them; until then the doctor says so, and `--fix` removes them.
fn leftover_plaintext(ctx: &Context, fix: bool, fixed: &mut Vec<String>) -> Option<Check> {
    let stale = host_dir::stale(&ctx.state);
    if stale.is_empty() {
        return None;
    }
    let bytes: u64 = stale.iter().map(|(_, b)| b).sum();
    let what = format!(
        "{} scratch dir(s) of a killed save or load in {} ({} of plaintext parts)",
        stale.len(),
        host_dir::parent(&ctx.state).display(),
        human(bytes)
    );
    if fix {
        let removed = host_dir::sweep_stale(&ctx.state);
        fixed.push(format!("removed {removed} of {what}"));
        return (removed < stale.len()).then(|| {
            Check::new(
                "host",
                "plaintext",
                Status::Fail,
                format!("{what}: {} could not be removed", stale.len() - removed),
            )
        });
    }
    Some(Check::new(
        "host",
        "plaintext",
        Status::Warn,
        format!("{what}; the next save or load removes them, or now: box doctor --fix"),
    ))
}

/// A machine box made under this state dir that no row names (see
/// [`boxes::unrecorded`]). While the registry lock (held from a create to its row) or the
/// base lock (held through a build) is taken, a running command may still record or remove
/// it: left alone. Otherwise its maker is gone: a failure, and `--fix` deletes it.
fn unrecorded_machine(
    ctx: &Context,
    smolvm: &Smolvm,
    host: &Option<crate::remote::RemoteHost>,
    m: &Machine,
    fix: bool,
    checks: &mut Vec<Check>,
    fixed: &mut Vec<String>,
) {
    let operation = format!("box doctor ('{}')", m.name);
    let held = (
        locks::try_acquire(&ctx.state, LockKey::Registry, &operation),
        locks::try_acquire(&ctx.state, LockKey::Base, &operation),
    );
    let (Ok(_registry), Ok(_base)) = held else {
        checks.push(Check::new(
            "registry",
            "unrecorded",
            Status::Ok,
            format!(
                "smolvm machine '{}' was made by box here and a box command is running (the \
                 registry or base lock is held): left to it",
                m.name
            ),
        ));
        return;
    };
    // Under the registry lock no row can appear: read them again.
    match Registry::new(&ctx.state).list() {
        Ok(l) if !boxes::is_managed(&l.records, host, &m.name) => {}
        Ok(_) => return,
        Err(e) => {
            checks.push(Check::new(
                "registry",
                "unrecorded",
                Status::Fail,
                format!("{e:#}"),
            ));
            return;
        }
    }
    if !fix {
        checks.push(Check::new(
            "registry",
            "unrecorded",
            Status::Fail,
            boxes::unrecorded(&m.name),
        ));
        return;
    }
    let gone = match smolvm.delete(&m.name) {
        Ok(()) => smolvm.find(&m.name).map(|left| left.is_none()),
        Err(e) if e.is_not_found() => Ok(true),
        Err(e) => Err(e),
    };
    match gone {
        Ok(true) => {
            fixed.push(format!(
                "removed smolvm machine '{}', made by a box command killed before it recorded it",
                m.name
            ));
            checks.push(Check::new(
                "registry",
                "unrecorded",
                Status::Ok,
                format!("smolvm machine '{}' removed", m.name),
            ));
        }
        Ok(false) => checks.push(Check::new(
            "registry",
            "unrecorded",
            Status::Fail,
            format!("smolvm still lists '{}' after delete; retry: box doctor --fix", m.name),
        )),
        Err(e) => checks.push(Check::new(
            "registry",
            "unrecorded",
            Status::Fail,
            format!(
                "cannot remove smolvm machine '{0}': {e}; remove it with: smolvm machine delete --name {0} -f",
                m.name
            ),
        )),
    }
}

/// How many of a box's newest denials the text report shows.
const DENIALS_SHOWN: usize = 5;

/// A box's policy (where it may connect, its bound API keys) and what smolvm refused it
/// lately, as `box egress` shows them.
fn egress_check(
    smolvm: &Smolvm,
    record: &BoxRecord,
    checks: &mut Vec<Check>,
    reports: &mut Vec<serde_json::Value>,
) {
    let s = format!("box {}", record.name);
    let report = match super::egress::Report::read(smolvm, record) {
        Ok(r) => r,
        Err(e) => {
            checks.push(Check::new(
                &s,
                "egress",
                Status::Warn,
                format!("cannot read its egress denials: {e:#}"),
            ));
            return;
        }
    };
    let status = if record.containment.is_some() {
        Status::Ok
    } else {
        Status::Warn
    };
    checks.push(Check::new(
        &s,
        "egress",
        status,
        report.policy_lines().join("; "),
    ));
    checks.push(Check::new(
        &s,
        "denials",
        Status::Ok,
        report.denial_lines(DENIALS_SHOWN).join("\n        "),
    ));
    reports.push(report.json());
}

/// Why an incomplete box is incomplete, and what to do: kept on purpose after a failed
/// run (`--keep-on-failure`), or left by a run that never finished.
fn unfinished(record: &BoxRecord) -> String {
    match &record.kept_after_failure {
        Some(what) => format!(
            "kept on purpose after a failure ({what}, with --keep-on-failure): look inside with \
             box enter {0}; to retry, remove it with box rm {0} --force and run the same command \
             again",
            record.name
        ),
        None => format!(
            "the run that created it never finished (killed?): after a box load or box clone \
             its /data is not what was restored, so remove it with box rm {0} --force and run \
             that command again; after a box new, box repair {0} finishes it",
            record.name
        ),
    }
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
    if !crate::lifecycle::boxes::owned(machine, record) {
        checks.push(Check::new(
            s,
            "machine",
            Status::Fail,
            format!(
                "smolvm machine '{}' is not the one box created (its labels do not carry this \
                 state dir's id); box leaves it alone. Remove the entry with: box rm {} --force",
                machine.name, record.name
            ),
        ));
        return;
    }
    if record.incomplete && is_drill_leftover(record) {
        // We hold the box lock, so no `box drill` is using it: one that was killed before
        // it removed its throwaway box (a kept one is marked complete).
        if fix {
            let outcome = crate::lifecycle::cleanup::rollback_created(
                &ctx.state,
                smolvm,
                &record.name,
                &record.machine,
                None,
                true,
            );
            if outcome == crate::lifecycle::cleanup::Rollback::Clean {
                fixed.push(format!(
                    "removed '{}', the throwaway box of a box drill that did not finish",
                    record.name
                ));
                checks.push(Check::new(s, "setup", Status::Ok, "drill leftover removed"));
                return;
            }
        }
        checks.push(Check::new(
            s,
            "setup",
            Status::Fail,
            format!(
                "the throwaway box of a box drill that did not finish (killed?); box doctor --fix \
                 removes it, as does box rm {} --force",
                record.name
            ),
        ));
        return;
    }
    if record.incomplete {
        // We hold the box lock, so no `box new`/`box load` is building it right now.
        checks.push(Check::new(s, "setup", Status::Fail, unfinished(record)));
    }
    if machine.state.is_paused() {
        checks.push(Check::new(
            s,
            "state",
            Status::Warn,
            format!(
                "{0}: smolvm saved its execution (machine pause) and refuses plain start and \
                 stop; resume it with: smolvm machine resume --name {1}",
                machine.state, machine.name
            ),
        ));
        return;
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
    let health = box_checks(smolvm, record, executor, s, &mut found);
    if !health.healthy && fix && executor {
        // An interrupted save left its quiesce: `hb resume` undoes exactly that (the pause
        // it set, the Hermes gateways it stopped) before Executor is started.
        if health.interrupted_save {
            match guest::hb(
                smolvm,
                &record.machine,
                &["resume"],
                Duration::from_secs(120),
            ) {
                Ok(out) if out.success() || out.stdout.contains("pause cleared") => {
                    fixed.push(format!(
                        "resumed '{}' after an interrupted save (hb resume)",
                        record.name
                    ))
                }
                Ok(out) => found.push(Check::new(
                    s,
                    "fix",
                    Status::Fail,
                    format!(
                        "hb resume failed ({}){}",
                        guest::status(&out),
                        guest::last_lines(&out.stderr, &out.stdout)
                    ),
                )),
                Err(e) => found.push(Check::new(
                    s,
                    "fix",
                    Status::Fail,
                    format!("hb resume: {e:#}"),
                )),
            }
        }
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

/// What the guest and host checks of one box found.
struct Health {
    /// Neither `hb doctor` nor the host handshake failed.
    healthy: bool,
    /// `hb doctor` says Executor is paused by a `box save`/`load` that never resumed it.
    interrupted_save: bool,
}

/// The guest's `hb doctor` and the host handshake.
fn box_checks(
    smolvm: &Smolvm,
    record: &BoxRecord,
    executor: bool,
    s: &str,
    checks: &mut Vec<Check>,
) -> Health {
    let guest = guest_doctor(smolvm, record, checks, s);
    let interrupted_save = guest.interrupted_save;
    let host_ok = match record.web_port {
        Some(_) if executor && interrupted_save => {
            // The port is closed because Executor is paused, not because something else
            // holds it: say that instead of a handshake failure.
            checks.push(Check::new(
                s,
                "host-mcp",
                Status::Fail,
                format!(
                    "Executor is paused by an interrupted save (see above); `box doctor --fix {}` resumes it",
                    record.name
                ),
            ));
            false
        }
        Some(port) if executor => {
            let result = guest::read_token(smolvm, &record.machine).and_then(|token| {
                let reach = smolvm.reach_port(port)?;
                guest::host_handshake(reach.local_port(), &token, 3, None)
            });
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
    // Whatever runs behind it: a published port must answer on loopback only. (A remote
    // box's port is on the remote's loopback; box reaches it through the ssh connection.)
    let port_ok = record.host.is_some()
        || record.web_port.is_none_or(|port| {
            let check = listeners::check(s, port);
            let ok = check.status != Status::Fail;
            checks.push(check);
            ok
        });
    Health {
        healthy: guest.ok && host_ok && port_ok,
        interrupted_save,
    }
}

/// What `hb doctor` answered.
struct GuestDoctor {
    ok: bool,
    /// It reports Executor paused by a `box save`/`load` that never resumed it.
    interrupted_save: bool,
}

/// Runs `hb doctor` and records the result, plus the lines that say what is in effect
/// (the guest network, a pause and who made it) and each enabled Hermes service's check.
fn guest_doctor(
    smolvm: &Smolvm,
    record: &BoxRecord,
    checks: &mut Vec<Check>,
    scope: &str,
) -> GuestDoctor {
    let (ok, detail, stdout) = match guest::hb(
        smolvm,
        &record.machine,
        &["doctor"],
        Duration::from_secs(60),
    ) {
        Ok(out) if out.success() => (true, "hb doctor passed".to_string(), out.stdout),
        Ok(out) => (
            false,
            format!(
                "hb doctor failed ({}){}",
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            ),
            out.stdout,
        ),
        Err(e) => (false, format!("{e:#}"), String::new()),
    };
    checks.push(Check::new(
        scope,
        "guest",
        if ok { Status::Ok } else { Status::Fail },
        detail,
    ));
    // The token line says which way Executor gets its token (auth.json, or argv on 1.5.9).
    let said = guest_output::doctor(&stdout);
    for (fact, line) in said.facts {
        let (name, label) = match fact {
            DoctorFact::Network => ("network", "guest network"),
            DoctorFact::Paused => ("paused", "Executor paused"),
            DoctorFact::Token => ("token", "Executor token"),
        };
        checks.push(Check::new(
            scope,
            name,
            Status::Ok,
            format!("{label}: {line}"),
        ));
    }
    // Each enabled Hermes service, as hb doctor checked it (its failure also fails the
    // guest check above; here it is named with its last log lines).
    for service in said.services {
        checks.push(Check::new(
            scope,
            service.service.name(),
            if service.ok { Status::Ok } else { Status::Fail },
            format!("{}: {}", service.service, service.detail),
        ));
    }
    GuestDoctor {
        ok,
        interrupted_save: said.interrupted_save,
    }
}

/// A `box drill` throwaway box its drill did not remove: named so, and never kept on
/// purpose (`--keep` marks it complete).
fn is_drill_leftover(record: &BoxRecord) -> bool {
    record
        .name
        .as_str()
        .starts_with(crate::state::reserved::DRILL_PREFIX)
        && record.kept_after_failure.is_none()
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
