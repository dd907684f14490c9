//! `machine pause` / `machine resume` (the ~1.33 personality; smolvm has them from 1.18).
//!
//! smolvm saves RAM, disks and execution state, stops the VM, and lists it as `paused`;
//! `resume` restores that state under the same name (docs/pause-resume.md at 7f630384).
//! Plain `start` and `stop` refuse a paused machine "rather than discard its saved
//! execution" (`machine has saved execution; use resume` / `... use resume or delete`,
//! smolvm's install traps and `src/cli/vm_common.rs` at 5240fda5); `delete --force`
//! removes it with its saved state.
//!
//! What the simulator cannot do: keep RAM. Its `resume` boots the machine again from its
//! disks, so a workload starts afresh; what a tool driving smolvm must handle (the state,
//! the refusals) is exact. The success lines of pause/resume were not read: they are ours.

use crate::context::Ctx;
use crate::machine::supervisor;
use crate::output::{VerbResult, agent};
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, name: &str, pause: bool) -> VerbResult {
    if pause {
        let _lock = registry::lock()?;
        let mut r = super::require(name)?;
        if r.live_state(&ctx.faults) != State::Running {
            return Err(agent("pause", format!("machine '{name}' is not running")));
        }
        supervisor::kill_machine(&r);
        super::mark_stopped(&mut r)?;
        r.state = State::Paused;
        registry::save(&r)?;
        println!("Paused machine '{name}'");
        return Ok(0);
    }
    {
        let _lock = registry::lock()?;
        let mut r = super::require(name)?;
        if r.state != State::Paused {
            return Err(agent("resume", format!("machine '{name}' is not paused")));
        }
        r.state = State::Stopped;
        registry::save(&r)?;
    }
    super::start::run(
        ctx,
        crate::cli::StartCmd {
            name: Some(name.to_string()),
            forkable: false,
            proxy: None,
            no_proxy: None,
        },
    )
}
