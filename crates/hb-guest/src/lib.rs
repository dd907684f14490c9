//! `hb`, the guest helper, as a library: `main.rs` is a thin shell; tests drive the modules.

pub mod archive;
pub mod cli;
pub mod commands;
pub mod version;
