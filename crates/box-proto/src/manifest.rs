//! The runtime manifest: `~/.config/hermes-box/runtime-manifest` in the guest.
//!
//! Plain `key=value` lines, the seed's format (docs/backup-format.md, "The archive"). It
//! travels inside every backup, so a reader must cope with files written by other versions:
//! unknown keys are kept (in their order), while anything that could confuse a terminal or
//! a later parser (control characters, duplicate keys, a line without `=`) is an error.

use std::fmt;

mod sqlite_check;
pub use sqlite_check::{Damaged, SqliteCheck};

/// The keys the seed writes, in its order, followed by the ones this project adds.
pub const KNOWN_KEYS: &[&str] = &[
    "created_at",
    "base_image",
    "node",
    "claude",
    "codex",
    "hermes",
    "executor",
    "box",
    "hb",
    "smolvm",
    "archive_format",
];

/// A backup's position in its chain of incremental backups: `0` for a full one. Written
/// by `hb export` in chain mode (not `hb write-manifest`), like the parent below.
pub const CHAIN_LINK_KEY: &str = "chain_link";
/// The SHA-256 (hex) of the backup file an incremental backup builds on; empty for a full
/// one. Inside the encrypted backup, so a restore trusts it only as far as the file.
pub const CHAIN_PARENT_KEY: &str = "chain_parent";

/// What the check of the databases' copies found when `hb export` made them: `ok`, or
/// `damaged <path> <path>…` (data-root-relative), then how many were checked and how many
/// were unchanged since the last save (not read again); [`SqliteCheck`] writes and reads
/// it. Not one of [`KNOWN_KEYS`]: those are what `hb write-manifest` writes; the export
/// writes this one. (`hb quiesce` wrote it, with the same values, before exports copied
/// live databases.)
pub const SQLITE_CHECK_KEY: &str = "sqlite_check";

/// A box's network policy, as `box` records it at each save (`hb write-manifest --policy
/// KEY=VALUE`) so `box load` can make the restored box with it: `egress` (`open` or
/// `allowlist`), then space-separated lists: the user's extra names, address ranges, the
/// private ranges re-opened, and the credential bindings as `NAME@HOST[,HOST]` (which host
/// may receive which variable; never a value, never where the value is kept). Not in
/// [`KNOWN_KEYS`]: only `box` knows them, and a manifest without them is an older box's.
pub const POLICY_KEYS: &[&str] = &[
    "egress",
    "egress_allow_hosts",
    "egress_allow_cidrs",
    "egress_allow_private",
    "credentials",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("runtime manifest line {line}: no '=' (expected key=value)")]
    NoEquals { line: usize },
    #[error("runtime manifest line {line}: empty key")]
    EmptyKey { line: usize },
    #[error("runtime manifest line {line}: key {key:?} may only hold a-z, 0-9, '_', '-' and '.'")]
    BadKey { line: usize, key: String },
    #[error("runtime manifest line {line}: control character in the value of '{key}'")]
    ControlChar { line: usize, key: String },
    #[error("runtime manifest line {line}: duplicate key '{key}' (first on line {first})")]
    Duplicate {
        line: usize,
        key: String,
        first: usize,
    },
    #[error("runtime manifest is not UTF-8 text")]
    NotUtf8,
}

/// An ordered set of `key=value` entries with unique keys.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RuntimeManifest {
    entries: Vec<(String, String)>,
}

fn valid_key(key: &str) -> bool {
    key.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.'))
}

/// The most characters of a key an error quotes: a manifest may come from the guest (or
/// a backup's host-facts frame may be the guest's bytes), and a 16 KiB key must not make
/// a 16 KiB error line.
const KEY_QUOTED: usize = 64;

/// A key for an error: escaped (it may be the guest's bytes) and cut to [`KEY_QUOTED`].
fn quoted_key(key: &str) -> String {
    let mut out: String = key
        .chars()
        .take(KEY_QUOTED)
        .flat_map(char::escape_debug)
        .collect();
    if key.chars().nth(KEY_QUOTED).is_some() {
        out.push('…');
    }
    out
}

impl RuntimeManifest {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a manifest. Blank lines and one trailing newline are tolerated; a `\r\n`
    /// ending is not (a `\r` is a control character).
    pub fn parse(text: &str) -> Result<Self, ManifestError> {
        let mut manifest = Self::new();
        let mut first_line_of: Vec<usize> = Vec::new();
        for (index, raw) in text.split('\n').enumerate() {
            let line = index + 1;
            if raw.is_empty() {
                continue;
            }
            let (key, value) = raw
                .split_once('=')
                .ok_or(ManifestError::NoEquals { line })?;
            if key.is_empty() {
                return Err(ManifestError::EmptyKey { line });
            }
            if !valid_key(key) {
                return Err(ManifestError::BadKey {
                    line,
                    key: quoted_key(key),
                });
            }
            if value.chars().any(char::is_control) {
                return Err(ManifestError::ControlChar {
                    line,
                    key: quoted_key(key),
                });
            }
            if let Some(pos) = manifest.entries.iter().position(|(k, _)| k == key) {
                return Err(ManifestError::Duplicate {
                    line,
                    key: quoted_key(key),
                    first: first_line_of[pos],
                });
            }
            manifest.entries.push((key.to_string(), value.to_string()));
            first_line_of.push(line);
        }
        Ok(manifest)
    }

