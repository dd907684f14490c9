//! What a machine's egress policy admits, as smolvm's virtio-net gateway decides it
//! (`smolvm-network` 1.33.0 `src/egress.rs`, `src/dns.rs`; `smolvm-protocol` 1.33.0
//! `src/host_pattern.rs`; read, not copied):
//!
//! * the floor first: cloud metadata (link-local) is closed in every mode; the local default
//!   also closes the host's loopback; `--block-private` closes RFC 1918, CGNAT, loopback,
//!   link-local, unique-local, unspecified and broadcast, and only an `--allow-private` range
//!   re-opens one (never metadata). An `--allow-private` range admits its addresses even under
//!   an allow list, as smolvm's exception rules do;
//! * no `--allow-cidr`/`--allow-host`: everything else is reachable;
//! * otherwise only static CIDRs and addresses learned from allowed DNS answers (their TTL
//!   clamped to 60-3600 s) are. A learned address in a floored range stays closed (rebinding).
//!
//! `SMOLVM_EGRESS_ALLOW_PRIVATE=1` in the environment of `machine start` turns the floor off,
//! as smolvm's override does.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::policy::addresses::{Cidr, host_matches, is_link_local, is_loopback, is_private};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// smolvm's learned-address TTL clamp.
pub const MIN_LEARNED_TTL: u32 = 60;
pub const MAX_LEARNED_TTL: u32 = 3600;

/// How much of the floor applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    /// `SMOLVM_EGRESS_ALLOW_PRIVATE=1`: nothing.
    Off,
    /// The local default: metadata and the host's loopback.
    Local,
    /// `--block-private`.
    Private,
}

/// An address learned from an allowed answer.
#[derive(Clone, Debug)]
struct Learned {
    until: Instant,
}

/// The policy in force for one running machine; cheap to clone, shared by the DNS filter,
/// the connect filter and `egress-events`' writer.
#[derive(Clone, Debug)]
pub struct Policy {
    floor: Floor,
    /// `None`: no allow list (everything outside the floor is reachable).
    allow: Option<AllowList>,
    /// `--allow-private` ranges.
    reopened: Vec<Cidr>,
    learned: Arc<Mutex<HashMap<IpAddr, Learned>>>,
}

#[derive(Clone, Debug)]
struct AllowList {
    cidrs: Vec<Cidr>,
    /// `None`: no DNS filter (CIDRs only).
    hosts: Option<Vec<String>>,
}

impl Policy {
    /// From a machine's recorded flags. Unparseable CIDRs are skipped, as smolvm skips them
    /// (with a warning) at launch; `create` already refused them.
    pub fn new(
        cidrs: &[String],
        hosts: Option<&[String]>,
        block_private: bool,
        allow_private: &[String],
        allow_private_env: bool,
    ) -> Self {
        let floor = if allow_private_env {
            Floor::Off
        } else if block_private || !allow_private.is_empty() {
            Floor::Private
        } else {
            Floor::Local
        };
        let allow = (!cidrs.is_empty() || hosts.is_some()).then(|| AllowList {
            cidrs: cidrs.iter().filter_map(|c| Cidr::parse(c)).collect(),
            hosts: hosts.map(|h| h.iter().map(|e| e.to_ascii_lowercase()).collect()),
        });
        Self {
            floor,
            allow,
            reopened: allow_private
                .iter()
                .filter_map(|c| Cidr::parse(c))
                .collect(),
            learned: Arc::default(),
        }
    }

    #[cfg(test)]
    pub fn floor(&self) -> Floor {
        self.floor
    }

    /// Whether guest DNS questions are filtered (an allow-host list is set).
    pub fn filters_dns(&self) -> bool {
        self.allow.as_ref().is_some_and(|a| a.hosts.is_some())
    }

    /// Whether a question for `name` is forwarded upstream.
    pub fn name_allowed(&self, name: &str) -> bool {
        match self.allow.as_ref().and_then(|a| a.hosts.as_ref()) {
            None => true,
            Some(hosts) => hosts.iter().any(|e| host_matches(name, e)),
        }
    }

    /// Learn the addresses of an allowed answer for their (clamped) TTL.
    pub fn learn(&self, records: &[(IpAddr, u32)]) {
        if !self.filters_dns() {
            return;
        }
        let Ok(mut learned) = self.learned.lock() else {
            return;
        };
        let now = Instant::now();
        learned.retain(|_, l| l.until > now);
        for (ip, ttl) in records {
            let ttl = (*ttl).clamp(MIN_LEARNED_TTL, MAX_LEARNED_TTL);
            let until = now + Duration::from_secs(u64::from(ttl));
            let e = learned.entry(*ip).or_insert(Learned { until });
            if until > e.until {
                e.until = until;
            }
        }
    }

