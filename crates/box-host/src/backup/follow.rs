//! Reading a file while another thread is still writing it: how save verifies the
//! encrypted backup during encryption instead of after it.
//!
//! The writer only ever appends (OpenPGP streams with partial body lengths, no seeking
//! back), so what a follower has read is always a prefix of the final file. Following a
//! named temp, the follower also fingerprints what it read; once the writer is done,
//! comparing that fingerprint with a fresh read of the finished file proves the verified
//! bytes are the bytes on disk (a later change or a swapped-in file would otherwise go
//! unnoticed). An unnamed file cannot be changed that way ([`super::unpublished`]) and is
//! never read again: the follower drops what it read from the page cache instead
//! ([`super::page_cache`]).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use xxhash_rust::xxh3::Xxh3;

use super::page_cache::DropBehind;

/// How long a follower sleeps at the end of the data before looking again, should a
/// wake-up from the writer be missed.
const RECHECK: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Writing,
    /// Everything is written and synced.
    Complete,
    /// The writer gave up: the file will never be complete.
    Abandoned,
}

/// The writer's side: say when bytes were appended and when the file is complete. Dropping
/// it before [`WriteProgress::complete`] abandons the file, so no follower waits forever.
pub(super) struct WriteProgress {
    shared: Arc<(Mutex<Phase>, Condvar)>,
}

/// Reads a file being written by the holder of the matching [`WriteProgress`]; EOF only
/// once the writer has completed it.
pub(super) struct FollowReader {
    file: File,
    shared: Arc<(Mutex<Phase>, Condvar)>,
    tally: ReadTally,
    /// Set when nothing reads the file again before it is published.
    behind: Option<DropBehind>,
}

/// Whether the file is read once more after the follower, before it is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Afterwards {
    /// A named temp: fingerprint what was read (to compare with the re-read), and leave it
    /// in the page cache for that re-read.
    ReadAgain,
    /// An unnamed file: no fingerprint, and what was read leaves the page cache.
    NotReadAgain,
}

/// What a [`FollowReader`] has read so far, readable after the reader itself was handed
/// to a decryptor that keeps it: its length, a fingerprint, and the SHA-256 a chain names
/// the file by (hashed here, on the verifier's thread while the save goes on, rather than
/// by reading the published file again). The fingerprint only for a file read again.
#[derive(Clone)]
pub(super) struct ReadTally(Arc<Mutex<(Option<Xxh3>, u64, Sha256)>>);

/// What a follower read: its length and a fingerprint of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    pub bytes: u64,
    pub xxh3: u128,
}

fn lock(shared: &(Mutex<Phase>, Condvar)) -> MutexGuard<'_, Phase> {
    shared.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// A follower of `file` (opened separately from the writer's handle) and the writer's
/// side of it.
pub(super) fn follow(file: File, afterwards: Afterwards) -> (WriteProgress, FollowReader) {
    let shared = Arc::new((Mutex::new(Phase::Writing), Condvar::new()));
    let read_again = afterwards == Afterwards::ReadAgain;
    (
        WriteProgress {
            shared: shared.clone(),
        },
        FollowReader {
            file,
            shared,
            tally: ReadTally(Arc::new(Mutex::new((
                read_again.then(Xxh3::new),
                0,
                Sha256::new(),
            )))),
            behind: (!read_again).then(DropBehind::behind_a_writer),
        },
    )
}

impl WriteProgress {
    /// Bytes were appended: wake the follower.
    pub fn advanced(&self) {
        self.shared.1.notify_all();
    }

    /// The file is complete and synced.
    pub fn complete(self) {
        self.finish(Phase::Complete);
    }

    fn finish(&self, phase: Phase) {
        let mut current = lock(&self.shared);
        if *current == Phase::Writing {
            *current = phase;
        }
        drop(current);
        self.shared.1.notify_all();
    }
}

impl Drop for WriteProgress {
    fn drop(&mut self) {
        self.finish(Phase::Abandoned);
    }
}

