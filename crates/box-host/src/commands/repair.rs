//! `box repair <name>`: refresh hb, the config and provision/, re-run provisioning,
//! `hb init` and `hb wire-mcp`, then the guest and host checks. The contents of /data are
//! never touched (hb init only creates what is missing).
//!
//! It repairs in place, and says so: every provisioning step runs again inside the box
//! (from the network where something is missing), whether or not the box came from a
//! base. It never rebases: a new machine from a base would need the box's /data moved
//! across (that is `box save` + `box load`, which does start from a base).

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::lifecycle::setup::Setup;
use crate::lifecycle::transcript::Transcript;
use crate::lifecycle::{boxes, readiness};
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::NameArg) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let _lock = boxes::lock(ctx, &record, &format!("box repair {}", record.name))?;
    let smolvm = boxes::smolvm(ctx, &record)?;
    let machine = boxes::machine(&smolvm, &record)?;
    if !machine.state.is_running() {
        ui::say(format!("Starting '{}' ({})", record.name, machine.state));
        crate::lifecycle::containment::start_box(&smolvm, &record, None)?;
    }
    readiness::wait_for_agent(&smolvm, &record.machine)?;
    // Provisioning starts Executor (`hb up`) to wire and check it; a pause the user chose
    // with `hb down` is put back afterwards, whether the repair succeeds or not.
    // A box broken enough to need a repair may have no working hb to ask: then it is said.
    let user_paused = ctx.config.env.install_executor
        && readiness::resume_quiesced(&smolvm, &record.machine).unwrap_or_else(|e| {
            ui::warn(format!(
                "could not tell whether Executor in '{}' was paused ({e:#}); the repair leaves it running",
                record.name
            ));
            false
        });
    ui::say(format!(
        "Repairing '{}' in place: every provisioning step runs again inside the box, /data is \
         kept (repair never rebases onto a base; box save + box load starts from one)",
        record.name
    ));
    let mut transcript = Transcript::create(&ctx.state, record.name.as_str(), "repair")?;
    let mut setup = Setup {
        smolvm: &smolvm,
        state: &ctx.state,
        env: &ctx.config.env,
        machine: &record.machine,
        transcript: &mut transcript,
        cancel: None,
    };
    let result = (|| -> Result<()> {
        setup.install_assets()?;
        setup.provision()?;
        setup.runtime(false)?;
        setup.health(record.web_port)
    })();
    if user_paused {
        match setup.hb_step(&["down"]) {
            Ok(()) => ui::say(format!(
                "Executor in '{}' is paused again, as you left it (resume it inside with: hb up)",
                record.name
            )),
            Err(e) => ui::warn(format!("{e:#}; Executor in '{}' is running", record.name)),
        }
    }
    match result {
        Ok(()) => {
            // A repair that gets this far has built the box completely.
            crate::state::Registry::new(&ctx.state).mark_complete(&record.name)?;
            ui::say(format!("repair completed for '{}'", record.name));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            ui::error(format!("repair of '{}' failed: {e:#}", record.name));
            ui::warn(format!("transcript: {}", transcript.path().display()));
            Ok(ExitCode::FAILURE)
        }
    }
}
