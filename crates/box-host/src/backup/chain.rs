//! Chains of backups: which links a restore needs, in which order, and which a prune may
//! remove. Pure logic over [`Link`]s; finding the links (the files in a backup dir, their
//! digests and the parent digest each names in-band) is the caller's. The whole story of
//! chains is docs/chains.md.
//!
//! A link names its parent by the SHA-256 of the parent's backup *file* (its ciphertext,
//! what `sha256sum` prints), not by a file name:
//! * the host computes and checks it without the passphrase and without decrypting, so a
//!   chain is found, ordered and checked (missing, altered, foreign, looping links) before
//!   any passphrase is asked or any VM exists;
//! * it covers every byte of the parent, MDC included: a parent that was re-encrypted,
//!   truncated or swapped for another box's file no longer matches;
//! * a plaintext digest would need every candidate decrypted just to find a parent.
//!
//! A chain is refused, naming the link, when a parent is missing, when following parents
//! comes back to a link (a loop), when a parent is not older than its child, or when two
//! links claim the same parent (the saves never fork a chain: each increment's parent is
//! the newest backup, so a second child means a copied or hostile file).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::naming::{is_stamp, stamp_of, strip_backup_extension};
use sha2::{Digest, Sha256};

use super::hex_sha;

/// One backup file as a chain sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub path: PathBuf,
    /// SHA-256 of the file.
    pub digest: [u8; 32],
    /// The digest of the backup this one is an increment on; `None` for a full backup.
    pub parent: Option<[u8; 32]>,
    /// `YYYYmmdd-HHMMSS` from its name: the order of saves.
    pub stamp: String,
    /// The file as it was when hashed, when that was recorded: a restore checks the file
    /// it validated is still that one, without hashing it again.
    pub hashed: Option<FileState>,
}

/// What tells one version of a file from another without reading it: which file it is,
/// its length, and its modification and change times (the kernel sets the change time on
/// every write, and nobody can set it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileState {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileState {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    pub fn at(path: &Path) -> Result<Self> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Self::of(&meta))
    }

    /// The file's length in bytes.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// `dev ino len mtime mtime_ns ctime ctime_ns`, as [`FileState::decode`] reads it.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {} {}",
            self.dev, self.ino, self.len, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    pub fn decode(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.split(' ').collect();
        let [dev, ino, len, ms, mns, cs, cns] = f.as_slice() else {
            return None;
        };
        let (u, i) = (
            |t: &str| t.parse::<u64>().ok(),
            |t: &str| t.parse::<i64>().ok(),
        );
        Some(FileState {
            dev: u(dev)?,
            ino: u(ino)?,
            len: u(len)?,
            mtime: (i(ms)?, i(mns)?),
            ctime: (i(cs)?, i(cns)?),
        })
    }
}

impl Link {
    fn shown(&self) -> String {
        self.path.display().to_string()
    }
}

/// A link's parent is not among the files beside it: what box says, and what a verb that
/// knows more places looks for (`backup::missing::explain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingParent {
    /// The link that names the missing parent.
    pub child: PathBuf,
    /// The parent's SHA-256, as the child names it.
    pub digest: [u8; 32],
    /// A file lying where the parent should be, whose bytes are not the parent's (`; …`).
    pub suspect: String,
}

impl std::fmt::Display for MissingParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is an increment on a backup that is not in its directory (SHA-256 {}): the chain is missing a link{}; restore an older full backup, or bring the missing file back beside it",
            self.child.display(),
            hex_sha(&self.digest),
            self.suspect
        )
    }
}

impl std::error::Error for MissingParent {}

/// The links a restore of `tip` applies, oldest (the full backup) first, `tip` last.
pub fn chain_of<'a>(tip: &'a Link, links: &'a [Link]) -> Result<Vec<&'a Link>> {
    chain_of_placed(tip, links, &|_| None)
}

/// [`chain_of`], knowing the place in its chain (0: the full backup) of each link whose
/// `link_no` says it: an error about a missing parent then also names a file lying there
/// whose place is the missing one's (without places, a full backup left by a deleted
/// middle link would be blamed for the link that is gone).
fn chain_of_placed<'a>(
    tip: &'a Link,
    links: &'a [Link],
    link_no: &dyn Fn(&Link) -> Option<u32>,
) -> Result<Vec<&'a Link>> {
    let by_digest: HashMap<[u8; 32], &Link> = links.iter().map(|l| (l.digest, l)).collect();
    let mut children: HashMap<[u8; 32], Vec<&Link>> = HashMap::new();
    for l in links {
        if let Some(p) = l.parent {
            children.entry(p).or_default().push(l);
        }
    }
    let mut chain = vec![tip];
    let mut seen = HashSet::from([tip.digest]);
    let mut link = tip;
    while let Some(parent) = link.parent {
        let Some(found) = by_digest.get(&parent).copied() else {
            let suspect = unaccounted_before(link, links, link_no).map_or_else(String::new, |s| {
                format!(
                    "; {} is there but its bytes are not the ones {} names: damaged or replaced?",
                    s.shown(),
                    link.shown()
                )
            });
            return Err(MissingParent {
                child: link.path.clone(),
                digest: parent,
                suspect,
            }
            .into());
        };
        if !seen.insert(found.digest) {
            bail!(
                "{} leads back to itself through its parents: not a chain box saved",
                found.shown()
            );
        }
        if found.stamp >= link.stamp {
            bail!(
                "{} names {} as its parent, which is not older: not a chain box saved",
                link.shown(),
                found.shown()
            );
        }
        if let Some(kids) = children.get(&parent)
            && kids.len() > 1
        {
            let mut names: Vec<String> = kids.iter().map(|k| k.shown()).collect();
            names.sort();
            bail!(
                "{} and {} both claim {} as their parent: box never forks a chain, so one of them is not this box's; move the stranger away",
                names[0],
                names[1],
                found.shown()
            );
        }
        chain.push(found);
        link = found;
    }
    chain.reverse();
    Ok(chain)
}

