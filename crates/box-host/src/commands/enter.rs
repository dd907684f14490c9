//! `box enter <name>`: start the box if it is stopped, then attach the persistent tmux
//! session `main` as `agent`. No lock, as in the seed (docs/design.md, "Locks"): a long
//! interactive session must not block saves. The guest's exit code is passed through.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use super::Context;
use crate::lifecycle::{boxes, guest, readiness};
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
        // `box stop` paused Executor durably (hb down); entering brings it back, as
        // `box start` does. A failure is reported but does not keep the user out.
        if ctx.config.env.install_executor {
            match guest::hb(&smolvm, &record.machine, &["up"], Duration::from_secs(180)) {
                Ok(out) if out.success() => {}
                Ok(out) => ui::warn(format!(
                    "hb up in '{}' failed ({}){}; Executor may be down (see box doctor {})",
                    record.name,
                    guest::status(&out),
                    guest::last_lines(&out.stderr, &out.stdout),
                    record.name
                )),
                Err(e) => ui::warn(format!("{e:#}")),
            }
        }
    }
    let code = smolvm.exec_interactive(
        &record.machine,
        &[("TERM".into(), super::exec::terminal_type())],
        &["runuser", "-l", "agent", "-c", ATTACH],
    )?;
    Ok(super::exec::exit_code(code))
}
