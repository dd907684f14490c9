//! One-time sign-in nonces: the only secret that leaves `box` on the way to the browser.
//!
//! A nonce travels in a sign-in page the opener is pointed at (never on an argv: see
//! [`super::sign_in_file`]), or in the URL `box open --print-url` prints; it ends up in the
//! browser's history, so it is worth nothing after one use or a minute, whichever comes
//! first (a minute of [`super::clock`], which counts the time the machine sleeps). A page
//! attached to a nonce is removed with it. Comparison is constant-time.

use std::path::PathBuf;
use std::time::Duration;

use super::clock::Moment;
use super::random::random_hex32;
use super::sign_in_file;

/// How long a sign-in URL works.
pub const NONCE_TTL: Duration = Duration::from_secs(60);
/// Unredeemed nonces kept at most (each `box open` adds one).
const MAX_LIVE: usize = 32;

/// Equal length and every byte, in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The live nonces of one gateway.
#[derive(Default)]
pub struct Nonces {
    live: Vec<Live>,
}

struct Live {
    nonce: String,
    until: Moment,
    /// The sign-in page holding this nonce, removed when the nonce goes.
    page: Option<PathBuf>,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(page) = &self.page {
            sign_in_file::remove(page);
        }
    }
}

impl std::fmt::Debug for Nonces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nonces({} live)", self.live.len())
    }
}

impl Nonces {
    /// A fresh nonce, valid for [`NONCE_TTL`] from `now`.
    pub fn issue(&mut self, now: Moment) -> String {
        self.expire(now);
        if self.live.len() >= MAX_LIVE {
            self.live.remove(0);
        }
        let nonce = random_hex32();
        self.live.push(Live {
            nonce: nonce.clone(),
            until: now + NONCE_TTL,
            page: None,
        });
        nonce
    }

    /// Ties the sign-in page at `page` to `nonce`: it is removed when the nonce is redeemed,
    /// expires or is dropped. A nonce no longer live has its page removed now.
    pub fn attach_page(&mut self, nonce: &str, page: PathBuf) {
        match self.live.iter_mut().find(|l| l.nonce == nonce) {
            Some(live) => live.page = Some(page),
            None => sign_in_file::remove(&page),
        }
    }

    /// Whether `presented` is a live nonce; a match is consumed, so a second use fails.
    pub fn redeem(&mut self, presented: &str, now: Moment) -> bool {
        self.expire(now);
        let mut found = None;
        // Look at every entry, so the time taken does not say which one matched.
        for (i, live) in self.live.iter().enumerate() {
            if same_secret(&live.nonce, presented) {
                found = Some(i);
            }
        }
        match found {
            Some(i) => {
                self.live.remove(i);
                true
            }
            None => false,
        }
    }

    /// Drops the nonces (and their pages) whose minute is over.
    pub fn expire(&mut self, now: Moment) {
        self.live.retain(|l| now < l.until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_works_once() {
        let mut n = Nonces::default();
        let now = Moment::now();
        let a = n.issue(now);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(n.redeem(&a, now));
        assert!(!n.redeem(&a, now), "second use must fail");
    }

    #[test]
    fn a_nonce_expires_after_a_minute() {
        let mut n = Nonces::default();
        let now = Moment::now();
        let a = n.issue(now);
        assert!(!n.redeem(&a, now + NONCE_TTL));
        let b = n.issue(now);
        assert!(n.redeem(&b, now + (NONCE_TTL - Duration::from_millis(1))));
    }

    /// A sign-in link made before the lid closed does not work after two minutes asleep.
    #[test]
    fn a_nonce_expires_while_the_machine_sleeps() {
        let mut n = Nonces::default();
        let a = n.issue(Moment::now());
        let Some(woke) = crate::gateway::clock::tests::after_a_sleep(Duration::from_secs(120))
        else {
            return;
        };
        assert!(
            !n.redeem(&a, woke),
            "a sign-in link outlived 2 min of sleep"
        );
    }

    #[test]
    fn hostile_and_near_miss_nonces_are_refused() {
        let mut n = Nonces::default();
        let now = Moment::now();
        let a = n.issue(now);
        let mut near = a.clone();
        near.pop();
        for bad in [
            "",
            near.as_str(),
            &format!("{a}0"),
            &a.to_uppercase(),
            "../../etc/passwd",
            "\0",
        ] {
            assert!(!n.redeem(bad, now), "{bad:?}");
        }
        assert!(n.redeem(&a, now), "misses must not consume the real nonce");
    }

    #[test]
    fn nonces_are_distinct_and_bounded() {
        let mut n = Nonces::default();
        let now = Moment::now();
        let all: Vec<String> = (0..MAX_LIVE + 5).map(|_| n.issue(now)).collect();
        let unique: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
        assert!(!n.redeem(&all[0], now), "the oldest was dropped");
        assert!(n.redeem(all.last().unwrap(), now));
        assert!(!format!("{n:?}").contains(&all[1]));
    }

    #[test]
    fn a_page_goes_with_its_nonce() {
        let tmp = tempfile::tempdir().unwrap();
        let page = |name: &str| {
            let p = tmp.path().join(name);
            std::fs::write(&p, "x").unwrap();
            p
        };
        let mut n = Nonces::default();
        let now = Moment::now();
        let (a, b, c) = (n.issue(now), n.issue(now), n.issue(now));
        let (pa, pb, pc) = (page("a"), page("b"), page("c"));
        n.attach_page(&a, pa.clone());
        n.attach_page(&b, pb.clone());
        n.attach_page(&c, pc.clone());
        assert!(pa.exists() && pb.exists() && pc.exists());
        assert!(n.redeem(&a, now));
        assert!(!pa.exists(), "redeemed: its page is gone");
        n.expire(now + NONCE_TTL);
        assert!(!pb.exists(), "expired: its page is gone");
        let late = page("late");
        n.attach_page(&b, late.clone());
        assert!(!late.exists(), "a page for a dead nonce is not kept");
        drop(n);
        assert!(!pc.exists(), "a stopping gateway leaves no page");
    }

    #[test]
    fn same_secret_compares_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(same_secret("", ""));
    }
}
