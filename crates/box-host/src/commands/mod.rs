//! One module per verb. Each exposes `run(&Context, args) -> Result<ExitCode>`.

/// Defined below the layers that use it (lifecycle, base, gateway); every verb's
/// `use super::Context` finds it here.
pub use crate::context::Context;

pub mod backups;
pub mod backups_check;
pub mod backups_copy;
pub mod base;
pub mod clone;
pub mod completions;
pub mod doctor;
pub mod drill;
pub mod egress;
pub mod enter;
pub mod exec;
pub mod extract;
pub mod load;
pub mod logs;
pub mod ls;
pub mod man;
pub mod new;
pub mod open;
pub mod passphrase;
pub mod repair;
pub mod rm;
pub mod save;
pub mod start;
pub mod stop;
