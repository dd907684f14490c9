//! One module per smolvm verb, and what several of them share: finding a machine, the
//! refusals of a paused one, marking one stopped, `--env` lists.

pub mod cp;
pub mod create;
mod create_checks;
mod create_egress;
pub mod create_from;
pub mod data_dir;
pub mod delete;
pub mod egress_events;
pub mod exec;
pub mod ls;
pub mod pack;
pub mod pause;
pub mod start;
pub mod status;
pub mod stop;
pub mod update;
mod update_egress;

use crate::output::{SimError, agent, not_found, not_running};
use crate::registry::{self, Record, State};

/// Load a record or fail with `vm not found: NAME`.
pub fn require(name: &str) -> Result<Record, SimError> {
    registry::load(name)?.ok_or_else(|| not_found(name))
}

/// For exec/cp: the machine must exist and be running (never auto-started).
pub fn require_running(ctx: &crate::context::Ctx, name: &str) -> Result<Record, SimError> {
    let r = require(name)?;
    if r.live_state(&ctx.faults) != State::Running {
        return Err(not_running(name));
    }
    Ok(r)
}

/// The refusal of plain `start` (`verb` = "start") or `stop` of a paused machine.
pub fn refuse_paused(verb: &str) -> SimError {
    let what = if verb == "stop" {
        "machine has saved execution; use resume or delete"
    } else {
        "machine has saved execution; use resume"
    };
    agent(verb, what)
}

/// The record of a machine whose processes are gone: stopped, with no pids (stop, pause,
/// delete).
pub fn mark_stopped(r: &mut Record) -> Result<(), SimError> {
    r.state = State::Stopped;
    r.pid = None;
    r.pid_start_time = None;
    r.init_pid = None;
    r.slirp_pid = None;
    r.workload_pid = None;
    r.workload_start_time = None;
    registry::save(r)
}

/// smolvm's `parse_env_list` (`src/util.rs`, 1.0.4 and 1.9): `KEY=VALUE` as given; a bare
/// `KEY` forwards this process's value of KEY (Docker's `-e KEY`), or nothing when it is
/// unset; an empty key is skipped.
pub fn parse_env(list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .filter_map(|s| match s.split_once('=') {
            Some(("", _)) => None,
            Some((k, v)) => Some((k.to_string(), v.to_string())),
            None if s.is_empty() => None,
            None => std::env::var(s).ok().map(|v| (s.clone(), v)),
        })
        .collect()
}
