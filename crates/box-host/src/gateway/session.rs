//! The session cookie the gateway trades a sign-in nonce for.
//!
//! Cookies are not isolated by port, so every gateway on 127.0.0.1 shares one cookie jar
//! with every other local web app: the cookie's name carries the gateway's port, so two
//! boxes' gateways never overwrite each other's session; Executor never sees it (the
//! gateway forwards only Executor's own cookies, see `upstream_cookies`).

use std::time::Instant;

use super::nonce::{random_hex32, same_secret};

/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 64;

/// The cookie name of the gateway on `port`.
pub fn cookie_name(port: u16) -> String {
    format!("box_gateway_{port}")
}

/// The `Set-Cookie` value for a new session: not readable by scripts, never sent on
/// cross-site requests, valid for the whole gateway.
pub fn set_cookie(port: u16, session: &str) -> String {
    format!(
        "{}={session}; HttpOnly; SameSite=Strict; Path=/",
        cookie_name(port)
    )
}

/// The value of cookie `name` in `Cookie:` header values, if present.
pub fn find_cookie<'a>(headers: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    headers
        .into_iter()
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim())
}

/// The live sessions of one gateway (in memory only: a restarted gateway asks the user to
/// run `box open` again).
#[derive(Default)]
pub struct Sessions {
    ids: Vec<(String, Instant)>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sessions({} live)", self.ids.len())
    }
}

impl Sessions {
    pub fn create(&mut self, now: Instant) -> String {
        if self.ids.len() >= MAX_SESSIONS {
            self.ids.remove(0);
        }
        let id = random_hex32();
        self.ids.push((id.clone(), now));
        id
    }

    /// Whether `presented` is a live session, checked against every entry in constant time.
    pub fn is_valid(&self, presented: &str) -> bool {
        self.ids
            .iter()
            .fold(false, |hit, (id, _)| same_secret(id, presented) | hit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_site_wide() {
        let c = set_cookie(4321, "abc");
        assert_eq!(c, "box_gateway_4321=abc; HttpOnly; SameSite=Strict; Path=/");
    }

    #[test]
    fn finds_our_cookie_among_others() {
        let name = cookie_name(4321);
        assert_eq!(
            find_cookie(["a=1; box_gateway_4321=s3; b=2"], &name),
            Some("s3")
        );
        assert_eq!(
            find_cookie(["a=1", "box_gateway_4321=s4"], &name),
            Some("s4")
        );
        // Another gateway's cookie (another port) is not ours.
        assert_eq!(find_cookie(["box_gateway_4322=x"], &name), None);
        assert_eq!(find_cookie(["box_gateway_43210=x"], &name), None);
        assert_eq!(find_cookie(["garbage;;;=;"], &name), None);
        assert_eq!(find_cookie([""], &name), None);
    }

    #[test]
    fn sessions_are_checked_exactly_and_bounded() {
        let mut s = Sessions::default();
        let now = Instant::now();
        let first = s.create(now);
        assert!(s.is_valid(&first));
        assert!(!s.is_valid(""));
        assert!(!s.is_valid(&first[..63]));
        assert!(!s.is_valid(&first.to_uppercase()));
        for _ in 0..MAX_SESSIONS {
            s.create(now);
        }
        assert!(!s.is_valid(&first), "the oldest session was dropped");
        assert!(!format!("{s:?}").contains(&first));
    }
}
