//! The file a save writes before it is published: a file with no name at all where the
//! kernel and the filesystem allow it (Linux `O_TMPFILE`: ext4, xfs, btrfs, tmpfs), a named
//! 0600 temp beside the destination everywhere else (macOS, NFS, FUSE, `/proc` missing).
//!
//! Why the unnamed file matters: the verifier reads the backup while it is written
//! ([`super::follow`]). A named temp can be opened by any process of the user, so before
//! publishing, save reads the whole named file once more and compares it with what the
//! verifier read (0.3 s of a 4.5 s save of the bench corpus, serial at its very end, and
//! the whole file again from a slow disk). Nothing can open an unnamed file by a path: no
//! editor, sync client or stray `box` run meets it in the directory. The only way in is
//! `/proc/<box's pid>/fd`, which a process of the same user must aim at box on purpose,
//! and such a process could as well rewrite the published backup a moment later. So an
//! unnamed file needs no re-read. It also leaves nothing behind however box dies: the
//! kernel frees it with the last descriptor.
//!
//! Publishing links it into place with `linkat(AT_SYMLINK_FOLLOW)` through
//! `/proc/self/fd/<n>` (open(2)'s documented way; `AT_EMPTY_PATH` needs
//! `CAP_DAC_READ_SEARCH`), which fails with EEXIST like `link(2)`: never replacing.

use std::fs::File;
use std::io;
use std::path::Path;

use super::cleanup::{self, Temp};
use super::publish;

/// A save's backup file before it is published.
pub(super) enum Unpublished {
    /// No name yet; a descriptor to link it by. (Linux only.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Unnamed {
        file: File,
    },
    Named(Temp),
}

/// Which kind [`Unpublished::create`] tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TempKind {
    /// Unnamed where possible, else named.
    Best,
    /// Named: the path of platforms without unnamed files (tests take it on Linux too).
    Named,
}

/// The new file: how to publish it, a handle to write it (at its start) and a second,
/// independent one (its own offset) to read it as it grows.
pub(super) struct Created {
    pub unpublished: Unpublished,
    pub writer: File,
    pub follower: File,
}

impl Unpublished {
    /// Creates the file in `dir`; a named one is `<dir>/.<name>.tmp-<random>`.
    pub fn create(dir: &Path, name: &str, kind: TempKind) -> io::Result<Created> {
        if kind == TempKind::Best
            && let Some(created) = unnamed(dir)
        {
            return Ok(created);
        }
        let (temp, writer) = Temp::create_file(dir, &format!(".{name}.tmp-"))?;
        let follower = File::open(temp.path())?;
        Ok(Created {
            unpublished: Unpublished::Named(temp),
            writer,
            follower,
        })
    }

    /// The temp's path, for a named one: what another process could have changed, and
    /// so what must be read again before it is published.
    pub fn named_path(&self) -> Option<&Path> {
        match self {
            Unpublished::Named(temp) => Some(temp.path()),
            Unpublished::Unnamed { .. } => None,
        }
    }

    /// The file's size now.
    pub fn size(&self) -> io::Result<u64> {
        match self {
            Unpublished::Named(temp) => std::fs::metadata(temp.path()).map(|m| m.len()),
            Unpublished::Unnamed { file } => file.metadata().map(|m| m.len()),
        }
    }

    /// Gives the file the name `out`, never replacing what is there (`AlreadyExists`).
    /// Runs under the cleanup lock, so a signal lands before or after, never between the
    /// link and forgetting the temp.
    pub fn publish(self, out: &Path) -> io::Result<()> {
        match self {
            Unpublished::Unnamed { file } => {
                cleanup::with_lock(|_| link_unnamed(&file, out))?;
                Ok(())
            }
            Unpublished::Named(temp) => {
                cleanup::with_lock(|reg| -> io::Result<()> {
                    publish::link_noreplace(temp.path(), out)?;
                    let _ = std::fs::remove_file(temp.path());
                    reg.forget(temp.id());
                    Ok(())
                })?;
                temp.disarm();
                Ok(())
            }
        }
    }
}

/// The unnamed file and a second description of it, or `None` where this system cannot
/// make one (then the caller makes a named temp: every failure here only costs speed).
#[cfg(target_os = "linux")]
fn unnamed(dir: &Path) -> Option<Created> {
    use std::os::unix::fs::OpenOptionsExt as _;
    cleanup::check().ok()?;
    let writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
        .ok()?;
    // Reopening through /proc gives the follower an offset of its own (a dup would share
    // the writer's), and proves the path publishing links through works here.
    let follower = File::open(fd_path(&writer)).ok()?;
    let file = writer.try_clone().ok()?;
    Some(Created {
        unpublished: Unpublished::Unnamed { file },
        writer,
        follower,
    })
}

#[cfg(not(target_os = "linux"))]
fn unnamed(_dir: &Path) -> Option<Created> {
    None
}

#[cfg(target_os = "linux")]
fn fd_path(file: &File) -> std::path::PathBuf {
    use std::os::fd::AsRawFd as _;
    std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

#[cfg(target_os = "linux")]
fn link_unnamed(file: &File, out: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;
    let from = CString::new(fd_path(file).as_os_str().as_bytes()).map_err(io::Error::other)?;
    let to = CString::new(out.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: two valid NUL-terminated paths the kernel only reads.
    let failed = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    } != 0;
    if failed {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
fn link_unnamed(_file: &File, _out: &Path) -> io::Result<()> {
    Err(io::Error::other("unnamed files are unsupported on this OS"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn an_unnamed_file_has_no_name_until_published_then_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let Created {
            unpublished,
            mut writer,
            mut follower,
        } = Unpublished::create(dir.path(), "a", TempKind::Best).unwrap();
        assert!(
            unpublished.named_path().is_none(),
            "this filesystem has O_TMPFILE"
        );
        writer.write_all(b"backup bytes").unwrap();
        let mut read = String::new();
        follower.read_to_string(&mut read).unwrap();
        assert_eq!(
            read, "backup bytes",
            "the follower reads from its own offset"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(unpublished.size().unwrap(), 12);

        let taken = dir.path().join("taken");
        std::fs::write(&taken, "another backup").unwrap();
        let Created {
            unpublished: second,
            ..
        } = Unpublished::create(dir.path(), "b", TempKind::Best).unwrap();
        assert_eq!(
            second.publish(&taken).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read_to_string(&taken).unwrap(), "another backup");

        let out = dir.path().join("a.tar.zst.gpg");
        unpublished.publish(&out).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "backup bytes");
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["a.tar.zst.gpg", "taken"],
            "the refused one left nothing"
        );
    }

    #[test]
    fn a_named_temp_is_beside_the_destination_and_gone_once_published() {
        let dir = tempfile::tempdir().unwrap();
        let Created {
            unpublished,
            mut writer,
            ..
        } = Unpublished::create(dir.path(), "a", TempKind::Named).unwrap();
        let path = unpublished.named_path().unwrap().to_path_buf();
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".a.tmp-")
        );
        writer.write_all(b"x").unwrap();
        unpublished.publish(&dir.path().join("a")).unwrap();
        assert!(!path.exists());
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"x");
    }
}
