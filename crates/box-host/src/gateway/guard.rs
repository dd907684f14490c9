//! Who may talk to the gateway at all: the Host header guard (DNS rebinding) and the
//! Origin guard (a page from another origin cannot make state-changing requests).
//!
//! Note "another origin" includes every other port on 127.0.0.1: those are the *same
//! site*, so SameSite=Strict alone would let them send our cookie. Hence the exact Origin
//! check, and WebSocket upgrades (which browsers send cross-origin freely) count as
//! state-changing.

use hyper::Method;

/// Whether `host` (the Host header) names this gateway: `127.0.0.1:<port>` or
/// `localhost:<port>`. Anything else is a DNS-rebinding attempt or a misdirected client.
pub fn host_allowed(host: Option<&str>, port: u16) -> bool {
    let Some(host) = host else { return false };
    let Some((name, p)) = host.rsplit_once(':') else {
        return false;
    };
    p == port.to_string() && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost"))
}

/// Whether `origin` is this gateway's own origin.
fn origin_is_ours(origin: &str, port: u16) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|host| host_allowed(Some(host), port))
}

/// Methods that change nothing (by HTTP's rules) and need no Origin check.
fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request may go on, judged by its method, `Origin` and `Sec-Fetch-Site`.
/// Clients that send no Origin (curl, agents) are not browsers acting for another page.
pub fn origin_allowed(
    method: &Method,
    upgrade: bool,
    origin: Option<&str>,
    fetch_site: Option<&str>,
    port: u16,
) -> bool {
    if is_safe(method) && !upgrade {
        return true;
    }
    if let Some(site) = fetch_site
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    origin.is_none_or(|o| origin_is_ours(o, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_must_be_this_gateway_on_loopback() {
        for ok in ["127.0.0.1:4000", "localhost:4000", "LocalHost:4000"] {
            assert!(host_allowed(Some(ok), 4000), "{ok}");
        }
        for bad in [
            None,
            Some(""),
            Some("127.0.0.1"),
            Some("localhost"),
            Some("127.0.0.1:4001"),
            Some("127.0.0.1:40000"),
            Some("evil.example:4000"),
            Some("127.0.0.1.evil.example:4000"),
            Some("localhost.:4000"),
            Some("[::1]:4000"),
            Some("0.0.0.0:4000"),
            Some("127.0.0.2:4000"),
            Some("127.0.0.1:4000:4000"),
            Some("user@127.0.0.1:4000"),
            Some(" 127.0.0.1:4000"),
        ] {
            assert!(!host_allowed(bad, 4000), "{bad:?}");
        }
    }

    #[test]
    fn safe_requests_pass_whatever_their_origin() {
        assert!(origin_allowed(
            &Method::GET,
            false,
            Some("http://evil.example"),
            Some("cross-site"),
            4000
        ));
    }

    #[test]
    fn state_changing_requests_need_our_origin() {
        let post = Method::POST;
        assert!(origin_allowed(
            &post,
            false,
            Some("http://127.0.0.1:4000"),
            Some("same-origin"),
            4000
        ));
        assert!(origin_allowed(
            &post,
            false,
            Some("http://localhost:4000"),
            None,
            4000
        ));
        assert!(
            origin_allowed(&post, false, None, None, 4000),
            "curl sends no Origin"
        );
        for bad in [
            "http://evil.example",
            "http://127.0.0.1:4001",
            "https://127.0.0.1:4000",
            "null",
            "http://127.0.0.1:4000.evil.example",
            "",
        ] {
            assert!(
                !origin_allowed(&post, false, Some(bad), None, 4000),
                "{bad}"
            );
            assert!(!origin_allowed(
                &Method::DELETE,
                false,
                Some(bad),
                None,
                4000
            ));
            assert!(!origin_allowed(&Method::PUT, false, Some(bad), None, 4000));
        }
        assert!(!origin_allowed(&post, false, None, Some("same-site"), 4000));
        assert!(!origin_allowed(
            &post,
            false,
            Some("http://127.0.0.1:4000"),
            Some("cross-site"),
            4000
        ));
    }

    #[test]
    fn websocket_upgrades_are_state_changing() {
        assert!(!origin_allowed(
            &Method::GET,
            true,
            Some("http://evil.example"),
            None,
            4000
        ));
        assert!(origin_allowed(
            &Method::GET,
            true,
            Some("http://127.0.0.1:4000"),
            None,
            4000
        ));
    }
}
