//! An allow list proposed from what smolvm refused a box (`box egress --propose`, `--learn`):
//! the names its software tried to resolve, grouped as a person would write them
//! (`*.example.com` when several subdomains of one registrable domain were refused, never
//! broader than that domain: `suffixes.rs`), each group with its count, first and last
//! time; addresses connected to without a name apart (an allow list takes names).
//!
//! smolvm records denials only; the names in them were asked by whatever runs in the box,
//! the agent included: they are hostile data. A name is taken only if it is a DNS name box
//! itself would accept on an allow list (ASCII labels, at most 253 characters: an IDN in
//! its `xn--` form, as DNS carries it); anything else is counted and left out, never
//! shown. How much is kept is bounded whatever the record holds.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use chrono::{DateTime, Utc};

use super::suffixes::registrable;
use super::words::{covers, valid_label};

/// How many different names and addresses are kept; more are counted.
const MAX_NAMES: usize = 1000;
const MAX_ADDRESSES: usize = 200;

/// Top-level names that are never on the internet (RFC 6761, 6762, 7686, reverse lookups).
const SPECIAL_USE: &[&str] = &["arpa", "invalid", "local", "localhost", "onion"];

/// One denial as smolvm recorded it: every field as it came.
#[derive(Debug, Clone, Copy)]
pub struct Denied<'a> {
    pub timestamp: &'a str,
    pub operation: &'a str,
    pub dest: &'a str,
}

/// When something was refused, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub denials: u64,
    /// `None`: no denial of it carried a readable time.
    pub first: Option<DateTime<Utc>>,
    pub last: Option<DateTime<Utc>>,
}

impl Tally {
    fn add(&mut self, at: Option<DateTime<Utc>>) {
        self.denials += 1;
        if let Some(t) = at {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
    }

    fn absorb(&mut self, other: &Tally) {
        self.denials += other.denials;
        for t in [other.first, other.last].into_iter().flatten() {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
            self.last = Some(self.last.map_or(t, |l| l.max(t)));
        }
    }
}

/// One proposed allow-list entry and the refused names it admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// As `box egress --allow-host` takes it: a name (and its subdomains) or `*.domain`.
    pub entry: String,
    /// The refused names, sorted.
    pub names: Vec<String>,
    pub tally: Tally,
}

/// An address the box connected to without a name smolvm allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressEntry {
    pub ip: IpAddr,
    pub port: Option<u16>,
    /// A private, loopback or link-local address: the closed LAN refused it, not the list.
    pub private: bool,
    pub tally: Tally,
}

/// What was read but proposed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeftOut {
    /// Not a DNS name box could allow (control characters, non-ASCII, one label, an
    /// address, too long), or a destination that is no address.
    pub unreadable: u64,
    /// A name that is never on the internet (`.local`, reverse lookups, …).
    pub special_use: u64,
    /// On the box's list now (refused before it was added).
    pub already_allowed: u64,
    /// Older than `--since`, or without a readable time when `--since` was given.
    pub outside_since: u64,
    /// Past the number of different names or addresses kept.
    pub beyond_limit: u64,
}

/// What smolvm's denials propose.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Proposal {
    /// Most refused first.
    pub hosts: Vec<HostEntry>,
    pub addresses: Vec<AddressEntry>,
    pub left_out: LeftOut,
}

impl Proposal {
    /// The allow-list entries, in the order shown.
    pub fn entries(&self) -> Vec<&str> {
        self.hosts.iter().map(|h| h.entry.as_str()).collect()
    }

    /// For `--json`.
    pub fn json(&self) -> serde_json::Value {
        let tally = |t: &Tally| {
            serde_json::json!({
                "denials": t.denials,
                "first": t.first.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                "last": t.last.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            })
        };
        let with = |mut v: serde_json::Value, t: &Tally| {
            if let (Some(o), serde_json::Value::Object(times)) = (v.as_object_mut(), tally(t)) {
                o.extend(times);
            }
            v
        };
        let l = &self.left_out;
        serde_json::json!({
            "hosts": self.hosts.iter().map(|h| with(
                serde_json::json!({"entry": h.entry, "names": h.names}),
                &h.tally,
            )).collect::<Vec<_>>(),
            "addresses": self.addresses.iter().map(|a| with(
                serde_json::json!({"ip": a.ip.to_string(), "port": a.port, "private": a.private}),
                &a.tally,
            )).collect::<Vec<_>>(),
            "left_out": {
                "unreadable": l.unreadable,
                "special_use": l.special_use,
                "already_allowed": l.already_allowed,
                "outside_since": l.outside_since,
                "beyond_limit": l.beyond_limit,
            },
        })
    }
}

