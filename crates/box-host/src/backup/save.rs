//! The save pipeline: parts → one stream → OpenPGP encryptor (the bulk SEIPDv1 writer,
//! [`super::seipd`]) → 0600 temp file beside the destination, while a zstd decoder + tar
//! walker validates the members and SHA-256 runs over the plaintext (on a second thread,
//! fed through a bounded channel) — one pass. A third thread verifies as the file grows:
//! it follows the temp file, decrypts it with the bulk path (this process wrote it; files
//! from anywhere else go through sequoia) and hashes the plaintext (nothing written). [`Sealed::verify`] waits for it, compares the
//! hash, and checks the file on disk is still the one it decrypted; then
//! [`Verified::publish`] links it into place without ever replacing.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::archive::ArchiveError;
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex};
use box_proto::archive::validate::{self, Limits, Report};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

use super::channel::ChannelReader;
use super::cleanup::{self, Temp};
use super::follow::{self, Fingerprint, FollowReader, WriteProgress};
use super::progress::Progress;
use super::publish;
use super::seipd::{self, SeipdWriter};
use super::{BackupError, hex_sha};

const CHUNK: usize = 1 << 20;

/// Refuses an existing destination before any work (hermes-box.md §1.6 step 1).
pub fn check_destination(out: &Path) -> Result<()> {
    if std::fs::symlink_metadata(out).is_ok() {
        bail!("refusing to overwrite existing backup: {}", out.display());
    }
    Ok(())
}

/// A save in progress. Dropping it removes the temp file.
pub struct Pipeline {
    out: PathBuf,
    temp: Temp,
    writer: SeipdWriter,
    bytes: u64,
    tx: Option<SyncSender<Vec<u8>>>,
    validator: Option<JoinHandle<ValidatorResult>>,
    written: WriteProgress,
    verifier: Verifier,
    progress: Progress,
}

/// What the validator thread found: the report, and the SHA-256 of the plaintext it read
/// (hashed there, not on the encrypting thread, to spread the work over both cores).
type ValidatorResult = Result<(Report, [u8; 32]), ArchiveError>;

/// What the verifier thread found: the plaintext's SHA-256 and size, and what it read of
/// the encrypted file.
type VerifierResult = Result<([u8; 32], u64, Fingerprint), BackupError>;
type Verifier = JoinHandle<VerifierResult>;

/// The encrypted temp file, validated and hashed, not yet verified or published.
pub struct Sealed {
    out: PathBuf,
    temp: Temp,
    /// SHA-256 of the plaintext (the compressed tar stream).
    pub sha256: [u8; 32],
    /// Bytes of plaintext.
    pub plaintext_size: u64,
    pub report: Report,
    verifier: VerifierState,
}

enum VerifierState {
    Running(Verifier),
    Done(VerifierResult),
    Panicked,
}

/// A verified temp file, ready to publish.
pub struct Verified {
    sealed: Sealed,
}

/// A published backup.
#[derive(Debug, Clone)]
pub struct Published {
    pub path: PathBuf,
    /// Size of the encrypted file.
    pub size: u64,
    pub sha256: [u8; 32],
    pub report: Report,
}

impl Pipeline {
    /// Starts a save into `out`: refuses an existing `out`, creates its directory and the
    /// 0600 temp beside it, and starts the encryptor and the validator.
    pub fn begin(out: &Path, passphrase: &SecretString) -> Result<Self> {
        Self::begin_with_limits(out, passphrase, Limits::default())
    }

    pub fn begin_with_limits(
        out: &Path,
        passphrase: &SecretString,
        limits: Limits,
    ) -> Result<Self> {
        check_destination(out)?;
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create backup directory {}", dir.display()))?;
        let name = out
            .file_name()
            .ok_or_else(|| anyhow!("backup path {} has no file name", out.display()))?
            .to_string_lossy()
            .into_owned();
        let (temp, file) = Temp::create_file(&dir, &format!(".{name}.tmp-"))
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
        let follower = File::open(temp.path())
            .with_context(|| format!("cannot reopen {} to verify it", temp.path().display()))?;
        let writer = SeipdWriter::new(file, passphrase)?;
        let (written, follower) = follow::follow(follower);
        let verifier = spawn_verifier(follower, temp.path(), passphrase)?;
        let (tx, rx) = sync_channel::<Vec<u8>>(4);
        let validator = std::thread::Builder::new()
            .name("box-validate".into())
            .spawn(move || {
                let mut hashing = HashingReader {
                    inner: ChannelReader::new(rx, false),
                    hasher: Sha256::new(),
                    bytes: 0,
                };
                let report = validate::validate(&mut hashing, &limits)?;
                // The validator stops at the end of the archive; hash what follows too, so
                // the hash covers every byte that was encrypted.
                io::copy(&mut hashing, &mut io::sink())
                    .map_err(|e| ArchiveError::Invalid(format!("cannot read the stream: {e}")))?;
                Ok((report, hashing.hasher.finalize().into()))
            })
            .context("cannot start the validator thread")?;
        Ok(Pipeline {
            out: out.to_path_buf(),
            temp,
            writer,
            bytes: 0,
            tx: Some(tx),
            validator: Some(validator),
            written,
            verifier,
            progress: Progress::new("encrypting"),
        })
    }

