//! `hb write-manifest`: the runtime manifest (`~/.config/hermes-box/runtime-manifest`),
//! atomic and 0600. Keys beyond ours (written by other versions) are kept. It names what
//! made the box: hb itself, and the host's `box` and smolvm versions `box` passes in, and the
//! box's network policy (`--policy`, box-proto's `POLICY_KEYS`), which `box load` reads back.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use box_proto::{BoxEnv, RuntimeManifest};
use nix::unistd::{Gid, Uid};

use crate::cli::WriteManifestArgs;
use crate::context::Context;
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;
use crate::{account, config, tools};

/// The archive format `box save` writes (tar, zstd, in parts with an index).
pub const ARCHIVE_FORMAT: &str = "tar.zst";

/// The manifest's keys for the host's versions, which only `box` knows.
const BOX_KEY: &str = "box";
const SMOLVM_KEY: &str = "smolvm";

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
    // The host's versions stay as the last `box` wrote them (quiesce and provisioning
    // rewrite the manifest without them); a manifest no `box` has written says so.
    if m.get(BOX_KEY).is_none() {
        m.set(BOX_KEY, "unknown");
    }
    m.set("hb", crate::version::LONG);
    if m.get(SMOLVM_KEY).is_none() {
        m.set(SMOLVM_KEY, "unknown");
    }
    if m.get("archive_format").is_none() {
        m.set("archive_format", ARCHIVE_FORMAT);
    }
    Ok(m)
}

pub fn write(
    paths: &Paths,
    cfg: &BoxEnv,
    host: &WriteManifestArgs,
    owner: Option<(Uid, Gid)>,
) -> Result<RuntimeManifest> {
    let mut m = build(paths, cfg)?;
    if let Some(v) = &host.box_version {
        m.set(BOX_KEY, v);
    }
    if let Some(v) = &host.smolvm_version {
        m.set(SMOLVM_KEY, v);
    }
    for entry in &host.policy {
        let (key, value) = policy_entry(entry)?;
        m.set(key, value);
    }
    write_private(&paths.manifest(), m.render().as_bytes(), 0o600, owner)?;
    Ok(m)
}

/// One `--policy KEY=VALUE`: a policy key of the manifest's, a value without control
/// characters (the manifest would refuse the line on its next read).
fn policy_entry(entry: &str) -> Result<(&str, &str)> {
    let (key, value) = entry
        .split_once('=')
        .with_context(|| format!("--policy {entry:?}: expected KEY=VALUE"))?;
    if !box_proto::manifest::POLICY_KEYS.contains(&key) {
        anyhow::bail!(
            "--policy: '{key}' is not a policy key ({})",
            box_proto::manifest::POLICY_KEYS.join(", ")
        );
    }
    if value.chars().any(char::is_control) {
        anyhow::bail!("--policy {key}: the value has a control character");
    }
    Ok((key, value))
}

pub fn run(ctx: &Context, host: &WriteManifestArgs) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let owner = account::Agent::resolve()
        .ok()
        .and_then(|a| a.owner_if_root());
    write(&paths, &cfg, host, owner)?;
    println!("wrote {}", paths.manifest().display());
    Ok(ExitCode::SUCCESS)
}
