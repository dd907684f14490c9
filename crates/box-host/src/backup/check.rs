//! The engine of `box backups check`: whether the backups of one box in one directory
//! still restore, long after they were written, without writing anything anywhere.
//!
//! Two depths:
//! * [`Depth::Metadata`]: each file hashed once and compared with the SHA-256 (and size)
//!   the save that wrote or read it recorded ([`Known::recorded`](super::tree_cache::Known::recorded)), and each link's parent
//!   looked for by digest, as a restore looks for it. Where a link stands is the save's
//!   record; a file the saves did not record has its place read from its sealed host facts
//!   (the one thing that needs the passphrase here).
//! * [`Depth::ReadData`]: that, then every chain opened the one way
//!   ([`open_chain::find`], [`open_chain::FoundChain::validate`]): each link decrypted, its
//!   MDC checked, every member validated after the tree the links before it built, as
//!   `box load` does; a file no sound chain reaches is decrypted alone (its MDC).
//!
//! Then each backup is judged ([`judge`]): sound; damaged (its own file, or one it stands
//! on); or incomplete (a link it stands on is not there, named by the digest its child
//! records and, when a save recorded it, by its file name).
//!
//! Everything read here is the user's files: a damaged file is a finding, never an error
//! of the check; only what stops the check itself (no passphrase, an unreadable directory)
//! is.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use secrecy::SecretString;
use sha2::{Digest, Sha256};

use super::chain::{self, Link, Place};
use super::crypto::DecryptReader;
use super::load::{self, FailedLink};
use super::open_chain;
use super::tree_cache::Recorded;
use super::{BackupError, hex_sha};
use crate::ui::progress::Phase;

/// How deep the check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Metadata, one hash per file, the saves' records.
    Metadata,
    /// Every byte decrypted and validated as `box load` would.
    ReadData,
}

/// The passphrase, asked for once and only when something needs it: a check of files the
/// saves recorded, without `--read-data`, needs none.
pub struct Passphrase<'a> {
    ask: &'a dyn Fn() -> Result<SecretString>,
    got: std::cell::OnceCell<SecretString>,
}

impl<'a> Passphrase<'a> {
    /// Asked of `ask` the first time it is needed.
    pub fn asking(ask: &'a dyn Fn() -> Result<SecretString>) -> Self {
        Passphrase {
            ask,
            got: std::cell::OnceCell::new(),
        }
    }

    /// One already in hand (`box save --check`).
    pub fn given(pass: &SecretString) -> Passphrase<'static> {
        let got = std::cell::OnceCell::new();
        let _ = got.set(pass.clone());
        Passphrase {
            ask: &|| bail!("the passphrase was given"),
            got,
        }
    }

    fn get(&self) -> Result<&SecretString> {
        if let Some(pass) = self.got.get() {
            return Ok(pass);
        }
        let pass = (self.ask)()?;
        Ok(self.got.get_or_init(|| pass))
    }
}

/// One backup file as the check found it.
#[derive(Debug, Clone)]
pub struct FileFound {
    pub path: PathBuf,
    /// `YYYYmmdd-HHMMSS` from its name.
    pub stamp: String,
    pub size: u64,
    /// Its SHA-256 now (`None`: it could not be read).
    pub digest: Option<[u8; 32]>,
    /// What the save that wrote or read it recorded, when one did.
    pub recorded: Option<Recorded>,
    /// Where it sits in its chain: the save's record, else its sealed host facts.
    pub place: Option<Place>,
    /// What is wrong with the file itself; empty when nothing is.
    pub faults: Vec<String>,
    /// What else the user should know of it (what was and was not compared).
    pub notes: Vec<String>,
}

/// What a backup is found to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Sound,
    /// `file` is damaged: the backup's own file, or one it stands on.
    Damaged {
        file: PathBuf,
        what: String,
    },
    /// A link it stands on is not there: `missing` indexes [`BoxCheck::missing`].
    Incomplete {
        missing: usize,
    },
}

