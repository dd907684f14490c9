//! Guest bytes on the host's terminal. What a guest prints (hb's output quoted in an
//! error, a service's log) is written by whoever runs there, the agent included: on the
//! user's terminal it is shown, never obeyed (no clipboard write, no title, no line
//! rewritten, no text reordered). The escaping itself is box-proto's, one function for
//! every text from elsewhere ([`box_proto::escape`]); this module applies it to the host's
//! two shapes of guest text: a line quoted in a message, and a stream.

use std::io::{self, Read, Write};

/// Guest text quoted in one line of a message: everything that acts on a terminal escaped,
/// line breaks included.
pub fn quoted(text: &str) -> String {
    box_proto::escape::shown(text.as_bytes())
}

/// A stream of guest bytes made safe for a terminal as it arrives: lines and tabs kept,
/// everything else that acts on a terminal escaped. A UTF-8 character cut between two
/// reads is held until its end arrives.
#[derive(Debug, Default)]
pub struct StreamEscaper {
    /// The start of a character whose end has not arrived yet (at most 3 bytes).
    held: Vec<u8>,
}

/// What a log keeps as it is.
const KEPT: &[char] = &['\n', '\t'];

impl StreamEscaper {
    /// The text to show for `bytes`, the next piece of the stream.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.held.extend_from_slice(bytes);
        let whole = whole_characters(&self.held);
        let shown = box_proto::escape::shown_keeping(&self.held[..whole], KEPT);
        self.held.drain(..whole);
        shown
    }

    /// The stream ended: what was held is shown (as the bytes it is).
    pub fn finish(&mut self) -> String {
        let shown = box_proto::escape::shown_keeping(&self.held, KEPT);
        self.held.clear();
        shown
    }
}

/// How much of `bytes` ends on a character boundary: all of it, unless it ends inside a
/// UTF-8 sequence that more bytes could complete.
fn whole_characters(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // A sequence is at most 4 bytes: its lead byte is among the last 3.
    for back in 1..=len.min(3) {
        let b = bytes[len - back];
        let needs = match b {
            0x80..=0xbf => continue,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return len,
        };
        return if needs > back { len - back } else { len };
    }
    len
}

/// Copies `from` to `to`, escaped ([`StreamEscaper`]), flushing after each read so a
/// followed log shows each line as it comes.
pub fn copy_escaped(mut from: impl Read, mut to: impl Write) -> io::Result<()> {
    let mut escaper = StreamEscaper::default();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(escaper.push(&buf[..n]).as_bytes())?;
        to.flush()?;
    }
    to.write_all(escaper.finish().as_bytes())?;
    to.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_line_shows_sequences_and_breaks_as_text() {
        assert_eq!(
            quoted("done\x1b]52;c;cm0gLXJmIH4=\x07\r\nok\u{202e}"),
            "done\\x1b]52;c;cm0gLXJmIH4=\\x07\\x0d\\x0aok\\u{202e}"
        );
    }

    #[test]
    fn a_stream_keeps_lines_and_characters_cut_between_reads() {
        let text = "log ✓ é\n\x1b]0;owned\x07\ttab 🦀\n".as_bytes();
        let whole = {
            let mut e = StreamEscaper::default();
            let mut s = e.push(text);
            s.push_str(&e.finish());
            s
        };
        assert_eq!(whole, "log ✓ é\n\\x1b]0;owned\\x07\ttab 🦀\n");
        // Cut at every byte: the same text, never a character split into \xNN.
        for cut in 0..text.len() {
            let mut e = StreamEscaper::default();
            let mut s = e.push(&text[..cut]);
            s.push_str(&e.push(&text[cut..]));
            s.push_str(&e.finish());
            assert_eq!(s, whole, "cut at {cut}");
        }
        // Bytes that are not UTF-8 are not held back waiting for more.
        let mut e = StreamEscaper::default();
        assert_eq!(e.push(b"a\xff"), "a\\xff");
        assert_eq!(e.push(b"\xe2\x9c"), "");
        assert_eq!(e.finish(), "\\xe2\\x9c");
    }

    #[test]
    fn a_copy_escapes_everything_it_passes() {
        let mut out = Vec::new();
        copy_escaped(&b"one\n\x9b2J\x1b[2Jtwo\n"[..], &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "one\n\\x9b2J\\x1b[2Jtwo\n");
    }
}
