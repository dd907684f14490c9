//! Bytes from another trust domain (archive member names, a guest's output, words an agent
//! wrote into a manifest) as text for a person's terminal: what it holds is shown, nothing
//! in it acts on the terminal.
//!
//! A terminal acts on control characters: ESC starts sequences that set the window title,
//! write the clipboard (OSC 52), move the cursor or hide and recolour what follows; CR and
//! BS rewrite what a line showed; C1 controls (U+0080–U+009F) are the same sequences on
//! terminals that read them. The bidi controls reorder what is shown, so text reads other
//! than it is. Each of those is shown as `\xNN` (`\u{NNNN}` above U+00FF), as are bytes that
//! are not UTF-8; everything else is shown as it is.

/// Whether `c` acts on a terminal rather than being shown: a C0 or C1 control, DEL, or a
/// bidi control (marks, embeddings, overrides, isolates).
pub fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `bytes` for one line of a message: every character that acts on a terminal (newlines and
/// tabs included) and every byte that is not UTF-8 escaped.
pub fn shown(bytes: &[u8]) -> String {
    shown_keeping(bytes, &[])
}

/// [`shown`], keeping the characters in `keep` as they are (a log keeps `\n` and `\t`).
pub fn shown_keeping(bytes: &[u8], keep: &[char]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match u32::from(c) {
                _ if !acts_on_terminal(c) || keep.contains(&c) => out.push(c),
                n @ 0..=0xff => out.push_str(&format!("\\x{n:02x}")),
                n => out.push_str(&format!("\\u{{{n:04x}}}")),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_acts_on_a_terminal_is_shown_escaped() {
        // OSC 52 (clipboard), a title, CSI, CR over a line, BS, C1 CSI, a bidi override.
        assert_eq!(
            shown(b"\x1b]52;c;ZWNobyBoaQ==\x07"),
            "\\x1b]52;c;ZWNobyBoaQ==\\x07"
        );
        assert_eq!(shown(b"\x1b]0;title\x1b\\"), "\\x1b]0;title\\x1b\\");
        assert_eq!(shown(b"ok\rfail\x08"), "ok\\x0dfail\\x08");
        assert_eq!(shown("\u{9b}31m".as_bytes()), "\\x9b31m");
        assert_eq!(
            shown("abc\u{202e}fed\u{2066}".as_bytes()),
            "abc\\u{202e}fed\\u{2066}"
        );
        // Not UTF-8: the bytes themselves (a lone C1 byte included).
        assert_eq!(shown(b"a\x9b\xffb"), "a\\x9b\\xffb");
        // Text as it is: accents, emoji, quotes, the box's own marks.
        assert_eq!(shown("é ✓ \"x\" 🦀".as_bytes()), "é ✓ \"x\" 🦀");
        assert_eq!(shown(b"a\nb\tc"), "a\\x0ab\\x09c");
        assert_eq!(shown_keeping(b"a\nb\tc\r", &['\n', '\t']), "a\nb\tc\\x0d");
    }
}