    /// Parses raw bytes, as read from a file or an archive member.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, ManifestError> {
        Self::parse(std::str::from_utf8(bytes).map_err(|_| ManifestError::NotUtf8)?)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets a key, keeping its position if it exists. Control characters in the value are
    /// replaced by spaces (tool `--version` output is not ours to trust), so rendering
    /// always yields a manifest that parses.
    pub fn set(&mut self, key: &str, value: &str) {
        assert!(
            !key.is_empty() && valid_key(key),
            "manifest keys are compile-time constants"
        );
        let clean: String = value
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let clean = clean.trim().to_string();
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = clean,
            None => self.entries.push((key.to_string(), clean)),
        }
    }

    /// Removes a key; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.entries.len();
        self.entries.retain(|(k, _)| k != key);
        self.entries.len() != before
    }

    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Renders `key=value\n` lines in entry order.
    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for RuntimeManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.entries {
            writeln!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for RuntimeManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEED: &str = "created_at=2026-06-01T10:00:00Z\nbase_image=ubuntu:24.04\nnode=v22.3.0\nclaude=2.1.0 (Claude Code)\ncodex=codex-cli 0.171.0\nhermes=missing\nexecutor=1.5.9\n";

    #[test]
    fn parses_the_seed_format_and_renders_it_back() {
        let m = RuntimeManifest::parse(SEED).unwrap();
        assert_eq!(m.get("base_image"), Some("ubuntu:24.04"));
        assert_eq!(m.get("claude"), Some("2.1.0 (Claude Code)"));
        assert_eq!(m.render(), SEED);
    }

    #[test]
    fn keeps_unknown_keys_in_order() {
        let text = "created_at=x\nvp=0.1.0\nfuture.key=yes\n";
        let mut m = RuntimeManifest::parse(text).unwrap();
        assert_eq!(m.get("vp"), Some("0.1.0"));
        assert_eq!(m.render(), text);
        assert!(m.remove("vp") && !m.remove("vp"));
        assert_eq!(m.render(), "created_at=x\nfuture.key=yes\n");
    }

    #[test]
    fn values_may_contain_equals() {
        let m = RuntimeManifest::parse("base_image=reg.io/x:1=2\n").unwrap();
        assert_eq!(m.get("base_image"), Some("reg.io/x:1=2"));
    }

    #[test]
    fn rejects_bad_input_with_line_numbers() {
        let cases = [
            ("a=1\nnoequals\n", "line 2: no '='"),
            ("=1\n", "line 1: empty key"),
            ("Key=1\n", "line 1: key"),
            ("a=1\r\n", "control character"),
            ("a=\u{1b}[31m\n", "control character"),
            ("a=\0\n", "control character"),
            ("a=1\nb=2\na=3\n", "duplicate key 'a' (first on line 1)"),
        ];
        for (text, expected) in cases {
            let err = RuntimeManifest::parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
        assert_eq!(
            RuntimeManifest::parse_bytes(b"a=\xff\n").unwrap_err(),
            ManifestError::NotUtf8
        );
    }

    /// A manifest may be the guest's: a huge key makes no huge error line.
    #[test]
    fn errors_quote_a_long_key_cut_short() {
        let long = "k".repeat(16 << 10);
        for text in [
            format!("{long}X=1\n"),
            format!("{long}=\u{1b}\n"),
            format!("{long}=1\n{long}=2\n"),
        ] {
            let err = RuntimeManifest::parse(&text).unwrap_err().to_string();
            assert!(err.chars().count() < 200, "{} characters", err.len());
            assert!(err.contains(&format!("{}…", "k".repeat(64))), "{err}");
        }
    }

    #[test]
    fn set_sanitizes_tool_output() {
        let mut m = RuntimeManifest::new();
        m.set("node", "v22.0.0\n");
        m.set("claude", "2.1\u{1b}[0m x");
        m.set("node", "v22.1.0");
        assert_eq!(m.render(), "node=v22.1.0\nclaude=2.1 [0m x\n");
        assert!(RuntimeManifest::parse(&m.render()).is_ok());
    }

    proptest! {
        #[test]
        fn render_then_parse_round_trips(
            entries in proptest::collection::btree_map("[a-z_][a-z0-9_.-]{0,12}", "[^\\p{Cc}]{0,40}", 0..12)
        ) {
            let mut m = RuntimeManifest::new();
            for (k, v) in &entries {
                m.set(k, v);
            }
            let parsed = RuntimeManifest::parse(&m.render()).unwrap();
            prop_assert_eq!(&parsed, &m);
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,200}") {
            let _ = RuntimeManifest::parse(&text);
        }
    }
}
