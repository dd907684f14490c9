//! Where a box's backups are, whatever directory `box` runs from.
//!
//! One known place: the backup dir ([`Config::backup_dir`]: `BACKUP_DIR`, by default the
//! user's data directory). Two more places may hold a box's chain, and are looked in too:
//! * the directory its record remembers ([`BoxRecord::backup_dir`]): where its last save
//!   went, when BACKUP_DIR said something else then (BACKUP_DIR changed since, or another
//!   box.env);
//! * `./backups` of the current directory ([`Config::legacy_backup_dir`]): where box wrote
//!   backups before they had one known place. Said once, with how to move them.
//!
//! A box's chain is where its newest backup is: a save adds its next link there (a
//! restore finds a chain's links beside each other), `box rm` checks that one, `box
//! backups` lists every place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, Result};
use box_proto::archive::naming::newest_backup;

use crate::backup::chain;
use crate::backup::envelope::shell_quote;
use crate::config::Config;
use crate::state::{BoxRecord, Registry, StateDir};
use crate::ui;

/// Why a directory is looked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The backup dir: BACKUP_DIR, or the user's data directory.
    Configured,
    /// A directory a box's record remembers its saves went to.
    Remembered,
    /// `./backups` of the current directory: the place before there was one.
    Legacy,
}

/// A directory that may hold backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub dir: PathBuf,
    pub source: Source,
}

/// The directories that may hold the backups of boxes whose records remember
/// `remembered`: the backup dir first, then those, then the old `./backups` when it is a
/// directory. Each once.
pub fn places<'a>(
    config: &Config,
    remembered: impl IntoIterator<Item = &'a Path>,
) -> Result<Vec<Place>> {
    let mut out = vec![Place {
        dir: config.backup_dir()?,
        source: Source::Configured,
    }];
    let mut add = |dir: &Path, source| {
        if !out.iter().any(|p| same_dir(&p.dir, dir)) {
            out.push(Place {
                dir: dir.to_path_buf(),
                source,
            });
        }
    };
    for dir in remembered {
        add(dir, Source::Remembered);
    }
    if let Some(legacy) = config.legacy_backup_dir().filter(|d| d.is_dir()) {
        add(legacy, Source::Legacy);
    }
    Ok(out)
}

/// The places the backups of registered boxes (`only`, or all) may be in: `box backups`,
/// and a backup file named without a directory.
pub fn places_of(config: &Config, state: &StateDir, only: Option<&str>) -> Result<Vec<Place>> {
    let records = Registry::new(state).list()?.records;
    places(
        config,
        records
            .iter()
            .filter(|r| only.is_none_or(|o| r.name.as_str() == o))
            .filter_map(|r| r.backup_dir.as_deref()),
    )
}

/// The same directory: the same path, or the same directory reached another way.
pub fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// Where a box's chain is: the place holding its newest backup, and that backup.
#[derive(Debug, Clone)]
pub struct Chain {
    pub place: Place,
    pub newest: Option<PathBuf>,
}

/// Where the chain of `record` is: the place holding its newest backup (by the time in
/// its name; the backup dir when two places tie), or the backup dir when none holds one.
/// A place that cannot be listed is said and passed over.
pub fn chain_of(config: &Config, record: &BoxRecord) -> Result<Chain> {
    let places = places(config, record.backup_dir.as_deref())?;
    let name = record.name.as_str();
    let mut best: Option<(String, Chain)> = None;
    for place in &places {
        let newest = match newest_backup(&place.dir, name) {
            Ok(Some(newest)) => newest,
            Ok(None) => continue,
            Err(e) => {
                ui::warn(format!(
                    "cannot look for backups of '{name}' in {}: {e}",
                    place.dir.display()
                ));
                continue;
            }
        };
        let stamp = chain::box_and_stamp(&newest)
            .map(|(_, s)| s)
            .unwrap_or_default();
        if best.as_ref().is_none_or(|(b, _)| stamp > *b) {
            let chain = Chain {
                place: place.clone(),
                newest: Some(newest),
            };
            best = Some((stamp, chain));
        }
    }
    let Some((_, chain)) = best else {
        return Ok(Chain {
            place: places[0].clone(),
            newest: None,
        });
    };
    match chain.place.source {
        Source::Configured => {}
        Source::Legacy => say_legacy(&chain.place.dir, &places[0].dir, Some(name)),
        Source::Remembered => ui::say(format!(
            "box '{name}': its backups are in {}, where its last save put them, not in the \
             backup dir {} (box save {name} --full starts a new chain there; to move them: {})",
            chain.place.dir.display(),
            places[0].dir.display(),
            move_command(&chain.place.dir, &places[0].dir, Some(name))
        )),
    }
    Ok(chain)
}