/// A link that is not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingLink {
    /// The SHA-256 its child names (or the save recorded).
    pub digest: [u8; 32],
    /// Its place in its chain (0: the full backup), when known.
    pub link: Option<u32>,
    /// Its file, when a save recorded it.
    pub was: Option<PathBuf>,
    /// The backup that names it as its parent (`None`: nothing here does; the save
    /// recorded it and it is gone).
    pub named_by: Option<PathBuf>,
    /// The backups here that stand on it: none restores.
    pub takes_down: Vec<PathBuf>,
}

/// The check of one box's backups in one directory.
#[derive(Debug, Clone)]
pub struct BoxCheck {
    pub name: String,
    pub dir: PathBuf,
    pub depth: Depth,
    /// Oldest first.
    pub files: Vec<FileFound>,
    /// One per file, in the same order.
    pub verdicts: Vec<Verdict>,
    pub missing: Vec<MissingLink>,
}

impl BoxCheck {
    /// Whether everything checked is sound (nothing damaged, nothing missing).
    pub fn sound(&self) -> bool {
        self.missing.is_empty() && self.verdicts.iter().all(|v| *v == Verdict::Sound)
    }
}

/// What to check: one box's backup files in one directory, and what its saves recorded.
pub struct Input<'a> {
    pub name: &'a str,
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    /// The last save's record of the box's chain (any directory: only `dir`'s are used).
    pub recorded: Vec<Recorded>,
}

/// Checks `input` to `depth`.
pub fn check_box(input: Input<'_>, depth: Depth, pass: &Passphrase<'_>) -> Result<BoxCheck> {
    let recorded: Vec<Recorded> = input
        .recorded
        .into_iter()
        .filter(|r| chain::dir_of(&r.path) == input.dir)
        .collect();
    let mut files = found_files(input.files, &recorded);
    read_places(&mut files, pass)?;
    if depth == Depth::Metadata {
        for f in files.iter_mut().filter(|f| f.recorded.is_none()) {
            f.notes.push(
                "no save recorded its SHA-256 (an older chain, or saved by another box \
                 install): its bytes were not compared; --read-data decrypts it"
                    .into(),
            );
        }
    }
    let (mut verdicts, mut missing) = judge(&files, &recorded);
    if depth == Depth::ReadData {
        read_data(&mut files, &verdicts, &input.dir, pass.get()?)?;
        (verdicts, missing) = judge(&files, &recorded);
    }
    Ok(BoxCheck {
        name: input.name.to_string(),
        dir: input.dir,
        depth,
        files,
        verdicts,
        missing,
    })
}

/// Each file hashed (one progress phase for them all) and compared with its record.
fn found_files(paths: Vec<PathBuf>, recorded: &[Recorded]) -> Vec<FileFound> {
    let sizes: Vec<u64> = paths
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect();
    let mut progress = Phase::start("hashing", Some(sizes.iter().sum()));
    let mut files: Vec<FileFound> = paths
        .into_iter()
        .zip(sizes)
        .map(|(path, size)| {
            let mut faults = Vec::new();
            let digest = match hash_file(&path, &mut progress) {
                Ok(d) => Some(d),
                Err(e) => {
                    faults.push(format!("cannot be read: {e}"));
                    None
                }
            };
            let recorded = recorded.iter().find(|r| r.path == path).cloned();
            if let (Some(rec), Some(now)) = (&recorded, digest)
                && rec.digest != now
            {
                faults.push(digest_differs(rec, size, &now));
            }
            FileFound {
                stamp: chain::box_and_stamp(&path)
                    .map(|(_, s)| s)
                    .unwrap_or_default(),
                place: recorded.as_ref().and_then(|r| r.place),
                path,
                size,
                digest,
                recorded,
                faults,
                notes: Vec::new(),
            }
        })
        .collect();
    progress.finish();
    files.sort_by(|a, b| a.stamp.cmp(&b.stamp).then(a.path.cmp(&b.path)));
    files
}

