//! `hb quiesce`: what `box save`/`load` call before touching /data. Pauses Executor
//! durably, waits until its port is closed, and writes the runtime manifest. What it
//! changed is recorded, so `hb resume` undoes only that.
//!
//! Nothing else stops: the agents (a Hermes chat in `box enter`, a Codex run, the Hermes
//! services the workload runs) go on through a save, and `hb export` archives consistent copies of their live databases
//! ([`crate::archive::live_db`]). (hb before that stopped every Hermes process; a record
//! it wrote still names the gateways `hb resume` starts again.)

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;
use crate::{account, config, pause};

/// What a quiesce changed.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// The pause marker did not exist before: resume removes it.
    pub created_marker: bool,
    /// argv of Hermes gateways an older hb stopped: resume starts them again.
    #[serde(default)]
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

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let agent = account::Agent::resolve().ok();
    let owner = agent.as_ref().and_then(|a| a.owner_if_root());

    // A second quiesce keeps the first record: resume must undo what the first one did.
    let mut record = Record::read(&paths)?.unwrap_or_default();
    let first = !paths.quiesce_record().exists();
    let created = pause::set(&paths, owner, pause::SAVE_PAUSE)?;
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

    pause::wait_stopped(&paths, cfg.executor_port)?;
    println!("executor: port {} closed", cfg.executor_port);

    let host = crate::cli::WriteManifestArgs::default();
    if let Err(e) = super::write_manifest::write(&paths, &cfg, &host, owner) {
        eprintln!("hb: warning: runtime manifest not written: {e:#}");
    }
    println!(
        "quiesced: Executor paused; agents, the Hermes services and their databases go on (exports copy them)"
    );
    Ok(ExitCode::SUCCESS)
}
