//! Copying a member's data through one buffer, here and in `hb export`.

use std::io::{self, Read, Write};

/// How much of a member's data is copied at a time (here and by `hb export`): `io::copy`
/// copies 8 KiB pieces, a syscall and a (de)compressor call per 8 KiB of every file.
pub const COPY_BUF: usize = 1 << 20;

/// Copies `from` to `to` through `buf` to EOF; returns the bytes copied.
pub fn copy_through(buf: &mut [u8], from: &mut dyn Read, to: &mut dyn Write) -> io::Result<u64> {
    let mut copied = 0u64;
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(copied),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        copied += n as u64;
    }
}
