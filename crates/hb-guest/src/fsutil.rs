//! Small file helpers: atomic private writes, private dirs.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use nix::unistd::{Gid, Uid};

use crate::account::chown_nofollow;

/// Writes `bytes` to `path` atomically: a 0600 temp file in the same dir, fsync, rename.
/// `owner` (when set) is applied to the temp file before the rename, so the file never
/// exists with the wrong owner.
pub fn write_private(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(Uid, Gid)>,
) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent dir", path.display()))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name", path.display()))?;
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        chown_nofollow(&tmp, owner)?;
        fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} into place", tmp.display()))?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Makes sure `path` is a real directory (not a symlink) with `mode`, creating it if
/// needed, and gives it (only it, never what is inside) to `owner`.
pub fn ensure_dir(path: &Path, mode: u32, owner: Option<(Uid, Gid)>) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            bail!(
                "{} is a symlink; refusing to use it as a managed directory (remove it and re-run `hb init`)",
                path.display()
            )
        }
        Ok(meta) if !meta.is_dir() => bail!(
            "{} exists but is not a directory (move it away and re-run `hb init`)",
            path.display()
        ),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir(path).with_context(|| format!("cannot create {}", path.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set mode {mode:o} on {}", path.display()))?;
    chown_nofollow(path, owner)
}

/// Reads a small text file; `None` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Opens a file the agent can write for reading, only if it is a regular file: never
/// through a symlink, and never blocking on a FIFO (the workload reads such files each tick,
/// as PID 1).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// Mode bits of a path (without following a final symlink).
pub fn mode_of(path: &Path) -> Option<u32> {
    fs::symlink_metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}
