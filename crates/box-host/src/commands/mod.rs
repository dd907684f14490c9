//! One module per verb. Each exposes `run(&Context, args) -> Result<ExitCode>`.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::config::Config;
use crate::state::StateDir;

pub mod completions;
pub mod doctor;
pub mod enter;
pub mod extract;
pub mod load;
pub mod ls;
pub mod man;
pub mod new;
pub mod open;
pub mod repair;
pub mod rm;
pub mod save;
pub mod start;
pub mod stop;

/// What every verb may need: the configuration and the state directory.
#[derive(Debug, Clone)]
pub struct Context {
    pub config: Config,
    pub state: StateDir,
    pub verbose: u8,
    pub quiet: bool,
}

/// The answer of a verb whose issue has not landed yet.
pub fn not_done(verb: &str, issue: u32) -> Result<ExitCode> {
    bail!("'box {verb}' is not implemented yet (tracked in issue {issue})")
}
