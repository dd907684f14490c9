//! The streaming archive validator (docs/backup-format.md, "The validator's rules"): the
//! seed's nine rules in their order, plus the seed's Go port's member cap and footer drain,
//! plus a total-size cap, with one change from the seed: **a symlink is data**. Its target
//! is stored and restored verbatim, absolute and dangling ones too, as GNU tar, restic and
//! borg keep them; the seed refused a whole backup for a venv's `python -> /usr/bin/python3`.
//! What a restore refuses is writing *through* a link: a member beneath a symlink or hard link
//! (rule 7), `..` or `/` in a member name (rule 2), a hard link to anything but a regular
//! file already restored (rule 9). The unpacker never follows a link it made, and nothing
//! after it does either, so where a restored link points is harmless.
//!
//! There is no decompression-ratio guard: a file of zeros (a `dd`-made image, a swap
//! file) compresses a million to one and is ordinary data. What protects a destination is
//! [`unpack`](crate::archive::unpack): long zero runs become holes, and the room left on
//! the destination's filesystem is checked as bytes are really written.
//!
//! It reads the compressed stream once, sniffs zstd or gzip by magic bytes, walks the tar
//! members without buffering their data (memory grows with the member count only: a key and
//! a link target per member), drains the stream to its very end so a corrupt footer or
//! trailing garbage fails, and then runs the whole-archive rules (1, 7, 8, 9) over the
//! member table. The first violation wins; every message names the rule and the path.
//!
//! Per member, in order: cap → rule 2 (control characters in names and hard link targets,
//! then escaping names) → rule 3 (duplicates) → rule 4 (types) → rule 5 (root is a
//! directory) → rule 6 (link targets: not empty; a hard link's names a member) → rule 9's
//! hard link half (it names a regular file restored before it). After the stream: rule 1
//! (empty) → rule 7 (nested beneath a link) → rule 8 (`home`, `home/agent`) → rule 9
//! (every member's parent is a directory of the archive).
//!
//! After rule 9: the block directory rule (`block_dirs`): a large file kept in blocks
//! holds exactly the blocks its index lists, of their lengths and hashes, as a restore
//! reassembles it. It reads the data of blocks and indexes as they stream past.
//!
//! [`walk`] is the same walk with a callback per member, so extraction applies exactly the
//! rules (and sees exactly the members) the validator saw.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;

mod block_dirs;

use crate::archive::blocks;
use crate::archive::chain_state::{ChainState, Node};
use crate::archive::compress::{Compression, sniff};
use crate::archive::incremental::{Code, Dumpdir};
use crate::archive::shown::shown_name;
use crate::archive::tarread::{Data, Member, MemberKind, TarError, TarReader};
use crate::layout;

/// Caps that keep a hostile archive from exhausting memory, disk or time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most members (the Go port's cap).
    pub max_members: u64,
    /// Most bytes of decompressed tar stream, and of data the members store (a sparse
    /// file counts by the bytes it really holds, not its logical size).
    pub max_total_bytes: u64,
    /// Largest runtime manifest read into memory.
    pub max_manifest_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_members: 1_000_000,
            max_total_bytes: 1 << 40,
            max_manifest_bytes: 64 << 10,
        }
    }
}

/// The rule a member broke. [`Rule::number`] is the seed's rule (docs/backup-format.md, "The
/// validator's rules"); 0 marks this project's caps and chain rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Empty,
    ControlCharacters,
    PathEscapes,
    Duplicate,
    SpecialFile,
    RootNotDirectory,
    LinkTargetEmpty,
    /// A hard link whose target is not a member's name (absolute, or with `..`).
    HardlinkTargetNotMember,
    NestedBeneathLink,
    HomeNotDirectory,
    HomeAgentNotDirectory,
    ThroughMissingOrNonDirectory,
    ParentNotDirectory,
    HardlinkNotRegularFile,
    HardlinkBeforeTarget,
    TooManyMembers,
    TooLarge,
    GlobalHeaders,
    /// A name no filesystem takes: a component over 255 bytes, a link target over 4095.
    NameTooLong,
    /// A dumpdir (GNU incremental listing) that is malformed, names something outside its
    /// directory, or would delete what every backup keeps.
    Dumpdir,
    /// A dumpdir that keeps entries from an earlier backup: this archive is one link of a
    /// chain and restores only after the links before it.
    IncrementalLink,
    /// A large file's block directory (`NAME.box-blocks/` with a block index) that a
    /// restore could not reassemble: a block missing, extra, of another length or hash
    /// than its index gives, or not a regular file; an index that does not parse.
    BlockDirectory,
}

impl Rule {
    /// The V4 rule number, or 0 for a cap or chain rule of this project.
    pub fn number(self) -> u8 {
        use Rule::*;
        match self {
            Empty => 1,
            ControlCharacters | PathEscapes => 2,
            Duplicate => 3,
            SpecialFile => 4,
            RootNotDirectory => 5,
            LinkTargetEmpty | HardlinkTargetNotMember => 6,
            NestedBeneathLink => 7,
            HomeNotDirectory | HomeAgentNotDirectory => 8,
            ThroughMissingOrNonDirectory
            | ParentNotDirectory
            | HardlinkNotRegularFile
            | HardlinkBeforeTarget => 9,
            TooManyMembers | TooLarge | GlobalHeaders | NameTooLong | Dumpdir | IncrementalLink
            | BlockDirectory => 0,
        }
    }

    /// The seed's wording of the rule (this project's for the rules it added).
    pub fn reason(self) -> &'static str {
        use Rule::*;
        match self {
            Empty => "archive is empty",
            ControlCharacters => "archive path contains control characters",
            PathEscapes => "archive path escapes its extraction root",
            Duplicate => "archive contains duplicate path",
            SpecialFile => "archive contains a device, FIFO, socket, or unknown special file",
            RootNotDirectory => "archive root member must be a real directory",
            LinkTargetEmpty => "archive link target is empty",
            HardlinkTargetNotMember => {
                "archive hardlink target is not a member name (absolute, or with ..)"
            }
            NestedBeneathLink => "archive member is nested beneath a link",
            HomeNotDirectory => "home must be a real directory",
            HomeAgentNotDirectory => "home/agent must be a real directory",
            ThroughMissingOrNonDirectory => {
                "archive path resolves through missing or non-directory member"
            }
            ParentNotDirectory => "archive member parent is not a directory",
            HardlinkNotRegularFile => "archive hardlink does not resolve to a regular file",
            HardlinkBeforeTarget => "archive hardlink comes before its target",
            TooManyMembers => "archive has too many members",
            TooLarge => "archive is too large",
            GlobalHeaders => "archive has too many or too large PAX global headers",
            NameTooLong => {
                "archive name is longer than a filesystem takes (255 bytes a component, 4095 a link target)"
            }
            Dumpdir => "archive has an unsafe or malformed incremental listing (dumpdir)",
            IncrementalLink => {
                "archive is an incremental backup that keeps files from earlier backups; restore it with its chain"
            }
            BlockDirectory => "archive has a large file in blocks that does not restore",
        }
    }
}

