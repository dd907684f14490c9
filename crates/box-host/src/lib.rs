//! The `box` host CLI as a library: the binary in `main.rs` is a thin shell around it, and
//! the end-to-end tests drive the same modules.

pub mod backup;
pub mod base;
pub mod child_env;
pub mod cli;
pub mod commands;
pub mod config;
pub mod context;
pub mod doctor;
pub mod gateway;
pub mod lifecycle;
pub mod policy;
pub mod process;
pub mod remote;
pub mod smolvm;
pub mod state;
pub mod transfer;
pub mod ui;
pub mod version;
