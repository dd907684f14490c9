//! `hb`: the hermes-box-lite guest helper.

use std::process::ExitCode;

use clap::Parser;
use hb_guest::cli::{Cli, Command, JsonArg};
use hb_guest::commands;
use hb_guest::context::Context;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Some(Command::Workload)) {
        // `hb status | head -1` should end quietly, not panic on a closed pipe. The
        // workload keeps SIGPIPE ignored: a web client hanging up must not kill PID 1.
        // SAFETY: setting a signal disposition to SIG_DFL before any thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let ctx = Context {
        data: cli.data.clone(),
        config: cli.config.clone(),
    };
    let result = match &cli.command {
        None => commands::status::run(&ctx, &JsonArg { json: false }),
        Some(Command::Status(a)) => commands::status::run(&ctx, a),
        Some(Command::Doctor(a)) => commands::doctor::run(&ctx, a),
        Some(Command::Versions) => commands::versions::run(&ctx),
        Some(Command::Down) => commands::down::run(&ctx),
        Some(Command::Up) => commands::up::run(&ctx),
        Some(Command::WireMcp) => commands::wire_mcp::run(&ctx),
        Some(Command::Logs(a)) => commands::logs::run(&ctx, a),
        Some(Command::Service(a)) => commands::service::run(&ctx, a),
        Some(Command::Quiesce) => commands::quiesce::run(&ctx),
        Some(Command::Resume) => commands::resume::run(&ctx),
        Some(Command::Init(a)) => commands::init::run(&ctx, a),
        Some(Command::WriteManifest(a)) => commands::write_manifest::run(&ctx, a),
        Some(Command::Export(a)) => commands::export::run(&ctx, a),
        Some(Command::Import(a)) => commands::import::run(&ctx, a),
        Some(Command::CommitSnapshot(a)) => commands::export::commit(&ctx, a),
        Some(Command::Workload) => commands::workload::run(&ctx),
        Some(Command::Token) => commands::token::run(&ctx),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hb: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
