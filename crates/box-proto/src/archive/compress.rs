//! A backup's compression: which one its plaintext has, and how its tar stream is
//! compressed with more than one zstd worker.
//!
//! The compression is recognised by magic bytes ([`sniff`]), never by a file name: a seed
//! backup (`tar czf | gpg --symmetric`, gzip inside) reads like one of ours (zstd inside).
//! `hb export` and the bench's zstd stage (which must measure the same thing) both
//! configure their encoder here ([`use_workers`]).

use std::io::{self, Write};

/// The compression inside a backup's plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Zstandard: what this project writes.
    Zstd,
    /// gzip: what the seed (`tar czf`) wrote.
    Gzip,
}

impl Compression {
    /// The short name used in messages and the part index.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }
}

/// The zstd frame magic number, little-endian on disk.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// The gzip member magic.
pub const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Recognises the compression from the first bytes of a stream (at least 4 are needed to
/// recognise zstd). Returns `None` for anything else.
pub fn sniff(head: &[u8]) -> Option<Compression> {
    if head.starts_with(&ZSTD_MAGIC) {
        Some(Compression::Zstd)
    } else if head.starts_with(&GZIP_MAGIC) {
        Some(Compression::Gzip)
    } else {
        None
    }
}

/// Bytes of input per zstd job. Smaller than zstd's default at level 3 (4 windows,
/// 8 MiB) so that two workers keep `hb export`'s peak RSS well under 64 MiB, at no
/// measurable cost in ratio.
pub const JOB_SIZE: u32 = 2 << 20;

/// How much of the previous job each job loads as its history, as zstd's overlap log:
/// the window's 1/64 (32 KiB at level 3), not its 1/8. zstd's default re-reads 256 KiB
/// before every 2 MiB job, an eighth more input through the match finder; on the bench's
/// home corpus (1.4 GiB tar) this log costs 7 % less CPU for 0.05 % more bytes (zstd CLI
/// `-3 -T2 -B2M`, medians of 6 rounds: `--zstd=ovlog=3` 3.45 cpu s against 3.70,
/// 598.86 MB against 598.59 MB). A whole save (backup_harness save-stream, medians of 5)
/// went from 4.40 to 4.30 s there, and did not change on the big corpus (random data
/// costs zstd little either way).
pub const OVERLAP_LOG: u32 = 3;

/// Starts `threads` zstd workers on `encoder` with this project's job shape; one thread
/// compresses in the caller's thread, as zstd does without workers.
pub fn use_workers<W: Write>(
    encoder: &mut zstd::stream::write::Encoder<'_, W>,
    threads: u32,
) -> io::Result<()> {
    if threads <= 1 {
        return Ok(());
    }
    use zstd::stream::raw::CParameter;
    encoder.multithread(threads)?;
    encoder.set_parameter(CParameter::JobSize(JOB_SIZE))?;
    encoder.set_parameter(CParameter::OverlapSizeLog(OVERLAP_LOG))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_magic_not_names() {
        assert_eq!(sniff(&[0x28, 0xb5, 0x2f, 0xfd, 0]), Some(Compression::Zstd));
        assert_eq!(sniff(&[0x1f, 0x8b, 8]), Some(Compression::Gzip));
        assert_eq!(sniff(b"./home"), None);
        assert_eq!(sniff(&[]), None);
        assert_eq!(sniff(&[0x28, 0xb5]), None);
    }
}
