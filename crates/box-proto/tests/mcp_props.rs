//! Property tests for the MCP reply parsers: arbitrary server bytes never panic, and a
//! well-formed reply is accepted whatever its extra fields, order or SSE framing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use box_proto::mcp::{KNOWN_VERSIONS, sse, wire};
use proptest::prelude::*;

fn reply(id: u64, version: &str, extra: &str) -> String {
    format!(
        r#"{{"result":{{"capabilities":{{"tools":{{}}}},"serverInfo":{{"version":"1","name":"executor"}},"protocolVersion":"{version}"{extra}}},"id":{id},"jsonrpc":"2.0"}}"#
    )
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}", id in 0u64..5) {
        let _ = wire::check_initialize_reply(&text, id);
        let _ = sse::find_response(&mut text.as_bytes(), id);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_sse_reader(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = sse::find_response(&mut bytes.as_slice(), 1);
    }

    #[test]
    fn valid_replies_pass_in_json_and_sse_framing(
        v in 0..KNOWN_VERSIONS.len(),
        extra_key in "[a-z]{1,8}",
        noise in proptest::collection::vec("[a-z ]{0,20}", 0..4),
        crlf in any::<bool>(),
    ) {
        let version = KNOWN_VERSIONS[v];
        let body = reply(1, version, &format!(r#","x{extra_key}":[1,{{"a":null}}]"#));
        let r = wire::check_initialize_reply(&body, 1).unwrap();
        prop_assert_eq!(r.protocol_version.as_str(), version);

        let nl = if crlf { "\r\n" } else { "\n" };
        let mut stream = String::new();
        for n in &noise {
            stream.push_str(&format!(": {n}{nl}{nl}"));
        }
        stream.push_str(&format!("event: message{nl}data: {body}{nl}{nl}"));
        let data = sse::find_response(&mut stream.as_bytes(), 1).map_err(|_| TestCaseError::fail("no response"))?;
        prop_assert!(wire::check_initialize_reply(&data, 1).is_ok());
    }

    #[test]
    fn a_wrong_id_is_never_accepted(id in 2u64..1000) {
        prop_assert!(wire::check_initialize_reply(&reply(id, "2025-11-25", ""), 1).is_err());
    }
}
