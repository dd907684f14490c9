//! One module per verb.

use std::path::PathBuf;

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