/// Why an archive was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveError {
    /// A safety rule failed: `unsafe archive: <rule>: <path>`.
    Unsafe { rule: Rule, path: String },
    /// The bytes are not a complete zstd/gzip tar stream.
    Invalid(String),
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Unsafe { rule, path } if path.is_empty() => {
                write!(f, "unsafe archive: {}", rule.reason())
            }
            ArchiveError::Unsafe { rule, path } => {
                write!(f, "unsafe archive: {}: {path}", rule.reason())
            }
            ArchiveError::Invalid(what) => write!(f, "not a valid archive: {what}"),
        }
    }
}

impl std::error::Error for ArchiveError {}

impl ArchiveError {
    fn unsafe_(rule: Rule, path: impl Into<String>) -> Self {
        ArchiveError::Unsafe {
            rule,
            path: path.into(),
        }
    }

    /// The rule, when this is a safety refusal.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            ArchiveError::Unsafe { rule, .. } => Some(*rule),
            ArchiveError::Invalid(_) => None,
        }
    }
}

/// What a valid archive holds, as far as the callers care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub compression: Compression,
    /// Members, the root included.
    pub members: u64,
    /// Regular files (hardlinks not counted).
    pub files: u64,
    /// Bytes of compressed input read (the whole stream).
    pub compressed_bytes: u64,
    /// Bytes of decompressed tar stream.
    pub tar_bytes: u64,
    /// The runtime manifest's bytes, when the archive has one (and it is not too large).
    pub manifest: Option<Vec<u8>>,
    /// A link of a chain restored over a tree that lacks entries it keeps (written by a
    /// box that skipped some symlinks): how many, and the first [`MISSING_SHOWN`] of them.
    /// They are not restored; a restore says so.
    pub kept_missing: KeptMissing,
}

/// How many missing kept entries a [`Report`] names.
pub const MISSING_SHOWN: usize = 20;

/// Entries a link keeps that the tree before it lacks (see [`Report::kept_missing`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptMissing {
    pub count: u64,
    pub first: Vec<String>,
}

impl KeptMissing {
    fn add(&mut self, key: &[u8]) {
        self.count += 1;
        if self.first.len() < MISSING_SHOWN {
            self.first.push(shown_key(key));
        }
    }

    /// One sentence for a restore's output, or `None` when nothing is missing.
    pub fn sentence(&self) -> Option<String> {
        (self.count > 0).then(|| {
            let more = self.count - self.first.len() as u64;
            format!(
                "{} entr{} kept from an earlier backup of the chain {} not in it (an older box skipped {}), and so not restored: {}{}",
                self.count,
                if self.count == 1 { "y" } else { "ies" },
                if self.count == 1 { "is" } else { "are" },
                if self.count == 1 { "it" } else { "them" },
                self.first.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            )
        })
    }
}

fn parts(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|b| *b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
}

/// The member key: the path with empty and `.` parts removed, `/`-joined; `""` is the root.
pub fn key_of(name: &[u8]) -> Vec<u8> {
    join(parts(name))
}

fn join<'a>(it: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in it {
        if !out.is_empty() {
            out.push(b'/');
        }
        out.extend_from_slice(p);
    }
    out
}

fn shown_key(key: &[u8]) -> String {
    if key.is_empty() {
        ".".to_string()
    } else {
        shown_name(key)
    }
}

fn has_control(bytes: &[u8]) -> bool {
    bytes.iter().any(|b| *b < 0x20 || *b == 0x7f)
}

/// The kind of a member, as far as validation cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink(Box<[u8]>),
    Hardlink(Box<[u8]>),
}

impl Kind {
    fn is_link(&self) -> bool {
        matches!(self, Kind::Symlink(_) | Kind::Hardlink(_))
    }

    /// What it is once restored: a hard link is one more name of a file.
    fn node(&self) -> Node {
        match self {
            Kind::Dir => Node::Dir,
            Kind::File | Kind::Hardlink(_) => Node::File,
            Kind::Symlink(_) => Node::Symlink,
        }
    }
}

/// The member-by-member state of a validation. Use [`validate`] or [`walk`] unless you drive
/// a tar reader yourself.
#[derive(Debug)]
pub struct Validator {
    limits: Limits,
    order: Vec<(Rc<[u8]>, Kind)>,
    index: HashMap<Rc<[u8]>, u32>,
    files: u64,
    bytes: u64,
    /// For a link of a chain: the tree the links before it built.
    prior: Option<Rc<ChainState>>,
    /// Entries this link keeps from `prior` (listed `N` in a dumpdir), with their kinds.
    kept: HashMap<Vec<u8>, Node>,
    /// Keys listed `D` in this link's dumpdirs: a kept entry's directories must all be.
    listed_dirs: HashSet<Vec<u8>>,
    /// Whether the root's member is a dumpdir (a link after the first must be one).
    root_listed: bool,
    /// Names listed `Y` (in this archive): one without a member is a ghost after it.
    included: Vec<Vec<u8>>,
    /// Kept entries that are ghosts in `prior` (a restore goes on without them; see
    /// [`Node::Ghost`]).
    kept_missing: KeptMissing,
    /// What this link shows of block directories, checked by [`Validator::finish`].
    block_dirs: block_dirs::BlockDirs,
    /// The block directories [`Validator::finish`] found and checked.
    checked_block_dirs: Vec<Vec<u8>>,
}

impl Validator {
    pub fn new(limits: Limits) -> Self {
        Validator {
            limits,
            order: Vec::new(),
            index: HashMap::new(),
            files: 0,
            bytes: 0,
            prior: None,
            kept: HashMap::new(),
            listed_dirs: HashSet::new(),
            root_listed: false,
            included: Vec::new(),
            kept_missing: KeptMissing::default(),
            block_dirs: block_dirs::BlockDirs::default(),
            checked_block_dirs: Vec::new(),
        }
    }

    /// A validator for the next link of a chain whose earlier links built `prior`.
    pub fn after(limits: Limits, prior: Rc<ChainState>) -> Self {
        let mut v = Self::new(limits);
        v.prior = Some(prior);
        v
    }

