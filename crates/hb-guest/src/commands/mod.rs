//! One module per verb.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};

pub mod doctor;
pub mod down;
pub mod export;
pub mod import;
pub mod init;
pub mod logs;
pub mod quiesce;
pub mod resume;
pub mod status;
pub mod token;
pub mod up;
pub mod versions;
pub mod wire_mcp;
pub mod workload;
pub mod write_manifest;

/// What every verb may need.
#[derive(Debug, Clone)]
pub struct Context {
    /// The durable data root (`/data`).
    pub data: PathBuf,
    /// The configuration file (`/etc/hermes-box.env`).
    pub config: PathBuf,
}

/// The answer of a verb whose issue has not landed yet.
pub fn not_done(verb: &str, issue: u32) -> Result<ExitCode> {
    bail!("'hb {verb}' is not implemented yet (tracked in issue {issue})")
}
