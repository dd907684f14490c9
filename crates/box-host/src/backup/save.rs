//! The save pipeline: parts → one stream → OpenPGP encryptor (the bulk SEIPDv1 writer,
//! [`super::seipd`]) → an unnamed 0600 file in the destination's directory (a named temp
//! where the system has none: `super::unpublished`), hashed in segments of the
//! part size on the way ([`super::segments`]: each part's check), while a zstd decoder +
//! tar walker validates the members (on a second thread, fed through a bounded channel) —
//! one pass. A third thread verifies as the file grows: it follows the temp file and
//! decrypts it with the bulk path (this process wrote it; files from anywhere else go
//! through sequoia), recomputing the MDC (nothing written). [`Sealed::verify`] waits for
//! it, compares its MDC digest and size with the writer's, and (for a named temp, which
//! another process could open) checks the file on disk is still the one it decrypted;
//! then [`Verified::publish`] links it into place without ever replacing.
//!
//! Why the MDC and not a second SHA-256 over the plaintext: the writer's digest covers
//! its own random prefix and every byte it encrypted, so a verifier that recomputes the
//! same digest from the file has decrypted exactly those bytes — a flipped byte, a cut or
//! another backup swapped in cannot match. The part hash on the way in stays (XXH3-128
//! from a current `hb`, SHA-256 from an older one): it is what checks each part against
//! `hb export`. (One hash pass fewer over the whole backup.)

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::archive::ArchiveError;
use box_proto::archive::chain_line::ChainSaid;
use box_proto::archive::chain_state::ChainState;
use box_proto::archive::part_hash::{PartHash, PartHasher};
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex};
use box_proto::archive::validate::{self, Limits, Report};
use secrecy::SecretString;

use super::BackupError;
use super::chain::Place;
use super::channel::{ChannelReader, HashingReader};
use super::cleanup;
use super::follow::{self, Fingerprint, FollowReader, WriteProgress};
use super::host_facts::HostFacts;
use super::publish;
use super::segments::SegmentHasher;
use super::seipd::{self, MdcDigest, OwnPlaintext, SeipdWriter};
use super::unpublished::{Created, TempKind, Unpublished};
use crate::ui::progress::Phase;

const CHUNK: usize = 1 << 20;

/// Refuses an existing destination before any work, in the seed's words
/// (docs/backup-format.md, "Names and publishing").
pub fn check_destination(out: &Path) -> Result<()> {
    if std::fs::symlink_metadata(out).is_ok() {
        bail!("refusing to overwrite existing backup: {}", out.display());
    }
    Ok(())
}

/// What a save seals into its backup before the first byte of the guest's stream
/// ([`super::host_facts`]): the facts, with the chain place still to be fixed by what the
/// export says it makes ([`Pipeline::chain_said`]).
#[derive(Debug, Clone)]
pub struct SealPlan {
    /// The facts; their `place` is set when they are sealed.
    pub facts: HostFacts,
    pub chain: ChainIntent,
}

/// What this save asked `hb export` for.
#[derive(Debug, Clone, Copy)]
pub enum ChainIntent {
    /// No chain (an `hb` without chain mode): the export must not say it makes one.
    Outside,
    /// Chain mode: a full backup, or the next link on this parent (its digest and its
    /// position in its chain) when there is one.
    InChain { parent: Option<([u8; 32], u32)> },
}

impl SealPlan {
    /// Where the backup sits, from what the export said: only what this save asked for.
    fn place(&self, said: Option<ChainSaid>) -> Result<Option<Place>> {
        let place = match (self.chain, said) {
            (ChainIntent::Outside, None) => None,
            (ChainIntent::InChain { .. }, Some(ChainSaid::Full)) => Some(Place {
                link: 0,
                parent: None,
            }),
            (
                ChainIntent::InChain {
                    parent: Some((digest, at)),
                },
                Some(ChainSaid::Link(n)),
            ) if Some(n) == at.checked_add(1) => Some(Place {
                link: n,
                parent: Some(digest),
            }),
            (ChainIntent::InChain { .. }, None) => bail!(
                "hb export did not say whether it makes a full backup or a link; nothing was published, retry the save"
            ),
            (intent, Some(said)) => bail!(
                "hb export said it makes {said:?}, which is not what this save asked for ({intent:?}); nothing was published, retry the save"
            ),
        };
        Ok(place)
    }
}