/// Where a save of `record` writes: beside its newest backup when it continues its chain,
/// else (`--full`, a new chain) in the backup dir.
pub fn save_dir(config: &Config, record: &BoxRecord, continue_chain: bool) -> Result<PathBuf> {
    if continue_chain {
        Ok(chain_of(config, record)?.place.dir)
    } else {
        config.backup_dir()
    }
}

/// `file` as given when it exists or names a directory; else a bare file name (as `box
/// backups` lists it) found in one of the places, said.
pub fn find_file(config: &Config, state: &StateDir, file: &Path) -> PathBuf {
    let bare = file.parent().is_none_or(|p| p.as_os_str().is_empty());
    if !bare || std::fs::symlink_metadata(file).is_ok() {
        return file.to_path_buf();
    }
    let Ok(places) = places_of(config, state, None) else {
        return file.to_path_buf();
    };
    match places
        .iter()
        .map(|p| p.dir.join(file))
        .find(|p| p.is_file())
    {
        Some(found) => {
            ui::say(format!("using {}", found.display()));
            found
        }
        None => file.to_path_buf(),
    }
}

/// Backups were found in the old place: said once per run, with how to move them.
pub fn say_legacy(legacy: &Path, configured: &Path, only: Option<&str>) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    ui::warn(format!(
        "found backups{} in {}: the backups/ of the directory box ran from, where box kept \
         them before they had one place. box keeps backups in {} now; to move them there: {}",
        only.map(|n| format!(" of '{n}'")).unwrap_or_default(),
        legacy.display(),
        configured.display(),
        move_command(legacy, configured, only)
    ));
}

/// A shell command that moves the backups (of `only`, or all) from `from` into `to`.
fn move_command(from: &Path, to: &Path, only: Option<&str>) -> String {
    let to = shell_quote(&to.to_string_lossy());
    let from = shell_quote(&from.to_string_lossy());
    let files = match only {
        Some(name) => format!("{from}/{name}-*.gpg"),
        None => format!("{from}/*.gpg"),
    };
    format!("mkdir -p {to} && mv -n {files} {to}/")
}

/// The backup files in `places` of `only` (or of every box), by box: names only, nothing
/// read.
pub fn files_by_box(
    places: &[Place],
    only: Option<&str>,
) -> Result<BTreeMap<String, Vec<PathBuf>>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for dir in places.iter().map(|p| &p.dir) {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
        };
        for entry in entries {
            let path = entry?.path();
            if let Some((name, _)) = chain::box_and_stamp(&path)
                && only.is_none_or(|o| o == name)
                && path.is_file()
            {
                files.entry(name).or_default().push(path);
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_move_command_pastes_as_is() {
        let cmd = move_command(
            Path::new("/w/backups"),
            Path::new("/Users/u/Library/Application Support/hermes-box/backups"),
            Some("alpha"),
        );
        assert_eq!(
            cmd,
            "mkdir -p '/Users/u/Library/Application Support/hermes-box/backups' && mv -n \
             /w/backups/alpha-*.gpg '/Users/u/Library/Application Support/hermes-box/backups'/"
        );
    }
}
