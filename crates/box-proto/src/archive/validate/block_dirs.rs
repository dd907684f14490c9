//! The validator's rule for block directories ([`Rule::BlockDirectory`]): a large file kept
//! as `NAME.box-blocks/` ([`blocks`](crate::archive::blocks)) is reassembled by every
//! restore (`Unpacker::finish`), which refuses one that does not hold exactly what its
//! index lists. A backup box calls verified must restore, so each link is refused here
//! when a block directory in it is one a restore would refuse, as far as the link's stream
//! and the tree before it ([`ChainState`]) can tell.
//!
//! A directory is a block directory only as a restore sees one: its name ends in
//! [`DIR_SUFFIX`](blocks::DIR_SUFFIX) and its `index` is a regular file whose first line is [`MAGIC`] (written
//! in this link, or kept from a link where it was one: [`Node::BlockIndex`]). Any other
//! directory with the suffix is ordinary data. Of a block directory, this refuses
//!
//! * an entry that is neither `index` nor a block name, or a block that is not a regular
//!   file of one link (a directory, symlink, hard link or sparse member), or a hard link
//!   elsewhere to anything in it (a restore refuses a block with two links);
//! * an index that does not parse, or is longer than the blocks beside it make;
//! * a block written in this link whose length or XXH3-128 is not the index's for it. Its
//!   bytes are hashed as they stream past; until the index comes (`hb export` writes it
//!   last) only (number, length, hash) of each block is kept, and a block after the index
//!   is refused, so nothing of the index outlives its own member;
//! * a set of blocks after this link (its dumpdir's `Y` and `N` entries, or without a
//!   dumpdir its members) other than exactly `b00000000` to the last the index counts.
//!
//! What one link cannot tell: a kept (`N`) block's bytes are the parent's, not in this
//! stream; they were checked against the parent's index when the parent was validated, and
//! a block whose bytes change is written again (`Y`) with the new index. A kept index with
//! a written block is refused for that reason: nothing here holds the index's hashes.

use std::collections::{BTreeMap, HashMap};

use super::{ArchiveError, Rule, shown_key};
use crate::archive::blocks::{self, BlockIndex, INDEX_NAME, MAGIC, MAX_INDEX_BYTES};
use crate::archive::chain_state::{ChainState, Node};
use crate::archive::incremental::{Code, Dumpdir};
use crate::archive::part_hash::{PartHash, PartHashAlgo, PartHasher};
use crate::archive::shown::shown_name;
use crate::archive::tarread::{Member, MemberKind};

/// The most bytes of an index before its blocks' lines (its longest header is under 200).
const INDEX_HEADER_BYTES: u64 = 512;
/// One block's line: `b00000000 xxh3-128:<32 hex digits>` and its line break.
const INDEX_LINE_BYTES: u64 = 52;

/// What one link shows of the directories whose names end in [`DIR_SUFFIX`](blocks::DIR_SUFFIX).
#[derive(Debug, Default)]
pub(super) struct BlockDirs {
    dirs: HashMap<Vec<u8>, Seen>,
}

/// What one link shows of one such directory.
#[derive(Debug, Default)]
struct Seen {
    /// Blocks written in this link: number → length and XXH3-128.
    written: BTreeMap<u64, (u64, PartHash)>,
    /// The first member a block directory may not hold; refused if the index makes it one.
    stray: Option<String>,
    index: IndexSeen,
    /// Its dumpdir, as far as blocks go.
    listing: Option<Listed>,
}

#[derive(Debug, Default)]
enum IndexSeen {
    /// No `index` member in this link (maybe one kept: see [`Listed::index`]).
    #[default]
    Absent,
    /// An `index` member that makes no block directory: not a regular file, or its first
    /// line is not [`MAGIC`].
    NotBlocks,
    /// A block index, checked against the blocks written before it: how many it lists.
    Blocks(u64),
}

/// A block directory's dumpdir: its blocks by code, the index's code, the first other entry.
#[derive(Debug, Default)]
struct Listed {
    written: Vec<u64>,
    kept: Vec<u64>,
    index: Option<Code>,
    stray: Option<String>,
}

