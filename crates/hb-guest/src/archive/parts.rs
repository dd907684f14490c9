//! Splitting a stream into part files of a set size, with the part index
//! (box_proto::archive::parts), and reading them back as one stream.
//!
//! A part is written as `.part-NNNNNN.partial` and renamed to `part-NNNNNN` once it is
//! complete and synced, so a reader never sees half a part under a part's name. With
//! [`Announce`], each finished part is also announced on a stream (stdout: box reads it
//! while the export goes on) and the writer holds back: it starts a new part only while
//! fewer than `max_pending` announced parts are still in the directory — the reader
//! removes each one it has copied. That bounds the plaintext in the guest to
//! `max_pending + 1` parts, whatever the size of the data.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::compress::Compression;
use box_proto::archive::part_hash::{PartHashAlgo, PartHasher};
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex, part_name};
use sha2::{Digest, Sha256};

/// How often a held-back writer looks whether the reader took a part.
const ROOM_POLL: Duration = Duration::from_millis(5);
/// How often a held-back writer says it is waiting: a line on the announcement stream
/// that fails once the reader is gone (box killed: the broken pipe ends this export, in
/// smolvm through the exec client's death) instead of waiting out its patience.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// The keepalive line; readers ignore it.
pub const WAITING: &str = "part-wait";

/// Announcing finished parts to a reader that takes (removes) them.
pub struct Announce {
    /// Where the `part-ready` lines go.
    pub out: Box<dyn Write + Send>,
    /// Announced parts that may still be in the directory when a new part starts.
    pub max_pending: usize,
    /// Give up when the reader takes no part for this long (it is gone or stuck).
    pub patience: Duration,
}

/// A writer that cuts its input into `part-NNNNNN` files of `part_size` bytes (0600) in a
/// new 0700 directory.
pub struct PartWriter {
    dir: PathBuf,
    part_size: u64,
    /// What each part is hashed with (SHA-256 unless box asked for XXH3-128).
    part_hash: PartHashAlgo,
    current: Option<(File, PartHasher, u64)>,
    parts: Vec<Part>,
    /// The whole stream's hash: for the index of an export that is read back as a whole
    /// (`hb export` without `--stream-parts`). A streamed export's reader checks each
    /// part and never reads it, so it is not taken (one SHA-256 pass fewer).
    total: Option<Sha256>,
    total_size: u64,
    announce: Option<Announce>,
    /// Announced parts the reader may not have taken yet, oldest first.
    pending: VecDeque<String>,
}

fn partial_name(name: &str) -> String {
    format!(".{name}.partial")
}

