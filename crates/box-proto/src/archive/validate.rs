//! The streaming archive validator: hermes-box.md §1.3, the seed's V4 rules in their order,
//! plus the tx9 Go port's member cap and footer drain, plus a total-size cap.
//!
//! There is no decompression-ratio guard: a file of zeros (a `dd`-made image, a swap
//! file) compresses a million to one and is ordinary data. What protects a destination is
//! [`unpack`](crate::archive::unpack): long zero runs become holes, and the room left on
//! the destination's filesystem is checked as bytes are really written.
//!
//! It reads the compressed stream once, sniffs zstd or gzip by magic bytes, walks the tar
//! members without buffering their data (memory grows with the member count only: a key and
//! a link target per member), drains the stream to its very end so a corrupt footer or
//! trailing garbage fails, and then runs the whole-archive rules (7, 8, 9) over the member
//! table. The first violation wins; every message names the rule and the path.
//!
//! Per member, in order: cap → rule 2 (control characters, then escaping names) → rule 3
//! (duplicates) → rule 4 (types) → rule 5 (root is a directory) → rule 6 (link targets).
//! After the stream: rule 1 (empty) → rule 7 (nested beneath a link) → rule 8 (`home`,
//! `home/agent`) → rule 9 (full resolution through the archive's links).
//!
//! [`walk`] is the same walk with a callback per member, so extraction applies exactly the
//! rules (and sees exactly the members) the validator saw.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;

use crate::archive::incremental::{Code, Dumpdir};
use crate::archive::tarread::{Data, Member, MemberKind, TarError, TarReader, shown_name};
use crate::archive::{Compression, sniff};
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

/// The rule a member broke. [`Rule::number`] is the V4 rule (hermes-box.md §1.3); 0 marks
/// this project's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Empty,
    ControlCharacters,
    PathEscapes,
    Duplicate,
    SpecialFile,
    RootNotDirectory,
    LinkTargetAbsolute,
    LinkTargetEmpty,
    LinkTargetEscapes,
    NestedBeneathLink,
    HomeNotDirectory,
    HomeAgentNotDirectory,
    LinkCycle,
    LinkChainBound,
    ThroughMissingOrNonDirectory,
    LinkToMissing,
    ParentNotDirectory,
    HardlinkNotRegularFile,
    LinkResolvesOutside,
    HardlinkBeforeTarget,
    TooManyMembers,
    TooLarge,
    GlobalHeaders,
    /// A dumpdir (GNU incremental listing) that is malformed, names something outside its
    /// directory, or would delete what every backup keeps.
    Dumpdir,
    /// A dumpdir that keeps entries from an earlier backup: this archive is one link of a
    /// chain and restores only after the links before it.
    IncrementalLink,
}

impl Rule {
    /// The V4 rule number, or 0 for a cap of this project.
    pub fn number(self) -> u8 {
        use Rule::*;
        match self {
            Empty => 1,
            ControlCharacters | PathEscapes => 2,
            Duplicate => 3,
            SpecialFile => 4,
            RootNotDirectory => 5,
            LinkTargetAbsolute | LinkTargetEmpty | LinkTargetEscapes => 6,
            NestedBeneathLink => 7,
            HomeNotDirectory | HomeAgentNotDirectory => 8,
            LinkCycle
            | LinkChainBound
            | ThroughMissingOrNonDirectory
            | LinkToMissing
            | ParentNotDirectory
            | HardlinkNotRegularFile
            | LinkResolvesOutside
            | HardlinkBeforeTarget => 9,
            TooManyMembers | TooLarge | GlobalHeaders | Dumpdir | IncrementalLink => 0,
        }
    }

