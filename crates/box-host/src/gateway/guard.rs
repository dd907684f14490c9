//! Who may talk to the gateway at all: the Host header guard (DNS rebinding, and every
//! name but the box's own), the site guard (what another site, or another local web page,
//! may ask), and the Origin guard (a page from another origin cannot make state-changing
//! requests).
//!
//! The gateway answers only to its box's host name and port (`box-<name>.localhost:<port>`,
//! see [`super::host_name`]): not to `127.0.0.1` or `localhost`, whose cookie jar every
//! local web app shares, nor to another box's name, nor to a DNS-rebinding site's.
//!
//! Every other port of that host name, and every name under it, is still the *same site*
//! (a browser sends our `SameSite=Strict` cookie with their requests), and whatever
//! listens on such a port can be reached under that name. Hence:
//!
//! - `Sec-Fetch-Site: cross-site` is refused whatever the method: another site (any other
//!   app on the loopback, another box's UI included) has no business with the gateway (a
//!   link from one refuses too: use `box open`);
//! - `same-site` (a page on another port of the box's host name) may only navigate the
//!   whole tab to the gateway (`Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document`),
//!   which shows the user the UI and gives the other page nothing back. It may not embed
//!   it in a frame (clickjacking; every response also says `frame-ancestors 'none'`), nor
//!   fetch, script or image-load it with our cookie (the replies it cannot read could
//!   still act, or time);
//! - state-changing methods and WebSocket upgrades (which browsers send cross-origin
//!   freely) need our exact Origin, or none at all (curl, agents).
//!
//! Browsers that send no `Sec-Fetch-*` (older ones, non-browsers) fall back to the Origin
//! check alone.

use hyper::Method;

/// Whether `host` (the Host header) is `authority`, the gateway's `<host name>:<port>`
/// (ASCII case aside). Anything else is a DNS-rebinding attempt, a misdirected client, or
/// a page at a loopback address or name whose cookies other apps share.
pub fn host_allowed(host: Option<&str>, authority: &str) -> bool {
    host.is_some_and(|h| h.eq_ignore_ascii_case(authority))
}

/// Whether `origin` is this gateway's own origin, `http://<authority>`.
fn origin_is_ours(origin: &str, authority: &str) -> bool {
    origin
        .strip_prefix("http://")
        .is_some_and(|host| host_allowed(Some(host), authority))
}

/// Methods that change nothing (by HTTP's rules) and need no Origin check.
fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// What a browser says about where a request comes from (`Sec-Fetch-*`); all optional.
#[derive(Debug, Clone, Copy, Default)]
pub struct FetchMeta<'a> {
    pub site: Option<&'a str>,
    pub mode: Option<&'a str>,
    pub dest: Option<&'a str>,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// From another site, or a local page's frame, fetch or subresource.
    OtherSite,
    /// A state-changing request or upgrade from another origin.
    ForeignOrigin,
}

