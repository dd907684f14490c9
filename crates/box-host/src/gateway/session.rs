//! The session cookie the gateway trades a sign-in nonce for, and how long it lasts.
//!
//! A session ends after `OPEN_SESSION_IDLE_TIMEOUT` seconds without a request that
//! presents it, or `OPEN_SESSION_MAX_AGE` seconds after sign-in, whichever comes first, or
//! on `box open --sign-out`/`--stop`. Both count the time the machine sleeps
//! ([`super::clock`]): a laptop closed overnight wakes up signed out. Open streams and
//! WebSockets do not count as use (else a leaked cookie holding one open would never
//! expire) and end with their session.
//!
//! The cookie is host-only (no `Domain`): the browser keeps it for the box's own host name
//! (`box-<name>.localhost`, see `host_name`) and sends it to that name alone, not to
//! `127.0.0.1`, `localhost` or another box's name (though to every port of that name: the
//! guard's business). It is `HttpOnly`, so no script reads it, Executor's own included;
//! Executor never sees it either (the gateway forwards only Executor's own cookies, see
//! `upstream_cookies`).

use std::time::Duration;

use tokio::sync::watch;

use super::clock::Moment;
use super::nonce::same_secret;
use super::random::random_hex32;

/// Sessions kept at most; the oldest goes first.
const MAX_SESSIONS: usize = 64;

/// The session cookie's name. Each box's gateway has a host name and so a cookie jar of
/// its own: one name serves them all, and a gateway restarted on another port replaces
/// its predecessor's cookie instead of piling up beside it.
pub const COOKIE_NAME: &str = "box_gateway_session";

/// The `Set-Cookie` value for a new session: host-only (no `Domain`), not readable by
/// scripts, never sent on cross-site requests, valid for the whole gateway, kept by the
/// browser no longer than the session's absolute lifetime (a browser restart keeps it
/// until then).
pub fn set_cookie(session: &str, max_age: Duration) -> String {
    format!(
        "{COOKIE_NAME}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        max_age.as_secs()
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

/// How long sessions last (box.env `OPEN_SESSION_IDLE_TIMEOUT`, `OPEN_SESSION_MAX_AGE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    pub idle: Duration,
    pub max_age: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(12 * 3600),
            max_age: Duration::from_secs(7 * 86400),
        }
    }
}

/// One signed-in browser. Dropping it ends the session's streams.
struct Live {
    id: String,
    created: Moment,
    last_used: Moment,
    ended: watch::Sender<bool>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.ended.send_replace(true);
    }
}

/// A live session's end, for the streams and WebSockets opened under it: becomes `true`
/// when the session ends.
pub type SessionEnd = watch::Receiver<bool>;

/// The live sessions of one gateway (in memory only: a restarted gateway asks the user to
/// run `box open` again).
pub struct Sessions {
    live: Vec<Live>,
    pub lifetimes: Lifetimes,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sessions({} live)", self.live.len())
    }
}

impl Sessions {
    pub fn new(lifetimes: Lifetimes) -> Self {
        Self {
            live: Vec::new(),
            lifetimes,
        }
    }

    pub fn create(&mut self, now: Moment) -> String {
        self.expire(now);
        if self.live.len() >= MAX_SESSIONS {
            self.live.remove(0);
        }
        let id = random_hex32();
        self.live.push(Live {
            id: id.clone(),
            created: now,
            last_used: now,
            ended: watch::channel(false).0,
        });
        id
    }

    /// A request presenting `presented`: if that is a live session (checked against every
    /// entry in constant time), it counts as use and its end signal is returned.
    pub fn use_session(&mut self, presented: &str, now: Moment) -> Option<SessionEnd> {
        self.expire(now);
        let mut found = None;
        for (i, live) in self.live.iter().enumerate() {
            if same_secret(&live.id, presented) {
                found = Some(i);
            }
        }
        let live = &mut self.live[found?];
        live.last_used = now;
        Some(live.ended.subscribe())
    }

    /// Ends the sessions idle or old past their lifetimes; returns how many ended.
    pub fn expire(&mut self, now: Moment) -> usize {
        let before = self.live.len();
        let limits = self.lifetimes;
        self.live.retain(|l| {
            now.saturating_since(l.last_used) < limits.idle
                && now.saturating_since(l.created) < limits.max_age
        });
        before - self.live.len()
    }

