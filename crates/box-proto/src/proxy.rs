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

/// A proxy URL split where its credentials could be: `(scheme://, userinfo, host and the
/// rest)`. The userinfo is everything up to the *last* `@`: people write passwords with
/// raw `/`, `?`, `#` and `@` in them (`http://u:pa/ss@proxy:3128`), which a strict RFC 3986
/// parser would end the authority at, putting the password in the "path". A proxy URL
/// has no use for a path, so hiding a little too much (an `@` in a path) is the price of
/// never printing a password.
fn split(url: &str) -> (&str, Option<&str>, &str) {
    let (scheme, rest) = match url.find("://") {
        Some(at) if is_scheme(&url[..at]) => url.split_at(at + 3),
        _ => ("", url),
    };
    match rest.rfind('@') {
        Some(at) => (scheme, Some(&rest[..at]), &rest[at + 1..]),
        None => (scheme, None, rest),
    }
}

/// The schemes a proxy URL can have (curl's list). Anything else before a `://` belongs to
/// a scheme-less `user:pa://ss@host`, and is hidden with the rest of the userinfo.
fn is_scheme(s: &str) -> bool {
    ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]
        .iter()
        .any(|k| k.eq_ignore_ascii_case(s))
}

/// `scheme://user:pass@host:port/…` → `scheme://***@host:port/…`, whatever characters,
/// raw or percent-encoded, the user name and password hold (see `split`). A value
/// without userinfo comes back unchanged.
pub fn redact(url: &str) -> String {
    match split(url) {
        (scheme, Some(_), hostport) => format!("{scheme}***@{hostport}"),
        (_, None, _) => url.to_string(),
    }
}

/// The host part of a proxy URL (`[::1]` → `::1`), lower case; `None` when there is none.
pub fn host(url: &str) -> Option<String> {
    let (_, _, rest) = split(url);
    let hostport = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
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
        assert_eq!(redact("http://proxy:3128/a"), "http://proxy:3128/a");
        // An `@` anywhere may end a password: hidden, even in what could be a path.
        assert_eq!(redact("http://proxy:3128/a@b"), "http://***@b");
        // Raw delimiters in the password (issue 22: this one was printed as it was).
        assert_eq!(redact("http://u:pa/ss@proxy:3128"), "http://***@proxy:3128");
        assert_eq!(host("http://u:pa/ss@proxy:3128").as_deref(), Some("proxy"));
        assert_eq!(
            redact("http://u:p?a#s@proxy:3128/"),
            "http://***@proxy:3128/"
        );
        assert_eq!(redact("u:pa://ss@proxy:1"), "***@proxy:1");
        assert_eq!(redact("http://proxy:3128"), "http://proxy:3128");
        assert_eq!(redact(""), "");
        assert_eq!(redact("socks5://:tok@h"), "socks5://***@h");
        assert!(!redact("http://user:hunter2@h?x=1").contains("hunter2"));
    }

    use proptest::prelude::*;

    /// Every character RFC 3986 reserves, `%`, and a few that are not ASCII.
    fn credential() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                proptest::char::range('a', 'z'),
                proptest::char::range('0', '9'),
                proptest::sample::select(vec![
                    ':', '/', '?', '#', '[', ']', '@', '!', '$', '&', '\'', '(', ')', '*', '+',
                    ',', ';', '=', '%', '-', '.', '_', '~', ' ', 'é', '🔑',
                ]),
            ],
            0..24,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        #[test]
        fn any_user_and_password_print_as_stars(
            scheme in proptest::sample::select(vec!["http://", "https://", "socks5h://", ""]),
            user in credential(),
            password in proptest::option::of(credential()),
            encode in any::<bool>(),
            host in "[a-z][a-z0-9-]{0,10}(\\.[a-z]{2,5})?",
            port in 1u16..,
            path in proptest::sample::select(vec!["", "/", "/x?y=1#z"]),
        ) {
            // Users write credentials raw or percent-encoded; both must be hidden.
            let enc = |s: &str| if encode {
                s.bytes().map(|b| format!("%{b:02X}")).collect()
            } else {
                s.to_string()
            };
            let userinfo = match &password {
                Some(p) => format!("{}:{}", enc(&user), enc(p)),
                None => enc(&user),
            };
            let url = format!("{scheme}{userinfo}@{host}:{port}{path}");
            prop_assert_eq!(redact(&url), format!("{scheme}***@{host}:{port}{path}"));
            prop_assert_eq!(super::host(&url), Some(host.clone()));
        }
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
