//! The MCP health handshake, shared by `hb doctor` (guest) and `box doctor`/`open` (host).
//!
//! Executor speaks MCP "Streamable HTTP" at `/mcp`. A listening port proves little: a hung
//! process, a 404 page or a server that rejects our token all listen. So health means a
//! complete legacy handshake, as the MCP specification's 2025-11-25 lifecycle and
//! transports define it (Executor's TypeScript SDK speaks only the legacy protocols, up to
//! 2025-11-25):
//!
//! 1. POST `initialize` (protocol [`PROTOCOL_VERSION`]) and accept a JSON or an SSE reply;
//!    check the JSON-RPC id, that `result.protocolVersion` is one we know and that
//!    `serverInfo` names the server;
//! 2. POST `notifications/initialized` with the session id and the negotiated version
//!    (202 expected, any 2xx accepted);
//! 3. DELETE the session, best effort.
//!
//! Every request is bounded ([`ProbeOptions`]). The token lives in a [`BearerToken`] and
//! never appears in an error, a `Debug` string or a panic message.
//!
//! The reply parsing ([`wire`], [`sse`]) is pure, so it can be fuzzed and property-tested
//! without a server.

mod error;
mod probe;
pub mod sse;
mod token;
pub mod wire;

pub use error::{ProbeError, Stage};
pub use probe::{Healthy, ProbeOptions, ReplyKind, probe};
pub use token::BearerToken;

/// The protocol version we ask for: the newest one that still has `initialize`.
/// (2026-07-28 is stateless and has no handshake; Executor's TS SDK 1.29 does not speak it.)
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// Versions a server may answer with that we accept as MCP (the legacy, session era).
pub const KNOWN_VERSIONS: &[&str] = &[
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    "2024-10-07",
];

/// The client name we announce, so a server log shows who probed it.
pub const CLIENT_NAME: &str = "hermes-box-doctor";

/// Executor's MCP endpoint on a given loopback port.
pub fn executor_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}
