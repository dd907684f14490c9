//! The registry: one small JSON record per box under `<state>/boxes/<name>.json`.
//!
//! Records are written atomically (temp file in the same directory, fsync, rename, fsync of
//! the directory) so a crash leaves the old record or the new one, never half of one. A
//! record that does not parse is reported with its path and skipped; it is never dropped or
//! rewritten behind the user's back.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::BoxName;
use serde::{Deserialize, Serialize};

use super::StateDir;

/// What box remembers about one box. The VM itself (smolvm's `ls --json`) stays the source
/// of truth for whether the machine exists and what state it is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxRecord {
    pub name: BoxName,
    /// The smolvm machine name.
    pub machine: String,
    /// Host loopback port of Executor's web UI, when exposed.
    pub web_port: Option<u16>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// `box` version that created the box.
    pub box_version: String,
    pub base_image: String,
    /// True from the moment `box new`/`box load` registers the box until it has finished
    /// building it. A row still incomplete afterwards means that run died without cleaning
    /// up (SIGKILL, power loss): the box may be half provisioned.
    #[serde(default)]
    pub incomplete: bool,
    /// Set when a failed `box new`/`box load` kept the box on request (`--keep-on-failure`,
    /// `BOX_KEEP_ON_FAILURE=1`): what failed, so doctor does not mistake it for a killed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_after_failure: Option<String>,
    /// The `hermes-box-id` label box gave the machine at create, where smolvm has labels
    /// (1.8+): the machine is this box's only while it still carries it. `None`: created
    /// without labels; the name alone decides, as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_label: Option<String>,
    /// Where the box lives: `ssh://…` for a remote host ([`crate::remote`]), `None` for
    /// this machine (every record written before remote hosts existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Where the box may connect and which API keys are bound to it (never a value). `None`:
    /// made before containment existed (its LAN is open, its egress unrestricted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<crate::policy::Containment>,
    /// Where `box save` last wrote a backup of this box (absolute): its chain is there,
    /// whatever directory box runs from and whatever BACKUP_DIR says now. `None`: not
    /// saved since records kept this (an older record, or a box never saved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_dir: Option<PathBuf>,
}

impl BoxRecord {
    /// The remote host this box lives on, `None` for this machine.
    pub fn remote_host(&self) -> Result<Option<crate::remote::RemoteHost>> {
        match self.host.as_deref() {
            None => Ok(None),
            Some(h) => crate::remote::RemoteHost::parse(h)
                .map(Some)
                .with_context(|| format!("the registry row of box '{}'", self.name)),
        }
    }
}

/// A record file that could not be read.
#[derive(Debug, Clone)]
pub struct CorruptRecord {
    pub path: PathBuf,
    pub problem: String,
}

/// All records that parsed, plus the ones that did not.
#[derive(Debug, Default)]
pub struct Listing {
    pub records: Vec<BoxRecord>,
    pub corrupt: Vec<CorruptRecord>,
}

