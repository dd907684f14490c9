//! `hb export`: walks a data root ourselves (never following symlinks, sorted, so the
//! output is deterministic) into a tar rooted at `./` (`./`, `./home/`, `./home/agent/...`,
//! `./logs/...`), compressed with multithreaded zstd, cut into parts with an index.
//!
//! Kept: regular files, directories, symlinks (as links), hardlinks (as hardlinks to the
//! first path seen), modes, uid/gid with user and group names, mtimes. Skipped with a
//! warning naming them: sockets, FIFOs, block and character devices, and symlinks a
//! restore would refuse (see `links`). Left out: the seed's excludes
//! (box_proto::archive::excludes).
//!
//! Member names are written byte for byte (GNU format, `././@LongLink` records for names
//! over 100 bytes), because the tar crate's `set_path` would drop the leading `./`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::Compression;
use box_proto::archive::excludes::is_excluded;
use box_proto::archive::incremental::{Code, DUMPDIR_TYPE, Dumpdir};
use box_proto::archive::parts::PartIndex;
use box_proto::archive::unpack::{COPY_BUF, copy_through};

use super::incremental::{Snapshot, Stamp};
use super::links;
use super::parts::{Announce, PartWriter};
use super::sparse;

/// zstd job size with worker threads.
pub const JOB_SIZE: u32 = 2 << 20;

/// Options of one export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub root: PathBuf,
    pub out: PathBuf,
    pub part_size: u64,
    /// zstd worker threads (0 = single-threaded).
    pub threads: u32,
    pub level: i32,
    /// Chain mode (incremental backups): dumpdirs for every directory, a snapshot
    /// recorded; with a parent snapshot, entries unchanged since it are left out.
    pub chain: Option<ChainOptions>,
}

/// An export in GNU tar's listed-incremental format (box_proto::archive::incremental).
#[derive(Debug, Clone)]
pub struct ChainOptions {
    /// The snapshot of the parent backup; `None`: a full export that starts a chain.
    pub parent: Option<Snapshot>,
    /// Where to write the snapshot of this export (committed later by box).
    pub record: PathBuf,
}

impl ExportOptions {
    pub fn new(root: &Path, out: &Path, part_size: u64) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        ExportOptions {
            root: root.to_path_buf(),
            out: out.to_path_buf(),
            part_size,
            threads: cpus.clamp(1, 4),
            level: 3,
            chain: None,
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone)]
pub struct ExportSummary {
    pub index: PartIndex,
    pub members: u64,
    /// Paths skipped (sockets, FIFOs, devices) with why.
    pub skipped: Vec<String>,
    /// Chain mode: this export's position in its chain (0: full).
    pub link: Option<u32>,
    /// Chain mode: files and links left out as unchanged since the parent.
    pub unchanged: u64,
}