/// The seal of a save in progress.
enum Seal {
    /// Not written yet: what the export said of its chain so far.
    Pending {
        plan: SealPlan,
        said: Option<ChainSaid>,
    },
    /// Written: the facts, and how many bytes they took.
    Written { facts: HostFacts, len: u64 },
    /// No host facts (the engine driven without a box: tests, the bench).
    None,
}

/// A save in progress. Dropping it removes the temp file.
pub struct Pipeline {
    out: PathBuf,
    temp: Unpublished,
    writer: SeipdWriter,
    seal: Seal,
    bytes: u64,
    segments: SegmentHasher,
    /// A part shorter than the part size was fed: it must have been the last.
    short_part_fed: bool,
    tx: Option<SyncSender<Vec<u8>>>,
    validator: Option<JoinHandle<ValidatorResult>>,
    written: WriteProgress,
    verifier: Verifier,
    progress: Phase,
}

/// What the validator thread found: the report, and the tree a restore of this backup
/// builds (what the next link of its chain is checked against).
type ValidatorResult = Result<(Report, ChainState), ArchiveError>;

/// The archive a save produced breaks a rule a restore holds it to: nothing is published.
/// A caller tells a link that does not fit its chain ([`GeneratedInvalid::misfits_chain`])
/// from the rest.
#[derive(Debug)]
pub struct GeneratedInvalid(pub ArchiveError);

impl std::fmt::Display for GeneratedInvalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "generated archive failed validation: {}", self.0)
    }
}

impl std::error::Error for GeneratedInvalid {}

impl GeneratedInvalid {
    /// Whether the archive is an incremental link that does not fit the tree of the
    /// backup it builds on (a restore would refuse it): a full save would not have this.
    pub fn misfits_chain(e: &anyhow::Error) -> bool {
        e.chain().any(|cause| {
            cause
                .downcast_ref::<GeneratedInvalid>()
                .is_some_and(|g| g.0.rule() == Some(validate::Rule::IncrementalLink))
        })
    }
}

/// What the verifier thread found: the MDC's digest and the plaintext's size, and what it
/// read of the encrypted file (a fingerprint of a named temp, and the file's SHA-256).
type VerifierResult = Result<(OwnPlaintext, Option<Fingerprint>, [u8; 32]), BackupError>;
type Verifier = JoinHandle<VerifierResult>;

/// The encrypted temp file, validated and hashed, not yet verified or published.
pub struct Sealed {
    out: PathBuf,
    temp: Unpublished,
    /// The hash of each segment of the plaintext (the compressed tar stream): of each part
    /// in a save in parts (with the part's algorithm), the SHA-256 of the whole stream
    /// otherwise.
    pub segments: Vec<PartHash>,
    segment_size: u64,
    /// The host facts sealed before the stream (`None`: none were asked for).
    pub facts: Option<HostFacts>,
    /// Their bytes, before the stream's.
    seal_len: u64,
    /// Bytes of plaintext: the stream's (the part index's total).
    pub plaintext_size: u64,
    /// The MDC digest the writer sealed the file with.
    mdc: MdcDigest,
    pub report: Report,
    /// The tree a restore of this backup builds (empty for one outside a chain).
    pub tree: ChainState,
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
    digest: [u8; 32],
}

/// A published backup.
#[derive(Debug, Clone)]
pub struct Published {
    pub path: PathBuf,
    /// Size of the encrypted file.
    pub size: u64,
    /// SHA-256 of the encrypted file as verified (what a chain names it by).
    pub digest: [u8; 32],
    pub report: Report,
    /// The tree a restore of it builds.
    pub tree: ChainState,
    /// The host facts sealed into it.
    pub facts: Option<HostFacts>,
}

impl Pipeline {
    /// Starts a save into `out`: refuses an existing `out`, creates its directory and the
    /// 0600 temp beside it, and starts the encryptor and the validator. The plaintext is
    /// hashed as one stream.
    pub fn begin(out: &Path, passphrase: &SecretString) -> Result<Self> {
        Self::begin_with_limits(out, passphrase, Limits::default(), u64::MAX, None)
    }

