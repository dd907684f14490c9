//! The bases on disk: `<state dir>/bases/<digest>.smolmachine` (smolvm's pack) and
//! `<digest>.json` (its [`BaseMeta`]). A build writes under a dot-name and renames the pack
//! into place, then the metadata: a base without metadata is not a base yet, so one being
//! built is never used.
//!
//! A pack lives where the smolvm that made it and reads it runs: for a remote host, the
//! store is `${XDG_DATA_HOME:-~/.local/share}/hermes-box/bases` of the remote account,
//! handled with the same layout and the same order of steps through quoted remote shell
//! commands ([`Store::for_smolvm`]).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::key::BaseKey;
use crate::remote::ssh::Session;
use crate::smolvm::Smolvm;
use crate::smolvm::timeouts;
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
    /// The remote host the store is on; `None`: this machine.
    remote: Option<Arc<Session>>,
}

/// The remote store's directory, as the remote account's shell spells it.
const REMOTE_DIR: &str = r#"printf '%s' "${XDG_DATA_HOME:-$HOME/.local/share}/hermes-box/bases""#;

/// Prints every complete base as `\x1e<digest>\n<json>` (metadata and pack present,
/// dot-names skipped, as [`Store::list`] does here).
const REMOTE_LIST: &str = concat!(
    r#"cd "$1" 2>/dev/null || exit 0; "#,
    r#"for f in *.json; do [ -f "$f" ] || continue; d=${f%.json}; "#,
    r#"[ -f "$d.smolmachine" ] || continue; printf '\036%s\n' "$d"; cat "$f"; printf '\n'; done"#
);

/// How a build's staging files begin (a dot: [`Store::list`] skips them).
const STAGING_PREFIX: &str = ".build-";

/// This process's part of its staging names: pid and a random word.
fn staging_token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        use rand::Rng;
        format!("{}-{:08x}", std::process::id(), rand::rng().random::<u32>())
    })
}

impl Store {
    pub fn new(state: &StateDir) -> Self {
        Self {
            dir: state.root().join("bases"),
            remote: None,
        }
    }

    /// The store on the host `smolvm` runs on: [`Self::new`] for this machine, the remote
    /// account's store for a remote host (asked there once).
    pub fn for_smolvm(state: &StateDir, smolvm: &Smolvm) -> Result<Self> {
        let Some(session) = smolvm.session() else {
            return Ok(Self::new(state));
        };
        let out = session.shell(REMOTE_DIR, &[], timeouts::QUERY)?;
        let dir = out.stdout.trim_end_matches('\n');
        anyhow::ensure!(
            out.success() && dir.starts_with('/'),
            "cannot find the base store's directory on {}: {}",
            session.target().host(),
            out.stderr.trim()
        );
        Ok(Self {
            dir: PathBuf::from(dir),
            remote: Some(Arc::clone(session)),
        })
    }

    /// Runs a shell script where the store is; its failure is an error with its stderr.
    fn remote_sh(
        &self,
        session: &Session,
        what: &str,
        script: &str,
        args: &[String],
    ) -> Result<String> {
        let out = session.shell(script, args, timeouts::QUERY)?;
        anyhow::ensure!(
            out.success(),
            "{what} on {} failed: {}",
            session.target().host(),
            out.stderr.trim()
        );
        Ok(out.stdout)
    }

    fn arg(p: &std::path::Path) -> String {
        p.to_string_lossy().into_owned()
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub fn ensure(&self) -> Result<()> {
        match &self.remote {
            None => StateDir::ensure_private_dir(&self.dir),
            Some(s) => self
                .remote_sh(
                    s,
                    "creating the base store",
                    r#"umask 077; mkdir -p "$1""#,
                    &[Self::arg(&self.dir)],
                )
                .map(drop),
        }
    }

    pub fn pack_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.smolmachine"))
    }

