//! What the host (`box`) and the guest (`hb`) must agree on byte for byte.
//!
//! This crate never spawns a process and never touches a VM: it holds formats and rules
//! only, so both binaries (and their tests and fuzz targets) share one definition.

pub mod archive;
pub mod box_env;
pub mod escape;
#[doc(hidden)]
pub mod fuzzing;
pub mod guest_output;
pub mod hermes_service;
pub mod layout;
pub mod manifest;
pub mod mcp;
pub mod name;
pub mod proxy;

pub use box_env::{BoxEnv, ConfigError};
pub use hermes_service::HermesService;
pub use manifest::{ManifestError, RuntimeManifest};
pub use name::{BoxName, NameError};
