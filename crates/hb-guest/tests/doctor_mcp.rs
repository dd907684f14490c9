//! `hb doctor`'s MCP check and `hb up` against a server that misbehaves on purpose
//! (box-proto's test MCP server): each failure is a ✗ that names the problem and never
//! shows the token; the healthy server passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../box-proto/tests/mcp_server/mod.rs"]
mod mcp_server;

use std::time::{Duration, Instant};

use common::Box_;
use mcp_server::{Mode, TestServer};

/// A box whose "Executor" port is the test server's, with a minted token.
fn box_for(mode: Mode, server_token: Option<&str>) -> (Box_, TestServer, String) {
    let mut b = Box_::new();
    b.init();
    b.ok(&["wire-mcp"]);
    let token = b.token().unwrap();
    let server = TestServer::start(mode, Some(server_token.unwrap_or(&token)));
    b.port = server.addr.port();
    (b, server, token)
}

fn mcp_check(b: &Box_) -> serde_json::Value {
    let out = b.run(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "MCP handshake")
        .cloned()
        .unwrap_or_else(|| panic!("no MCP check: {v}"));
    if c["ok"] == false {
        assert_eq!(
            out.status.code(),
            Some(1),
            "doctor must exit 1 on a failed check"
        );
    }
    c
}

#[test]
fn healthy_server_passes_and_each_misbehaviour_fails_with_its_reason() {
    let (b, server, _) = box_for(Mode::Healthy, None);
    let c = mcp_check(&b);
    assert_eq!(c["ok"], true, "{c}");
    assert!(c["detail"].as_str().unwrap().contains("2025-11-25"));
    assert!(
        server.seen().iter().any(|s| s.method == "DELETE"),
        "session not closed"
    );

    for (mode, needle) in [
        (Mode::NotFound, "404"),
        (Mode::ServerError, "HTTP 500"),
        (Mode::BadJson, "malformed"),
        (Mode::WrongVersion, "1999-12-31"),
        (Mode::WrongContentType, "text/html"),
        (Mode::EchoToken, "[REDACTED]"),
    ] {
        let (b, _server, token) = box_for(mode, None);
        let c = mcp_check(&b);
        assert_eq!(c["ok"], false, "{mode:?}: {c}");
        let detail = c["detail"].as_str().unwrap();
        assert!(detail.contains(needle), "{mode:?}: {detail}");
        assert!(
            !b.transcript.borrow().contains(&token),
            "{mode:?} leaked the token"
        );
    }

    let (b, _server, token) = box_for(Mode::Healthy, Some("some-other-token"));
    let c = mcp_check(&b);
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("rejected the bearer token"),
        "{c}"
    );
    assert!(c["fix"].as_str().unwrap().contains("hb wire-mcp"), "{c}");
    assert!(!b.transcript.borrow().contains(&token));
}

#[test]
fn a_hanging_server_fails_within_the_timeout() {
    let (b, _server, _) = box_for(Mode::Hang, None);
    let start = Instant::now();
    let c = mcp_check(&b);
    assert_eq!(c["ok"], false);
    assert!(c["detail"].as_str().unwrap().contains("hangs"), "{c}");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );
}