/// A member's data the validator reads as it streams past.
pub(super) enum Watch {
    Block {
        number: u64,
        len: u64,
        hash: PartHasher,
    },
    Index {
        bytes: Vec<u8>,
        /// The most bytes kept: the whole index when it fits its cap, else its first line.
        keep: usize,
        /// What the index may be: past it, one whose first line is [`MAGIC`] is refused.
        cap: u64,
        size: u64,
    },
}

impl Watch {
    pub(super) fn update(&mut self, data: &[u8]) {
        match self {
            Watch::Block { len, hash, .. } => {
                *len += data.len() as u64;
                hash.update(data);
            }
            Watch::Index { bytes, keep, .. } => {
                let room = keep.saturating_sub(bytes.len()).min(data.len());
                bytes.extend_from_slice(&data[..room]);
            }
        }
    }
}

/// The directory a key is in and its own name: `a/b/c` → (`a/b`, `c`).
fn split(key: &[u8]) -> (&[u8], &[u8]) {
    match key.iter().rposition(|b| *b == b'/') {
        Some(i) => (&key[..i], &key[i + 1..]),
        None => (&b""[..], key),
    }
}

fn is_block_dir_name(key: &[u8]) -> bool {
    blocks::file_name(split(key).1).is_some()
}

fn child(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut key = dir.to_vec();
    if !key.is_empty() {
        key.push(b'/');
    }
    key.extend_from_slice(name);
    key
}

/// The refusal, naming the file the directory holds: `home/agent/state.db (kept in blocks): why`.
fn refused(dir: &[u8], why: impl std::fmt::Display) -> ArchiveError {
    let (parent, name) = split(dir);
    let file = child(parent, blocks::file_name(name).unwrap_or(name));
    ArchiveError::unsafe_(
        Rule::BlockDirectory,
        format!("{} (kept in blocks): {why}", shown_key(&file)),
    )
}

fn kind_word(member: &Member) -> Option<&'static str> {
    match member.kind {
        MemberKind::File if member.sparse.is_some() => Some("a sparse file"),
        MemberKind::File => None,
        MemberKind::Dir => Some("a directory"),
        MemberKind::Symlink => Some("a symlink"),
        MemberKind::Hardlink => Some("a hard link"),
        // Rule 4 refused it before.
        MemberKind::Other(_) => Some("a special file"),
    }
}

impl BlockDirs {
    /// A member (checked by the other rules, key `key`): what of its data the validator
    /// must read, if it is a block or an index.
    pub(super) fn member(
        &mut self,
        key: &[u8],
        member: &Member,
    ) -> Result<Option<Watch>, ArchiveError> {
        let (dir, name) = split(key);
        if !is_block_dir_name(dir) {
            return Ok(None);
        }
        let seen = self.dirs.entry(dir.to_vec()).or_default();
        if let IndexSeen::Blocks(_) = seen.index {
            return Err(refused(
                dir,
                format!(
                    "{} comes after its index (the index is written last)",
                    shown_name(name)
                ),
            ));
        }
        let odd = kind_word(member);
        if name == INDEX_NAME.as_bytes() {
            return match member.kind {
                // As a restore reads it: a directory or symlink named `index` makes no
                // block directory.
                MemberKind::Dir | MemberKind::Symlink => {
                    seen.index = IndexSeen::NotBlocks;
                    Ok(None)
                }
                // Its bytes (another file's, or with holes) are not in this stream as a
                // restore will read them, and hb never writes one.
                _ if odd.is_some() => Err(refused(
                    dir,
                    format!(
                        "its index is {}, which may or may not be a block index",
                        odd.unwrap_or_default()
                    ),
                )),
                _ => {
                    let blocks_known = seen.written.len().max(
                        seen.listing
                            .as_ref()
                            .map_or(0, |l| l.written.len() + l.kept.len()),
                    ) as u64;
                    let cap =
                        (INDEX_HEADER_BYTES + INDEX_LINE_BYTES * blocks_known).min(MAX_INDEX_BYTES);
                    let keep = if member.size <= cap {
                        member.size
                    } else {
                        MAGIC.len() as u64 + 1
                    };
                    Ok(Some(Watch::Index {
                        bytes: Vec::with_capacity(keep as usize),
                        keep: keep as usize,
                        cap,
                        size: member.size,
                    }))
                }
            };
        }
        let Some(number) = blocks::block_number(name) else {
            seen.stray.get_or_insert_with(|| {
                format!(
                    "it holds {}, neither its index nor a block",
                    shown_name(name)
                )
            });
            return Ok(None);
        };
        if let Some(what) = odd {
            seen.stray.get_or_insert_with(|| {
                format!("block {} is {what}, not a regular file", shown_name(name))
            });
            return Ok(None);
        }
        Ok(Some(Watch::Block {
            number,
            len: 0,
            hash: PartHasher::new(PartHashAlgo::Xxh3_128),
        }))
    }

