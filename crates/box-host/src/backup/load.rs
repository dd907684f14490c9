//! The load side. Pass 1 ([`validate_backup`]): decrypt, validate every member, hash the
//! plaintext — nothing written. Pass 2: decrypt again and either hand out parts
//! ([`write_parts`], for `box load`) or unpack into a private staging dir ([`extract`], for
//! `box extract`); the plaintext hash must equal pass 1's, and nothing leaves the staging
//! area before the OpenPGP MDC has been checked at EOF.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::RuntimeManifest;
use box_proto::archive::chain_state::ChainState;
use box_proto::archive::part_hash::{PartHashAlgo, PartHasher};
use box_proto::archive::parts::{Part, PartIndex, part_name};
use box_proto::archive::unpack::Unpacker;
use box_proto::archive::validate::{self, Limits, Report, WalkError};
use box_proto::manifest::{CHAIN_LINK_KEY, CHAIN_PARENT_KEY};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

use super::chain::{FileState, Link, Place};
use super::channel::{ChannelReader, HashingReader};
use super::cleanup::{self, Temp};
use super::crypto::{DecryptReader, DecryptStatus};
use super::host_facts::Sealing;
use super::{BackupError, envelope, hex_sha, publish};
use crate::ui::progress::Phase;

/// What pass 1 learned about a backup.
#[derive(Debug, Clone)]
pub struct ValidatedBackup {
    pub path: PathBuf,
    /// SHA-256 of the plaintext (the compressed tar stream).
    pub sha256: [u8; 32],
    /// Bytes of plaintext.
    pub plaintext_size: u64,
    /// Bytes of the encrypted file.
    pub file_size: u64,
    pub report: Report,
    /// The runtime manifest inside, when present and parseable.
    pub manifest: Option<RuntimeManifest>,
    /// Why the manifest could not be read, when it is present but bad.
    pub manifest_error: Option<String>,
    /// The host facts box sealed into it (its policy, versions and chain place), or why
    /// there are none.
    pub sealing: Sealing,
}

impl ValidatedBackup {
    /// Where it sits in its chain: as box sealed it; from the runtime manifest (which the
    /// guest wrote, and which the save that made it checked) for a backup made before box
    /// sealed its facts.
    pub fn place(&self) -> Option<Place> {
        match &self.sealing {
            Sealing::Sealed(facts) => facts.place,
            _ => self.manifest.as_ref().and_then(place_in),
        }
    }
}

/// How many plaintext bytes the decrypt thread handed on, set only once it reached an
/// authenticated EOF.
type Finished = std::sync::Arc<std::sync::Mutex<Option<u64>>>;

fn take_finished(finished: &Finished) -> Option<u64> {
    *finished.lock().unwrap_or_else(|e| e.into_inner())
}