    /// The seed's wording of the rule.
    pub fn reason(self) -> &'static str {
        use Rule::*;
        match self {
            Empty => "archive is empty",
            ControlCharacters => "archive path contains control characters",
            PathEscapes => "archive path escapes its extraction root",
            Duplicate => "archive contains duplicate path",
            SpecialFile => "archive contains a device, FIFO, socket, or unknown special file",
            RootNotDirectory => "archive root member must be a real directory",
            LinkTargetAbsolute => "archive link target is absolute",
            LinkTargetEmpty => "archive link target is empty",
            LinkTargetEscapes => "archive link target lexically escapes extraction root",
            NestedBeneathLink => "archive member is nested beneath a link",
            HomeNotDirectory => "home must be a real directory",
            HomeAgentNotDirectory => "home/agent must be a real directory",
            LinkCycle => "archive link cycle detected",
            LinkChainBound => "archive link chain exceeds safety bound",
            ThroughMissingOrNonDirectory => {
                "archive path resolves through missing or non-directory member"
            }
            LinkToMissing => "archive link resolves to missing member",
            ParentNotDirectory => "archive member parent is not a directory",
            HardlinkNotRegularFile => "archive hardlink does not resolve to a regular file",
            LinkResolvesOutside => "archive link resolves outside the extraction root",
            HardlinkBeforeTarget => "archive hardlink comes before its target",
            TooManyMembers => "archive has too many members",
            TooLarge => "archive is too large",
            GlobalHeaders => "archive has too many or too large PAX global headers",
            Dumpdir => "archive has an unsafe or malformed incremental listing (dumpdir)",
            IncrementalLink => {
                "archive is an incremental backup that keeps files from earlier backups; restore it with its chain"
            }
        }
    }
}

/// Why an archive was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveError {
    /// A safety rule failed: "unsafe archive: <rule>: <path>".
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
}

/// Renders raw name bytes for a message: UTF-8 where possible, control characters and
/// invalid bytes as `\xNN`.
pub fn shown(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
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
    kept: HashMap<Vec<u8>, Kind>,
    /// Keys listed `D` in this link's dumpdirs: a kept entry's directories must all be.
    listed_dirs: HashSet<Vec<u8>>,
}

/// The tree a chain of links has built so far: every path and its kind. The first link of
/// a chain is validated without one; each next link with the state of those before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainState {
    kinds: HashMap<Vec<u8>, Kind>,
    /// Take whatever a link keeps as a file: for the side that writes a link (box save,
    /// which has the guest's word, not the tree before). Every restore checks for real.
    trust_kept: bool,
}

