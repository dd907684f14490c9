//! The room an extraction may still use: what really protects a destination from a
//! "decompression bomb". A file of zeros is ordinary data (a `dd`-made image, a swap file,
//! a preallocated database) and costs no disk once written as holes
//! ([`holes`](crate::archive::holes)); what must never happen is an archive filling the
//! filesystem it is restored onto. So the free space of the staging filesystem is read
//! (`statvfs`) as bytes are really written, and an extraction stops with a clear error
//! while a margin is still free, and at the total cap whatever the free space.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The free space is read again after at most this many bytes were written.
const RECHECK_EVERY: u64 = 64 << 20;

/// The margin left free: 256 MiB, or a twentieth of a smaller filesystem.
const MARGIN_MAX: u64 = 256 << 20;

/// Free and total bytes of a filesystem, as an unprivileged user may use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub free: u64,
    pub total: u64,
}

/// Reads [`Space`] for the filesystem holding `path`.
pub fn space_of(path: &Path) -> io::Result<Space> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path holds a NUL byte"))?;
    // SAFETY: a NUL-terminated path and a zeroed statvfs the call fills in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok(Space {
        free: (st.f_bavail as u64).saturating_mul(unit),
        total: (st.f_blocks as u64).saturating_mul(unit),
    })
}

/// Shows a byte count the way the errors say it (`1.5 GiB`, `300 MiB`, `12 KiB`).
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Counts the bytes an extraction writes against the room left on its filesystem and the
/// total cap.
pub struct Room {
    dir: PathBuf,
    cap: u64,
    written: u64,
    /// Bytes that may still be written before the free space is read again.
    budget: u64,
    probe: fn(&Path) -> io::Result<Space>,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("dir", &self.dir)
            .field("cap", &self.cap)
            .field("written", &self.written)
            .finish()
    }
}

impl Room {
    /// Room on the filesystem of `dir`, for at most `cap` bytes in all.
    pub fn new(dir: &Path, cap: u64) -> Self {
        Self::with_probe(dir, cap, space_of)
    }

    /// The same with another way to read the free space (tests).
    pub fn with_probe(dir: &Path, cap: u64, probe: fn(&Path) -> io::Result<Space>) -> Self {
        Room {
            dir: dir.to_path_buf(),
            cap,
            written: 0,
            budget: 0,
            probe,
        }
    }

    /// Bytes really written so far (holes not counted).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Called before `n` bytes are written: an error when they would pass the cap or
    /// leave less than the margin free.
    pub fn take(&mut self, n: u64) -> io::Result<()> {
        let after = self.written.saturating_add(n);
        if after > self.cap {
            return Err(io::Error::other(format!(
                "the archive's data passes the cap of {} written bytes",
                human(self.cap)
            )));
        }
        if n > self.budget {
            let space = (self.probe)(&self.dir).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot read the free space of {}: {e}", self.dir.display()),
                )
            })?;
            let margin = MARGIN_MAX.min(space.total / 20);
            let usable = space.free.saturating_sub(margin);
            if n > usable {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "not enough room in {}: {} free, {} already written by this restore, and {} is kept free (the margin); free some space or restore elsewhere",
                        self.dir.display(),
                        human(space.free),
                        human(self.written),
                        human(margin)
                    ),
                ));
            }
            self.budget = usable.min(RECHECK_EVERY.max(n));
        }
        self.budget -= n;
        self.written = after;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// The fake filesystem's free bytes; the tests take off what they "write".
        static FREE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn fake(_: &Path) -> io::Result<Space> {
        Ok(Space {
            free: FREE.with(|f| f.get()),
            total: 10 << 30,
        })
    }

    /// Writes 1 MiB at a time until the room says no; returns how much went in.
    fn fill(room: &mut Room) -> (u64, io::Error) {
        loop {
            if let Err(e) = room.take(1 << 20) {
                return (room.written(), e);
            }
            FREE.with(|f| f.set(f.get() - (1 << 20)));
        }
    }

    #[test]
    fn stops_while_the_margin_is_still_free() {
        FREE.with(|f| f.set(1 << 30));
        let mut room = Room::with_probe(Path::new("/stage"), u64::MAX, fake);
        // 1 GiB free, 256 MiB kept: 768 MiB may be written, not a byte more.
        let (written, e) = fill(&mut room);
        assert_eq!(written, 768 << 20);
        let text = e.to_string();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert!(text.contains("not enough room in /stage"), "{text}");
        assert!(text.contains("256.0 MiB free"), "{text}");
        assert!(text.contains("768.0 MiB already written"), "{text}");
        assert!(text.contains("256.0 MiB is kept free"), "{text}");
    }

    #[test]
    fn the_cap_holds_whatever_the_room() {
        FREE.with(|f| f.set(1 << 30));
        let mut room = Room::with_probe(Path::new("/stage"), 10 << 20, fake);
        room.take(10 << 20).unwrap();
        let e = room.take(1).unwrap_err().to_string();
        assert!(e.contains("cap of 10.0 MiB"), "{e}");
    }

    #[test]
    fn a_small_filesystem_keeps_a_twentieth() {
        fn small(_: &Path) -> io::Result<Space> {
            Ok(Space {
                free: FREE.with(|f| f.get()),
                total: 100 << 20,
            })
        }
        FREE.with(|f| f.set(50 << 20));
        let mut room = Room::with_probe(Path::new("/s"), u64::MAX, small);
        // 5 MiB kept of a 100 MiB filesystem.
        assert_eq!(fill(&mut room).0, 45 << 20);
    }

    #[test]
    fn reads_a_real_filesystem() {
        let s = space_of(Path::new("/")).unwrap();
        assert!(s.total > 0 && s.free <= s.total);
        assert_eq!(human(1536 << 20), "1.5 GiB");
        assert_eq!(human(12), "12 bytes");
    }
}