/// The decrypted plaintext arrives from a decrypt thread (which also shows progress)
/// through a bounded channel, so decryption and decompression + validation run on two
/// cores. The plaintext's SHA-256 is taken on the consuming side (see
/// [`decrypt_validate`]), which had the lighter load while sequoia decrypted box's own
/// files too (they now go to the bulk reader; sequoia still reads foreign ones).
/// The byte count is published only when the thread reached an authenticated EOF.
fn open_tapped(
    path: &Path,
    passphrase: &SecretString,
    label: &'static str,
) -> Result<(ChannelReader, DecryptStatus, Finished, Sealing), BackupError> {
    let mut reader = DecryptReader::open(path, passphrase)?;
    let status = reader.status();
    let sealing = reader.sealing().clone();
    let size = std::fs::metadata(path).ok().map(|m| m.len());
    let finished: Finished = Default::default();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
    let result = finished.clone();
    std::thread::Builder::new()
        .name("box-decrypt".into())
        .spawn(move || {
            let mut bytes = 0u64;
            let mut progress = Phase::start(label, size);
            loop {
                if cleanup::check().is_err() {
                    return;
                }
                let mut chunk = vec![0u8; 1 << 20];
                let n = match reader.read(&mut chunk) {
                    Ok(n) => n,
                    // Recorded in the status by the reader; closing the channel tells the
                    // consumer the stream ended.
                    Err(_) => return,
                };
                if n == 0 {
                    progress.finish();
                    *result.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
                    return;
                }
                chunk.truncate(n);
                bytes += n as u64;
                progress.add(n as u64);
                if tx.send(chunk).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| BackupError::Io(format!("cannot start the decrypt thread: {e}")))?;
    Ok((ChannelReader::new(rx, true), status, finished, sealing))
}

/// What pass 1 found in one backup file.
struct Pass1 {
    /// SHA-256 and size of the archive (the plaintext after the host facts).
    sha256: [u8; 32],
    size: u64,
    report: Report,
    /// The tree after it (a chain's next link is checked against it).
    state: ChainState,
    sealing: Sealing,
}

/// Decrypts and validates `path` (a link of a chain, after the tree the links before it
/// built) without writing anything.
fn decrypt_validate_link(
    path: &Path,
    passphrase: &SecretString,
    label: &'static str,
    prior: Option<Rc<ChainState>>,
) -> Result<Pass1, BackupError> {
    let (tap, status, finished, sealing) = open_tapped(path, passphrase, label)?;
    let mut hashed = HashingReader::new(tap);
    let (report, state) = match validate::validate_link(&mut hashed, &Limits::default(), prior) {
        Ok(walked) => walked,
        Err(e) => {
            // The decrypt thread may not have reached the integrity check yet (it runs
            // ahead of the walk only as far as the channel holds): read on to it, so a
            // damaged file is said to be damaged, not an archive that breaks a rule.
            let _ = io::copy(&mut hashed, &mut io::sink());
            return Err(BackupError::from_archive(e, &status));
        }
    };
    let (sha256, size) = finish_tap(hashed, &status, &finished)?;
    Ok(Pass1 {
        sha256,
        size,
        report,
        state,
        sealing,
    })
}

/// Where `path` says it sits in a chain: its sealed host facts (its first bytes), or, for
/// a backup made before box sealed them, its runtime manifest, read by decrypting only as
/// far as it (nothing validated yet, and the MDC not reached: [`validate_chain`] checks the
/// same place again once every link passed every rule). `None`: it has no chain place (a
/// backup from before chains).
///
/// A file it cannot read that far is read on to its integrity check: damaged or cut, it is
/// that error, never a full backup (a save would build a link on a tip no restore takes; a
/// chain found from it would leave out the links before it). Whole and authentic but no
/// valid archive, it is said to be no link (`None`): its validation, which comes next,
/// names the rule it breaks.
pub fn peek_place(path: &Path, passphrase: &SecretString) -> Result<Option<Place>> {
    let mut reader = DecryptReader::open(path, passphrase)?;
    if let Sealing::Sealed(facts) = reader.sealing() {
        return Ok(facts.place);
    }
    let status = reader.status();
    let manifest = match validate::peek_manifest(&mut reader, &Limits::default()) {
        Ok(manifest) => manifest,
        Err(unreadable) => {
            let rest = io::copy(&mut reader, &mut io::sink());
            if let Some(failure) = status.failure() {
                return Err(BackupError::Corrupt(failure).into());
            }
            rest.with_context(|| format!("cannot read {}", path.display()))?;
            if !reader.authenticated() {
                return Err(BackupError::from_archive(unreadable, &status).into());
            }
            return Ok(None);
        }
    };
    Ok(manifest
        .and_then(|bytes| RuntimeManifest::parse_bytes(&bytes).ok())
        .as_ref()
        .and_then(place_in))
}

/// The chain keys of a manifest; `None` when it has none (a backup from before chains).
pub(crate) fn place_in(manifest: &RuntimeManifest) -> Option<Place> {
    let link = manifest.get(CHAIN_LINK_KEY)?.parse().ok()?;
    let parent = match manifest.get(CHAIN_PARENT_KEY).unwrap_or("") {
        "" => None,
        hex_digest => {
            let mut d = [0u8; 32];
            hex::decode_to_slice(hex_digest, &mut d).ok()?;
            Some(d)
        }
    };
    Some(Place { link, parent })
}

/// Pass 1 over a chain (oldest first, as [`super::chain::discover_links`] gives it): each
/// link decrypted and validated after the tree the links before it built, its manifest's
/// parent equal to the digest of the link before it, and each file still the one that was
/// hashed (not hashed again: the file's identity, length and times tell). Nothing is
/// written.
pub fn validate_chain(links: &[Link], passphrase: &SecretString) -> Result<ValidatedChain> {
    let mut out = Vec::new();
    let mut prior: Option<Rc<ChainState>> = None;
    let mut parent: Option<[u8; 32]> = None;
    for (i, link) in links.iter().enumerate() {
        let path = &link.path;
        let file_size = std::fs::metadata(path)
            .with_context(|| format!("no such backup: {}", path.display()))?
            .len();
        let validated = decrypt_validate_link(path, passphrase, "decrypting", prior.clone());
        let mut pass1 = match validated {
            Ok(v) => v,
            // Named by the link refused (callers still tell the errors apart: a context
            // keeps the error under it).
            Err(e) => {
                return Err(anyhow::Error::from(e).context(FailedLink {
                    index: i,
                    alone: links.len() == 1,
                    path: path.clone(),
                }));
            }
        };
        let state = std::mem::take(&mut pass1.state);
        let validated = validated_backup(path, file_size, pass1);
        let says = validated.place().and_then(|p| p.parent);
        let changed = link
            .hashed
            .is_some_and(|hashed| FileState::at(path).ok() != Some(hashed));
        if changed {
            bail!("{} changed while it was being read; retry", path.display());
        }
        if links.len() > 1 && says != parent {
            bail!(
                "{} does not name the link before it in the chain as its parent: the chain changed while it was read; retry",
                path.display()
            );
        }
        // What the next link must name as its parent.
        parent = Some(link.digest);
        out.push((validated, prior.take()));
        prior = Some(Rc::new(state));
    }
    let tree = prior
        .map(|p| Rc::try_unwrap(p).unwrap_or_else(|shared| (*shared).clone()))
        .unwrap_or_default();
    Ok(ValidatedChain { links: out, tree })
}

/// Which link of a chain [`validate_chain`] refused: the context of its error, so a
/// caller that reports per file (`box backups check`) knows which one without reading the
/// message.
#[derive(Debug, Clone)]
pub struct FailedLink {
    /// 0 for the chain's full backup.
    pub index: usize,
    /// A backup restored alone (no chain): named by its file only.
    pub alone: bool,
    pub path: PathBuf,
}

impl std::fmt::Display for FailedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.alone {
            return write!(f, "{}", self.path.display());
        }
        write!(
            f,
            "link {} of the chain, {}",
            self.index + 1,
            self.path.display()
        )
    }
}

