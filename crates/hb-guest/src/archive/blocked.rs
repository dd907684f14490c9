//! Large files in blocks, the writer's half (box_proto::archive::blocks has the format):
//! which files `hb export` keeps in blocks, where their bytes come from, and which blocks
//! a link must write.
//!
//! A file's bytes come from a [`BlockSource`]: the file itself (read at offsets, never
//! whole into memory, nothing copied to scratch space), or a live database's page image
//! read inside one read transaction (`crate::sqlite::PageImage`).

use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use box_proto::archive::blocks::{self, BlockHasher};
use box_proto::archive::incremental::Code;
use box_proto::archive::part_hash::{PartHash, PartHashAlgo};

use super::incremental::BlockRecord;

/// The longest name a directory entry may have (Linux's NAME_MAX).
const NAME_MAX: usize = 255;

/// Whether the file at `path` (metadata `meta`, not followed) may be kept in blocks,
/// whatever its size: one name only (a hard link member cannot point into a block
/// directory), no holes (its blocks would store the holes as zeros), a block directory's
/// name that fits, and no sibling of that name (which the block directory would replace).
pub fn may_block(path: &Path, meta: &fs::Metadata) -> bool {
    let Some(name) = path.file_name() else {
        return false;
    };
    let dir = blocks::dir_name(name.as_bytes());
    meta.is_file()
        && meta.nlink() == 1
        && meta.blocks().saturating_mul(512) >= meta.len()
        && dir.len() <= NAME_MAX
        && fs::symlink_metadata(path.with_file_name(std::ffi::OsStr::from_bytes(&dir)))
            .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
}

/// Whether a file of `size` bytes is large enough to go in blocks (`threshold` 0: never).
pub fn large_enough(size: u64, threshold: u64) -> bool {
    threshold > 0 && size >= threshold
}