    /// A dumpdir of the directory at `key`: standalone, nothing may be kept from an
    /// earlier backup; in a chain, each kept (`N`) entry must be a file or symlink of the
    /// tree the earlier links built, and is then part of this link's tree. Returns the
    /// kept names that are ghosts there, which a restore leaves out (a strict prior refuses
    /// them); a name the tree never had is refused.
    fn listing(&mut self, key: &[u8], listing: &Dumpdir) -> Result<Vec<Vec<u8>>, ArchiveError> {
        if key.is_empty() {
            self.root_listed = true;
        }
        // One buffer for every entry's path: a link lists every entry of every directory,
        // and most of them only need a lookup.
        let mut path = key.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        let dir_len = path.len();
        let mut missing = Vec::new();
        for (code, name) in listing.entries() {
            path.truncate(dir_len);
            path.extend_from_slice(name);
            match code {
                Code::Directory => {
                    self.listed_dirs.insert(path.clone());
                }
                Code::Included => self.included.push(path.clone()),
                Code::Unchanged => {
                    if self.index.contains_key(path.as_slice()) {
                        return Err(ArchiveError::unsafe_(Rule::Duplicate, shown_key(&path)));
                    }
                    let Some(prior) = &self.prior else {
                        return Err(ArchiveError::unsafe_(
                            Rule::IncrementalLink,
                            format!("{} is kept from an earlier backup", shown_key(&path)),
                        ));
                    };
                    match prior.get(&path) {
                        Some(Node::Dir) => {
                            return Err(ArchiveError::unsafe_(
                                Rule::IncrementalLink,
                                format!(
                                    "{} is kept as a file, but the backup before has a directory there",
                                    shown_key(&path)
                                ),
                            ));
                        }
                        Some(Node::Ghost) if prior.is_strict() => {
                            return Err(ArchiveError::unsafe_(
                                Rule::IncrementalLink,
                                format!(
                                    "{} is kept from the backup before, which lists it but does not hold it",
                                    shown_key(&path)
                                ),
                            ));
                        }
                        Some(Node::Ghost) => {
                            // Still a ghost after this link: a later one may keep it too.
                            self.kept.insert(path.clone(), Node::Ghost);
                            self.kept_missing.add(&path);
                            missing.push(name.clone());
                        }
                        Some(node) => {
                            self.kept.insert(path.clone(), node);
                        }
                        None => {
                            return Err(ArchiveError::unsafe_(
                                Rule::IncrementalLink,
                                format!(
                                    "{} is kept from the backup before, which has no such file",
                                    shown_key(&path)
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(missing)
    }

    /// The tree after this link: its members and what it kept (moved, not copied: it is
    /// most of the tree), and a ghost for each name it lists as in it without holding it
    /// (a restore keeps what an earlier link left there, as GNU tar does).
    pub fn into_state(self) -> ChainState {
        let mut paths = self.kept;
        paths.reserve(self.order.len());
        for (key, kind) in &self.order {
            paths.insert(key.to_vec(), kind.node());
        }
        for key in self.included {
            if !self.index.contains_key(key.as_slice()) {
                let before = self.prior.as_ref().and_then(|p| p.get(&key));
                paths.entry(key).or_insert(before.unwrap_or(Node::Ghost));
            }
        }
        for dir in self.checked_block_dirs {
            let mut index = dir;
            index.extend_from_slice(b"/");
            index.extend_from_slice(blocks::INDEX_NAME.as_bytes());
            paths.insert(index, Node::BlockIndex);
        }
        ChainState::plain(paths)
    }

    /// Checks one member (rules 2 to 6, the hard link half of rule 9, and the caps) and
    /// records it. `stored` is the data the member holds in the archive (a sparse file's
    /// runs, not its logical size). Returns its key.
    pub fn observe(
        &mut self,
        name: &[u8],
        entry_type: tar::EntryType,
        link: Option<&[u8]>,
        stored: u64,
    ) -> Result<Vec<u8>, ArchiveError> {
        if self.order.len() as u64 >= self.limits.max_members {
            return Err(ArchiveError::unsafe_(
                Rule::TooManyMembers,
                format!("more than {} members", self.limits.max_members),
            ));
        }
        self.bytes = self.bytes.saturating_add(stored);
        if self.bytes > self.limits.max_total_bytes {
            return Err(ArchiveError::unsafe_(
                Rule::TooLarge,
                format!(
                    "members exceed {} bytes at {}",
                    self.limits.max_total_bytes,
                    shown_name(name)
                ),
            ));
        }
        // Rule 2. A symlink's target is data, any bytes; a hard link's is a member name.
        let link = link.filter(|_| entry_type.is_symlink() || entry_type.is_hard_link());
        let hard_target = link.filter(|_| entry_type.is_hard_link());
        if has_control(name) || hard_target.is_some_and(has_control) {
            return Err(ArchiveError::unsafe_(
                Rule::ControlCharacters,
                shown_name(name),
            ));
        }
        if escapes(name) {
            return Err(ArchiveError::unsafe_(Rule::PathEscapes, shown_name(name)));
        }
        // No box saved such a name (its filesystem would not take it), and no restore
        // could write it: refused before anything is created.
        if name.split(|b| *b == b'/').any(|part| part.len() > NAME_MAX)
            || link.is_some_and(|l| l.len() > LINK_MAX)
        {
            return Err(ArchiveError::unsafe_(Rule::NameTooLong, shown_name(name)));
        }
        // Rule 3, and a member a dumpdir says is kept from an earlier backup: one path
        // would be both (a directory member where a kept symlink is, written through it).
        let key = key_of(name);
        if self.index.contains_key(key.as_slice()) || self.kept.contains_key(&key) {
            return Err(ArchiveError::unsafe_(Rule::Duplicate, shown_key(&key)));
        }
        // Rule 4.
        let kind = if entry_type.is_dir() {
            Kind::Dir
        } else if entry_type.is_file() || entry_type.is_contiguous() || entry_type.is_gnu_sparse() {
            Kind::File
        } else if entry_type.is_symlink() {
            Kind::Symlink(link.unwrap_or_default().into())
        } else if entry_type.is_hard_link() {
            Kind::Hardlink(link.unwrap_or_default().into())
        } else {
            return Err(ArchiveError::unsafe_(Rule::SpecialFile, shown_name(name)));
        };
        // Rule 5.
        if key.is_empty() && kind != Kind::Dir {
            return Err(ArchiveError::unsafe_(
                Rule::RootNotDirectory,
                shown_name(name),
            ));
        }
        // Rule 6, and rule 9 for a hard link: it names a regular file restored before it
        // (a member, or a file this link keeps), so `link(2)` never goes through a symlink
        // and never reaches outside the tree.
        if let Kind::Symlink(target) | Kind::Hardlink(target) = &kind
            && target.is_empty()
        {
            return Err(ArchiveError::unsafe_(
                Rule::LinkTargetEmpty,
                shown_name(name),
            ));
        }
        if let Kind::Hardlink(target) = &kind {
            let shown_pair = || format!("{} -> {}", shown_name(name), shown_name(target));
            if escapes(target) {
                return Err(ArchiveError::unsafe_(
                    Rule::HardlinkTargetNotMember,
                    shown_pair(),
                ));
            }
            match self.node(&key_of(target)) {
                // A block index is a regular file too (the block rule refuses a link to it).
                Some(Node::File | Node::BlockIndex) => {}
                None => {
                    return Err(ArchiveError::unsafe_(
                        Rule::HardlinkBeforeTarget,
                        shown_pair(),
                    ));
                }
                Some(_) => {
                    return Err(ArchiveError::unsafe_(
                        Rule::HardlinkNotRegularFile,
                        shown_pair(),
                    ));
                }
            }
        }
        if kind == Kind::File {
            self.files += 1;
        }
        let rc: Rc<[u8]> = key.as_slice().into();
        self.index.insert(rc.clone(), self.order.len() as u32);
        self.order.push((rc, kind));
        Ok(key)
    }

    /// The whole-archive rules: 1, 7, 8, 9, and the block directory rule.
    pub fn finish(&mut self) -> Result<(), ArchiveError> {
        // Rule 1.
        if self.order.is_empty() {
            return Err(ArchiveError::unsafe_(Rule::Empty, ""));
        }
        // Rule 7: nothing is written through a link (a member's own, or one this link
        // keeps).
        for (key, _) in &self.order {
            let mut cut = 0;
            while let Some(slash) = key[cut..].iter().position(|b| *b == b'/') {
                let prefix = &key[..cut + slash];
                let through_link = match self.member(prefix) {
                    Some(kind) => kind.is_link(),
                    None => self.kept.get(prefix) == Some(&Node::Symlink),
                };
                if through_link {
                    return Err(ArchiveError::unsafe_(
                        Rule::NestedBeneathLink,
                        shown_key(key),
                    ));
                }
                cut += slash + 1;
            }
        }
        // A kept entry survives only if every directory above it is kept too: a directory
        // its parent's dumpdir leaves out is deleted, with all in it, before it is made again.
        // A link keeps most of the tree, in a few directories: each directory's ancestry
        // is checked once.
        // (The kept map is unordered: the smallest violating key is reported, so the same
        // archive always gives the same error.)
        let mut kept_dirs: HashSet<&[u8]> = HashSet::new();
        let mut first: Option<(&[u8], Vec<u8>)> = None;
        for key in self.kept.keys() {
            let Some(cut) = key.iter().rposition(|b| *b == b'/') else {
                continue;
            };
            if kept_dirs.contains(&key[..cut]) {
                continue;
            }
            let comps: Vec<&[u8]> = parts(key).collect();
            let unlisted = (1..comps.len())
                .map(|n| join(comps[..n].iter().copied()))
                .find(|dir| !self.listed_dirs.contains(dir));
            match unlisted {
                Some(dir) => {
                    if first.as_ref().is_none_or(|(k, _)| key.as_slice() < *k) {
                        first = Some((key, dir));
                    }
                }
                None => {
                    kept_dirs.insert(&key[..cut]);
                }
            }
        }
        if let Some((key, dir)) = first {
            return Err(ArchiveError::unsafe_(
                Rule::IncrementalLink,
                format!(
                    "{} is kept, but its directory {} is not",
                    shown_key(key),
                    shown_key(&dir)
                ),
            ));
        }
        if self.prior.is_some() && !self.root_listed {
            return Err(ArchiveError::unsafe_(
                Rule::IncrementalLink,
                "a link after the first of a chain whose root is not an incremental listing: not a backup of that chain",
            ));
        }
        // Rule 8.
        if self.node(b"home") != Some(Node::Dir) {
            return Err(ArchiveError::unsafe_(Rule::HomeNotDirectory, "home"));
        }
        if self.node(layout::HOME.as_bytes()) != Some(Node::Dir) {
            return Err(ArchiveError::unsafe_(
                Rule::HomeAgentNotDirectory,
                layout::HOME,
            ));
        }
        // Rule 9: every member's parent is a directory of the archive (so, by the same rule
        // for that directory, every ancestor is).
        for (key, _) in &self.order {
            let Some(cut) = key.iter().rposition(|b| *b == b'/') else {
                continue;
            };
            match self.node(&key[..cut]) {
                Some(Node::Dir) => {}
                Some(_) => {
                    return Err(ArchiveError::unsafe_(
                        Rule::ParentNotDirectory,
                        shown_key(key),
                    ));
                }
                None => {
                    // Name the topmost missing directory: that is what the archive lacks.
                    let mut missing = &key[..cut];
                    let mut at = 0;
                    while let Some(slash) = key[at..cut].iter().position(|b| *b == b'/') {
                        if self.node(&key[..at + slash]).is_none() {
                            missing = &key[..at + slash];
                            break;
                        }
                        at += slash + 1;
                    }
                    return Err(ArchiveError::unsafe_(
                        Rule::ThroughMissingOrNonDirectory,
                        shown_key(missing),
                    ));
                }
            }
        }
        let checked = self.block_dirs.finish(self.prior.as_deref())?;
        // A restore refuses a block with a second link, so nothing links into one.
        let checked_set: HashSet<&[u8]> = checked.iter().map(Vec::as_slice).collect();
        for (key, kind) in &self.order {
            if let Kind::Hardlink(target) = kind {
                let target = key_of(target);
                let dir = target
                    .iter()
                    .rposition(|b| *b == b'/')
                    .map_or(&b""[..], |cut| &target[..cut]);
                if checked_set.contains(dir) {
                    return Err(ArchiveError::unsafe_(
                        Rule::BlockDirectory,
                        format!(
                            "{} is a hard link into the block directory {}",
                            shown_key(key),
                            shown_key(dir)
                        ),
                    ));
                }
            }
        }
        self.checked_block_dirs = checked;
        Ok(())
    }

    /// Where a hard link's target leads among what is restored so far: the key of a regular
    /// file (a member or a kept file), or `None` when it names none ([`Validator::observe`]
    /// refuses the member then).
    pub fn resolve_hardlink(&self, target: &[u8]) -> Option<Vec<u8>> {
        let key = key_of(target);
        matches!(self.node(&key), Some(Node::File | Node::BlockIndex)).then_some(key)
    }

    fn member(&self, key: &[u8]) -> Option<&Kind> {
        self.index.get(key).map(|i| &self.order[*i as usize].1)
    }

    /// What the tree after this link holds at `key` so far: a member, or what it keeps.
    fn node(&self, key: &[u8]) -> Option<Node> {
        if key.is_empty() && !self.index.contains_key(key) {
            // The root is implicitly a directory when the archive has no `./` member.
            return Some(Node::Dir);
        }
        self.member(key)
            .map(Kind::node)
            .or_else(|| self.kept.get(key).copied())
            .filter(|n| *n != Node::Ghost)
    }

    pub fn members(&self) -> u64 {
        self.order.len() as u64
    }

    pub fn files(&self) -> u64 {
        self.files
    }
}

/// The longest file name component Linux and macOS filesystems take (`NAME_MAX`).
const NAME_MAX: usize = 255;
/// The longest symlink target `symlink(2)` takes (`PATH_MAX` less its NUL).
const LINK_MAX: usize = 4095;

/// Whether a member name (or a hard link target, which names a member) leaves the root.
fn escapes(name: &[u8]) -> bool {
    name.starts_with(b"/") || name.split(|b| *b == b'/').any(|p| p == b"..")
}

/// Shared state between the counting readers and the walk.
#[derive(Default)]
struct Meter {
    compressed: Cell<u64>,
    decompressed: Cell<u64>,
    violation: RefCell<Option<ArchiveError>>,
}

struct CountIn<R> {
    inner: R,
    meter: Rc<Meter>,
}

impl<R: Read> Read for CountIn<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.meter
            .compressed
            .set(self.meter.compressed.get() + n as u64);
        Ok(n)
    }
}

struct CountOut<R> {
    inner: R,
    meter: Rc<Meter>,
    limits: Limits,
}

impl<R: Read> Read for CountOut<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let m = &self.meter;
        let out = m.decompressed.get() + n as u64;
        m.decompressed.set(out);
        let violation = (out > self.limits.max_total_bytes).then(|| {
            ArchiveError::unsafe_(
                Rule::TooLarge,
                format!(
                    "more than {} bytes decompressed",
                    self.limits.max_total_bytes
                ),
            )
        });
        if let Some(v) = violation {
            *m.violation.borrow_mut() = Some(v);
            return Err(io::Error::other("archive limit exceeded"));
        }
        Ok(n)
    }
}

/// How much of a watched member's data is read at once after the callback.
const DRAIN_BUF: usize = 256 << 10;

/// A member's data as the callback reads it, shown to the block rule when it watches the
/// member (a block's bytes are hashed, an index's kept).
struct Watched<'a, R> {
    inner: R,
    watch: Option<&'a mut block_dirs::Watch>,
}

impl<R: Read> Read for Watched<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(watch) = &mut self.watch {
            watch.update(&buf[..n]);
        }
        Ok(n)
    }
}

impl<R: Read> Watched<'_, R> {
    /// Reads the rest of the data.
    fn drain(&mut self, buf: &mut [u8]) -> io::Result<()> {
        loop {
            match self.read(buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Why a [`walk`] stopped.
#[derive(Debug)]
pub enum WalkError<E> {
    Archive(ArchiveError),
    Callback(E),
}

impl<E> From<ArchiveError> for WalkError<E> {
    fn from(e: ArchiveError) -> Self {
        WalkError::Archive(e)
    }
}

fn invalid(what: &str, e: &io::Error) -> ArchiveError {
    // The tar and decompression errors quote raw header bytes ("numeric field was not a
    // number: <bytes>", a member's path): escape them, or a hostile archive writes control
    // sequences to the terminal through our error message.
    ArchiveError::Invalid(format!("{what}: {}", shown_name(e.to_string().as_bytes())))
}

/// One member as the callback of [`walk`] sees it: the decoded headers, the hardlink's
/// target as the validator resolved it (through the links seen so far), and the stored
/// data as a reader (packed, for a sparse file: see [`Member::sparse`]).
pub struct Entry<'a> {
    pub member: &'a Member,
    /// For a hardlink: the key of the regular file it resolves to, when the members seen
    /// so far resolve it (rule 9 refuses the archive otherwise, at its end).
    pub hardlink_target: Option<Vec<u8>>,
    /// For a dumpdir member (a directory of a chain-mode archive): its checked listing, by
    /// which a restore of a chain removes what the directory no longer holds.
    pub dumpdir: Option<&'a Dumpdir>,
    data: &'a mut dyn Read,
}

impl Read for Entry<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.data.read(buf)
    }
}

/// Walks a compressed tar stream: sniffs the compression, checks every member (rules 2–6,
/// caps) *before* handing it to `on_member` with its key, drains the stream to its end
/// (footer, checksum, trailing bytes), then applies rules 1, 7, 8 and 9.
///
/// The tar is read by [`tarread`](crate::archive::tarread), as GNU tar reads it. The
/// callback may read the entry's data; whatever it leaves unread is skipped. Any read
/// error of `input` shows up as [`ArchiveError::Invalid`]: a caller whose input can fail
/// for its own reasons (decryption) should record those itself and check first.
pub fn walk<R, E, F>(input: R, limits: &Limits, on_member: F) -> Result<Report, WalkError<E>>
where
    R: Read,
    F: FnMut(&mut Entry<'_>, &[u8]) -> Result<(), E>,
{
    walk_link(input, limits, None, on_member).map(|(report, _)| report)
}

/// [`walk`] over one link of a chain: `prior` is the tree the links before it built
/// (`None` for a standalone archive or the first link). Returns the tree after it too.
pub fn walk_link<R, E, F>(
    input: R,
    limits: &Limits,
    prior: Option<Rc<ChainState>>,
    mut on_member: F,
) -> Result<(Report, ChainState), WalkError<E>>
where
    R: Read,
    F: FnMut(&mut Entry<'_>, &[u8]) -> Result<(), E>,
{
    let meter = Rc::new(Meter::default());
    let input = CountIn {
        inner: input,
        meter: meter.clone(),
    };
    let (compression, decoder) = decoder(input)?;
    let counted = CountOut {
        inner: decoder,
        meter: meter.clone(),
        limits: limits.clone(),
    };
    let mut reader = TarReader::new(counted);
    let mut validator = match prior {
        Some(prior) => Validator::after(limits.clone(), prior),
        None => Validator::new(limits.clone()),
    };
    let mut drain_buf: Option<Vec<u8>> = None;
    let fail = |e: TarError, global_cap_broken: bool| -> ArchiveError {
        match meter.violation.borrow_mut().take() {
            Some(v) => v,
            None if global_cap_broken => ArchiveError::unsafe_(Rule::GlobalHeaders, e.0),
            None => ArchiveError::Invalid(e.0),
        }
    };
    loop {
        let member = match reader.next_member() {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => return Err(fail(e, reader.global_cap_broken).into()),
        };
        // Global headers count with the members: each one is work for every later member.
        if validator.members() + reader.global_headers() >= limits.max_members {
            return Err(ArchiveError::unsafe_(
                Rule::TooManyMembers,
                format!(
                    "more than {} members and PAX global headers",
                    limits.max_members
                ),
            )
            .into());
        }
        let link = matches!(member.kind, MemberKind::Symlink | MemberKind::Hardlink)
            .then_some(member.link.as_slice());
        let key = validator.observe(&member.name, member.kind.entry_type(), link, member.stored)?;
        let mut listing = None;
        if member.dumpdir {
            // Read here, so every caller sees a directory whose listing passed.
            let read = read_dumpdir(
                &mut Data {
                    reader: &mut reader,
                },
                &member,
                &key,
            )?;
            let missing = validator.listing(&key, &read)?;
            // What the tree before lacks is not kept: the callback (a restore) neither
            // looks for it nor keeps it from a purge.
            let kept = if missing.is_empty() {
                read
            } else {
                read.without(&missing)
            };
            validator.block_dirs.listing(&key, &kept);
            listing = Some(kept);
        }
        let mut watch = validator.block_dirs.member(&key, &member)?;
        let hardlink_target = match member.kind {
            MemberKind::Hardlink => validator.resolve_hardlink(&member.link),
            _ => None,
        };
        let mut data = Watched {
            inner: Data {
                reader: &mut reader,
            },
            watch: watch.as_mut(),
        };
        let mut entry = Entry {
            member: &member,
            hardlink_target,
            dumpdir: listing.as_ref(),
            data: &mut data,
        };
        let outcome = on_member(&mut entry, &key);
        if let Some(v) = meter.violation.borrow_mut().take() {
            return Err(v.into());
        }
        outcome.map_err(WalkError::Callback)?;
        if data.watch.is_some() {
            // What the callback left unread streams past the watch too.
            let buf = drain_buf.get_or_insert_with(|| vec![0u8; DRAIN_BUF]);
            if let Err(e) = data.drain(buf) {
                return Err(match meter.violation.borrow_mut().take() {
                    Some(v) => v,
                    None => invalid("corrupt tar or compressed stream", &e),
                }
                .into());
            }
        }
        if let Some(watched) = watch {
            validator.block_dirs.read(&key, watched)?;
        }
    }
    // Drain: everything after the end-of-archive marker must be zero padding, and reading
    // it to EOF makes the decoder check the footer (gzip CRC32/ISIZE, zstd checksum) and
    // reject trailing garbage.
    let mut rest = reader.into_inner();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match rest.read(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                return Err(match meter.violation.borrow_mut().take() {
                    Some(v) => v,
                    None => invalid("corrupt compressed stream", &e),
                }
                .into());
            }
        };
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|b| *b != 0) {
            return Err(
                ArchiveError::Invalid("data after the end-of-archive marker".to_string()).into(),
            );
        }
    }
    validator.finish()?;
    let report = Report {
        compression,
        members: validator.members(),
        files: validator.files(),
        compressed_bytes: meter.compressed.get(),
        tar_bytes: meter.decompressed.get(),
        manifest: None,
        kept_missing: validator.kept_missing.clone(),
    };
    let state = if validator.prior.is_some() || validator.root_listed {
        validator.into_state()
    } else {
        // Not a chain-mode archive: no next link can build on it.
        ChainState::default()
    };
    Ok((report, state))
}