    fn meta_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.json"))
    }

    /// Where a build writes its pack before it is a base: `OUT` and `OUT.smolmachine`.
    /// The name is this process's own: two laptops sharing one remote account may build at
    /// once, and their pids may be equal.
    pub fn staging_out(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!("{STAGING_PREFIX}{digest}-{}", staging_token()))
    }

    /// Removes the staging packs of builds killed before their cleanup (a SIGKILL mid-pack
    /// leaves one, and the next build's name is another) from a store on this machine: every
    /// staging file but this process's. Only under the base lock, where no other build on
    /// this machine runs. A remote store may be shared by other machines' builds, whose
    /// files look the same: left alone.
    pub fn sweep_killed_builds(&self) {
        if self.remote.is_some() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let own = format!("-{}", staging_token());
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = name.trim_end_matches(".smolmachine").ends_with(&own);
            if name.starts_with(STAGING_PREFIX) && !ours && e.file_type().is_ok_and(|t| t.is_file())
            {
                tracing::info!("removing {name}, the staging pack of a killed base build");
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Every complete base (metadata and pack present), newest first. Unreadable metadata
    /// is skipped with a warning: it never becomes a base.
    pub fn list(&self) -> Result<Vec<BaseMeta>> {
        if let Some(s) = &self.remote {
            let text =
                self.remote_sh(s, "listing the bases", REMOTE_LIST, &[Self::arg(&self.dir)])?;
            let mut out = Vec::new();
            for chunk in text.split('\x1e').filter(|c| !c.is_empty()) {
                let (digest, json) = chunk.split_once('\n').unwrap_or((chunk, ""));
                match self.parse_meta(digest, json) {
                    Ok(m) => out.push(m),
                    Err(e) => crate::ui::warn(format!("ignoring base {digest}: {e:#}")),
                }
            }
            out.sort_by_key(|m| std::cmp::Reverse(m.built_at));
            return Ok(out);
        }
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
        self.parse_meta(digest, &text)
    }

    fn parse_meta(&self, digest: &str, text: &str) -> Result<BaseMeta> {
        let p = self.meta_path(digest);
        let meta: BaseMeta = serde_json::from_str(text)
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
        if let Some(s) = &self.remote {
            self.remote_sh(
                s,
                "placing the pack",
                r#"mv -f "$1" "$2""#,
                &[Self::arg(built), Self::arg(&pack)],
            )?;
            return Ok(pack);
        }
        std::fs::rename(built, &pack)
            .with_context(|| format!("cannot move {} to {}", built.display(), pack.display()))?;
        Ok(pack)
    }

    /// Makes a placed pack a base by writing its metadata.
    pub fn install(&self, meta: &BaseMeta) -> Result<()> {
        let body = serde_json::to_vec_pretty(meta)?;
        let final_path = self.meta_path(&meta.digest);
        if let Some(s) = &self.remote {
            // Written beside, then renamed: a base is never half-described.
            self.remote_sh(
                s,
                "writing the base's metadata",
                r#"umask 077; t="$1.$$.tmp"; printf '%s' "$2" > "$t" && mv -f "$t" "$1""#,
                &[
                    Self::arg(&final_path),
                    String::from_utf8_lossy(&body).into_owned(),
                ],
            )?;
            return Ok(());
        }
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
        if let Some(s) = &self.remote {
            let existed = self.remote_sh(
                s,
                "removing the base",
                r#"e=0; [ -e "$1" ] && e=1; rm -f "$1" && rm -f "$2" && echo $e"#,
                &[Self::arg(&meta), Self::arg(&self.pack_path(digest))],
            )?;
            return Ok(existed.trim() == "1");
        }
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

impl Store {
    /// The size of a file smolvm wrote into the store's host (a pack).
    pub fn file_size(&self, path: &std::path::Path) -> Result<u64> {
        match &self.remote {
            None => Ok(std::fs::metadata(path)
                .with_context(|| format!("smolvm wrote no {}", path.display()))?
                .len()),
            Some(s) => {
                let out = self.remote_sh(
                    s,
                    "reading the pack's size",
                    r#"stat -c %s "$1""#,
                    &[Self::arg(path)],
                )?;
                out.trim()
                    .parse()
                    .with_context(|| format!("smolvm wrote no {}", path.display()))
            }
        }
    }

    /// Removes files a build left (its staging names), quietly: cleanup is best effort.
    pub fn remove_quietly(&self, paths: &[PathBuf]) {
        match &self.remote {
            None => {
                for p in paths {
                    let _ = std::fs::remove_file(p);
                }
            }
            Some(s) => {
                let args: Vec<String> = paths.iter().map(|p| Self::arg(p)).collect();
                let _ = s.shell(r#"rm -f "$@""#, &args, timeouts::QUERY);
            }
        }
    }

    /// Whether the store is on a remote host.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
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
    fn a_build_sweeps_killed_builds_staging_but_its_own_and_the_bases() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::new(&StateDir::at(tmp.path().to_path_buf()));
        store.ensure().unwrap();
        let own = store.staging_out("d1");
        let killed = store.dir().join(".build-d1-999999-0badcafe");
        let files = [
            own.clone(),
            own.with_extension("smolmachine"),
            killed.clone(),
            killed.with_extension("smolmachine"),
            store.pack_path("d1"),
            store.dir().join("d1.json"),
            store.dir().join(".other"),
        ];
        for f in &files {
            std::fs::write(f, b"x").unwrap();
        }
        store.sweep_killed_builds();
        let left: Vec<bool> = files.iter().map(|f| f.exists()).collect();
        assert_eq!(left, [true, true, false, false, true, true, true]);
    }

    /// The same store, step for step, on a remote host (a real sshd; the remote account's
    /// XDG_DATA_HOME is a temp dir).
    #[test]
    fn a_remote_store_keeps_bases_where_remote_smolvm_runs() {
        let Some(h) = crate::remote::ssh::test_host::test_host() else {
            return;
        };
        let target =
            crate::remote::ssh::SshTarget::new(&h.host, &h.ssh_command, Some(&h.state())).unwrap();
        let smolvm = Smolvm::over_ssh(Arc::new(Session::new(target)), "smolvm", None);
        let store = Store::for_smolvm(&StateDir::at(h.state()), &smolvm).unwrap();
        let dir = h.dir.path().join("remote-data/hermes-box/bases");
        assert_eq!(store.dir(), dir);
        assert!(store.is_remote());
        assert!(store.list().unwrap().is_empty(), "no store yet is no bases");
        store.ensure().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let key = BaseKey {
            base_image: "ubuntu:24.04".into(),
            arch: "x86_64".into(),
            provision_sha256: "p".into(),
            hb_sha256: "h".into(),
            config: vec![],
            ca_certs_sha256: "c".into(),
            guest_env: vec![],
            recipe_sha256: "r".into(),
        };
        let digest = key.digest();
        let staging = store.staging_out(&digest);
        let mut sidecar = staging.as_os_str().to_owned();
        sidecar.push(".smolmachine");
        let sidecar = PathBuf::from(sidecar);
        std::fs::write(&sidecar, b"pack bytes").unwrap();
        assert_eq!(store.file_size(&sidecar).unwrap(), 10);
        let pack = store.place_pack(&sidecar, &digest).unwrap();
        assert!(pack.is_file() && !sidecar.exists());
        assert!(
            store.list().unwrap().is_empty(),
            "a pack without metadata is no base"
        );
        let meta = BaseMeta {
            digest: digest.clone(),
            key: key.clone(),
            built_at: 1_700_000_000,
            size_bytes: 10,
            tools: vec!["hermes=1.2 it's \"quoted\" $(not run)".into()],
            smolvm_version: "1.9.2".into(),
            build_secs: 3,
            warm: false,
        };
        store.install(&meta).unwrap();
        let found = store.find(&key).unwrap().unwrap();
        assert_eq!(found.tools, meta.tools);
        assert_eq!(found.size_bytes, 10);
        assert!(store.remove(&digest).unwrap());
        assert!(!store.remove(&digest).unwrap(), "already gone");
        assert!(!pack.exists());
        assert!(store.list().unwrap().is_empty());
    }

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