/// Whether the directory at `path` is one a restore would take for a block directory
/// (its name's suffix, and an `index` regular file whose first line is the format's):
/// `hb export` refuses to save such a directory of the user's, which a restore would
/// turn into a file.
pub fn mistaken_for_blocks(path: &Path) -> bool {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let is_block_name = path
        .file_name()
        .is_some_and(|n| blocks::file_name(n.as_bytes()).is_some());
    if !is_block_name {
        return false;
    }
    let Ok(mut index) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path.join(blocks::INDEX_NAME))
    else {
        return false;
    };
    if !index.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < head.len() {
        match index.read(&mut head[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    head[..got]
        .split(|b| *b == b'\n')
        .next()
        .is_some_and(|first| first == blocks::MAGIC.as_bytes() && got > first.len())
}

/// Where a blocked file's bytes come from: a fixed size, read at block offsets.
pub trait BlockSource {
    /// The file's size, fixed when the source was opened.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes at `offset` (zeros for what is past the end by now).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Hands every block to `each`, in order (`buf` is at least a block long), stopping at
    /// its first error. The default reads block by block; a source that streams faster
    /// overrides it.
    fn each_block(
        &mut self,
        block_size: u64,
        buf: &mut [u8],
        each: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        for i in 0..blocks::block_count(self.size(), block_size) {
            let len = blocks::block_len(self.size(), block_size, i) as usize;
            self.read_at(i * block_size, &mut buf[..len])?;
            each(&buf[..len])?;
        }
        Ok(())
    }
}

/// A regular file, read with `pread` at the size it had when it was scanned: what it has
/// past that is the next save's, what it lost since reads as zeros.
pub struct FileSource {
    pub file: File,
    pub size: u64,
}

impl BlockSource for FileSource {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf[got..].fill(0);
        Ok(())
    }
}

/// A database's page image (`crate::sqlite::PageImage`), in one scan for a whole pass.
impl BlockSource for crate::sqlite::PageImage {
    fn size(&self) -> u64 {
        crate::sqlite::PageImage::size(self)
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        crate::sqlite::PageImage::read_at(self, offset, buf)
            .map_err(|f| io::Error::other(f.said().to_string()))
    }

    fn each_block(
        &mut self,
        block_size: u64,
        buf: &mut [u8],
        each: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        // A page size divides every block size (both are powers of two, pages ≤ 64 KiB).
        let block = block_size as usize;
        let mut filled = 0;
        self.scan(&mut |page| {
            buf[filled..filled + page.len()].copy_from_slice(page);
            filled += page.len();
            if filled == block {
                filled = 0;
                return each(&buf[..block]);
            }
            Ok(())
        })
        .map_err(|f| io::Error::other(f.said().to_string()))?;
        if filled > 0 {
            each(&buf[..filled])?;
        }
        Ok(())
    }
}

/// Pass 1 of a link: the whole file's hash and each block's, reading it once.
pub fn hash_blocks(
    src: &mut dyn BlockSource,
    block_size: u64,
    buf: &mut [u8],
) -> io::Result<(PartHash, Vec<PartHash>)> {
    let mut hasher = BlockHasher::new(block_size);
    src.each_block(block_size, buf, &mut |block| {
        hasher.update(block);
        Ok(())
    })?;
    Ok(hasher.finish())
}

/// Each block's code in this link: `N` when the parent wrote a block of the same length
/// and hash at that place (so a restore has those bytes from it), else `Y`.
pub fn codes(now: &BlockRecord, parent: Option<&BlockRecord>) -> Vec<Code> {
    let same_at = |i: usize| {
        parent.is_some_and(|p| {
            p.block_size == now.block_size
                && p.blocks.get(i) == Some(&now.blocks[i])
                && blocks::block_len(p.size, p.block_size, i as u64)
                    == blocks::block_len(now.size, now.block_size, i as u64)
        })
    };
    (0..now.blocks.len())
        .map(|i| {
            if same_at(i) {
                Code::Unchanged
            } else {
                Code::Included
            }
        })
        .collect()
}

/// The XXH3-128 of `data`, as a block's hash.
pub fn block_hash(data: &[u8]) -> PartHash {
    PartHash::of(PartHashAlgo::Xxh3_128, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(size: u64, hashes: &[u8]) -> BlockRecord {
        BlockRecord {
            size,
            block_size: 65_536,
            blocks: hashes
                .iter()
                .map(|b| PartHash::Xxh3_128([*b; 16]))
                .collect(),
        }
    }

    #[test]
    fn a_block_is_kept_only_with_the_same_hash_length_and_block_size() {
        use Code::{Included as Y, Unchanged as N};
        let parent = record(3 * 65_536, &[1, 2, 3]);
        assert_eq!(
            codes(&record(3 * 65_536, &[1, 9, 3]), Some(&parent)),
            [N, Y, N]
        );
        // Appended: the last block grew (a new length), a new one follows.
        assert_eq!(
            codes(&record(4 * 65_536 + 10, &[1, 2, 3, 4, 5]), Some(&parent)),
            [N, N, N, Y, Y]
        );
        // Shrunk into its last block: same hash claimed but another length.
        assert_eq!(
            codes(&record(2 * 65_536 + 5, &[1, 2, 3]), Some(&parent)),
            [N, N, Y]
        );
        let mut other_size = parent.clone();
        other_size.block_size = 131_072;
        assert_eq!(
            codes(&record(3 * 65_536, &[1, 2, 3]), Some(&other_size)),
            [Y, Y, Y]
        );
        assert_eq!(codes(&record(3 * 65_536, &[1, 2, 3]), None), [Y, Y, Y]);
    }

    #[test]
    fn only_plain_single_files_with_room_for_the_name_are_blocked() {
        let d = tempfile::tempdir().unwrap();
        let meta = |p: &Path| fs::symlink_metadata(p).unwrap();
        let plain = d.path().join("plain");
        fs::write(&plain, vec![7u8; 100_000]).unwrap();
        assert!(may_block(&plain, &meta(&plain)));
        let linked = d.path().join("linked");
        fs::write(&linked, vec![7u8; 100_000]).unwrap();
        fs::hard_link(&linked, d.path().join("other-name")).unwrap();
        assert!(!may_block(&linked, &meta(&linked)), "two names");
        let sparse = d.path().join("sparse");
        File::create(&sparse).unwrap().set_len(10 << 20).unwrap();
        assert!(!may_block(&sparse, &meta(&sparse)), "a hole");
        let long = d.path().join("x".repeat(250));
        fs::write(&long, b"1").unwrap();
        assert!(!may_block(&long, &meta(&long)), "no room for the suffix");
        let shadowed = d.path().join("shadowed");
        fs::write(&shadowed, b"1").unwrap();
        fs::create_dir(d.path().join("shadowed.box-blocks")).unwrap();
        assert!(!may_block(&shadowed, &meta(&shadowed)), "a sibling");
        assert!(!large_enough(1 << 40, 0) && large_enough(10, 10) && !large_enough(9, 10));
    }

    #[test]
    fn a_directory_is_mistaken_for_blocks_only_by_name_and_index() {
        let d = tempfile::tempdir().unwrap();
        let fake = d.path().join("f.box-blocks");
        fs::create_dir(&fake).unwrap();
        assert!(!mistaken_for_blocks(&fake), "no index");
        fs::write(fake.join("index"), "hermes-box-blocks 1\nsize 0\n").unwrap();
        assert!(mistaken_for_blocks(&fake));
        fs::write(fake.join("index"), "hermes-box-blocks 10\n").unwrap();
        assert!(!mistaken_for_blocks(&fake), "another first line");
        let other = d.path().join("plain");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("index"), "hermes-box-blocks 1\n").unwrap();
        assert!(!mistaken_for_blocks(&other), "another name");
    }
}
