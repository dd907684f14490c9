//! One module per smolvm verb.

pub mod cp;
pub mod create;
pub mod data_dir;
pub mod delete;
pub mod exec;
pub mod ls;
pub mod start;
pub mod status;
pub mod stop;
pub mod update;

use crate::output::{SimError, not_found, not_running};
use crate::registry::{self, Record, State};

/// Load a record or fail with `vm not found: NAME`.
pub fn require(name: &str) -> Result<Record, SimError> {
    registry::load(name)?.ok_or_else(|| not_found(name))
}

/// For exec/cp: the machine must exist and be running (never auto-started).
pub fn require_running(ctx: &crate::Ctx, name: &str) -> Result<Record, SimError> {
    let r = require(name)?;
    if r.live_state(&ctx.faults) != State::Running {
        return Err(not_running(name));
    }
    Ok(r)
}

/// `KEY=VALUE` pairs; entries without `=` are ignored, as smolvm's parse_env_list does.
pub fn parse_env(list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .filter_map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}
