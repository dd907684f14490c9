//! JSON-RPC messages of the handshake, hand-written: rmcp (the official Rust SDK) had three
//! majors in 2026 and its defaults target the stateless 2026-07-28 protocol, which has no
//! `initialize`; four small types do.
//! Unknown fields are ignored everywhere, so newer servers still parse.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ProbeError;
use super::{CLIENT_NAME, KNOWN_VERSIONS, PROTOCOL_VERSION};

#[derive(Debug, Serialize)]
struct Request<'a, P: Serialize> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: P,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams<'a> {
    protocol_version: &'a str,
    capabilities: serde_json::Map<String, Value>,
    client_info: Implementation,
}

/// `Implementation` in the MCP schema: `name` and `version` are required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
}

/// The part of `InitializeResult` a health check needs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub protocol_version: String,
    pub capabilities: serde_json::Map<String, Value>,
    pub server_info: Implementation,
}

#[derive(Debug, Deserialize)]
struct Response {
    jsonrpc: Option<String>,
    #[serde(default)]
    id: Value,
    result: Option<Value>,
    error: Option<RpcErrorObject>,
}

#[derive(Debug, Deserialize)]
struct RpcErrorObject {
    code: i64,
    message: String,
}

/// The `initialize` request body with JSON-RPC id `id`.
pub fn initialize_request(id: u64) -> String {
    let req = Request {
        jsonrpc: "2.0",
        id,
        method: "initialize",
        params: InitializeParams {
            protocol_version: PROTOCOL_VERSION,
            capabilities: serde_json::Map::new(),
            client_info: Implementation {
                name: CLIENT_NAME.into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
        },
    };
    serde_json::to_string(&req).unwrap_or_default()
}

/// The `notifications/initialized` body (a notification: no id).
pub fn initialized_notification() -> &'static str {
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
}

/// Whether a JSON-RPC message is the response to request `id` (used to pick our answer out
/// of an SSE stream that may also carry server notifications and requests).
pub fn is_response_to(message: &Value, id: u64) -> bool {
    message.get("id").and_then(Value::as_u64) == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// Checks the reply to `initialize` request `id`: JSON-RPC 2.0, our id, no error, a known
/// protocol version, a `serverInfo` with a non-empty name and a `capabilities` object.
pub fn check_initialize_reply(text: &str, id: u64) -> Result<InitializeResult, ProbeError> {
    let malformed = |detail: String| ProbeError::Malformed {
        detail: printable(&detail, 200),
    };
    let response: Response = serde_json::from_str(text)
        .map_err(|e| malformed(format!("not a JSON-RPC object ({e})")))?;
    if response.jsonrpc.as_deref() != Some("2.0") {
        return Err(malformed("\"jsonrpc\" is not \"2.0\"".into()));
    }
    if let Some(err) = response.error {
        return Err(ProbeError::RpcError {
            code: err.code,
            message: printable(&err.message, 200),
        });
    }
    if response.id.as_u64() != Some(id) {
        return Err(malformed(format!(
            "response id {} does not match request id {id}",
            printable(&response.id.to_string(), 40)
        )));
    }
    let result = response
        .result
        .ok_or_else(|| malformed("neither \"result\" nor \"error\"".into()))?;
    let result: InitializeResult = serde_json::from_value(result).map_err(|e| {
        malformed(format!(
            "\"result\" is not an InitializeResult (needs protocolVersion, capabilities and serverInfo.name/version: {e})"
        ))
    })?;
    if !KNOWN_VERSIONS.contains(&result.protocol_version.as_str()) {
        return Err(ProbeError::UnknownVersion {
            got: printable(&result.protocol_version, 40),
            known: KNOWN_VERSIONS.join(", "),
        });
    }
    if result.server_info.name.trim().is_empty() {
        return Err(malformed("serverInfo.name is empty".into()));
    }
    Ok(result)
}

/// Server text made safe for one line of a terminal ([`crate::escape::shown`]), cut at
/// `max` characters.
pub fn printable(text: &str, max: usize) -> String {
    let kept: String = text.chars().take(max).collect();
    let mut out = crate::escape::shown(kept.as_bytes());
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"executor","version":"1.0.0"},"extra":1}}"#;

    #[test]
    fn request_has_the_fields_the_spec_requires() {
        let v: Value = serde_json::from_str(&initialize_request(7)).unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["id"], 7);
        assert_eq!(v["method"], "initialize");
        assert_eq!(v["params"]["protocolVersion"], PROTOCOL_VERSION);
        assert!(v["params"]["capabilities"].is_object());
        assert_eq!(v["params"]["clientInfo"]["name"], CLIENT_NAME);
        assert!(v["params"]["clientInfo"]["version"].is_string());
    }

    #[test]
    fn accepts_executor_reply() {
        let r = check_initialize_reply(GOOD, 1).unwrap();
        assert_eq!(r.server_info.name, "executor");
        assert_eq!(r.protocol_version, "2025-11-25");
    }

    #[test]
    fn rejects_each_defect_with_its_own_message() {
        let cases: &[(&str, &str)] = &[
            ("<html>404</html>", "not a JSON-RPC object"),
            ("", "not a JSON-RPC object"),
            ("[]", "not a JSON-RPC object"),
            (&GOOD.replace("\"2.0\"", "\"1.0\""), "jsonrpc"),
            (&GOOD.replace("\"id\":1", "\"id\":2"), "does not match"),
            (&GOOD.replace("\"id\":1", "\"id\":\"1\""), "does not match"),
            (&GOOD.replace("2025-11-25", "1999-01-01"), "does not know"),
            (
                &GOOD.replace("\"name\":\"executor\"", "\"name\":\"\""),
                "serverInfo.name",
            ),
            (
                &GOOD.replace("\"serverInfo\"", "\"serverInfoX\""),
                "InitializeResult",
            ),
            (
                &GOOD.replace(",\"version\":\"1.0.0\"", ""),
                "InitializeResult",
            ),
            (r#"{"jsonrpc":"2.0","id":1}"#, "neither"),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"nope"}}"#,
                "JSON-RPC error -32600: nope",
            ),
        ];
        for (body, want) in cases {
            let err = check_initialize_reply(body, 1).unwrap_err().to_string();
            assert!(err.contains(want), "{body}: {err}");
        }
    }

    #[test]
    fn printable_escapes_and_truncates() {
        assert_eq!(printable("a\x1b[31mb", 100), "a\\x1b[31mb");
        assert_eq!(printable("a\u{202e}b", 100), "a\\u{202e}b");
        assert_eq!(printable("abcdef", 3), "abc…");
    }
}
