//! The backup archive: what is inside a `<box>-<stamp>.tar.zst.gpg` once decrypted, and the
//! rules both sides hold it to.
//!
//! * [`validate`]: the streaming validator (the seed's rules in order, plus caps:
//!   docs/backup-format.md).
//! * [`compress`]: which compression a backup's plaintext has, and the zstd workers' job
//!   shape, for `hb export` and the bench.
//! * [`excludes`]: what `hb export` leaves out of a backup (the seed's excludes).
//! * [`parts`]: the part index `hb export` writes beside its parts (size + hash each);
//!   [`part_hash`]: that hash, SHA-256 or XXH3-128; [`follow`]: the markers by which
//!   `hb import --follow` takes parts while they arrive.
//! * [`incremental`]: GNU tar's dumpdirs, which make a chain of backups restorable with
//!   stock `tar -x -g /dev/null`; [`chain_state`]: the tree a chain built, which the next
//!   link is validated against.
//! * [`host_facts`]: what `box` itself vouches for about a backup (policy, versions, chain
//!   place), sealed into its first bytes; [`chain_line`]: what `hb export` says it makes.
//! * [`naming`]: backup file names and finding a box's newest backup.
//! * [`unpack`]: extraction into a staging dir ([`copy`] and [`times`] write its files); [`holes`] and [`room`] keep zeros as holes
//!   and the destination's filesystem from filling up.
//! * [`blocks`]: large files kept as fixed-size blocks, so a link holds only the changed
//!   ones; the block directory's index. `reassemble` puts such a file back together when
//!   [`unpack`] finishes.
//! * [`shown`]: how every message quotes a name from an archive.

pub mod blocks;
pub mod chain_line;
pub mod chain_state;
pub mod compress;
pub mod copy;
pub mod excludes;
pub mod follow;
pub mod holes;
pub mod host_facts;
pub mod incremental;
pub mod naming;
pub mod part_hash;
pub mod parts;
mod reassemble;
pub mod room;
pub mod shown;
pub mod tarread;
pub mod times;
pub mod unpack;
pub mod validate;

pub use validate::{ArchiveError, Limits, Report, Validator};