/// `e`, naming `path` unless its message already does: every refusal says which file it
/// is about (the error under the name is kept, so callers still tell errors apart).
pub fn naming(e: anyhow::Error, path: &Path) -> anyhow::Error {
    let name = path.display().to_string();
    if format!("{e:#}").contains(&name) {
        e
    } else {
        e.context(name)
    }
}

/// A chain that passed pass 1 ([`validate_chain`]).
#[derive(Debug)]
pub struct ValidatedChain {
    /// Each link, oldest first, with the tree the links before it built.
    pub links: Vec<(ValidatedBackup, Option<Rc<ChainState>>)>,
    /// The tree a restore of the whole chain builds.
    pub tree: ChainState,
}

impl ValidatedChain {
    /// What a restore of the chain leaves out, a sentence per link that keeps entries the
    /// links before it lack (written by a box that skipped some symlinks).
    pub fn warnings(&self) -> Vec<String> {
        self.links
            .iter()
            .filter_map(|(v, _)| {
                v.report
                    .kept_missing
                    .sentence()
                    .map(|s| format!("{}: {s}", v.path.display()))
            })
            .collect()
    }
}

/// What pass 1 learned, with the runtime manifest parsed.
fn validated_backup(path: &Path, file_size: u64, pass1: Pass1) -> ValidatedBackup {
    let Pass1 {
        sha256,
        size: plaintext_size,
        report,
        sealing,
        ..
    } = pass1;
    let (manifest, manifest_error) =
        match report.manifest.as_deref().map(RuntimeManifest::parse_bytes) {
            Some(Ok(m)) => (Some(m), None),
            Some(Err(e)) => (None, Some(e.to_string())),
            None => (None, None),
        };
    ValidatedBackup {
        path: path.to_path_buf(),
        sha256,
        plaintext_size,
        file_size,
        report,
        manifest,
        manifest_error,
        sealing,
    }
}

