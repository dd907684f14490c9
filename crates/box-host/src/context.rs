//! What every verb, and the layers under the verbs (lifecycle, base, gateway), may need:
//! the configuration, the state directory, how talkative to be, and where new boxes go.

use crate::config::Config;
use crate::state::StateDir;

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
