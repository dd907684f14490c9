//! One module per verb. Each exposes `run(&Context, args) -> Result<ExitCode>`.

use crate::config::Config;
use crate::state::StateDir;

pub mod backups;
pub mod base;
pub mod clone;
pub mod completions;
pub mod doctor;
pub mod egress;
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
    /// Where new boxes go (`--host`, `BOX_HOST`); `None`: this machine.
    pub host: Option<crate::remote::RemoteHost>,
}

impl Context {
    /// smolvm on the selected host ([`Context::host`]): where new boxes and bases go. A
    /// box that exists already is reached through `lifecycle::boxes::smolvm`.
    pub fn selected_smolvm(&self) -> crate::smolvm::Smolvm {
        crate::smolvm::Smolvm::for_host(self.host.as_ref(), &self.config.env)
    }
}
