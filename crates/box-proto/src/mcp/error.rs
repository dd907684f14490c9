//! Why a server is not a healthy MCP endpoint, in words a user can act on.

use std::fmt;

/// Which request of the handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Initialize,
    Initialized,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Initialize => "initialize",
            Stage::Initialized => "notifications/initialized",
        })
    }
}

/// One reason the handshake failed. Messages never contain the token: they are built
/// from status codes, header values and redacted, truncated body snippets.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    #[error("bad MCP URL {url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("nothing is listening at {url} ({reason}); is Executor running? (`hb status`)")]
    Refused { url: String, reason: String },
    #[error(
        "{stage}: no answer from {url} within {secs:.1} s ({what}); the server accepted the connection but hangs"
    )]
    Timeout {
        stage: Stage,
        url: String,
        secs: f64,
        what: String,
    },
    #[error(
        "{stage}: {url} does not speak HTTP ({reason}); something other than Executor holds the port"
    )]
    NotHttp {
        stage: Stage,
        url: String,
        reason: String,
    },
    #[error(
        "{stage}: HTTP {status}: the server rejected the bearer token (wrong or missing token; re-run `hb wire-mcp` or check `hb token`)"
    )]
    Unauthorized { stage: Stage, status: u16 },
    #[error(
        "{stage}: HTTP 404 at {url}: no MCP endpoint there (a different server holds the port, or the path is wrong){snippet}"
    )]
    NotFound {
        stage: Stage,
        url: String,
        snippet: String,
    },
    #[error("{stage}: HTTP {status} from the server (expected {expected}){snippet}")]
    Status {
        stage: Stage,
        status: u16,
        expected: &'static str,
        snippet: String,
    },
    #[error(
        "initialize: reply has Content-Type {content_type:?}; an MCP server answers application/json or text/event-stream"
    )]
    ContentType { content_type: String },
    #[error("initialize: malformed reply: {detail}")]
    Malformed { detail: String },
    #[error("initialize: the server answered with JSON-RPC error {code}: {message}")]
    RpcError { code: i64, message: String },
    #[error(
        "initialize: the server speaks MCP protocol {got:?}, which this client does not know (known: {known})"
    )]
    UnknownVersion { got: String, known: String },
}

impl ProbeError {
    /// A short machine-readable kind for `--json` output and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            ProbeError::BadUrl { .. } => "bad-url",
            ProbeError::Refused { .. } => "refused",
            ProbeError::Timeout { .. } => "timeout",
            ProbeError::NotHttp { .. } => "not-http",
            ProbeError::Unauthorized { .. } => "unauthorized",
            ProbeError::NotFound { .. } => "not-found",
            ProbeError::Status { .. } => "http-status",
            ProbeError::ContentType { .. } => "content-type",
            ProbeError::Malformed { .. } => "malformed",
            ProbeError::RpcError { .. } => "rpc-error",
            ProbeError::UnknownVersion { .. } => "unknown-version",
        }
    }
}
