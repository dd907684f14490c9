//! Setting a restored file's times: on an open file, or on a path without following a
//! final symlink (a restore never follows one).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A modification time: seconds since the epoch and nanoseconds.
pub type Time = (i64, u32);

fn timespecs(mtime: Time) -> [libc::timespec; 2] {
    let t = libc::timespec {
        // (`as _`: the field's own type; musl deprecates naming `libc::time_t`.)
        tv_sec: mtime.0 as _,
        tv_nsec: i64::from(mtime.1) as _,
    };
    [t, t]
}

/// Sets an open file's access and modification times.
pub fn set_times_fd(file: &fs::File, mtime: Time) -> io::Result<()> {
    let ts = timespecs(mtime);
    // SAFETY: a valid descriptor and a two-element timespec array.
    if unsafe { libc::futimens(file.as_raw_fd(), ts.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a path's access and modification times without following a final symlink, and
/// without opening it (a directory without read permission is fine).
pub fn set_times_path(path: &Path, mtime: Time) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path holds a NUL byte"))?;
    let ts = timespecs(mtime);
    // SAFETY: a NUL-terminated path and a two-element timespec array.
    if unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a path's times (whole seconds) without following a final symlink.
pub fn set_mtime_nofollow(path: &Path, mtime: u64) -> io::Result<()> {
    set_times_path(path, (i64::try_from(mtime).unwrap_or(i64::MAX), 0))
}