impl ChainState {
    /// The state a link's writer validates it against: every kept entry taken as a file.
    pub fn trusting() -> Self {
        ChainState {
            kinds: HashMap::new(),
            trust_kept: true,
        }
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }
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
        }
    }

    /// A validator for the next link of a chain whose earlier links built `prior`.
    pub fn after(limits: Limits, prior: Rc<ChainState>) -> Self {
        let mut v = Self::new(limits);
        v.prior = Some(prior);
        v
    }

    /// A dumpdir of the directory at `key`: standalone, nothing may be kept from an
    /// earlier backup; in a chain, each kept (`N`) entry must be in the tree the earlier
    /// links built, and is then part of this link's tree with its kind there.
    fn listing(&mut self, key: &[u8], listing: &Dumpdir) -> Result<(), ArchiveError> {
        // One buffer for every entry's path: a link lists every entry of every directory,
        // and most of them only need a lookup.
        let mut path = key.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        let dir_len = path.len();
        for (code, name) in listing.entries() {
            path.truncate(dir_len);
            path.extend_from_slice(name);
            match code {
                Code::Directory => {
                    self.listed_dirs.insert(path.clone());
                }
                Code::Included => {}
                Code::Unchanged => {
                    let Some(prior) = &self.prior else {
                        return Err(ArchiveError::unsafe_(
                            Rule::IncrementalLink,
                            format!("{} is kept from an earlier backup", shown_key(&path)),
                        ));
                    };
                    match prior.kinds.get(&path) {
                        Some(kind) if *kind != Kind::Dir => {
                            self.kept.insert(path.clone(), kind.clone());
                        }
                        None if prior.trust_kept => {
                            self.kept.insert(path.clone(), Kind::File);
                        }
                        _ => {
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
        Ok(())
    }

    /// The tree after this link: its members and what it kept (moved, not copied: it is
    /// most of the tree).
    pub fn into_state(self) -> ChainState {
        let mut kinds = self.kept;
        kinds.reserve(self.order.len());
        for (key, kind) in &self.order {
            kinds.insert(key.to_vec(), kind.clone());
        }
        ChainState {
            kinds,
            trust_kept: false,
        }
    }

    /// Checks one member (rules 2 to 6 and the caps) and records it. `stored` is the data
    /// the member holds in the archive (a sparse file's runs, not its logical size).
    /// Returns its key.
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
        // Rule 2.
        let link = link.filter(|_| entry_type.is_symlink() || entry_type.is_hard_link());
        if has_control(name) || link.is_some_and(has_control) {
            return Err(ArchiveError::unsafe_(
                Rule::ControlCharacters,
                shown_name(name),
            ));
        }
        if name.starts_with(b"/") || name.split(|b| *b == b'/').any(|p| p == b"..") {
            return Err(ArchiveError::unsafe_(Rule::PathEscapes, shown_name(name)));
        }
        // Rule 3.
        let key = key_of(name);
        if self.index.contains_key(key.as_slice()) {
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
        // Rule 6.
        if let Kind::Symlink(target) | Kind::Hardlink(target) = &kind {
            if target.is_empty() {
                return Err(ArchiveError::unsafe_(
                    Rule::LinkTargetEmpty,
                    shown_name(name),
                ));
            }
            if target.starts_with(b"/") {
                return Err(ArchiveError::unsafe_(
                    Rule::LinkTargetAbsolute,
                    format!("{} -> {}", shown_name(name), shown_name(target)),
                ));
            }
            let mut depth: i64 = if matches!(kind, Kind::Symlink(_)) {
                parts(&key).count() as i64 - 1
            } else {
                0
            };
            for part in parts(target) {
                if part == b".." {
                    depth -= 1;
                    if depth < 0 {
                        return Err(ArchiveError::unsafe_(
                            Rule::LinkTargetEscapes,
                            format!("{} -> {}", shown_name(name), shown_name(target)),
                        ));
                    }
                } else {
                    depth += 1;
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

    /// The whole-archive rules: 1, 7, 8, 9.
    pub fn finish(&self) -> Result<(), ArchiveError> {
        self.check_archive().map(drop)
    }

    /// Rules 7 to 9; returns how many symlink expansions rule 9 did.
    fn check_archive(&self) -> Result<usize, ArchiveError> {
        self.check_archive_with(LinkMemo::default())
    }

    fn check_archive_with(&self, mut memo: LinkMemo) -> Result<usize, ArchiveError> {
        // Rule 1.
        if self.order.is_empty() {
            return Err(ArchiveError::unsafe_(Rule::Empty, ""));
        }
        // Rule 7.
        for (key, _) in &self.order {
            let comps: Vec<&[u8]> = parts(key).collect();
            for n in 1..comps.len() {
                let prefix = join(comps[..n].iter().copied());
                if self.kind(&prefix).is_some_and(Kind::is_link) {
                    return Err(ArchiveError::unsafe_(
                        Rule::NestedBeneathLink,
                        shown_key(key),
                    ));
                }
            }
        }
        // A kept entry survives only if every directory above it is kept too: a directory
        // its parent's dumpdir leaves out is deleted, with all in it, before it is made again.
        // A link keeps most of the tree, in a few directories: each directory's ancestry
        // is checked once.
        let mut kept_dirs: HashSet<&[u8]> = HashSet::new();
        for key in self.kept.keys() {
            let Some(cut) = key.iter().rposition(|b| *b == b'/') else {
                continue;
            };
            if kept_dirs.contains(&key[..cut]) {
                continue;
            }
            let comps: Vec<&[u8]> = parts(key).collect();
            for n in 1..comps.len() {
                let dir = join(comps[..n].iter().copied());
                if !self.listed_dirs.contains(&dir) {
                    return Err(ArchiveError::unsafe_(
                        Rule::IncrementalLink,
                        format!(
                            "{} is kept, but its directory {} is not",
                            shown_key(key),
                            shown_key(&dir)
                        ),
                    ));
                }
            }
            kept_dirs.insert(&key[..cut]);
        }
        // Rule 8.
        if self.kind(b"home") != Some(&Kind::Dir) {
            return Err(ArchiveError::unsafe_(Rule::HomeNotDirectory, "home"));
        }
        if self.kind(layout::HOME.as_bytes()) != Some(&Kind::Dir) {
            return Err(ArchiveError::unsafe_(
                Rule::HomeAgentNotDirectory,
                layout::HOME,
            ));
        }
        // Rule 9.
        let bound = self.order.len() * 8 + 32;
        for (position, (key, kind)) in self.order.iter().enumerate() {
            let comps: Vec<&[u8]> = parts(key).collect();
            if !comps.is_empty() {
                let parent = &comps[..comps.len() - 1];
                let mut r = Resolver::new(self, bound, &mut memo);
                let found = r
                    .resolve(
                        Vec::new(),
                        parent.iter().map(|p| p.to_vec()).collect(),
                        true,
                    )
                    .map_err(|e| match e {
                        // A missing parent is a path through a missing member.
                        ArchiveError::Unsafe {
                            rule: Rule::LinkToMissing,
                            path,
                        } => ArchiveError::unsafe_(Rule::ThroughMissingOrNonDirectory, path),
                        e => e,
                    })?;
                if found.1 != Some(&Kind::Dir) && !found.0.is_empty() {
                    return Err(ArchiveError::unsafe_(
                        Rule::ParentNotDirectory,
                        shown_key(key),
                    ));
                }
            }
            match kind {
                Kind::Symlink(target) => {
                    let parent: Vec<Vec<u8>> = comps[..comps.len().saturating_sub(1)]
                        .iter()
                        .map(|p| p.to_vec())
                        .collect();
                    let mut r = Resolver::new(self, bound, &mut memo);
                    r.resolve(parent, parts_owned(target), true)?;
                }
                Kind::Hardlink(target) => {
                    let mut r = Resolver::new(self, bound, &mut memo);
                    let (resolved, found) = r.resolve(Vec::new(), parts_owned(target), false)?;
                    let mut current = (resolved, found.cloned());
                    loop {
                        match &current.1 {
                            Some(Kind::File) => break,
                            Some(Kind::Hardlink(next)) => {
                                let next = next.clone();
                                let (k, f) = r.resolve(Vec::new(), parts_owned(&next), false)?;
                                current = (k, f.cloned());
                            }
                            _ => {
                                return Err(ArchiveError::unsafe_(
                                    Rule::HardlinkNotRegularFile,
                                    format!("{} -> {}", shown_key(key), shown_name(target)),
                                ));
                            }
                        }
                    }
                    let target_position = self.index.get(current.0.as_slice()).copied();
                    if target_position.is_none_or(|p| p as usize > position) {
                        return Err(ArchiveError::unsafe_(
                            Rule::HardlinkBeforeTarget,
                            format!("{} -> {}", shown_key(key), shown_name(target)),
                        ));
                    }
                }
                Kind::Dir | Kind::File => {}
            }
        }
        Ok(memo.expansions)
    }

    /// Where a hardlink's target leads through the members seen so far (the key of a
    /// regular file), or `None` when it does not (yet) lead to one.
    pub fn resolve_hardlink(&self, target: &[u8]) -> Option<Vec<u8>> {
        let mut memo = LinkMemo::default();
        let bound = self.order.len() * 8 + 32;
        let mut r = Resolver::new(self, bound, &mut memo);
        let (mut key, mut kind) = r.resolve(Vec::new(), parts_owned(target), false).ok()?;
        for _ in 0..bound {
            match kind {
                Some(Kind::File) => return Some(key),
                Some(Kind::Hardlink(next)) => {
                    let (k, f) = r.resolve(Vec::new(), parts_owned(next), false).ok()?;
                    key = k;
                    kind = f;
                }
                _ => return None,
            }
        }
        None
    }

    fn kind(&self, key: &[u8]) -> Option<&Kind> {
        if key.is_empty() && !self.index.contains_key(key) {
            // The root is implicitly a directory when the archive has no `./` member.
            return Some(&Kind::Dir);
        }
        self.index
            .get(key)
            .map(|i| &self.order[*i as usize].1)
            .or_else(|| self.kept.get(key))
    }

    pub fn members(&self) -> u64 {
        self.order.len() as u64
    }

    pub fn files(&self) -> u64 {
        self.files
    }
}

fn parts_owned(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|b| *b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .map(|p| p.to_vec())
        .collect()
}

/// Where each symlink resolved to (followed to its end), shared by every resolution of
/// rule 9. A symlink resolves the same way wherever a path meets it, so each is expanded
/// once: without this, a chain `l0 -> l1 -> … -> lN` cost N steps for each of its N
/// members, and a valid 45 KB archive took seconds (hours at the member cap).
#[derive(Default)]
struct LinkMemo {
    resolved: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Symlink expansions done, all resolutions together (tests bound it).
    expansions: usize,
    /// Tests compare every verdict with the memo off.
    #[cfg(test)]
    off: bool,
}

/// Resolves paths through the links recorded in a [`Validator`], as extraction would.
struct Resolver<'a, 'm> {
    v: &'a Validator,
    bound: usize,
    steps: usize,
    seen: HashSet<(Vec<u8>, Vec<u8>)>,
    memo: &'m mut LinkMemo,
}

impl<'a, 'm> Resolver<'a, 'm> {
    fn new(v: &'a Validator, bound: usize, memo: &'m mut LinkMemo) -> Self {
        Resolver {
            v,
            bound,
            steps: 0,
            seen: HashSet::new(),
            memo,
        }
    }

    /// Walks `pending` from `resolved`. Symlinks met on the way (and at the end when
    /// `follow_final`) restart from their parent; hardlinks met at the end restart from the
    /// root. Returns the final key and its kind.
    fn resolve(
        &mut self,
        mut resolved: Vec<Vec<u8>>,
        mut pending: VecDeque<Vec<u8>>,
        follow_final: bool,
    ) -> Result<(Vec<u8>, Option<&'a Kind>), ArchiveError> {
        // Symlinks being expanded, with the length `pending` will have once their target is
        // consumed: then `resolved` is where they lead, and the memo learns it.
        let mut open: Vec<(Vec<u8>, usize)> = Vec::new();
        while let Some(c) = pending.pop_front() {
            self.expand_one(c, &mut resolved, &mut pending, follow_final, &mut open)?;
            while open.last().is_some_and(|(_, len)| *len == pending.len()) {
                if let Some((link, _)) = open.pop() {
                    self.memo.resolved.insert(link, resolved.clone());
                }
            }
        }
        let key = join(resolved.iter().map(|p| p.as_slice()));
        let kind = self.v.kind(&key);
        Ok((key, kind))
    }

    /// Takes one path component: `..`, a member, or a symlink, which is replaced by where
    /// the memo says it leads or else by its target's parts.
    fn expand_one(
        &mut self,
        c: Vec<u8>,
        resolved: &mut Vec<Vec<u8>>,
        pending: &mut VecDeque<Vec<u8>>,
        follow_final: bool,
        open: &mut Vec<(Vec<u8>, usize)>,
    ) -> Result<(), ArchiveError> {
        if c == b".." {
            if resolved.pop().is_none() {
                return Err(ArchiveError::unsafe_(
                    Rule::LinkResolvesOutside,
                    shown_name(&join(pending.iter().map(|p| p.as_slice()))),
                ));
            }
            return Ok(());
        }
        resolved.push(c);
        let key = join(resolved.iter().map(|p| p.as_slice()));
        let last = pending.is_empty();
        match self.v.kind(&key) {
            None => {
                let rule = if last {
                    Rule::LinkToMissing
                } else {
                    Rule::ThroughMissingOrNonDirectory
                };
                return Err(ArchiveError::unsafe_(rule, shown_key(&key)));
            }
            Some(Kind::Dir) => {}
            Some(Kind::File) | Some(Kind::Hardlink(_)) if !last => {
                return Err(ArchiveError::unsafe_(
                    Rule::ThroughMissingOrNonDirectory,
                    shown_key(&key),
                ));
            }
            Some(Kind::File) | Some(Kind::Hardlink(_)) => {}
            Some(Kind::Symlink(target)) => {
                if last && !follow_final {
                    return Ok(());
                }
                #[cfg(test)]
                let remembered = self.memo.resolved.get(&key).filter(|_| !self.memo.off);
                #[cfg(not(test))]
                let remembered = self.memo.resolved.get(&key);
                if let Some(to) = remembered {
                    // Exactly what expanding it would give: a link that leads to a
                    // non-directory fails on the next component, at that member.
                    *resolved = to.clone();
                    let at = join(resolved.iter().map(|p| p.as_slice()));
                    if !last && self.v.kind(&at) != Some(&Kind::Dir) {
                        return Err(ArchiveError::unsafe_(
                            Rule::ThroughMissingOrNonDirectory,
                            shown_key(&at),
                        ));
                    }
                    return Ok(());
                }
                self.memo.expansions += 1;
                // The work of one expansion (§1.3 caps the *work*): the link, the
                // parts its target pushes, and the rest of the path, which the state
                // below copies into `seen`. Counting expansions alone let a link like
                // `x -> x/x/x/…` grow the pending path on every step, and the seen
                // states with it, quadratically: 4 KiB of archive (500 members) took
                // over 2 GiB (fuzz/regressions/archive_tar/link-expansion-grows-path).
                let target_parts = parts_owned(target);
                self.steps = self
                    .steps
                    .saturating_add(1 + target_parts.len() + pending.len());
                if self.steps > self.bound {
                    return Err(ArchiveError::unsafe_(Rule::LinkChainBound, shown_key(&key)));
                }
                let rest = join(pending.iter().map(|p| p.as_slice()));
                if !self.seen.insert((key.clone(), rest)) {
                    return Err(ArchiveError::unsafe_(Rule::LinkCycle, shown_key(&key)));
                }
                resolved.pop();
                open.push((key, pending.len()));
                for part in target_parts.into_iter().rev() {
                    pending.push_front(part);
                }
            }
        }
        Ok(())
    }
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
            validator.listing(&key, &read)?;
            listing = Some(read);
        }
        let hardlink_target = match member.kind {
            MemberKind::Hardlink => validator.resolve_hardlink(&member.link),
            _ => None,
        };
        let mut data = Data {
            reader: &mut reader,
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
    };
    let state = if validator.prior.is_some() || !validator.listed_dirs.is_empty() {
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
    /// symlink's target.
    fn link_tar(members: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, flag, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::new(*flag));
            h.set_mode(0o755);
            let stored: &[u8] = if *flag == b'2' { b"" } else { data };
            h.set_size(stored.len() as u64);
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name);
            if *flag == b'2' {
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
        let alone = validate(inc.as_slice(), &limits).unwrap_err();
        assert_eq!(alone.rule(), Some(Rule::IncrementalLink), "{alone}");

        let refused = |members: &[(&[u8], u8, &[u8])]| {
            validate_link(link_tar(members).as_slice(), &limits, Some(prior.clone())).unwrap_err()
        };
        // Keeps what the chain never had.
        let e = refused(&top(b"Nghost\0\0"));
        assert!(
            e.to_string()
                .contains("home/agent/ghost is kept from the backup before"),
            "{e}"
        );
        // Keeps a file inside a directory it deletes (sub not listed by its parent).
        let mut m = top(b"Na\0\0");
        m.push((b"./home/agent/sub/", b'D', b"Nb\0\0"));
        let e = refused(&m);
        assert!(
            e.to_string()
                .contains("its directory home/agent/sub is not"),
            "{e}"
        );
        // A link through a kept file is still a path through a non-directory.
        let mut m = top(b"Na\0Yx\0\0");
        m.push((b"./home/agent/x", b'2', b"a/b"));
        assert_eq!(refused(&m).rule(), Some(Rule::ThroughMissingOrNonDirectory));
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
    fn a_link_that_grows_its_own_path_is_cut_off_early() {
        // x -> x/x/…/x: each expansion adds 800 parts to the path still to resolve. Only
        // the expansions were counted before, so 500 members allowed 4032 of them.
        let mut desc = String::from("d./\nd./home/\nd./home/agent/\n");
        for i in 0..500 {
            desc.push_str(&format!("d./d{i}/\n"));
        }
        desc.push_str(&format!("l./home/agent/x -> {}x\n", "x/".repeat(800)));
        let data = crate::fuzzing::build_tar(desc.as_bytes()).unwrap();
        let started = std::time::Instant::now();
        let e = validate(data.as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::LinkChainBound), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn long_legitimate_link_chains_still_resolve() {
        // A chain of 50 links, each one hop deeper than the last: well within the bound.
        let mut m = base();
        let names: Vec<String> = (0..50).map(|i| format!("./home/agent/l{i}")).collect();
        let targets: Vec<String> = (0..50).map(|i| format!("l{}", i + 1)).collect();
        for (n, t) in names.iter().zip(&targets) {
            m.push((n.as_bytes(), L, t.as_bytes()));
        }
        m.push((b"./home/agent/l50/", D, b""));
        let r = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap();
        assert_eq!(r.members, 54);
    }

    #[test]
    fn each_link_of_a_chain_is_expanded_once_whatever_the_member_order() {
        // l0 -> l1 -> … -> lN -> dir, listed head first: every member's resolution walks
        // the rest of the chain unless what was learnt is kept (quadratic: 7 s at N=8000).
        const N: usize = 4000;
        for reversed in [false, true] {
            let mut v = Validator::new(Limits::default());
            for dir in ["./", "./home/", "./home/agent/"] {
                v.observe(dir.as_bytes(), D, None, 0).unwrap();
            }
            let mut order: Vec<usize> = (0..N).collect();
            if reversed {
                order.reverse();
            }
            for i in order {
                let name = format!("./home/agent/l{i}");
                let target = format!("l{}", i + 1);
                v.observe(name.as_bytes(), L, Some(target.as_bytes()), 0)
                    .unwrap();
            }
            v.observe(format!("./home/agent/l{N}/").as_bytes(), D, None, 0)
                .unwrap();
            let expansions = v.check_archive().unwrap();
            assert!(expansions <= N + 1, "{expansions} expansions for {N} links");
        }
    }

    #[test]
    fn a_remembered_link_to_a_file_still_fails_a_path_through_it() {
        // The first member learns where `f` leads (a file); the second goes through it.
        let mut m = base();
        m.push((b"./home/agent/file", F, b""));
        m.push((b"./home/agent/f", L, b"file"));
        m.push((b"./home/agent/g", L, b"f/x"));
        let e = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::ThroughMissingOrNonDirectory), "{e}");
        assert!(e.to_string().ends_with("home/agent/file"), "{e}");
    }

    proptest::proptest! {
        /// Remembering where links lead never changes a verdict: random trees of dirs,
        /// files, symlinks and hard links give the same result (rule and path included)
        /// with the memo on and off.
        #[test]
        fn the_link_memo_never_changes_a_verdict(
            members in proptest::collection::vec(
                (0usize..6, 0usize..4, 0usize..16),
                1..16,
            )
        ) {
            // A fixed skeleton of directories, then leaves of random kinds: links to each
            // other, through each other, up, out and around.
            const LEAVES: [&str; 6] = ["f", "h", "a/g", "b/d", "a/c/e", "b/i"];
            const TARGETS: [&str; 16] = [
                "f", "h", "../f", "a/g", "g", "d/..", "../b/d", "/home/agent/h", "..", ".",
                "c/e", "../../x", "g/x", "i", "../h/..", "e",
            ];
            let mut v = Validator::new(Limits::default());
            for dir in ["./", "./home/", "./home/agent/", "./home/agent/a/", "./home/agent/b/",
                        "./home/agent/a/c/"] {
                v.observe(dir.as_bytes(), D, None, 0).unwrap();
            }
            for (leaf, kind, target) in members {
                let name = format!("./home/agent/{}", LEAVES[leaf]);
                let link = TARGETS[target].as_bytes();
                let (entry, link) = match kind {
                    0 => (D, None),
                    1 => (F, None),
                    2 => (L, Some(link)),
                    _ => (tar::EntryType::Link, Some(link)),
                };
                // Per-member rules (duplicates, …) are not what this is about.
                let _ = v.observe(name.as_bytes(), entry, link, 0);
            }
            let with = v.check_archive().map(drop);
            let without = v
                .check_archive_with(LinkMemo { off: true, ..LinkMemo::default() })
                .map(drop);
            // The bound caps work, and the memo does less of it: where the expansions
            // without it hit the bound, the memo may rightly resolve further.
            if without.as_ref().err().and_then(ArchiveError::rule) != Some(Rule::LinkChainBound) {
                proptest::prop_assert_eq!(format!("{with:?}"), format!("{without:?}"));
            }
        }
    }

    #[test]
    fn symlink_chains_are_bounded() {
        let mut m = base();
        m.push((b"./home/agent/a", L, b"a"));
        let e = validate(raw_tar(&m).as_slice(), &Limits::default()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::LinkCycle), "{e}");
    }
}