    /// [`Self::begin`] into a named temp whatever the system offers: the path macOS takes,
    /// for tests that change the temp behind the verifier's back.
    pub fn begin_named_temp(out: &Path, passphrase: &SecretString) -> Result<Self> {
        Self::begin_with(
            out,
            passphrase,
            Limits::default(),
            u64::MAX,
            None,
            TempKind::Named,
        )
    }

    /// [`Self::begin`] for plaintext fed in parts of `part_size` bytes (all but the last):
    /// each part is checked with the same hash pass the verification uses.
    pub fn begin_in_parts(out: &Path, passphrase: &SecretString, part_size: u64) -> Result<Self> {
        Self::begin_with_limits(out, passphrase, Limits::default(), part_size, None)
    }

    /// [`Self::begin_in_parts`] for a backup that may be an incremental link on the backup
    /// whose tree is `prior`: validated against that tree as every restore will validate
    /// it, so a link a restore would refuse is never published.
    pub fn begin_link(
        out: &Path,
        passphrase: &SecretString,
        part_size: u64,
        prior: Option<ChainState>,
    ) -> Result<Self> {
        Self::begin_with_limits(out, passphrase, Limits::default(), part_size, prior)
    }

    pub fn begin_with_limits(
        out: &Path,
        passphrase: &SecretString,
        limits: Limits,
        segment_size: u64,
        prior: Option<ChainState>,
    ) -> Result<Self> {
        Self::begin_with(out, passphrase, limits, segment_size, prior, TempKind::Best)
    }

    fn begin_with(
        out: &Path,
        passphrase: &SecretString,
        limits: Limits,
        segment_size: u64,
        prior: Option<ChainState>,
        kind: TempKind,
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
        let Created {
            unpublished: temp,
            writer,
            follower,
        } = Unpublished::create(&dir, &name, kind)
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
        let writer = SeipdWriter::new(writer, passphrase).map_err(|e| cannot_write(out, e))?;
        let afterwards = if temp.named_path().is_some() {
            follow::Afterwards::ReadAgain
        } else {
            follow::Afterwards::NotReadAgain
        };
        let (written, follower) = follow::follow(follower, afterwards);
        let verifier = spawn_verifier(follower, out, passphrase)?;
        let (tx, rx) = sync_channel::<Vec<u8>>(4);
        let validator = std::thread::Builder::new()
            .name("box-validate".into())
            .spawn(move || {
                let mut reader = ChannelReader::new(rx, false);
                // An incremental link keeps files of the backups before it: checked against
                // the tree they build, strictly (a restore would refuse what it lacks).
                let prior = prior.map(|p| std::rc::Rc::new(p.strict()));
                let found = validate::validate_link(&mut reader, &limits, prior)?;
                // The validator stops at the end of the archive; take what follows too, so
                // the encrypting side never waits on a full channel.
                io::copy(&mut reader, &mut io::sink())
                    .map_err(|e| ArchiveError::Invalid(format!("cannot read the stream: {e}")))?;
                Ok(found)
            })
            .context("cannot start the validator thread")?;
        Ok(Pipeline {
            out: out.to_path_buf(),
            temp,
            writer,
            seal: Seal::None,
            bytes: 0,
            segments: SegmentHasher::new(segment_size),
            short_part_fed: false,
            tx: Some(tx),
            validator: Some(validator),
            written,
            verifier,
            progress: Phase::start("encrypting", None),
        })
    }

    /// Seals `plan`'s facts into the backup before the first byte of the stream (`box
    /// save` always does; without, the backup has no host facts, as before box sealed them).
    pub fn seal_with(&mut self, plan: SealPlan) -> Result<()> {
        if self.bytes > 0 || !matches!(self.seal, Seal::None) {
            bail!("the host facts go before anything else");
        }
        self.seal = Seal::Pending { plan, said: None };
        Ok(())
    }

    /// What the export said it makes (its one chain line, before any part).
    pub fn chain_said(&mut self, said: ChainSaid) -> Result<()> {
        match &mut self.seal {
            Seal::Pending {
                said: slot @ None, ..
            } => {
                *slot = Some(said);
                Ok(())
            }
            Seal::Pending { .. } => {
                bail!("hb export said twice what it makes; nothing was published, retry the save")
            }
            Seal::Written { .. } => bail!(
                "hb export said what it makes after its first part; nothing was published, retry the save"
            ),
            Seal::None => Ok(()),
        }
    }

