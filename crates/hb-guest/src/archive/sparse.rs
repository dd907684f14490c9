//! Sparse files in `hb export` (issue 13): a file with holes is archived as an old GNU
//! sparse member (`S`), which GNU tar and box's reader (box_proto::archive::tarread) both
//! extract with its holes, instead of its zeros written out in full.
//!
//! The map comes from `SEEK_DATA`/`SEEK_HOLE` (what the filesystem really keeps). Each data
//! run is stored padded to a block, as GNU tar stores and reads them; a trailing hole is
//! the entry `(size, 0)`, which is how GNU tar learns the real size. The header holds four
//! entries, extension blocks 21 each.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// Entries in the GNU header, and in each extension block.
const IN_HEADER: usize = 4;
const IN_EXTENSION: usize = 21;

/// Whether a file of `size` bytes with `blocks` 512-byte blocks allocated may have holes:
/// GNU tar's test (`ST_IS_SPARSE`: fewer blocks than its size needs). A file that has them
/// all is read whole without asking where its data is: three `lseek`s fewer per file,
/// which on a tree of small files is the walk's own time.
pub fn may_have_holes(size: u64, blocks: u64) -> bool {
    blocks.saturating_mul(512) < size
}

/// The data runs of `file` (`size` bytes long), when it has at least one hole.
pub fn data_map(file: &File, size: u64) -> Option<Vec<(u64, u64)>> {
    let fd = file.as_raw_fd();
    let end = i64::try_from(size).ok()?;
    let mut runs = Vec::new();
    let mut at: i64 = 0;
    while at < end {
        // SAFETY: lseek on a descriptor we hold; it only moves the file offset.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data after `at` (a trailing hole); anything else: not supported.
            if io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return None;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return None;
        }
        let hole = hole.min(end);
        if hole > data {
            runs.push((data as u64, (hole - data) as u64));
        }
        at = hole;
    }
    // SAFETY: as above; reading goes through read_at, but leave the offset at the start.
    unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
    let stored: u64 = runs.iter().map(|(_, n)| n).sum();
    if stored == size {
        return None;
    }
    Some(runs)
}

/// The stored bytes of a sparse member: `map` runs padded to blocks.
pub fn stored_size(map: &[(u64, u64)]) -> u64 {
    map.iter().map(|(_, n)| n.div_ceil(512) * 512).sum()
}

/// The map entries: the data runs, and `(size, 0)` for a trailing hole.
fn entries(map: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut entries = map.to_vec();
    if entries.last().is_none_or(|(o, n)| o + n < size) {
        entries.push((size, 0));
    }
    entries
}

/// Fills a GNU header's sparse fields (real size, the first four entries, the extension
/// flag) for the data runs `map` of a file of `size` bytes.
pub fn fill_header(header: &mut tar::Header, map: &[(u64, u64)], size: u64) -> io::Result<()> {
    let entries = entries(map, size);
    let gnu = header
        .as_gnu_mut()
        .ok_or_else(|| io::Error::other("not a GNU header"))?;
    gnu.set_real_size(size);
    for (slot, (o, n)) in gnu.sparse.iter_mut().zip(entries.iter()) {
        slot.set_offset(*o);
        slot.set_length(*n);
    }
    gnu.set_is_extended(entries.len() > IN_HEADER);
    Ok(())
}

/// The extension blocks that follow the header (before the data): the entries after the
/// first four, 21 a block.
pub fn extension_blocks(map: &[(u64, u64)], size: u64) -> Vec<u8> {
    let entries = entries(map, size);
    let rest: Vec<&[(u64, u64)]> = entries[IN_HEADER.min(entries.len())..]
        .chunks(IN_EXTENSION)
        .collect();
    let mut blocks = Vec::with_capacity(rest.len() * 512);
    for (i, chunk) in rest.iter().enumerate() {
        let mut ext = tar::GnuExtSparseHeader::new();
        for (slot, (o, n)) in ext.sparse.iter_mut().zip(chunk.iter()) {
            slot.set_offset(*o);
            slot.set_length(*n);
        }
        ext.set_is_extended(i + 1 < rest.len());
        blocks.extend_from_slice(ext.as_bytes());
    }
    blocks
}

/// Reads the extension blocks, then each run of the file padded to a block: exactly what
/// the header announces, even if the file shrinks meanwhile (zeros then).
pub struct Payload<'a> {
    file: &'a File,
    prefix: Vec<u8>,
    prefix_at: usize,
    map: Vec<(u64, u64)>,
    run: usize,
    done: u64,
}

impl<'a> Payload<'a> {
    pub fn new(file: &'a File, prefix: Vec<u8>, map: &[(u64, u64)]) -> Self {
        Payload {
            file,
            prefix,
            prefix_at: 0,
            map: map.to_vec(),
            run: 0,
            done: 0,
        }
    }
}

impl Read for Payload<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.prefix_at < self.prefix.len() {
            let n = buf.len().min(self.prefix.len() - self.prefix_at);
            buf[..n].copy_from_slice(&self.prefix[self.prefix_at..self.prefix_at + n]);
            self.prefix_at += n;
            return Ok(n);
        }
        while let Some(&(offset, len)) = self.map.get(self.run) {
            let padded = len.div_ceil(512) * 512;
            if self.done >= padded {
                self.run += 1;
                self.done = 0;
                continue;
            }
            if self.done < len {
                let want = buf.len().min((len - self.done) as usize);
                let n = self.file.read_at(&mut buf[..want], offset + self.done)?;
                if n == 0 {
                    // The file shrank: zeros, so the member stays the size announced.
                    buf[..want].fill(0);
                    self.done += want as u64;
                    return Ok(want);
                }
                self.done += n as u64;
                return Ok(n);
            }
            let want = buf.len().min((padded - self.done) as usize);
            buf[..want].fill(0);
            self.done += want as u64;
            return Ok(want);
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    fn may(file: &File) -> bool {
        let meta = file.metadata().unwrap();
        may_have_holes(meta.len(), meta.blocks())
    }

    #[test]
    fn only_a_file_short_of_blocks_is_asked_where_its_data_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut whole = File::create(dir.path().join("whole")).unwrap();
        whole.write_all(&[7u8; 20_000]).unwrap();
        whole.sync_all().unwrap();
        assert!(!may(&whole), "a file written whole has every block");

        let holed = File::create(dir.path().join("holed")).unwrap();
        holed.write_at(b"data", 1 << 20).unwrap();
        holed.set_len(4 << 20).unwrap();
        assert!(may(&holed), "a file with holes is short of blocks");
        let map = data_map(&holed, 4 << 20).expect("its holes are found");
        assert_eq!(map.len(), 1, "{map:?}");

        let empty = File::create(dir.path().join("empty")).unwrap();
        assert!(!may(&empty));
    }
}