impl ReadTally {
    /// Length and fingerprint of everything read so far (`None` for a file not read
    /// again, [`Afterwards::NotReadAgain`]).
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        let tally = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let xxh3 = tally.0.as_ref()?.digest128();
        Some(Fingerprint {
            bytes: tally.1,
            xxh3,
        })
    }

    /// SHA-256 of everything read so far.
    pub fn sha256(&self) -> [u8; 32] {
        let tally = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tally.2.clone().finalize().into()
    }
}

impl FollowReader {
    pub fn tally(&self) -> ReadTally {
        self.tally.clone()
    }

    fn read_file(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        let mut tally = self.tally.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(xxh3) = tally.0.as_mut() {
            xxh3.update(&buf[..n]);
        }
        tally.1 += n as u64;
        tally.2.update(&buf[..n]);
        let read = tally.1;
        drop(tally);
        if let Some(behind) = self.behind.as_mut() {
            behind.read_up_to(&self.file, read);
        }
        Ok(n)
    }
}

impl Read for FollowReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let n = self.read_file(buf)?;
            if n > 0 {
                return Ok(n);
            }
            let phase = lock(&self.shared);
            match *phase {
                // Bytes written between our read and the completion are still to come:
                // one more read decides.
                Phase::Complete => {
                    drop(phase);
                    return self.read_file(buf);
                }
                Phase::Abandoned => {
                    return Err(io::Error::other("the backup was abandoned while written"));
                }
                Phase::Writing => {
                    let _ = self
                        .shared
                        .1
                        .wait_timeout(phase, RECHECK)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }
}

/// Reads `path` from the start and fingerprints it as a [`FollowReader`] would have.
pub(super) fn fingerprint_file(path: &Path) -> io::Result<Fingerprint> {
    let mut file = File::open(path)?;
    let mut hasher = Xxh3::new();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(Fingerprint {
        bytes,
        xxh3: hasher.digest128(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::io::Write;

    fn pair() -> (tempfile::TempDir, File, WriteProgress, FollowReader) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let writer = File::create(&path).unwrap();
        let (progress, reader) = follow(File::open(&path).unwrap(), Afterwards::ReadAgain);
        (dir, writer, progress, reader)
    }

    #[test]
    fn follower_reads_everything_written_before_and_after_it_caught_up() {
        let (dir, mut writer, progress, mut reader) = pair();
        let tally = reader.tally();
        let follower = std::thread::spawn(move || {
            let mut all = Vec::new();
            reader
                .read_to_end(&mut all)
                .map(|_| (all, reader.tally().fingerprint()))
        });
        for i in 0..50u8 {
            writer.write_all(&[i; 1000]).unwrap();
            progress.advanced();
            if i % 10 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        writer.sync_all().unwrap();
        progress.complete();
        let (all, fingerprint) = follower.join().unwrap().unwrap();
        let expected: Vec<u8> = (0..50u8).flat_map(|i| [i; 1000]).collect();
        assert_eq!(all, expected);
        assert_eq!(
            fingerprint,
            Some(fingerprint_file(&dir.path().join("f")).unwrap())
        );
        assert_eq!(
            tally.sha256(),
            <[u8; 32]>::from(Sha256::digest(&expected)),
            "the digest a chain names the file by"
        );
    }

    #[test]
    fn an_abandoned_file_is_an_error_not_an_eof() {
        let (_dir, mut writer, progress, mut reader) = pair();
        writer.write_all(b"partial").unwrap();
        let follower = std::thread::spawn(move || {
            let mut all = Vec::new();
            reader.read_to_end(&mut all)
        });
        std::thread::sleep(Duration::from_millis(30));
        drop(progress);
        let err = follower.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("abandoned"), "{err}");
    }

    #[test]
    fn a_change_after_the_follower_read_shows_in_the_fingerprint() {
        let (dir, mut writer, progress, mut reader) = pair();
        writer.write_all(b"hello world").unwrap();
        progress.complete();
        let mut all = Vec::new();
        reader.read_to_end(&mut all).unwrap();
        let path = dir.path().join("f");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_ne!(
            reader.tally().fingerprint(),
            Some(fingerprint_file(&path).unwrap())
        );
    }
}