    /// Whether a connection (or datagram) to `ip` is admitted.
    pub fn allows(&self, ip: IpAddr) -> bool {
        if self.floor != Floor::Off && is_link_local(ip) {
            return false;
        }
        if self.reopened.iter().any(|c| c.contains(ip)) {
            return true;
        }
        match self.floor {
            Floor::Private if is_private(ip) => return false,
            Floor::Local if is_loopback(ip) => {
                // Only an explicit static CIDR re-opens the host's loopback.
                return self
                    .allow
                    .as_ref()
                    .is_some_and(|a| a.cidrs.iter().any(|c| c.contains(ip)));
            }
            _ => {}
        }
        let Some(allow) = &self.allow else {
            return true;
        };
        if allow.cidrs.iter().any(|c| c.contains(ip)) {
            return true;
        }
        self.learned
            .lock()
            .map(|l| l.get(&ip).is_some_and(|e| e.until > Instant::now()))
            .unwrap_or(false)
    }

    /// How long `ip` stays learned, for tests.
    #[cfg(test)]
    fn learned_for(&self, ip: IpAddr) -> Option<Duration> {
        let l = self.learned.lock().ok()?;
        l.get(&ip)
            .map(|e| e.until.saturating_duration_since(Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn open(block_private: bool, allow_private: &[&str]) -> Policy {
        let ap: Vec<String> = allow_private.iter().map(|s| s.to_string()).collect();
        Policy::new(&[], None, block_private, &ap, false)
    }

    #[test]
    fn metadata_is_closed_in_every_mode_but_off() {
        for p in [open(false, &[]), open(true, &["169.254.0.0/16"])] {
            assert!(!p.allows(ip("169.254.169.254")));
            assert!(!p.allows(ip("::ffff:169.254.169.254")));
            assert!(!p.allows(ip("fe80::1")));
        }
        let off = Policy::new(&[], None, true, &[], true);
        assert_eq!(off.floor(), Floor::Off);
        assert!(off.allows(ip("169.254.169.254")) && off.allows(ip("10.1.2.3")));
    }

    #[test]
    fn the_local_default_leaves_the_lan_open() {
        let p = open(false, &[]);
        assert!(p.allows(ip("192.168.1.5")) && p.allows(ip("10.0.0.1")));
        assert!(!p.allows(ip("127.0.0.1")));
    }

    #[test]
    fn block_private_closes_the_lan_and_allow_private_reopens_one_range() {
        let p = open(true, &["10.20.0.0/16"]);
        for closed in [
            "10.21.0.1",
            "172.16.0.1",
            "192.168.1.5",
            "100.100.100.100",
            "127.0.0.1",
            "fd00::1",
            "::1",
            "255.255.255.255",
        ] {
            assert!(!p.allows(ip(closed)), "{closed}");
        }
        assert!(p.allows(ip("10.20.3.4")));
        assert!(p.allows(ip("1.1.1.1")) && p.allows(ip("198.18.0.1")));
        assert!(p.allows(ip("2001:db8::1")));
        // allow-private alone implies block-private.
        assert_eq!(open(false, &["10.0.0.0/8"]).floor(), Floor::Private);
    }

    #[test]
    fn an_allow_list_admits_static_cidrs_and_learned_addresses_only() {
        let hosts = vec!["example.com".to_string(), "=exact.test".to_string()];
        let p = Policy::new(&["203.0.113.0/24".into()], Some(&hosts), true, &[], false);
        assert!(p.filters_dns());
        assert!(p.allows(ip("203.0.113.9")));
        assert!(!p.allows(ip("198.51.100.7")));
        p.learn(&[(ip("198.51.100.7"), 5), (ip("10.9.9.9"), 300)]);
        assert!(p.allows(ip("198.51.100.7")));
        // The TTL is clamped up to 60 s...
        let left = p.learned_for(ip("198.51.100.7")).unwrap_or_default();
        assert!(left > Duration::from_secs(55), "{left:?}");
        // ... and a learned private address stays closed (rebinding).
        assert!(!p.allows(ip("10.9.9.9")));
        p.learn(&[(ip("198.51.100.8"), 86_400)]);
        let left = p.learned_for(ip("198.51.100.8")).unwrap_or_default();
        assert!(left <= Duration::from_secs(3600), "{left:?}");
    }

    #[test]
    fn without_an_allow_list_nothing_is_learned_or_filtered() {
        let p = open(true, &[]);
        assert!(!p.filters_dns() && p.name_allowed("anything.example"));
        p.learn(&[(ip("198.51.100.7"), 60)]);
        assert!(p.learned_for(ip("198.51.100.7")).is_none());
    }
}
