//! `hb import --follow`: the parts of a load arrive in the guest while the import runs.
//!
//! The host talks to the import through files, because `machine exec` forwards no stdin by
//! default and `machine cp` may write its destination in place (a half-copied file can be
//! visible under its name). In each `--from` directory, in this order:
//!
//! 1. `part-NNNNNN`, copied whole, then its marker `part-NNNNNN.ready` ([`ready_marker`])
//!    holding exactly the part's [`Part::render_ready`] line and a line break. The import
//!    takes a marker only as one complete line (the line break last, the hash of a fixed
//!    number of hex digits): a half-copied marker is read again later, never taken.
//! 2. After the last part: the part index ([`super::parts::INDEX_FILE`]), then the end
//!    marker [`END_MARKER`] ([`EndMarker`]: the part count and the total bytes). The index
//!    must list exactly the parts the import took.
//!
//! The import answers on stdout: one [`TAKEN`] line per part it has read, checked and
//! removed (the host copies the next one only while few enough are waiting), and a
//! [`super::parts`]-style keepalive ([`WAITING`]) while it waits, so a gone host breaks its
//! pipe.

use super::parts::{Part, part_name};

/// The import's line for a part it read, checked and removed: `part-taken part-000000`.
pub const TAKEN: &str = "part-taken";
/// The import's keepalive while it waits for a marker: `part-wait <part name>`.
pub const WAITING: &str = "part-wait";
/// The file that says a directory's parts and index are all there.
pub const END_MARKER: &str = "end.ready";
/// The first word of the end marker's line.
pub const END_WORD: &str = "parts-end";
/// The most bytes a marker file holds (its line is under 150).
pub const MAX_MARKER_BYTES: u64 = 512;

/// The marker's file name of the part named `part` (`part-000000.ready`).
pub fn ready_marker(part: &str) -> String {
    format!("{part}.ready")
}

/// What a marker file's bytes say, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerText<'a> {
    /// Not one complete line yet (no line break at its end): read it again later.
    Incomplete,
    /// One complete line, without its line break.
    Line(&'a str),
    /// More than one line, bytes that are not UTF-8, or too many bytes: never a marker.
    Invalid,
}

/// Reads a marker file's content: exactly one line ending in a line break.
pub fn marker_text(bytes: &[u8]) -> MarkerText<'_> {
    if bytes.len() as u64 > MAX_MARKER_BYTES {
        return MarkerText::Invalid;
    }
    let Some(body) = bytes.strip_suffix(b"\n") else {
        return MarkerText::Incomplete;
    };
    match std::str::from_utf8(body) {
        Ok(line) if !line.contains('\n') => MarkerText::Line(line),
        _ => MarkerText::Invalid,
    }
}

/// The end marker: how many parts the directory had and their bytes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndMarker {
    pub parts: usize,
    pub total: u64,
}

impl EndMarker {
    /// The marker's content, line break included.
    pub fn render(&self) -> String {
        format!("{END_WORD} {} {}\n", self.parts, self.total)
    }

    /// The marker's line (without its line break), in the one spelling [`Self::render`]
    /// writes.
    pub fn parse(line: &str) -> Option<EndMarker> {
        let [word, parts, total] = line.split(' ').collect::<Vec<_>>()[..] else {
            return None;
        };
        let canonical = |s: &str| {
            !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && (s == "0" || !s.starts_with('0'))
        };
        if word != END_WORD || !canonical(parts) || !canonical(total) {
            return None;
        }
        Some(EndMarker {
            parts: parts.parse().ok()?,
            total: total.parse().ok()?,
        })
    }
}

/// The import's [`TAKEN`] line for `part`.
pub fn render_taken(part: &Part) -> String {
    format!("{TAKEN} {}", part.name)
}

/// Reads a [`TAKEN`] line: `None` when it is not one, the part's number when it names a
/// part, an error when it starts like one and names none.
pub fn parse_taken(line: &str) -> Option<Result<usize, ()>> {
    let rest = line.strip_prefix(TAKEN)?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let name = rest.strip_prefix(' ').unwrap_or(rest);
    let number = name.strip_prefix("part-").and_then(|n| {
        (n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| n.parse::<usize>().ok())
            .flatten()
    });
    Some(number.filter(|n| part_name(*n) == name).ok_or(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::part_hash::PartHash;

    fn part() -> Part {
        Part {
            name: part_name(3),
            size: 1234,
            hash: PartHash::Xxh3_128([0xab; 16]),
        }
    }

    #[test]
    fn a_marker_is_taken_only_as_one_whole_line() {
        let line = format!("{}\n", part().render_ready());
        assert_eq!(
            marker_text(line.as_bytes()),
            MarkerText::Line(part().render_ready().as_str())
        );
        // Every shorter prefix is not yet a marker; none of them parses as the part.
        for cut in 0..line.len() {
            let text = marker_text(&line.as_bytes()[..cut]);
            assert_eq!(text, MarkerText::Incomplete, "cut at {cut}");
            // Short of the line's last character, no prefix even reads as a part.
            let prefix = &line[..cut];
            if cut + 1 < line.len() {
                assert!(
                    !matches!(Part::parse_ready(prefix), Some(Ok(_))),
                    "{prefix:?}"
                );
            }
        }
        // Written in place over zeros (a copy that sized the file first): not complete.
        let mut zeroed = line.as_bytes()[..20].to_vec();
        zeroed.resize(line.len(), 0);
        assert_eq!(marker_text(&zeroed), MarkerText::Incomplete);
        assert_eq!(marker_text(b"a\nb\n"), MarkerText::Invalid);
        assert_eq!(marker_text(b"\xff\n"), MarkerText::Invalid);
        assert_eq!(marker_text(&[b'a'; 600]), MarkerText::Invalid);
    }

    #[test]
    fn end_markers_round_trip_in_one_spelling() {
        let end = EndMarker {
            parts: 3,
            total: 1 << 40,
        };
        let text = end.render();
        assert_eq!(
            marker_text(text.as_bytes()),
            MarkerText::Line(text.trim_end())
        );
        assert_eq!(EndMarker::parse(text.trim_end()), Some(end));
        for bad in [
            "parts-end 3",
            "parts-end 03 10",
            "parts-end 3 10 ",
            "parts-end +3 10",
            "parts-end 3 99999999999999999999999",
            "parts-ended 3 10",
            "",
        ] {
            assert_eq!(EndMarker::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn taken_lines_name_a_part_or_are_malformed() {
        assert_eq!(parse_taken(&render_taken(&part())), Some(Ok(3)));
        assert_eq!(parse_taken("part-takenx"), None);
        assert_eq!(parse_taken("Imported 3 members"), None);
        for bad in [
            "part-taken",
            "part-taken part-3",
            "part-taken part-00000x",
            "part-taken part-000001 extra",
            "part-taken ../etc",
        ] {
            assert_eq!(parse_taken(bad), Some(Err(())), "{bad:?}");
        }
    }
}