/// The file most likely to be the parent `child` names but that is not found by its
/// digest: the newest backup of the same box older than `child`, in the place before
/// `child`'s, that no backup names as its parent (a save's parent is the newest backup
/// before it). A parent whose bytes changed (a flipped bit, a cut, a rewrite) lies right
/// there under its own name, and a user told only "missing" would look for a file they
/// have.
fn unaccounted_before<'a>(
    child: &Link,
    links: &'a [Link],
    link_no: &dyn Fn(&Link) -> Option<u32>,
) -> Option<&'a Link> {
    let named: HashSet<[u8; 32]> = links.iter().filter_map(|l| l.parent).collect();
    let box_of = |l: &Link| box_and_stamp(&l.path).map(|(name, _)| name);
    let in_place_before = |l: &Link| match (link_no(l), link_no(child)) {
        (Some(l), Some(c)) => l.checked_add(1) == Some(c),
        _ => false,
    };
    links
        .iter()
        .filter(|l| {
            l.stamp < child.stamp
                && !named.contains(&l.digest)
                && box_of(l) == box_of(child)
                && in_place_before(l)
        })
        .max_by(|a, b| a.stamp.cmp(&b.stamp))
}

/// Where a backup says it sits in its chain (its runtime manifest, read before it is
/// validated; the validation checks it again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// 0 for a full backup.
    pub link: u32,
    /// The digest of the backup it builds on (`None` for a full one).
    pub parent: Option<[u8; 32]>,
}

/// SHA-256 of a backup file, as `sha256sum` prints it.
pub fn file_digest(path: &Path) -> Result<[u8; 32]> {
    hash_file(path).map(|(digest, _)| digest)
}

/// [`file_digest`], and the file's state before it was read.
fn hash_file(path: &Path) -> Result<([u8; 32], FileState)> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let state = FileState::of(
        &file
            .metadata()
            .with_context(|| format!("cannot read {}", path.display()))?,
    );
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok((hasher.finalize().into(), state))
}

/// `f` of each of `items`, in their order, on as many threads as there are cores: reading
/// a backup's place derives a key from the passphrase (deliberately slow, and once per
/// file, since each file has its own salt), and a directory of a few chains holds dozens.
/// The first error, in `items`' order, is returned.
fn par_map<T: Sync, R: Send>(items: &[T], f: &(dyn Fn(&T) -> Result<R> + Sync)) -> Result<Vec<R>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<R>>>> = Mutex::new(items.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    done.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                }
            });
        }
    });
    done.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| bail!("a reader thread died")))
        .collect()
}

/// `place` of each of `paths`, in their order, on every core (`par_map`).
pub fn places_of(paths: &[&Path], place: &PlaceOf<'_>) -> Result<Vec<Option<Place>>> {
    par_map(paths, &|p| place(p))
}

/// What reads a backup's [`Place`] (`None`: a backup from before chains, a full one).
/// Shared by threads: see `par_map`.
pub type PlaceOf<'a> = dyn Fn(&Path) -> Result<Option<Place>> + Sync + 'a;

/// What was learned before of the backup at a path in a state (its digest and place):
/// a file still in the state it was read in holds the same bytes (see [`FileState`]), so
/// neither needs reading again. `box save` keeps what it learns between saves
/// ([`super::tree_cache::Known`]); every other reader knows nothing ([`KNOWS_NOTHING`]).
pub type KnownOf<'a> = dyn Fn(&Path, &FileState) -> Option<([u8; 32], Option<Place>)> + Sync + 'a;

/// Nothing known before: every file is read.
pub const KNOWS_NOTHING: &KnownOf<'static> = &|_, _| None;

/// The backups of one box in a directory, as [`discover_links`] reads them: each one's
/// place once read, its digest once hashed (`None` until then).
struct Found<'k> {
    paths: Vec<PathBuf>,
    stamps: Vec<String>,
    places: Vec<Option<Option<Place>>>,
    digests: Vec<Option<([u8; 32], FileState)>>,
    known: &'k KnownOf<'k>,
}

/// A file's digest and place, and the state it is in.
type KnownFile = ([u8; 32], Option<Place>, FileState);

/// What `known` says of the file at `path` as it is now, and that state.
fn known_now(known: &KnownOf<'_>, path: &Path) -> Result<Option<KnownFile>> {
    let state = FileState::at(path)?;
    Ok(known(path, &state).map(|(digest, place)| (digest, place, state)))
}