impl PartWriter {
    /// Creates `dir` (0700; it must not exist).
    pub fn create(dir: &Path, part_size: u64) -> Result<Self> {
        if part_size == 0 {
            bail!("--part-size must be at least 1 byte");
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .with_context(|| {
                format!(
                    "cannot create export directory {} (it must not exist)",
                    dir.display()
                )
            })?;
        Ok(PartWriter {
            dir: dir.to_path_buf(),
            part_size,
            part_hash: PartHashAlgo::default(),
            current: None,
            parts: Vec::new(),
            total: Some(Sha256::new()),
            total_size: 0,
            announce: None,
            pending: VecDeque::new(),
        })
    }

    /// Hash each part with `algo`.
    pub fn hashing(mut self, algo: PartHashAlgo) -> Self {
        self.part_hash = algo;
        self
    }

    /// Announce every finished part and hold back as [`Announce`] says. The index then
    /// lists no whole-stream hash.
    pub fn announcing(mut self, announce: Announce) -> Self {
        self.announce = Some(announce);
        self.total = None;
        self
    }

    /// Completes the current part: sync, rename to its name, announce.
    ///
    /// A streamed part is not synced: its reader (box, through smolvm's agent) reads it
    /// from the page cache seconds later and removes it, and a guest that crashes before
    /// that fails the save whatever is on disk. The rename after the last write is what
    /// keeps a reader from ever seeing half a part. An fsync per part would make the
    /// export wait for the disk — in a VM, for the host's disk image — while box writes
    /// the backup, which is where the overlap's time went in `just bench`.
    fn close_current(&mut self) -> io::Result<()> {
        if let Some((file, hasher, size)) = self.current.take() {
            if self.announce.is_none() {
                file.sync_all()?;
            }
            drop(file);
            let part = Part {
                name: part_name(self.parts.len()),
                size,
                hash: hasher.finish(),
            };
            fs::rename(
                self.dir.join(partial_name(&part.name)),
                self.dir.join(&part.name),
            )?;
            if self.announce.is_none() {
                File::open(&self.dir)?.sync_all()?;
            }
            if let Some(a) = self.announce.as_mut() {
                writeln!(a.out, "{}", part.render_ready())?;
                a.out.flush()?;
                self.pending.push_back(part.name.clone());
            }
            self.parts.push(part);
        }
        Ok(())
    }

    /// Waits until fewer than `max_pending` announced parts are left in the directory.
    fn wait_for_room(&mut self) -> io::Result<()> {
        let Some(a) = self.announce.as_mut() else {
            return Ok(());
        };
        let since = Instant::now();
        let mut said = Instant::now();
        loop {
            let dir = &self.dir;
            self.pending
                .retain(|name| fs::symlink_metadata(dir.join(name)).is_ok());
            if self.pending.len() < a.max_pending.max(1) {
                return Ok(());
            }
            if said.elapsed() >= KEEPALIVE {
                said = Instant::now();
                writeln!(a.out, "{WAITING} {}", self.pending.len())?;
                a.out.flush()?;
            }
            if since.elapsed() > a.patience {
                return Err(io::Error::other(format!(
                    "the reader took none of the announced parts for {}s ({} waiting in {}); is box still running?",
                    a.patience.as_secs(),
                    self.pending.len(),
                    self.dir.display()
                )));
            }
            std::thread::sleep(ROOM_POLL);
        }
    }

    /// Closes the last part and writes the index (temp + rename). Returns it.
    pub fn finish(mut self, compression: Compression) -> Result<PartIndex> {
        if let Err(e) = self.close_current() {
            return Err(self.disk_full(e).into());
        }
        let index = PartIndex {
            compression,
            total_size: self.total_size,
            total_sha256: self.total.take().map(|t| t.finalize().into()),
            parts: std::mem::take(&mut self.parts),
        };
        let tmp = self.dir.join(format!(".{INDEX_FILE}.tmp"));
        {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(index.render().as_bytes())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(INDEX_FILE))?;
        File::open(&self.dir)?.sync_all()?;
        Ok(index)
    }
}

impl PartWriter {
    /// A full disk said as what it is: the parts' directory full, not the file being
    /// archived when it ran out (which is what the tar writer's caller names).
    fn disk_full(&self, e: io::Error) -> io::Error {
        let full = matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        );
        if !full {
            return e;
        }
        io::Error::new(
            e.kind(),
            format!(
                "the box's disk is full writing the export's parts into {} ({e}); free space \
                 in the box, then save again",
                self.dir.display()
            ),
        )
    }