/// What follows a member's header.
enum Payload<'a> {
    None,
    /// Exactly the header's size, read from a file (zeros if it shrank meanwhile).
    Data(&'a mut dyn Read),
    /// An old GNU sparse member: its map and the runs of data.
    Sparse(&'a mut dyn Read, &'a [(u64, u64)]),
    /// A directory's dumpdir (its member is type `D`).
    Dumpdir(&'a [u8]),
}

/// The chain state of an export: the parent's snapshot and the one being made.
struct Chain {
    parent: Option<Snapshot>,
    next: Snapshot,
    unchanged: u64,
}

/// One entry of a directory, looked at before the directory's member is written.
struct Child {
    name: std::ffi::OsString,
    key: Vec<u8>,
    path: PathBuf,
    meta: fs::Metadata,
    /// Its dumpdir code in chain mode (a directory, unchanged, or in this archive).
    code: Code,
}

struct Walker<W: Write> {
    builder: tar::Builder<W>,
    hardlinks: HashMap<(u64, u64), Vec<u8>>,
    users: HashMap<u32, Option<String>>,
    groups: HashMap<u32, Option<String>>,
    members: u64,
    skipped: Vec<String>,
    warn: Box<dyn FnMut(&str)>,
    /// The export's own output directory (device, inode), never archived even when it
    /// sits inside the data root.
    out_id: Option<(u64, u64)>,
    /// The data root with every link in its path resolved, to judge where links lead.
    canonical_root: PathBuf,
    /// One buffer for every member's data (see [`Walker::append_data`]).
    copy_buf: Vec<u8>,
    chain: Option<Chain>,
}

fn long_record(kind: tar::EntryType, bytes: &[u8]) -> io::Result<(tar::Header, Vec<u8>)> {
    let mut h = tar::Header::new_gnu();
    let name = b"././@LongLink";
    h.as_gnu_mut()
        .ok_or_else(|| io::Error::other("not a GNU header"))?
        .name[..name.len()]
        .copy_from_slice(name);
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    let mut data = bytes.to_vec();
    data.push(0);
    h.set_size(data.len() as u64);
    h.set_cksum();
    Ok((h, data))
}

impl<W: Write> Walker<W> {
    fn user(&mut self, uid: u32) -> Option<String> {
        self.users
            .entry(uid)
            .or_insert_with(|| {
                nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                    .ok()
                    .flatten()
                    .map(|u| u.name)
            })
            .clone()
    }

    fn group(&mut self, gid: u32) -> Option<String> {
        self.groups
            .entry(gid)
            .or_insert_with(|| {
                nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
                    .ok()
                    .flatten()
                    .map(|g| g.name)
            })
            .clone()
    }

    /// Appends one member with name `name` (bytes, `./...`).
    fn append(
        &mut self,
        name: &[u8],
        meta: &fs::Metadata,
        kind: tar::EntryType,
        link: Option<&[u8]>,
        payload: Payload<'_>,
    ) -> io::Result<()> {
        let mut h = tar::Header::new_gnu();
        let kind = match payload {
            Payload::Dumpdir(_) => tar::EntryType::new(DUMPDIR_TYPE),
            _ => kind,
        };
        h.set_entry_type(kind);
        h.set_mode(meta.mode() & 0o7777);
        h.set_uid(u64::from(meta.uid()));
        h.set_gid(u64::from(meta.gid()));
        h.set_mtime(meta.mtime().max(0) as u64);
        let size = match payload {
            Payload::Dumpdir(d) => d.len() as u64,
            _ if kind == tar::EntryType::Regular => meta.len(),
            _ => 0,
        };
        h.set_size(size);
        // A file with holes: an old GNU sparse member (see `sparse`), its runs as data.
        if let Payload::Sparse(_, map) = &payload {
            h.set_size(sparse::stored_size(map));
            sparse::fill_header(&mut h, map, meta.len())?;
        }
        if let Some(user) = self.user(meta.uid()) {
            let _ = h.set_username(&user);
        }
        if let Some(group) = self.group(meta.gid()) {
            let _ = h.set_groupname(&group);
        }
        {
            let gnu = h
                .as_gnu_mut()
                .ok_or_else(|| io::Error::other("not a GNU header"))?;
            if name.len() <= gnu.name.len() {
                gnu.name[..name.len()].copy_from_slice(name);
            } else {
                gnu.name.copy_from_slice(&name[..100]);
            }
            if let Some(link) = link {
                if link.len() <= gnu.linkname.len() {
                    gnu.linkname[..link.len()].copy_from_slice(link);
                } else {
                    gnu.linkname.copy_from_slice(&link[..100]);
                }
            }
        }
        if name.len() > 100 {
            let (lh, data) = long_record(tar::EntryType::GNULongName, name)?;
            self.append_data(&lh, &mut data.as_slice())?;
        }
        if let Some(link) = link.filter(|l| l.len() > 100) {
            let (lh, data) = long_record(tar::EntryType::GNULongLink, link)?;
            self.append_data(&lh, &mut data.as_slice())?;
        }
        h.set_cksum();
        match payload {
            Payload::Sparse(reader, _) => {
                // The payload is exact by construction (extension blocks, padded runs).
                self.append_data(&h, reader)?;
            }
            Payload::Data(reader) => {
                // Exactly `size` bytes even if the file changed while we read it.
                let mut exact = reader.take(size).chain(io::repeat(0)).take(size);
                self.append_data(&h, &mut exact)?;
            }
            Payload::Dumpdir(mut d) => self.append_data(&h, &mut d)?,
            Payload::None => self.append_data(&h, &mut io::empty())?,
        }
        self.members += 1;
        Ok(())
    }

    /// Every member goes out here: what `tar::Builder::append` writes (the header, the
    /// data, zeros to the next 512-byte block), with the data read in [`COPY_BUF`] pieces: the builder copies
    /// through `io::copy`'s 8 KiB buffer, which made a read syscall and a zstd call per
    /// 8 KiB of every large file (205k reads for the 1.5 GiB bench corpus, 51k now).
    fn append_data(&mut self, h: &tar::Header, data: &mut dyn Read) -> io::Result<()> {
        let dst = self.builder.get_mut();
        dst.write_all(h.as_bytes())?;
        let copied = copy_through(&mut self.copy_buf, data, dst)?;
        let pad = (512 - copied % 512) % 512;
        dst.write_all(&[0u8; 512][..pad as usize])
    }

    /// The entries of the directory `abs` (key `rel`) worth looking at, sorted by name,
    /// with their dumpdir codes: what is excluded, vanished, or the export's own output
    /// is left out here.
    fn scan_dir(&mut self, abs: &Path, rel: &[u8]) -> Result<Vec<Child>> {
        let mut names: Vec<std::ffi::OsString> = fs::read_dir(abs)
            .with_context(|| format!("cannot list {}", abs.display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .with_context(|| format!("cannot list {}", abs.display()))?;
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let mut children = Vec::with_capacity(names.len());
        for name in names {
            let mut key = rel.to_vec();
            if !key.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(name.as_bytes());
            if is_excluded(&String::from_utf8_lossy(&key)) {
                continue;
            }
            let path = abs.join(&name);
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
            };
            let ft = meta.file_type();
            if ft.is_dir() && self.out_id == Some((meta.dev(), meta.ino())) {
                continue;
            }
            let code = if ft.is_dir() {
                Code::Directory
            } else if (ft.is_file() || ft.is_symlink())
                && let Some(chain) = self.chain.as_mut()
            {
                let stamp = Stamp::of(&meta);
                chain.next.entries.insert(key.clone(), stamp);
                match &chain.parent {
                    Some(parent) if parent.unchanged(&key, &stamp) => Code::Unchanged,
                    _ => Code::Included,
                }
            } else {
                Code::Included
            };
            children.push(Child {
                name,
                key,
                path,
                meta,
                code,
            });
        }
        Ok(children)
    }

    /// Writes the directory's own member (`member`, `./…/`): a plain directory, or in
    /// chain mode its dumpdir listing every child that may be in the archive.
    fn append_dir(&mut self, member: &[u8], meta: &fs::Metadata, children: &[Child]) -> Result<()> {
        let shown = String::from_utf8_lossy(member).into_owned();
        let dumpdir = match self.chain {
            Some(_) => Some(
                Dumpdir::new(
                    children
                        .iter()
                        .filter(|c| !self.never_archived(c))
                        .map(|c| (c.code, c.name.as_bytes().to_vec())),
                )
                .with_context(|| format!("cannot list {shown}"))?
                .render(),
            ),
            None => None,
        };
        let payload = match &dumpdir {
            Some(d) => Payload::Dumpdir(d),
            None => Payload::None,
        };
        self.append(member, meta, tar::EntryType::Directory, None, payload)
            .with_context(|| format!("cannot archive {shown}"))
    }

    /// Sockets, FIFOs and devices: skipped with a warning, so not in a dumpdir either.
    fn never_archived(&self, child: &Child) -> bool {
        let ft = child.meta.file_type();
        !(ft.is_dir() || ft.is_file() || ft.is_symlink())
    }

    fn walk_dir(
        &mut self,
        abs: &Path,
        rel: &[u8],
        member: &[u8],
        meta: &fs::Metadata,
    ) -> Result<()> {
        let children = self.scan_dir(abs, rel)?;
        self.append_dir(member, meta, &children)?;
        for Child {
            name: _,
            key,
            path,
            meta,
            code,
        } in children
        {
            if code == Code::Unchanged {
                if let Some(chain) = self.chain.as_mut() {
                    chain.unchanged += 1;
                }
                continue;
            }
            let mut member = b"./".to_vec();
            member.extend_from_slice(&key);
            let ft = meta.file_type();
            let shown = String::from_utf8_lossy(&member).into_owned();
            if ft.is_dir() {
                member.push(b'/');
                self.walk_dir(&path, &key, &member, &meta)?;
            } else if ft.is_symlink() {
                let target = fs::read_link(&path)
                    .with_context(|| format!("cannot read link {}", path.display()))?;
                let key_text = String::from_utf8_lossy(&key);
                if let Some(why) = links::rejection(&self.canonical_root, &path, &key_text, &target)
                {
                    let msg = format!("skipping symlink {shown} -> {}: {why}", target.display());
                    (self.warn)(&msg);
                    self.skipped.push(msg);
                    continue;
                }
                self.append(
                    &member,
                    &meta,
                    tar::EntryType::Symlink,
                    Some(target.as_os_str().as_bytes()),
                    Payload::None,
                )
                .with_context(|| format!("cannot archive {shown}"))?;
            } else if ft.is_file() {
                if meta.nlink() > 1 {
                    if let Some(first) = self.hardlinks.get(&(meta.dev(), meta.ino())).cloned() {
                        self.append(
                            &member,
                            &meta,
                            tar::EntryType::Link,
                            Some(&first),
                            Payload::None,
                        )
                        .with_context(|| format!("cannot archive {shown}"))?;
                        continue;
                    }
                    self.hardlinks
                        .insert((meta.dev(), meta.ino()), member.clone());
                }
                let mut file = match File::open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        return Err(e).with_context(|| format!("cannot read {}", path.display()));
                    }
                };
                let appended = match sparse::data_map(&file, meta.len()) {
                    Some(map) => {
                        let prefix = sparse::extension_blocks(&map, meta.len());
                        let mut payload = sparse::Payload::new(&file, prefix, &map);
                        self.append(
                            &member,
                            &meta,
                            tar::EntryType::GNUSparse,
                            None,
                            Payload::Sparse(&mut payload, &map),
                        )
                    }
                    None => self.append(
                        &member,
                        &meta,
                        tar::EntryType::Regular,
                        None,
                        Payload::Data(&mut file),
                    ),
                };
                appended.with_context(|| format!("cannot archive {shown}"))?;
            } else {
                let what = if ft.is_socket() {
                    "socket"
                } else if ft.is_fifo() {
                    "FIFO"
                } else if ft.is_block_device() {
                    "block device"
                } else if ft.is_char_device() {
                    "character device"
                } else {
                    "special file"
                };
                let msg = format!("skipping {what} {shown}");
                (self.warn)(&msg);
                self.skipped.push(msg);
            }
        }
        Ok(())
    }
}