impl Found<'_> {
    /// Reads the places of `places` and hashes `hashes`, those not done yet, together.
    fn read(&mut self, places: &[usize], hashes: &[usize], place: &PlaceOf<'_>) -> Result<()> {
        // (index, read its place, hash it)
        let mut work: Vec<(usize, bool, bool)> = Vec::new();
        for i in places.iter().chain(hashes).copied() {
            let read = places.contains(&i) && self.places[i].is_none();
            let hash = hashes.contains(&i) && self.digests[i].is_none();
            if (read || hash) && !work.iter().any(|w| w.0 == i) {
                work.push((i, read, hash));
            }
        }
        let done = par_map(&work, &|&(i, read, hash)| {
            let path = self.paths[i].as_path();
            let known = known_now(self.known, path)?;
            let placed = match (read, &known) {
                (false, _) => None,
                (true, Some((_, place, _))) => Some(*place),
                (true, None) => Some(place(path)?),
            };
            let digest = match (hash, known) {
                (false, _) => None,
                (true, Some((digest, _, state))) => Some((digest, state)),
                (true, None) => Some(hash_file(path)?),
            };
            Ok((placed, digest))
        })?;
        for ((i, _, _), (placed, digest)) in work.into_iter().zip(done) {
            if placed.is_some() {
                self.places[i] = placed;
            }
            if digest.is_some() {
                self.digests[i] = digest;
            }
        }
        Ok(())
    }

    /// The parent `i` names (`None` for a full backup, or one not read).
    fn parent(&self, i: usize) -> Option<[u8; 32]> {
        self.places[i].flatten().and_then(|p| p.parent)
    }

    /// The digest of `i`, hashed now if it was not.
    fn digest(&mut self, i: usize) -> Result<[u8; 32]> {
        Ok(self.hashed(i)?.0)
    }

    /// The digest of `i` and the file's state when hashed, hashed now if it was not.
    fn hashed(&mut self, i: usize) -> Result<([u8; 32], FileState)> {
        if let Some(d) = self.digests[i] {
            return Ok(d);
        }
        let d = match known_now(self.known, &self.paths[i])? {
            Some((digest, _, state)) => (digest, state),
            None => hash_file(&self.paths[i])?,
        };
        self.digests[i] = Some(d);
        Ok(d)
    }

    fn link(&mut self, i: usize) -> Result<Link> {
        let (digest, state) = self.hashed(i)?;
        Ok(Link {
            digest,
            path: self.paths[i].clone(),
            stamp: self.stamps[i].clone(),
            parent: self.parent(i),
            hashed: Some(state),
        })
    }
}

/// The directory `path` is in (`.` for a bare name).
pub fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The (device, inode) of a file: the tip is told among the chain dir's files by what it
/// is, not only by its name.
fn file_id(path: &Path) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok((m.dev(), m.ino()))
}

/// `alpha` and `20261129-120000` of `alpha-20261129-120000.tar.zst.gpg`.
pub fn box_and_stamp(file: &Path) -> Option<(String, String)> {
    let name = file.file_name()?.to_str()?;
    let stem = strip_backup_extension(name);
    let cut = stem.len().checked_sub(16)?;
    let (name, rest) = stem.split_at(cut);
    let stamp = rest.strip_prefix('-')?;
    (is_stamp(stamp) && !name.is_empty()).then(|| (name.to_string(), stamp.to_string()))
}

/// The files a restore of `file` applies, oldest first: `file` alone for a full backup,
/// else its chain among the backups of the same box in its directory, found by digest
/// and checked by [`chain_of`]. `place` reads a backup's [`Place`] (`None`: the backup
/// predates chains, a full one).
pub fn discover(
    file: &Path,
    chain_dir: Option<&Path>,
    place: &PlaceOf<'_>,
) -> Result<Vec<PathBuf>> {
    Ok(discover_links(file, chain_dir, place)?
        .into_iter()
        .map(|l| l.path)
        .collect())
}

/// [`discover`], with each link's digest.
///
/// Reading a backup's place costs a key derivation, so only the backups that can matter
/// are read:
/// * the links of the chain, found by digest: a parent is looked for among the older
///   backups, newest first, so a sound chain costs one hash per link, not one per backup
///   in the directory (a box with many full backups of 500 MiB each would otherwise hash
///   them all on every save and `box rm`). The tip says how many links come before it,
///   and the backups that many places older are read together, on every core;
/// * every backup newer than the chain's full backup, so a second link claiming a parent
///   in the chain (a fork) is seen. One named older than the parent it claims is no save
///   of this chain (a save's parent is older than it), and an older chain of the box is
///   not read at all.
///
/// When the walk cannot finish, every file is read and hashed and [`chain_of`] names the
/// fault.
pub fn discover_links(
    file: &Path,
    chain_dir: Option<&Path>,
    place: &PlaceOf<'_>,
) -> Result<Vec<Link>> {
    discover_links_knowing(file, chain_dir, place, KNOWS_NOTHING)
}

