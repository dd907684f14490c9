//! Wiring Claude Code, Codex and Hermes to Executor's MCP endpoint.
//!
//! The token reaches each client without argv and, where the client allows it, without
//! its config file: Claude Code through a `headersHelper` script reading the 0600 env
//! file, Codex through `bearer_token_env_var` with the value in `$CODEX_HOME/.env`, Hermes
//! through `${EXECUTOR_MCP_TOKEN}` with the value in `~/.hermes/.env`. A marker records
//! what was wired (version, URL, a hash of the token, clients), so a repeat run with the
//! same inputs touches nothing.

pub mod claude;
pub mod codex;
pub mod dotenv;
pub mod hermes;

use anyhow::Result;
use box_proto::mcp::BearerToken;
use nix::unistd::{Gid, Uid};
use sha2::{Digest, Sha256};

use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;

/// Bump when the shape of the wiring changes: the next run rewires every box.
pub const WIRE_VERSION: &str = "hb-http-v1";
/// The env var every client reads the token from.
pub const TOKEN_VAR: &str = "EXECUTOR_MCP_TOKEN";
/// The server name in every client's config.
pub const SERVER_NAME: &str = "executor";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Claude,
    Codex,
    Hermes,
}

impl Client {
    pub fn name(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Codex => "codex",
            Client::Hermes => "hermes",
        }
    }
}

/// Which clients to wire: Claude Code and Codex always, Hermes when it is installed (its
/// binary is on PATH or its config exists).
pub fn clients(paths: &Paths) -> Vec<Client> {
    let mut v = vec![Client::Claude, Client::Codex];
    if crate::executor::find_tool("hermes").is_some()
        || paths.hermes_home().join("config.yaml").exists()
    {
        v.push(Client::Hermes);
    }
    v
}

fn marker_text(url: &str, token: &BearerToken, clients: &[Client]) -> String {
    let hash = hex::encode(Sha256::digest(token.expose().as_bytes()));
    let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
    format!(
        "version={WIRE_VERSION}\nurl={url}\ntoken_sha256={hash}\nclients={}\n",
        names.join(",")
    )
}

/// Per-client problems with the wiring (empty when everything is current).
pub fn check(
    paths: &Paths,
    url: &str,
    token: &BearerToken,
    clients: &[Client],
) -> Vec<(Client, String)> {
    let mut problems = Vec::new();
    for c in clients {
        let r = match c {
            Client::Claude => claude::check(paths, url),
            Client::Codex => codex::check(paths, url, token.expose()),
            Client::Hermes => hermes::check(paths, url, token.expose()),
        };
        if let Err(e) = r {
            problems.push((*c, e));
        }
    }
    if dotenv::get(&paths.mcp_env(), TOKEN_VAR).as_deref() != Some(token.expose()) {
        problems.push((
            Client::Claude,
            format!(
                "{} does not hold the current token",
                paths.mcp_env().display()
            ),
        ));
    }
    problems
}

/// Whether the marker says this exact wiring was done and the files still agree.
pub fn is_current(paths: &Paths, url: &str, token: &BearerToken, clients: &[Client]) -> bool {
    read_optional(&paths.wire_marker())
        .ok()
        .flatten()
        .as_deref()
        == Some(marker_text(url, token, clients).as_str())
        && check(paths, url, token, clients).is_empty()
}

/// What a wiring run did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub changed: Vec<&'static str>,
    pub unchanged: Vec<&'static str>,
}

/// Wires every client. A failure leaves the marker unwritten, so the next run retries.
pub fn wire(
    paths: &Paths,
    url: &str,
    token: &BearerToken,
    clients: &[Client],
    owner: Option<(Uid, Gid)>,
) -> Result<Outcome> {
    crate::token::check_charset(token)?;
    let mut out = Outcome::default();
    let env = format!(
        "# Written by `hb wire-mcp`; sourced by /etc/profile.d/hermes-box.sh. Keep 0600.\nexport {TOKEN_VAR}={}\n",
        token.expose()
    );
    if read_optional(&paths.mcp_env())?.as_deref() != Some(env.as_str()) {
        write_private(&paths.mcp_env(), env.as_bytes(), 0o600, owner)?;
    }
    for c in clients {
        let changed = match c {
            Client::Claude => claude::wire(paths, url, owner)?,
            Client::Codex => codex::wire(paths, url, token.expose(), owner)?,
            Client::Hermes => hermes::wire(paths, url, token.expose(), owner)?,
        };
        if changed {
            out.changed.push(c.name());
        } else {
            out.unchanged.push(c.name());
        }
    }
    write_private(
        &paths.wire_marker(),
        marker_text(url, token, clients).as_bytes(),
        0o600,
        owner,
    )?;
    Ok(out)
}

/// Removes our wiring from every client, the env file, the helper and the marker.
pub fn unwire(paths: &Paths, url: &str, owner: Option<(Uid, Gid)>) -> Result<Vec<&'static str>> {
    let mut changed = Vec::new();
    if claude::unwire(paths, url, owner)? {
        changed.push("claude");
    }
    if codex::unwire(paths, url, owner)? {
        changed.push("codex");
    }
    if hermes::unwire(paths, url, owner)? {
        changed.push("hermes");
    }
    let _ = std::fs::remove_file(paths.mcp_env());
    let _ = std::fs::remove_file(paths.wire_marker());
    Ok(changed)
}
