//! A chain that misses a link, said with everything box knows of it (`box load`, `box
//! extract`): each missing file by name (where the save that made the chain recorded it)
//! and SHA-256, every place box looked, and where a file with that SHA-256 lies elsewhere
//! (the backup dir, a directory a box's saves went to, `BACKUP_MIRROR`), with the
//! `--chain-dir` that restores from there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use box_proto::BoxName;

use super::chain::{self, MissingParent};
use super::hex_sha;
use super::location;
use super::tree_cache::Known;
use crate::config::Config;
use crate::state::StateDir;

/// `error` as it is, unless a chain misses a link: then the whole story of it. `looked_in`
/// is where the verb looked for the chain (beside the file, or `--chain-dir`).
pub fn explain(
    config: &Config,
    state: &StateDir,
    looked_in: &Path,
    error: anyhow::Error,
) -> anyhow::Error {
    let Some(missing) = error
        .chain()
        .find_map(|e| e.downcast_ref::<MissingParent>())
        .cloned()
    else {
        return error;
    };
    let Some((box_name, child_stamp)) = chain::box_and_stamp(&missing.child) else {
        return error;
    };
    let stretch = missing_stretch(state, &box_name, missing.digest);
    let mut lines = vec![format!(
        "{} stands on backups that are not in {}: the chain is missing a link",
        missing.child.display(),
        looked_in.display()
    )];
    for (name, digest) in &stretch {
        lines.push(format!(
            "  missing: {} (SHA-256 {})",
            name.as_deref().map_or_else(
                || "a file this machine has no record of".to_string(),
                |n| n.display().to_string()
            ),
            hex_sha(digest)
        ));
    }
    let mut elsewhere = other_places(config, state, &box_name, looked_in);
    elsewhere.dedup();
    let found = elsewhere.iter().find_map(|dir| {
        holding(dir, &box_name, &child_stamp, &missing.digest).map(|f| (dir.clone(), f))
    });
    let mut searched = vec![format!("{} (beside it)", looked_in.display())];
    searched.extend(elsewhere.iter().map(|d| d.display().to_string()));
    lines.push(format!("  looked in: {}", searched.join(", ")));
    match found {
        Some((dir, file)) => lines.push(format!(
            "  {} has that SHA-256: restore with --chain-dir {} (the whole chain must be there), \
             or copy the missing file(s) beside {}",
            file.display(),
            dir.display(),
            missing.child.display()
        )),
        None => lines.push(
            "  restore an older full backup, or bring the missing file(s) back beside it \
             (box backups copy copies a whole chain)"
                .to_string(),
        ),
    }
    if let Some(suspect) = missing.suspect.strip_prefix("; ") {
        lines.push(format!("  {suspect}"));
    }
    anyhow::anyhow!(lines.join("\n"))
}

/// The missing links from `digest` back, as far as the box's last save recorded its chain:
/// each one's file name where recorded (`None`: no record), up to the first one present.
fn missing_stretch(
    state: &StateDir,
    box_name: &str,
    digest: [u8; 32],
) -> Vec<(Option<PathBuf>, [u8; 32])> {
    let rows: HashMap<[u8; 32], _> = BoxName::parse(box_name)
        .map(|name| Known::recorded(state, &name))
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.digest, r))
        .collect();
    let mut out = Vec::new();
    let mut next = Some(digest);
    while let Some(d) = next {
        match rows.get(&d) {
            Some(row) if !row.path.exists() => {
                out.push((row.path.file_name().map(PathBuf::from), d));
                next = row.place.and_then(|p| p.parent);
            }
            Some(_) => break,
            None => {
                out.push((None, d));
                break;
            }
        }
        if out.len() > 1024 {
            break;
        }
    }
    out
}

/// The directories besides `looked_in` that may hold the box's backups.
fn other_places(
    config: &Config,
    state: &StateDir,
    box_name: &str,
    looked_in: &Path,
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = location::places_of(config, state, Some(box_name))
        .map(|places| places.into_iter().map(|p| p.dir).collect())
        .unwrap_or_default();
    dirs.extend(config.env.backup_mirror.clone());
    dirs.retain(|d| !location::same_dir(d, looked_in) && d.is_dir());
    dirs
}

/// A backup of `box_name` in `dir`, older than `before`, whose SHA-256 is `digest`.
fn holding(dir: &Path, box_name: &str, before: &str, digest: &[u8; 32]) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            chain::box_and_stamp(p)
                .is_some_and(|(name, stamp)| name == box_name && stamp.as_str() < before)
        })
        .find(|p| chain::file_digest(p).is_ok_and(|d| d == *digest))
}