/// After a walk over a tapped stream: the SHA-256 and size of the whole plaintext, once
/// the decrypt thread reached an authenticated EOF and every byte it decrypted was hashed.
fn finish_tap(
    mut hashed: HashingReader<ChannelReader>,
    status: &DecryptStatus,
    finished: &Finished,
) -> Result<([u8; 32], u64), BackupError> {
    // The walk reads its input to the end; whatever it left is hashed too.
    io::copy(&mut hashed, &mut io::sink())
        .map_err(|e| BackupError::Corrupt(status.failure().unwrap_or_else(|| e.to_string())))?;
    if let Some(failure) = status.failure() {
        return Err(BackupError::Corrupt(failure));
    }
    let (sha, size) = hashed.finish();
    match take_finished(finished) {
        Some(decrypted) if decrypted == size => Ok((sha, size)),
        _ => Err(BackupError::Corrupt(
            "the decrypted stream did not reach its end".into(),
        )),
    }
}

/// Pass 1 of a load or an extract of one backup: decrypt, validate, hash. Writes nothing.
pub fn validate_backup(path: &Path, passphrase: &SecretString) -> Result<ValidatedBackup> {
    let file_size = std::fs::metadata(path)
        .with_context(|| format!("no such backup: {}", path.display()))?
        .len();
    let pass1 = decrypt_validate_link(path, passphrase, "decrypting", None)?;
    Ok(validated_backup(path, file_size, pass1))
}

/// Pass 2 of a load: decrypts `path` again into part files of `part_size` bytes in `dir`
/// (0600, registered for cleanup) and calls `on_part(path, part)` for each; the part file
/// is removed after the callback returns. The last part is handed out only after the MDC
/// checked out and the plaintext hash equals `expected` (pass 1). Parts handed out earlier
/// are unauthenticated until this returns `Ok`: the caller must not let the guest import
/// them before, which it cannot anyway without the index returned here. (`hb import
/// --follow` extracts them into its private stage as they come, and swaps nothing in
/// before the end marker, which box copies only after the index this returns.)
pub fn write_parts(
    path: &Path,
    passphrase: &SecretString,
    expected: &[u8; 32],
    part_size: u64,
    dir: &Path,
    mut on_part: impl FnMut(&Path, &Part) -> Result<()>,
) -> Result<PartIndex> {
    if part_size == 0 {
        bail!("part size must be positive");
    }
    // What is wrong with the backup's bytes names it (not a part's copy into the box).
    let named = |e: BackupError| naming(e.into(), path);
    let mut reader = DecryptReader::open(path, passphrase).map_err(named)?;
    let mut head = [0u8; 4];
    let mut total = Sha256::new();
    let mut parts = Vec::new();
    let mut pending: Option<(Temp, Part)> = None;
    let mut buf = vec![0u8; 1 << 20];
    let mut progress = Phase::start("decrypting", std::fs::metadata(path).ok().map(|m| m.len()));
    let mut size_total = 0u64;
    let mut eof = false;
    while !eof {
        let (temp, mut file) = Temp::create_file(dir, ".box-part-")
            .with_context(|| format!("cannot create a part file in {}", dir.display()))?;
        // XXH3-128: `hb import` checks the copy with it, and the `hb` of a box being
        // loaded into is always this box's own (installed as the box is made).
        let mut hasher = PartHasher::new(PartHashAlgo::Xxh3_128);
        let mut written = 0u64;
        while written < part_size {
            cleanup::check()?;
            let want = (part_size - written).min(buf.len() as u64) as usize;
            let n = reader.read(&mut buf[..want]).map_err(|e| {
                named(BackupError::Corrupt(
                    reader.status().failure().unwrap_or_else(|| e.to_string()),
                ))
            })?;
            if n == 0 {
                eof = true;
                break;
            }
            if size_total < 4 {
                let take = (4 - size_total as usize).min(n);
                head[size_total as usize..size_total as usize + take].copy_from_slice(&buf[..take]);
            }
            file.write_all(&buf[..n])
                .context("cannot write a part file")?;
            hasher.update(&buf[..n]);
            total.update(&buf[..n]);
            written += n as u64;
            size_total += n as u64;
            progress.add(n as u64);
        }
        if written == 0 {
            break;
        }
        // Not synced: the part is read back (copied into the box) from the page cache
        // and removed within seconds; an fsync only put the plaintext on the disk.
        drop(file);
        let part = Part {
            name: part_name(parts.len() + usize::from(pending.is_some())),
            size: written,
            hash: hasher.finish(),
        };
        if let Some((t, p)) = pending.take() {
            on_part(t.path(), &p)?;
            parts.push(p);
            drop(t);
        }
        pending = Some((temp, part));
    }
    progress.finish();
    if !reader.authenticated() {
        return Err(named(BackupError::Corrupt(
            "the OpenPGP message did not end cleanly".into(),
        )));
    }
    let sha: [u8; 32] = total.finalize().into();
    if &sha != expected {
        return Err(named(BackupError::Changed {
            first: hex_sha(expected),
            second: hex_sha(&sha),
        }));
    }
    if let Some((t, p)) = pending.take() {
        on_part(t.path(), &p)?;
        parts.push(p);
        drop(t);
    }
    let compression = box_proto::archive::compress::sniff(&head)
        .ok_or_else(|| named(BackupError::NotArchive("neither zstd nor gzip data".into())))?;
    Ok(PartIndex {
        compression,
        total_size: size_total,
        total_sha256: Some(sha),
        parts,
    })
}

