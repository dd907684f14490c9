//! Large files in blocks: how a regular file at or above `BACKUP_BLOCK_FILES_ABOVE` is
//! archived so that a link of a chain holds only the blocks that changed since its parent.
//!
//! The file `dir/NAME` is archived as a directory `dir/NAME.box-blocks/` holding
//!
//! * `index`: this module's [`BlockIndex`] (the file's size, block size, mode, mtime, the
//!   XXH3-128 of the whole file and of each block), and
//! * `b00000000`, `b00000001`, …: the file's bytes cut into blocks of the block size (the
//!   last one shorter), named so that name order is file order.
//!
//! It is an ordinary directory of ordinary files, so GNU tar's listed-incremental format
//! carries it as it carries any directory ([`super::incremental`]): a block whose bytes are
//! the parent's is listed `N` in the directory's dumpdir and not written, a changed one is
//! `Y`, a block past a shrunk end is not listed and `tar -x -g /dev/null` purges it. The
//! stock restore stays stock: after the README's loop, one command per such file gives its
//! exact bytes ([`STOCK_COMMAND`]). `box load`, `box extract` and `hb import` reassemble
//! the file themselves when they unpack (`unpack::Unpacker::finish`), check it against the
//! index, and refuse a missing, extra or changed block naming the file, before anything is
//! swapped.
//!
//! A directory counts as a block directory only by its name's suffix *and* an `index`
//! whose first line is [`MAGIC`]: a user's own directory that happens to end in
//! `.box-blocks` is restored as it is (`hb export` never blocks a file whose
//! `NAME.box-blocks` sibling exists, and refuses to save a user directory that would be
//! mistaken for one).
//!
//! The index is written in the guest, so it is read as hostile input: bounded in size,
//! every number checked, nothing in it names a path.

use std::fmt::Write as _;

use super::part_hash::{PartHash, PartHashAlgo, PartHasher};

/// What a block directory's name ends with: `state.db` → `state.db.box-blocks`.
pub const DIR_SUFFIX: &str = ".box-blocks";
/// The index's name inside a block directory.
pub const INDEX_NAME: &str = "index";
/// The first line of every index, with its version.
pub const MAGIC: &str = "hermes-box-blocks 1";
/// The block size `hb export` writes: a SQLite page (at most 64 KiB) divides it, so a
/// changed page changes one block.
pub const DEFAULT_BLOCK_SIZE: u64 = 1 << 20;
/// The smallest and largest block size an index may name.
pub const MIN_BLOCK_SIZE: u64 = 64 << 10;
pub const MAX_BLOCK_SIZE: u64 = 64 << 20;
/// The default of `BACKUP_BLOCK_FILES_ABOVE`: files this size or larger are kept in blocks.
pub const DEFAULT_THRESHOLD: u64 = 64 << 20;
/// The most blocks one file may have (16 TiB at 4 MiB blocks; 4 TiB at the default).
pub const MAX_BLOCKS: u64 = 1 << 22;
/// The largest index read: its header and one line of 50 bytes per block.
pub const MAX_INDEX_BYTES: u64 = 512 + MAX_BLOCKS * 50;
/// How a person reassembles one file after the stock restore (documented in the README).
pub const STOCK_COMMAND: &str = "cat NAME.box-blocks/b* > NAME";

/// The block directory's name for a file named `name` (bytes of one path component).
pub fn dir_name(name: &[u8]) -> Vec<u8> {
    let mut out = name.to_vec();
    out.extend_from_slice(DIR_SUFFIX.as_bytes());
    out
}

/// The file a block directory's name stands for: `state.db.box-blocks` → `state.db`;
/// `None` for any other name (and for a bare `.box-blocks`).
pub fn file_name(dir: &[u8]) -> Option<&[u8]> {
    let stem = dir.strip_suffix(DIR_SUFFIX.as_bytes())?;
    (!stem.is_empty()).then_some(stem)
}

/// Block `i`'s name: `b` and eight decimal digits.
pub fn block_name(i: u64) -> String {
    format!("b{i:08}")
}

/// The number a block's name stands for, in exactly [`block_name`]'s spelling.
pub fn block_number(name: &[u8]) -> Option<u64> {
    let digits = name.strip_prefix(b"b")?;
    if digits.len() != 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// How many blocks a file of `size` bytes has.
pub fn block_count(size: u64, block_size: u64) -> u64 {
    size.div_ceil(block_size)
}

/// The length of block `i` of a file of `size` bytes.
pub fn block_len(size: u64, block_size: u64, i: u64) -> u64 {
    size.saturating_sub(i.saturating_mul(block_size))
        .min(block_size)
}

/// A block directory's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockIndex {
    /// The file's size in bytes.
    pub size: u64,
    pub block_size: u64,
    /// The file's mode bits (permissions, set-id and sticky; no type bits).
    pub mode: u32,
    /// The file's modification time: seconds since the epoch and nanoseconds.
    pub mtime: (i64, u32),
    /// XXH3-128 of the whole file.
    pub file_hash: PartHash,
    /// XXH3-128 of each block, in order: exactly [`block_count`] of them.
    pub blocks: Vec<PartHash>,
}

