//! A small MCP server for tests that behaves like Executor (TS SDK, JSON replies, sessions,
//! 202 for notifications) and can misbehave on purpose, plus raw-socket impostors.
//!
//! Shared by box-proto's and hb-guest's tests (`#[path]`-included), so no test helpers
//! from either crate are used here.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode};
use axum::routing::any;

/// What the server does wrong (or right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Executor's behaviour: 200 JSON + session, 202, DELETE 200.
    Healthy,
    /// The reply as SSE: priming event, a notification, a response to another id, ours.
    Sse,
    /// 200 with a body that is not JSON.
    BadJson,
    /// A protocol version nobody knows.
    WrongVersion,
    /// 200 text/html.
    WrongContentType,
    /// 404 page for every path.
    NotFound,
    /// 500 for initialize.
    ServerError,
    /// 500 whose body echoes the request's Authorization header.
    EchoToken,
    /// Accepts the request and never answers.
    Hang,
    /// Healthy initialize, but `notifications/initialized` gets 400.
    RejectInitialized,
    /// JSON-RPC error object instead of a result.
    RpcError,
    /// A response with another id.
    WrongId,
    /// Healthy, without a session id (a stateless server).
    NoSession,
}

/// One request the server saw (headers lower-cased).
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    mode: Mode,
    token: Option<String>,
    seen: Mutex<Vec<Seen>>,
}

/// A running test server. It lives until the test process ends.
pub struct TestServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

pub const SESSION: &str = "3f1c-test-session";

impl TestServer {
    /// Starts a server in `mode` that requires `Authorization: Bearer <token>` when
    /// `token` is set (401 otherwise, like Executor).
    pub fn start(mode: Mode, token: Option<&str>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind test server");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            mode,
            token: token.map(str::to_string),
            seen: Mutex::new(Vec::new()),
        });
        let state = shared.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let app = Router::new()
                    .route("/mcp", any(handle))
                    .fallback(not_found)
                    .with_state(state);
                axum::serve(listener, app).await.expect("serve");
            });
        });
        TestServer { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("lock").clone()
    }
}

async fn not_found() -> Response<Body> {
    reply(
        StatusCode::NOT_FOUND,
        "text/html",
        "<html><h1>404 Not Found</h1></html>",
    )
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(body.into())
        .expect("response")
}

fn init_result(id: &serde_json::Value, version: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "executor", "version": "1.0.0"}
        }
    })
    .to_string()
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    headers: HeaderMap,
    body: String,
) -> Response<Body> {
    shared.seen.lock().expect("lock").push(Seen {
        method: method.to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.clone(),
    });
    let mode = shared.mode;
    if mode == Mode::NotFound {
        return not_found().await;
    }
    if mode == Mode::Hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if mode == Mode::EchoToken {
        return reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("internal error while handling header {auth}"),
        );
    }
    if let Some(t) = &shared.token
        && auth != format!("Bearer {t}")
    {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Bearer realm=\"executor\"")
            .body(Body::from("Unauthorized"))
            .expect("response");
    }
    if method == Method::DELETE {
        return reply(StatusCode::OK, "application/json", "");
    }
    if method != Method::POST {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "application/json", "{}");
    }
    let accept = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        return reply(StatusCode::NOT_ACCEPTABLE, "application/json", "{}");
    }
    let msg: serde_json::Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(_) => {
            return reply(
                StatusCode::BAD_REQUEST,
                "application/json",
                r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#,
            );
        }
    };
    let rpc_method = msg["method"].as_str().unwrap_or("");
    if rpc_method == "notifications/initialized" {
        if mode == Mode::RejectInitialized {
            return reply(StatusCode::BAD_REQUEST, "application/json", "{}");
        }
        if mode != Mode::NoSession && headers.get("mcp-session-id").is_none() {
            return reply(StatusCode::BAD_REQUEST, "application/json", "{}");
        }
        return Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(Body::empty())
            .expect("response");
    }
    if rpc_method != "initialize" {
        return reply(StatusCode::BAD_REQUEST, "application/json", "{}");
    }
    let id = msg["id"].clone();
    let (status, content_type, body): (StatusCode, &str, String) = match mode {
        Mode::BadJson => (
            StatusCode::OK,
            "application/json",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{".into(),
        ),
        Mode::WrongVersion => (
            StatusCode::OK,
            "application/json",
            init_result(&id, "1999-12-31"),
        ),
        Mode::WrongContentType => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            "<html>hello</html>".into(),
        ),
        Mode::ServerError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "application/json",
            r#"{"jsonrpc":"2.0","error":{"code":-32603,"message":"Internal error"},"id":null}"#
                .into(),
        ),
        Mode::RpcError => (
            StatusCode::OK,
            "application/json",
            serde_json::json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"Unsupported protocol"}}).to_string(),
        ),
        Mode::WrongId => (
            StatusCode::OK,
            "application/json",
            init_result(&serde_json::json!(42), "2025-11-25"),
        ),
        Mode::Sse => (
            StatusCode::OK,
            "text/event-stream",
            format!(
                "id: prime-0\ndata:\n\n: keep-alive\n\nevent: message\ndata: {}\n\ndata: {}\n\nevent: message\nid: 1\ndata: {}\n\n",
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}"#,
                init_result(&serde_json::json!(99), "2025-11-25"),
                init_result(&id, "2025-06-18"),
            ),
        ),
        _ => (
            StatusCode::OK,
            "application/json",
            init_result(&id, "2025-11-25"),
        ),
    };
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", content_type);
    if mode != Mode::NoSession {
        builder = builder.header("mcp-session-id", SESSION);
    }
    builder.body(Body::from(body)).expect("response")
}

/// What a raw-socket impostor does with each connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    /// Reads the request and never answers (a bare listening socket).
    Silent,
    /// Accepts and closes at once.
    Close,
    /// Sends a non-HTTP banner, then closes.
    Banner,
    /// Sends SSE headers and a priming event, then keeps the stream open forever.
    SseStall,
}

/// Starts a raw TCP impostor on 127.0.0.1; returns its address.
pub fn raw_server(kind: Raw) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind raw server");
    let addr = listener.local_addr().expect("local addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                match kind {
                    Raw::Close => drop(conn),
                    Raw::Banner => {
                        let _ = conn.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
                    }
                    Raw::Silent => {
                        let _ = conn.read(&mut buf);
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                    Raw::SseStall => {
                        let _ = conn.read(&mut buf);
                        let _ = conn.write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nmcp-session-id: s1\r\ntransfer-encoding: chunked\r\n\r\n",
                        );
                        let chunk = b"id: 0\ndata:\n\n";
                        let _ = conn.write_all(format!("{:x}\r\n", chunk.len()).as_bytes());
                        let _ = conn.write_all(chunk);
                        let _ = conn.write_all(b"\r\n");
                        let _ = conn.flush();
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                }
            });
        }
    });
    addr
}

/// A port on 127.0.0.1 with nothing listening (bound, then released).
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}
