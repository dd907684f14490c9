//! The real Codex CLI (npm `@openai/codex` 0.171.0, from scripts/setup.sh's
//! /opt/hermes-box-ci) opens its MCP session with the wiring `hb wire-mcp` writes: with
//! EXECUTOR_MCP_TOKEN unset in its environment, it must find the token where the wiring put
//! it (`$CODEX_HOME/.env`, named by `bearer_token_env_var`) and send it as
//! `Authorization: Bearer <token>` on every request of the handshake, which box-proto's test
//! MCP server records. `codex exec` starts its MCP servers as the session starts; the model
//! provider is pointed at a closed loopback port, so no LLM is ever contacted and the run is
//! killed once the handshake is seen. ~5 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../box-proto/tests/mcp_server/mod.rs"]
mod mcp_server;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Box_;
use mcp_server::{Mode, TestServer};

#[test]
fn codex_sends_the_token_from_its_env_file_as_the_authorization_header() {
    let Some(codex_bin) = common::require_tool("codex") else {
        return;
    };
    let mut b = Box_::new();
    b.init();
    b.ok(&["wire-mcp"]);
    let token = b.token().expect("minted token");
    // The server answers 401 to any other Authorization header (like Executor) and
    // records what it received; the wiring is pointed at its port.
    let server = TestServer::start(Mode::Healthy, Some(&token));
    b.port = server.addr.port();
    let out = b.ok(&["wire-mcp"]);
    assert!(out.contains("registered"), "{out}");

    let client_home = b.dir.path().join("client-home");
    std::fs::create_dir_all(&client_home).unwrap();
    let child = Command::new(&codex_bin)
        .args([
            "exec",
            "--skip-git-repo-check",
            "-c",
            "model_provider=\"dead\"",
            "-c",
            // A provider on a closed port (1): the turn fails locally, the MCP session
            // has already been opened by then.
            "model_providers.dead={name=\"dead\",base_url=\"http://127.0.0.1:1/v1\",wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}",
            "-m",
            "test-model",
            "say nothing",
        ])
        .current_dir(b.home().join("workspace"))
        .env("HOME", &client_home)
        .env("CODEX_HOME", b.home().join(".codex"))
        .env("PATH", b.path_env())
        .env("NO_COLOR", "1")
        .env_remove("EXECUTOR_MCP_TOKEN")
        .env_remove("OPENAI_API_KEY")
        .env_remove("CODEX_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: `codex` is a node launcher whose native child holds the
        // pipes, so the whole group is killed at the end.
        .process_group(0)
        .spawn()
        .unwrap();
    let handshake = common::wait_until(Duration::from_secs(60), || {
        server
            .seen()
            .iter()
            .any(|s| s.body.contains("notifications/initialized"))
    });
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let out = child.wait_with_output().unwrap();
    let text = b.record(&out);
    let seen = server.seen();
    assert!(
        handshake,
        "codex never finished the MCP handshake ({} requests seen):\n{text}",
        seen.len()
    );
    let init = seen
        .iter()
        .find(|s| s.method == "POST" && s.body.contains("\"initialize\""))
        .unwrap_or_else(|| panic!("codex sent no initialize:\n{text}"));
    // Compared, never printed.
    let want = format!("Bearer {token}");
    assert!(
        init.header("authorization") == Some(want.as_str()),
        "codex's initialize carried another Authorization header (value not shown)"
    );
    assert!(
        seen.iter()
            .filter(|s| s.method == "POST")
            .all(|s| s.header("authorization") == Some(want.as_str())),
        "a request without the token (values not shown)"
    );
    assert!(
        !b.transcript.borrow().contains(&token),
        "token in codex's output"
    );
}