#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    pub fn new(state: &StateDir) -> Self {
        Self {
            dir: state.boxes_dir(),
        }
    }

    pub fn record_path(&self, name: &BoxName) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Reads one record. `Ok(None)` when the box is not registered.
    pub fn get(&self, name: &BoxName) -> Result<Option<BoxRecord>> {
        let path = self.record_path(name);
        match fs::read(&path) {
            Ok(bytes) => parse_record(&path, &bytes, Some(name))
                .map(Some)
                .map_err(|c| {
                    anyhow::anyhow!(
                        "corrupt registry record {}: {}",
                        c.path.display(),
                        c.problem
                    )
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Every record, sorted by name. Corrupt files are listed separately.
    pub fn list(&self) -> Result<Listing> {
        let mut listing = Listing::default();
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", self.dir.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", self.dir.display()))?;
            let path = entry.path();
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue; // temp files and strangers are not records
            };
            if stem.starts_with('.') {
                continue;
            }
            let expected = match BoxName::parse(stem) {
                Ok(n) => n,
                Err(e) => {
                    listing.corrupt.push(CorruptRecord {
                        path,
                        problem: format!("file name is not a box name: {e}"),
                    });
                    continue;
                }
            };
            match fs::read(&path) {
                Ok(bytes) => match parse_record(&path, &bytes, Some(&expected)) {
                    Ok(record) => listing.records.push(record),
                    Err(corrupt) => listing.corrupt.push(corrupt),
                },
                Err(e) => listing.corrupt.push(CorruptRecord {
                    path,
                    problem: e.to_string(),
                }),
            }
        }
        listing.records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listing)
    }

    /// Writes a new record. Refuses when a record (even a corrupt one) already exists.
    /// Callers hold the registry lock.
    pub fn insert(&self, record: &BoxRecord) -> Result<()> {
        let path = self.record_path(&record.name);
        if path.exists() {
            bail!(
                "box '{}' is already registered ({})",
                record.name,
                path.display()
            );
        }
        self.write(record)
    }

    /// Replaces an existing record atomically.
    pub fn update(&self, record: &BoxRecord) -> Result<()> {
        self.write(record)
    }

    fn write(&self, record: &BoxRecord) -> Result<()> {
        StateDir::ensure_private_dir(&self.dir)?;
        let path = self.record_path(&record.name);
        let mut json =
            serde_json::to_vec_pretty(record).context("cannot encode registry record")?;
        json.push(b'\n');
        write_atomically(&path, &json)
    }

    /// Clears [`BoxRecord::incomplete`] once the box is fully built.
    pub fn mark_complete(&self, name: &BoxName) -> Result<()> {
        let mut record = self.get(name)?.with_context(|| {
            format!("box '{name}' vanished from the registry while it was being built")
        })?;
        if record.incomplete {
            record.incomplete = false;
            self.update(&record)?;
        }
        Ok(())
    }

    /// Records that a failed run kept the (still incomplete) box on purpose; `what` says
    /// which run and why, e.g. `box load backups/a.tar.zst.gpg failed while restoring`.
    pub fn mark_kept(&self, name: &BoxName, what: &str) -> Result<()> {
        let Some(mut record) = self.get(name)? else {
            return Ok(());
        };
        record.kept_after_failure = Some(what.to_string());
        self.update(&record)
    }

    /// Remembers where a save of `name` wrote ([`BoxRecord::backup_dir`]). The caller holds
    /// the box lock; the record is read afresh, so nothing else in it is undone.
    pub fn remember_backup_dir(&self, name: &BoxName, dir: &Path) -> Result<()> {
        let Some(mut record) = self.get(name)? else {
            return Ok(());
        };
        if record.backup_dir.as_deref() != Some(dir) {
            record.backup_dir = Some(dir.to_path_buf());
            self.update(&record)?;
        }
        Ok(())
    }

    /// Removes a record. `Ok(false)` when there was none.
    pub fn remove(&self, name: &BoxName) -> Result<bool> {
        let path = self.record_path(name);
        match fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(&self.dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
        }
    }
}

fn parse_record(
    path: &Path,
    bytes: &[u8],
    expected: Option<&BoxName>,
) -> Result<BoxRecord, CorruptRecord> {
    let corrupt = |problem: String| CorruptRecord {
        path: path.to_path_buf(),
        problem,
    };
    let record: BoxRecord = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if let Some(expected) = expected
        && &record.name != expected
    {
        return Err(corrupt(format!(
            "record names box '{}' but the file is for '{expected}'",
            record.name
        )));
    }
    Ok(record)
}

