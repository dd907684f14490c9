//! Claude Code: a user-scope HTTP server in `$CLAUDE_CONFIG_DIR/.claude.json` whose
//! `headersHelper` prints the Authorization header at connect time. The token is never in
//! Claude's config and never on argv (`claude mcp add --header` would put it in both).

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use nix::unistd::{Gid, Uid};
use serde_json::{Map, Value, json};

use super::{SERVER_NAME, TOKEN_VAR};
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;

fn load(path: &Path) -> Result<Map<String, Value>> {
    match read_optional(path)? {
        None => Ok(Map::new()),
        Some(text) if text.trim().is_empty() => Ok(Map::new()),
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => bail!(
                "{} is not a JSON object; fix or move it, then re-run `hb wire-mcp`",
                path.display()
            ),
            Err(e) => bail!(
                "{} is not valid JSON ({e}); fix or move it, then re-run `hb wire-mcp`",
                path.display()
            ),
        },
    }
}

fn save(path: &Path, doc: &Map<String, Value>, owner: Option<(Uid, Gid)>) -> Result<()> {
    let mut text = serde_json::to_string_pretty(doc)?;
    text.push('\n');
    write_private(path, text.as_bytes(), 0o600, owner)
}

fn entry(url: &str, helper: &Path) -> Value {
    json!({"type": "http", "url": url, "headersHelper": helper.display().to_string()})
}

/// Whether an `executor` entry is one we (or the seed's stdio wiring) made.
fn is_ours(v: &Value, url: &str, helper: &Path) -> bool {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    s("url") == Some(url)
        || s("headersHelper") == Some(&helper.display().to_string())
        || s("command").is_some_and(|c| c == "executor" || c.ends_with("/executor"))
        || s("url").is_some_and(|u| u.starts_with("http://127.0.0.1:") && u.ends_with("/mcp"))
}

/// The helper script: reads the 0600 env file and prints `{"Authorization": "Bearer …"}`.
pub fn helper_script(paths: &Paths) -> String {
    let env = paths.mcp_env().display().to_string().replace('\'', r"'\''");
    format!(
        "#!/bin/sh\n# Written by `hb wire-mcp`: Claude Code's headersHelper for Executor's MCP endpoint.\n# Prints the Authorization header; the token stays in {env} (0600).\nset -eu\n. '{env}'\nprintf '{{\"Authorization\":\"Bearer %s\"}}\\n' \"${TOKEN_VAR}\"\n"
    )
}

/// Adds or refreshes the entry; drops stale local-scope copies. Returns whether anything changed.
pub fn wire(paths: &Paths, url: &str, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let helper = paths.claude_headers_helper();
    let script = helper_script(paths);
    let mut changed = false;
    if read_optional(&helper)?.as_deref() != Some(script.as_str()) {
        write_private(&helper, script.as_bytes(), 0o700, owner)?;
        changed = true;
    }
    let path = paths.claude_json();
    let mut doc = load(&path)?;
    let before = doc.clone();
    remove_local_scope(&mut doc, url, &helper);
    let servers = doc
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(servers) = servers else {
        bail!(
            "{}: \"mcpServers\" is not an object; fix it and re-run `hb wire-mcp`",
            path.display()
        );
    };
    servers.insert(SERVER_NAME.into(), entry(url, &helper));
    if doc != before || !path.exists() {
        save(&path, &doc, owner).context("cannot write Claude Code's config")?;
        changed = true;
    }
    Ok(changed)
}

/// The seed registered Executor at local scope too (`projects[<dir>].mcpServers`).
fn remove_local_scope(doc: &mut Map<String, Value>, url: &str, helper: &Path) {
    if let Some(Value::Object(projects)) = doc.get_mut("projects") {
        for project in projects.values_mut() {
            if let Some(Value::Object(servers)) = project.get_mut("mcpServers")
                && servers
                    .get(SERVER_NAME)
                    .is_some_and(|v| is_ours(v, url, helper))
            {
                servers.remove(SERVER_NAME);
            }
        }
    }
}

/// Removes our entry (WIRE_EXECUTOR_MCP=0). Returns whether anything changed.
pub fn unwire(paths: &Paths, url: &str, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let helper = paths.claude_headers_helper();
    let mut changed = std::fs::remove_file(&helper).is_ok();
    let path = paths.claude_json();
    if !path.exists() {
        return Ok(changed);
    }
    let mut doc = load(&path)?;
    let before = doc.clone();
    remove_local_scope(&mut doc, url, &helper);
    if let Some(Value::Object(servers)) = doc.get_mut("mcpServers")
        && servers
            .get(SERVER_NAME)
            .is_some_and(|v| is_ours(v, url, &helper))
    {
        servers.remove(SERVER_NAME);
    }
    if doc != before {
        save(&path, &doc, owner)?;
        changed = true;
    }
    Ok(changed)
}

/// Problems with the current wiring, for doctor (`Ok` when wired as we would wire it).
pub fn check(paths: &Paths, url: &str) -> Result<(), String> {
    let path = paths.claude_json();
    let doc = load(&path).map_err(|e| format!("{e:#}"))?;
    let helper = paths.claude_headers_helper();
    let got = doc.get("mcpServers").and_then(|s| s.get(SERVER_NAME));
    if got != Some(&entry(url, &helper)) {
        return Err(format!(
            "{} has no current `executor` HTTP entry",
            path.display()
        ));
    }
    if read_optional(&helper).ok().flatten() != Some(helper_script(paths)) {
        return Err(format!(
            "the headers helper {} is missing or stale",
            helper.display()
        ));
    }
    Ok(())
}