    fn write_part(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.current.as_ref().is_some_and(|c| c.2 >= self.part_size) {
            self.close_current()?;
        }
        if self.current.is_none() {
            self.wait_for_room()?;
            let path = self.dir.join(partial_name(&part_name(self.parts.len())));
            let file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            self.current = Some((file, PartHasher::new(self.part_hash), 0));
        }
        let Some((file, hasher, size)) = self.current.as_mut() else {
            return Err(io::Error::other("no current part"));
        };
        let room = (self.part_size - *size).min(buf.len() as u64) as usize;
        let n = file.write(&buf[..room])?;
        hasher.update(&buf[..n]);
        *size += n as u64;
        if let Some(total) = self.total.as_mut() {
            total.update(&buf[..n]);
        }
        self.total_size += n as u64;
        Ok(n)
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_part(buf).map_err(|e| self.disk_full(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        let flushed = match self.current.as_mut() {
            Some((f, _, _)) => f.flush(),
            None => Ok(()),
        };
        flushed.map_err(|e| self.disk_full(e))
    }
}

/// Reads `<dir>/parts.index` and checks what needs no read of the data: every listed part
/// is a regular file (not a link) of the listed size. Their bytes are checked by
/// [`PartsReader`] as the import reads them (one hash pass, not one before and one
/// during), or all at once by [`check_parts`].
pub fn check_part_files(dir: &Path) -> Result<PartIndex> {
    let path = dir.join(INDEX_FILE);
    let text = fs::read_to_string(&path)
        .with_context(|| format!("cannot read part index {}", path.display()))?;
    let index =
        PartIndex::parse(&text).with_context(|| format!("bad part index {}", path.display()))?;
    for part in &index.parts {
        let p = dir.join(&part.name);
        let meta =
            fs::symlink_metadata(&p).with_context(|| format!("missing part {}", p.display()))?;
        if !meta.file_type().is_file() {
            bail!("part {} is not a regular file", p.display());
        }
        if meta.len() != part.size {
            bail!(
                "part {} has {} bytes, the index says {}",
                p.display(),
                meta.len(),
                part.size
            );
        }
    }
    Ok(index)
}

/// [`check_part_files`], then every part's bytes against its size and hash.
pub fn check_parts(dir: &Path) -> Result<PartIndex> {
    let index = check_part_files(dir)?;
    io::copy(&mut PartsReader::new(dir, &index), &mut io::sink())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(index)
}

pub(super) fn open_nofollow(p: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
}

/// The parts of an index read back as one stream. Each part is hashed as it is read and
/// checked against the index when it ends, before a byte of the next is handed out; the
/// stream's end is reported only after the last part passed. So a reader that reads to
/// the end has read exactly the indexed bytes, and one that stops early has read a damaged
/// part's bytes at most up to its end (an import extracts into a private stage it then
/// discards).
pub struct PartsReader {
    dir: PathBuf,
    parts: std::vec::IntoIter<Part>,
    current: Option<Reading>,
}

/// The part being read: its file, what the index says of it, and what was read so far.
pub(super) struct Reading {
    file: File,
    path: PathBuf,
    part: Part,
    hasher: PartHasher,
    read: u64,
}

impl Reading {
    /// Opens `part` in `dir` (never through a link).
    pub(super) fn open(dir: &Path, part: Part) -> io::Result<Self> {
        let path = dir.join(&part.name);
        Ok(Reading {
            file: open_nofollow(&path)?,
            path,
            hasher: PartHasher::new(part.hash.algorithm()),
            part,
            read: 0,
        })
    }

    /// The part being read.
    pub(super) fn part(&self) -> &Part {
        &self.part
    }

    /// Reads the next bytes of the part into `buf` (not empty): `Some(n)`, or `None` once
    /// the part ended and passed its check of size and hash.
    pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // Never past the listed size: a part that grew fails its check, its extra bytes
        // unread.
        let room = (self.part.size - self.read).min(buf.len() as u64) as usize;
        let n = if room == 0 {
            // Only the end of the file is left to see.
            let mut probe = [0u8; 1];
            self.file.read(&mut probe)?
        } else {
            self.file.read(&mut buf[..room])?
        };
        self.read += n as u64;
        if n == 0 || room == 0 {
            // It ended, or it goes on past its size.
            self.check()?;
            return Ok(None);
        }
        self.hasher.update(&buf[..n]);
        Ok(Some(n))
    }

    /// Reads the rest of the part, checking it: whether a reader that stopped early (its
    /// consumer failed) stopped in a part unlike its index.
    pub(super) fn check_rest(&mut self) -> io::Result<()> {
        let mut buf = vec![0u8; 1 << 16];
        while self.read(&mut buf)?.is_some() {}
        Ok(())
    }

    /// The finished part's size and hash against the index.
    fn check(&self) -> io::Result<()> {
        let path = self.path.display();
        if self.read != self.part.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "part {path} has {} bytes, the index says {}",
                    self.read, self.part.size
                ),
            ));
        }
        let got = self.hasher.clone().finish();
        if got != self.part.hash {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "part {path} does not match the index ({got}, expected {})",
                    self.part.hash
                ),
            ));
        }
        Ok(())
    }
}

impl PartsReader {
    pub fn new(dir: &Path, index: &PartIndex) -> Self {
        PartsReader {
            dir: dir.to_path_buf(),
            parts: index.parts.clone().into_iter(),
            current: None,
        }
    }
}

