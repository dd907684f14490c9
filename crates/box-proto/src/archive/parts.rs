//! The part index `hb export` writes beside its parts, and `box` (save) and `hb import`
//! (load) check. A plain text file named [`INDEX_FILE`]:
//!
//! ```text
//! hermes-box-parts 1
//! compression zstd
//! total <bytes> <sha256 hex of the whole stream>
//! part part-000000 <bytes> <part hash>
//! part part-000001 <bytes> <part hash>
//! ```
//!
//! A part hash is a SHA-256 in 64 lowercase hex digits, or `xxh3-128:` and 32 of them
//! where box asked `hb export` for XXH3-128 ([`super::part_hash`]). The whole stream's
//! hash is always SHA-256.
//!
//! The whole stream's hash is left out (`total <bytes>`) by `hb export --stream-parts`:
//! box checks each part as it takes it and never reads the total, and the guest saves a
//! SHA-256 pass over the whole backup. An index box writes for `hb import` always has it.
//! (Readers older than this accept only the three-field form; box ≥ this version is the
//! only one that asks hb to stream.)
//!
//! The parts, concatenated in the listed order, are the compressed tar stream: exactly the
//! plaintext of a backup. Every part but the last has the same size. Part names are
//! `part-NNNNNN` and nothing else, so a hostile index cannot name a path.
//!
//! While it runs, `hb export --stream-parts N` announces each part on stdout as soon as
//! it is complete under its final name (synced, renamed), one [`READY`] line per part in
//! the index's own `<name> <bytes> <hash>` form, so `box save` can copy and encrypt part
//! N while part N+1 is being written. The index written at the end must list exactly the
//! announced parts.

use std::fmt::Write as _;

use crate::archive::compress::Compression;
use crate::archive::part_hash::{PartHash, PartHashAlgo, PartHasher, lower_hex};

/// The index file name inside an export directory.
pub const INDEX_FILE: &str = "parts.index";
/// The first line of every index.
pub const HEADER: &str = "hermes-box-parts 1";
/// The first word of a part announcement: `part-ready part-000000 <bytes> <hash>`.
pub const READY: &str = "part-ready";
/// The most parts an index may list (1 TiB in 1 GiB parts, with room to spare).
pub const MAX_PARTS: usize = 100_000;

/// One part: its file name, size and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub name: String,
    pub size: u64,
    pub hash: PartHash,
}

/// The whole index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartIndex {
    pub compression: Compression,
    pub total_size: u64,
    /// The whole stream's SHA-256; `None` in a streamed export's index.
    pub total_sha256: Option<[u8; 32]>,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartIndexError {
    #[error("part index line {line}: {what}")]
    Line { line: usize, what: String },
    #[error("part index: {0}")]
    Whole(String),
}

/// Reads a part to its end: returns its hash with `algo` and adds its bytes to `total`
/// (the whole stream's SHA-256, parts taken in order). `box clone` checks the export's
/// announcements this way.
pub fn hash_part(
    mut part: impl std::io::Read,
    algo: PartHashAlgo,
    total: &mut sha2::Sha256,
) -> std::io::Result<PartHash> {
    use sha2::Digest as _;
    let mut hasher = PartHasher::new(algo);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match part.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total.update(&buf[..n]);
    }
    Ok(hasher.finish())
}

/// The name of part number `n` (0-based).
pub fn part_name(n: usize) -> String {
    format!("part-{n:06}")
}

fn valid_part_name(name: &str) -> bool {
    name.len() == 11 && name.starts_with("part-") && name[5..].bytes().all(|b| b.is_ascii_digit())
}

impl Part {
    /// `<name> <bytes> <hash>`: how the index and an announcement both list a part.
    fn fields(&self) -> String {
        format!("{} {} {}", self.name, self.size, self.hash.render())
    }

