//! The host name a box's UI is served at: `box-<name>.localhost`.
//!
//! Cookies are isolated by host, not by port: at `127.0.0.1:<port>` Executor's scripts
//! would share one cookie jar with every other web app on the user's loopback. A name of
//! the box's own gives its UI a jar of its own. Browsers (Chromium, Firefox, Safari)
//! resolve every `*.localhost` name to loopback themselves, without asking DNS, so no
//! resolver setup is needed and a DNS-rebinding site cannot claim the name.
//!
//! One label under `localhost`, never more. Browsers take `localhost` for a registry (a
//! TLD they do not know), so `alpha.box.localhost` and `beta.box.localhost` would share
//! the registrable domain `box.localhost`: one box's page could set a
//! `Domain=box.localhost` cookie that the other box's page reads, and the two would be
//! same-site (both seen in Chromium 156). `box-alpha.localhost` is a site of its own: a
//! cookie for `Domain=localhost` is refused as one for a public suffix would be.
//!
//! A label holds at most 63 characters (Chromium does not load a longer one), and a box
//! name may have 63: a name longer than [`MAX_PLAIN`] keeps its first characters and ends
//! in `--` and 8 hex digits of its SHA-256. Box names never hold `--`, so such a label is
//! never another box's plain one.

use sha2::{Digest, Sha256};

/// Longest DNS label.
const MAX_LABEL: usize = 63;
const PREFIX: &str = "box-";
/// Longest box name whose label is `box-<name>` as it is.
const MAX_PLAIN: usize = MAX_LABEL - PREFIX.len();
/// Hex digits of the name's digest in a shortened label.
const DIGEST_HEX: usize = 8;

/// The host name of the UI of the box named `name` (a valid box name: lowercase letters,
/// digits and single dashes).
pub fn for_box(name: &str) -> String {
    format!("{}.localhost", label(name))
}

/// `box-<name>`, shortened with a digest when that would not fit in one label.
fn label(name: &str) -> String {
    if name.len() <= MAX_PLAIN {
        return format!("{PREFIX}{name}");
    }
    let digest = hex::encode(Sha256::digest(name.as_bytes()));
    let keep = MAX_LABEL - PREFIX.len() - "--".len() - DIGEST_HEX;
    // Box names are ASCII: any byte index is a character boundary.
    format!("{PREFIX}{}--{}", &name[..keep], &digest[..DIGEST_HEX])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_gets_one_label_of_its_own_under_localhost() {
        assert_eq!(for_box("alpha"), "box-alpha.localhost");
        assert_eq!(for_box("my-box-2"), "box-my-box-2.localhost");
        let longest_plain = "a".repeat(MAX_PLAIN);
        assert_eq!(
            for_box(&longest_plain),
            format!("box-{longest_plain}.localhost")
        );
    }

    #[test]
    fn a_long_name_is_shortened_to_a_label_no_other_box_has() {
        let long = format!("{}-x", "a".repeat(61));
        let short = format!("{}-y", "a".repeat(61));
        let (a, b) = (label(&long), label(&short));
        assert_eq!(a.len(), MAX_LABEL, "{a}");
        assert_eq!(b.len(), MAX_LABEL, "{b}");
        assert_ne!(a, b, "names alike in their first characters");
        assert!(a.starts_with(&format!("box-{}", &long[..40])), "{a}");
        // A valid box name never holds `--`: no plain label looks like this one.
        assert!(box_proto::BoxName::parse(&a[PREFIX.len()..]).is_err());
        for l in [&a, &b] {
            assert!(
                l.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
                "{l}"
            );
            assert!(!l.ends_with('-'), "{l}");
        }
        assert_eq!(label(&long), a, "the same name, the same label");
    }
}
