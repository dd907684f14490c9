//! The bearer token, kept out of `Debug`, `Display` and error text.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};

/// Executor's bearer token. `Debug` prints `BearerToken([REDACTED])`; there is no
/// `Display`. Read it only to build the `Authorization` header or to write it to a 0600 file.
#[derive(Clone)]
pub struct BearerToken(SecretString);

impl BearerToken {
    /// Wraps a token, trimming surrounding whitespace (files end with a newline).
    /// Returns `None` for an empty token.
    pub fn new(raw: &str) -> Option<Self> {
        let t = raw.trim();
        if t.is_empty() {
            None
        } else {
            Some(Self(SecretString::from(t.to_string())))
        }
    }

    /// The secret value. Callers must not log or print it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// Replaces every occurrence of the token in `text` (a server may echo headers back in
    /// an error page; that text must not carry the token into our errors).
    pub fn redact(&self, text: &str) -> String {
        text.replace(self.expose(), "[REDACTED]")
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken([REDACTED])")
    }
}

impl PartialEq for BearerToken {
    fn eq(&self, other: &Self) -> bool {
        // Length first, then every byte, so equal-length tokens compare in constant time.
        let (a, b) = (self.expose().as_bytes(), other.expose().as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl Eq for BearerToken {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let t = BearerToken::new(" s3cr3t-value\n").unwrap();
        assert_eq!(t.expose(), "s3cr3t-value");
        assert!(!format!("{t:?}").contains("s3cr3t"));
        assert!(!format!("{:?}", Some(&t)).contains("s3cr3t"));
        assert_eq!(t.redact("echo s3cr3t-value!"), "echo [REDACTED]!");
        assert!(BearerToken::new("  \n").is_none());
        assert_eq!(t, BearerToken::new("s3cr3t-value").unwrap());
        assert_ne!(t, BearerToken::new("s3cr3t-valuf").unwrap());
    }
}
