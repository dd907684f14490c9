//! The backup engine on the host: passphrase, OpenPGP, the one-pass save pipeline, the
//! verification pass, no-replace publishing, the two-pass load side and `box extract`.
//!
//! Save (issue 6 drives it through a VM; `examples/backup_harness.rs` drives it locally):
//!
//! ```text
//! save::check_destination(out)?;                  // "refusing to overwrite existing backup"
//! let mut p = save::Pipeline::begin(out, &pass)?; // unnamed 0600 file in out's dir
//! for part in parts { p.feed_part(path, Some(&index_entry))?; remove part }
//! let sealed = p.finish()?;                       // encrypted + validated + hashed, one pass
//! let verified = sealed.verify()?;                // the concurrent decryption agreed
//! let published = verified.publish()?;            // link(2): never replaces
//! ```
//!
//! Host plaintext (a part copied out of the VM) lives only in a registered temp:
//! `let dir = cleanup::Temp::create_dir(backup_dir, ".box-parts-")?` (0700), then per part
//! `cleanup::Temp::create_file(dir.path(), "part-")` (0600), `smolvm cp` into its path,
//! `feed_part`, drop. Exit, HUP, INT and TERM remove both.
//!
//! Load: [`load::validate_backup`] (pass 1: decrypt + validate + hash, nothing written),
//! then [`load::write_parts`] (pass 2: decrypt again into parts, hash must match pass 1) or
//! [`load::extract`] (pass 2 into a staging dir, promoted after the MDC check).

pub mod chain;
mod channel;
pub mod check;
pub mod cleanup;
pub mod copy_to;
pub mod crypto;
pub mod envelope;
mod follow;
pub mod host_facts;
pub mod load;
pub mod location;
pub mod missing;
pub mod next_link;
pub mod open_chain;
pub mod page_cache;
mod parser_panic;
pub mod passphrase;
pub mod publish;
pub mod save;
pub mod segments;
pub mod seipd;
pub mod tree_cache;
pub mod tree_listing;
mod unpublished;
pub mod writeback;

use box_proto::archive::ArchiveError;

/// Failures a user must be able to tell apart.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The passphrase does not open the file's key packet. A damaged key packet (its salt,
    /// S2K count or encrypted session key) derives another key just as another passphrase
    /// does: the file alone cannot tell the two apart, so the message says both.
    #[error("decryption failed (wrong passphrase, or its first bytes are damaged)")]
    WrongPassphrase,
    #[error("not an encrypted OpenPGP backup: {0}")]
    NotOpenPgp(String),
    /// Well-formed, but in an envelope box refuses (AEAD packet 20, a weak cipher, no
    /// MDC): never reported as corrupt; the message says how to re-encrypt it.
    #[error("{0}")]
    Unsupported(envelope::Unsupported),
    #[error("backup is corrupt or truncated (OpenPGP integrity check failed: {0})")]
    Corrupt(String),
    #[error("decrypted data is not a valid archive: {0}")]
    NotArchive(String),
    #[error("{0}")]
    Unsafe(ArchiveError),
    #[error("backup changed between passes (SHA-256 {first} then {second}); nothing was written")]
    Changed { first: String, second: String },
    #[error("{0}")]
    Io(String),
}

impl BackupError {
    /// Classifies an archive error seen while reading decrypted data: a decryption failure
    /// recorded underneath wins over what it did to the archive.
    pub fn from_archive(e: ArchiveError, status: &crypto::DecryptStatus) -> Self {
        if let Some(failure) = status.failure() {
            return BackupError::Corrupt(failure);
        }
        match e {
            ArchiveError::Unsafe { .. } => BackupError::Unsafe(e),
            ArchiveError::Invalid(what) => BackupError::NotArchive(what),
        }
    }
}

/// Hex SHA-256 for messages.
pub fn hex_sha(bytes: &[u8; 32]) -> String {
    hex::encode(bytes)
}
