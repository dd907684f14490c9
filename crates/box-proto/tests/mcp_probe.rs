//! The MCP health probe against a test server that misbehaves on purpose: every way a
//! server can be "listening but not a working MCP endpoint" must come back unhealthy, with
//! an error that says which, and the token must never leak into an error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mcp_server;

use std::time::{Duration, Instant};

use box_proto::mcp::{BearerToken, ProbeError, ProbeOptions, ReplyKind, probe};
use mcp_server::{Mode, Raw, SESSION, TestServer, closed_port, raw_server};

const TOKEN: &str = "-tok_4f9d0c2b8e71a6d3f5e2c9b0a1d4e7f8a9b0c1d2e3";

fn token() -> BearerToken {
    BearerToken::new(TOKEN).unwrap()
}

fn fast() -> ProbeOptions {
    ProbeOptions {
        connect_timeout: Duration::from_millis(500),
        total_timeout: Duration::from_millis(1500),
    }
}

/// Probes a server in `mode` and returns the error, checking it never holds the token.
fn unhealthy(mode: Mode) -> (ProbeError, TestServer) {
    let server = TestServer::start(mode, Some(TOKEN));
    let err = probe(&server.url(), Some(&token()), &fast()).expect_err("must be unhealthy");
    assert_no_token(&err);
    (err, server)
}

fn assert_no_token(err: &ProbeError) {
    let shown = format!("{err} / {err:?}");
    assert!(!shown.contains(TOKEN), "token leaked: {shown}");
    assert!(!shown.contains("4f9d0c2b"), "token leaked: {shown}");
}

#[test]
fn healthy_server_completes_the_handshake_and_closes_the_session() {
    let server = TestServer::start(Mode::Healthy, Some(TOKEN));
    let ok = probe(&server.url(), Some(&token()), &ProbeOptions::default()).unwrap();
    assert_eq!(ok.protocol_version, "2025-11-25");
    assert_eq!(ok.server.name, "executor");
    assert_eq!(ok.reply, ReplyKind::Json);
    assert!(ok.session);
    assert_eq!(ok.initialized_status, 202);

    let seen = server.seen();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["POST", "POST", "DELETE"]);
    let init = &seen[0];
    assert_eq!(
        init.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(init.header("content-type"), Some("application/json"));
    assert_eq!(
        init.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    let body: serde_json::Value = serde_json::from_str(&init.body).unwrap();
    assert_eq!(body["params"]["protocolVersion"], "2025-11-25");
    let notif = &seen[1];
    assert!(notif.body.contains("notifications/initialized"));
    assert_eq!(notif.header("mcp-session-id"), Some(SESSION));
    assert_eq!(notif.header("mcp-protocol-version"), Some("2025-11-25"));
    assert_eq!(seen[2].header("mcp-session-id"), Some(SESSION));
}

#[test]
fn sse_reply_is_parsed_past_priming_and_notifications() {
    let server = TestServer::start(Mode::Sse, Some(TOKEN));
    let ok = probe(&server.url(), Some(&token()), &fast()).unwrap();
    assert_eq!(ok.reply, ReplyKind::Sse);
    // The SSE answer negotiated an older version; the notification must carry it.
    assert_eq!(ok.protocol_version, "2025-06-18");
    assert_eq!(
        server.seen()[1].header("mcp-protocol-version"),
        Some("2025-06-18")
    );
}

#[test]
fn stateless_server_without_session_is_healthy() {
    let server = TestServer::start(Mode::NoSession, None);
    let ok = probe(&server.url(), None, &fast()).unwrap();
    assert!(!ok.session);
    assert_eq!(server.seen().len(), 2, "no DELETE without a session");
}

#[test]
fn wrong_token_is_unauthorized() {
    let server = TestServer::start(Mode::Healthy, Some(TOKEN));
    let wrong = BearerToken::new("not-the-token").unwrap();
    let err = probe(&server.url(), Some(&wrong), &fast()).unwrap_err();
    assert_eq!(err.kind(), "unauthorized", "{err}");
    assert!(err.to_string().contains("401"), "{err}");
    let err = probe(&server.url(), None, &fast()).unwrap_err();
    assert_eq!(err.kind(), "unauthorized", "{err}");
}

#[test]
fn each_misbehaviour_is_unhealthy_and_named() {
    let cases: &[(Mode, &str, &str)] = &[
        (Mode::BadJson, "malformed", "not a JSON-RPC object"),
        (Mode::WrongVersion, "unknown-version", "1999-12-31"),
        (Mode::WrongContentType, "content-type", "text/html"),
        (Mode::NotFound, "not-found", "404"),
        (Mode::ServerError, "http-status", "HTTP 500"),
        (
            Mode::RejectInitialized,
            "http-status",
            "notifications/initialized: HTTP 400",
        ),
        (Mode::RpcError, "rpc-error", "-32602"),
        (Mode::WrongId, "malformed", "does not match"),
    ];
    for (mode, kind, text) in cases {
        let (err, _server) = unhealthy(*mode);
        assert_eq!(err.kind(), *kind, "{mode:?}: {err}");
        assert!(err.to_string().contains(text), "{mode:?}: {err}");
    }
}

#[test]
fn bad_answers_still_close_the_session() {
    let (_, server) = unhealthy(Mode::WrongVersion);
    let methods: Vec<String> = server.seen().iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods, ["POST", "DELETE"]);
}

#[test]
fn a_server_echoing_the_token_does_not_leak_it_into_the_error() {
    let (err, _) = unhealthy(Mode::EchoToken);
    assert_eq!(err.kind(), "http-status");
    assert!(err.to_string().contains("[REDACTED]"), "{err}");
}

#[test]
fn hanging_server_times_out_within_the_budget() {
    for (what, url) in [
        (
            "axum handler that sleeps",
            TestServer::start(Mode::Hang, Some(TOKEN)).url(),
        ),
        (
            "bare listening socket",
            format!("http://{}/mcp", raw_server(Raw::Silent)),
        ),
        (
            "SSE stream that never answers",
            format!("http://{}/mcp", raw_server(Raw::SseStall)),
        ),
    ] {
        let start = Instant::now();
        let err = probe(&url, Some(&token()), &fast()).unwrap_err();
        let took = start.elapsed();
        assert_eq!(err.kind(), "timeout", "{what}: {err}");
        assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
        assert_no_token(&err);
    }
}

#[test]
fn default_budget_is_five_seconds() {
    let opts = ProbeOptions::default();
    assert_eq!(opts.connect_timeout, Duration::from_secs(2));
    assert_eq!(opts.total_timeout, Duration::from_secs(5));
}

#[test]
fn non_http_and_closed_ports_are_named() {
    let err = probe(
        &format!("http://127.0.0.1:{}/mcp", closed_port()),
        Some(&token()),
        &fast(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), "refused", "{err}");
    assert!(err.to_string().contains("nothing is listening"), "{err}");

    for kind in [Raw::Close, Raw::Banner] {
        let url = format!("http://{}/mcp", raw_server(kind));
        let err = probe(&url, Some(&token()), &fast()).unwrap_err();
        assert_eq!(err.kind(), "not-http", "{kind:?}: {err}");
        assert_no_token(&err);
    }
}

#[test]
fn bad_url_is_reported() {
    let err = probe("not a url", Some(&token()), &fast()).unwrap_err();
    assert_no_token(&err);
    assert!(
        matches!(err.kind(), "bad-url" | "not-http" | "refused"),
        "{err}"
    );
}