    /// Reads [`Part::fields`]: the name checked for form only (its place in the sequence
    /// is the caller's to check), a size above zero, the hash.
    fn parse_fields(fields: &[&str]) -> Result<Part, &'static str> {
        let [name, size, hash] = fields else {
            return Err("expected '<name> <bytes> <hash>'");
        };
        if !valid_part_name(name) {
            return Err("the part name is not part-NNNNNN");
        }
        // Digits only, no sign or leading zero: the one spelling `fields` writes, so a
        // part read back renders to the very line it came from.
        let canonical = !size.is_empty()
            && size.bytes().all(|b| b.is_ascii_digit())
            && (size.len() == 1 || !size.starts_with('0'));
        let size = size
            .parse::<u64>()
            .ok()
            .filter(|_| canonical)
            .ok_or("the size is not a number")?;
        if size == 0 {
            return Err("empty part");
        }
        let hash = PartHash::parse(hash).ok_or(
            "the hash is neither 64 lowercase hex digits (SHA-256) nor 'xxh3-128:' and 32",
        )?;
        Ok(Part {
            name: name.to_string(),
            size,
            hash,
        })
    }

    /// The announcement line of this part (no newline).
    pub fn render_ready(&self) -> String {
        format!("{READY} {}", self.fields())
    }

    /// Reads an announcement line: `None` when the line is not one (any other output),
    /// an error when it starts like one but is malformed. The part name is checked for
    /// form only; its place in the sequence is the reader's to check.
    pub fn parse_ready(line: &str) -> Option<Result<Part, PartIndexError>> {
        let rest = line.trim_end().strip_prefix(READY)?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let fields: Vec<&str> = rest.split(' ').collect();
        Some(
            Part::parse_fields(&fields)
                .map_err(|what| PartIndexError::Whole(format!("bad part announcement: {what}"))),
        )
    }
}

