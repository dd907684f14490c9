//! The value of [`super::SQLITE_CHECK_KEY`]: what `hb export` found when it copied the
//! box's databases, written by hb and read by `box save` and `box load` to say which
//! databases a backup holds damaged. One definition, so the two sides never disagree on it.
//!
//! `ok` or `damaged <path> <path>…`, then ` (<n> checked, <m> unchanged since the last
//! save)` when some were not read again. A path is data-root-relative (it always starts
//! with `home/`, never with `(`); a space, a control character or `%` in it is written as
//! `%XX`, so any name survives the manifest (which turns control characters into spaces)
//! and the split on spaces. Values written before the escapes had none: they read the same.
//!
//! The value comes from the guest, where the agent can write it: it is said to the user,
//! never acted on, and read with limits.

/// What the check of one export's database copies found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SqliteCheck {
    /// The databases archived as they are because SQLite found them damaged.
    pub damaged: Vec<String>,
    /// Copied and checked by this export.
    pub checked: usize,
    /// Not read again: unchanged since the last save.
    pub unchanged: usize,
}

/// The damaged databases a value names: at most [`SqliteCheck::MAX_NAMED`], and how many
/// more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Damaged {
    pub named: Vec<String>,
    pub more: usize,
}

impl SqliteCheck {
    /// How many damaged databases a reader keeps of one value (the rest are counted).
    pub const MAX_NAMED: usize = 16;

    /// The manifest value.
    pub fn render(&self) -> String {
        let mut out = if self.damaged.is_empty() {
            "ok".to_string()
        } else {
            let names: Vec<String> = self.damaged.iter().map(|d| escape(d)).collect();
            format!("damaged {}", names.join(" "))
        };
        if self.unchanged > 0 {
            out.push_str(&format!(
                " ({} checked, {} unchanged since the last save)",
                self.checked, self.unchanged
            ));
        }
        out
    }

    /// The databases `value` names as damaged (none for `ok`, or for a value that does not
    /// start with `damaged `).
    pub fn damaged_in(value: &str) -> Damaged {
        let mut found = Damaged::default();
        let Some(list) = value.strip_prefix("damaged ") else {
            return found;
        };
        for word in list.split(' ').filter(|w| !w.is_empty()) {
            if word.starts_with('(') {
                break;
            }
            if found.named.len() < Self::MAX_NAMED {
                found.named.push(unescape(word));
            } else {
                found.more += 1;
            }
        }
        found
    }
}

fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The name an escaped word stands for; a `%` not followed by two hex digits is itself.
fn unescape(word: &str) -> String {
    let bytes = word.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_what_every_version_wrote() {
        let none = Damaged::default();
        assert_eq!(SqliteCheck::damaged_in("ok"), none);
        assert_eq!(
            SqliteCheck::damaged_in("ok (2 checked, 1 unchanged since the last save)"),
            none
        );
        assert_eq!(SqliteCheck::damaged_in("damagedx"), none);
        assert_eq!(
            SqliteCheck::damaged_in(
                "damaged home/agent/.hermes/state.db home/agent/.codex/logs.db (2 checked, 3 unchanged since the last save)"
            )
            .named,
            ["home/agent/.hermes/state.db", "home/agent/.codex/logs.db"]
        );
    }

    #[test]
    fn a_name_with_spaces_percent_or_control_characters_survives_the_manifest() {
        let check = SqliteCheck {
            damaged: vec![
                "home/agent/.hermes/profiles/my work/state.db".into(),
                "home/agent/.hermes/profiles/100%/state.db".into(),
                "home/agent/.hermes/profiles/a\nb (x/state.db".into(),
            ],
            checked: 3,
            unchanged: 1,
        };
        let mut manifest = crate::RuntimeManifest::new();
        manifest.set(crate::manifest::SQLITE_CHECK_KEY, &check.render());
        let back = crate::RuntimeManifest::parse(&manifest.render()).unwrap();
        let value = back.get(crate::manifest::SQLITE_CHECK_KEY).unwrap();
        assert_eq!(SqliteCheck::damaged_in(value).named, check.damaged);
    }

    #[test]
    fn a_long_list_is_cut_and_counted() {
        let check = SqliteCheck {
            damaged: (0..40)
                .map(|i| format!("home/agent/.hermes/{i}.db"))
                .collect(),
            ..Default::default()
        };
        let found = SqliteCheck::damaged_in(&check.render());
        assert_eq!(found.named.len(), SqliteCheck::MAX_NAMED);
        assert_eq!(found.more, 40 - SqliteCheck::MAX_NAMED);
        assert_eq!(
            SqliteCheck::damaged_in("damaged a%zz %4").named,
            ["a%zz", "%4"]
        );
    }

    proptest! {
        #[test]
        fn render_then_read_gives_the_names_back(
            names in proptest::collection::vec("home/[^\\u{0}]{1,30}", 0..SqliteCheck::MAX_NAMED),
            unchanged in 0usize..3,
        ) {
            let check = SqliteCheck { damaged: names.clone(), checked: 1, unchanged };
            prop_assert_eq!(SqliteCheck::damaged_in(&check.render()).named, names);
        }
    }
}
