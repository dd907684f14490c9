//! What every verb, and the layers under the verbs (the configuration, the workload), may
//! need: where the durable data and the configuration file are.

use std::path::PathBuf;

/// What every verb may need.
#[derive(Debug, Clone)]
pub struct Context {
    /// The durable data root (`/data`).
    pub data: PathBuf,
    /// The configuration file (`/etc/hermes-box.env`).
    pub config: PathBuf,
}