/// Whether a request may go on, judged by its method, `Origin` and `Sec-Fetch-*`.
/// Clients that send no Origin (curl, agents) are not browsers acting for another page.
pub fn request_allowed(
    method: &Method,
    upgrade: bool,
    origin: Option<&str>,
    fetch: FetchMeta<'_>,
    authority: &str,
) -> Result<(), Refusal> {
    match fetch.site {
        Some("cross-site") => return Err(Refusal::OtherSite),
        Some("same-site")
            if !(fetch.mode == Some("navigate") && fetch.dest == Some("document")) =>
        {
            return Err(Refusal::OtherSite);
        }
        _ => {}
    }
    if is_safe(method) && !upgrade {
        return Ok(());
    }
    if let Some(site) = fetch.site
        && !matches!(site, "same-origin" | "none")
    {
        return Err(Refusal::ForeignOrigin);
    }
    if origin.is_none_or(|o| origin_is_ours(o, authority)) {
        Ok(())
    } else {
        Err(Refusal::ForeignOrigin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "box-alpha.localhost:4000";

    #[test]
    fn host_must_be_the_boxs_own_name_and_port() {
        for ok in [OURS, "Box-Alpha.LOCALHOST:4000"] {
            assert!(host_allowed(Some(ok), OURS), "{ok}");
        }
        for bad in [
            None,
            Some(""),
            // The loopback addresses and names every local web app shares.
            Some("127.0.0.1:4000"),
            Some("localhost:4000"),
            Some("[::1]:4000"),
            Some("0.0.0.0:4000"),
            // Another box's name, or another port.
            Some("box-beta.localhost:4000"),
            Some("box-alpha.localhost:4001"),
            Some("box-alpha.localhost:40000"),
            Some("box-alpha.localhost"),
            // Near misses.
            Some("box-alpha.localhost.:4000"),
            Some("x.box-alpha.localhost:4000"),
            Some("box-alpha.localhost.evil.example:4000"),
            Some("evil.example:4000"),
            Some("box-alpha.localhost:4000:4000"),
            Some("user@box-alpha.localhost:4000"),
            Some(" box-alpha.localhost:4000"),
            Some("box-alpha.localhost:4000 "),
        ] {
            assert!(!host_allowed(bad, OURS), "{bad:?}");
        }
    }

    fn allowed(method: &Method, upgrade: bool, origin: Option<&str>, site: Option<&str>) -> bool {
        let fetch = FetchMeta {
            site,
            ..FetchMeta::default()
        };
        request_allowed(method, upgrade, origin, fetch, OURS).is_ok()
    }

    #[test]
    fn another_site_is_refused_whatever_it_asks() {
        for method in [Method::GET, Method::HEAD, Method::POST] {
            let r = request_allowed(
                &method,
                false,
                Some("http://evil.example"),
                FetchMeta {
                    site: Some("cross-site"),
                    mode: Some("navigate"),
                    dest: Some("document"),
                },
                OURS,
            );
            assert_eq!(r, Err(Refusal::OtherSite), "{method}");
        }
    }

    #[test]
    fn a_local_page_may_only_navigate_to_the_gateway() {
        let same_site = |mode, dest| FetchMeta {
            site: Some("same-site"),
            mode: Some(mode),
            dest: Some(dest),
        };
        let get = |f| request_allowed(&Method::GET, false, None, f, OURS);
        assert_eq!(get(same_site("navigate", "document")), Ok(()));
        for (mode, dest) in [
            ("navigate", "iframe"),
            ("navigate", "frame"),
            ("no-cors", "image"),
            ("no-cors", "script"),
            ("cors", "empty"),
            ("no-cors", "empty"),
        ] {
            assert_eq!(
                get(same_site(mode, dest)),
                Err(Refusal::OtherSite),
                "{mode} {dest}"
            );
        }
        // A form posted from another port navigates too, but changes state.
        let post = request_allowed(
            &Method::POST,
            false,
            Some("http://box-alpha.localhost:4001"),
            same_site("navigate", "document"),
            OURS,
        );
        assert_eq!(post, Err(Refusal::ForeignOrigin));
    }

    #[test]
    fn safe_requests_from_our_page_or_no_browser_pass() {
        assert!(allowed(&Method::GET, false, None, None));
        assert!(allowed(&Method::GET, false, None, Some("same-origin")));
        assert!(allowed(&Method::GET, false, None, Some("none")));
        // Without Sec-Fetch-Site (an old browser), a GET's Origin is not checked.
        assert!(allowed(
            &Method::GET,
            false,
            Some("http://evil.example"),
            None
        ));
    }

    #[test]
    fn state_changing_requests_need_our_origin() {
        let post = Method::POST;
        assert!(allowed(
            &post,
            false,
            Some("http://box-alpha.localhost:4000"),
            Some("same-origin")
        ));
        assert!(allowed(
            &post,
            false,
            Some("http://box-alpha.localhost:4000"),
            None
        ));
        assert!(allowed(&post, false, None, None), "curl sends no Origin");
        for bad in [
            "http://evil.example",
            "http://127.0.0.1:4000",
            "http://localhost:4000",
            "http://box-beta.localhost:4000",
            "http://box-alpha.localhost:4001",
            "https://box-alpha.localhost:4000",
            "null",
            "http://box-alpha.localhost:4000.evil.example",
            "",
        ] {
            assert!(!allowed(&post, false, Some(bad), None), "{bad}");
            assert!(!allowed(&Method::DELETE, false, Some(bad), None));
            assert!(!allowed(&Method::PUT, false, Some(bad), None));
        }
        assert!(!allowed(&post, false, None, Some("same-site")));
        assert!(!allowed(
            &post,
            false,
            Some("http://box-alpha.localhost:4000"),
            Some("cross-site")
        ));
    }

    #[test]
    fn websocket_upgrades_are_state_changing() {
        assert!(!allowed(
            &Method::GET,
            true,
            Some("http://evil.example"),
            None
        ));
        assert!(allowed(
            &Method::GET,
            true,
            Some("http://box-alpha.localhost:4000"),
            None
        ));
        assert!(!allowed(
            &Method::GET,
            true,
            Some("http://127.0.0.1:4000"),
            None
        ));
    }
}