/// The proposal of `denials` for a box whose allow list is `allowed` (smolvm's entries:
/// empty for an open box), counting only what was refused at or after `since`.
pub fn propose<'a>(
    denials: impl IntoIterator<Item = Denied<'a>>,
    allowed: &[String],
    since: Option<DateTime<Utc>>,
) -> Proposal {
    let mut left_out = LeftOut::default();
    let mut names: BTreeMap<String, Tally> = BTreeMap::new();
    let mut addresses: BTreeMap<(IpAddr, Option<u16>), Tally> = BTreeMap::new();
    for d in denials {
        let at = timestamp(d.timestamp);
        if since.is_some_and(|s| at.is_none_or(|t| t < s)) {
            left_out.outside_since += 1;
            continue;
        }
        match d.operation {
            "resolve" => match host_name(d.dest) {
                None => left_out.unreadable += 1,
                Some(n) if is_special_use(&n) => left_out.special_use += 1,
                Some(n) if allowed.iter().any(|e| covers(e, &n)) => left_out.already_allowed += 1,
                Some(n) => {
                    if !counted(&mut names, n, at, MAX_NAMES) {
                        left_out.beyond_limit += 1;
                    }
                }
            },
            "connect" | "sendto" => match address(d.dest) {
                None => left_out.unreadable += 1,
                Some(key) => {
                    if !counted(&mut addresses, key, at, MAX_ADDRESSES) {
                        left_out.beyond_limit += 1;
                    }
                }
            },
            _ => left_out.unreadable += 1,
        }
    }
    let mut hosts = group(names);
    hosts.sort_by(|a, b| {
        b.tally
            .denials
            .cmp(&a.tally.denials)
            .then_with(|| a.entry.cmp(&b.entry))
    });
    let mut addresses: Vec<AddressEntry> = addresses
        .into_iter()
        .map(|((ip, port), tally)| AddressEntry {
            ip,
            port,
            private: is_private(ip),
            tally,
        })
        .collect();
    addresses.sort_by_key(|a| std::cmp::Reverse(a.tally.denials));
    Proposal {
        hosts,
        addresses,
        left_out,
    }
}

/// One more denial of `key`, unless it would be the `max + 1`th different one (`false`).
fn counted<K: Ord>(
    map: &mut BTreeMap<K, Tally>,
    key: K,
    at: Option<DateTime<Utc>>,
    max: usize,
) -> bool {
    if map.len() >= max && !map.contains_key(&key) {
        return false;
    }
    map.entry(key).or_default().add(at);
    true
}

/// Names grouped by registrable domain: one name is proposed as it is; several under one
/// domain as `*.domain`, or as the domain itself (it and its subdomains) when the domain was
/// refused too. A name that is a public suffix itself stands alone.
fn group(names: BTreeMap<String, Tally>) -> Vec<HostEntry> {
    let mut by_domain: BTreeMap<String, Vec<(String, Tally)>> = BTreeMap::new();
    for (name, tally) in names {
        let domain = registrable(&name).unwrap_or(&name).to_string();
        by_domain.entry(domain).or_default().push((name, tally));
    }
    by_domain
        .into_iter()
        .map(|(domain, members)| {
            let entry = match members.as_slice() {
                [(only, _)] => only.clone(),
                _ if members.iter().any(|(n, _)| *n == domain) => domain,
                _ => format!("*.{domain}"),
            };
            let mut tally = Tally::default();
            for (_, t) in &members {
                tally.absorb(t);
            }
            HostEntry {
                entry,
                names: members.into_iter().map(|(n, _)| n).collect(),
                tally,
            }
        })
        .collect()
}

/// `dest` as a name box would put on an allow list: lowercase ASCII labels, two or more,
/// one trailing dot dropped; `None` for anything else.
fn host_name(dest: &str) -> Option<String> {
    if dest.len() > 254 || !dest.is_ascii() {
        return None;
    }
    let name = dest.strip_suffix('.').unwrap_or(dest).to_ascii_lowercase();
    let readable = name.len() <= 253
        && name.contains('.')
        && name.split('.').all(valid_label)
        && name.parse::<IpAddr>().is_err();
    readable.then_some(name)
}