/// Why an index was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexError(pub String);

impl std::fmt::Display for IndexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "block index: {}", self.0)
    }
}

impl std::error::Error for IndexError {}

fn bad(what: impl Into<String>) -> IndexError {
    IndexError(what.into())
}

impl BlockIndex {
    /// The index's bytes, as `hb export` writes them.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(256 + self.blocks.len() * 51);
        // Writing into a String cannot fail.
        let _ = writeln!(out, "{MAGIC}");
        let _ = writeln!(out, "size {}", self.size);
        let _ = writeln!(out, "block-size {}", self.block_size);
        let _ = writeln!(out, "mode {:04o}", self.mode);
        let _ = writeln!(out, "mtime {}.{:09}", self.mtime.0, self.mtime.1);
        let _ = writeln!(out, "file {}", self.file_hash.render());
        for (i, h) in self.blocks.iter().enumerate() {
            let _ = writeln!(out, "{} {}", block_name(i as u64), h.render());
        }
        out
    }

    /// Reads [`Self::render`]'s form, every line in its place; anything else is refused.
    pub fn parse(bytes: &[u8]) -> Result<Self, IndexError> {
        if bytes.len() as u64 > MAX_INDEX_BYTES {
            return Err(bad(format!("longer than {MAX_INDEX_BYTES} bytes")));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let body = text
            .strip_suffix('\n')
            .ok_or_else(|| bad("does not end with a line break"))?;
        let mut lines = body.split('\n');
        let mut field = |name: &str| -> Result<&str, IndexError> {
            let line = lines
                .next()
                .ok_or_else(|| bad(format!("ends before its '{name}' line")))?;
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .ok_or_else(|| bad(format!("expected its '{name}' line")))
        };
        if field("hermes-box-blocks")? != "1" {
            return Err(bad("not version 1"));
        }
        let size = number(field("size")?, "size")?;
        let block_size = number(field("block-size")?, "block-size")?;
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) || !block_size.is_power_of_two()
        {
            return Err(bad(format!(
                "block size {block_size} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
            )));
        }
        let mode_text = field("mode")?;
        let mode = (mode_text.len() == 4 && mode_text.bytes().all(|b| (b'0'..=b'7').contains(&b)))
            .then(|| u32::from_str_radix(mode_text, 8).ok())
            .flatten()
            .ok_or_else(|| bad("mode is not four octal digits"))?;
        let mtime = mtime(field("mtime")?)?;
        let file_hash = xxh3(field("file")?, "file")?;
        let count = block_count(size, block_size);
        if count > MAX_BLOCKS {
            return Err(bad(format!("more than {MAX_BLOCKS} blocks")));
        }
        let mut blocks = Vec::with_capacity(count as usize);
        for i in 0..count {
            let name = block_name(i);
            blocks.push(xxh3(field(&name)?, &name)?);
        }
        if lines.next().is_some() {
            return Err(bad(format!(
                "lists more than the {count} blocks its size makes"
            )));
        }
        Ok(BlockIndex {
            size,
            block_size,
            mode,
            mtime,
            file_hash,
            blocks,
        })
    }

    /// The length block `i` must have.
    pub fn block_len(&self, i: u64) -> u64 {
        block_len(self.size, self.block_size, i)
    }
}

/// A decimal number in one spelling: digits, no sign, no leading zero.
fn number(text: &str, what: &str) -> Result<u64, IndexError> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical
        .then(|| text.parse().ok())
        .flatten()
        .ok_or_else(|| bad(format!("{what} is not a number")))
}

fn mtime(text: &str) -> Result<(i64, u32), IndexError> {
    let (secs, nanos) = text
        .split_once('.')
        .ok_or_else(|| bad("mtime is not seconds.nanoseconds"))?;
    let (negative, digits) = match secs.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, secs),
    };
    let secs = i64::try_from(number(digits, "mtime")?).map_err(|_| bad("mtime is too large"))?;
    // One spelling, as everywhere in the index: `-0` is 0, which is written without a sign.
    if negative && secs == 0 {
        return Err(bad("mtime's seconds are -0"));
    }
    if nanos.len() != 9 || !nanos.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("mtime's nanoseconds are not nine digits"));
    }
    let nanos: u32 = nanos.parse().map_err(|_| bad("mtime's nanoseconds"))?;
    Ok((if negative { -secs } else { secs }, nanos))
}

fn xxh3(text: &str, what: &str) -> Result<PartHash, IndexError> {
    match PartHash::parse(text) {
        Some(h) if h.algorithm() == PartHashAlgo::Xxh3_128 => Ok(h),
        _ => Err(bad(format!(
            "{what}'s hash is not xxh3-128:<32 hex digits>"
        ))),
    }
}

/// Hashes a file as [`BlockIndex`] records it, fed in order: the whole file and each block.
pub struct BlockHasher {
    block_size: u64,
    whole: PartHasher,
    block: PartHasher,
    in_block: u64,
    blocks: Vec<PartHash>,
}

