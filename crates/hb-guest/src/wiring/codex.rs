//! Codex: `[mcp_servers.executor]` in `$CODEX_HOME/config.toml` with
//! `bearer_token_env_var`, and the value in `$CODEX_HOME/.env` (Codex loads it at start).
//! Codex rejects an inline `bearer_token` for HTTP servers, so the config never holds it.

use anyhow::{Context as _, Result, bail};
use nix::unistd::{Gid, Uid};
use toml_edit::{DocumentMut, Item, Table, value};

use super::{SERVER_NAME, TOKEN_VAR, dotenv};
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;

/// Keys of an older (stdio `executor mcp`) or hand-made entry that would conflict.
const STALE_KEYS: &[&str] = &["command", "args", "env", "cwd", "bearer_token", "transport"];

fn load(paths: &Paths) -> Result<(DocumentMut, Option<String>)> {
    let path = paths.codex_home().join("config.toml");
    let text = read_optional(&path)?;
    let doc = text
        .as_deref()
        .unwrap_or("")
        .parse::<DocumentMut>()
        .with_context(|| {
            format!(
                "{} is not valid TOML; fix it and re-run `hb wire-mcp`",
                path.display()
            )
        })?;
    Ok((doc, text))
}

fn save(paths: &Paths, doc: &DocumentMut, owner: Option<(Uid, Gid)>) -> Result<()> {
    let path = paths.codex_home().join("config.toml");
    write_private(&path, doc.to_string().as_bytes(), 0o600, owner)
}

fn is_ours(t: &Table, url: &str) -> bool {
    let s = |k: &str| t.get(k).and_then(Item::as_str);
    s("url") == Some(url)
        || s("bearer_token_env_var") == Some(TOKEN_VAR)
        || s("command").is_some_and(|c| c == "executor" || c.ends_with("/executor"))
}

pub fn wire(paths: &Paths, url: &str, token: &str, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let (mut doc, old) = load(paths)?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_mut()
        .context("config.toml: `mcp_servers` is not a table; fix it and re-run `hb wire-mcp`")?;
    let entry = servers
        .entry(SERVER_NAME)
        .or_insert_with(|| Item::Table(Table::new()));
    let Some(entry) = entry.as_table_mut() else {
        bail!(
            "config.toml: `mcp_servers.executor` is not a table; fix it and re-run `hb wire-mcp`"
        );
    };
    for k in STALE_KEYS {
        entry.remove(k);
    }
    if let Some(h) = entry
        .get_mut("http_headers")
        .and_then(Item::as_table_like_mut)
    {
        h.remove("Authorization");
        h.remove("authorization");
    }
    if entry.get("url").and_then(Item::as_str) != Some(url) {
        entry.insert("url", value(url));
    }
    if entry.get("bearer_token_env_var").and_then(Item::as_str) != Some(TOKEN_VAR) {
        entry.insert("bearer_token_env_var", value(TOKEN_VAR));
    }
    let mut changed = false;
    if old.as_deref() != Some(doc.to_string().as_str()) {
        save(paths, &doc, owner)?;
        changed = true;
    }
    changed |= dotenv::set(
        &paths.codex_home().join(".env"),
        TOKEN_VAR,
        Some(token),
        owner,
    )?;
    Ok(changed)
}

pub fn unwire(paths: &Paths, url: &str, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let mut changed = dotenv::set(&paths.codex_home().join(".env"), TOKEN_VAR, None, owner)?;
    let (mut doc, old) = load(paths)?;
    if old.is_none() {
        return Ok(changed);
    }
    if let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_mut)
        && servers
            .get(SERVER_NAME)
            .and_then(Item::as_table)
            .is_some_and(|t| is_ours(t, url))
    {
        servers.remove(SERVER_NAME);
    }
    if old.as_deref() != Some(doc.to_string().as_str()) {
        save(paths, &doc, owner)?;
        changed = true;
    }
    Ok(changed)
}

pub fn check(paths: &Paths, url: &str, token: &str) -> Result<(), String> {
    let (doc, _) = load(paths).map_err(|e| format!("{e:#}"))?;
    let t = doc
        .get("mcp_servers")
        .and_then(|s| s.get(SERVER_NAME))
        .and_then(Item::as_table)
        .ok_or("config.toml has no [mcp_servers.executor]")?;
    if t.get("url").and_then(Item::as_str) != Some(url) {
        return Err(format!("[mcp_servers.executor] url is not {url}"));
    }
    if t.get("bearer_token_env_var").and_then(Item::as_str) != Some(TOKEN_VAR) {
        return Err(format!(
            "[mcp_servers.executor] bearer_token_env_var is not {TOKEN_VAR}"
        ));
    }
    if dotenv::get(&paths.codex_home().join(".env"), TOKEN_VAR).as_deref() != Some(token) {
        return Err(format!(
            "$CODEX_HOME/.env does not hold the current {TOKEN_VAR}"
        ));
    }
    Ok(())
}
