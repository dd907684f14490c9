//! `hb init`: the durable layout under the data root, with owners and modes.
//!
//! Only the managed directories themselves are created, chmod'ed and chown'ed — never
//! recursively, and never through a symlink: the agent controls what is inside its home,
//! and a recursive chown there could be steered (by a planted symlink) onto system files.

use std::process::ExitCode;

use anyhow::Result;
use nix::unistd::{Gid, Uid};

use crate::account::Agent;
use crate::context::Context;
use crate::fsutil::ensure_dir;
use crate::paths::Paths;

/// (path relative to the data root, mode, owned by the agent)
pub const LAYOUT: &[(&str, u32, bool)] = &[
    ("", 0o711, false),
    ("home", 0o711, false),
    ("home/agent", 0o700, true),
    ("home/agent/.config", 0o700, true),
    ("home/agent/.config/hermes-box", 0o700, true),
    ("home/agent/.local", 0o700, true),
    ("home/agent/.local/share", 0o700, true),
    ("home/agent/.local/state", 0o700, true),
    ("home/agent/.cache", 0o700, true),
    ("home/agent/.executor", 0o700, true),
    ("home/agent/.claude", 0o700, true),
    ("home/agent/.codex", 0o700, true),
    ("home/agent/.hermes", 0o700, true),
    ("home/agent/workspace", 0o700, true),
    ("logs", 0o700, true),
];

/// The pause marker older boxes kept in /tmp (lost on restart); `init` makes it durable.
const LEGACY_MARKER: &str = "/tmp/hermes-box-executor-paused";

pub fn create_layout(paths: &Paths, agent: &Agent) -> Result<()> {
    create_layout_paused(paths, agent, None)
}

/// [`create_layout`]; with `paused_by`, the durable pause marker is written as soon as its
/// directory exists, before the rest of the layout: the workload starts Executor once the
/// agent's home exists, and a box about to be restored into must not start it on the
/// empty layout (only to stop it again for the restore).
pub fn create_layout_paused(paths: &Paths, agent: &Agent, paused_by: Option<&str>) -> Result<()> {
    let root = Uid::effective()
        .is_root()
        .then_some((Uid::from_raw(0), Gid::from_raw(0)));
    let agent_owner = agent.owner_if_root().or(root);
    for (rel, mode, agent_owned) in LAYOUT {
        let path = if rel.is_empty() {
            paths.data.clone()
        } else {
            paths.data.join(rel)
        };
        ensure_dir(&path, *mode, if *agent_owned { agent_owner } else { root })?;
        if let Some(op) = paused_by
            && path == paths.hb_config()
        {
            crate::pause::set(paths, agent.owner_if_root(), op)?;
        }
    }
    let legacy = std::env::var("HB_LEGACY_QUIESCE_FILE").unwrap_or_else(|_| LEGACY_MARKER.into());
    if std::path::Path::new(&legacy).exists() {
        crate::pause::set(
            paths,
            agent.owner_if_root(),
            "the seed's quiesce (legacy marker)",
        )?;
        let _ = std::fs::remove_file(&legacy);
        println!(
            "moved the legacy pause marker {legacy} to {}",
            paths.quiesced_marker().display()
        );
    }
    Ok(())
}

pub fn run(ctx: &Context, args: &crate::cli::InitArgs) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let agent = Agent::resolve()?;
    create_layout_paused(&paths, &agent, args.paused.then_some("hb init --paused"))?;
    println!(
        "durable layout ready under {} (home owned by {}, private dirs 0700)",
        paths.data.display(),
        agent.name
    );
    if args.seed_services {
        let cfg = crate::config::load(ctx)?;
        let seeded =
            crate::hermes_services::seed(&paths, &cfg.hermes_services, agent.owner_if_root())?;
        if !seeded.is_empty() {
            let names: Vec<&str> = seeded.iter().map(|s| s.name()).collect();
            println!(
                "Hermes services enabled (HERMES_SERVICES): {}",
                names.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
