//! A base's key: everything provisioning depends on. Two configurations with the same key
//! provision the same guest, so they may share a base; anything else needs its own.
//!
//! The key holds BASE_IMAGE, the guest architecture (smolvm guests run the host's), a
//! digest of every file of `provision/`, a digest of the `hb` binary copied in (the hb
//! version, and more), the box.env keys provisioning reads (tool versions as configured:
//! `latest` stays `latest`, which is why bases also age, see `store::BaseMeta::age`), a
//! digest of the CA certificates the guest is told to trust, the persisted test guest
//! environment, and a digest of box's own base recipe (the steps and the preparation).
//! Proxies are not part of it: a base never holds proxy settings.

use std::path::Path;

use anyhow::{Context as _, Result};
use box_proto::BoxEnv;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::lifecycle::guest_assets::{self, GuestArch};

/// The box.env keys `provision/provision.sh` reads (its `read_config`), besides the image.
pub const PROVISION_KEYS: [&str; 7] = [
    "INSTALL_HERMES",
    "INSTALL_EXECUTOR",
    "NODE_MAJOR",
    "CLAUDE_CODE_VERSION",
    "CODEX_VERSION",
    "EXECUTOR_VERSION",
    "HERMES_INSTALL_ARGS",
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseKey {
    pub base_image: String,
    pub arch: String,
    pub provision_sha256: String,
    pub hb_sha256: String,
    /// `KEY=VALUE` for each of [`PROVISION_KEYS`], in that order.
    pub config: Vec<String>,
    pub ca_certs_sha256: String,
    pub guest_env: Vec<String>,
    /// [`super::guest_prep::recipe_digest`]: a base prepared by another box version does not match
    /// (metadata written before this field existed reads as "" and matches nothing).
    #[serde(default)]
    pub recipe_sha256: String,
}

impl BaseKey {
    /// The key for `env` with this host's `hb` and `provision/`.
    pub fn current(env: &BoxEnv, guest_env: &[(String, String)]) -> Result<Self> {
        let arch =
            GuestArch::host().context("box has no hb binary for this host's architecture")?;
        let hb = guest_assets::hb_binary(arch)?;
        let provision = guest_assets::provision_dir()?;
        Ok(Self {
            base_image: env.base_image.clone(),
            arch: arch.as_str().to_string(),
            provision_sha256: dir_digest(&provision)?,
            hb_sha256: file_digest(&hb)?,
            config: PROVISION_KEYS
                .iter()
                .map(|k| format!("{k}={}", env.get(k).unwrap_or_default()))
                .collect(),
            ca_certs_sha256: {
                let mut h = Sha256::new();
                for p in &env.guest_ca_certs {
                    let bytes = std::fs::read(p).with_context(|| {
                        format!("cannot read GUEST_CA_CERTS file {}", p.display())
                    })?;
                    h.update((bytes.len() as u64).to_le_bytes());
                    h.update(&bytes);
                }
                hex::encode(h.finalize())
            },
            guest_env: guest_env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            recipe_sha256: super::guest_prep::recipe_digest(),
        })
    }

    /// The key's name: 16 hex digits of the SHA-256 of its canonical JSON.
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&json))[..16].to_string()
    }

    /// A short description for humans (`box base ls`).
    pub fn describe(&self) -> String {
        format!(
            "{} {} {}",
            self.base_image,
            self.arch,
            self.config
                .iter()
                .filter(|c| c.contains("VERSION") || c.starts_with("NODE_MAJOR"))
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        )
    }
}

fn file_digest(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Every file's relative path and content, in sorted order.
fn dir_digest(dir: &Path) -> Result<String> {
    let mut h = Sha256::new();
    for (path, rel) in guest_assets::files_under(dir)? {
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        h.update((rel.len() as u64).to_le_bytes());
        h.update(rel.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> BaseKey {
        BaseKey {
            base_image: "ubuntu:24.04".into(),
            arch: "x86_64".into(),
            provision_sha256: "p".into(),
            hb_sha256: "h".into(),
            config: vec!["CODEX_VERSION=latest".into()],
            ca_certs_sha256: "c".into(),
            guest_env: vec![],
            recipe_sha256: "r".into(),
        }
    }

    #[test]
    fn every_field_changes_the_digest() {
        let base = key().digest();
        assert_eq!(base.len(), 16);
        let mut k = key();
        k.base_image = "debian:13".into();
        assert_ne!(k.digest(), base);
        let mut k = key();
        k.hb_sha256 = "h2".into();
        assert_ne!(k.digest(), base);
        let mut k = key();
        k.config = vec!["CODEX_VERSION=0.171.0".into()];
        assert_ne!(k.digest(), base);
        let mut k = key();
        k.recipe_sha256 = "r2".into();
        assert_ne!(k.digest(), base);
        assert_eq!(key().digest(), base, "stable");
    }
}
