//! Which cookies the browser may send on to Executor: only those Executor itself set
//! through this gateway, name and value both.
//!
//! The box's host name gives the gateway a cookie jar of its own (see `host_name`), but
//! not a private one: cookies are not isolated by port, and whatever listens on another
//! loopback port is reached under that name too (`http://box-alpha.localhost:8888/`, a
//! link away), where it may set cookies the browser then sends the gateway. Executor lives
//! in the guest's trust domain and must see none of them. Forwarding by name alone is not
//! enough: Executor could set a cookie of another app's name on a path no page uses
//! (`jupyter_token=x; Path=/nowhere`) and then receive the real one, which the browser
//! sends for `/`. So the gateway keeps a digest of each `name=value` Executor sets and
//! forwards a cookie only when the browser presents that very pair: another app's cookie
//! of the same name has another value. The digests live in memory: after a gateway
//! restart Executor's cookies are held back until it sets them again, and a cookie
//! Executor's scripts set in the browser themselves is never forwarded.
//!
//! Executor may not set a cookie named like a gateway session (`box_gateway_*`): that
//! would overwrite its box's session in the browser.

use std::collections::VecDeque;
use std::sync::Mutex;

use hyper::header::{self, HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

/// Cookies remembered at most, newest kept: a flood of `Set-Cookie` from Executor cannot
/// grow the list further.
const MAX_COOKIES: usize = 256;

/// The prefix of the gateway's own session cookie (`session::COOKIE_NAME`), and of the
/// per-port names older gateways used.
const GATEWAY_PREFIX: &str = "box_gateway_";

/// The digests of the `name=value` pairs Executor set, oldest first.
#[derive(Debug, Default)]
pub struct UpstreamCookies {
    set: Mutex<VecDeque<[u8; 32]>>,
}

impl UpstreamCookies {
    /// Remembers the cookies Executor sets in `response` headers, and removes any
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
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        for v in values {
            let Some((name, value)) = v.to_str().ok().and_then(set_cookie_pair) else {
                continue;
            };
            if name.starts_with(GATEWAY_PREFIX) {
                tracing::warn!("Executor tried to set the gateway's cookie name {name}; dropped");
                continue;
            }
            let digest = pair_digest(name, value);
            if !set.contains(&digest) {
                if set.len() >= MAX_COOKIES {
                    set.pop_front();
                }
                set.push_back(digest);
            }
            response.append(header::SET_COOKIE, v);
        }
    }

    /// The `Cookie:` header values of a browser request reduced to the cookies Executor
    /// set, as it set them; `None` when none is left.
    pub fn filter<'a>(&self, cookie_headers: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        let kept: Vec<&str> = cookie_headers
            .into_iter()
            .flat_map(|h| h.split(';'))
            .map(str::trim)
            .filter(|pair| {
                pair.split_once('=').is_some_and(|(name, value)| {
                    let name = name.trim();
                    !name.starts_with(GATEWAY_PREFIX)
                        && set.contains(&pair_digest(name, value.trim()))
                })
            })
            .collect();
        (!kept.is_empty()).then(|| kept.join("; "))
    }
}

/// SHA-256 over `name`, a NUL, `value`: the pair, without keeping the value itself.
fn pair_digest(name: &str, value: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0u8]);
    h.update(value.as_bytes());
    h.finalize().into()
}

/// The name and value of the cookie a `Set-Cookie` value sets (`name=value; attributes`).
fn set_cookie_pair(value: &str) -> Option<(&str, &str)> {
    let pair = value.split(';').next()?;
    let (name, value) = pair.split_once('=')?;
    let name = name.trim();
    (!name.is_empty()).then_some((name, value.trim()))
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
        let browser = "jupyter=tok; box_gateway_session=other-box; exec_sid=1; dev=2";
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
            c.filter(["a=1; theme=dark", "exec_sid=1"]).as_deref(),
            Some("theme=dark; exec_sid=1")
        );
        // A value Executor never set is not its cookie (another app's, or a forgery).
        assert_eq!(c.filter(["exec_sid=9; theme=light"]), None);
    }

    /// Executor sets a cookie under another app's name on a path no page uses: the browser
    /// keeps both and sends the other app's on `/`. Only Executor's own value goes back.
    #[test]
    fn executor_cannot_harvest_another_apps_cookie_by_setting_its_name() {
        let c = UpstreamCookies::default();
        let mut h = set_cookies(&["jupyter_token=bait; Path=/nowhere; HttpOnly"]);
        c.learn(&mut h);
        assert_eq!(
            h.get_all(header::SET_COOKIE).iter().count(),
            1,
            "Executor's own cookie still reaches the browser"
        );
        assert_eq!(c.filter(["jupyter_token=real-secret-51c"]), None);
        assert_eq!(
            c.filter(["jupyter_token=real-secret-51c; jupyter_token=bait"])
                .as_deref(),
            Some("jupyter_token=bait")
        );
    }

    #[test]
    fn executor_cannot_take_over_a_gateway_session_cookie() {
        let c = UpstreamCookies::default();
        let mut h = set_cookies(&[
            "box_gateway_session=forged; Path=/",
            "ok=1",
            "=nameless",
            "junk",
        ]);
        c.learn(&mut h);
        let left: Vec<_> = h.get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(left, ["ok=1"]);
        assert_eq!(
            c.filter(["box_gateway_session=forged; ok=1"]).as_deref(),
            Some("ok=1")
        );
    }

    #[test]
    fn the_memory_is_bounded_and_keeps_the_newest() {
        let c = UpstreamCookies::default();
        let mut h = HeaderMap::new();
        for i in 0..(MAX_COOKIES + 10) {
            h.append(
                header::SET_COOKIE,
                HeaderValue::from_str(&format!("n{i}=v")).unwrap(),
            );
        }
        c.learn(&mut h);
        assert_eq!(c.set.lock().unwrap().len(), MAX_COOKIES);
        assert_eq!(c.filter(["n0=v"]), None, "the oldest was dropped");
        let newest = format!("n{}=v", MAX_COOKIES + 9);
        assert_eq!(
            c.filter([newest.as_str()]).as_deref(),
            Some(newest.as_str())
        );
        assert!(!format!("{c:?}").contains("n1=v"));
    }
}
