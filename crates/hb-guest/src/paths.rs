//! Every path `hb` touches, derived from the data root so tests can use a temp dir.
//!
//! The durable names come from `box_proto::layout` (the host archives the same paths);
//! the files below that only `hb` reads and writes are named here.

use std::path::{Path, PathBuf};

use box_proto::layout;

/// Paths under one data root (`/data` in a box, `HB_DATA` in tests).
#[derive(Debug, Clone)]
pub struct Paths {
    pub data: PathBuf,
}

impl Paths {
    pub fn new(data: &Path) -> Self {
        Self {
            data: data.to_path_buf(),
        }
    }

    fn at(&self, rel: &str) -> PathBuf {
        self.data.join(rel)
    }

    pub fn home(&self) -> PathBuf {
        self.at(layout::HOME)
    }
    pub fn hb_config(&self) -> PathBuf {
        self.at(layout::HB_CONFIG_DIR)
    }
    pub fn quiesced_marker(&self) -> PathBuf {
        self.at(layout::QUIESCED_MARKER)
    }
    /// What the last `hb quiesce` changed, so `hb resume` undoes exactly that.
    pub fn quiesce_record(&self) -> PathBuf {
        self.at(layout::QUIESCE_RECORD)
    }
    /// The snapshot incremental saves compare with (its `.next` beside it until committed).
    pub fn backup_snapshot(&self) -> PathBuf {
        self.at(layout::BACKUP_SNAPSHOT).join("current")
    }
    pub fn manifest(&self) -> PathBuf {
        self.at(layout::RUNTIME_MANIFEST)
    }
    pub fn logs(&self) -> PathBuf {
        self.at(layout::LOGS_DIR)
    }
    pub fn log(&self, service: &str) -> PathBuf {
        self.logs().join(format!("{service}.log"))
    }
    pub fn executor_data(&self) -> PathBuf {
        self.at(layout::EXECUTOR_DATA_DIR)
    }
    /// Executor ≥ 1.5.12 keeps its token here (`{"token": "..."}`, 0600).
    pub fn executor_auth_json(&self) -> PathBuf {
        self.executor_data()
            .join("server-control")
            .join("auth.json")
    }
    /// The token `hb` minted for Executor 1.5.9, which has no token file of its own.
    pub fn minted_token(&self) -> PathBuf {
        self.hb_config().join("executor-token")
    }
    /// `EXECUTOR_MCP_TOKEN=...`, sourced by the login profile; 0600.
    pub fn mcp_env(&self) -> PathBuf {
        self.hb_config().join("executor-mcp.env")
    }
    /// Claude Code's `headersHelper`: prints the Authorization header from the env file.
    pub fn claude_headers_helper(&self) -> PathBuf {
        self.hb_config().join("executor-mcp-headers")
    }
    /// The wiring version marker; a repeat `wire-mcp` with the same content is a no-op.
    pub fn wire_marker(&self) -> PathBuf {
        self.hb_config().join("mcp-wired")
    }
    /// The Hermes services the workload runs (`hb service enable|disable`), one name a
    /// line; agent-writable, read with limits ([`crate::hermes_services`]).
    pub fn hermes_services(&self) -> PathBuf {
        self.hb_config().join("hermes-services")
    }
    /// Asks the workload to restart the Hermes services that run (`hb wire-mcp` changed
    /// what they read at start); it removes the file.
    pub fn hermes_restart_request(&self) -> PathBuf {
        self.hb_config().join("restart-hermes-services")
    }
    /// Pids and start time of the running workload and Executor (checked against the
    /// boot id, so a copy restored into another VM or left from a reboot reads as stale).
    pub fn workload_state(&self) -> PathBuf {
        self.hb_config().join("workload-state.json")
    }
    pub fn claude_dir(&self) -> PathBuf {
        self.at(layout::CLAUDE_CONFIG_DIR)
    }
    /// With `CLAUDE_CONFIG_DIR` set, Claude Code keeps its user config inside that dir.
    pub fn claude_json(&self) -> PathBuf {
        self.claude_dir().join(".claude.json")
    }
    pub fn codex_home(&self) -> PathBuf {
        self.at(layout::CODEX_HOME)
    }
    pub fn hermes_home(&self) -> PathBuf {
        self.at(layout::HERMES_HOME)
    }
    pub fn workspace(&self) -> PathBuf {
        self.at(layout::WORKSPACE)
    }
}
