//! Keeping a save's backup file out of the page cache once it is on the disk.
//!
//! A save writes a file as large as the compressed `/data` (600 MiB on the bench corpus).
//! Left in the page cache it pushes out what the user's programs had there, and every one
//! of its pages is a fresh allocation: on a VM whose host backs guest memory lazily (this
//! project's test machines, many cloud VMs) that costs more CPU than encrypting the bytes
//! (`just bench`: write + fsync 1.7 CPU s for 570 MiB, AES 0.6). So the verifier, the
//! file's last reader, hands back each range it has verified once the range is on the disk
//! ([`DropBehind`]): the next writes reuse those pages. Only for a file nothing reads again
//! before it is published (an unnamed one, `super::unpublished`): a named temp is read
//! once more at the end, and that read would then come from the disk.
//!
//! Everything here is advice: a call that fails (a filesystem without it, tmpfs, macOS)
//! leaves the pages cached, which is only slower.

use std::fs::File;

/// Waits until `[from, to)` of `file` is on the disk (starting its writeback if it has not
/// started), then drops it from the page cache.
pub fn drop_once_written(file: &File, from: u64, to: u64) {
    if to <= from {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        let (Ok(offset), Ok(len)) = (
            libc::off64_t::try_from(from),
            libc::off64_t::try_from(to - from),
        ) else {
            return;
        };
        // SAFETY: plain syscalls on a descriptor the caller owns; no memory is passed.
        // Their results are advice only (module comment).
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset,
                len,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            );
            libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_DONTNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Drops a file its reader has read from the cache, `lag` bytes behind the reader, `step`
/// bytes at a time.
pub struct DropBehind {
    lag: u64,
    step: u64,
    dropped: u64,
}

impl DropBehind {
    pub fn new(lag: u64, step: u64) -> Self {
        DropBehind {
            lag,
            step: step.max(1),
            dropped: 0,
        }
    }

    /// For a reader following a file as an [`super::writeback::EarlyWriteback`] writes it:
    /// a writeback step behind, whose writing back started a step before, so a drop seldom
    /// waits for the disk.
    pub fn behind_a_writer() -> Self {
        let step = super::writeback::WRITEBACK_STEP;
        Self::new(step, step)
    }

    /// The reader of `file` has read up to `read`.
    pub fn read_up_to(&mut self, file: &File, read: u64) {
        if read >= self.dropped + self.lag + self.step {
            let to = read - self.lag;
            drop_once_written(file, self.dropped, to);
            self.dropped = to;
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Write as _;

    /// How many of `file`'s pages are in the page cache (mincore of a mapping of it).
    fn resident_pages(file: &File) -> usize {
        use std::os::fd::AsRawFd as _;
        let len = file.metadata().unwrap().len() as usize;
        let page = 4096;
        let pages = len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: a read-only shared mapping of a file we hold open, unmapped below; mincore
        // writes one byte per page into `vec`, which has one per page.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(addr, libc::MAP_FAILED);
            assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
            libc::munmap(addr, len);
        }
        vec.iter().filter(|b| **b & 1 == 1).count()
    }

    fn on_tmpfs(path: &std::path::Path) -> bool {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statfs fills the zeroed struct we own.
        unsafe {
            let mut s: libc::statfs = std::mem::zeroed();
            libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type == libc::TMPFS_MAGIC
        }
    }

    #[test]
    fn what_was_written_and_read_leaves_the_cache_behind_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        if on_tmpfs(dir.path()) {
            // tmpfs is the page cache: nothing to drop.
            return;
        }
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(24u32 << 20)).map(|i| (i % 251) as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&data).unwrap();
        let reader = File::open(&path).unwrap();
        assert!(resident_pages(&reader) > 0, "written pages start cached");
        drop_once_written(&reader, 0, 16 << 20);
        let after = resident_pages(&reader);
        assert!(
            after <= (8 << 20) / 4096,
            "the first 16 MiB were dropped, the rest kept: {after} pages cached"
        );
        let mut behind = DropBehind::new(0, 4 << 20);
        behind.read_up_to(&reader, 20 << 20);
        assert!(
            resident_pages(&reader) <= (4 << 20) / 4096,
            "what was read was dropped"
        );
        assert!(
            std::fs::read(&path).unwrap() == data,
            "the bytes are all there, from the disk"
        );
    }
}
