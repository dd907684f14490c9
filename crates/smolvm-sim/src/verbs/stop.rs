//! `machine stop`: end the supervisor and with it every process, mount and namespace of the
//! machine; idempotent when not running.

use crate::cli::StopCmd;
use crate::context::Ctx;
use crate::faults::Action;
use crate::machine::supervisor;
use crate::output::{self, VerbResult};
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, c: StopCmd) -> VerbResult {
    let name = c.name.clone().unwrap_or_else(|| "default".to_string());
    let _lock = registry::lock()?;
    let mut r = super::require(&name)?;
    match r.live_state(&ctx.faults) {
        State::Running => {}
        State::Unreachable => {
            ctx.fault_point("stop", &name)?;
            supervisor::kill_machine(&r);
            super::mark_stopped(&mut r)?;
            println!("{}", output::stopped(&name));
            return Ok(0);
        }
        State::Paused => return Err(super::refuse_paused("stop")),
        other => {
            println!("{}", output::not_running_state(&name, other.as_str()));
            return Ok(0);
        }
    }
    let fault = ctx.fault_point("stop", &name)?;
    println!("{}", output::stopping(&name));
    supervisor::kill_machine(&r);
    super::mark_stopped(&mut r)?;
    if fault == Some(Action::After) {
        return Err(crate::context::fault_error("stop", &name));
    }
    println!("{}", output::stopped(&name));
    Ok(0)
}