impl Read for PartsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let Some(reading) = self.current.as_mut() else {
                let Some(part) = self.parts.next() else {
                    return Ok(0);
                };
                self.current = Some(Reading::open(&self.dir, part)?);
                continue;
            };
            match reading.read(buf) {
                Ok(Some(n)) => return Ok(n),
                Ok(None) => self.current = None,
                Err(e) => {
                    self.current = None;
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use box_proto::archive::part_hash::PartHash;
    use std::sync::{Arc, Mutex};

    /// A `Write` the test can read while the writer owns it.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn parts(&self) -> Vec<Part> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .filter(|l| !l.starts_with(WAITING))
                .map(|l| Part::parse_ready(l).unwrap().unwrap())
                .collect()
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_part_gets_its_name_only_when_complete() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("x");
        let mut w = PartWriter::create(&dir, 10).unwrap();
        w.write_all(&[1u8; 15]).unwrap();
        // part 0 is complete only once part 1 starts; part 1 is still being written.
        w.write_all(&[2u8; 1]).unwrap();
        assert_eq!(names(&dir), [".part-000001.partial", "part-000000"]);
        let index = w.finish(Compression::Zstd).unwrap();
        assert_eq!(names(&dir), ["part-000000", "part-000001", INDEX_FILE]);
        assert_eq!(index.parts.len(), 2);
        assert_eq!(check_parts(&dir).unwrap(), index);
    }

    #[test]
    fn announces_each_part_and_waits_for_the_reader_to_take_it() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("x");
        let lines = Lines::default();
        // As box asks for it: XXH3-128 part hashes.
        let mut w = PartWriter::create(&dir, 4)
            .unwrap()
            .hashing(PartHashAlgo::Xxh3_128)
            .announcing(Announce {
                out: Box::new(lines.clone()),
                max_pending: 2,
                patience: Duration::from_secs(30),
            });
        let writer = std::thread::spawn(move || {
            w.write_all(&[7u8; 4 * 6 + 1]).unwrap();
            w.finish(Compression::Zstd).unwrap()
        });
        // Nobody takes anything: two announced parts, the third not even started; the
        // writer says it is waiting (a gone reader would break its stream).
        std::thread::sleep(Duration::from_millis(1300));
        let said = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(said.contains("\npart-wait 2\n"), "{said}");
        assert_eq!(lines.parts().len(), 2);
        assert!(!writer.is_finished());
        assert_eq!(names(&dir), ["part-000000", "part-000001"]);
        // The reader takes each announced part: the export goes on to the end, never
        // holding more than two announced parts plus the one in progress.
        let mut taken = 0;
        while taken < 7 {
            let ready = lines.parts();
            if ready.len() > taken {
                let on_disk = names(&dir)
                    .iter()
                    .filter(|n| n.starts_with("part-"))
                    .count();
                assert!(on_disk <= 2, "{:?}", names(&dir));
                let p = &ready[taken];
                let bytes = fs::read(dir.join(&p.name)).unwrap();
                assert_eq!(bytes.len() as u64, p.size);
                assert_eq!(PartHash::of(PartHashAlgo::Xxh3_128, &bytes), p.hash);
                fs::remove_file(dir.join(&p.name)).unwrap();
                taken += 1;
            } else {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let index = writer.join().unwrap();
        assert_eq!(index.parts, lines.parts());
        assert_eq!(index.parts.last().unwrap().size, 1);
        // Its reader checked every part: no whole-stream hash was taken or listed.
        assert_eq!(index.total_sha256, None);
        let text = fs::read_to_string(dir.join(INDEX_FILE)).unwrap();
        assert!(text.contains("\ntotal 25\n"), "{text}");
    }

    #[test]
    fn the_reader_fails_at_the_end_of_a_part_unlike_its_index_before_the_next() {
        for algo in [PartHashAlgo::Sha256, PartHashAlgo::Xxh3_128] {
            a_damaged_part_fails_at_its_end(algo);
        }
    }

    fn a_damaged_part_fails_at_its_end(algo: PartHashAlgo) {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("x");
        let mut w = PartWriter::create(&dir, 10).unwrap().hashing(algo);
        let data: Vec<u8> = (0..25u8).collect();
        w.write_all(&data).unwrap();
        let index = w.finish(Compression::Zstd).unwrap();
        assert!(index.parts.iter().all(|p| p.hash.algorithm() == algo));
        let read_all = |index: &PartIndex| {
            let mut got = Vec::new();
            let r = PartsReader::new(&dir, index).read_to_end(&mut got);
            (r, got)
        };
        let (r, got) = read_all(&index);
        r.unwrap();
        assert_eq!(got, data);

        // A flipped byte in the middle part: its bytes are read, then the error; nothing
        // of the last part is handed out.
        let middle = dir.join("part-000001");
        let mut bytes = fs::read(&middle).unwrap();
        bytes[3] ^= 1;
        fs::write(&middle, &bytes).unwrap();
        let (r, got) = read_all(&index);
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("part-000001 does not match the index"),
            "{err}"
        );
        assert_eq!(got.len(), 20, "read past the damaged part");
        assert!(check_parts(&dir).is_err());
        assert!(
            check_part_files(&dir).is_ok(),
            "metadata alone cannot see it"
        );

        // A part that grew after the metadata check: its extra bytes are never handed out.
        bytes[3] ^= 1;
        bytes.push(9);
        fs::write(&middle, &bytes).unwrap();
        let (r, got) = read_all(&index);
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("part-000001 has 11 bytes, the index says 10"),
            "{err}"
        );
        assert_eq!(got, data[..20]);
        // One that shrank.
        bytes.truncate(9);
        fs::write(&middle, &bytes).unwrap();
        let (r, _) = read_all(&index);
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("part-000001 has 9 bytes, the index says 10"),
            "{err}"
        );
    }

    #[test]
    fn a_reader_that_takes_nothing_fails_the_export_after_its_patience() {
        let d = tempfile::tempdir().unwrap();
        let mut w = PartWriter::create(&d.path().join("x"), 4)
            .unwrap()
            .announcing(Announce {
                out: Box::new(Lines::default()),
                max_pending: 1,
                patience: Duration::from_millis(50),
            });
        let err = w.write_all(&[0u8; 9]).unwrap_err();
        assert!(
            err.to_string().contains("took none of the announced parts"),
            "{err}"
        );
    }
}