impl PartIndex {
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{HEADER}");
        let _ = writeln!(s, "compression {}", self.compression.as_str());
        match self.total_sha256 {
            Some(sha) => writeln!(s, "total {} {}", self.total_size, hex::encode(sha)),
            None => writeln!(s, "total {}", self.total_size),
        }
        .ok();
        for p in &self.parts {
            let _ = writeln!(s, "part {}", p.fields());
        }
        s
    }

    /// Parses and checks an index: header, fields, part names in sequence
    /// (`part-000000`, `part-000001`, …), sizes adding up to the total, no empty part.
    pub fn parse(text: &str) -> Result<Self, PartIndexError> {
        let bad = |line: usize, what: &str| PartIndexError::Line {
            line,
            what: what.to_string(),
        };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        match lines.next() {
            Some((_, HEADER)) => {}
            _ => return Err(bad(1, &format!("expected '{HEADER}'"))),
        }
        let (n, line) = lines.next().ok_or_else(|| bad(2, "missing compression"))?;
        let compression = match line.strip_prefix("compression ") {
            Some("zstd") => Compression::Zstd,
            Some("gzip") => Compression::Gzip,
            _ => return Err(bad(n, "expected 'compression zstd' or 'compression gzip'")),
        };
        let (n, line) = lines.next().ok_or_else(|| bad(3, "missing total"))?;
        let fields: Vec<&str> = line.split(' ').collect();
        let (total_size, total_sha256) = match fields.as_slice() {
            ["total", size, rest @ ..] if rest.len() <= 1 => (
                size.parse::<u64>()
                    .map_err(|_| bad(n, "total size is not a number"))?,
                match rest {
                    [hash] => Some(
                        lower_hex::<32>(hash)
                            .ok_or_else(|| bad(n, "total hash is not 64 lowercase hex digits"))?,
                    ),
                    _ => None,
                },
            ),
            _ => return Err(bad(n, "expected 'total <bytes> [<sha256>]'")),
        };
        let mut parts = Vec::new();
        for (n, line) in lines {
            let fields: Vec<&str> = line.split(' ').collect();
            let ["part", rest @ ..] = fields.as_slice() else {
                return Err(bad(n, "expected 'part <name> <bytes> <hash>'"));
            };
            let part = Part::parse_fields(rest).map_err(|what| bad(n, what))?;
            if part.name != part_name(parts.len()) {
                return Err(bad(
                    n,
                    &format!("expected part name {}", part_name(parts.len())),
                ));
            }
            if parts.len() >= MAX_PARTS {
                return Err(bad(n, "too many parts"));
            }
            parts.push(part);
        }
        if parts.is_empty() {
            return Err(PartIndexError::Whole("lists no parts".into()));
        }
        let sum = parts
            .iter()
            .try_fold(0u64, |acc, p| acc.checked_add(p.size))
            .ok_or_else(|| PartIndexError::Whole("part sizes overflow".into()))?;
        if sum != total_size {
            return Err(PartIndexError::Whole(format!(
                "part sizes add up to {sum} bytes, the total says {total_size}"
            )));
        }
        let first = parts[0].size;
        if parts[..parts.len() - 1].iter().any(|p| p.size != first)
            || parts.last().is_some_and(|p| p.size > first)
        {
            return Err(PartIndexError::Whole(
                "every part but the last must have the same size".into(),
            ));
        }
        Ok(PartIndex {
            compression,
            total_size,
            total_sha256,
            parts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PartIndex {
        PartIndex {
            compression: Compression::Zstd,
            total_size: 15,
            total_sha256: Some([7; 32]),
            parts: vec![
                Part {
                    name: part_name(0),
                    size: 10,
                    hash: PartHash::Sha256([1; 32]),
                },
                Part {
                    name: part_name(1),
                    size: 5,
                    hash: PartHash::Xxh3_128([2; 16]),
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let idx = sample();
        assert_eq!(PartIndex::parse(&idx.render()).unwrap(), idx);
        let streamed = PartIndex {
            total_sha256: None,
            ..sample()
        };
        assert!(streamed.render().contains("\ntotal 15\n"));
        assert_eq!(PartIndex::parse(&streamed.render()).unwrap(), streamed);
    }

    #[test]
    fn announcements_round_trip_and_reject_garbage() {
        let p = sample().parts[1].clone();
        let line = p.render_ready();
        assert!(
            line.starts_with("part-ready part-000001 5 xxh3-128:0202"),
            "{line}"
        );
        let sha = sample().parts[0].render_ready();
        assert!(sha.starts_with("part-ready part-000000 10 0101"), "{sha}");
        assert_eq!(Part::parse_ready(&sha).unwrap().unwrap(), sample().parts[0]);
        assert_eq!(Part::parse_ready(&line).unwrap().unwrap(), p);
        assert_eq!(
            Part::parse_ready(&format!("{line}\r\n")).unwrap().unwrap(),
            p
        );
        for other in [
            "Exported 3 members",
            "",
            "part part-000001 5 x",
            "part-readyx",
        ] {
            assert!(Part::parse_ready(other).is_none(), "{other}");
        }
        for bad in [
            line.replace("part-000001", "../../etc"),
            line.replace(" 5 ", " 0 "),
            line.replace(" 5 ", " -5 "),
            line.replace(" 5 ", " +5 "),
            line.replace(" 5 ", " 05 "),
            line.replace("0202", "0G02"),
            line.replace("0202", "02"),
            line.replace("xxh3-128:", ""),
            line.replace("xxh3-128:", "xxh3-64:"),
            line.replace("xxh3-128:", "XXH3-128:"),
            format!("{line} extra"),
            "part-ready ".to_string(),
            "part-ready".to_string(),
        ] {
            assert!(
                matches!(Part::parse_ready(&bad), Some(Err(_))),
                "accepted: {bad}"
            );
        }
    }

    #[test]
    fn rejects_tampering() {
        let text = sample().render();
        for bad in [
            text.replace("part-000001", "../etc/passwd"),
            text.replace("part-000001", "part-000002"),
            text.replace("total 15", "total 16"),
            text.replace("total 15 ", "total 15 0707 "),
            text.replace("total 15 0707", "total 15 0G07"),
            text.replace("total 15 ", "total 15  "),
            text.replace("hermes-box-parts 1", "hermes-box-parts 2"),
            text.replace("compression zstd", "compression xz"),
            text.replace(" 5 ", " 0 "),
            text.replace(" 5 ", " +5 "),
            text.replace(" 10 ", " 010 "),
            text.replace("xxh3-128:", "sha256:"),
            text.replace(" 10 0101", " 10 xxh3-128:0101"),
            text.lines().take(3).collect::<Vec<_>>().join("\n"),
        ] {
            assert!(PartIndex::parse(&bad).is_err(), "accepted:\n{bad}");
        }
    }
}
