//! The durable layout under the data root (`/data` in a box), shared by `hb` (which creates
//! and uses it) and `box` (which archives and restores it). Paths here are relative to the
//! data root, because that is how they appear inside a backup (`./home/agent/...`).

/// The account every agent runs as.
pub const AGENT_USER: &str = "agent";
/// The agent's durable home.
pub const HOME: &str = "home/agent";
/// hermes-box's own config dir in the home: runtime manifest, token env file, markers.
pub const HB_CONFIG_DIR: &str = "home/agent/.config/hermes-box";
/// Durable pause marker: while it exists the workload never (re)starts Executor.
/// Excluded from backups; a restore re-arms it on purpose.
pub const QUIESCED_MARKER: &str = "home/agent/.config/hermes-box/quiesced";
/// What the last `hb quiesce` paused, so `hb resume` undoes exactly that. Describes the
/// box it was written in: excluded from backups (a restored box must not "resume" the
/// source box's gateways).
pub const QUIESCE_RECORD: &str = "home/agent/.config/hermes-box/quiesce-record.json";
/// The runtime manifest (tool versions), see [`crate::manifest`].
pub const RUNTIME_MANIFEST: &str = "home/agent/.config/hermes-box/runtime-manifest";
/// Service logs.
pub const LOGS_DIR: &str = "logs";
/// The dir (0700, root's) of the snapshot of the last backup's files that the next
/// incremental save compares with (hb-guest archive::incremental): beside the home rather
/// than in it (the agent must not be able to make a save skip a changed file), never
/// backed up or cloned.
pub const BACKUP_SNAPSHOT: &str = ".hb-backup-snapshot";
/// The prefix of `hb import`'s staging dir in the data root (`<prefix><pid>`): a restore
/// in progress, never archived; an import that was killed leaves it behind.
pub const RESTORE_STAGE_PREFIX: &str = ".hb-restore-stage-";
/// Executor's data dir (`EXECUTOR_DATA_DIR`).
pub const EXECUTOR_DATA_DIR: &str = "home/agent/.executor";
/// Hermes Agent's home (`HERMES_HOME`).
pub const HERMES_HOME: &str = "home/agent/.hermes";
/// Claude Code's config dir (`CLAUDE_CONFIG_DIR`).
pub const CLAUDE_CONFIG_DIR: &str = "home/agent/.claude";
/// Codex's home (`CODEX_HOME`).
pub const CODEX_HOME: &str = "home/agent/.codex";
/// The agent's workspace.
pub const WORKSPACE: &str = "home/agent/workspace";
