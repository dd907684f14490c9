//! `hb quiesce`: what `box save`/`load` call before touching /data. Pauses Executor
//! durably and stops Hermes writers, waits until Executor's port is closed, checkpoints
//! the SQLite databases so each `.db` alone holds every committed row, and writes the
//! runtime manifest. What it changed is recorded, so `hb resume` undoes only that.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::Context;
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;
use crate::{account, config, pause, procs, sqlite};
use box_proto::manifest::{SQLITE_CHECK_KEY, SQLITE_DAMAGED_LINE};

/// What a quiesce changed.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// The pause marker did not exist before: resume removes it.
    pub created_marker: bool,
    /// argv of Hermes gateways that were running: resume starts them again.
    pub stopped_gateways: Vec<Vec<String>>,
}

impl Record {
    pub fn read(paths: &Paths) -> Result<Option<Record>> {
        match read_optional(&paths.quiesce_record())? {
            None => Ok(None),
            Some(t) => serde_json::from_str(&t).map(Some).with_context(|| {
                format!(
                    "{} is not a quiesce record",
                    paths.quiesce_record().display()
                )
            }),
        }
    }
}

/// Stops every Hermes process of the agent (SIGTERM, then SIGKILL after 10 s); returns
/// the gateways' argv.
fn stop_hermes(agent_uid: Option<u32>) -> Result<Vec<Vec<String>>> {
    let me = std::process::id();
    let victims: Vec<procs::Proc> = procs::all()
        .into_iter()
        .filter(|p| p.pid != me && procs::is_hermes(p))
        .filter(|p| agent_uid.is_none() || p.uid == agent_uid)
        .collect();
    let gateways = victims
        .iter()
        .filter(|p| procs::is_hermes_gateway(p))
        .map(|p| p.argv.clone())
        .collect();
    for p in &victims {
        println!("hermes: stopping pid {} ({})", p.pid, p.argv.join(" "));
        let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGTERM);
    }
    let start = Instant::now();
    let alive = |p: &procs::Proc| crate::workload::state::pid_alive(p.pid);
    while victims.iter().any(alive) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in victims.iter().filter(|p| alive(p)) {
        let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(100));
    if let Some(p) = victims.iter().find(|p| alive(p)) {
        bail!("Hermes process {} did not stop; stop it and retry", p.pid);
    }
    Ok(gateways)
}

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let agent = account::Agent::resolve().ok();
    let owner = agent.as_ref().and_then(|a| a.owner_if_root());

    // A second quiesce keeps the first record: resume must undo what the first one did.
    let mut record = Record::read(&paths)?.unwrap_or_default();
    let first = !paths.quiesce_record().exists();
    let created = pause::set(&paths, owner, "hb quiesce")?;
    if first {
        record.created_marker = created;
    }
    let save = |r: &Record| -> Result<()> {
        write_private(
            &paths.quiesce_record(),
            serde_json::to_string_pretty(r)?.as_bytes(),
            0o600,
            owner,
        )
    };
    save(&record)?;
    println!("executor: paused (durable)");

    let gateways = stop_hermes(agent.as_ref().map(|a| a.uid.as_raw()))?;
    for g in gateways {
        if !record.stopped_gateways.contains(&g) {
            record.stopped_gateways.push(g);
        }
    }
    save(&record)?;

    pause::wait_stopped(cfg.executor_port)?;
    println!("executor: port {} closed", cfg.executor_port);

    let damaged = check_databases(&paths)?;
    let verdict = if damaged.is_empty() {
        "ok".to_string()
    } else {
        format!("damaged {}", damaged.join(" "))
    };
    let written = super::write_manifest::build(&paths, &cfg).and_then(|mut m| {
        m.set(SQLITE_CHECK_KEY, &verdict);
        write_private(&paths.manifest(), m.render().as_bytes(), 0o600, owner)
    });
    if let Err(e) = written {
        eprintln!("hb: warning: runtime manifest not written: {e:#}");
    }
    println!("quiesced: Executor and Hermes writers stopped, databases checkpointed");
    Ok(ExitCode::SUCCESS)
}

/// Checkpoints the databases whose writers were stopped, then checks every database the
/// box's software keeps. A damaged one is a warning (the save goes on: a backup of a
/// damaged box beats none); a checkpoint a writer still blocks is an error. Returns the
/// damaged ones, relative to the data root.
fn check_databases(paths: &Paths) -> Result<Vec<String>> {
    let mut damaged = Vec::new();
    let shown = |db: &std::path::Path| {
        db.strip_prefix(&paths.data)
            .unwrap_or(db)
            .display()
            .to_string()
    };
    let quiesced = sqlite::quiesced_databases(paths);
    for db in sqlite::databases(paths) {
        if quiesced.contains(&db) {
            match sqlite::checkpoint(&db) {
                Ok(c) => println!(
                    "sqlite: {} checkpointed ({} WAL frames)",
                    c.path.display(),
                    c.wal_frames
                ),
                Err(e) if sqlite::is_damage(&e) => {}
                Err(e) => return Err(e),
            }
        }
        match sqlite::integrity_check(&db) {
            Ok(()) => println!("sqlite: {} integrity_check ok", db.display()),
            Err(why) => {
                println!("{SQLITE_DAMAGED_LINE}{}: {why}", shown(&db));
                eprintln!(
                    "hb: warning: {} failed SQLite's integrity check ({why}); it is saved as it is",
                    db.display()
                );
                damaged.push(shown(&db));
            }
        }
    }
    Ok(damaged)
}
