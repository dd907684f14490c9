//! `box egress NAME --allow-host X --deny-host Y [--restart]`: a changed allow list applied
//! to the box itself, where the installed smolvm can (`machine update` on a stopped
//! machine, [`crate::smolvm::SmolvmVersion::updates_allow_lists`]): `/data`, the name and
//! the machine stay. smolvm is changed first, then box's record (what `box save` seals and
//! `box clone` copies), so the record never names a list smolvm does not enforce; when the
//! second step fails, both states are said. Where smolvm cannot, and for a box without an
//! allow list, the commands that make the box again with the change ([`super::refusal`]).

use std::process::ExitCode;

use anyhow::{Result, bail};

use super::Context;
use crate::commands::{start, stop};
use crate::lifecycle::{boxes, containment};
use crate::policy::{Mode, Overrides};
use crate::state::{BoxRecord, Registry};
use crate::ui;

pub fn run(ctx: &Context, record: &BoxRecord, args: &crate::cli::EgressArgs) -> Result<ExitCode> {
    let _lock = boxes::lock(
        ctx,
        record,
        &format!("box egress {} (list change)", record.name),
    )?;
    // Read again under the lock: the row another verb wrote meanwhile is the one changed.
    let record = boxes::registered(ctx, record.name.as_str())?;
    let (allow, deny) = (&args.allow_host, &args.deny_host);
    let current = match &record.containment {
        Some(c) if c.mode == Mode::Allowlist => c.clone(),
        _ => bail!(super::refusal(
            ctx,
            &record,
            allow,
            deny,
            "an allow list is made with the box",
        )?),
    };
    let mut next = current.clone();
    next.apply(&Overrides {
        allow_hosts: allow.clone(),
        deny_hosts: deny.clone(),
        ..Overrides::default()
    })?;
    let smolvm = boxes::smolvm(ctx, &record)?;
    let version = smolvm.version()?;
    if !version.updates_allow_lists() {
        bail!(super::refusal(
            ctx,
            &record,
            allow,
            deny,
            &format!(
                "smolvm {version} cannot change the list of an existing machine (machine update \
                 --allow-host needs 1.33 or newer)"
            ),
        )?);
    }
    let flags = containment::update_args(&current, &next, version);
    if flags.is_empty() {
        ui::say(format!(
            "'{}' reaches {} already: nothing to change",
            record.name,
            allow.join(" ")
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let machine = boxes::machine(&smolvm, &record)?;
    let was_running = machine.state.is_running();
    if was_running && !args.restart {
        bail!(
            "'{0}' is running, and smolvm changes the allow list of a stopped machine only: stop \
             it first (box stop {0}), or add --restart (box stops it, changes the list and starts \
             it again). Nothing was changed",
            record.name
        );
    }
    if was_running {
        stop::stop_running(&smolvm, &record)?;
    }
    if let Err(e) = smolvm.update_allow_list(&record.machine, &flags) {
        let restarted = restart_after(ctx, &smolvm, &record, was_running);
        let unknown_flag = e.to_string().contains("unexpected argument");
        let fallback = if unknown_flag {
            format!(
                "\n{}",
                super::refusal(
                    ctx,
                    &record,
                    allow,
                    deny,
                    &format!("this smolvm ({version}) does not take machine update --allow-host"),
                )?
            )
        } else {
            String::new()
        };
        bail!(
            "smolvm did not change the allow list of '{}': {e}. Nothing was changed: smolvm's \
             list and box's record are as they were{restarted}{fallback}",
            record.name
        );
    }
    let mut row = record.clone();
    row.containment = Some(next);
    if let Err(e) = Registry::new(&ctx.state).update(&row) {
        let restarted = restart_after(ctx, &smolvm, &record, was_running);
        bail!(
            "smolvm's allow list of '{0}' has the change ({1}), but box's record of it could not \
             be written ({e:#}): box egress, box save and box clone still go by the list before \
             it. Once the state dir is writable again, run the command again{restarted}",
            record.name,
            flags.join(" ")
        );
    }
    let changed: Vec<String> = allow
        .iter()
        .map(|h| format!("+{h}"))
        .chain(deny.iter().map(|h| format!("-{h}")))
        .collect();
    ui::say(format!(
        "Changed the allow list of '{}' ({}): smolvm's and box's record agree; /data and the name \
         are unchanged",
        record.name,
        changed.join(" ")
    ));
    if was_running {
        start::start_and_wait(ctx, &smolvm, &row)?;
    } else {
        ui::say(format!(
            "'{0}' is stopped; the list applies from its next start: box start {0}",
            record.name
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts a box stopped for the change again after a failure, and what to add to the
/// error about it.
fn restart_after(
    ctx: &Context,
    smolvm: &crate::smolvm::Smolvm,
    record: &BoxRecord,
    was_running: bool,
) -> String {
    if !was_running {
        return String::new();
    }
    match start::start_and_wait(ctx, smolvm, record) {
        Ok(()) => format!("; '{}' was started again", record.name),
        Err(e) => format!(
            "; starting '{0}' again failed too ({e:#}): box start {0}",
            record.name
        ),
    }
}