/// What [`extract`] did.
#[derive(Debug, Clone)]
pub struct Extracted {
    pub dir: PathBuf,
    pub files: u64,
    pub members: u64,
}

/// Pass 2 of `box extract`: decrypts again, re-validates every member as it goes, unpacks
/// into a fresh 0700 staging dir beside `target` (no same-owner, no set-id bits), and
/// after EOF (MDC checked) and a hash equal to pass 1 renames the staging dir to
/// `target`, never replacing it. Any failure or signal removes the staging dir.
pub fn extract(
    validated: &ValidatedBackup,
    passphrase: &SecretString,
    target: &Path,
) -> Result<Extracted> {
    extract_chain(&[(validated.clone(), None)], passphrase, target)
}

/// [`extract`] of a chain validated by [`validate_chain`]: every link applied in order into
/// the same staging dir, each checked against its pass 1 as it goes.
pub fn extract_chain(
    links: &[(ValidatedBackup, Option<Rc<ChainState>>)],
    passphrase: &SecretString,
    target: &Path,
) -> Result<Extracted> {
    if std::fs::symlink_metadata(target).is_ok() {
        bail!(
            "refusing to overwrite existing directory: {}",
            target.display()
        );
    }
    let parent = super::chain::dir_of(target);
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let name = target
        .file_name()
        .ok_or_else(|| anyhow!("target {} has no name", target.display()))?
        .to_string_lossy()
        .into_owned();
    let stage = Temp::create_dir(&parent, &format!(".{name}.extract-"))
        .with_context(|| format!("cannot create a staging directory in {}", parent.display()))?;
    // As root, set-id bits would make root-owned set-id programs on the host out of a
    // backup: files lose them (a user's own files keep them, as `tar -xp` keeps them).
    // The target keeps the mode the user's own `mkdir` gives, whatever the archive's root
    // says (a hostile 0777 root must not leave it world-writable).
    let as_root = nix::unistd::geteuid().is_root();
    let mut unpacker = Unpacker::new(stage.path())
        .set_id_files(!as_root)
        .archive_root_mode(false);
    let mut report = None;
    for (i, (validated, prior)) in links.iter().enumerate() {
        if i > 0 {
            unpacker.next_link();
        }
        // What is wrong with a backup's bytes names it.
        let named = |e: BackupError| naming(e.into(), &validated.path);
        let (tap, status, finished, _) =
            open_tapped(&validated.path, passphrase, "extracting").map_err(named)?;
        let mut hashed = HashingReader::new(tap);
        let walked = validate::walk_link(
            &mut hashed,
            &Limits::default(),
            prior.clone(),
            |entry, key| {
                cleanup::with_lock(|_| {
                    cleanup::check()?;
                    unpacker.unpack(entry, key)
                })
            },
        );
        let (walked, _) = match walked {
            Ok(done) => done,
            Err(WalkError::Archive(e)) => return Err(named(BackupError::from_archive(e, &status))),
            Err(WalkError::Callback(e)) => {
                if let Some(failure) = status.failure() {
                    return Err(named(BackupError::Corrupt(failure)));
                }
                return Err(anyhow!(
                    "cannot extract {} into {}: {e}",
                    validated.path.display(),
                    stage.path().display()
                ));
            }
        };
        let (sha, _) = finish_tap(hashed, &status, &finished).map_err(named)?;
        if sha != validated.sha256 {
            return Err(named(BackupError::Changed {
                first: hex_sha(&validated.sha256),
                second: hex_sha(&sha),
            }));
        }
        report = Some(walked);
    }
    let Some(report) = report else {
        bail!("nothing to extract");
    };
    cleanup::with_lock(|_| unpacker.finish())
        .with_context(|| format!("cannot finish extracting into {}", stage.path().display()))?;
    let own_mode = new_dir_mode(&parent)?;
    std::fs::set_permissions(stage.path(), std::fs::Permissions::from_mode(own_mode))
        .with_context(|| format!("cannot set the mode of {}", stage.path().display()))?;
    let promoted = cleanup::with_lock(|reg| -> io::Result<()> {
        publish::rename_noreplace(stage.path(), target)?;
        reg.forget(stage.id());
        Ok(())
    });
    match promoted {
        Ok(()) => stage.disarm(),
        Err(e)
            if e.kind() == io::ErrorKind::AlreadyExists
                || e.raw_os_error() == Some(libc::ENOTEMPTY) =>
        {
            bail!(
                "refusing to overwrite existing directory: {}",
                target.display()
            )
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot move the extraction to {}", target.display()));
        }
    }
    let _ = publish::sync_dir(&parent);
    Ok(Extracted {
        dir: target.to_path_buf(),
        files: report.files,
        members: report.members,
    })
}

