//! `hb resume`: undo what `hb quiesce` did — and only that. A pause that was already in
//! place before the quiesce (`hb down`) stays.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context as _, Result};

use super::quiesce::Record;
use crate::context::Context;
use crate::paths::Paths;
use crate::{config, pause};

fn start_gateway(paths: &Paths, argv: &[String]) -> Result<()> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(paths.log("hermes-gateway"))?;
    let (bin, args) = argv.split_first().context("empty gateway command")?;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {}", argv.join(" ")))?;
    Ok(())
}

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let Some(record) = Record::read(&paths)? else {
        println!(
            "nothing to resume: no quiesce record (Executor {})",
            if pause::is_paused(&paths) {
                "stays paused; `hb up` resumes it"
            } else {
                "was not paused by quiesce"
            }
        );
        return Ok(ExitCode::SUCCESS);
    };
    let mut failed = false;
    if record.created_marker {
        pause::clear(&paths)?;
        println!("executor: pause cleared");
    } else {
        println!("executor: was paused before quiesce; stays paused (`hb up` resumes it)");
    }
    for g in &record.stopped_gateways {
        match start_gateway(&paths, g) {
            Ok(()) => println!("hermes: started {}", g.join(" ")),
            Err(e) => {
                eprintln!("hb: hermes gateway not restarted: {e:#}");
                failed = true;
            }
        }
    }
    std::fs::remove_file(paths.quiesce_record())
        .with_context(|| format!("cannot remove {}", paths.quiesce_record().display()))?;
    if record.created_marker && cfg.install_executor {
        let h = super::up::wait_healthy(&paths, cfg.executor_port, super::up::READY_WAIT)?;
        println!("executor: ready (MCP {} handshake ok)", h.protocol_version);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