    /// Writes the pending seal (once, before the stream's first byte).
    fn write_seal(&mut self) -> Result<()> {
        let Seal::Pending { plan, said } = &self.seal else {
            return Ok(());
        };
        let mut facts = plan.facts.clone();
        facts.place = plan.place(*said)?;
        let frame = facts.seal(self.writer.seal_key())?;
        self.writer
            .write_all(&frame)
            .map_err(|e| cannot_write(&self.out, e.into()))?;
        self.seal = Seal::Written {
            facts,
            len: frame.len() as u64,
        };
        Ok(())
    }

    fn validator_error(&mut self) -> anyhow::Error {
        self.tx.take();
        match self.validator.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => anyhow::Error::new(GeneratedInvalid(e)),
            Some(Ok(Ok(_))) => anyhow!("the validator stopped early"),
            Some(Err(_)) => anyhow!("the validator thread panicked"),
            None => anyhow!("the validator already stopped"),
        }
    }

    /// Streams plaintext bytes into the backup. Returns how many were read.
    pub fn feed(&mut self, mut reader: impl Read) -> Result<u64> {
        self.write_seal()?;
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
            self.segments.update(&chunk);
            self.writer
                .write_all(&chunk)
                .map_err(|e| cannot_write(&self.out, e.into()))?;
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

    /// Streams one part file; with `expected`, its size and hash must match (the part
    /// index, or the export's announcement of the part), or the save fails. In a save in
    /// parts, every part but the last has the part size.
    pub fn feed_part(&mut self, path: &Path, expected: Option<&Part>) -> Result<()> {
        let file =
            File::open(path).with_context(|| format!("cannot open part {}", path.display()))?;
        let Some(part) = expected else {
            self.feed(file)?;
            return Ok(());
        };
        let segment = self.segments.segment_size();
        if segment == u64::MAX {
            // One stream: the part needs a hash of its own.
            let hasher = PartHasher::new(part.hash.algorithm());
            let mut hashing = HashingReader::with(file, hasher);
            self.feed(&mut hashing)?;
            let (got, bytes) = hashing.finish_part();
            return check_part(path, part, bytes, &got);
        }
        if self.short_part_fed
            || !self.segments.hash_next_with(part.hash.algorithm())
            || part.size > segment
        {
            bail!(
                "part {} is {} bytes where box asked for parts of {segment} (only the last may be shorter); nothing was published, retry the save",
                path.display(),
                part.size
            );
        }
        let fed = self.feed(file)?;
        if fed < segment {
            // The last part: its segment ends here.
            self.segments.cut();
            self.short_part_fed = true;
        }
        match (fed, self.segments.last()) {
            (1.., Some(got)) => check_part(path, part, fed, got),
            // Nothing arrived: the size alone says it is not the part.
            _ => check_part(path, part, fed, &PartHash::of(part.hash.algorithm(), &[])),
        }
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
        self.write_seal()?;
        self.tx.take();
        let (report, tree) = match self.validator.take().map(|h| h.join()) {
            Some(Ok(Ok(found))) => found,
            Some(Ok(Err(e))) => return Err(anyhow::Error::new(GeneratedInvalid(e))),
            _ => bail!("the validator thread failed"),
        };
        self.progress.finish();
        let (_, mdc) = self
            .writer
            .finish()
            .map_err(|e| cannot_write(&self.out, e))?;
        self.written.complete();
        let segment_size = self.segments.segment_size();
        let segments = self.segments.finish();
        let (facts, seal_len) = match self.seal {
            Seal::Written { facts, len } => (Some(facts), len),
            _ => (None, 0),
        };
        Ok(Sealed {
            out: self.out,
            temp: self.temp,
            segments,
            segment_size,
            facts,
            seal_len,
            plaintext_size: self.bytes,
            mdc,
            report,
            tree,
            verifier: VerifierState::Running(self.verifier),
        })
    }
}

