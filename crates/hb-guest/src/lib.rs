//! `hb`, the guest helper, as a library: `main.rs` is a thin shell; tests drive the modules.

pub mod account;
pub mod archive;
pub mod cli;
pub mod commands;
pub mod config;
pub mod context;
pub mod executor;
pub mod fsutil;
pub mod hermes_services;
pub mod netenv;
pub mod paths;
pub mod pause;
pub mod sqlite;
pub mod token;
pub mod tools;
pub mod version;
pub mod wiring;
pub mod workload;
pub mod workload_state;
