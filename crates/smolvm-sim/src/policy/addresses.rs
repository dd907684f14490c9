//! Which addresses and names an allow list or the private floor speaks of, as smolvm reads
//! its own flags (`smolvm-network` 1.33.0 `src/egress.rs`; `smolvm-protocol` 1.33.0
//! `src/host_pattern.rs`; read, not copied): ranges, the private and metadata ranges, and
//! how a stored allow-host entry matches a name. Plain data and pure functions: the
//! machine record, `create`'s checks and the running gateway all read them.

use std::net::IpAddr;

/// An IPv4 or IPv6 range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: u128,
    mask: u128,
    v4: bool,
}

impl Cidr {
    /// `a.b.c.d`, `a.b.c.d/n`, `x::y`, `x::y/n`; `None` for anything else.
    pub fn parse(spec: &str) -> Option<Self> {
        let spec = spec.trim();
        let (addr, prefix) = match spec.split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u32>().ok()?)),
            None => (spec, None),
        };
        let ip: IpAddr = addr.parse().ok()?;
        let (bits, width, v4) = match ip {
            IpAddr::V4(v) => (u128::from(u32::from(v)), 32, true),
            IpAddr::V6(v) => (u128::from(v), 128, false),
        };
        let prefix = prefix.unwrap_or(width);
        if prefix > width {
            return None;
        }
        let mask = if prefix == 0 {
            0
        } else {
            (u128::MAX << (128 - prefix)) >> (128 - width)
        };
        Some(Self {
            net: bits & mask,
            mask,
            v4,
        })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.v4, ip) {
            (true, IpAddr::V4(v)) => u128::from(u32::from(v)) & self.mask == self.net,
            (false, IpAddr::V6(v)) => u128::from(v) & self.mask == self.net,
            // A v4 range also covers the IPv4-mapped spelling of its addresses.
            (true, IpAddr::V6(v)) => v
                .to_ipv4_mapped()
                .is_some_and(|m| u128::from(u32::from(m)) & self.mask == self.net),
            (false, IpAddr::V4(_)) => false,
        }
    }
}

fn v4_of(ip: IpAddr) -> Option<std::net::Ipv4Addr> {
    match ip {
        IpAddr::V4(v) => Some(v),
        IpAddr::V6(v) => v.to_ipv4_mapped(),
    }
}

/// Cloud metadata: 169.254/16 and fe80::/10, in any spelling.
pub fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v) if v.to_ipv4_mapped().is_none() => v.segments()[0] & 0xffc0 == 0xfe80,
        _ => v4_of(ip).is_some_and(|v| v.is_link_local()),
    }
}

pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v) if v.to_ipv4_mapped().is_none() => v.is_loopback() || v.is_unspecified(),
        _ => v4_of(ip).is_some_and(|v| v.is_loopback() || v.is_unspecified()),
    }
}

/// The ranges `--block-private` closes.
pub fn is_private(ip: IpAddr) -> bool {
    if let IpAddr::V6(v) = ip
        && v.to_ipv4_mapped().is_none()
    {
        let s = v.segments()[0];
        return v.is_loopback()
            || v.is_unspecified()
            || s & 0xffc0 == 0xfe80
            || s & 0xfe00 == 0xfc00;
    }
    v4_of(ip).is_some_and(|v| {
        let o = v.octets();
        v.is_loopback()
            || v.is_link_local()
            || v.is_private()
            || v.is_unspecified()
            || v.is_broadcast()
            || (o[0] == 100 && (64..=127).contains(&o[1]))
    })
}

/// Does a stored allow-host entry admit `host`? Bare entries: the name and its subdomains;
/// `=name`: exactly the name (`--allow-host-pattern name`); `*.name`: subdomains only.
pub fn host_matches(host: &str, entry: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let entry = entry.trim_end_matches('.').to_ascii_lowercase();
    if let Some(exact) = entry.strip_prefix('=') {
        return !exact.is_empty() && host == exact;
    }
    if let Some(parent) = entry.strip_prefix("*.") {
        return !parent.is_empty()
            && host.len() > parent.len() + 1
            && host.ends_with(&format!(".{parent}"));
    }
    !entry.is_empty() && (host == entry || host.ends_with(&format!(".{entry}")))
}

/// `--allow-host-pattern P` as smolvm stores it (`=host` or `*.host`), or its refusal.
pub fn encode_pattern(pattern: &str) -> Result<String, String> {
    let p = pattern.strip_suffix('.').unwrap_or(pattern);
    let (host, wildcard) = match p.strip_prefix("*.") {
        Some(h) => (h, true),
        None => (p, false),
    };
    let bad_label = host.split('.').any(|l| {
        l.is_empty()
            || l.len() > 63
            || l.starts_with('-')
            || l.ends_with('-')
            || !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    if host.is_empty()
        || host.len() > 253
        || host.contains('*')
        || (!wildcard && host.parse::<IpAddr>().is_ok())
        || bad_label
    {
        return Err(format!(
            "invalid host pattern {p:?}: use an exact DNS hostname or *.domain"
        ));
    }
    let host = host.to_ascii_lowercase();
    Ok(if wildcard {
        format!("*.{host}")
    } else {
        format!("={host}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn host_entries_match_as_smolvm_stores_them() {
        assert!(host_matches("api.example.com", "example.com"));
        assert!(host_matches("EXAMPLE.com.", "example.com"));
        assert!(!host_matches("badexample.com", "example.com"));
        assert!(host_matches("exact.test", "=exact.test"));
        assert!(!host_matches("a.exact.test", "=exact.test"));
        assert!(host_matches("a.b.test", "*.b.test"));
        assert!(!host_matches("b.test", "*.b.test"));
        assert_eq!(encode_pattern("*.Npmjs.org"), Ok("*.npmjs.org".into()));
        assert_eq!(encode_pattern("pypi.org"), Ok("=pypi.org".into()));
        for bad in ["", "*.", "a.*.b", "10.0.0.1", "a..b", "-a.b", "a_b.c"] {
            assert!(encode_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs_parse_like_smolvm() {
        assert!(Cidr::parse("10.0.0.0/8").is_some_and(|c| c.contains(ip("10.255.0.1"))));
        assert!(Cidr::parse("1.2.3.4").is_some_and(|c| !c.contains(ip("1.2.3.5"))));
        assert!(Cidr::parse("fd00::/8").is_some_and(|c| c.contains(ip("fd12::1"))));
        assert!(Cidr::parse("0.0.0.0/0").is_some_and(|c| c.contains(ip("8.8.8.8"))));
        for bad in ["10.0.0.0/33", "x", "::/129", "10.0.0/8"] {
            assert!(Cidr::parse(bad).is_none(), "{bad}");
        }
    }
}