/// Writes this export's place in its chain into the runtime manifest it archives (its
/// position, and the digest of the backup it builds on): how a restore finds the parent,
/// inside the encrypted file. The manifest keeps its owner.
fn record_chain(root: &Path, chain: &ChainOptions) -> Result<()> {
    use box_proto::manifest::{CHAIN_LINK_KEY, CHAIN_PARENT_KEY, RuntimeManifest};
    let path = crate::paths::Paths::new(root).manifest();
    let (mut manifest, owner) = match fs::read_to_string(&path) {
        Ok(text) => {
            let meta = fs::symlink_metadata(&path)?;
            let owner = (
                nix::unistd::Uid::from_raw(meta.uid()),
                nix::unistd::Gid::from_raw(meta.gid()),
            );
            let manifest = RuntimeManifest::parse(&text)
                .with_context(|| format!("cannot add the chain to {}", path.display()))?;
            (manifest, Some(owner))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => (RuntimeManifest::new(), None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let (link, parent) = match &chain.parent {
        Some(p) => (p.link + 1, p.backup.clone().unwrap_or_default()),
        None => (0, String::new()),
    };
    manifest.set(CHAIN_LINK_KEY, &link.to_string());
    manifest.set(CHAIN_PARENT_KEY, &parent);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    crate::fsutil::write_private(&path, manifest.render().as_bytes(), 0o600, owner)
}

/// Runs an export. `warn` receives one line per skipped special file or symlink.
pub fn export(opts: &ExportOptions, warn: Box<dyn FnMut(&str)>) -> Result<ExportSummary> {
    export_announcing(opts, warn, None)
}

/// [`export`], announcing each finished part to a reader as [`Announce`] says.
pub fn export_announcing(
    opts: &ExportOptions,
    warn: Box<dyn FnMut(&str)>,
    announce: Option<Announce>,
) -> Result<ExportSummary> {
    let root_meta = fs::metadata(&opts.root)
        .with_context(|| format!("cannot read the data root {}", opts.root.display()))?;
    if !root_meta.is_dir() {
        bail!("data root {} is not a directory", opts.root.display());
    }
    if let Some(chain) = &opts.chain {
        record_chain(&opts.root, chain)?;
    }
    let mut parts = PartWriter::create(&opts.out, opts.part_size)?;
    if let Some(announce) = announce {
        parts = parts.announcing(announce);
    }
    let out_id = fs::metadata(&opts.out).ok().map(|m| (m.dev(), m.ino()));
    let mut encoder =
        zstd::stream::write::Encoder::new(parts, opts.level).context("cannot start zstd")?;
    encoder
        .include_checksum(true)
        .context("cannot configure zstd")?;
    if opts.threads > 1 {
        encoder
            .multithread(opts.threads)
            .context("cannot start zstd worker threads")?;
        // Smaller jobs than zstd's default (4 windows, 8 MiB at level 3) keep the peak RSS
        // of two workers well under 64 MiB at no measurable cost in ratio.
        encoder
            .set_parameter(zstd::stream::raw::CParameter::JobSize(JOB_SIZE))
            .context("cannot configure zstd")?;
    }
    let mut builder = tar::Builder::new(encoder);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    let mut walker = Walker {
        builder,
        hardlinks: HashMap::new(),
        users: HashMap::new(),
        groups: HashMap::new(),
        members: 0,
        skipped: Vec::new(),
        warn,
        out_id,
        canonical_root: fs::canonicalize(&opts.root)
            .with_context(|| format!("cannot resolve the data root {}", opts.root.display()))?,
        copy_buf: vec![0u8; COPY_BUF],
        chain: opts.chain.as_ref().map(|c| Chain {
            next: Snapshot {
                backup: None,
                link: c.parent.as_ref().map_or(0, |p| p.link + 1),
                entries: HashMap::new(),
            },
            parent: c.parent.clone(),
            unchanged: 0,
        }),
    };
    walker.walk_dir(&opts.root, b"", b"./", &root_meta)?;
    let encoder = walker
        .builder
        .into_inner()
        .context("cannot finish the tar stream")?;
    let parts = encoder.finish().context("cannot finish the zstd stream")?;
    let index = parts.finish(Compression::Zstd)?;
    let (link, unchanged) = match (&walker.chain, &opts.chain) {
        (Some(chain), Some(c)) => {
            chain.next.store(&c.record)?;
            (Some(chain.next.link), chain.unchanged)
        }
        _ => (None, 0),
    };
    Ok(ExportSummary {
        index,
        members: walker.members,
        skipped: walker.skipped,
        link,
        unchanged,
    })
}
