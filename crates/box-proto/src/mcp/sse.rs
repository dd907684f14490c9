//! Reading a `text/event-stream` reply until the JSON-RPC response with our id.
//!
//! A Streamable HTTP server may answer a POST with SSE, send a priming event (an id and
//! empty data), notifications or requests first, and keep the stream open afterwards. So
//! we parse events as they arrive and stop at ours, never reading to the end of the body.

use std::io::BufRead;

use serde_json::Value;

use super::error::ProbeError;
use super::wire::{is_response_to, printable};

/// Longest SSE stream we read before giving up (a server that streams forever without
/// answering is unhealthy, not a reason to use unbounded memory).
pub const MAX_STREAM_BYTES: usize = 1 << 20;

fn malformed(detail: impl Into<String>) -> ProbeError {
    ProbeError::Malformed {
        detail: detail.into(),
    }
}

/// Returns the `data` of the first event that is a JSON-RPC response to request `id`.
/// IO errors (a timeout while the stream hangs) come back as `Err(Ok(io_error))` so the
/// caller can name the timeout; protocol problems as `Err(Err(probe_error))`.
pub fn find_response<R: BufRead>(
    reader: &mut R,
    id: u64,
) -> Result<String, Result<std::io::Error, ProbeError>> {
    let mut data = String::new();
    let mut has_data = false;
    let mut total = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = std::io::Read::take(&mut *reader, (MAX_STREAM_BYTES - total + 1) as u64)
            .read_until(b'\n', &mut line)
            .map_err(Ok)?;
        total += n;
        if total > MAX_STREAM_BYTES {
            return Err(Err(malformed(format!(
                "SSE stream exceeded {MAX_STREAM_BYTES} bytes without a response to our request"
            ))));
        }
        let eof = n == 0;
        let text = std::str::from_utf8(&line)
            .map_err(|_| Err(malformed("SSE stream is not UTF-8")))?
            .trim_end_matches(['\n', '\r']);
        if eof || text.is_empty() {
            // End of an event: dispatch it.
            if has_data && !data.is_empty() {
                let message: Value = serde_json::from_str(&data).map_err(|e| {
                    Err(malformed(format!(
                        "SSE event data is not JSON ({e}): {}",
                        printable(&data, 80)
                    )))
                })?;
                if is_response_to(&message, id) {
                    return Ok(data);
                }
            }
            data.clear();
            has_data = false;
            if eof {
                return Err(Err(malformed(
                    "SSE stream ended without a response to our request",
                )));
            }
            continue;
        }
        if text.starts_with(':') {
            continue; // comment / keep-alive
        }
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        if field == "data" {
            if has_data {
                data.push('\n');
            }
            data.push_str(value);
            has_data = true;
        }
        // event, id, retry and unknown fields do not matter for finding our response.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(stream: &str) -> Result<String, String> {
        find_response(&mut stream.as_bytes(), 1).map_err(|e| match e {
            Ok(io) => io.to_string(),
            Err(p) => p.to_string(),
        })
    }

    #[test]
    fn skips_priming_notifications_and_other_ids() {
        let stream = "id: 0\ndata:\n\n: keep-alive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}\n\nretry: 100\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}\r\n\r\n";
        assert_eq!(
            find(stream).unwrap(),
            "{\"jsonrpc\":\"2.0\",\n\"id\":1,\"result\":{}}"
        );
    }

    #[test]
    fn last_event_without_blank_line_counts() {
        assert!(
            find("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"x\"}}")
                .is_ok()
        );
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(find("").unwrap_err().contains("ended without a response"));
        assert!(
            find("data: {not json\n\n")
                .unwrap_err()
                .contains("not JSON")
        );
        let big = format!("data: {}\n\n", "x".repeat(MAX_STREAM_BYTES));
        assert!(find(&big).unwrap_err().contains("exceeded"));
    }
}
