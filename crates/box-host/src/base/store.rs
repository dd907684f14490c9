//! The bases on disk: `<state dir>/bases/<digest>.smolmachine` (smolvm's pack) and
//! `<digest>.json` (its [`BaseMeta`]). A build writes under a dot-name and renames the pack
//! into place, then the metadata: a base without metadata is not a base yet, so one being
//! built is never used.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::key::BaseKey;
use crate::state::StateDir;

/// What `box base ls` shows and `box new` checks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaseMeta {
    pub digest: String,
    pub key: BaseKey,
    /// Unix seconds when the base was packed.
    pub built_at: u64,
    pub size_bytes: u64,
    /// `tool=version` as the base's own tools report them.
    pub tools: Vec<String>,
    pub smolvm_version: String,
    /// How long the build took, seconds.
    pub build_secs: u64,
    /// The build left smolvm's shared pack store holding this base's extraction (smolvm
    /// 1.3+ on Linux), so the first box from it does not pay the extraction.
    #[serde(default)]
    pub warm: bool,
}

impl BaseMeta {
    pub fn age(&self) -> Duration {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Duration::from_secs(now.saturating_sub(self.built_at))
    }

    pub fn is_stale(&self, max_age_days: u32) -> bool {
        self.age() > Duration::from_secs(u64::from(max_age_days) * 86_400)
    }
}

/// "3d 4h", "2h 5m", "40s".
pub fn human_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
        s if s >= 3600 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s if s >= 60 => format!("{}m {}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(state: &StateDir) -> Self {
        Self {
            dir: state.root().join("bases"),
        }
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn ensure(&self) -> Result<()> {
        StateDir::ensure_private_dir(&self.dir)
    }

    pub fn pack_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.smolmachine"))
    }

    fn meta_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.json"))
    }

    /// Where a build writes its pack before it is a base: `OUT` and `OUT.smolmachine`.
    pub fn staging_out(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!(".build-{digest}-{}", std::process::id()))
    }

    /// Every complete base (metadata and pack present), newest first. Unreadable metadata
    /// is skipped with a warning: it never becomes a base.
    pub fn list(&self) -> Result<Vec<BaseMeta>> {
        let mut out = Vec::new();
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => {
                return Err(e).with_context(|| format!("cannot list {}", self.dir.display()));
            }
        };
        for entry in rd.flatten() {
            let name = entry.file_name();
            let Some(digest) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if digest.starts_with('.') {
                continue;
            }
            match self.read_meta(digest) {
                Ok(m) if self.pack_path(digest).is_file() => out.push(m),
                Ok(_) => {}
                Err(e) => crate::ui::warn(format!("ignoring base {digest}: {e:#}")),
            }
        }
        out.sort_by_key(|m| std::cmp::Reverse(m.built_at));
        Ok(out)
    }

    fn read_meta(&self, digest: &str) -> Result<BaseMeta> {
        let p = self.meta_path(digest);
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        let meta: BaseMeta = serde_json::from_str(&text)
            .with_context(|| format!("{} is not base metadata", p.display()))?;
        anyhow::ensure!(
            meta.digest == digest && meta.key.digest() == digest,
            "{} does not match its name",
            p.display()
        );
        Ok(meta)
    }

    /// The complete base for `key`, if there is one.
    pub fn find(&self, key: &BaseKey) -> Result<Option<BaseMeta>> {
        let digest = key.digest();
        Ok(self.list()?.into_iter().find(|m| m.digest == digest))
    }

    /// Publishes a built pack: rename it into place (replacing an older build of the same
    /// key), then write the metadata atomically.
    /// Moves a built pack to its place; it becomes a base only with [`Self::install`].
    pub fn place_pack(&self, built: &std::path::Path, digest: &str) -> Result<PathBuf> {
        let pack = self.pack_path(digest);
        std::fs::rename(built, &pack)
            .with_context(|| format!("cannot move {} to {}", built.display(), pack.display()))?;
        Ok(pack)
    }

    /// Makes a placed pack a base by writing its metadata.
    pub fn install(&self, meta: &BaseMeta) -> Result<()> {
        let body = serde_json::to_vec_pretty(meta)?;
        let final_path = self.meta_path(&meta.digest);
        let tmp = self
            .dir
            .join(format!(".{}.json.{}", meta.digest, std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(&body)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &final_path)
            .with_context(|| format!("cannot write {}", final_path.display()))?;
        Ok(())
    }

    /// Removes a base (metadata first, so it stops being a base before its pack goes).
    pub fn remove(&self, digest: &str) -> Result<bool> {
        let meta = self.meta_path(digest);
        let existed = meta.exists();
        for p in [meta, self.pack_path(digest)] {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("cannot remove {}", p.display())),
            }
        }
        Ok(existed)
    }
}

/// A pack's size for people: `812 MiB`, `1.4 GiB`.
pub fn size(bytes: u64) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_a_person_would_say_them() {
        assert_eq!(human_age(Duration::from_secs(40)), "40s");
        assert_eq!(
            human_age(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d 4h"
        );
        assert_eq!(human_age(Duration::from_secs(7500)), "2h 5m");
    }
}
