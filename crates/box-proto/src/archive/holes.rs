//! Writing a restored file's data so that long runs of zeros stay holes, as
//! `cp --sparse=always` and GNU tar's `--sparse` leave them: a 4 GiB file of zeros costs
//! no disk where it is restored, whether the archive stored it sparse or dense.
//!
//! Data is written at explicit offsets of a new, empty file (`O_EXCL`): every block-aligned
//! piece that is all zeros is simply not written, and the caller sets the file's length at
//! the end, so what was skipped reads back as zeros. Each byte that is written is first
//! taken from the [`Room`] of the destination.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use crate::archive::room::Room;

/// Zero runs are looked for in pieces of this size, aligned to the file's offsets (the
/// usual filesystem block: a shorter hole saves nothing).
pub const HOLE_BLOCK: usize = 4096;

/// Whether `bytes` are all zero. Folds 64 bytes at a time without an early exit, which
/// the compiler turns into vector instructions; data that is not zero usually fails on
/// the first 64 bytes.
pub fn is_zero(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(64);
    for chunk in &mut chunks {
        if chunk.iter().fold(0u8, |acc, b| acc | b) != 0 {
            return false;
        }
    }
    chunks.remainder().iter().all(|b| *b == 0)
}

/// Copies `from` to EOF into `file` starting at `offset`, through `buf`, leaving aligned
/// zero blocks unwritten. Returns the bytes consumed (written or skipped).
pub fn copy_with_holes(
    buf: &mut [u8],
    from: &mut dyn Read,
    file: &File,
    mut offset: u64,
    room: &mut Room,
) -> io::Result<u64> {
    let start = offset;
    loop {
        // Fill up to a block boundary of the file: a piece cut short by a read (the
        // decompressor's output does not line up with the file's blocks) would be written
        // as data, zeros and all, at every read.
        let misaligned = (offset % HOLE_BLOCK as u64) as usize;
        let want = if buf.len() > HOLE_BLOCK + misaligned {
            buf.len() - (buf.len() + misaligned) % HOLE_BLOCK
        } else {
            buf.len()
        };
        let n = fill(&mut buf[..want], from)?;
        if n == 0 {
            return Ok(offset - start);
        }
        write_with_holes(&buf[..n], file, offset, room)?;
        offset += n as u64;
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(buf: &mut [u8], from: &mut dyn Read) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match from.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Writes `data` at `offset`, skipping the aligned blocks that are all zero and writing
/// each run of the others with one call.
fn write_with_holes(data: &[u8], file: &File, offset: u64, room: &mut Room) -> io::Result<()> {
    let mut at = 0usize;
    // Where the pending run of data to write starts (None: nothing pending).
    let mut run: Option<usize> = None;
    while at < data.len() {
        let pos = offset + at as u64;
        // Up to the next block boundary of the file, so holes line up with its blocks.
        let to_boundary = HOLE_BLOCK - (pos % HOLE_BLOCK as u64) as usize;
        let end = (at + to_boundary).min(data.len());
        let whole_block = end - at == HOLE_BLOCK;
        if whole_block && is_zero(&data[at..end]) {
            if let Some(from) = run.take() {
                write_run(&data[from..at], file, offset + from as u64, room)?;
            }
        } else if run.is_none() {
            run = Some(at);
        }
        at = end;
    }
    if let Some(from) = run {
        write_run(&data[from..], file, offset + from as u64, room)?;
    }
    Ok(())
}

fn write_run(run: &[u8], file: &File, offset: u64, room: &mut Room) -> io::Result<()> {
    room.take(run.len() as u64)?;
    file.write_all_at(run, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn room(dir: &std::path::Path) -> Room {
        Room::new(dir, u64::MAX)
    }

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[]));
        assert!(is_zero(&[0; 4096]));
        let mut b = [0u8; 4096];
        b[4095] = 1;
        assert!(!is_zero(&b));
        b[4095] = 0;
        b[3] = 0x80;
        assert!(!is_zero(&b));
        assert!(!is_zero(&[0, 0, 1]));
    }

    #[test]
    fn zeros_become_holes_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // 8 MiB of zeros with a few bytes of data at odd offsets.
        let mut data = vec![0u8; 8 << 20];
        data[5] = 1;
        data[(3 << 20) + 4095] = 2;
        data[(8 << 20) - 1] = 3;
        let file = File::create_new(&path).unwrap();
        let mut r = room(dir.path());
        let mut buf = vec![0u8; 1 << 20];
        let n = copy_with_holes(&mut buf, &mut data.as_slice(), &file, 0, &mut r).unwrap();
        file.set_len(n).unwrap();
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let m = std::fs::metadata(&path).unwrap();
        assert!(
            m.blocks() * 512 <= 64 << 10,
            "{} bytes allocated for three blocks of data",
            m.blocks() * 512
        );
        assert_eq!(r.written(), 3 * 4096, "only the blocks holding data count");
    }

    /// Hands out its bytes `step` at a time, as a decompressor's reads come.
    struct Dribble<'a>(&'a [u8], usize);
    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Reads that do not line up with the file's blocks, and a start that does not either
    /// (a sparse run): the zeros still become holes (each odd read wrote a block of zeros
    /// before).
    #[test]
    fn odd_reads_and_offsets_still_leave_holes() {
        let dir = tempfile::tempdir().unwrap();
        for (start, step) in [(0u64, 130_001usize), (512, 131_072), (4096 * 3 + 7, 1000)] {
            let path = dir.path().join(format!("f{start}-{step}"));
            let data = vec![0u8; 16 << 20];
            let file = File::create_new(&path).unwrap();
            let mut r = room(dir.path());
            let mut buf = vec![0u8; 1 << 20];
            let n =
                copy_with_holes(&mut buf, &mut Dribble(&data, step), &file, start, &mut r).unwrap();
            assert_eq!(n, data.len() as u64);
            file.set_len(start + n).unwrap();
            assert!(
                r.written() <= 2 * 4096,
                "start {start}, reads of {step}: {} bytes of zeros written",
                r.written()
            );
        }
    }

    #[test]
    fn data_without_zero_blocks_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3_000_001u32).map(|i| (i % 251) as u8 | 1).collect();
        let file = File::create_new(&path).unwrap();
        let mut r = room(dir.path());
        let mut buf = vec![0u8; 65536 + 7];
        let n = copy_with_holes(&mut buf, &mut data.as_slice(), &file, 0, &mut r).unwrap();
        assert_eq!(n, data.len() as u64);
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        assert_eq!(r.written(), data.len() as u64);
    }
}
