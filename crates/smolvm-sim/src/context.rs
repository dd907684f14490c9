//! What every verb gets besides its own arguments (the personality it plays, the faults
//! SMOLVM_SIM_FAIL injects, the flags only the newer personality has), and the errors an
//! injected failure turns into. `main` builds it; the verbs stand on it.

use crate::cli::ShExtras;
use crate::faults::{self, Action, Faults};
use crate::output::{self, SimError};
use crate::personality::Personality;
use crate::registry;

/// What every verb gets besides its own arguments.
pub struct Ctx {
    pub personality: Personality,
    pub faults: Faults,
    pub extras: ShExtras,
}

impl Ctx {
    /// Consult SMOLVM_SIM_FAIL at the point where `verb` would act on the machine.
    /// `Fail` becomes the verb's error; `Hang` blocks; `Slow` sleeps; the rest are returned
    /// for the verb to honour.
    pub fn fault_point(&self, verb: &str, name: &str) -> Result<Option<Action>, SimError> {
        match self.faults.check(verb) {
            Some(Action::Fail) => Err(fault_error(verb, name)),
            Some(Action::Hang) => faults::hang(),
            Some(Action::Slow) => {
                faults::slow();
                Ok(None)
            }
            other => Ok(other),
        }
    }
}

/// Realistic smolvm errors for injected failures.
pub fn fault_error(verb: &str, name: &str) -> SimError {
    use output::{agent, config, storage};
    match verb {
        "create" => config(
            "create machine",
            "failed to commit machine record: database is locked",
        ),
        "start" => agent(
            "start",
            format!("agent for '{name}' did not become ready within 30s"),
        ),
        "stop" => agent(
            "stop",
            "failed to stop VM process: Operation not permitted (os error 1)",
        ),
        "delete" => storage(
            "delete machine data",
            format!(
                "{}: Device or resource busy (os error 16)",
                registry::data_dir(name).display()
            ),
        ),
        "exec" => agent("exec", "agent connection closed unexpectedly"),
        "pack" => agent("pack binary", "No space left on device (os error 28)"),
        "cp" => agent("transfer file", "agent connection closed unexpectedly"),
        "update" => config("update", "database is locked"),
        _ => config("load database", "database is locked"),
    }
}