    /// Ends every session (`box open --sign-out`); returns how many there were.
    pub fn end_all(&mut self) -> usize {
        let n = self.live.len();
        self.live.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_host_only_http_only_strict_and_site_wide() {
        let c = set_cookie("abc", Duration::from_secs(60));
        assert_eq!(
            c,
            "box_gateway_session=abc; HttpOnly; SameSite=Strict; Path=/; Max-Age=60"
        );
    }

    #[test]
    fn finds_our_cookie_among_others() {
        assert_eq!(
            find_cookie(["a=1; box_gateway_session=s3; b=2"], COOKIE_NAME),
            Some("s3")
        );
        assert_eq!(
            find_cookie(["a=1", "box_gateway_session=s4"], COOKIE_NAME),
            Some("s4")
        );
        // An older gateway's cookie (named for its port) is not ours.
        assert_eq!(find_cookie(["box_gateway_4322=x"], COOKIE_NAME), None);
        assert_eq!(find_cookie(["box_gateway_sessionx=x"], COOKIE_NAME), None);
        assert_eq!(find_cookie(["garbage;;;=;"], COOKIE_NAME), None);
        assert_eq!(find_cookie([""], COOKIE_NAME), None);
    }

    #[test]
    fn sessions_are_checked_exactly_and_bounded() {
        let mut s = Sessions::new(Lifetimes::default());
        let now = Moment::now();
        let first = s.create(now);
        assert!(s.use_session(&first, now).is_some());
        assert!(s.use_session("", now).is_none());
        assert!(s.use_session(&first[..63], now).is_none());
        assert!(s.use_session(&first.to_uppercase(), now).is_none());
        for _ in 0..MAX_SESSIONS {
            s.create(now);
        }
        assert!(
            s.use_session(&first, now).is_none(),
            "the oldest session was dropped"
        );
        assert!(!format!("{s:?}").contains(&first));
    }

    #[test]
    fn a_session_ends_when_idle_or_old_whichever_comes_first() {
        let limits = Lifetimes {
            idle: Duration::from_secs(10),
            max_age: Duration::from_secs(25),
        };
        let mut s = Sessions::new(limits);
        let t0 = Moment::now();
        let sec = |n| t0 + Duration::from_secs(n);
        let idle = s.create(t0);
        let busy = s.create(t0);
        let end = s.use_session(&idle, sec(9)).unwrap();
        assert!(!*end.borrow());
        for t in [8, 16, 24] {
            assert!(s.use_session(&busy, sec(t)).is_some(), "used at {t}s");
        }
        assert!(s.use_session(&idle, sec(19)).is_none(), "idle for 10s");
        assert!(*end.borrow(), "its streams were told");
        assert!(s.use_session(&busy, sec(25)).is_none(), "25s after sign-in");
    }

    /// Signed in, then the laptop slept longer than the idle timeout (the clock read in a
    /// time namespace where that much CLOCK_BOOTTIME passed and no CLOCK_MONOTONIC): on
    /// wake the session is over, its streams told.
    #[test]
    fn a_session_idle_through_a_sleep_is_over_on_wake() {
        let mut s = Sessions::new(Lifetimes {
            idle: Duration::from_secs(12 * 3600),
            max_age: Duration::from_secs(7 * 86400),
        });
        let id = s.create(Moment::now());
        let end = s.use_session(&id, Moment::now()).unwrap();
        let Some(woke) =
            crate::gateway::clock::tests::after_a_sleep(Duration::from_secs(13 * 3600))
        else {
            return;
        };
        assert!(
            s.use_session(&id, woke).is_none(),
            "a session idle for 13 h of sleep is still live"
        );
        assert!(*end.borrow(), "its streams were not told");
    }

    #[test]
    fn signing_out_ends_every_session_and_its_streams() {
        let mut s = Sessions::new(Lifetimes::default());
        let now = Moment::now();
        let (a, b) = (s.create(now), s.create(now));
        let end = s.use_session(&a, now).unwrap();
        assert_eq!(s.end_all(), 2);
        assert!(*end.borrow());
        assert!(s.use_session(&a, now).is_none());
        assert!(s.use_session(&b, now).is_none());
    }
}
