//! Extraction of validated members into a fresh, private staging directory, shared by
//! `box extract` (host) and `hb import` (guest).
//!
//! tar's `Entry::unpack_in` is used per entry (never `Archive::unpack`) so a skipped entry
//! (`Ok(false)`, which tar reports for `..` names) fails the whole extraction. Ownership is
//! never taken from the archive (no same-owner), set-id and sticky bits are dropped, and
//! directory modes and times are applied at the end, deepest first, so a read-only
//! directory does not stop its own children from being written. Nothing here follows a
//! symlink of the extracted tree when applying modes and times.
//!
//! The staging directory must be new and private (0700) and nobody else may write in it:
//! tar's own inside-the-destination check is canonicalise-then-create.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::archive::validate::shown;

/// Unpacks members one at a time into `root`.
#[derive(Debug)]
pub struct Unpacker {
    root: PathBuf,
    dirs: Vec<(PathBuf, u32, u64)>,
    root_meta: Option<(u32, u64)>,
    unpacked: u64,
}

impl Unpacker {
    /// `root` must exist, be empty and be private to this process.
    pub fn new(root: &Path) -> Self {
        Unpacker {
            root: root.to_path_buf(),
            dirs: Vec::new(),
            root_meta: None,
            unpacked: 0,
        }
    }

    /// Unpacks one entry whose key (validated) is `key`.
    pub fn unpack<R: io::Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        key: &[u8],
    ) -> io::Result<()> {
        let header = entry.header();
        let mode = header.mode().unwrap_or(0o755) & 0o777;
        let mtime = header.mtime().unwrap_or(0);
        let is_dir = header.entry_type().is_dir();
        if key.is_empty() {
            self.root_meta = Some((mode, mtime));
            self.unpacked += 1;
            return Ok(());
        }
        entry.set_preserve_permissions(false);
        entry.set_preserve_mtime(true);
        entry.set_unpack_xattrs(false);
        let done = entry.unpack_in(&self.root)?;
        if !done {
            return Err(io::Error::other(format!(
                "tar skipped member {} (refusing a partial extraction)",
                shown(key)
            )));
        }
        if is_dir {
            let path = self
                .root
                .join(std::ffi::OsStr::from_encoded_bytes_checked(key));
            // Writable by us until the end, whatever its final mode.
            fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
            self.dirs.push((path, mode, mtime));
        }
        self.unpacked += 1;
        Ok(())
    }

    /// Members unpacked so far (the root included).
    pub fn unpacked(&self) -> u64 {
        self.unpacked
    }

    /// Applies directory modes and times, deepest first, then the root's.
    pub fn finish(mut self) -> io::Result<()> {
        self.dirs.sort_by(|a, b| b.0.cmp(&a.0));
        for (path, mode, mtime) in &self.dirs {
            fs::set_permissions(path, fs::Permissions::from_mode(*mode))?;
            set_mtime_nofollow(path, *mtime)?;
        }
        if let Some((mode, mtime)) = self.root_meta {
            fs::set_permissions(&self.root, fs::Permissions::from_mode(mode))?;
            set_mtime_nofollow(&self.root, mtime)?;
        }
        Ok(())
    }
}

/// Sets a path's access and modification times without following a final symlink.
pub fn set_mtime_nofollow(path: &Path, mtime: u64) -> io::Result<()> {
    let t = std::fs::FileTimes::new()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime))
        .set_accessed(std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime));
    // Directories only reach here; opening one read-only with O_NOFOLLOW|O_DIRECTORY is safe.
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
        .open(path)?;
    f.set_times(t)
}

/// Helper for `OsStr::from_encoded_bytes_checked` on Unix.
trait FromBytes {
    fn from_encoded_bytes_checked(b: &[u8]) -> &std::ffi::OsStr;
}

impl FromBytes for std::ffi::OsStr {
    fn from_encoded_bytes_checked(b: &[u8]) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}
