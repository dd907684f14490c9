//! Names from an archive quoted in messages: escaped as every text from elsewhere is
//! ([`crate::escape`]), and cut short, since a hostile member's or dumpdir entry's name can
//! be megabytes. The reader, the validator, the dumpdir parser and extraction all quote
//! names this one way.

use crate::escape::shown;

/// Most characters of a name an error message quotes.
pub const MAX_SHOWN: usize = 200;

/// A name for a message: escaped and cut to [`MAX_SHOWN`] characters.
pub fn shown_name(bytes: &[u8]) -> String {
    let s = shown(bytes);
    if s.chars().count() > MAX_SHOWN {
        let cut: String = s.chars().take(MAX_SHOWN).collect();
        format!("{cut}… ({} bytes)", bytes.len())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_escaped_and_a_long_one_cut_with_its_size() {
        assert_eq!(shown_name(b"home/agent/notes.md"), "home/agent/notes.md");
        assert_eq!(
            shown_name(b"a\x1b]52;c;x\x07\xff"),
            "a\\x1b]52;c;x\\x07\\xff"
        );
        let long = [b'a'; 5000];
        let cut = shown_name(&long);
        assert_eq!(cut, format!("{}… (5000 bytes)", "a".repeat(MAX_SHOWN)));
        // Escaping comes first: a name of controls is cut by what is shown, not its bytes.
        let controls = [0x1bu8; 100];
        let cut = shown_name(&controls);
        assert!(cut.starts_with(&"\\x1b".repeat(MAX_SHOWN / 4)), "{cut}");
        assert!(cut.ends_with("… (100 bytes)"), "{cut}");
        assert!(!cut.contains('\x1b'), "{cut}");
    }
}