/// Most bytes of one dumpdir read into memory (a directory of a million entries).
pub const MAX_DUMPDIR_BYTES: u64 = 64 << 20;

/// A dumpdir member's listing: well formed, names inside its directory, the home kept
/// (box_proto::archive::incremental). What it keeps from earlier backups is the
/// validator's to judge ([`Validator::listing`]): a standalone archive keeps nothing (alone
/// it would silently miss every unchanged file).
fn read_dumpdir(
    data: &mut impl Read,
    member: &Member,
    key: &[u8],
) -> Result<Dumpdir, ArchiveError> {
    if member.stored > MAX_DUMPDIR_BYTES {
        return Err(ArchiveError::unsafe_(
            Rule::Dumpdir,
            format!("{}: more than {MAX_DUMPDIR_BYTES} bytes", shown_key(key)),
        ));
    }
    let mut bytes = Vec::new();
    data.take(MAX_DUMPDIR_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid("cannot read a dumpdir", &e))?;
    Dumpdir::parse(&bytes)
        .and_then(|d| d.check_at(key).map(|()| d))
        .map_err(|e| ArchiveError::unsafe_(Rule::Dumpdir, format!("{}: {e}", shown_key(key))))
}

/// The compression of a stream (by its magic bytes) and a reader of what it holds.
fn decoder<'a, R: Read + 'a>(
    mut input: R,
) -> Result<(Compression, Box<dyn Read + 'a>), ArchiveError> {
    let mut head = Vec::with_capacity(8);
    (&mut input)
        .take(4)
        .read_to_end(&mut head)
        .map_err(|e| invalid("cannot read the compressed stream", &e))?;
    let compression = sniff(&head).ok_or_else(|| {
        ArchiveError::Invalid(if head.is_empty() {
            "the stream is empty".to_string()
        } else {
            "neither zstd nor gzip data (unknown magic bytes)".to_string()
        })
    })?;
    let source = io::Cursor::new(head).chain(input);
    let decoder: Box<dyn Read + 'a> = match compression {
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::new(source)
                .map_err(|e| invalid("cannot start zstd", &e))?;
            // 128 MiB windows at most (zstd's own default limit), whatever the frame asks.
            d.window_log_max(27)
                .map_err(|e| invalid("cannot configure zstd", &e))?;
            Box::new(d)
        }
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(source)),
    };
    Ok((compression, decoder))
}