/// SHA-256 of a file, counted in `progress`.
fn hash_file(path: &Path, progress: &mut Phase) -> io::Result<[u8; 32]> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize().into());
        }
        hasher.update(&buf[..n]);
        progress.add(n as u64);
    }
}

/// Why a file's bytes are not those its save recorded, with the byte range when its
/// length says it.
pub fn digest_differs(rec: &Recorded, size: u64, now: &[u8; 32]) -> String {
    let which = format!(
        "its SHA-256 differs from the one its save recorded ({} then, {} now)",
        short_sha(&rec.digest),
        short_sha(now)
    );
    match size.cmp(&rec.size) {
        std::cmp::Ordering::Less => format!(
            "{which}: cut short, bytes {size}..{} of {} are gone",
            rec.size, rec.size
        ),
        std::cmp::Ordering::Greater => format!(
            "{which}: bytes {}..{size} were added after its end",
            rec.size
        ),
        std::cmp::Ordering::Equal => {
            format!("{which}: same size ({size} bytes), so bytes inside it changed")
        }
    }
}

/// The first 12 hex digits of a digest: enough for a person to match two.
pub fn short_sha(d: &[u8; 32]) -> String {
    hex_sha(d)[..12].to_string()
}

/// Reads the sealed place of each file whose save did not record it (asking for the
/// passphrase once, when there is one). A file that does not open is damaged; when none
/// opens, the passphrase is wrong, which is the user's to fix, not a finding.
fn read_places(files: &mut [FileFound], pass: &Passphrase<'_>) -> Result<()> {
    let unknown: Vec<usize> = (0..files.len())
        .filter(|&i| files[i].recorded.is_none() && files[i].digest.is_some())
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let pass = pass.get()?;
    let mut wrong = Vec::new();
    let mut opened = false;
    for i in unknown {
        match load::peek_place(&files[i].path, pass) {
            Ok(place) => {
                files[i].place = place;
                opened = true;
            }
            Err(e) => {
                if is_wrong_passphrase(&e) {
                    wrong.push(i);
                } else {
                    files[i]
                        .faults
                        .push(format!("its place in its chain cannot be read: {e:#}"));
                }
            }
        }
    }
    if !opened && !wrong.is_empty() {
        let unopened: Vec<&Path> = wrong.iter().map(|&i| files[i].path.as_path()).collect();
        return Err(opens_none(&unopened));
    }
    for i in wrong {
        files[i].faults.push(
            "it does not open with the passphrase that opens the others: damaged in its \
             key packet, or no backup of this box"
                .into(),
        );
    }
    Ok(())
}

/// Each file's verdict, and the links that are not there.
pub fn judge(files: &[FileFound], recorded: &[Recorded]) -> (Vec<Verdict>, Vec<MissingLink>) {
    let links: Vec<Link> = files
        .iter()
        .filter_map(|f| {
            Some(Link {
                path: f.path.clone(),
                digest: f.digest?,
                parent: f.place.and_then(|p| p.parent),
                stamp: f.stamp.clone(),
                hashed: None,
            })
        })
        .collect();
    let mut missing: Vec<MissingLink> = Vec::new();
    let verdicts = (0..files.len())
        .map(|i| match walk(files, i) {
            Walk::Sound => sound_by_chain_rules(&files[i], &links),
            Walk::Damaged(v) => v,
            Walk::Missing {
                digest,
                link,
                named_by,
            } => {
                let at = match missing.iter().position(|m| m.digest == digest) {
                    Some(at) => at,
                    None => {
                        missing.push(MissingLink {
                            digest,
                            link,
                            was: recorded
                                .iter()
                                .find(|r| r.digest == digest)
                                .map(|r| r.path.clone()),
                            named_by: Some(named_by),
                            takes_down: Vec::new(),
                        });
                        missing.len() - 1
                    }
                };
                missing[at].takes_down.push(files[i].path.clone());
                Verdict::Incomplete { missing: at }
            }
        })
        .collect();
    // A file the save recorded that is gone, though nothing here stands on it (the
    // newest backup, deleted or moved by hand or by a sync client): lost all the same.
    for r in recorded {
        let here = files.iter().any(|f| f.path == r.path);
        if !here && !missing.iter().any(|m| m.digest == r.digest) {
            missing.push(MissingLink {
                digest: r.digest,
                link: r.place.map(|p| p.link),
                was: Some(r.path.clone()),
                named_by: None,
                takes_down: Vec::new(),
            });
        }
    }
    (verdicts, missing)
}