    fn validator_error(&mut self) -> anyhow::Error {
        self.tx.take();
        match self.validator.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => anyhow!("generated archive failed validation: {e}"),
            Some(Ok(Ok(_))) => anyhow!("the validator stopped early"),
            Some(Err(_)) => anyhow!("the validator thread panicked"),
            None => anyhow!("the validator already stopped"),
        }
    }

    /// Streams plaintext bytes into the backup. Returns how many were read.
    pub fn feed(&mut self, mut reader: impl Read) -> Result<u64> {
        let mut total = 0u64;
        loop {
            cleanup::check()?;
            let mut chunk = vec![0u8; CHUNK];
            let n = match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("cannot read backup data"),
            };
            chunk.truncate(n);
            self.writer
                .write_all(&chunk)
                .context("cannot write the encrypted backup")?;
            let sent = self.tx.as_ref().map(|tx| tx.send(chunk));
            if !matches!(sent, Some(Ok(()))) {
                return Err(self.validator_error());
            }
            self.written.advanced();
            self.bytes += n as u64;
            total += n as u64;
            self.progress.add(n as u64);
        }
        Ok(total)
    }

    /// Streams one part file; with `expected`, its size and SHA-256 must match (the part
    /// index, or the export's announcement of the part), or the save fails.
    pub fn feed_part(&mut self, path: &Path, expected: Option<&Part>) -> Result<()> {
        let file =
            File::open(path).with_context(|| format!("cannot open part {}", path.display()))?;
        let mut hashing = HashingReader {
            inner: file,
            hasher: Sha256::new(),
            bytes: 0,
        };
        self.feed(&mut hashing)?;
        if let Some(part) = expected {
            let got: [u8; 32] = hashing.hasher.finalize().into();
            if hashing.bytes != part.size || got != part.sha256 {
                bail!(
                    "part {} is not what hb export listed for it (size {} vs {}, SHA-256 {} vs {}); nothing was published, retry the save",
                    path.display(),
                    hashing.bytes,
                    part.size,
                    hex_sha(&got),
                    hex_sha(&part.sha256)
                );
            }
        }
        Ok(())
    }

    /// Feeds every part listed in `<dir>/parts.index`, checking each and the total.
    pub fn feed_parts_dir(&mut self, dir: &Path) -> Result<PartIndex> {
        let index = read_index(dir)?;
        for part in &index.parts {
            self.feed_part(&dir.join(&part.name), Some(part))?;
        }
        Ok(index)
    }

    /// Ends encryption (fsync) and validation; returns the sealed temp file.
    pub fn finish(mut self) -> Result<Sealed> {
        self.tx.take();
        let (report, sha256) = match self.validator.take().map(|h| h.join()) {
            Some(Ok(Ok(found))) => found,
            Some(Ok(Err(e))) => bail!("generated archive failed validation: {e}"),
            _ => bail!("the validator thread failed"),
        };
        self.progress.done();
        self.writer.finish()?;
        self.written.complete();
        Ok(Sealed {
            out: self.out,
            temp: self.temp,
            sha256,
            plaintext_size: self.bytes,
            report,
            verifier: VerifierState::Running(self.verifier),
        })
    }
}

struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Reads and parses `<dir>/parts.index`.
pub fn read_index(dir: &Path) -> Result<PartIndex> {
    let path = dir.join(INDEX_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read part index {}", path.display()))?;
    PartIndex::parse(&text).with_context(|| format!("bad part index {}", path.display()))
}

/// Starts the thread that decrypts the temp file as it is written and hashes the plaintext.
fn spawn_verifier(
    follower: FollowReader,
    temp: &Path,
    passphrase: &SecretString,
) -> Result<Verifier> {
    let what = temp.display().to_string();
    let passphrase = passphrase.clone();
    std::thread::Builder::new()
        .name("box-verify".into())
        .spawn(move || -> VerifierResult {
            let tally = follower.tally();
            // The bulk path: this is the file we are writing, never someone else's.
            let (sha, bytes) = seipd::verify_own(follower, &what, &passphrase, |_| {})?;
            Ok((sha, bytes, tally.fingerprint()))
        })
        .context("cannot start the verifier thread")
}

impl Sealed {
    /// The verification pass: wait for the verifier (which decrypted the temp file as it
    /// was written, MDC checked at EOF), compare its plaintext hash, and check the file on
    /// disk is byte for byte the one it decrypted. Writes no plaintext.
    pub fn verify(mut self) -> Result<Verified> {
        let fail = |e: &dyn std::fmt::Display| anyhow!("encrypted backup verification failed: {e}");
        self.wait_for_verifier();
        let (sha, size, read) = match &self.verifier {
            VerifierState::Done(Ok(found)) => *found,
            VerifierState::Done(Err(e)) => return Err(fail(e)),
            VerifierState::Running(_) | VerifierState::Panicked => {
                return Err(fail(&"the verifier thread panicked"));
            }
        };
        // The plaintext was validated member by member while it was encrypted; an equal
        // SHA-256 over what decrypted proves the file held exactly those bytes.
        if sha != self.sha256 || size != self.plaintext_size {
            return Err(fail(&BackupError::Changed {
                first: hex_sha(&self.sha256),
                second: hex_sha(&sha),
            }));
        }
        let on_disk = follow::fingerprint_file(self.temp.path())
            .with_context(|| format!("cannot re-read {}", self.temp.path().display()))?;
        if on_disk != read {
            return Err(fail(
                &"the encrypted file changed on disk after it was decrypted",
            ));
        }
        Ok(Verified { sealed: self })
    }

    fn wait_for_verifier(&mut self) {
        self.verifier = match std::mem::replace(&mut self.verifier, VerifierState::Panicked) {
            VerifierState::Running(handle) => handle
                .join()
                .map_or(VerifierState::Panicked, VerifierState::Done),
            done => done,
        };
    }

    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }
}

impl Verified {
    /// Links the verified temp to its destination (never replacing), then removes the temp.
    pub fn publish(self) -> Result<Published> {
        let Sealed {
            out,
            temp,
            sha256,
            report,
            ..
        } = self.sealed;
        let size = std::fs::metadata(temp.path())?.len();
        let linked = cleanup::with_lock(|reg| -> io::Result<()> {
            publish::link_noreplace(temp.path(), &out)?;
            let _ = std::fs::remove_file(temp.path());
            reg.forget(temp.id());
            Ok(())
        });
        match linked {
            Ok(()) => temp.disarm(),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                bail!("backup destination appeared during save: {}", out.display())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot publish {}", out.display())),
        }
        if let Some(dir) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            let _ = publish::sync_dir(dir);
        }
        Ok(Published {
            path: out,
            size,
            sha256,
            report,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sealed(dir: &Path, pass: &SecretString) -> Sealed {
        let mut tar = tar::Builder::new(Vec::new());
        for dir in ["./", "./home/", "./home/agent/"] {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            header.set_cksum();
            tar.append_data(&mut header, dir, io::empty()).unwrap();
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(5);
        header.set_mode(0o600);
        header.set_cksum();
        tar.append_data(&mut header, "./home/agent/note", &b"hello"[..])
            .unwrap();
        let plain = zstd::encode_all(&tar.into_inner().unwrap()[..], 3).unwrap();
        let mut pipeline = Pipeline::begin(&dir.join("a.tar.zst.gpg"), pass).unwrap();
        pipeline.feed(&plain[..]).unwrap();
        pipeline.finish().unwrap()
    }

    #[test]
    fn a_file_changed_after_the_verifier_read_it_is_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let pass = SecretString::from("pass");
        let mut sealed = sealed(dir.path(), &pass);
        sealed.wait_for_verifier();
        assert!(matches!(sealed.verifier, VerifierState::Done(Ok(_))));
        let temp = sealed.temp_path().to_path_buf();
        let mut bytes = std::fs::read(&temp).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&temp, bytes).unwrap();
        let err = format!("{:#}", sealed.verify().err().unwrap());
        assert!(err.contains("changed on disk"), "{err}");
        assert!(!dir.path().join("a.tar.zst.gpg").exists());
    }

    #[test]
    fn an_unchanged_file_verifies_and_publishes() {
        let dir = tempfile::tempdir().unwrap();
        let pass = SecretString::from("pass");
        let published = sealed(dir.path(), &pass)
            .verify()
            .unwrap()
            .publish()
            .unwrap();
        assert_eq!(
            published.size,
            std::fs::metadata(dir.path().join("a.tar.zst.gpg"))
                .unwrap()
                .len()
        );
    }
}