    /// A watched member's data has all streamed past.
    pub(super) fn read(&mut self, key: &[u8], watch: Watch) -> Result<(), ArchiveError> {
        let dir = split(key).0;
        let seen = self.dirs.entry(dir.to_vec()).or_default();
        match watch {
            Watch::Block { number, len, hash } => {
                seen.written.insert(number, (len, hash.finish()));
                Ok(())
            }
            Watch::Index {
                bytes, cap, size, ..
            } => {
                let head = format!("{MAGIC}\n");
                if !bytes.starts_with(head.as_bytes()) {
                    seen.index = IndexSeen::NotBlocks;
                    return Ok(());
                }
                if size > cap {
                    return Err(refused(
                        dir,
                        format!(
                            "its index is {size} bytes, longer than the blocks beside it make ({cap})"
                        ),
                    ));
                }
                let index = BlockIndex::parse(&bytes).map_err(|e| refused(dir, e))?;
                if let Some(stray) = &seen.stray {
                    return Err(refused(dir, stray));
                }
                let count = index.blocks.len() as u64;
                for (&i, (len, hash)) in &seen.written {
                    let name = blocks::block_name(i);
                    let Some(expected) = index.blocks.get(i as usize) else {
                        return Err(refused(
                            dir,
                            format!("{name} is not one of its {count} blocks"),
                        ));
                    };
                    if *len != index.block_len(i) {
                        return Err(refused(
                            dir,
                            format!(
                                "block {name} is {len} bytes long, its index says {}",
                                index.block_len(i)
                            ),
                        ));
                    }
                    if hash != expected {
                        return Err(refused(
                            dir,
                            format!("block {name} does not have the hash its index gives"),
                        ));
                    }
                }
                seen.index = IndexSeen::Blocks(count);
                Ok(())
            }
        }
    }

    /// The dumpdir of the directory at `key` (after the entries a restore leaves out).
    pub(super) fn listing(&mut self, key: &[u8], listing: &Dumpdir) {
        if !is_block_dir_name(key) {
            return;
        }
        let mut listed = Listed::default();
        for (code, name) in listing.entries() {
            if name == INDEX_NAME.as_bytes() {
                listed.index = Some(*code);
                continue;
            }
            match (code, blocks::block_number(name)) {
                (Code::Included, Some(i)) => listed.written.push(i),
                (Code::Unchanged, Some(i)) => listed.kept.push(i),
                (Code::Directory, Some(_)) => {
                    listed.stray.get_or_insert_with(|| {
                        format!(
                            "block {} is a directory, not a regular file",
                            shown_name(name)
                        )
                    });
                }
                (_, None) => {
                    listed.stray.get_or_insert_with(|| {
                        format!(
                            "it holds {}, neither its index nor a block",
                            shown_name(name)
                        )
                    });
                }
            }
        }
        self.dirs.entry(key.to_vec()).or_default().listing = Some(listed);
    }

    /// After the stream: every block directory of this link holds exactly its blocks.
    /// Returns their keys, in order (`prior`: the tree before this link).
    pub(super) fn finish(&self, prior: Option<&ChainState>) -> Result<Vec<Vec<u8>>, ArchiveError> {
        let mut keys: Vec<&Vec<u8>> = self.dirs.keys().collect();
        // The same archive always gives the same error.
        keys.sort();
        let mut found = Vec::new();
        for dir in keys {
            let seen = &self.dirs[dir];
            let index_key = child(dir, INDEX_NAME.as_bytes());
            let kept_index = seen.listing.as_ref().and_then(|l| l.index).is_some()
                && prior.and_then(|p| p.get(&index_key)) == Some(Node::BlockIndex);
            let count = match seen.index {
                IndexSeen::Blocks(count) => Some(count),
                IndexSeen::NotBlocks => continue,
                IndexSeen::Absent if kept_index => None,
                IndexSeen::Absent => continue,
            };
            check_blocks(dir, seen, count, prior)?;
            found.push(dir.clone());
        }
        Ok(found)
    }
}