/// Where following a backup's parents ends.
enum Walk {
    /// At a full backup, every file on the way sound.
    Sound,
    Damaged(Verdict),
    /// At a parent that is not there, named by `named_by`.
    Missing {
        digest: [u8; 32],
        link: Option<u32>,
        named_by: PathBuf,
    },
}

/// Follows `i`'s parents by digest, as a restore does. A parent whose bytes changed is
/// still found, by the digest its save recorded, so its child is said to stand on a
/// damaged file rather than on a missing one.
fn walk(files: &[FileFound], i: usize) -> Walk {
    let mut seen = HashSet::new();
    let mut at = i;
    loop {
        let f = &files[at];
        if !seen.insert(at) {
            return Walk::Damaged(Verdict::Damaged {
                file: files[i].path.clone(),
                what: "following its parents comes back to it: not a chain box saved".into(),
            });
        }
        if !f.faults.is_empty() {
            return Walk::Damaged(Verdict::Damaged {
                file: f.path.clone(),
                what: f.faults.join("; "),
            });
        }
        let Some(parent) = f.place.and_then(|p| p.parent) else {
            return Walk::Sound;
        };
        let by_bytes = files.iter().position(|c| c.digest == Some(parent));
        let by_record = || {
            files
                .iter()
                .position(|c| c.recorded.as_ref().is_some_and(|r| r.digest == parent))
        };
        match by_bytes.or_else(by_record) {
            Some(j) => at = j,
            None => {
                return Walk::Missing {
                    digest: parent,
                    link: f.place.and_then(|p| p.link.checked_sub(1)),
                    named_by: f.path.clone(),
                };
            }
        }
    }
}

/// A backup whose parents are all there and sound, judged by the rules every restore
/// applies to a chain (parents older than their children, no two children of one parent).
fn sound_by_chain_rules(file: &FileFound, links: &[Link]) -> Verdict {
    let Some(link) = links.iter().find(|l| l.path == file.path) else {
        return Verdict::Sound;
    };
    match chain::chain_of(link, links) {
        Ok(_) => Verdict::Sound,
        Err(e) => Verdict::Damaged {
            file: file.path.clone(),
            what: e.to_string(),
        },
    }
}

