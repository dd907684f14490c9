//! The backup archive: what is inside a `<box>-<stamp>.tar.zst.gpg` once decrypted, and the
//! rules both sides hold it to.
//!
//! * [`validate`]: the streaming validator (hermes-box.md §1.3, V4 rules in order, plus caps).
//! * [`compress`]: the zstd workers' job shape, for `hb export` and the bench.
//! * [`excludes`]: what `hb export` leaves out of a backup (the seed's excludes).
//! * [`parts`]: the part index `hb export` writes beside its parts (size + hash each);
//!   [`part_hash`]: that hash, SHA-256 or XXH3-128.
//! * [`incremental`]: GNU tar's dumpdirs, which make a chain of backups restorable with
//!   stock `tar -x -g /dev/null`; [`chain_state`]: the tree a chain built, which the next
//!   link is validated against.
//! * [`host_facts`]: what `box` itself vouches for about a backup (policy, versions, chain
//!   place), sealed into its first bytes; [`chain_line`]: what `hb export` says it makes.
//! * [`naming`]: backup file names and finding a box's newest backup.
//! * [`unpack`]: extraction into a staging dir; [`holes`] and [`room`] keep zeros as holes
//!   and the destination's filesystem from filling up.
//! * [`shown`]: how every message quotes a name from an archive.
//!
//! Compression is recognised by magic bytes ([`sniff`]), never by a file name: a seed
//! backup (`tar czf | gpg --symmetric`, gzip inside) reads like one of ours (zstd inside).

pub mod chain_line;
pub mod chain_state;
pub mod compress;
pub mod excludes;
pub mod holes;
pub mod host_facts;
pub mod incremental;
pub mod naming;
pub mod part_hash;
pub mod parts;
pub mod room;
pub mod shown;
pub mod tarread;
pub mod unpack;
pub mod validate;

pub use validate::{ArchiveError, Limits, Report, Validator};

/// The compression inside a backup's plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Zstandard: what this project writes.
    Zstd,
    /// gzip: what the seed (`tar czf`) wrote.
    Gzip,
}

impl Compression {
    /// The short name used in messages and the part index.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }
}

/// The zstd frame magic number, little-endian on disk.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The gzip member magic.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Recognises the compression from the first bytes of a stream (at least 4 are needed to
/// recognise zstd). Returns `None` for anything else.
pub fn sniff(head: &[u8]) -> Option<Compression> {
    if head.starts_with(&ZSTD_MAGIC) {
        Some(Compression::Zstd)
    } else if head.starts_with(&GZIP_MAGIC) {
        Some(Compression::Gzip)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_magic_not_names() {
        assert_eq!(sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0]), Some(Compression::Zstd));
        assert_eq!(sniff(&[0x1f, 0x8b, 8]), Some(Compression::Gzip));
        assert_eq!(sniff(b"./home"), None);
        assert_eq!(sniff(&[]), None);
        assert_eq!(sniff(&[0x28, 0xb5]), None);
    }
}
