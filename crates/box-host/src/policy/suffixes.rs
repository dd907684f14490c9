//! Registrable domains without the Public Suffix List: the part of a name one owner holds
//! (`example.com` of `a.b.example.com`), which is as broad as a proposed allow-list entry
//! may ever be (`box egress --propose`).
//!
//! The `psl` crate compiles the whole list into one generated match, minutes of build on
//! the two cores box is developed on, and `publicsuffix` needs the list as a file at run
//! time; so box keeps a documented minimal list instead: the multi-label suffixes names are
//! most often registered under (country second levels such as `co.uk`, `com.au`), and the
//! hosting platforms that give every customer a subdomain (`github.io`, `vercel.app`, …).
//! A name under none of them has the last label as its suffix.
//!
//! The list errs one way only: a suffix missing from it can make a group broader than the
//! real registrable domain (`*.example.co` for two customers of an unlisted platform), so
//! when in doubt a platform is listed; a listed suffix that is not one only makes
//! proposals narrower. Proposals are shown for a person to read before any is applied.

/// Multi-label public suffixes (lowercase, without a leading dot).
const MULTI_LABEL: &[&str] = &[
    // Country second levels.
    "co.uk",
    "org.uk",
    "ac.uk",
    "gov.uk",
    "me.uk",
    "ltd.uk",
    "plc.uk",
    "net.uk",
    "sch.uk",
    "nhs.uk",
    "com.au",
    "net.au",
    "org.au",
    "edu.au",
    "gov.au",
    "id.au",
    "asn.au",
    "co.nz",
    "net.nz",
    "org.nz",
    "ac.nz",
    "govt.nz",
    "co.jp",
    "ne.jp",
    "or.jp",
    "ac.jp",
    "go.jp",
    "ad.jp",
    "com.br",
    "net.br",
    "org.br",
    "gov.br",
    "edu.br",
    "com.cn",
    "net.cn",
    "org.cn",
    "gov.cn",
    "edu.cn",
    "ac.cn",
    "com.hk",
    "org.hk",
    "net.hk",
    "edu.hk",
    "com.tw",
    "org.tw",
    "edu.tw",
    "com.sg",
    "edu.sg",
    "gov.sg",
    "com.my",
    "com.ph",
    "com.vn",
    "co.id",
    "ac.id",
    "co.in",
    "net.in",
    "org.in",
    "gov.in",
    "ac.in",
    "edu.in",
    "co.kr",
    "or.kr",
    "ac.kr",
    "co.il",
    "org.il",
    "ac.il",
    "co.za",
    "org.za",
    "ac.za",
    "gov.za",
    "co.th",
    "ac.th",
    "in.th",
    "com.mx",
    "org.mx",
    "gob.mx",
    "com.ar",
    "gob.ar",
    "com.co",
    "com.pe",
    "com.tr",
    "org.tr",
    "gov.tr",
    "edu.tr",
    "com.ua",
    "org.ua",
    "com.pl",
    "net.pl",
    "org.pl",
    "com.eg",
    "com.sa",
    "com.pk",
    "com.ng",
    "co.ke",
    "com.es",
    "org.es",
    "gob.es",
    // Platforms that give each customer a subdomain of theirs.
    "github.io",
    "githubusercontent.com",
    "gitlab.io",
    "pages.dev",
    "workers.dev",
    "vercel.app",
    "netlify.app",
    "herokuapp.com",
    "fly.dev",
    "onrender.com",
    "web.app",
    "firebaseapp.com",
    "appspot.com",
    "azurewebsites.net",
    "cloudapp.net",
    "blob.core.windows.net",
    "cloudfront.net",
    "amazonaws.com",
    "r2.dev",
    "ngrok.io",
    "ngrok-free.app",
    "trycloudflare.com",
    "readthedocs.io",
    "hf.space",
    "repl.co",
    "glitch.me",
    "surge.sh",
    "deno.dev",
    "supabase.co",
    "blogspot.com",
];

/// The registrable domain of `name` (a checked lowercase DNS name without a trailing dot):
/// its public suffix and one label more. `None` when `name` is itself a public suffix
/// (`co.uk`, `github.io`, a bare TLD): nothing narrower than the name can be proposed then.
pub(super) fn registrable(name: &str) -> Option<&str> {
    let suffix_len = MULTI_LABEL
        .iter()
        .filter(|s| name.ends_with(&format!(".{s}")) || name == **s)
        .map(|s| s.len())
        .max()
        .unwrap_or_else(|| name.rsplit('.').next().map_or(0, str::len));
    if name.len() <= suffix_len {
        return None;
    }
    let before_suffix = &name[..name.len() - suffix_len - 1];
    let start = before_suffix.rfind('.').map_or(0, |i| i + 1);
    Some(&name[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registrable_domain_is_one_label_under_its_suffix() {
        for (name, want) in [
            ("a.example.org", Some("example.org")),
            ("x.y.example.org", Some("example.org")),
            ("example.org", Some("example.org")),
            ("www.bbc.co.uk", Some("bbc.co.uk")),
            ("bbc.co.uk", Some("bbc.co.uk")),
            ("co.uk", None),
            ("org", None),
            ("alice.github.io", Some("alice.github.io")),
            ("docs.alice.github.io", Some("alice.github.io")),
            ("github.io", None),
            ("github.com", Some("github.com")),
            (
                "objects.githubusercontent.com",
                Some("objects.githubusercontent.com"),
            ),
            (
                "acct.blob.core.windows.net",
                Some("acct.blob.core.windows.net"),
            ),
            ("core.windows.net", Some("windows.net")),
            // A suffix matches whole labels only.
            ("myco.uk", Some("myco.uk")),
            ("notgithub.io", Some("notgithub.io")),
        ] {
            assert_eq!(registrable(name), want, "{name}");
        }
    }

    #[test]
    fn the_list_is_lowercase_names_of_two_labels_or_more() {
        for s in MULTI_LABEL {
            assert!(
                s.contains('.')
                    && s.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'.'
                        || b == b'-'),
                "{s}"
            );
        }
    }
}
