//! Starting the disk writes of a growing file early, so its final fsync has little left.
//!
//! A save writes the whole backup into the page cache and fsyncs it once at the end:
//! with Linux's defaults (background writeback from 10 % of memory, or after 30 s) that
//! fsync wrote the whole file while every core idled — ~0.3 s of a 6 s save of the bench
//! corpus. Every [`WRITEBACK_STEP`] bytes, the writer asks the kernel to start writing
//! what came before (`sync_file_range(SYNC_FILE_RANGE_WRITE)`: it does not wait), so the
//! disk works while the save goes on. The final fsync stays the durability guarantee;
//! this only moves work earlier. Elsewhere (macOS) it is a plain file.

use std::fs::File;
use std::io::{self, Write};

/// How much is written between two writeback starts.
pub const WRITEBACK_STEP: u64 = 32 << 20;

/// A file whose written bytes are handed to the disk as they accumulate.
pub struct EarlyWriteback {
    file: File,
    written: u64,
    /// Bytes before this offset were handed to the disk already.
    started: u64,
}

impl EarlyWriteback {
    /// Wraps `file`, positioned at its start.
    pub fn new(file: File) -> Self {
        EarlyWriteback {
            file,
            written: 0,
            started: 0,
        }
    }

    fn start_writeback(&mut self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain syscall on a descriptor this struct owns; the range is in
            // bytes already written. A failure only means the final fsync does the work.
            let _ = unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    self.started as libc::off64_t,
                    (self.written - self.started) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
        self.started = self.written;
    }
}

impl Write for EarlyWriteback {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= WRITEBACK_STEP {
            self.start_writeback();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn writes_every_byte_in_order_across_writeback_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = EarlyWriteback::new(File::create(&path).unwrap());
        let step = WRITEBACK_STEP as usize;
        let data: Vec<u8> = (0..step * 2 + 12345).map(|i| (i % 253) as u8).collect();
        for piece in data.chunks(step / 3 + 7) {
            w.write_all(piece).unwrap();
        }
        assert!(w.started >= 2 * WRITEBACK_STEP, "writeback never started");
        drop(w);
        assert!(std::fs::read(&path).unwrap() == data);
    }
}
