//! The handshake over HTTP/1.1 (ureq, plain HTTP only: Executor listens on loopback or on a
//! published loopback port, never behind TLS).

use std::io::{BufReader, Read};
use std::time::{Duration, Instant};

use super::error::{ProbeError, Stage};
use super::sse;
use super::token::BearerToken;
use super::wire::{self, Implementation, printable};

/// Largest JSON reply we read.
const MAX_JSON_BYTES: u64 = 1 << 20;
/// The JSON-RPC id of our `initialize`.
const INIT_ID: u64 = 1;

/// Timeouts of a probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbeOptions {
    /// Bound on establishing each TCP connection.
    pub connect_timeout: Duration,
    /// Bound on the whole handshake (every request, body and the final DELETE).
    pub total_timeout: Duration,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            total_timeout: Duration::from_secs(5),
        }
    }
}

/// How the server sent its `initialize` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    Json,
    Sse,
}

/// What a healthy server told us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healthy {
    pub protocol_version: String,
    pub server: Implementation,
    pub reply: ReplyKind,
    /// Whether the server handed out a session (and we closed it).
    pub session: bool,
    /// Status of `notifications/initialized` (202 from a conforming server).
    pub initialized_status: u16,
    pub elapsed: Duration,
}

/// Runs the full handshake against `url` (e.g. `http://127.0.0.1:4788/mcp`).
/// `token` is sent as `Authorization: Bearer`; `None` sends no credential.
pub fn probe(
    url: &str,
    token: Option<&BearerToken>,
    opts: &ProbeOptions,
) -> Result<Healthy, ProbeError> {
    let mut client = Client {
        url,
        token,
        opts,
        start: Instant::now(),
    };
    let result = client.handshake();
    match (result, token) {
        (Err(e), Some(t)) => Err(redact(e, t)),
        (r, _) => r,
    }
}

struct Client<'a> {
    url: &'a str,
    token: Option<&'a BearerToken>,
    opts: &'a ProbeOptions,
    start: Instant,
}