/// The blocks a block directory holds after this link, against its index (`count` blocks,
/// or `None` for an index kept from the link before).
fn check_blocks(
    dir: &[u8],
    seen: &Seen,
    count: Option<u64>,
    prior: Option<&ChainState>,
) -> Result<(), ArchiveError> {
    if let Some(stray) = &seen.stray {
        return Err(refused(dir, stray));
    }
    let Some(listed) = &seen.listing else {
        // Over a tree before it, a directory without a listing purges nothing: blocks an
        // earlier link left would stay beside these.
        if prior.is_some() {
            return Err(refused(
                dir,
                "its directory has no incremental listing in a link of a chain",
            ));
        }
        let count = count.unwrap_or_default();
        return exactly(dir, seen.written.keys().copied(), count);
    };
    if let Some(stray) = &listed.stray {
        return Err(refused(dir, stray));
    }
    // What the listing says is written must be in this stream, and the reverse: a name
    // listed as written but absent keeps whatever an earlier link left there.
    if let Some(i) = listed
        .written
        .iter()
        .find(|i| !seen.written.contains_key(i))
    {
        return Err(refused(
            dir,
            format!(
                "block {} is listed as written but is not in the archive",
                blocks::block_name(*i)
            ),
        ));
    }
    if seen.written.len() != listed.written.len() {
        return Err(refused(dir, "it writes a block its listing does not name"));
    }
    let index_written = matches!(seen.index, IndexSeen::Blocks(_));
    match (listed.index, index_written) {
        (Some(Code::Included), true) | (Some(Code::Unchanged), false) => {}
        (Some(Code::Included), false) => {
            return Err(refused(
                dir,
                "its index is listed as written but is not in the archive",
            ));
        }
        _ => return Err(refused(dir, "its listing does not name its index")),
    }
    let prior_was_blocks =
        prior.and_then(|p| p.get(&child(dir, INDEX_NAME.as_bytes()))) == Some(Node::BlockIndex);
    if !listed.kept.is_empty() && !prior_was_blocks {
        return Err(refused(
            dir,
            "it keeps blocks from a directory that was no block directory before",
        ));
    }
    let held = listed.written.iter().chain(&listed.kept).copied();
    match count {
        Some(count) => exactly(dir, held, count),
        None => {
            if !listed.written.is_empty() {
                return Err(refused(
                    dir,
                    "it writes blocks but keeps the index from before (an index is written whenever its file changes)",
                ));
            }
            // The kept blocks are the earlier link's, which held exactly b0..b{n-1}: they
            // are all of them when they run from b0 without a gap and the tree before has
            // no block after the last.
            let n = listed.kept.len() as u64;
            exactly(dir, held, n)?;
            let next = child(dir, blocks::block_name(n).as_bytes());
            if prior.and_then(|p| p.get(&next)).is_some() {
                return Err(refused(
                    dir,
                    format!(
                        "block {} is missing (the index kept from before lists it)",
                        blocks::block_name(n)
                    ),
                ));
            }
            Ok(())
        }
    }
}

/// `held` is exactly the blocks 0..count.
fn exactly(dir: &[u8], held: impl Iterator<Item = u64>, count: u64) -> Result<(), ArchiveError> {
    let mut held: Vec<u64> = held.collect();
    held.sort_unstable();
    held.dedup();
    if let Some(i) = held.iter().find(|i| **i >= count) {
        return Err(refused(
            dir,
            format!(
                "{} is not one of its {count} blocks",
                blocks::block_name(*i)
            ),
        ));
    }
    // Distinct and below count: the first gap is the first block missing.
    let missing = (0..count).find(|i| held.get(*i as usize) != Some(i));
    match missing {
        Some(i) => Err(refused(
            dir,
            format!("block {} is missing", blocks::block_name(i)),
        )),
        None => Ok(()),
    }
}