/// [`discover_links`], taking a file's digest and place from `known` when it is still as
/// it was when they were learned, except the tip's. The tip's place is always read: reading
/// it is what shows the passphrase opens the chain (each link was added only once its
/// parent opened so, so the links before it were made under the same passphrase). And the
/// tip is always hashed: its digest is what the next link names, and a file's metadata can
/// stay while its bytes change (media errors; sshfs, SMB and FAT make up inodes and
/// ctimes), so a link named on a remembered digest could name bytes no longer there.
pub fn discover_links_knowing(
    file: &Path,
    chain_dir: Option<&Path>,
    place: &PlaceOf<'_>,
    known: &KnownOf<'_>,
) -> Result<Vec<Link>> {
    let tip_place = place(file)?;
    let tip_hashed = hash_file(file)?;
    let Some(Place {
        parent: Some(_),
        link: tip_link,
    }) = tip_place
    else {
        let stamp = box_and_stamp(file).map(|(_, s)| s).unwrap_or_default();
        let (digest, state) = tip_hashed;
        return Ok(vec![Link {
            path: file.to_path_buf(),
            digest,
            parent: None,
            stamp,
            hashed: Some(state),
        }]);
    };
    let Some((box_name, tip_stamp)) = box_and_stamp(file) else {
        bail!(
            "{} is an incremental backup whose name is not <box>-<YYYYmmdd-HHMMSS>.tar.zst.gpg: box finds its chain among backups named so, beside it",
            file.display()
        );
    };
    // Beside `file`, or where the user said the chain is (`--chain-dir`).
    let dir = chain_dir.map_or_else(|| dir_of(file), Path::to_path_buf);
    let tip_id = file_id(file)?;
    let mut found = Found {
        paths: vec![file.to_path_buf()],
        stamps: vec![tip_stamp],
        places: vec![Some(tip_place)],
        digests: vec![Some(tip_hashed)],
        known,
    };
    let tip = 0;
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let entry = entry?;
        let name = entry.file_name();
        let Some(stamp) = name.to_str().and_then(|n| stamp_of(n, &box_name)) else {
            continue;
        };
        if !entry.file_type()?.is_file() {
            continue;
        }
        let path = entry.path();
        // The tip itself, or (with `--chain-dir`) a copy of it: the same backup.
        if file_id(&path)? == tip_id
            || (path.file_name() == file.file_name() && file_digest(&path)? == file_digest(file)?)
        {
            continue;
        }
        found.paths.push(path);
        found.stamps.push(stamp.to_string());
        found.places.push(None);
        found.digests.push(None);
    }
    // Newest first, the backups older than `i`.
    let older_than = |found: &Found, i: usize| -> Vec<usize> {
        let mut older: Vec<usize> = (0..found.paths.len())
            .filter(|&j| found.stamps[j] < found.stamps[i])
            .collect();
        older.sort_by(|&a, &b| found.stamps[b].cmp(&found.stamps[a]));
        older
    };
    // Read and hashed together, with the backups newer than the tip (read for forks).
    let likely_links: Vec<usize> = older_than(&found, tip)
        .into_iter()
        .take(tip_link as usize)
        .collect();
    let newer_than_tip: Vec<usize> = (0..found.paths.len())
        .filter(|&i| found.stamps[i] > found.stamps[tip])
        .collect();
    found.read(
        &[likely_links.as_slice(), &newer_than_tip].concat(),
        &likely_links,
        place,
    )?;
    let mut walk = vec![tip];
    let mut at = tip;
    let mut complete = true;
    while let Some(parent) = found.parent(at) {
        let mut hit = None;
        for i in older_than(&found, at) {
            if found.digest(i)? == parent {
                hit = Some(i);
                break;
            }
        }
        let Some(hit) = hit else {
            complete = false;
            break;
        };
        found.read(&[hit], &[], place)?;
        walk.push(hit);
        at = hit;
    }
    if complete {
        // A fork: another backup newer than the chain's start claiming one of its links.
        let start = &found.stamps[at];
        let newer: Vec<usize> = (0..found.paths.len())
            .filter(|&i| found.stamps[i] > *start)
            .collect();
        found.read(&newer, &[], place)?;
        for pair in walk.windows(2) {
            let parent = found.digest(pair[1])?;
            let claims = newer
                .iter()
                .filter(|&&i| found.parent(i) == Some(parent))
                .count();
            if claims > 1 {
                complete = false;
            }
        }
    }
    if complete {
        walk.reverse();
        return walk.into_iter().map(|i| found.link(i)).collect();
    }
    // Something is wrong: every file read and hashed, so the error names the fault
    // exactly.
    let all: Vec<usize> = (0..found.paths.len()).collect();
    found.read(&all, &all, place)?;
    let links = all
        .into_iter()
        .map(|i| found.link(i))
        .collect::<Result<Vec<_>>>()?;
    let link_no = |l: &Link| {
        let i = links.iter().position(|m| m.path == l.path)?;
        found.places[i].flatten().map(|p| p.link)
    };
    let chain = chain_of_placed(&links[tip], &links, &link_no)?;
    bail!(
        "{}: its chain could not be followed (the walk over {} backup(s) stopped early)",
        chain.last().map_or_else(String::new, |l| l.shown()),
        links.len()
    )
}

/// How long ago, in whole days, a chain whose full backup is stamped `full_stamp`
/// (`YYYYmmdd-HHMMSS`, UTC, as [`crate::transfer::stamp`] names backups) was started, when
/// that is more than `max_days` days: the next save starts a new chain, so a restore never
/// walks links older than that. A stamp that is no time at all counts as too old.
pub fn too_old(
    full_stamp: &str,
    now: chrono::DateTime<chrono::Utc>,
    max_days: u32,
) -> Option<ChainAge> {
    let Ok(started) = chrono::NaiveDateTime::parse_from_str(full_stamp, "%Y%m%d-%H%M%S") else {
        return Some(ChainAge::Unknown);
    };
    let age = now.naive_utc() - started;
    (age > chrono::Duration::days(i64::from(max_days)))
        .then(|| ChainAge::Days(age.num_days().unsigned_abs()))
}

/// Why a chain is too old to build on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainAge {
    /// Started this many whole days ago.
    Days(u64),
    /// Its full backup's name carries no readable time.
    Unknown,
}

impl std::fmt::Display for ChainAge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainAge::Days(1) => write!(f, "chain started 1 day ago"),
            ChainAge::Days(d) => write!(f, "chain started {d} days ago"),
            ChainAge::Unknown => write!(f, "chain's start cannot be read from its name"),
        }
    }
}

/// What `box backups prune` keeps and removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub keep: Vec<PathBuf>,
    pub remove: Vec<PathBuf>,
    /// Kept because their chain does not check out (with why): prune cannot judge them.
    pub unjudged: Vec<(PathBuf, String)>,
}

