//! Editing `KEY=value` dotenv files (Codex's `$CODEX_HOME/.env`, Hermes's `~/.hermes/.env`)
//! line by line: only our key changes, every other line stays as the user wrote it.

use std::path::Path;

use anyhow::Result;
use nix::unistd::{Gid, Uid};

use crate::fsutil::{read_optional, write_private};

fn defines(line: &str, key: &str) -> bool {
    let l = line.trim_start();
    let l = l.strip_prefix("export ").map_or(l, str::trim_start);
    l.strip_prefix(key)
        .is_some_and(|rest| rest.trim_start().starts_with('='))
}

/// The value of `key`, if the file defines it (quotes stripped).
pub fn get(path: &Path, key: &str) -> Option<String> {
    let text = read_optional(path).ok()??;
    text.lines().rev().find(|l| defines(l, key)).and_then(|l| {
        let v = l.split_once('=')?.1.trim();
        Some(v.trim_matches(|c| c == '"' || c == '\'').to_string())
    })
}

/// Sets (`Some`) or removes (`None`) `key`; writes 0600 only when something changes.
/// Returns whether the file changed.
pub fn set(path: &Path, key: &str, value: Option<&str>, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let old = read_optional(path)?;
    let old_text = old.clone().unwrap_or_default();
    let mut lines: Vec<String> = old_text
        .lines()
        .filter(|l| !defines(l, key))
        .map(str::to_string)
        .collect();
    if let Some(v) = value {
        lines.push(format!("{key}={v}"));
    }
    let new_text = if lines.is_empty() {
        String::new()
    } else {
        lines.join("\n") + "\n"
    };
    if old.as_deref() == Some(new_text.as_str()) || (old.is_none() && value.is_none()) {
        return Ok(false);
    }
    write_private(path, new_text.as_bytes(), 0o600, owner)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_only_our_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".env");
        std::fs::write(&p, "# mine\nOPENAI_API_KEY=sk-1\nexport EXECUTOR_MCP_TOKEN='old'\nEXECUTOR_MCP_TOKEN_X=keep\n").unwrap();
        assert!(set(&p, "EXECUTOR_MCP_TOKEN", Some("new"), None).unwrap());
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            text,
            "# mine\nOPENAI_API_KEY=sk-1\nEXECUTOR_MCP_TOKEN_X=keep\nEXECUTOR_MCP_TOKEN=new\n"
        );
        assert_eq!(get(&p, "EXECUTOR_MCP_TOKEN").as_deref(), Some("new"));
        assert!(!set(&p, "EXECUTOR_MCP_TOKEN", Some("new"), None).unwrap());
        assert!(set(&p, "EXECUTOR_MCP_TOKEN", None, None).unwrap());
        assert_eq!(get(&p, "EXECUTOR_MCP_TOKEN"), None);
        assert_eq!(crate::fsutil::mode_of(&p), Some(0o600));
        let missing = dir.path().join("none");
        assert!(!set(&missing, "K", None, None).unwrap());
        assert!(!missing.exists());
    }
}