/// The chain of each sound backup that no other sound backup stands on, opened and
/// validated as `box load` does; then every file no such chain covered, decrypted alone.
/// What fails is recorded as the file's fault; a passphrase that opens no file at all is
/// the user's to fix, and an error.
fn read_data(
    files: &mut [FileFound],
    verdicts: &[Verdict],
    dir: &Path,
    pass: &SecretString,
) -> Result<()> {
    let sound: Vec<usize> = (0..files.len())
        .filter(|&i| verdicts[i] == Verdict::Sound)
        .collect();
    // Each sound backup's chain, itself first (its parents are all there: it is sound).
    let chains: Vec<Vec<PathBuf>> = sound
        .iter()
        .map(|&i| {
            let mut chain = vec![files[i].path.clone()];
            let mut at = files[i].place.and_then(|p| p.parent);
            while let Some(j) = at.and_then(|p| files.iter().position(|f| f.digest == Some(p)))
                && chain.len() <= files.len()
            {
                chain.push(files[j].path.clone());
                at = files[j].place.and_then(|p| p.parent);
            }
            chain
        })
        .collect();
    let tips: Vec<PathBuf> = chains
        .iter()
        .map(|c| c[0].clone())
        .filter(|tip| !chains.iter().any(|c| c[1..].contains(tip)))
        .collect();
    let mut read: HashSet<PathBuf> = HashSet::new();
    // Whether the passphrase opened any file, and the files it did not open.
    let mut opened = false;
    let mut wrong: Vec<PathBuf> = Vec::new();
    for tip in tips {
        let found = match open_chain::find(&tip, Some(dir), pass) {
            Ok(found) => found,
            Err(e) => {
                if is_wrong_passphrase(&e) {
                    wrong.push(tip.clone());
                }
                fault(files, &tip, format!("opening its chain: {e:#}"));
                read.insert(tip);
                continue;
            }
        };
        let paths: Vec<PathBuf> = found.links.iter().map(|l| l.path.clone()).collect();
        match found.validate(pass) {
            Ok(validated) => {
                opened = true;
                for (p, (v, _)) in paths.iter().zip(&validated.links) {
                    note_validated(files, p, Some(v.report.members));
                    read.insert(p.clone());
                }
            }
            Err(e) => {
                // A link refused is named by the error; what is about the chain, by its tip.
                let (failed, why) = match e.downcast_ref::<FailedLink>() {
                    Some(f) => (f.path.clone(), cause(&e)),
                    None => (tip.clone(), format!("{e:#}")),
                };
                if is_wrong_passphrase(&e) {
                    wrong.push(failed.clone());
                }
                // The links before the one refused passed.
                for p in paths.iter().take_while(|p| **p != failed) {
                    opened = true;
                    note_validated(files, p, None);
                    read.insert(p.clone());
                }
                fault(
                    files,
                    &failed,
                    format!("decrypting and validating it: {why}"),
                );
                read.insert(failed);
            }
        }
    }
    for f in files.iter_mut().filter(|f| !read.contains(&f.path)) {
        if f.digest.is_none() {
            continue;
        }
        match decrypt_whole(&f.path, pass) {
            Ok(()) => {
                opened = true;
                f.notes.push(
                    "decrypted whole, its MDC holds; not validated as a restore would, since \
                     what it stands on does not restore"
                        .into(),
                );
            }
            Err(e) => {
                if matches!(e, BackupError::WrongPassphrase) {
                    wrong.push(f.path.clone());
                }
                f.faults.push(format!("decrypting it: {e}"));
            }
        }
    }
    if !wrong.is_empty() && !opened {
        let unopened: Vec<&Path> = wrong.iter().map(PathBuf::as_path).collect();
        return Err(opens_none(&unopened));
    }
    Ok(())
}

/// The passphrase opened none of the files checked and `unopened` are those it could not
/// open: a wrong passphrase is the user's to fix, not a finding. But a damaged key packet
/// (salt, S2K count, encrypted session key) derives another key just as another passphrase
/// does, so when the passphrase opens no other file of the box either, the files alone
/// cannot tell which: the error says both, naming them.
fn opens_none(unopened: &[&Path]) -> anyhow::Error {
    let names: Vec<String> = unopened.iter().map(|p| p.display().to_string()).collect();
    anyhow!(
        "the passphrase opens none of the backups checked; it does not open {}: a wrong \
         passphrase, or their first bytes (the key packet) are damaged, and with no other \
         backup of this box that it opens, box cannot tell which. If the passphrase is \
         right, these files are damaged",
        names.join(", ")
    )
}

fn is_wrong_passphrase(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<BackupError>(),
        Some(BackupError::WrongPassphrase)
    )
}

