//! Header rewriting between the browser and Executor: hop-by-hop headers dropped, Host,
//! Origin and Referer addressed to Executor's own origin on the way in, redirects pointed
//! back at the gateway on the way out, only the cookies Executor set forwarded (see
//! [`super::upstream_cookies`]) and any client-supplied `Authorization` never (the gateway
//! sets its own).

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::upstream_cookies::UpstreamCookies;

pub fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a request asks to switch protocols (WebSocket or another `Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Headers a proxy must not pass on (RFC 9110 §7.6.1), plus those named in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
}

/// The browser's request headers as Executor should see them: addressed to its own
/// origin instead of the gateway's (`http://<authority>`), with only the cookies Executor
/// set, without any client-supplied credentials.
pub fn upstream_headers(
    cookies: &UpstreamCookies,
    upstream_port: u16,
    authority: &str,
    original: &HeaderMap,
    upgrade: bool,
) -> HeaderMap {
    let mut h = original.clone();
    let upgrade_to = h.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut h);
    h.remove(header::AUTHORIZATION);
    let ours = format!("http://{authority}");
    let theirs = format!("http://127.0.0.1:{}", upstream_port);
    if let Ok(v) = HeaderValue::from_str(&format!("127.0.0.1:{}", upstream_port)) {
        h.insert(header::HOST, v);
    }
    let forwarded = cookies.filter(
        original
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    h.remove(header::COOKIE);
    if let Some(forwarded) = forwarded
        && let Ok(v) = HeaderValue::from_str(&forwarded)
    {
        h.insert(header::COOKIE, v);
    }
    for name in [header::ORIGIN, header::REFERER] {
        if let Some(v) = header_str(&h, name.clone())
            && let Some(rest) = v.strip_prefix(&ours)
            && let Ok(v) = HeaderValue::from_str(&format!("{theirs}{rest}"))
        {
            h.insert(name, v);
        }
    }
    if upgrade && let Some(to) = upgrade_to {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, to);
    }
    h
}

/// Executor's response headers as the browser should see them at the gateway's
/// `authority`.
pub fn downstream_headers(upstream_port: u16, h: &mut HeaderMap, authority: &str, upgrade: bool) {
    let upgrade_to = h.get(header::UPGRADE).cloned();
    strip_hop_by_hop(h);
    if upgrade && let Some(to) = upgrade_to {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, to);
    }
    if let Some(loc) = header_str(h, header::LOCATION)
        && let Some(v) = rewrite_location(loc, upstream_port, authority)
    {
        h.insert(header::LOCATION, v);
    }
    forbid_framing(h);
}

/// Forbids every other page to frame a response (clickjacking the signed-in UI): our
/// `Content-Security-Policy: frame-ancestors 'none'` is added as a policy of its own, so
/// Executor's CSP stays as it is and the browser enforces both (a directive appended to
/// Executor's header would be ignored if it already named `frame-ancestors`), plus
/// `X-Frame-Options: DENY` for browsers without CSP.
pub fn forbid_framing(h: &mut HeaderMap) {
    h.append(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// A redirect to Executor's own origin points at the gateway's `authority` instead
/// (relative ones need nothing); anything else is left alone.
pub fn rewrite_location(loc: &str, upstream_port: u16, authority: &str) -> Option<HeaderValue> {
    for origin in [
        format!("http://127.0.0.1:{upstream_port}"),
        format!("http://localhost:{upstream_port}"),
    ] {
        if let Some(rest) = loc.strip_prefix(&origin)
            && (rest.is_empty() || rest.starts_with(['/', '?', '#']))
        {
            return HeaderValue::from_str(&format!("http://{authority}{rest}")).ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_on_executors_origin_point_at_the_gateway() {
        let ours = "box-alpha.localhost:5000";
        let got =
            |l: &str| rewrite_location(l, 4790, ours).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            got("http://127.0.0.1:4790/x?y").as_deref(),
            Some("http://box-alpha.localhost:5000/x?y")
        );
        assert_eq!(
            got("http://localhost:4790").as_deref(),
            Some("http://box-alpha.localhost:5000")
        );
        assert_eq!(got("/relative"), None);
        assert_eq!(got("http://127.0.0.1:47901/x"), None);
        assert_eq!(got("https://example.com/cb"), None);
    }

    #[test]
    fn upstream_sees_its_own_origin_its_own_cookies_only_and_never_a_client_token() {
        let ours = "box-alpha.localhost:5000";
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static(ours));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://box-alpha.localhost:5000"),
        );
        h.insert(
            header::REFERER,
            HeaderValue::from_static("http://box-alpha.localhost:5000/integrations"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; box_gateway_session=sid; jupyter=t"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("box_gateway_session=sid"),
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer forged"),
        );
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert(
            HeaderName::from_static("x-private"),
            HeaderValue::from_static("1"),
        );
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        let executors = UpstreamCookies::default();
        let up = upstream_headers(&executors, 4790, ours, &h, false);
        assert!(
            up.get(header::COOKIE).is_none(),
            "cookies Executor never set"
        );
        let mut set = HeaderMap::new();
        set.insert(header::SET_COOKIE, HeaderValue::from_static("a=1; Path=/"));
        executors.learn(&mut set);
        let up = upstream_headers(&executors, 4790, ours, &h, false);
        assert_eq!(up[header::HOST], "127.0.0.1:4790");
        assert_eq!(up[header::ORIGIN], "http://127.0.0.1:4790");
        assert_eq!(up[header::REFERER], "http://127.0.0.1:4790/integrations");
        assert_eq!(
            up.get_all(header::COOKIE).iter().collect::<Vec<_>>(),
            ["a=1"]
        );
        assert!(up.get(header::AUTHORIZATION).is_none());
        assert!(up.get(header::CONNECTION).is_none());
        assert!(up.get("x-private").is_none());
        assert!(up.get(header::TRANSFER_ENCODING).is_none());
    }

    #[test]
    fn executors_csp_is_kept_and_framing_forbidden_beside_it() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'self'; frame-ancestors *"),
        );
        h.insert(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("ALLOWALL"),
        );
        downstream_headers(4790, &mut h, "box-alpha.localhost:5000", false);
        let csp: Vec<_> = h.get_all(header::CONTENT_SECURITY_POLICY).iter().collect();
        assert_eq!(
            csp,
            [
                "default-src 'self'; frame-ancestors *",
                "frame-ancestors 'none'"
            ]
        );
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
    }

    #[test]
    fn upgrades_keep_their_handshake_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            HeaderValue::from_static("box-alpha.localhost:5000"),
        );
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::SEC_WEBSOCKET_KEY, HeaderValue::from_static("k"));
        assert!(is_upgrade(&h));
        let ours = "box-alpha.localhost:5000";
        let up = upstream_headers(&UpstreamCookies::default(), 4790, ours, &h, true);
        assert_eq!(up[header::CONNECTION], "upgrade");
        assert_eq!(up[header::UPGRADE], "websocket");
        assert_eq!(up[header::SEC_WEBSOCKET_KEY], "k");
        h.remove(header::CONNECTION);
        assert!(!is_upgrade(&h));
    }
}