fn is_special_use(name: &str) -> bool {
    name.rsplit('.')
        .next()
        .is_some_and(|tld| SPECIAL_USE.contains(&tld))
}

/// `ip:port`, `[v6]:port` or a bare address (smolvm may write `to ` in front).
fn address(dest: &str) -> Option<(IpAddr, Option<u16>)> {
    let dest = dest.strip_prefix("to ").unwrap_or(dest).trim();
    if dest.len() > 64 {
        return None;
    }
    if let Ok(sa) = dest.parse::<SocketAddr>() {
        return Some((sa.ip(), Some(sa.port())));
    }
    dest.parse::<IpAddr>().ok().map(|ip| (ip, None))
}

fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => {
            let o = v.octets();
            v.is_private()
                || v.is_loopback()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_broadcast()
                || (o[0] == 100 && (64..=127).contains(&o[1]))
        }
        IpAddr::V6(v) => {
            let first = v.segments()[0];
            v.is_loopback()
                || v.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || v.to_ipv4_mapped()
                    .is_some_and(|m| is_private(IpAddr::V4(m)))
        }
    }
}

/// An RFC 3339 time smolvm wrote; `None` for anything else.
fn timestamp(text: &str) -> Option<DateTime<Utc>> {
    if text.len() > 64 {
        return None;
    }
    DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `--since`: `90s`, `30m`, `1h`, `2d`, or several (`1h30m`).
pub fn parse_since(text: &str) -> Result<chrono::TimeDelta, String> {
    let bad = || format!("--since '{text}': give a span like 30m, 1h, 2d or 1h30m");
    let mut total: i64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n: i64 = rest[..digits].parse().map_err(|_| bad())?;
        let unit = rest[digits..].chars().next().ok_or_else(bad)?;
        let secs = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        total = n
            .checked_mul(secs)
            .and_then(|s| total.checked_add(s))
            .filter(|t| *t <= 3650 * 86_400)
            .ok_or_else(bad)?;
        rest = &rest[digits + 1..];
    }
    Ok(chrono::TimeDelta::seconds(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(dest: &str) -> Denied<'_> {
        Denied {
            timestamp: "2026-12-08T10:00:00Z",
            operation: "resolve",
            dest,
        }
    }

    fn at<'a>(timestamp: &'a str, operation: &'a str, dest: &'a str) -> Denied<'a> {
        Denied {
            timestamp,
            operation,
            dest,
        }
    }

    #[test]
    fn several_subdomains_of_one_domain_become_a_wildcard_and_counts_add_up() {
        let denials = [
            at("2026-12-08T10:00:03Z", "resolve", "b.example.org"),
            at("2026-12-08T10:00:01Z", "resolve", "a.example.org"),
            at("2026-12-08T10:00:02Z", "resolve", "a.example.org"),
            resolve("c.example.org."),
            resolve("other.net"),
            resolve("Other.NET"),
            resolve("api.only.example.com"),
            resolve("x.bbc.co.uk"),
            resolve("y.bbc.co.uk"),
            resolve("alice.github.io"),
            resolve("bob.github.io"),
            resolve("example.info"),
            resolve("www.example.info"),
        ];
        let p = propose(denials, &[], None);
        let entries = p.entries();
        for want in [
            "*.example.org",
            "other.net",
            "api.only.example.com",
            "*.bbc.co.uk",
            "alice.github.io",
            "bob.github.io",
            // The domain itself was refused too: it, bare, admits both.
            "example.info",
        ] {
            assert!(entries.contains(&want), "{want}: {entries:?}");
        }
        assert_eq!(entries[0], "*.example.org", "most refused first");
        let org = &p.hosts[0];
        assert_eq!(
            org.names,
            ["a.example.org", "b.example.org", "c.example.org"]
        );
        assert_eq!(org.tally.denials, 4);
        assert_eq!(org.tally.first, timestamp("2026-12-08T10:00:00Z"));
        assert_eq!(org.tally.last, timestamp("2026-12-08T10:00:03Z"));
        let net = p.hosts.iter().find(|h| h.entry == "other.net").unwrap();
        assert_eq!((net.names.len(), net.tally.denials), (1, 2));
        assert_eq!(p.left_out, LeftOut::default());
    }

    #[test]
    fn hostile_names_are_counted_and_never_proposed() {
        let huge = format!("{}.example.com", "a".repeat(300));
        let long_label = format!("{}.example.com", "b".repeat(64));
        let denials = [
            resolve(&huge),
            resolve(&long_label),
            resolve("evil\x1b]52;c;aGk=\x07.example.com"),
            resolve("ok.example.com\n"),
            resolve("bücher.example"),
            resolve("xn--bcher-kva.example"),
            resolve("example.com.."),
            resolve(".example.com"),
            resolve("a..example.com"),
            resolve("under_score.example.com"),
            resolve("-lead.example.com"),
            resolve("wpad"),
            resolve("1.2.3.4"),
            resolve(""),
            resolve("4.3.2.1.in-addr.arpa"),
            resolve("printer.local"),
            at("2026-12-08T10:00:00Z", "explode", "x.example.net"),
        ];
        let p = propose(denials, &[], None);
        // Only the punycode IDN is a name box can allow, shown as DNS carries it.
        assert_eq!(p.entries(), ["xn--bcher-kva.example"]);
        assert_eq!(p.left_out.unreadable, 14, "{:?}", p.left_out);
        assert_eq!(p.left_out.special_use, 2);
        // Nothing hostile leaks into what is shown.
        let shown = format!("{p:?} {}", p.json());
        assert!(
            !shown.contains('\u{1b}') && !shown.contains("evil"),
            "{shown}"
        );
    }

    #[test]
    fn what_the_list_admits_now_and_what_is_older_than_since_are_left_out() {
        let allowed = vec!["example.org".to_string(), "*.example.net".to_string()];
        let denials = [
            at("2026-12-08T09:00:00Z", "resolve", "old.example.com"),
            at("not a time", "resolve", "when.example.com"),
            at("2026-12-08T10:30:00+00:00", "resolve", "new.example.com"),
            resolve("a.example.org"),
            resolve("example.org"),
            resolve("b.example.net"),
            resolve("example.net"),
        ];
        let since = timestamp("2026-12-08T10:00:00Z");
        let p = propose(denials, &allowed, since);
        assert_eq!(p.entries(), ["example.net", "new.example.com"]);
        assert_eq!(p.left_out.already_allowed, 3);
        assert_eq!(p.left_out.outside_since, 2);
        // Without --since, a denial without a readable time still counts.
        let p = propose([at("garbage", "resolve", "when.example.com")], &[], None);
        assert_eq!(p.hosts[0].tally.denials, 1);
        assert_eq!(p.hosts[0].tally.first, None);
    }

    #[test]
    fn addresses_are_listed_apart_and_private_ones_marked() {
        let denials = [
            at("2026-12-08T10:00:00Z", "connect", "203.0.113.7:443"),
            at("2026-12-08T10:00:01Z", "connect", "to 203.0.113.7:443"),
            at("2026-12-08T10:00:01Z", "connect", "10.1.2.3:22"),
            at("2026-12-08T10:00:01Z", "sendto", "[2001:db8::1]:53"),
            at("2026-12-08T10:00:01Z", "connect", "[fd00::1]:80"),
            at("2026-12-08T10:00:01Z", "connect", "198.51.100.1"),
            at("2026-12-08T10:00:01Z", "connect", "somewhere:443"),
        ];
        let p = propose(denials, &[], None);
        assert!(p.hosts.is_empty());
        assert_eq!(p.left_out.unreadable, 1);
        let first = &p.addresses[0];
        assert_eq!(
            (
                first.ip.to_string(),
                first.port,
                first.tally.denials,
                first.private
            ),
            ("203.0.113.7".to_string(), Some(443), 2, false)
        );
        let private: Vec<String> = p
            .addresses
            .iter()
            .filter(|a| a.private)
            .map(|a| a.ip.to_string())
            .collect();
        assert_eq!(private, ["10.1.2.3", "fd00::1"]);
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let names: Vec<String> = (0..MAX_NAMES + 50)
            .map(|i| format!("n{i}.example{i}.com"))
            .collect();
        let p = propose(names.iter().map(|n| resolve(n)), &[], None);
        assert_eq!(p.hosts.len(), MAX_NAMES);
        assert_eq!(p.left_out.beyond_limit, 50);
    }

    #[test]
    fn since_takes_spans_and_refuses_the_rest() {
        assert_eq!(parse_since("1h").unwrap(), chrono::TimeDelta::hours(1));
        assert_eq!(
            parse_since("1h30m").unwrap(),
            chrono::TimeDelta::minutes(90)
        );
        assert_eq!(parse_since("2d").unwrap(), chrono::TimeDelta::days(2));
        for bad in ["", "h", "10", "1y", "-1h", "99999999999999999999s", "9999d"] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}
