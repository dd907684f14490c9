//! Hermes Agent: `mcp_servers.executor` in `$HERMES_HOME/config.yaml` with the header
//! `Authorization: "Bearer ${EXECUTOR_MCP_TOKEN}"` (Hermes expands `${VAR}` from its
//! `.env`), and the value in `$HERMES_HOME/.env`.
//!
//! The YAML is edited as text, one block only: the user's comments, order and other
//! servers stay byte for byte. Only block-style `mcp_servers:` (or an empty `{}`/`null`)
//! is understood; anything else is refused with a message rather than rewritten.

use anyhow::{Result, bail};
use nix::unistd::{Gid, Uid};

use super::{SERVER_NAME, TOKEN_VAR, dotenv};
use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

/// Our entry, indented by `indent` spaces.
pub fn block(url: &str, indent: usize) -> Vec<String> {
    let p = " ".repeat(indent);
    vec![
        format!("{p}{SERVER_NAME}:"),
        format!("{p}  url: \"{url}\""),
        format!("{p}  headers:"),
        format!("{p}    Authorization: \"Bearer ${{{TOKEN_VAR}}}\""),
        format!("{p}  enabled: true"),
    ]
}

/// Where things are in the file.
struct Found {
    /// Line index of `mcp_servers:`.
    key: usize,
    /// One past the last line of the mcp_servers mapping.
    end: usize,
    /// Indent of its children.
    child_indent: usize,
    /// Line range of our entry, if present.
    entry: Option<(usize, usize)>,
}

fn locate(lines: &mut [String], path: &str) -> Result<Option<Found>> {
    let Some(key) = lines.iter().position(|l| l.starts_with("mcp_servers:")) else {
        return Ok(None);
    };
    let rest = lines[key]["mcp_servers:".len()..].trim();
    let rest_no_comment = rest.split(" #").next().unwrap_or("").trim();
    match rest_no_comment {
        "" | "#" => {}
        "{}" | "null" | "~" => lines[key] = "mcp_servers:".into(),
        _ if rest.starts_with('#') => {}
        _ => bail!(
            "{path}: `mcp_servers:` is written in flow style; rewrite it as a block mapping and re-run `hb wire-mcp`"
        ),
    }
    let mut end = key + 1;
    while end < lines.len() && (!is_content(&lines[end]) || indent_of(&lines[end]) > 0) {
        end += 1;
    }
    // Trailing blank or comment lines belong to whatever follows.
    while end > key + 1 && !is_content(&lines[end - 1]) {
        end -= 1;
    }
    let child_indent = lines[key + 1..end]
        .iter()
        .find(|l| is_content(l))
        .map_or(2, |l| indent_of(l));
    let mut entry = None;
    let mut i = key + 1;
    while i < end {
        let l = &lines[i];
        if is_content(l) && indent_of(l) == child_indent && {
            let t = l.trim();
            t == format!("{SERVER_NAME}:") || t.starts_with(&format!("{SERVER_NAME}: #"))
        } {
            let mut j = i + 1;
            while j < end && (!is_content(&lines[j]) || indent_of(&lines[j]) > child_indent) {
                j += 1;
            }
            while j > i + 1 && !is_content(&lines[j - 1]) {
                j -= 1;
            }
            entry = Some((i, j));
            break;
        }
        i += 1;
    }
    Ok(Some(Found {
        key,
        end,
        child_indent,
        entry,
    }))
}

fn config_path(paths: &Paths) -> std::path::PathBuf {
    paths.hermes_home().join("config.yaml")
}

fn split(text: &str) -> Vec<String> {
    text.lines().map(str::to_string).collect()
}

fn join(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        lines.join("\n") + "\n"
    }
}

/// The config text with our entry in place.
pub fn edited(text: &str, url: &str, path: &str) -> Result<String> {
    let mut lines = split(text);
    match locate(&mut lines, path)? {
        None => {
            if lines.last().is_some_and(|l| !l.trim().is_empty()) {
                lines.push(String::new());
            }
            lines.push("mcp_servers:".into());
            lines.extend(block(url, 2));
        }
        Some(f) => {
            let new = block(url, f.child_indent);
            match f.entry {
                Some((a, b)) => {
                    lines.splice(a..b, new);
                }
                None => {
                    let _ = f.end;
                    lines.splice(f.key + 1..f.key + 1, new);
                }
            }
        }
    }
    Ok(join(&lines))
}

/// The config text without our entry (`None` when there is nothing to remove).
pub fn without(text: &str, url: &str, path: &str) -> Result<Option<String>> {
    let mut lines = split(text);
    let Some(f) = locate(&mut lines, path)? else {
        return Ok(None);
    };
    let Some((a, b)) = f.entry else {
        return Ok(None);
    };
    // Only remove an entry pointing at our URL (a user's own `executor` stays).
    if !lines[a..b].iter().any(|l| l.contains(url)) {
        return Ok(None);
    }
    lines.drain(a..b);
    if !lines[f.key + 1..f.end - (b - a)]
        .iter()
        .any(|l| is_content(l))
    {
        lines[f.key] = "mcp_servers: {}".into();
    }
    Ok(Some(join(&lines)))
}