impl Client<'_> {
    fn handshake(&mut self) -> Result<Healthy, ProbeError> {
        let (session, init) = self.initialize()?;
        let outcome = self.initialized(session.as_deref(), &init.0.protocol_version);
        if let Some(id) = &session {
            self.delete(id, &init.0.protocol_version);
        }
        let initialized_status = outcome?;
        Ok(Healthy {
            protocol_version: init.0.protocol_version,
            server: init.0.server_info,
            reply: init.1,
            session: session.is_some(),
            initialized_status,
            elapsed: self.start.elapsed(),
        })
    }

    fn agent(&self, cap: Option<Duration>) -> Result<ureq::Agent, ProbeError> {
        let left = self.opts.total_timeout.saturating_sub(self.start.elapsed());
        if left.is_zero() {
            return Err(self.timeout(Stage::Initialized, "the handshake's total time ran out"));
        }
        let left = cap.map_or(left, |c| c.min(left));
        Ok(ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.opts.connect_timeout.min(left)))
            .timeout_global(Some(left))
            .max_redirects(0)
            .max_redirects_will_error(false)
            .proxy(None)
            .user_agent(concat!("hermes-box-doctor/", env!("CARGO_PKG_VERSION")))
            .build()
            .into())
    }

    fn timeout(&self, stage: Stage, what: &str) -> ProbeError {
        ProbeError::Timeout {
            stage,
            url: self.url.to_string(),
            secs: self.start.elapsed().as_secs_f64(),
            what: what.to_string(),
        }
    }

    fn transport(&self, stage: Stage, e: ureq::Error) -> ProbeError {
        let url = self.url.to_string();
        match e {
            ureq::Error::Timeout(t) => self.timeout(stage, &format!("{t} timed out")),
            ureq::Error::BadUri(reason) => ProbeError::BadUrl { url, reason },
            ureq::Error::HostNotFound => ProbeError::Refused {
                url,
                reason: "host not found".into(),
            },
            ureq::Error::ConnectionFailed => ProbeError::Refused {
                url,
                reason: "connection failed".into(),
            },
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => ProbeError::Refused {
                    url,
                    reason: "connection refused".into(),
                },
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    self.timeout(stage, "read timed out")
                }
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    ProbeError::NotHttp {
                        stage,
                        url,
                        reason: "the connection closed without an HTTP response".into(),
                    }
                }
                _ => ProbeError::NotHttp {
                    stage,
                    url,
                    reason: printable(&io.to_string(), 120),
                },
            },
            other => ProbeError::NotHttp {
                stage,
                url,
                reason: printable(&other.to_string(), 120),
            },
        }
    }

    fn post(
        &self,
        stage: Stage,
        body: &str,
        extra: &[(&str, &str)],
    ) -> Result<ureq::http::Response<ureq::Body>, ProbeError> {
        let mut req = self
            .agent(None)?
            .post(self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json");
        if let Some(t) = self.token {
            req = req.header("Authorization", format!("Bearer {}", t.expose()));
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.send(body).map_err(|e| self.transport(stage, e))
    }

    /// Status codes every request treats the same way.
    fn check_status(
        &self,
        stage: Stage,
        resp: &mut ureq::http::Response<ureq::Body>,
        expected: &'static str,
    ) -> Result<(), ProbeError> {
        let status = resp.status().as_u16();
        let ok = match stage {
            Stage::Initialize => status == 200,
            Stage::Initialized => (200..300).contains(&status),
        };
        if ok {
            return Ok(());
        }
        // A short, printable piece of the body helps tell "Executor said no" from "some
        // other web server"; read at most 4 KiB of it and never wait long for it.
        let mut snippet = String::new();
        let _ = resp
            .body_mut()
            .as_reader()
            .take(4096)
            .read_to_string(&mut snippet);
        let snippet = match printable(snippet.trim(), 120) {
            s if s.is_empty() => String::new(),
            s => format!(": {s}"),
        };
        Err(match status {
            401 => ProbeError::Unauthorized { stage, status },
            404 => ProbeError::NotFound {
                stage,
                url: self.url.to_string(),
                snippet,
            },
            _ => ProbeError::Status {
                stage,
                status,
                expected,
                snippet,
            },
        })
    }

    fn initialize(
        &mut self,
    ) -> Result<(Option<String>, (wire::InitializeResult, ReplyKind)), ProbeError> {
        let stage = Stage::Initialize;
        let mut resp = self.post(stage, &wire::initialize_request(INIT_ID), &[])?;
        self.check_status(stage, &mut resp, "200")?;
        let session = match resp.headers().get("mcp-session-id") {
            None => None,
            Some(v) => {
                let bytes = v.as_bytes();
                if bytes.is_empty() || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
                    return Err(ProbeError::Malformed {
                        detail: "Mcp-Session-Id holds characters outside visible ASCII".into(),
                    });
                }
                Some(String::from_utf8_lossy(bytes).into_owned())
            }
        };
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let media = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let checked = match media.as_str() {
            "application/json" => {
                let text = resp
                    .body_mut()
                    .with_config()
                    .limit(MAX_JSON_BYTES)
                    .read_to_string()
                    .map_err(|e| self.body_error(stage, e))?;
                wire::check_initialize_reply(&text, INIT_ID).map(|r| (r, ReplyKind::Json))
            }
            "text/event-stream" => {
                let mut reader = BufReader::new(resp.body_mut().as_reader());
                match sse::find_response(&mut reader, INIT_ID) {
                    Ok(data) => {
                        wire::check_initialize_reply(&data, INIT_ID).map(|r| (r, ReplyKind::Sse))
                    }
                    Err(Ok(io)) => Err(self.body_error(stage, ureq::Error::from(io))),
                    Err(Err(e)) => Err(e),
                }
            }
            _ => Err(ProbeError::ContentType {
                content_type: printable(&content_type, 80),
            }),
        };
        match checked {
            Ok(ok) => Ok((session, ok)),
            Err(e) => {
                // The server made a session even though its answer was bad: close it.
                if let Some(id) = &session {
                    self.delete(id, super::PROTOCOL_VERSION);
                }
                Err(e)
            }
        }
    }

    fn body_error(&self, stage: Stage, e: ureq::Error) -> ProbeError {
        match e {
            ureq::Error::BodyExceedsLimit(n) => ProbeError::Malformed {
                detail: format!("reply body larger than {n} bytes"),
            },
            other => self.transport(stage, other),
        }
    }

    fn initialized(&self, session: Option<&str>, version: &str) -> Result<u16, ProbeError> {
        let stage = Stage::Initialized;
        let mut headers = vec![("MCP-Protocol-Version", version)];
        if let Some(id) = session {
            headers.push(("Mcp-Session-Id", id));
        }
        let mut resp = self.post(stage, wire::initialized_notification(), &headers)?;
        self.check_status(stage, &mut resp, "202")?;
        Ok(resp.status().as_u16())
    }

    /// Ends the session, best effort: 200, 204, 404 (expired) and 405 (not supported) are
    /// all fine, and so is a failure; at most one second of the budget goes to it.
    fn delete(&self, session: &str, version: &str) {
        let Ok(agent) = self.agent(Some(Duration::from_secs(1))) else {
            return;
        };
        let mut req = agent
            .delete(self.url)
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", version);
        if let Some(t) = self.token {
            req = req.header("Authorization", format!("Bearer {}", t.expose()));
        }
        let _ = req.call();
    }
}

/// Removes the token from every text field of an error (a hostile or buggy server could
/// echo our headers back in a body, a header or a JSON-RPC message).
fn redact(e: ProbeError, t: &BearerToken) -> ProbeError {
    let r = |s: String| t.redact(&s);
    match e {
        ProbeError::BadUrl { url, reason } => ProbeError::BadUrl {
            url: r(url),
            reason: r(reason),
        },
        ProbeError::Refused { url, reason } => ProbeError::Refused {
            url: r(url),
            reason: r(reason),
        },
        ProbeError::Timeout {
            stage,
            url,
            secs,
            what,
        } => ProbeError::Timeout {
            stage,
            url: r(url),
            secs,
            what: r(what),
        },
        ProbeError::NotHttp { stage, url, reason } => ProbeError::NotHttp {
            stage,
            url: r(url),
            reason: r(reason),
        },
        ProbeError::NotFound {
            stage,
            url,
            snippet,
        } => ProbeError::NotFound {
            stage,
            url: r(url),
            snippet: r(snippet),
        },
        ProbeError::Status {
            stage,
            status,
            expected,
            snippet,
        } => ProbeError::Status {
            stage,
            status,
            expected,
            snippet: r(snippet),
        },
        ProbeError::ContentType { content_type } => ProbeError::ContentType {
            content_type: r(content_type),
        },
        ProbeError::Malformed { detail } => ProbeError::Malformed { detail: r(detail) },
        ProbeError::RpcError { code, message } => ProbeError::RpcError {
            code,
            message: r(message),
        },
        ProbeError::UnknownVersion { got, known } => {
            ProbeError::UnknownVersion { got: r(got), known }
        }
        e @ ProbeError::Unauthorized { .. } => e,
    }
}