/// The runtime manifest's bytes, read by walking members until it comes, checking no rule:
/// how a restore learns which chain a link belongs to before it validates the chain link
/// by link (which then checks the same manifest again, under every rule and the MDC).
pub fn peek_manifest<R: Read>(input: R, limits: &Limits) -> Result<Option<Vec<u8>>, ArchiveError> {
    let (_, decoder) = decoder(input)?;
    let mut reader = TarReader::new(decoder);
    while let Some(member) = reader
        .next_member()
        .map_err(|e| ArchiveError::Invalid(e.0))?
    {
        if key_of(&member.name) == layout::RUNTIME_MANIFEST.as_bytes()
            && member.kind == MemberKind::File
            && member.sparse.is_none()
            && member.size <= limits.max_manifest_bytes
        {
            let mut bytes = Vec::new();
            Data {
                reader: &mut reader,
            }
            .read_to_end(&mut bytes)
            .map_err(|e| invalid("cannot read the runtime manifest", &e))?;
            return Ok(Some(bytes));
        }
    }
    Ok(None)
}

/// Validates a compressed tar stream without extracting anything, and returns what it holds
/// (including the runtime manifest's bytes, when present and small).
pub fn validate<R: Read>(input: R, limits: &Limits) -> Result<Report, ArchiveError> {
    validate_link(input, limits, None).map(|(report, _)| report)
}

