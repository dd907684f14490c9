//! Proxy variables as both sides handle them: which names are propagated, and how a proxy
//! URL is shown. Proxy URLs may carry `user:password@`; nothing box or hb prints, logs or
//! reports shows that part ([`redact`]).

/// The proxy variables propagated from the host (Lima's propagateProxyEnv set), upper case;
/// each is also set in lower case in the guest, because tools disagree on which they read
/// (curl reads only `http_proxy` for http, apt either).
pub const NAMES: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"];

/// Whether the variable holds a proxy URL (`NO_PROXY` is a host list).
pub fn is_url_var(name: &str) -> bool {
    !name.eq_ignore_ascii_case("NO_PROXY")
}

/// `scheme://user:pass@host:port/…` → `scheme://***@host:port/…`. The last `@` of the
/// authority ends the userinfo, so a raw `@` in a password is hidden too; a value without
/// userinfo comes back unchanged.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => format!(
            "{scheme}***@{}{}",
            &authority[at + 1..],
            &rest[authority_end..]
        ),
        None => url.to_string(),
    }
}

/// The host part of a proxy URL (`[::1]` → `::1`), lower case; `None` when there is none.
pub fn host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split_once(']').map(|(h, _)| h)?
    } else {
        hostport.split(':').next().unwrap_or("")
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Whether `host` names the machine itself (loopback or the unspecified address), which a
/// guest VM cannot reach as the host.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(v4)) => v4.is_loopback() || v4.is_unspecified(),
        Ok(std::net::IpAddr::V6(v6)) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_userinfo_only() {
        assert_eq!(redact("http://u:p@proxy:3128"), "http://***@proxy:3128");
        assert_eq!(
            redact("http://u:p@ss@proxy:3128/x"),
            "http://***@proxy:3128/x"
        );
        assert_eq!(redact("u:secret@proxy:3128"), "***@proxy:3128");
        assert_eq!(redact("http://proxy:3128/a@b"), "http://proxy:3128/a@b");
        assert_eq!(redact("http://proxy:3128"), "http://proxy:3128");
        assert_eq!(redact(""), "");
        assert_eq!(redact("socks5://:tok@h"), "socks5://***@h");
        assert!(!redact("http://user:hunter2@h?x=1").contains("hunter2"));
    }

    #[test]
    fn host_and_loopback() {
        assert_eq!(
            host("http://u:p@Proxy.Corp:3128/").as_deref(),
            Some("proxy.corp")
        );
        assert_eq!(host("http://[::1]:3128").as_deref(), Some("::1"));
        assert_eq!(host("127.0.0.1:8080").as_deref(), Some("127.0.0.1"));
        assert_eq!(host("http://:3128"), None);
        for h in [
            "localhost",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "0.0.0.0",
            "::ffff:127.0.0.1",
            "a.localhost",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.2.2", "proxy.corp", "192.0.2.2", "::2"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}