/// The message of `e` without its outer context (which names the link).
fn cause(e: &anyhow::Error) -> String {
    e.chain()
        .skip(1)
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

fn fault(files: &mut [FileFound], path: &Path, what: String) {
    if let Some(f) = files.iter_mut().find(|f| f.path == path) {
        f.faults.push(what);
    }
}

fn note_validated(files: &mut [FileFound], path: &Path, members: Option<u64>) {
    if let Some(f) = files.iter_mut().find(|f| f.path == path) {
        f.notes.push(match members {
            Some(n) => {
                format!("decrypted, MDC checked, {n} members validated after the links before it")
            }
            None => "decrypted, MDC checked, validated after the links before it".into(),
        });
    }
}

/// Decrypts `path` to its end, checking its MDC, with progress.
fn decrypt_whole(path: &Path, pass: &SecretString) -> Result<(), BackupError> {
    let mut reader = DecryptReader::open(path, pass)?;
    let status = reader.status();
    let mut progress = Phase::start("decrypting", std::fs::metadata(path).ok().map(|m| m.len()));
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => progress.add(n as u64),
            Err(e) => {
                return Err(BackupError::Corrupt(
                    status.failure().unwrap_or_else(|| e.to_string()),
                ));
            }
        }
    }
    progress.finish();
    if let Some(failure) = status.failure() {
        return Err(BackupError::Corrupt(failure));
    }
    if !reader.authenticated() {
        return Err(BackupError::Corrupt(
            "the OpenPGP message did not end cleanly".into(),
        ));
    }
    Ok(())
}

/// Files of a made-up chain, for the tests of the check and of its report.
#[cfg(test)]
pub(crate) mod test_files {
    use super::*;

    /// A chain's file `alpha-20261201-1000NN` whose digest is `[n; 32]`, standing on
    /// `[p; 32]` as link `p` (0-based; none: the full backup).
    pub(crate) fn file(n: u8, parent: Option<u8>) -> FileFound {
        FileFound {
            path: PathBuf::from(format!("/b/alpha-20261201-1000{n:02}.tar.zst.gpg")),
            stamp: format!("20261201-1000{n:02}"),
            size: 100,
            digest: Some([n; 32]),
            recorded: None,
            place: Some(Place {
                link: parent.map_or(0, u32::from),
                parent: parent.map(|p| [p; 32]),
            }),
            faults: Vec::new(),
            notes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_files::file;
    use super::*;

    fn record(f: &FileFound) -> Recorded {
        Recorded {
            path: f.path.clone(),
            size: f.size,
            digest: f.digest.unwrap(),
            place: f.place,
        }
    }

    #[test]
    fn a_whole_chain_is_sound() {
        let files = vec![file(1, None), file(2, Some(1)), file(3, Some(2))];
        let (verdicts, missing) = judge(&files, &[]);
        assert_eq!(verdicts, vec![Verdict::Sound; 3]);
        assert!(missing.is_empty());
    }

    #[test]
    fn a_changed_middle_file_takes_the_links_on_it_down_and_names_itself() {
        let mut files = vec![file(1, None), file(2, Some(1)), file(3, Some(2))];
        let recorded: Vec<Recorded> = files.iter().map(record).collect();
        // Its bytes changed: its digest is no longer the one its child names.
        files[1].digest = Some([9; 32]);
        files[1].faults.push("its SHA-256 differs".into());
        files[1].recorded = Some(recorded[1].clone());
        let (verdicts, missing) = judge(&files, &recorded);
        assert_eq!(verdicts[0], Verdict::Sound);
        let damaged = Verdict::Damaged {
            file: files[1].path.clone(),
            what: "its SHA-256 differs".into(),
        };
        assert_eq!(verdicts[1], damaged);
        assert_eq!(verdicts[2], damaged, "the last link stands on it");
        assert!(missing.is_empty(), "changed, not missing: {missing:?}");
    }

    #[test]
    fn a_missing_link_is_named_with_everything_it_takes_down() {
        let all = [
            file(1, None),
            file(2, Some(1)),
            file(3, Some(2)),
            file(4, Some(3)),
        ];
        let recorded: Vec<Recorded> = all.iter().map(record).collect();
        let files = vec![all[0].clone(), all[2].clone(), all[3].clone()];
        let (verdicts, missing) = judge(&files, &recorded);
        assert_eq!(verdicts[0], Verdict::Sound);
        assert_eq!(verdicts[1], Verdict::Incomplete { missing: 0 });
        assert_eq!(verdicts[2], Verdict::Incomplete { missing: 0 });
        assert_eq!(
            missing,
            vec![MissingLink {
                digest: [2; 32],
                link: Some(1),
                was: Some(all[1].path.clone()),
                named_by: Some(all[2].path.clone()),
                takes_down: vec![all[2].path.clone(), all[3].path.clone()],
            }]
        );
        // Not recorded by a save: named by its digest and place only.
        let (_, missing) = judge(&files, &[]);
        assert_eq!(missing[0].was, None);
        assert_eq!(missing[0].link, Some(1));
    }

    #[test]
    fn a_recorded_newest_backup_that_is_gone_is_missing_though_nothing_stands_on_it() {
        let all = [file(1, None), file(2, Some(1))];
        let recorded: Vec<Recorded> = all.iter().map(record).collect();
        let (verdicts, missing) = judge(&all[..1], &recorded);
        assert_eq!(verdicts, vec![Verdict::Sound]);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].was, Some(all[1].path.clone()));
        assert_eq!(missing[0].named_by, None);
        assert!(missing[0].takes_down.is_empty());
    }

