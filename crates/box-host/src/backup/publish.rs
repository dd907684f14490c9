//! Publishing without ever replacing: `link(2)` for files (fails with EEXIST), and
//! `renameat2(RENAME_NOREPLACE)` (Linux) / `renameatx_np(RENAME_EXCL)` (macOS) for
//! directories (docs/backup-format.md, "Names and publishing").

use std::io;
use std::path::Path;

/// Hard-links `temp` to `dest`; fails with `AlreadyExists` if `dest` exists.
pub fn link_noreplace(temp: &Path, dest: &Path) -> io::Result<()> {
    std::fs::hard_link(temp, dest)
}

/// Renames `from` to `to` unless `to` exists (atomically).
#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let f = CString::new(from.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let t = CString::new(to.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // Linux: the raw syscall, not a libc wrapper: glibc and musl differ on whether they
    // have one, and a static musl `box` must publish the same way (Linux >= 3.15).
    // SAFETY (both): two valid NUL-terminated paths; the kernel only reads them.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let failed = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    } != 0;
    #[cfg(target_os = "macos")]
    let failed = {
        const RENAME_EXCL: libc::c_uint = 0x4;
        unsafe { libc::renamex_np(f.as_ptr(), t.as_ptr(), RENAME_EXCL) != 0 }
    };
    if failed {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos")))]
pub fn rename_noreplace(_from: &Path, _to: &Path) -> io::Result<()> {
    Err(io::Error::other(
        "atomic no-replace rename is unsupported on this OS",
    ))
}

/// fsyncs a directory (after creating or linking in it).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_replaces() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
        std::fs::write(&a, b"new").unwrap();
        std::fs::write(&b, b"old").unwrap();
        assert_eq!(
            link_noreplace(&a, &b).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(
            rename_noreplace(&a, &b).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        std::fs::create_dir(d.path().join("x")).unwrap();
        std::fs::create_dir(d.path().join("y")).unwrap();
        assert!(rename_noreplace(&d.path().join("x"), &d.path().join("y")).is_err());
        assert_eq!(std::fs::read(&b).unwrap(), b"old");
        rename_noreplace(&a, &d.path().join("c")).unwrap();
    }
}
