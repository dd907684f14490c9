//! How a backup's tar stream is compressed with more than one zstd worker: `hb export`
//! and the bench's zstd stage (which must measure the same thing) both configure their
//! encoder here.

use std::io::{self, Write};

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
