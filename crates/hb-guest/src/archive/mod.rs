//! `hb export` and `hb import`: the guest half of the backup engine. The guest never sees
//! the passphrase: it writes and reads plaintext parts (tar → zstd, split, with a part
//! index), and the host encrypts and decrypts them.

pub mod blocked;
pub mod export;
pub mod follow;
pub mod import;
pub mod incremental;
pub mod live_db;
pub mod parts;
pub mod sparse;
pub mod write_behind;