/// Writes `bytes` to `path` via a 0600 temp file in the same directory, fsync and rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().context("registry path has no parent")?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("registry path has no file name")?;
    let tmp = dir.join(format!(".{file_name}.tmp.{}", std::process::id()));
    let result = (|| -> Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("cannot rename into {}", path.display()))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync directory {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn record(name: &str) -> BoxRecord {
        BoxRecord {
            name: BoxName::parse(name).unwrap(),
            machine: name.to_string(),
            web_port: Some(4790),
            created_at: "2026-11-29T07:00:00Z".into(),
            box_version: "0.1.0".into(),
            base_image: "ubuntu:24.04".into(),
            incomplete: false,
            kept_after_failure: None,
            machine_label: None,
            host: None,
            containment: None,
            backup_dir: None,
        }
    }

    /// A save remembers where it wrote; a record written before the field existed reads
    /// as never saved, and one that has it reads back.
    #[test]
    fn where_the_backups_went_is_remembered_and_old_records_still_read() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::new(&StateDir::at(tmp.path().into()));
        let old = br#"{"name":"old","machine":"old","web_port":null,"created_at":"x","box_version":"0.1.0","base_image":"u","host":null}"#;
        StateDir::ensure_private_dir(&tmp.path().join("boxes")).unwrap();
        fs::write(tmp.path().join("boxes/old.json"), old).unwrap();
        let name = BoxName::parse("old").unwrap();
        assert_eq!(reg.get(&name).unwrap().unwrap().backup_dir, None);
        reg.remember_backup_dir(&name, Path::new("/srv/backups"))
            .unwrap();
        let record = reg.get(&name).unwrap().unwrap();
        assert_eq!(
            record.backup_dir.as_deref(),
            Some(Path::new("/srv/backups"))
        );
        assert_eq!(record.machine, "old", "the rest of the record is kept");
        let alpha = BoxName::parse("alpha").unwrap();
        reg.remember_backup_dir(&alpha, Path::new("/x")).unwrap();
        assert!(reg.get(&alpha).unwrap().is_none(), "no record is made up");
    }

    #[test]
    fn incomplete_rows_are_marked_complete_once_built() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::new(&StateDir::at(tmp.path().into()));
        let mut building = record("alpha");
        building.incomplete = true;
        reg.insert(&building).unwrap();
        let name = BoxName::parse("alpha").unwrap();
        assert!(reg.get(&name).unwrap().unwrap().incomplete);
        reg.mark_complete(&name).unwrap();
        assert!(!reg.get(&name).unwrap().unwrap().incomplete);
        // Records written before the field existed read as complete.
        let old = br#"{"name":"old","machine":"old","web_port":null,"created_at":"x","box_version":"0.1.0","base_image":"u"}"#;
        fs::write(tmp.path().join("boxes/old.json"), old).unwrap();
        assert!(
            !reg.get(&BoxName::parse("old").unwrap())
                .unwrap()
                .unwrap()
                .incomplete
        );
    }

    #[test]
    fn insert_get_list_remove() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::new(&StateDir::at(tmp.path().into()));
        assert!(reg.list().unwrap().records.is_empty());
        reg.insert(&record("beta")).unwrap();
        reg.insert(&record("alpha")).unwrap();
        let err = reg.insert(&record("alpha")).unwrap_err().to_string();
        assert!(err.contains("already registered"), "{err}");
        let names: Vec<_> = reg
            .list()
            .unwrap()
            .records
            .into_iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(names, ["alpha", "beta"]);
        let alpha = BoxName::parse("alpha").unwrap();
        assert_eq!(reg.get(&alpha).unwrap().unwrap(), record("alpha"));
        let mode = fs::metadata(reg.record_path(&alpha))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(reg.remove(&alpha).unwrap());
        assert!(!reg.remove(&alpha).unwrap());
        assert!(reg.get(&alpha).unwrap().is_none());
        // No temp files are left behind.
        let leftovers: Vec<_> = fs::read_dir(tmp.path().join("boxes"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, [std::ffi::OsString::from("beta.json")]);
    }

    #[test]
    fn corrupt_records_are_reported_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::new(&StateDir::at(tmp.path().into()));
        reg.insert(&record("good")).unwrap();
        let dir = tmp.path().join("boxes");
        fs::write(dir.join("bad.json"), b"{ not json").unwrap();
        fs::write(dir.join("Upper.json"), b"{}").unwrap();
        let mut other = record("other");
        other.name = BoxName::parse("else").unwrap();
        fs::write(dir.join("other.json"), serde_json::to_vec(&other).unwrap()).unwrap();
        let listing = reg.list().unwrap();
        assert_eq!(listing.records.len(), 1);
        let mut problems: Vec<_> = listing
            .corrupt
            .iter()
            .map(|c| c.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        problems.sort();
        assert_eq!(problems, ["Upper.json", "bad.json", "other.json"]);
        assert_eq!(fs::read(dir.join("bad.json")).unwrap(), b"{ not json");
        let err = reg.insert(&record("bad")).unwrap_err().to_string();
        assert!(err.contains("already registered"), "{err}");
        let err = reg
            .get(&BoxName::parse("bad").unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad.json"), "{err}");
    }
}