    #[test]
    fn chains_box_never_writes_are_damaged_not_sound() {
        // Two links claiming one parent: a copied or hostile file.
        let files = vec![file(1, None), file(2, Some(1)), file(3, Some(1))];
        let (verdicts, _) = judge(&files, &[]);
        assert_eq!(verdicts[0], Verdict::Sound);
        for v in &verdicts[1..] {
            assert!(
                matches!(v, Verdict::Damaged { what, .. } if what.contains("both claim")),
                "{v:?}"
            );
        }
        // Parents in a loop: judged, not followed for ever.
        let mut a = file(1, Some(2));
        a.place = Some(Place {
            link: 1,
            parent: Some([2; 32]),
        });
        let files = vec![a, file(2, Some(1))];
        let (verdicts, _) = judge(&files, &[]);
        assert!(
            verdicts
                .iter()
                .all(|v| matches!(v, Verdict::Damaged { what, .. } if what.contains("comes back"))),
            "{verdicts:?}"
        );
        // A parent not older than its child.
        let files = vec![file(2, None), file(1, Some(2))];
        let (verdicts, _) = judge(&files, &[]);
        assert!(
            matches!(&verdicts[1], Verdict::Damaged { what, .. } if what.contains("not older")),
            "{verdicts:?}"
        );
    }

    #[test]
    fn a_changed_file_says_which_bytes_when_its_length_tells() {
        let rec = record(&file(1, None));
        let cut = digest_differs(&rec, 60, &[7; 32]);
        assert!(
            cut.contains("cut short, bytes 60..100 of 100 are gone"),
            "{cut}"
        );
        assert!(cut.contains(&format!(
            "({} then, {} now)",
            "010101010101", "070707070707"
        )));
        let grown = digest_differs(&rec, 130, &[7; 32]);
        assert!(
            grown.contains("bytes 100..130 were added after its end"),
            "{grown}"
        );
        let same = digest_differs(&rec, 100, &[7; 32]);
        assert!(
            same.contains("same size (100 bytes), so bytes inside it changed"),
            "{same}"
        );
    }

    #[test]
    fn the_passphrase_is_asked_once_and_only_when_needed() {
        let asked = std::cell::Cell::new(0);
        let ask = || {
            asked.set(asked.get() + 1);
            Ok(SecretString::from("pp"))
        };
        let pass = Passphrase::asking(&ask);
        assert_eq!(asked.get(), 0);
        pass.get().unwrap();
        pass.get().unwrap();
        assert_eq!(asked.get(), 1);
        // Every file recorded: a metadata check asks nothing.
        let never = || -> Result<SecretString> { panic!("asked") };
        let files = vec![file(1, None)];
        let mut found = files.clone();
        found[0].recorded = Some(record(&files[0]));
        read_places(&mut found, &Passphrase::asking(&never)).unwrap();
    }
}