/// Keeps the newest `keep_last` links, the newest link of each of the `keep_daily` most
/// recent days that have one, and every backup those stand on; removes the rest.
///
/// What a link stands on is followed by digest, parent after parent, as far as the files
/// go, whether or not its chain checks out: a fork (a copied link under another name), a
/// missing middle link or a parent of another box never make prune drop an ancestor. A
/// link whose chain does not check out ([`chain_of`]) cannot be judged, so it is kept too,
/// with everything it stands on, and, where a parent it names is missing, with every backup
/// older than it: prune never decides about what it cannot read.
pub fn prune(links: &[Link], keep_last: usize, keep_daily: usize) -> Plan {
    let mut order: Vec<&Link> = links.iter().collect();
    order.sort_by(|a, b| b.stamp.cmp(&a.stamp).then(a.path.cmp(&b.path)));
    let mut chosen: Vec<&Link> = order.iter().take(keep_last).copied().collect();
    let mut days = Vec::new();
    for l in &order {
        let day = l.stamp.get(..8).unwrap_or(&l.stamp);
        if days.len() < keep_daily && !days.contains(&day) {
            days.push(day);
            chosen.push(l);
        }
    }
    let mut unjudged = Vec::new();
    for l in links {
        if let Err(e) = chain_of(l, links) {
            unjudged.push((l.path.clone(), format!("{e:#}")));
            chosen.push(l);
        }
    }
    // Copies of one file share a digest: a parent is every file with its digest.
    let mut by_digest: HashMap<[u8; 32], Vec<&Link>> = HashMap::new();
    for l in links {
        by_digest.entry(l.digest).or_default().push(l);
    }
    let mut keep: HashSet<&PathBuf> = HashSet::new();
    let mut pending = chosen;
    while let Some(l) = pending.pop() {
        if !keep.insert(&l.path) {
            continue;
        }
        match l.parent.map(|p| by_digest.get(&p)) {
            Some(Some(parents)) => pending.extend(parents.iter().copied()),
            // Its parent is not among the files (a missing middle link, which may come
            // back): whichever older backup it stood on through that link is not known,
            // so every older one is kept.
            Some(None) => pending.extend(links.iter().filter(|o| o.stamp < l.stamp)),
            None => {}
        }
    }
    let mut plan = Plan {
        unjudged,
        ..Plan::default()
    };
    for l in &order {
        if keep.contains(&l.path) {
            plan.keep.push(l.path.clone());
        } else {
            plan.remove.push(l.path.clone());
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn link(n: u8, parent: Option<u8>, stamp: &str) -> Link {
        Link {
            path: PathBuf::from(format!("alpha-{stamp}.tar.zst.gpg")),
            digest: [n; 32],
            parent: parent.map(|p| [p; 32]),
            stamp: stamp.to_string(),
            hashed: None,
        }
    }

    /// A file `name` holding `body` in `dir`, and its digest.
    fn write_backup(dir: &Path, name: &str, body: &str) -> (PathBuf, [u8; 32]) {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let digest = file_digest(&p).unwrap();
        (p, digest)
    }

    fn names(chain: &[&Link]) -> Vec<u8> {
        chain.iter().map(|l| l.digest[0]).collect()
    }

    #[test]
    fn a_chain_is_found_by_digest_oldest_first() {
        let links = vec![
            link(3, Some(2), "20261201-120300"),
            link(1, None, "20261201-120100"),
            link(2, Some(1), "20261201-120200"),
            link(9, None, "20261130-090000"),
        ];
        assert_eq!(names(&chain_of(&links[0], &links).unwrap()), [1, 2, 3]);
        assert_eq!(names(&chain_of(&links[1], &links).unwrap()), [1]);
    }

    #[test]
    fn hostile_chains_are_refused_naming_the_link() {
        let err =
            |tip: usize, links: &[Link]| chain_of(&links[tip], links).unwrap_err().to_string();
        // A missing middle link.
        let links = vec![
            link(3, Some(2), "20261201-120300"),
            link(1, None, "20261201-120100"),
        ];
        let e = err(0, &links);
        assert!(
            e.contains("alpha-20261201-120300") && e.contains("missing a link"),
            "{e}"
        );
        // Without the links' places, the full backup left there is not blamed for it.
        assert!(!e.contains("is there but"), "{e}");
        // A loop.
        let links = vec![
            link(1, Some(2), "20261201-120100"),
            link(2, Some(1), "20261201-120000"),
        ];
        let e = err(0, &links);
        assert!(
            e.contains("not older") || e.contains("back to itself"),
            "{e}"
        );
        // A parent newer than its child (reordered files).
        let links = vec![
            link(2, Some(1), "20261201-120000"),
            link(1, None, "20261201-120500"),
        ];
        assert!(err(0, &links).contains("not older"));
        // Two children of one parent.
        let links = vec![
            link(3, Some(1), "20261201-120300"),
            link(2, Some(1), "20261201-120200"),
            link(1, None, "20261201-120100"),
        ];
        let e = err(0, &links);
        assert!(e.contains("both claim"), "{e}");
    }

    #[test]
    fn discover_finds_the_chain_beside_a_link_by_digest() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| write_backup(d.path(), name, body);
        let (full, full_d) = write("alpha-20261201-100000.tar.zst.gpg", "full");
        let (inc, inc_d) = write("alpha-20261201-110000.tar.zst.gpg", "inc");
        let (tip, _) = write("alpha-20261201-120000.tar.zst.gpg", "tip");
        let (other, _) = write("alpha-2-20261201-115000.tar.zst.gpg", "another box");
        let places: HashMap<PathBuf, Place> = HashMap::from([
            (
                full.clone(),
                Place {
                    link: 0,
                    parent: None,
                },
            ),
            (
                inc.clone(),
                Place {
                    link: 1,
                    parent: Some(full_d),
                },
            ),
            (
                tip.clone(),
                Place {
                    link: 2,
                    parent: Some(inc_d),
                },
            ),
            // Another box's file claiming the same parent is not a candidate at all.
            (
                other.clone(),
                Place {
                    link: 1,
                    parent: Some(full_d),
                },
            ),
        ]);
        // The newest link taken elsewhere: `--chain-dir` says where the rest is.
        let away = tempfile::tempdir().unwrap();
        let moved = away.path().join("alpha-20261201-120000.tar.zst.gpg");
        std::fs::copy(&tip, &moved).unwrap();
        let mut places = places;
        places.insert(moved.clone(), places[&tip]);
        let place = |p: &Path| Ok(places.get(p).copied());
        assert_eq!(
            discover(&tip, None, &place).unwrap(),
            [full.clone(), inc.clone(), tip.clone()]
        );
        assert_eq!(
            discover(&moved, Some(d.path()), &place).unwrap(),
            [full.clone(), inc.clone(), moved.clone()],
            "the tip is the file given, its same-named copy in the chain dir is not a link"
        );
        assert!(
            discover(&moved, None, &place).is_err(),
            "alone, it has no parent"
        );
        assert_eq!(
            discover(&full, None, &place).unwrap(),
            std::slice::from_ref(&full)
        );
        // The middle link damaged (its bytes, not its place): the file lying there is
        // named as the one whose bytes are not those the tip names.
        std::fs::write(&inc, "inc, one bit flipped").unwrap();
        let e = discover(&tip, None, &place).unwrap_err().to_string();
        assert!(
            e.contains("alpha-20261201-120000")
                && e.contains("missing a link")
                && e.contains(&format!(
                    "; {} is there but its bytes are not the ones {} names: damaged or replaced?",
                    inc.display(),
                    tip.display()
                )),
            "{e}"
        );
        // The middle link deleted: refused, naming the link that misses its parent, and
        // not blaming the full backup, which sits in another place of the chain.
        std::fs::remove_file(&inc).unwrap();
        let e = discover(&tip, None, &place).unwrap_err().to_string();
        assert!(
            e.contains("alpha-20261201-120000")
                && e.contains("missing a link")
                && !e.contains("is there but"),
            "{e}"
        );
    }

    #[test]
    fn a_chain_older_than_its_max_age_is_closed() {
        use chrono::TimeZone;
        let now = chrono::Utc
            .with_ymd_and_hms(2026, 12, 9, 12, 0, 0)
            .single()
            .unwrap();
        // Started 8 days ago, 7 allowed: a new chain, and the days are said.
        assert_eq!(too_old("20261201-115959", now, 7), Some(ChainAge::Days(8)));
        assert_eq!(
            too_old("20261201-115959", now, 7).unwrap().to_string(),
            "chain started 8 days ago"
        );
        // Exactly 7 days is not more than 7; a second more is.
        assert_eq!(too_old("20261202-120000", now, 7), None);
        assert_eq!(too_old("20261202-115959", now, 7), Some(ChainAge::Days(7)));
        // Today's chain, and a stamp from the future (a clock set back), are kept.
        assert_eq!(too_old("20261209-110000", now, 1), None);
        assert_eq!(too_old("20261210-110000", now, 1), None);
        // A name that is no time: not built on.
        assert_eq!(too_old("20261399-000000", now, 7), Some(ChainAge::Unknown));
    }

    #[test]
    fn discover_hashes_only_the_chain() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| write_backup(d.path(), name, body);
        let (old, _) = write("alpha-20261130-100000.tar.zst.gpg", "an older full backup");
        let (full, full_d) = write("alpha-20261201-100000.tar.zst.gpg", "full");
        let (tip, _) = write("alpha-20261201-110000.tar.zst.gpg", "tip");
        let places = HashMap::from([
            (old.clone(), None),
            (
                full.clone(),
                Some(Place {
                    link: 0,
                    parent: None,
                }),
            ),
            (
                tip.clone(),
                Some(Place {
                    link: 1,
                    parent: Some(full_d),
                }),
            ),
        ]);
        // The older full backup is gone once its place was read: a walk that hashed it
        // would fail.
        let place = |p: &Path| {
            if p == old {
                std::fs::remove_file(p).unwrap();
            }
            Ok(places.get(p).copied().flatten())
        };
        let links = discover_links(&tip, None, &place).unwrap();
        assert_eq!(
            links.iter().map(|l| l.path.clone()).collect::<Vec<_>>(),
            [full.clone(), tip.clone()]
        );
        assert_eq!(links[0].digest, full_d);
    }

    /// What a save knew of the chain's files is used while each file is as it was: only
    /// the tip's place is read; a file changed since is read and hashed again.
    #[test]
    fn discover_knowing_reads_only_the_tip_and_what_changed() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| write_backup(d.path(), name, body);
        let (full, full_d) = write("alpha-20261201-100000.tar.zst.gpg", "full");
        let (inc, inc_d) = write("alpha-20261201-110000.tar.zst.gpg", "inc");
        let (tip, tip_d) = write("alpha-20261201-120000.tar.zst.gpg", "tip");
        let at = |link, parent| Some(Place { link, parent });
        let places = HashMap::from([
            (full.clone(), at(0, None)),
            (inc.clone(), at(1, Some(full_d))),
            (tip.clone(), at(2, Some(inc_d))),
        ]);
        let read = std::sync::Mutex::new(Vec::new());
        let place = |p: &Path| {
            read.lock().unwrap().push(p.to_path_buf());
            Ok(places.get(p).copied().flatten())
        };
        let first = discover_links(&tip, None, &place).unwrap();
        let known = super::super::tree_cache::Known::of_chain(&first, &Default::default());
        // A digest no hash of the file gives: seen in the result only if it was not read.
        let marked = [7u8; 32];
        let knowing = |p: &Path, state: &FileState| {
            known.get(p, state).map(|(digest, place)| {
                if p == full {
                    (marked, place)
                } else {
                    (digest, place)
                }
            })
        };
        // The link that names the full backup finds no file of that digest: the walk
        // fails (a save then starts a new chain), which only a digest not read shows.
        let links = discover_links_knowing(&tip, None, &place, &knowing);
        assert!(links.is_err(), "the full backup was read: {links:?}");
        let knowing = |p: &Path, state: &FileState| known.get(p, state);
        read.lock().unwrap().clear();
        let links = discover_links_knowing(&tip, None, &place, &knowing).unwrap();
        assert_eq!(
            *read.lock().unwrap(),
            std::slice::from_ref(&tip),
            "only the tip's place is read"
        );
        assert_eq!(
            links.iter().map(|l| l.digest).collect::<Vec<_>>(),
            [full_d, inc_d, tip_d]
        );
        // The middle link rewritten (same bytes, new times): read and hashed again.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&inc, std::fs::read(&inc).unwrap()).unwrap();
        read.lock().unwrap().clear();
        let links = discover_links_knowing(&tip, None, &place, &knowing).unwrap();
        assert_eq!(links[1].digest, inc_d);
        assert!(
            read.lock().unwrap().contains(&inc),
            "a changed file is read"
        );
    }

    /// The tip is the file the next link names: it is hashed whatever the memo says of it,
    /// a link tip and a full one alike. A memo row that keeps the tip's state but carries
    /// another digest (its bytes changed under the same metadata) is not believed.
    #[test]
    fn discover_knowing_always_hashes_the_tip() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| write_backup(d.path(), name, body);
        let (full, full_d) = write("alpha-20261201-100000.tar.zst.gpg", "full");
        let (tip, tip_d) = write("alpha-20261201-110000.tar.zst.gpg", "tip");
        let at = |link, parent| Some(Place { link, parent });
        let places = HashMap::from([
            (full.clone(), at(0, None)),
            (tip.clone(), at(1, Some(full_d))),
        ]);
        let place = |p: &Path| Ok(places.get(p).copied().flatten());
        let first = discover_links(&tip, None, &place).unwrap();
        let known = super::super::tree_cache::Known::of_chain(&first, &Default::default());
        let saved = [7u8; 32];
        let tip_saved_as = |p: &Path, state: &FileState| {
            known.get(p, state).map(|(digest, place)| {
                if p == tip {
                    (saved, place)
                } else {
                    (digest, place)
                }
            })
        };
        let links = discover_links_knowing(&tip, None, &place, &tip_saved_as).unwrap();
        assert_eq!(
            links.iter().map(|l| l.digest).collect::<Vec<_>>(),
            [full_d, tip_d]
        );
        // The full backup as the tip.
        let full_saved_as =
            |p: &Path, state: &FileState| known.get(p, state).map(|(_, place)| (saved, place));
        let links = discover_links_knowing(&full, None, &place, &full_saved_as).unwrap();
        assert_eq!(links.iter().map(|l| l.digest).collect::<Vec<_>>(), [full_d]);
    }

    /// A restore reads the places (a key derivation each) of its chain's links and of the
    /// backups newer than its full one, not of the box's older chains; a fork among the
    /// newer ones is still refused.
    #[test]
    fn discover_reads_only_what_can_be_in_the_chain() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| write_backup(d.path(), name, body);
        let (old_full, old_full_d) = write("alpha-20261130-090000.tar.zst.gpg", "old full");
        let (old_inc, _) = write("alpha-20261130-100000.tar.zst.gpg", "old inc");
        let (full, full_d) = write("alpha-20261201-100000.tar.zst.gpg", "full");
        let (inc, inc_d) = write("alpha-20261201-110000.tar.zst.gpg", "inc");
        let (tip, _) = write("alpha-20261201-120000.tar.zst.gpg", "tip");
        // Named before the full backup it claims: no save of this chain.
        let (stray, _) = write("alpha-20261130-110000.tar.zst.gpg", "stray");
        let at = |link, parent| Some(Place { link, parent });
        let mut places = HashMap::from([
            (old_full.clone(), at(0, None)),
            (old_inc.clone(), at(1, Some(old_full_d))),
            (stray.clone(), at(1, Some(full_d))),
            (full.clone(), at(0, None)),
            (inc.clone(), at(1, Some(full_d))),
            (tip.clone(), at(2, Some(inc_d))),
        ]);
        let read = std::sync::Mutex::new(Vec::new());
        let place = |p: &Path| {
            read.lock().unwrap().push(p.to_path_buf());
            Ok(places.get(p).copied().flatten())
        };
        assert_eq!(
            discover(&tip, None, &place).unwrap(),
            [full.clone(), inc.clone(), tip.clone()]
        );
        let mut seen = read.lock().unwrap().clone();
        seen.sort();
        assert_eq!(seen, [full.clone(), inc.clone(), tip.clone()]);
        // A second link on `full`, newer than it: a fork, refused.
        let (fork, _) = write("alpha-20261201-113000.tar.zst.gpg", "fork");
        places.insert(fork.clone(), at(1, Some(full_d)));
        let place = |p: &Path| Ok(places.get(p).copied().flatten());
        let e = discover(&tip, None, &place).unwrap_err().to_string();
        assert!(e.contains("both claim"), "{e}");
    }

    #[test]
    fn prune_keeps_what_kept_links_need() {
        let links = vec![
            link(1, None, "20261129-100000"),
            link(2, Some(1), "20261129-110000"),
            link(3, Some(2), "20261130-100000"),
            link(4, None, "20261130-120000"),
            link(5, Some(4), "20261130-130000"),
        ];
        let plan = prune(&links, 1, 0);
        let kept: Vec<String> = plan.keep.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            kept,
            [
                "alpha-20261130-130000.tar.zst.gpg",
                "alpha-20261130-120000.tar.zst.gpg"
            ]
        );
        assert_eq!(plan.remove.len(), 3);
        // The newest of yesterday too: its whole chain stays; the increment of today's
        // first chain goes (nothing kept needs it).
        let plan = prune(&links, 1, 2);
        assert_eq!(
            plan.remove,
            [PathBuf::from("alpha-20261130-100000.tar.zst.gpg")],
            "{plan:?}"
        );
    }

    /// Random sets of backups as a backup dir may hold them: full backups, increments on
    /// the newest link of a chain, and the faults prune must survive: forks (a second child
    /// of a link, as a copied link under a later name makes), copies (the same file under
    /// two names), increments whose parent is missing (a middle link deleted by hand), and
    /// foreign links (a parent of another box's).
    fn backup_dirs() -> impl Strategy<Value = Vec<Link>> {
        proptest::collection::vec((0u8..8, 0usize..8), 1..30).prop_map(|steps| {
            let mut links: Vec<Link> = Vec::new();
            let mut tips: Vec<[u8; 32]> = Vec::new();
            for (i, (kind, which)) in steps.into_iter().enumerate() {
                let mut digest = [0u8; 32];
                digest[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
                let any_earlier = |which: usize| links[which % links.len()].clone();
                let stamp = format!("202612{:02}-{:06}", 1 + i / 5, i * 100);
                let parent = match kind {
                    _ if links.is_empty() => None,
                    0 => None,
                    // A fork: a child of any earlier backup.
                    1 => Some(any_earlier(which).digest),
                    // A copy of an earlier backup under this later name.
                    2 => {
                        let copy = any_earlier(which);
                        links.push(Link {
                            path: PathBuf::from(format!("alpha-{stamp}.tar.zst.gpg")),
                            stamp,
                            ..copy
                        });
                        continue;
                    }
                    // A parent that is not there (deleted), or another box's.
                    3 => Some([0xee; 32]),
                    4 => {
                        let mut foreign = [0xf0; 32];
                        foreign[31] = which as u8;
                        Some(foreign)
                    }
                    _ if tips.is_empty() => None,
                    _ => Some(tips.remove(which % tips.len())),
                };
                tips.push(digest);
                links.push(Link {
                    path: PathBuf::from(format!("alpha-{stamp}.tar.zst.gpg")),
                    digest,
                    parent,
                    stamp,
                    hashed: None,
                });
            }
            links
        })
    }

    #[test]
    fn prune_keeps_everything_older_than_a_link_whose_parent_is_missing() {
        // Link 2 of the chain 1 <- 2 <- 3 is gone: 3 cannot be judged, and the full backup
        // it stood on through 2 must stay (2 may come back), as must an older chain.
        let links = vec![
            link(9, None, "20261130-090000"),
            link(1, None, "20261201-120100"),
            link(3, Some(2), "20261201-120300"),
            link(4, None, "20261202-080000"),
        ];
        let plan = prune(&links, 1, 0);
        let kept: Vec<&str> = plan.keep.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            kept,
            [
                "alpha-20261202-080000.tar.zst.gpg",
                "alpha-20261201-120300.tar.zst.gpg",
                "alpha-20261201-120100.tar.zst.gpg",
                "alpha-20261130-090000.tar.zst.gpg",
            ],
            "{plan:?}"
        );
        assert!(plan.remove.is_empty(), "{plan:?}");
    }

    #[test]
    fn prune_keeps_the_full_backup_under_a_fork() {
        // Issue 30: link 2 copied under a later name; keep-last 1 keeps the copy, whose
        // chain is a fork, and must keep what it stands on.
        let links = vec![
            link(1, None, "20261129-100000"),
            link(2, Some(1), "20261129-110000"),
            link(3, Some(2), "20261129-120000"),
            Link {
                path: PathBuf::from("alpha-20261129-130000.tar.zst.gpg"),
                ..link(2, Some(1), "20261129-130000")
            },
        ];
        let plan = prune(&links, 1, 0);
        assert!(plan.remove.is_empty(), "{plan:?}");
    }

    proptest! {
        #[test]
        fn prune_never_removes_what_a_kept_or_unjudged_backup_stands_on(
            links in backup_dirs(),
            keep_last in 0usize..6,
            keep_daily in 0usize..4,
        ) {
            let plan = prune(&links, keep_last, keep_daily);
            prop_assert_eq!(plan.keep.len() + plan.remove.len(), links.len());
            let kept = |l: &Link| plan.keep.contains(&l.path);
            for l in &links {
                // A backup whose chain does not check out is never judged, so never removed.
                if chain_of(l, &links).is_err() {
                    prop_assert!(kept(l), "{:?} could not be judged and was removed", l.path);
                }
                // Whatever a kept backup names as its parent stays, every copy of it.
                if kept(l) && let Some(parent) = l.parent {
                    for p in links.iter().filter(|p| p.digest == parent) {
                        prop_assert!(kept(p), "{:?} needs {:?}, removed", l.path, p.path);
                    }
                }
            }
            let remaining: Vec<Link> = links.iter().filter(|l| kept(l)).cloned().collect();
            for l in &remaining {
                // A kept backup whose chain was sound still restores from what is left.
                if chain_of(l, &links).is_ok() {
                    prop_assert!(chain_of(l, &remaining).is_ok(), "{:?} lost its chain", l.path);
                }
            }
            let mut newest: Vec<&Link> = links.iter().collect();
            newest.sort_by(|a, b| b.stamp.cmp(&a.stamp));
            for l in newest.iter().take(keep_last) {
                prop_assert!(plan.keep.contains(&l.path));
            }
        }
    }
}