/// [`validate`] for one link of a chain (see [`walk_link`]); returns the tree after it.
pub fn validate_link<R: Read>(
    input: R,
    limits: &Limits,
    prior: Option<Rc<ChainState>>,
) -> Result<(Report, ChainState), ArchiveError> {
    let mut manifest = None;
    let result = walk_link(
        input,
        limits,
        prior,
        |entry, key| -> Result<(), io::Error> {
            if key == layout::RUNTIME_MANIFEST.as_bytes()
                && entry.member.kind == MemberKind::File
                && entry.member.sparse.is_none()
                && entry.member.size <= limits.max_manifest_bytes
            {
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes)?;
                manifest = Some(bytes);
            }
            Ok(())
        },
    );
    match result {
        Ok((mut report, state)) => {
            report.manifest = manifest;
            Ok((report, state))
        }
        Err(WalkError::Archive(e)) => Err(e),
        Err(WalkError::Callback(e)) => Err(invalid("corrupt tar or compressed stream", &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_tar(members: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, link) in members {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o755);
            h.set_size(0);
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name);
            gnu.linkname[..link.len()].copy_from_slice(link);
            h.set_cksum();
            b.append(&h, io::empty()).unwrap();
        }
        let tar = b.into_inner().unwrap();
        zstd::encode_all(tar.as_slice(), 3).unwrap()
    }

    const D: tar::EntryType = tar::EntryType::Directory;
    const F: tar::EntryType = tar::EntryType::Regular;
    const L: tar::EntryType = tar::EntryType::Symlink;

    fn base() -> Vec<(&'static [u8], tar::EntryType, &'static [u8])> {
        vec![
            (b"./", D, b""),
            (b"./home/", D, b""),
            (b"./home/agent/", D, b""),
        ]
    }

    /// Directory member names and their dumpdir listings.
    type Listings<'a> = &'a [(&'a [u8], &'a [u8])];

    /// A tar whose directories are dumpdirs with the given listings (GNU format).
    fn dumpdir_tar(dirs: Listings<'_>) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, listing) in dirs {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::new(b'D'));
            h.set_mode(0o755);
            h.set_size(listing.len() as u64);
            h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
            h.set_cksum();
            b.append(&h, *listing).unwrap();
        }
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap()
    }

    /// A tar of (name, type flag, data): a dumpdir's listing, a file's bytes, or a
    /// symlink's or hard link's target.
    fn link_tar(members: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, flag, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::new(*flag));
            h.set_mode(0o755);
            let is_link = matches!(flag, b'1' | b'2');
            let stored: &[u8] = if is_link { b"" } else { data };
            h.set_size(stored.len() as u64);
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name);
            if is_link {
                gnu.linkname[..data.len()].copy_from_slice(data);
            }
            h.set_cksum();
            b.append(&h, stored).unwrap();
        }
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap()
    }

    fn top(agent: &'static [u8]) -> Vec<(&'static [u8], u8, &'static [u8])> {
        vec![
            (b"./", b'D', b"Dhome\0\0"),
            (b"./home/", b'D', b"Dagent\0\0"),
            (b"./home/agent/", b'D', agent),
        ]
    }

    #[test]
    fn a_link_is_checked_against_the_tree_its_chain_built() {
        let mut full = top(b"Ya\0Dsub\0\0");
        full.push((b"./home/agent/a", b'0', b"a\n"));
        full.push((b"./home/agent/sub/", b'D', b"Yb\0\0"));
        full.push((b"./home/agent/sub/b", b'0', b"b\n"));
        let limits = Limits::default();
        let (_, after_full) = validate_link(link_tar(&full).as_slice(), &limits, None).unwrap();
        assert_eq!(after_full.len(), 6, "{after_full:?}");
        let prior = Rc::new(after_full);

        // Keeps a and sub/b, adds a link to the kept a: valid after the full one only.
        let mut inc = top(b"Na\0Yto-a\0Dsub\0\0");
        inc.push((b"./home/agent/to-a", b'2', b"a"));
        inc.push((b"./home/agent/sub/", b'D', b"Nb\0\0"));
        let inc = link_tar(&inc);
        let (_, after) = validate_link(inc.as_slice(), &limits, Some(prior.clone())).unwrap();
        assert_eq!(after.len(), 7);
        // A hard link to a file it keeps: that file is restored before it.
        let mut hard = top(b"Na\0Yh\0Dsub\0\0");
        hard.push((b"./home/agent/h", b'1', b"home/agent/a"));
        hard.push((b"./home/agent/sub/", b'D', b"Nb\0\0"));
        validate_link(link_tar(&hard).as_slice(), &limits, Some(prior.clone())).unwrap();
        let alone = validate(inc.as_slice(), &limits).unwrap_err();
        assert_eq!(alone.rule(), Some(Rule::IncrementalLink), "{alone}");

        let strict = Rc::new((*prior).clone().strict());
        let refused = |members: &[(&[u8], u8, &[u8])]| {
            validate_link(link_tar(members).as_slice(), &limits, Some(strict.clone())).unwrap_err()
        };
        // Keeps what the chain never had: the side that writes a link refuses it…
        let e = refused(&top(b"Nghost\0Na\0Dsub\0\0"));
        assert!(
            e.to_string()
                .contains("home/agent/ghost is kept from the backup before"),
            "{e}"
        );
        // …and so does every restore: no listing before ever had it.
        let mut m = top(b"Nghost\0Na\0Dsub\0\0");
        m.push((b"./home/agent/sub/", b'D', b"Nb\0\0"));
        let e = validate_link(link_tar(&m).as_slice(), &limits, Some(prior.clone())).unwrap_err();
        assert!(e.to_string().contains("which has no such file"), "{e}");
        // A name a listing had without holding it (what box wrote for a symlink it skipped
        // before issue 30) is a ghost: kept again by the next links, which restore without
        // it and say so, while the side writing a link refuses it.
        let mut skipped = top(b"Ya\0Ypython\0\0");
        skipped.push((b"./home/agent/a", b'0', b"a"));
        let (_, with_ghost) = validate_link(link_tar(&skipped).as_slice(), &limits, None).unwrap();
        assert_eq!(with_ghost.get(b"home/agent/python"), Some(Node::Ghost));
        let mut ghost = Rc::new(with_ghost);
        for _ in 0..2 {
            let keeps = link_tar(&top(b"Na\0Npython\0\0"));
            let (report, after) =
                validate_link(keeps.as_slice(), &limits, Some(ghost.clone())).unwrap();
            assert_eq!(report.kept_missing.count, 1);
            assert!(
                report
                    .kept_missing
                    .sentence()
                    .unwrap()
                    .contains("home/agent/python"),
                "{:?}",
                report.kept_missing
            );
            assert_eq!(after.get(b"home/agent/python"), Some(Node::Ghost));
            assert_eq!(after.get(b"home/agent/a"), Some(Node::File));
            let strict = Rc::new((*ghost).clone().strict());
            let e = validate_link(keeps.as_slice(), &limits, Some(strict)).unwrap_err();
            assert!(
                e.to_string().contains("lists it but does not hold it"),
                "{e}"
            );
            ghost = Rc::new(after);
        }
        // Keeps a file inside a directory it deletes (sub not listed by its parent).
        let mut m = top(b"Na\0\0");
        m.push((b"./home/agent/sub/", b'D', b"Nb\0\0"));
        let e = refused(&m);
        assert!(
            e.to_string()
                .contains("its directory home/agent/sub is not"),
            "{e}"
        );
        // A member beneath a kept symlink would be written through it.
        let mut with_link = top(b"Ya\0Ylink\0\0");
        with_link.push((b"./home/agent/a", b'0', b"a"));
        with_link.push((b"./home/agent/link", b'2', b"/etc"));
        let (_, linked) = validate_link(link_tar(&with_link).as_slice(), &limits, None).unwrap();
        let mut m = top(b"Na\0Nlink\0\0");
        m.push((b"./home/agent/link/", b'D', b"Yshadow\0\0"));
        m.push((b"./home/agent/link/shadow", b'0', b"x"));
        let e = validate_link(link_tar(&m).as_slice(), &limits, Some(Rc::new(linked))).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::Duplicate), "{e}");
        // And with the member first, the listing after it.
        let mut m = top(b"Na\0Nlink\0\0");
        m.insert(2, (b"./home/agent/link/", b'D', b"Yshadow\0\0"));
        let e = validate_link(link_tar(&m).as_slice(), &limits, Some(prior.clone())).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::Duplicate), "{e}");
        // A link after the first must be an incremental listing itself.
        let plain = raw_tar(&base());
        let e = validate_link(plain.as_slice(), &limits, Some(prior.clone())).unwrap_err();
        assert!(e.to_string().contains("not a backup of that chain"), "{e}");
    }

    #[test]
    fn dumpdirs_are_directories_whose_listing_is_checked() {
        let home_kept: [(&[u8], &[u8]); 3] = [
            (b"./", b"Dhome\0Dlogs\0\0"),
            (b"./home/", b"Dagent\0\0"),
            (b"./home/agent/", b"Ya\0\0"),
        ];
        let r = validate(dumpdir_tar(&home_kept).as_slice(), &Limits::default()).unwrap();
        assert_eq!(r.members, 3);
        let refused = |dirs: Listings<'_>| {
            validate(dumpdir_tar(dirs).as_slice(), &Limits::default()).unwrap_err()
        };
        let cases: [(Listings<'_>, Rule, &str); 4] = [
            (
                &[(b"./", b"Dhome\0\0"), (b"./home/", b"Y../x\0\0")],
                Rule::Dumpdir,
                "not a name inside its directory",
            ),
            (
                &[(b"./", b"Dhome\0\0"), (b"./home/", b"Dother\0\0")],
                Rule::Dumpdir,
                "would delete home/agent",
            ),
            (
                &[(b"./", b"Dlogs\0\0")],
                Rule::Dumpdir,
                "would delete ./home",
            ),
            (
                &[
                    (b"./", b"Dhome\0\0"),
                    (b"./home/", b"Dagent\0\0"),
                    (b"./home/agent/", b"Nkept.txt\0\0"),
                ],
                Rule::IncrementalLink,
                "home/agent/kept.txt is kept from an earlier backup",
            ),
        ];
        for (dirs, rule, words) in cases {
            let e = refused(dirs);
            assert_eq!(e.rule(), Some(rule), "{e}");
            assert!(e.to_string().contains(words), "{e}");
        }
    }

    #[test]
    fn first_violation_in_member_order_wins() {
        let mut m = base();
        m.push((b"./home/agent/a\x01", F, b""));
        m.push((b"./home/agent/a\x01", F, b""));
        let e = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::ControlCharacters), "{e}");
        // Per-member rules come before whole-archive ones: a duplicate in an archive that
        // also lacks home/agent reports the duplicate.
        let m: Vec<(&[u8], _, &[u8])> = vec![(b"./", D, b""), (b"./x", F, b""), (b"x", F, b"")];
        let e = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsafe archive: archive contains duplicate path: x"
        );
    }

    #[test]
    fn accepts_a_sound_archive_with_links_and_reads_the_manifest() {
        let mut m = base();
        m.push((b"./home/agent/.config/", D, b""));
        m.push((b"./home/agent/.config/hermes-box/", D, b""));
        m.push((b"./home/agent/w/", D, b""));
        m.push((b"./home/agent/w/in", L, b"../.config"));
        m.push((b"./home/agent/w/self", L, b"."));
        let r = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap();
        assert_eq!(r.members, 8);
        assert_eq!(r.compression, Compression::Zstd);
    }

    #[test]
    fn error_messages_escape_the_archive_bytes_they_quote() {
        // A tar header whose checksum field holds newlines and an escape sequence.
        let mut header = [0u8; 512];
        header[..4].copy_from_slice(b"./x\x1b");
        header[148..156].copy_from_slice(b"\n\x1b[31m\n\n");
        let data = zstd::encode_all(&header[..], 3).unwrap();
        let e = validate(data.as_slice(), &Limits::default()).unwrap_err();
        let text = e.to_string();
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.contains("\\x1b[31m"), "{text}");
    }

    #[test]
    fn symlinks_are_data_whatever_their_target() {
        // Absolute, dangling, climbing, looping, through each other: all kept as they are.
        let mut m = base();
        for (name, target) in [
            (&b"./home/agent/python"[..], &b"/usr/bin/python3"[..]),
            (b"./home/agent/.#notes.md", b"agent@box.1234:1700000000"),
            (b"./home/agent/up", b"../../../../etc/shadow"),
            (b"./home/agent/a", b"b"),
            (b"./home/agent/b", b"a"),
            (b"./home/agent/self", b"self/x/y"),
            (b"./home/agent/ctl", b"\x1b[31mred"),
        ] {
            m.push((name, L, target));
        }
        let r = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap();
        assert_eq!(r.members, 10);
        // What a restore must not do is write through one, wherever it points.
        for (beneath, rule) in [
            (&b"./home/agent/python/x"[..], Rule::NestedBeneathLink),
            (b"./home/agent/up/passwd", Rule::NestedBeneathLink),
        ] {
            let mut bad = m.clone();
            bad.push((beneath, F, b""));
            let e = validate(raw_tar(&bad).as_slice(), &Limits::default()).unwrap_err();
            assert_eq!(e.rule(), Some(rule), "{e}");
        }
        let mut empty = base();
        empty.push((b"./home/agent/e", L, b""));
        let e = validate(raw_tar(&empty).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::LinkTargetEmpty), "{e}");
        // A name no filesystem takes (the chain fuzz target's find: it validated, then
        // failed to unpack).
        let long = format!("d./home/agent/{}\n", "n".repeat(256));
        let data =
            crate::fuzzing::build_tar(format!("d./\nd./home/\nd./home/agent/\n{long}").as_bytes())
                .unwrap();
        let e = validate(data.as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::NameTooLong), "{e}");
        let ok = format!("d./home/agent/{}\n", "n".repeat(255));
        let data =
            crate::fuzzing::build_tar(format!("d./\nd./home/\nd./home/agent/\n{ok}").as_bytes())
                .unwrap();
        validate(data.as_slice(), &Limits::default()).unwrap();
    }

    #[test]
    fn a_hard_link_names_a_regular_file_restored_before_it() {
        const H: tar::EntryType = tar::EntryType::Link;
        type Members<'a> = &'a [(&'static [u8], tar::EntryType, &'static [u8])];
        let verdict = |extra: Members<'_>| {
            let mut m = base();
            m.push((b"./home/agent/f", F, b""));
            m.push((b"./home/agent/l", L, b"f"));
            m.push((b"./home/agent/d/", D, b""));
            m.extend_from_slice(extra);
            validate(raw_tar(&m).as_slice(), &Limits::default()).map(|r| r.members)
        };
        assert_eq!(verdict(&[(b"./home/agent/h", H, b"./home/agent/f")]), Ok(7));
        assert_eq!(verdict(&[(b"./home/agent/h", H, b"home/agent/f")]), Ok(7));
        let cases: [(Members<'_>, Rule); 6] = [
            (
                &[(b"./home/agent/h", H, b"home/agent/l")],
                Rule::HardlinkNotRegularFile,
            ),
            (
                &[(b"./home/agent/h", H, b"home/agent/d")],
                Rule::HardlinkNotRegularFile,
            ),
            // Through a symlink: not a member's name.
            (
                &[(b"./home/agent/h", H, b"home/agent/l/x")],
                Rule::HardlinkBeforeTarget,
            ),
            (
                &[(b"./home/agent/h", H, b"/etc/shadow")],
                Rule::HardlinkTargetNotMember,
            ),
            (
                &[(b"./home/agent/h", H, b"home/agent/../../f")],
                Rule::HardlinkTargetNotMember,
            ),
            (
                &[
                    (b"./home/agent/h", H, b"home/agent/g"),
                    (b"./home/agent/g", F, b""),
                ],
                Rule::HardlinkBeforeTarget,
            ),
        ];
        for (extra, rule) in cases {
            let e = verdict(extra).unwrap_err();
            assert_eq!(e.rule(), Some(rule), "{e}");
        }
    }

    #[test]
    fn a_member_needs_its_parent_directory_in_the_archive() {
        let mut m = base();
        m.push((b"./home/agent/a/b/c", F, b""));
        let e = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsafe archive: archive path resolves through missing or non-directory member: home/agent/a"
        );
        let mut m = base();
        m.push((b"./home/agent/f", F, b""));
        m.push((b"./home/agent/f/x", F, b""));
        let e = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::ParentNotDirectory), "{e}");
    }
}