/// A failed write of the backup file into `out`'s directory: said with the directory (the
/// file has no name yet), and on a full disk what to do about it.
fn cannot_write(out: &Path, e: anyhow::Error) -> anyhow::Error {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let full = e.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::StorageFull)
    });
    let hint = if full {
        " (nothing was published; free space there, then save again)"
    } else {
        ""
    };
    e.context(format!(
        "cannot write the encrypted backup into {}{hint}",
        dir.display()
    ))
}

/// A part's size and hash against what the export said of it.
fn check_part(path: &Path, part: &Part, size: u64, got: &PartHash) -> Result<()> {
    if size != part.size || *got != part.hash {
        bail!(
            "part {} is not what hb export listed for it (size {} vs {}, {got} vs {}); nothing was published, retry the save",
            path.display(),
            size,
            part.size,
            part.hash
        );
    }
    Ok(())
}

/// Reads and parses `<dir>/parts.index`.
pub fn read_index(dir: &Path) -> Result<PartIndex> {
    let path = dir.join(INDEX_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read part index {}", path.display()))?;
    PartIndex::parse(&text).with_context(|| format!("bad part index {}", path.display()))
}

/// Starts the thread that decrypts the temp file as it is written, recomputing its MDC.
fn spawn_verifier(
    follower: FollowReader,
    out: &Path,
    passphrase: &SecretString,
) -> Result<Verifier> {
    let what = format!("the new backup {}", out.display());
    let passphrase = passphrase.clone();
    std::thread::Builder::new()
        .name("box-verify".into())
        .spawn(move || -> VerifierResult {
            let tally = follower.tally();
            // The bulk path: this is the file we are writing, never someone else's.
            let found = seipd::verify_own(follower, &what, &passphrase, |_| {})?;
            Ok((found, tally.fingerprint(), tally.sha256()))
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
        let (found, read, digest) = match &self.verifier {
            VerifierState::Done(Ok(found)) => *found,
            VerifierState::Done(Err(e)) => return Err(fail(e)),
            VerifierState::Running(_) | VerifierState::Panicked => {
                return Err(fail(&"the verifier thread panicked"));
            }
        };
        // The plaintext was validated member by member and checked part by part while it
        // was encrypted; the writer's own MDC digest recomputed over what decrypted proves
        // the file holds exactly those bytes (see the module's comment).
        let written = self.seal_len + self.plaintext_size;
        if found.mdc != self.mdc || found.bytes != written {
            // (No digests in the message: they are hashes of the plaintext.)
            return Err(fail(&format!(
                "the file does not decrypt to what was encrypted ({} bytes decrypted, {} written, {})",
                found.bytes,
                written,
                if found.mdc == self.mdc {
                    "same MDC"
                } else {
                    "another MDC"
                }
            )));
        }
        // A named temp could have been changed since the verifier read it; an unnamed
        // file has no path anything else could open it by ([`super::unpublished`]).
        if let Some(path) = self.temp.named_path() {
            let on_disk = follow::fingerprint_file(path)
                .with_context(|| format!("cannot re-read {}", path.display()))?;
            if Some(on_disk) != read {
                return Err(fail(
                    &"the encrypted file changed on disk after it was decrypted",
                ));
            }
        }
        Ok(Verified {
            sealed: self,
            digest,
        })
    }

    fn wait_for_verifier(&mut self) {
        self.verifier = match std::mem::replace(&mut self.verifier, VerifierState::Panicked) {
            VerifierState::Running(handle) => handle
                .join()
                .map_or(VerifierState::Panicked, VerifierState::Done),
            done => done,
        };
    }

    /// The named temp's path (`None` for an unnamed file).
    pub fn temp_path(&self) -> Option<&Path> {
        self.temp.named_path()
    }

    /// What was encrypted must be exactly the export `index` describes: its parts, in
    /// order (each hashed as it was encrypted), and its size.
    pub fn matches_index(&self, index: &PartIndex) -> Result<()> {
        let listed: Vec<PartHash> = if self.segment_size == u64::MAX {
            // Hashed as one stream: only an index with the whole stream's hash can match.
            index
                .total_sha256
                .map(PartHash::Sha256)
                .into_iter()
                .collect()
        } else {
            index.parts.iter().map(|p| p.hash).collect()
        };
        if self.segments != listed || self.plaintext_size != index.total_size {
            bail!(
                "the parts do not add up to the export (index: {} part(s), {} bytes; received: {} segment(s), {} bytes); nothing was published, retry the save",
                index.parts.len(),
                index.total_size,
                self.segments.len(),
                self.plaintext_size
            );
        }
        Ok(())
    }
}

impl Verified {
    /// Links the verified temp to its destination (never replacing), then removes the temp.
    pub fn publish(self) -> Result<Published> {
        let digest = self.digest;
        let Sealed {
            out,
            temp,
            report,
            tree,
            facts,
            ..
        } = self.sealed;
        let size = temp.size()?;
        match temp.publish(&out) {
            Ok(()) => {}
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
            digest,
            report,
            tree,
            facts,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sealed(dir: &Path, pass: &SecretString) -> Sealed {
        sealed_in(dir, pass, TempKind::Best)
    }

    fn sealed_in(dir: &Path, pass: &SecretString, kind: TempKind) -> Sealed {
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
        let mut pipeline = Pipeline::begin_with(
            &dir.join("a.tar.zst.gpg"),
            pass,
            Limits::default(),
            u64::MAX,
            None,
            kind,
        )
        .unwrap();
        pipeline.feed(&plain[..]).unwrap();
        pipeline.finish().unwrap()
    }

    #[test]
    fn a_file_changed_after_the_verifier_read_it_is_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let pass = SecretString::from("pass");
        let mut sealed = sealed_in(dir.path(), &pass, TempKind::Named);
        sealed.wait_for_verifier();
        assert!(matches!(sealed.verifier, VerifierState::Done(Ok(_))));
        let temp = sealed.temp_path().unwrap().to_path_buf();
        let mut bytes = std::fs::read(&temp).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&temp, bytes).unwrap();
        let err = format!("{:#}", sealed.verify().err().unwrap());
        assert!(err.contains("changed on disk"), "{err}");
        assert!(!dir.path().join("a.tar.zst.gpg").exists());
    }

    #[test]
    fn another_encryption_of_the_same_data_does_not_verify() {
        // The verifier found a valid backup of the very same plaintext, under the same
        // passphrase, but not the one this save wrote (as if it had been swapped in before
        // the verifier read it): sizes agree, the file on disk is unchanged since, and
        // only the writer's MDC digest tells them apart.
        let (dir, other_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let pass = SecretString::from("pass");
        let mut ours = sealed(dir.path(), &pass);
        ours.wait_for_verifier();
        let other = sealed_in(other_dir.path(), &pass, TempKind::Named);
        let theirs = seipd::verify_own(
            File::open(other.temp_path().unwrap()).unwrap(),
            "other",
            &pass,
            |_| {},
        )
        .unwrap();
        let VerifierState::Done(Ok((found, _, _))) = &mut ours.verifier else {
            panic!("the verifier failed on a good file");
        };
        assert_eq!(found.bytes, theirs.bytes);
        *found = theirs;
        let err = format!("{:#}", ours.verify().err().unwrap());
        assert!(
            err.contains("does not decrypt to what was encrypted"),
            "{err}"
        );
        assert!(!dir.path().join("a.tar.zst.gpg").exists());
    }

    #[test]
    fn an_unchanged_file_verifies_and_publishes() {
        for kind in [TempKind::Best, TempKind::Named] {
            an_unchanged_file_verifies_and_publishes_from(kind);
        }
    }

    fn an_unchanged_file_verifies_and_publishes_from(kind: TempKind) {
        let dir = tempfile::tempdir().unwrap();
        let pass = SecretString::from("pass");
        let sealed = sealed_in(dir.path(), &pass, kind);
        let listed = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(
            listed,
            usize::from(sealed.temp_path().is_some()),
            "{kind:?}: only a named temp shows in the directory before publishing"
        );
        let published = sealed.verify().unwrap().publish().unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "{kind:?}: the backup alone"
        );
        assert_eq!(
            published.size,
            std::fs::metadata(dir.path().join("a.tar.zst.gpg"))
                .unwrap()
                .len()
        );
        assert_eq!(
            published.digest,
            super::super::chain::file_digest(&dir.path().join("a.tar.zst.gpg")).unwrap(),
            "the digest the verifier took is the published file's"
        );
    }
}
