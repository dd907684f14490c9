//! Box names.
//!
//! smolvm accepts `[A-Za-z0-9_-]`, a leading alphanumeric, no trailing `-`, no `--`, at most
//! 128 bytes (docs/smolvm.md, "Conventions"). From v1.9.0 it also uses the machine name as the
//! guest hostname, but only when the name is a lowercase DNS label. Our rule is the strict
//! intersection: a lowercase DNS label of 1–63 characters, which is always a valid smolvm
//! name and always a valid hostname.

use std::fmt;

/// The longest box name: one DNS label.
pub const MAX_NAME_LEN: usize = 63;

/// A validated box name. The only way to get one is [`BoxName::parse`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct BoxName(String);

/// Why a string is not a box name. Each message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("box name is empty")]
    Empty,
    #[error("box name '{shown}' is {len} characters long; the limit is {MAX_NAME_LEN}")]
    TooLong { shown: String, len: usize },
    #[error(
        "box name '{shown}' contains {what} at position {pos}; use lowercase letters, digits and '-'"
    )]
    BadChar {
        shown: String,
        what: String,
        pos: usize,
    },
    #[error("box name '{shown}' must start with a lowercase letter or a digit")]
    BadStart { shown: String },
    #[error("box name '{shown}' must not end with '-'")]
    TrailingDash { shown: String },
    #[error("box name '{shown}' must not contain '--'")]
    DoubleDash { shown: String },
}

/// Makes a name printable in an error without letting control characters reach a terminal.
fn shown(raw: &str) -> String {
    raw.chars().flat_map(char::escape_debug).collect()
}

fn describe(c: char) -> String {
    if c.is_ascii_uppercase() {
        format!("an uppercase letter '{c}'")
    } else if c.is_control() {
        format!("a control character {}", c.escape_unicode())
    } else if c.is_whitespace() {
        "whitespace".to_string()
    } else {
        format!("'{}'", c.escape_debug())
    }
}

impl BoxName {
    /// Validates `raw` as a box name.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        if raw.is_empty() {
            return Err(NameError::Empty);
        }
        let len = raw.chars().count();
        if len > MAX_NAME_LEN {
            return Err(NameError::TooLong {
                shown: shown(&raw.chars().take(20).collect::<String>()) + "…",
                len,
            });
        }
        for (pos, c) in raw.chars().enumerate() {
            if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
                return Err(NameError::BadChar {
                    shown: shown(raw),
                    what: describe(c),
                    pos: pos + 1,
                });
            }
        }
        if raw.starts_with('-') {
            return Err(NameError::BadStart { shown: shown(raw) });
        }
        if raw.ends_with('-') {
            return Err(NameError::TrailingDash { shown: shown(raw) });
        }
        if raw.contains("--") {
            return Err(NameError::DoubleDash { shown: shown(raw) });
        }
        Ok(Self(raw.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BoxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BoxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BoxName({:?})", self.0)
    }
}

impl std::str::FromStr for BoxName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'de> serde::Deserialize<'de> for BoxName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// smolvm's own rule (`validate_vm_name`, docs/smolvm.md), used to prove ours is a subset of
/// it.
pub fn is_valid_smolvm_name(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    !raw.is_empty()
        && bytes.len() <= 128
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
        && !raw.ends_with('-')
        && !raw.contains("--")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_dns_labels() {
        for ok in ["a", "alpha", "box-1", "0day", &"a".repeat(63)] {
            assert_eq!(BoxName::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn each_rejection_says_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("Alpha", "uppercase letter 'A'"),
            ("al pha", "whitespace"),
            ("al_pha", "'_'"),
            ("al.pha", "'.'"),
            ("-alpha", "must start"),
            ("alpha-", "must not end with '-'"),
            ("al--pha", "'--'"),
            ("al\u{1b}pha", "control character"),
            ("ünïcode", "'ü'"),
        ];
        for (raw, expected) in cases {
            let err = BoxName::parse(raw).unwrap_err().to_string();
            assert!(err.contains(expected), "{raw:?}: {err}");
            assert!(!err.contains('\u{1b}'), "control char echoed: {err:?}");
        }
        let long = "a".repeat(64);
        let err = BoxName::parse(&long).unwrap_err().to_string();
        assert!(err.contains("64 characters") && err.contains("63"), "{err}");
    }

    #[test]
    fn deserializing_validates() {
        assert!(serde_json::from_str::<BoxName>("\"ok-1\"").is_ok());
        assert!(serde_json::from_str::<BoxName>("\"Bad\"").is_err());
    }

    proptest! {
        #[test]
        fn every_box_name_is_a_valid_smolvm_name(raw in "[a-zA-Z0-9_. -]{0,70}") {
            if let Ok(name) = BoxName::parse(&raw) {
                prop_assert!(is_valid_smolvm_name(name.as_str()));
            }
        }

        #[test]
        fn generated_labels_are_accepted(raw in "[a-z0-9]([a-z0-9]|-[a-z0-9]){0,30}") {
            prop_assert!(BoxName::parse(&raw).is_ok());
        }
    }
}
