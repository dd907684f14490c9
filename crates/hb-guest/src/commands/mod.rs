//! One module per verb.

pub mod doctor;
pub mod down;
pub mod export;
pub mod import;
pub mod init;
pub mod logs;
pub mod quiesce;
pub mod resume;
pub mod service;
pub mod status;
pub mod token;
pub mod up;
pub mod versions;
pub mod wire_mcp;
pub mod workload;
pub mod write_manifest;
