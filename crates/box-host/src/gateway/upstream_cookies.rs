//! Which cookies the browser may send on to Executor: only those Executor itself set
//! through this gateway.
//!
//! Cookies are not isolated by port: the browser's `Cookie:` header for `127.0.0.1:<port>`
//! carries every cookie of every local web app (other boxes' gateway sessions, Jupyter's
//! token cookie, dev servers' sessions). Executor lives in the guest's trust domain and
//! must not see them, so the gateway learns the names from Executor's `Set-Cookie` replies
//! and forwards those names only. The list lives in memory: after a gateway restart
//! Executor's cookies are held back until it sets them again.
//!
//! Executor may not set a cookie named like a gateway session (`box_gateway_*`): that
//! would overwrite this or another box's session in the browser.

use std::collections::BTreeSet;
use std::sync::Mutex;

use hyper::header::{self, HeaderMap, HeaderValue};

/// Names kept at most; a flood of `Set-Cookie` names from Executor cannot grow it further.
const MAX_NAMES: usize = 128;

/// The prefix of every gateway's own session cookie (see `session::cookie_name`).
const GATEWAY_PREFIX: &str = "box_gateway_";

#[derive(Debug, Default)]
pub struct UpstreamCookies {
    names: Mutex<BTreeSet<String>>,
}

impl UpstreamCookies {
    /// Learns the cookie names Executor sets in `response` headers, and removes any
    /// `Set-Cookie` that would replace a gateway's session cookie.
    pub fn learn(&self, response: &mut HeaderMap) {
        let values: Vec<HeaderValue> = response
            .get_all(header::SET_COOKIE)
            .iter()
            .cloned()
            .collect();
        if values.is_empty() {
            return;
        }
        response.remove(header::SET_COOKIE);
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        for v in values {
            let Some(name) = v.to_str().ok().and_then(set_cookie_name) else {
                continue;
            };
            if name.starts_with(GATEWAY_PREFIX) {
                tracing::warn!("Executor tried to set the gateway's cookie name {name}; dropped");
                continue;
            }
            if names.len() < MAX_NAMES || names.contains(name) {
                names.insert(name.to_string());
            }
            response.append(header::SET_COOKIE, v);
        }
    }

    /// The `Cookie:` header values of a browser request reduced to Executor's own cookies;
    /// `None` when none is left.
    pub fn filter<'a>(&self, cookie_headers: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let kept: Vec<&str> = cookie_headers
            .into_iter()
            .flat_map(|h| h.split(';'))
            .map(str::trim)
            .filter(|pair| {
                let name = pair.split_once('=').map_or(*pair, |(k, _)| k.trim());
                !name.starts_with(GATEWAY_PREFIX) && names.contains(name)
            })
            .collect();
        (!kept.is_empty()).then(|| kept.join("; "))
    }
}

/// The name of the cookie a `Set-Cookie` value sets (`name=value; attributes`).
fn set_cookie_name(value: &str) -> Option<&str> {
    let (name, _) = value.split_once('=')?;
    let name = name.trim();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_cookies(values: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::SET_COOKIE, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_cookies_executor_set_go_back_to_it() {
        let c = UpstreamCookies::default();
        let browser = "jupyter=tok; box_gateway_5001=other-box; exec_sid=1; dev=2";
        assert_eq!(
            c.filter([browser]),
            None,
            "nothing learned: nothing forwarded"
        );
        let mut h = set_cookies(&["exec_sid=1; Path=/; HttpOnly", "theme=dark"]);
        c.learn(&mut h);
        assert_eq!(h.get_all(header::SET_COOKIE).iter().count(), 2);
        assert_eq!(c.filter([browser]).as_deref(), Some("exec_sid=1"));
        assert_eq!(
            c.filter(["a=1; theme=dark", "exec_sid=9"]).as_deref(),
            Some("theme=dark; exec_sid=9")
        );
    }

    #[test]
    fn executor_cannot_take_over_a_gateway_session_cookie() {
        let c = UpstreamCookies::default();
        let mut h = set_cookies(&[
            "box_gateway_5000=forged; Path=/",
            "ok=1",
            "=nameless",
            "junk",
        ]);
        c.learn(&mut h);
        let left: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(left, ["ok=1"]);
        assert_eq!(
            c.filter(["box_gateway_5000=s; ok=1"]).as_deref(),
            Some("ok=1")
        );
    }

    #[test]
    fn the_list_of_names_is_bounded() {
        let c = UpstreamCookies::default();
        let mut h = HeaderMap::new();
        for i in 0..(MAX_NAMES + 10) {
            h.append(
                header::SET_COOKIE,
                HeaderValue::from_str(&format!("n{i}=v")).unwrap(),
            );
        }
        c.learn(&mut h);
        assert_eq!(c.names.lock().unwrap().len(), MAX_NAMES);
    }
}
