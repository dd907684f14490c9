//! `box enter <name>`: start the box if it is stopped, then attach the persistent tmux
//! session `main` as `agent`. No lock, as in the seed (docs/design.md, "Locks"): a long
//! interactive session must not block saves. The guest's exit code is passed through.

use anyhow::Result;
use std::process::ExitCode;

use super::Context;
use crate::lifecycle::{boxes, readiness};
use crate::ui;

/// The login shell of `agent` runs tmux; `-l` gives it the login environment
/// (/etc/profile.d/hermes-box.sh) that provisioning installs.
const ATTACH: &str = "tmux -f /opt/hermes-box/tmux.conf new-session -A -s main";

pub fn run(ctx: &Context, args: &crate::cli::NameArg) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let smolvm = boxes::smolvm(ctx, &record)?;
    let machine = boxes::machine(&smolvm, &record)?;
    if !machine.state.is_running() {
        ui::say(format!("Starting '{}'", record.name));
        crate::lifecycle::containment::start_box(&smolvm, &record, None)?;
        readiness::wait_for_agent(&smolvm, &record.machine)?;
        // `box stop` quiesced Executor; entering undoes that, as `box start` does, and
        // only that: a pause the user chose with `hb down` survives (`hb resume`, never
        // `hb up`). A failure is reported but does not keep the user out.
        match readiness::wait_until_ready(&smolvm, &record, ctx.config.env.install_executor) {
            Ok(readiness::Readiness::Ready) => {}
            Ok(readiness::Readiness::ExecutorPaused) => ui::say(format!(
                "Executor in '{}' stays paused as you left it (resume it inside with: hb up)",
                record.name
            )),
            Err(e) => ui::warn(format!(
                "{e:#}; Executor may be down (see box doctor {})",
                record.name
            )),
        }
    }
    let code = smolvm.exec_interactive(
        &record.machine,
        &[("TERM".into(), super::exec::terminal_type())],
        &["runuser", "-l", "agent", "-c", ATTACH],
    )?;
    Ok(super::exec::exit_code(code))
}
