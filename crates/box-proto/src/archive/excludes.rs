//! What a backup leaves out (docs/backup-format.md, "The archive"): the seed's `tar
//! --exclude` list, plus the two its Go port added, plus our own restore scratch dirs.
//!
//! Paths are data-root-relative keys without a leading `./` (`home/agent/.cache`). An
//! excluded directory is not descended into, so everything beneath it goes too.

use crate::layout;

/// Base names excluded wherever they appear (`--exclude='*/node_modules'` and friends).
pub const EXCLUDED_NAMES: &[&str] = &[
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".cache",
    "gateway.pid",
    "cron.pid",
    "gateway.lock",
    "processes.json",
];

/// Suffixes excluded wherever they appear (`*.pyc`, `*.pyo`).
pub const EXCLUDED_SUFFIXES: &[&str] = &[".pyc", ".pyo"];

/// SQLite sidecars, excluded only beneath a `.hermes` directory: the seed's static check
/// forbids dropping `*.db-wal` globally, because other databases need their WAL.
pub const HERMES_SQLITE_SIDECARS: &[&str] = &[".db-wal", ".db-shm", ".db-journal"];

/// Exact paths excluded (with everything beneath them).
pub const EXCLUDED_PATHS: &[&str] = &[
    layout::QUIESCED_MARKER,
    layout::QUIESCE_RECORD,
    "home/agent/.codex/tmp",
    "home/agent/.hermes/tmp",
];

/// Top-level names `hb` keeps for itself: a restore in progress (`hb import`), and the
/// snapshot incremental saves compare with (with its `.next` and temporaries); never
/// archived.
pub const RESTORE_SCRATCH_PREFIXES: &[&str] = &[
    layout::RESTORE_STAGE_PREFIX,
    ".hb-restore-rollback-",
    layout::BACKUP_SNAPSHOT,
];

/// Whether the member at `key` (relative to the data root, `/`-separated, no `./`) is left
/// out of a backup.
pub fn is_excluded(key: &str) -> bool {
    let key = key.trim_start_matches("./").trim_end_matches('/');
    if key.is_empty() {
        return false;
    }
    if EXCLUDED_PATHS.contains(&key) {
        return true;
    }
    let parts: Vec<&str> = key.split('/').filter(|p| !p.is_empty()).collect();
    let Some(name) = parts.last() else {
        return false;
    };
    if parts.len() == 1
        && RESTORE_SCRATCH_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
    {
        return true;
    }
    if EXCLUDED_NAMES.contains(name) {
        return true;
    }
    if EXCLUDED_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return true;
    }
    let under_hermes = parts[..parts.len() - 1].contains(&".hermes");
    under_hermes && HERMES_SQLITE_SIDECARS.iter().any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backup_snapshot_is_never_archived() {
        for key in [
            ".hb-backup-snapshot",
            ".hb-backup-snapshot.next",
            ".hb-backup-snapshot.tmp-12",
        ] {
            assert!(is_excluded(key), "{key}");
        }
        assert!(!is_excluded("home/agent/.hb-backup-snapshot"));
    }

    #[test]
    fn seed_excludes() {
        for key in [
            "home/agent/.config/hermes-box/quiesced",
            "home/agent/.config/hermes-box/quiesce-record.json",
            "home/agent/workspace/app/node_modules",
            "home/agent/workspace/app/.venv",
            "home/agent/venv",
            "home/agent/x/__pycache__",
            "home/agent/.cache",
            "home/agent/a.pyc",
            "home/agent/b.pyo",
            "home/agent/.hermes/state.db-wal",
            "home/agent/.hermes/state.db-shm",
            "home/agent/.hermes/sub/state.db-journal",
            "home/agent/.hermes/gateway.pid",
            "home/agent/.hermes/cron.pid",
            "home/agent/.hermes/gateway.lock",
            "home/agent/.hermes/processes.json",
            "home/agent/.codex/tmp",
            "home/agent/.hermes/tmp",
            "./home/agent/.cache/",
            ".hb-restore-stage-42",
        ] {
            assert!(is_excluded(key), "{key} should be excluded");
        }
    }

    #[test]
    fn keeps_the_rest() {
        for key in [
            "",
            "home",
            "home/agent",
            "home/agent/.hermes/state.db",
            "home/agent/.executor/data.db-wal",
            "home/agent/workspace/app.db-shm",
            "home/agent/.config/hermes-box/runtime-manifest",
            "home/agent/.codex/tmpfile",
            "home/agent/workspace/.codex/tmp",
            "home/agent/workspace/node_modules_notes.md",
            "logs/executor.log",
            "home/.hb-restore-stage-1",
        ] {
            assert!(!is_excluded(key), "{key} should be kept");
        }
    }
}