pub fn wire(paths: &Paths, url: &str, token: &str, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let path = config_path(paths);
    let old = read_optional(&path)?;
    let new = edited(
        old.as_deref().unwrap_or(""),
        url,
        &path.display().to_string(),
    )?;
    let mut changed = false;
    if old.as_deref() != Some(new.as_str()) {
        write_private(&path, new.as_bytes(), 0o600, owner)?;
        changed = true;
    }
    changed |= dotenv::set(
        &paths.hermes_home().join(".env"),
        TOKEN_VAR,
        Some(token),
        owner,
    )?;
    Ok(changed)
}

pub fn unwire(paths: &Paths, url: &str, owner: Option<(Uid, Gid)>) -> Result<bool> {
    let mut changed = dotenv::set(&paths.hermes_home().join(".env"), TOKEN_VAR, None, owner)?;
    let path = config_path(paths);
    if let Some(old) = read_optional(&path)?
        && let Some(new) = without(&old, url, &path.display().to_string())?
    {
        write_private(&path, new.as_bytes(), 0o600, owner)?;
        changed = true;
    }
    Ok(changed)
}

pub fn check(paths: &Paths, url: &str, token: &str) -> Result<(), String> {
    let path = config_path(paths);
    let text = read_optional(&path)
        .map_err(|e| format!("{e:#}"))?
        .ok_or_else(|| format!("{} does not exist", path.display()))?;
    let mut lines = split(&text);
    let f = locate(&mut lines, &path.display().to_string())
        .map_err(|e| format!("{e:#}"))?
        .ok_or("config.yaml has no mcp_servers")?;
    let (a, b) = f.entry.ok_or("config.yaml has no mcp_servers.executor")?;
    if lines[a..b] != block(url, f.child_indent)[..] {
        return Err("mcp_servers.executor in config.yaml is not the current wiring".into());
    }
    if dotenv::get(&paths.hermes_home().join(".env"), TOKEN_VAR).as_deref() != Some(token) {
        return Err(format!(
            "$HERMES_HOME/.env does not hold the current {TOKEN_VAR}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:4788/mcp";

    #[test]
    fn adds_to_a_file_without_mcp_servers() {
        let out = edited("model: x   # mine\n", URL, "c").unwrap();
        assert_eq!(
            out,
            "model: x   # mine\n\nmcp_servers:\n  executor:\n    url: \"http://127.0.0.1:4788/mcp\"\n    headers:\n      Authorization: \"Bearer ${EXECUTOR_MCP_TOKEN}\"\n    enabled: true\n"
        );
        assert_eq!(edited(&out, URL, "c").unwrap(), out, "idempotent");
    }

    #[test]
    fn replaces_a_stale_entry_and_keeps_other_servers_and_comments() {
        let text = "# top\nmcp_servers:\n    github:   # keep me\n        url: https://x\n\n    executor:\n        command: executor\n        args: [mcp]\n    other:\n        url: http://y\nterminal:\n  backend: local\n";
        let out = edited(text, URL, "c").unwrap();
        assert_eq!(
            out,
            "# top\nmcp_servers:\n    github:   # keep me\n        url: https://x\n\n    executor:\n      url: \"http://127.0.0.1:4788/mcp\"\n      headers:\n        Authorization: \"Bearer ${EXECUTOR_MCP_TOKEN}\"\n      enabled: true\n    other:\n        url: http://y\nterminal:\n  backend: local\n"
        );
        let back = without(&out, URL, "c").unwrap().unwrap();
        assert_eq!(
            back,
            "# top\nmcp_servers:\n    github:   # keep me\n        url: https://x\n\n    other:\n        url: http://y\nterminal:\n  backend: local\n"
        );
    }

    #[test]
    fn empty_forms_and_flow_style() {
        for empty in ["mcp_servers: {}\n", "mcp_servers:\n", "mcp_servers: null\n"] {
            let out = edited(empty, URL, "c").unwrap();
            assert!(out.starts_with("mcp_servers:\n  executor:\n"), "{out}");
            assert_eq!(
                without(&out, URL, "c").unwrap().unwrap(),
                "mcp_servers: {}\n"
            );
        }
        let err = edited("mcp_servers: {a: {url: b}}\n", URL, "c").unwrap_err();
        assert!(err.to_string().contains("flow style"), "{err}");
        // A user's own `executor` pointing elsewhere is not removed.
        let theirs = "mcp_servers:\n  executor:\n    url: http://elsewhere/mcp\n";
        assert!(without(theirs, URL, "c").unwrap().is_none());
    }
}