impl BlockHasher {
    pub fn new(block_size: u64) -> Self {
        BlockHasher {
            block_size,
            whole: PartHasher::new(PartHashAlgo::Xxh3_128),
            block: PartHasher::new(PartHashAlgo::Xxh3_128),
            in_block: 0,
            blocks: Vec::new(),
        }
    }

    /// The next bytes of the file.
    pub fn update(&mut self, mut data: &[u8]) {
        self.whole.update(data);
        while !data.is_empty() {
            let room = (self.block_size - self.in_block) as usize;
            let (now, rest) = data.split_at(room.min(data.len()));
            self.block.update(now);
            self.in_block += now.len() as u64;
            if self.in_block == self.block_size {
                let done =
                    std::mem::replace(&mut self.block, PartHasher::new(PartHashAlgo::Xxh3_128));
                self.blocks.push(done.finish());
                self.in_block = 0;
            }
            data = rest;
        }
    }

    /// The whole file's hash and each block's.
    pub fn finish(mut self) -> (PartHash, Vec<PartHash>) {
        if self.in_block > 0 {
            self.blocks.push(self.block.finish());
        }
        (self.whole.finish(), self.blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_of(data: &[u8], block_size: u64) -> BlockIndex {
        let mut h = BlockHasher::new(block_size);
        for chunk in data.chunks(7777) {
            h.update(chunk);
        }
        let (file_hash, blocks) = h.finish();
        BlockIndex {
            size: data.len() as u64,
            block_size,
            mode: 0o4755,
            mtime: (1_765_000_000, 123_456_789),
            file_hash,
            blocks,
        }
    }

    #[test]
    fn an_index_reads_back_as_written() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let index = index_of(&data, MIN_BLOCK_SIZE);
        assert_eq!(index.blocks.len(), 5, "300000 bytes in 64 KiB blocks");
        assert_eq!(index.block_len(4), 300_000 - 4 * 65_536);
        let text = index.render();
        assert!(
            text.starts_with("hermes-box-blocks 1\nsize 300000\n"),
            "{text}"
        );
        assert_eq!(BlockIndex::parse(text.as_bytes()), Ok(index));
    }

    #[test]
    fn block_hashes_are_those_of_each_block_whatever_the_feeding() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let index = index_of(&data, MIN_BLOCK_SIZE);
        for (i, chunk) in data.chunks(MIN_BLOCK_SIZE as usize).enumerate() {
            assert_eq!(
                index.blocks[i],
                PartHash::of(PartHashAlgo::Xxh3_128, chunk),
                "block {i}"
            );
        }
        assert_eq!(index.file_hash, PartHash::of(PartHashAlgo::Xxh3_128, &data));
        let empty = index_of(b"", MIN_BLOCK_SIZE);
        assert!(empty.blocks.is_empty());
        assert_eq!(
            BlockIndex::parse(empty.render().as_bytes()),
            Ok(empty),
            "an empty file has no blocks"
        );
    }

    #[test]
    fn a_hostile_index_is_refused_naming_why() {
        let good = index_of(&[1u8; 70_000], MIN_BLOCK_SIZE).render();
        let cases: Vec<(String, &str)> = vec![
            (
                good.replace("hermes-box-blocks 1", "hermes-box-blocks 2"),
                "version",
            ),
            (good.replace("size 70000", "size 070000"), "size"),
            (good.replace("size 70000", "size 200000"), "ends before"),
            (good.replace("size 70000", "size 10"), "more than"),
            (
                good.replace("block-size 65536", "block-size 65537"),
                "power of two",
            ),
            (good.replace("mode 4755", "mode 755"), "mode"),
            (good.trim_end().to_string(), "line break"),
            (good.replace("b00000001", "b1"), "b00000001"),
            (good.replace("xxh3-128:", "sha256:"), "xxh3-128"),
            (format!("{good}extra\n"), "more than"),
            (
                good.replace("mtime 1765000000.123456789", "mtime 1765000000"),
                "mtime",
            ),
            (
                good.replace("mtime 1765000000.123456789", "mtime -0.000040000"),
                "-0",
            ),
        ];
        for (text, why) in cases {
            let err = BlockIndex::parse(text.as_bytes()).expect_err(&text);
            assert!(err.to_string().contains(why), "{err} should say {why}");
        }
    }

    #[test]
    fn names_have_one_spelling() {
        assert_eq!(block_name(12), "b00000012");
        assert_eq!(block_number(b"b00000012"), Some(12));
        for bad in [
            &b"b0000012"[..],
            b"b000000012",
            b"c00000012",
            b"b0000001x",
            b"B00000012",
        ] {
            assert_eq!(block_number(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(file_name(b"state.db.box-blocks"), Some(&b"state.db"[..]));
        assert_eq!(file_name(b".box-blocks"), None);
        assert_eq!(file_name(b"state.db"), None);
        assert_eq!(dir_name(b"x"), b"x.box-blocks");
        assert_eq!(block_count(0, 1 << 20), 0);
        assert_eq!(block_count((1 << 20) + 1, 1 << 20), 2);
        assert_eq!(block_len((1 << 20) + 1, 1 << 20, 1), 1);
    }
}
