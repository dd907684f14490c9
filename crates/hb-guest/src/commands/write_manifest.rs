//! `hb write-manifest`: the runtime manifest (`~/.config/hermes-box/runtime-manifest`),
//! atomic and 0600. Keys beyond ours (written by other versions) are kept.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use box_proto::{BoxEnv, RuntimeManifest};
use nix::unistd::{Gid, Uid};

use super::Context;
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;
use crate::{account, config, tools};

/// The archive format `box save` writes (tar, zstd, in parts with an index).
pub const ARCHIVE_FORMAT: &str = "tar.zst";

pub fn build(paths: &Paths, cfg: &BoxEnv) -> Result<RuntimeManifest> {
    let mut m = match read_optional(&paths.manifest())? {
        Some(text) => RuntimeManifest::parse(&text).with_context(|| {
            format!(
                "{} is damaged; move it away and retry",
                paths.manifest().display()
            )
        })?,
        None => RuntimeManifest::new(),
    };
    m.set(
        "created_at",
        &chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    m.set("base_image", &cfg.base_image);
    for (key, version) in tools::versions() {
        m.set(key, version.as_deref().unwrap_or("missing"));
    }
    if let Ok(v) = std::env::var("HB_BOX_VERSION") {
        m.set("box", &v);
    } else if m.get("box").is_none() {
        m.set("box", "unknown");
    }
    m.set("hb", crate::version::LONG);
    if m.get("archive_format").is_none() {
        m.set("archive_format", ARCHIVE_FORMAT);
    }
    Ok(m)
}

pub fn write(paths: &Paths, cfg: &BoxEnv, owner: Option<(Uid, Gid)>) -> Result<RuntimeManifest> {
    let m = build(paths, cfg)?;
    write_private(&paths.manifest(), m.render().as_bytes(), 0o600, owner)?;
    Ok(m)
}

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let owner = account::Agent::resolve()
        .ok()
        .and_then(|a| a.owner_if_root());
    write(&paths, &cfg, owner)?;
    println!("wrote {}", paths.manifest().display());
    Ok(ExitCode::SUCCESS)
}