/// Checks the file exists, is a regular file, is not in an OpenPGP envelope box refuses
/// (AEAD packet 20, a weak cipher, no MDC) and does not end inside its first packets, with
/// a clear error otherwise: before the passphrase is asked for and anything is locked or
/// created.
pub fn check_backup_file(path: &Path) -> Result<()> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("no such backup: {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let mut file =
        File::open(path).with_context(|| format!("cannot read backup {}", path.display()))?;
    let head = envelope::read_head(&mut file)
        .with_context(|| format!("cannot read backup {}", path.display()))?;
    match envelope::inspect(&head) {
        Some(envelope::Verdict::Refuse(refusal)) => {
            Err(BackupError::Unsupported(envelope::Unsupported {
                file: path.display().to_string(),
                refusal,
            })
            .into())
        }
        Some(envelope::Verdict::Truncated(what)) => {
            Err(naming(BackupError::Corrupt(what).into(), path))
        }
        None => Ok(()),
    }
}

/// The mode a directory made by this user here gets (0777 less the umask), read from a
/// probe directory: asking the umask means setting it, which other threads would see.
fn new_dir_mode(parent: &Path) -> Result<u32> {
    let probe = parent.join(format!(".box-mode-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).with_context(|| format!("cannot create {}", probe.display()))?;
    let mode = std::fs::metadata(&probe).map(|m| m.permissions().mode() & 0o7777);
    let _ = std::fs::remove_dir(&probe);
    mode.with_context(|| format!("cannot read the mode of {}", probe.display()))
}
