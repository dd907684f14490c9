//! `hb export`: walks a data root ourselves (never following symlinks, sorted, so the
//! output is deterministic) into a tar rooted at `./` (`./`, `./home/`, `./home/agent/...`,
//! `./logs/...`), compressed with multithreaded zstd, cut into parts with an index.
//!
//! Kept: regular files, directories, symlinks (as links, whatever their target: absolute,
//! dangling, a venv's `python -> /usr/bin/python3`; a restore never follows one), hardlinks
//! (as hardlinks to the first path seen), modes, uid/gid with user and group names, mtimes.
//! Skipped with a warning naming them: sockets, FIFOs, block and character devices. Left
//! out: the seed's excludes (box_proto::archive::excludes), but the sidecars of a database
//! archived as it is (see `live_db`).
//!
//! Each directory is scanned once before its member is written: links read, changed files
//! opened, so the member's listing (chain mode) names exactly what follows it, and a file
//! deleted during the save is left out rather than listed and missing.
//!
//! A regular file of `block_files_above` bytes or more is archived as a block directory
//! (box_proto::archive::blocks; see `Walker::append_blocked`), so a link of a chain holds
//! only the blocks that changed since its parent.
//!
//! Member names are written byte for byte (GNU format, `././@LongLink` records for names
//! over 100 bytes), because the tar crate's `set_path` would drop the leading `./`.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::blocks::{self, BlockIndex, DEFAULT_BLOCK_SIZE};
use box_proto::archive::compress;
use box_proto::archive::compress::Compression;
use box_proto::archive::copy::{COPY_BUF, copy_through};
use box_proto::archive::excludes::is_excluded;
use box_proto::archive::incremental::{Code, DUMPDIR_TYPE, Dumpdir};
use box_proto::archive::part_hash::{PartHash, PartHashAlgo, PartHasher};
use box_proto::archive::parts::PartIndex;

use super::blocked::{self, BlockSource, FileSource};
use super::incremental::{BlockRecord, Snapshot, Stamp};
use super::live_db::{self, Archive, LiveDatabases};
use super::parts::{Announce, PartWriter};
use super::sparse;
use super::write_behind::WriteBehind;
use crate::sqlite::CopyFailure;

/// Options of one export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub root: PathBuf,
    pub out: PathBuf,
    pub part_size: u64,
    /// What each part is hashed with in the index (`--part-hash`).
    pub part_hash: PartHashAlgo,
    /// zstd worker threads (0 = single-threaded).
    pub threads: u32,
    pub level: i32,
    /// Chain mode (incremental backups): dumpdirs for every directory, a snapshot
    /// recorded; with a parent snapshot, entries unchanged since it are left out.
    pub chain: Option<ChainOptions>,
    /// Regular files of this many bytes or more are kept in blocks (0: none, as before).
    pub block_files_above: u64,
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
            part_hash: PartHashAlgo::default(),
            threads: cpus.clamp(1, 4),
            level: 3,
            chain: None,
            block_files_above: 0,
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
    /// A regular file's data of this size, whatever the metadata says (a database's copy).
    Sized(&'a mut dyn Read, u64),
    /// An old GNU sparse member: its map and the runs of data.
    Sparse(&'a mut dyn Read, &'a [(u64, u64)]),
    /// A directory's dumpdir (its member is type `D`).
    Dumpdir(&'a [u8]),
}

impl<'a> Payload<'a> {
    /// A directory's: its dumpdir in chain mode, nothing otherwise.
    fn directory(dumpdir: Option<&'a [u8]>) -> Self {
        dumpdir.map_or(Payload::None, Payload::Dumpdir)
    }
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
    what: What,
}

/// What an entry that goes into the archive is written as.
enum What {
    Dir,
    /// A symlink, its target read when the directory was scanned.
    Symlink(PathBuf),
    /// Another name of a file already in this archive or kept by it: a hard link member.
    Hardlink(Vec<u8>),
    /// A regular file, opened when the directory was scanned (`None`: past the budget of
    /// open files, opened when written).
    File(Option<File>),
    /// A database of the box's software: the consistent copy made before the walk, under
    /// the database's own name and metadata.
    LiveCopy(File),
    /// Kept from the parent (`N`): nothing is written.
    Kept,
    /// A large file, written as its block directory (the child's name and key are the
    /// directory's).
    Blocked(Box<Blocked>),
}

/// A file kept in blocks, as its directory's scan found it.
struct Blocked {
    /// The file's key (the snapshot's), and its metadata.
    file_key: Vec<u8>,
    meta: fs::Metadata,
    from: BlockedFrom,
    /// What the parent wrote of it in blocks, if it did.
    parent: Option<BlockRecord>,
}

/// Where a blocked file's bytes come from.
enum BlockedFrom {
    /// Unchanged since the parent, which has it in blocks: every block kept, none read.
    Kept(BlockRecord),
    /// The file, opened by the scan.
    File(File),
    /// A database of the box's software, read as its page image.
    Pages(PathBuf),
}

/// What a member's header says of its mode, owner and time.
struct Attrs {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    len: u64,
}

impl Attrs {
    fn of(meta: &fs::Metadata) -> Self {
        Attrs {
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
            mtime: meta.mtime(),
            len: meta.len(),
        }
    }

    /// A member of a block directory of the file `meta`: the file's owner and time.
    fn of_block_dir(meta: &fs::Metadata, mode: u32, len: u64) -> Self {
        Attrs {
            mode,
            len,
            ..Attrs::of(meta)
        }
    }
}

/// Whether an error means the entry is no longer what the scan saw (gone, or replaced by
/// another kind: a symlink where a file was, a file where a link was).
fn changed_under_us(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::ELOOP) | Some(libc::EINVAL) | Some(libc::ENOTDIR)
        )
}

/// How many files one directory's scan may hold open: what the process may open, less
/// room for everything else. A directory with more changed files than this has the rest
/// opened when they are written.
fn open_budget() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid rlimit to fill and then to set.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 256;
        }
        // The soft limit (often 1024) up to the hard one: scans hold files open.
        let wanted = limit.rlim_max.min(1 << 20);
        if limit.rlim_cur < wanted {
            let raised = libc::rlimit {
                rlim_cur: wanted,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = wanted;
            }
        }
    }
    (limit.rlim_cur as usize).saturating_sub(256).max(64)
}

/// Opens a file the scan saw as regular, without following a link or blocking on a FIFO
/// put in its place; `None` when it is no longer a regular file there.
fn open_regular(path: &Path) -> io::Result<Option<(File, fs::Metadata)>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if changed_under_us(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    clear_nonblocking(&file);
    Ok(Some((file, meta)))
}

/// A directory entry as listed: its name, and whether its `d_type` says regular file.
struct Listed {
    name: std::ffi::OsString,
    regular: bool,
}

/// A directory opened for [`open_in`] (never through a link: the walk's directories are
/// ones it found by `lstat`).
fn open_dir(abs: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(abs)
}

/// The regular file `name` in `dir`, opened as [`open_regular`] opens one but by
/// `openat`, with its metadata; `None` for anything else or any error (the entry is then
/// looked at by its path, which says what went wrong).
fn open_in(dir: &File, name: &std::ffi::OsStr) -> Option<(File, fs::Metadata)> {
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(name.as_bytes()).ok()?;
    let flags =
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: a descriptor we hold and a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor openat just returned, owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    clear_nonblocking(&file);
    Some((file, meta))
}

/// The regular file a look is about: the one its scan opened first, else opened now by
/// its path (`None`: no longer a regular file there).
fn take_or_open(
    first: &mut Option<(File, fs::Metadata)>,
    path: &Path,
) -> Result<Option<(File, fs::Metadata)>> {
    match first.take() {
        Some(opened) => Ok(Some(opened)),
        None => open_regular(path).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Reads of a regular file never block; `O_NONBLOCK` only guarded its open against a
/// FIFO put in its place.
fn clear_nonblocking(file: &File) {
    // SAFETY: a valid descriptor; F_SETFL with the flags it has, less O_NONBLOCK.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

struct Walker<W: Write> {
    builder: tar::Builder<W>,
    /// (device, inode) of each file with more names than one that this link has, and the
    /// member name later names link to: the first written, or one kept from the parent.
    hardlinks: HashMap<(u64, u64), Vec<u8>>,
    /// Of those, the inodes whose name there is kept (`N`), not written.
    kept_inodes: HashSet<(u64, u64)>,
    users: HashMap<u32, Option<String>>,
    groups: HashMap<u32, Option<String>>,
    members: u64,
    skipped: Vec<String>,
    warn: Box<dyn FnMut(&str)>,
    /// The export's own output directory (device, inode), never archived even when it
    /// sits inside the data root.
    out_id: Option<(u64, u64)>,
    /// How many files one directory's scan may hold open ([`open_budget`]).
    open_budget: usize,
    /// The box's databases, archived as consistent copies ([`LiveDatabases`]).
    live: LiveDatabases,
    /// One buffer for every member's data (see [`Walker::append_data`]).
    copy_buf: Vec<u8>,
    /// Files of this many bytes or more are kept in blocks (0: none).
    block_threshold: u64,
    /// One block of a blocked file (allocated at the first).
    block_buf: Vec<u8>,
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
        meta: &Attrs,
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
        h.set_mode(meta.mode & 0o7777);
        h.set_uid(u64::from(meta.uid));
        h.set_gid(u64::from(meta.gid));
        h.set_mtime(meta.mtime.max(0) as u64);
        let size = match payload {
            Payload::Dumpdir(d) => d.len() as u64,
            Payload::Sized(_, len) => len,
            _ if kind == tar::EntryType::Regular => meta.len,
            _ => 0,
        };
        h.set_size(size);
        // A file with holes: an old GNU sparse member (see `sparse`), its runs as data.
        if let Payload::Sparse(_, map) = &payload {
            h.set_size(sparse::stored_size(map));
            sparse::fill_header(&mut h, map, meta.len)?;
        }
        if let Some(user) = self.user(meta.uid) {
            let _ = h.set_username(&user);
        }
        if let Some(group) = self.group(meta.gid) {
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
            Payload::Data(reader) | Payload::Sized(reader, _) => {
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

    /// The names in the directory `abs`, sorted (so the output is deterministic), each
    /// with whether the directory says it is a regular file (its `d_type`; no `stat`).
    fn list_dir(abs: &Path) -> io::Result<Vec<Listed>> {
        let mut names: Vec<Listed> = fs::read_dir(abs)?
            .map(|e| {
                e.map(|e| Listed {
                    regular: e.file_type().is_ok_and(|t| t.is_file()),
                    name: e.file_name(),
                })
            })
            .collect::<io::Result<_>>()?;
        names.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        Ok(names)
    }

    /// Whether a regular file of this export is opened before it is looked at: when
    /// every file is written (no parent: none is kept as unchanged, so each is opened
    /// anyway), opening it by its name in its directory's descriptor and `fstat`ing that
    /// replaces an `lstat` and an `open` that each walk the whole path.
    fn opens_first(&self) -> bool {
        self.chain.as_ref().is_none_or(|c| c.parent.is_none())
    }

    /// The entries of the directory `abs` (key `rel`) that go into the archive, with their
    /// dumpdir codes, and what each is written as. Each is looked at once for all: a
    /// symlink's target is read and a changed file opened here, before the directory's
    /// listing is written, so the listing never names what is gone by the time it would be
    /// read (a file deleted meanwhile is simply not listed, as if the scan came after).
    fn scan_dir(&mut self, abs: &Path, rel: &[u8], names: Vec<Listed>) -> Result<Vec<Child>> {
        let mut children = Vec::with_capacity(names.len());
        let mut opened = 0usize;
        // The directory's descriptor, for `openat` (none: every entry by its path).
        let dir = self.opens_first().then(|| open_dir(abs).ok()).flatten();
        for Listed { name, regular } in names {
            let mut key = rel.to_vec();
            if !key.is_empty() {
                key.push(b'/');
            }
            key.extend_from_slice(name.as_bytes());
            let path = abs.join(&name);
            if is_excluded(&String::from_utf8_lossy(&key)) && !self.live.is_with_as_is(&path) {
                continue;
            }
            // An entry replaced between two looks (a file by a link, a link by a file) is
            // looked at again; one that keeps changing is left out, like one deleted.
            let mut first = match &dir {
                Some(dir) if regular && opened < self.open_budget => open_in(dir, &name),
                _ => None,
            };
            let mut looked = None;
            for _ in 0..3 {
                match self.look_at(&path, &key, &mut opened, first.take())? {
                    Look::Changed => continue,
                    Look::Gone => break,
                    Look::Entry(entry) => {
                        looked = Some(*entry);
                        break;
                    }
                }
            }
            if let Some((meta, code, what)) = looked {
                // A blocked file is listed, and walked, as its block directory.
                let (name, key) = match what {
                    What::Blocked(_) => (
                        std::ffi::OsString::from(std::ffi::OsStr::from_bytes(&blocks::dir_name(
                            name.as_bytes(),
                        ))),
                        blocks::dir_name(&key),
                    ),
                    _ => (name, key),
                };
                children.push(Child {
                    name,
                    key,
                    path,
                    meta,
                    code,
                    what,
                });
            }
        }
        Ok(children)
    }

    /// One entry of a directory being scanned (see [`Walker::scan_dir`]); `first`: the
    /// regular file there, already opened ([`Walker::opens_first`]).
    fn look_at(
        &mut self,
        path: &Path,
        key: &[u8],
        opened: &mut usize,
        mut first: Option<(File, fs::Metadata)>,
    ) -> Result<Look> {
        let meta = match &first {
            Some((_, meta)) => meta.clone(),
            None => match fs::symlink_metadata(path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Look::Gone),
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot stat {}", path.display()));
                }
            },
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            if self.out_id == Some((meta.dev(), meta.ino())) {
                return Ok(Look::Gone);
            }
            if blocked::mistaken_for_blocks(path) {
                bail!(
                    "./{} is a directory a restore would take for a large file kept in blocks \
                     (its name ends with {} and its {} starts with '{}'): rename it, then save again",
                    String::from_utf8_lossy(key),
                    blocks::DIR_SUFFIX,
                    blocks::INDEX_NAME,
                    blocks::MAGIC
                );
            }
            return Ok(Look::Entry(Box::new((meta, Code::Directory, What::Dir))));
        }
        if ft.is_file() {
            if let Some(db) = self.live.get(path) {
                // Its stamps were taken before its copy (the snapshot has them).
                let parent = self.parent_blocks(key);
                let in_blocks = |from| {
                    Look::Entry(Box::new((
                        meta.clone(),
                        Code::Directory,
                        What::Blocked(Box::new(Blocked {
                            file_key: key.to_vec(),
                            meta: meta.clone(),
                            from,
                            parent: parent.clone(),
                        })),
                    )))
                };
                return Ok(match &db.archive {
                    // Kept in the form the parent has it in.
                    Archive::Kept => match &parent {
                        Some(record) => in_blocks(BlockedFrom::Kept(record.clone())),
                        None => Look::Entry(Box::new((meta, Code::Unchanged, What::Kept))),
                    },
                    Archive::Pages => in_blocks(BlockedFrom::Pages(path.to_path_buf())),
                    Archive::Copy(copy) => {
                        let file = File::open(copy)
                            .with_context(|| format!("cannot read {}", copy.display()))?;
                        Look::Entry(Box::new((meta, Code::Included, What::LiveCopy(file))))
                    }
                    // A damaged one as it is, the way every file goes.
                    Archive::AsIs => match take_or_open(&mut first, path)? {
                        Some((file, meta)) => {
                            Look::Entry(Box::new((meta, Code::Included, What::File(Some(file)))))
                        }
                        None => Look::Changed,
                    },
                });
            }
            if self.live.is_left_out(path) {
                return Ok(Look::Gone);
            }
        }
        if !(ft.is_file() || ft.is_symlink()) {
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
            let msg = format!("skipping {what} ./{}", String::from_utf8_lossy(key));
            (self.warn)(&msg);
            self.skipped.push(msg);
            return Ok(Look::Gone);
        }
        // A damaged database's sidecar is written even when its stamp is the parent's:
        // the parent may have archived the database as a copy, and so left it out.
        let unchanged = !self.live.is_with_as_is(path)
            && self.chain.as_ref().is_some_and(|chain| {
                chain
                    .parent
                    .as_ref()
                    .is_some_and(|p| p.unchanged(key, &Stamp::of(&meta)))
            });
        // A file the parent has in blocks is kept so when it can still be; else it is
        // written, whole or in blocks, as a changed file is.
        let parent_blocks = self.parent_blocks(key);
        let may_block = ft.is_file() && blocked::may_block(path, &meta);
        let unchanged = unchanged && (parent_blocks.is_none() || may_block);
        let in_blocks = may_block
            && match &parent_blocks {
                Some(_) if unchanged => true,
                _ => !unchanged && blocked::large_enough(meta.len(), self.block_threshold),
            };
        let mut member = b"./".to_vec();
        member.extend_from_slice(key);
        let (meta, what) = if in_blocks {
            let (meta, from) = match parent_blocks.clone() {
                Some(record) if unchanged => (meta, BlockedFrom::Kept(record)),
                // Opened now, as every changed file is, so the listing names what is read.
                _ => match take_or_open(&mut first, path)? {
                    Some((file, meta)) if meta.nlink() == 1 => {
                        *opened += 1;
                        (meta, BlockedFrom::File(file))
                    }
                    _ => return Ok(Look::Changed),
                },
            };
            let blocked = Blocked {
                file_key: key.to_vec(),
                meta: meta.clone(),
                from,
                parent: parent_blocks,
            };
            (meta, What::Blocked(Box::new(blocked)))
        } else if ft.is_symlink() {
            if unchanged {
                (meta, What::Kept)
            } else {
                match fs::read_link(path) {
                    Ok(target) => (meta, What::Symlink(target)),
                    Err(e) if changed_under_us(&e) => return Ok(Look::Changed),
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("cannot read link {}", path.display()));
                    }
                }
            }
        } else {
            let inode = (meta.dev(), meta.ino());
            match self.hardlinks.get(&inode) {
                // Another name of an inode this link already has: kept with it when both
                // names are unchanged, else a hard link to the name it has, so a name that
                // moved never splits the inode in two (a kept name restores as it was).
                Some(_) if unchanged && self.kept_inodes.contains(&inode) => (meta, What::Kept),
                Some(first) => {
                    let first = first.clone();
                    (meta, What::Hardlink(first))
                }
                None if unchanged => {
                    if meta.nlink() > 1 {
                        self.hardlinks.insert(inode, member);
                        self.kept_inodes.insert(inode);
                    }
                    (meta, What::Kept)
                }
                None if *opened < self.open_budget => match take_or_open(&mut first, path)? {
                    None => return Ok(Look::Changed),
                    Some((file, meta)) => {
                        *opened += 1;
                        if meta.nlink() > 1 {
                            self.hardlinks.insert((meta.dev(), meta.ino()), member);
                        }
                        (meta, What::File(Some(file)))
                    }
                },
                None => {
                    if meta.nlink() > 1 {
                        self.hardlinks.insert(inode, member);
                    }
                    (meta, What::File(None))
                }
            }
        };
        let code = match what {
            What::Kept => Code::Unchanged,
            What::Blocked(_) => Code::Directory,
            _ => Code::Included,
        };
        if let Some(chain) = self.chain.as_mut() {
            chain.next.entries.insert(key.to_vec(), Stamp::of(&meta));
        }
        Ok(Look::Entry(Box::new((meta, code, what))))
    }

    /// Writes the directory's own member (`member`, `./…/`): a plain directory, or in
    /// chain mode its dumpdir listing every child that is in the archive or kept.
    fn append_dir(&mut self, member: &[u8], meta: &fs::Metadata, children: &[Child]) -> Result<()> {
        let shown = String::from_utf8_lossy(member).into_owned();
        let dumpdir = match self.chain {
            Some(_) => Some(
                Dumpdir::new(
                    children
                        .iter()
                        .map(|c| (c.code, c.name.as_bytes().to_vec())),
                )
                .with_context(|| format!("cannot list {shown}"))?
                .render(),
            ),
            None => None,
        };
        let payload = Payload::directory(dumpdir.as_deref());
        self.append(
            member,
            &Attrs::of(meta),
            tar::EntryType::Directory,
            None,
            payload,
        )
        .with_context(|| format!("cannot archive {shown}"))
    }

    /// A directory: its member (with its dumpdir in chain mode), then the files and links
    /// in it, then each subdirectory in turn. Files before subdirectories: the files a scan
    /// opened stay open only until their own directory is written.
    fn walk_dir(
        &mut self,
        abs: &Path,
        rel: &[u8],
        member: &[u8],
        meta: &fs::Metadata,
    ) -> Result<()> {
        let names = match Self::list_dir(abs) {
            Ok(names) => names,
            // Listed by its parent, gone (or replaced) since: saved as it was found, empty.
            Err(e) if !rel.is_empty() && changed_under_us(&e) => {
                let msg = format!(
                    "{} went away while the save ran; it is saved as an empty directory",
                    String::from_utf8_lossy(member)
                );
                (self.warn)(&msg);
                Vec::new()
            }
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", abs.display())),
        };
        let children = self.scan_dir(abs, rel, names)?;
        self.append_dir(member, meta, &children)?;
        let mut dirs = Vec::new();
        for child in children {
            match child.what {
                What::Dir | What::Blocked(_) => dirs.push(child),
                What::Kept => {
                    if let Some(chain) = self.chain.as_mut() {
                        chain.unchanged += 1;
                    }
                }
                _ => self.append_entry(child)?,
            }
        }
        for dir in dirs {
            let mut member = b"./".to_vec();
            member.extend_from_slice(&dir.key);
            member.push(b'/');
            match dir.what {
                What::Blocked(blocked) => self.append_blocked(&member, *blocked)?,
                _ => self.walk_dir(&dir.path, &dir.key, &member, &dir.meta)?,
            }
        }
        Ok(())
    }

    /// What the parent wrote in blocks of the file at `key`, in chain mode.
    fn parent_blocks(&self, key: &[u8]) -> Option<BlockRecord> {
        let parent = self.chain.as_ref()?.parent.as_ref()?;
        parent.blocks.get(key).cloned()
    }

    /// A file, symlink or hard link a scan found.
    fn append_entry(&mut self, child: Child) -> Result<()> {
        let Child {
            key,
            path,
            meta,
            what,
            ..
        } = child;
        let mut member = b"./".to_vec();
        member.extend_from_slice(&key);
        let shown = String::from_utf8_lossy(&member).into_owned();
        let attrs = Attrs::of(&meta);
        let appended = match what {
            What::Symlink(target) => self.append(
                &member,
                &attrs,
                tar::EntryType::Symlink,
                Some(target.as_os_str().as_bytes()),
                Payload::None,
            ),
            What::Hardlink(first) => self.append(
                &member,
                &attrs,
                tar::EntryType::Link,
                Some(&first),
                Payload::None,
            ),
            What::File(opened) => {
                let file = match opened {
                    Some(file) => Some(file),
                    None => open_regular(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?
                        .map(|(file, _)| file),
                };
                match file {
                    Some(file) => {
                        let holes = sparse::may_have_holes(meta.len(), meta.blocks());
                        self.append_file(&member, &attrs, file, holes)
                    }
                    None => {
                        // Past the open-file budget and gone before its turn: the listing
                        // already names it, so it must be a member (else a restore keeps
                        // the parent's version); it is one of zeros, and said.
                        let msg = format!(
                            "{shown} went away while the save ran; the backup holds zeros in its place"
                        );
                        (self.warn)(&msg);
                        self.skipped.push(msg);
                        self.append(
                            &member,
                            &attrs,
                            tar::EntryType::Regular,
                            None,
                            Payload::Data(&mut io::empty()),
                        )
                    }
                }
            }
            What::LiveCopy(file) => {
                let len = file.metadata()?.len();
                let mut file = file;
                self.append(
                    &member,
                    &attrs,
                    tar::EntryType::Regular,
                    None,
                    Payload::Sized(&mut file, len),
                )
            }
            What::Dir | What::Kept | What::Blocked(_) => Ok(()),
        };
        appended.with_context(|| format!("cannot archive {shown}"))
    }

    /// A regular file's member: an old GNU sparse member when it has holes (looked for
    /// only where `may_have_holes`: [`sparse::may_have_holes`]).
    fn append_file(
        &mut self,
        member: &[u8],
        meta: &Attrs,
        file: File,
        may_have_holes: bool,
    ) -> io::Result<()> {
        let map = may_have_holes
            .then(|| sparse::data_map(&file, meta.len))
            .flatten();
        match map {
            Some(map) => {
                let prefix = sparse::extension_blocks(&map, meta.len);
                let mut payload = sparse::Payload::new(&file, prefix, &map);
                self.append(
                    member,
                    meta,
                    tar::EntryType::GNUSparse,
                    None,
                    Payload::Sparse(&mut payload, &map),
                )
            }
            None => {
                let mut file = file;
                self.append(
                    member,
                    meta,
                    tar::EntryType::Regular,
                    None,
                    Payload::Data(&mut file),
                )
            }
        }
    }

    /// A file kept in blocks (box_proto::archive::blocks): its directory `dir_member`
    /// (`./…/NAME.box-blocks/`, mode 0700, the file's owner and mtime; in chain mode its
    /// dumpdir says which blocks this link holds), the blocks it holds, then the index,
    /// last, with the hashes of what was written.
    ///
    /// When the parent has the file in blocks, a first pass hashes every block (the
    /// listing must say `Y` or `N` before the blocks follow) and a second writes the
    /// changed ones; else one pass writes them all. A database's passes read its page
    /// image inside one read transaction, so both see the same state.
    fn append_blocked(&mut self, dir_member: &[u8], b: Blocked) -> Result<()> {
        let shown = String::from_utf8_lossy(dir_member).into_owned();
        let Blocked {
            file_key,
            meta,
            from,
            parent,
        } = b;
        let parent = parent.filter(|p| self.chain.is_some() && p.block_size == DEFAULT_BLOCK_SIZE);
        let record = match from {
            BlockedFrom::Kept(record) => {
                let codes = vec![Code::Unchanged; record.blocks.len()];
                self.append_block_dir(dir_member, &meta, &codes, Code::Unchanged)?;
                if let Some(chain) = self.chain.as_mut() {
                    chain.unchanged += 1;
                }
                record
            }
            BlockedFrom::File(file) => {
                let mut src = FileSource {
                    size: meta.len(),
                    file,
                };
                let mut buf = self.take_block_buf();
                let first = match parent {
                    Some(_) => Some(
                        blocked::hash_blocks(&mut src, DEFAULT_BLOCK_SIZE, &mut buf)
                            .with_context(|| format!("cannot read {shown}"))?,
                    ),
                    None => None,
                };
                self.block_buf = buf;
                self.write_blocks(dir_member, &meta, &mut src, first, parent.as_ref())?
            }
            BlockedFrom::Pages(db) => {
                let mut buf = self.take_block_buf();
                let (mut image, first) = live_db::read_pages(&file_key, &db, |mut image| {
                    let first = match parent {
                        Some(_) => Some(
                            blocked::hash_blocks(&mut image, DEFAULT_BLOCK_SIZE, &mut buf)
                                .map_err(|e| CopyFailure::Other(e.to_string()))?,
                        ),
                        None => None,
                    };
                    Ok((image, first))
                })?;
                self.block_buf = buf;
                let record =
                    self.write_blocks(dir_member, &meta, &mut image, first, parent.as_ref())?;
                image.finish().map_err(|f| {
                    anyhow::anyhow!("cannot finish reading the database {shown}: {}", f.said())
                })?;
                record
            }
        };
        if let Some(chain) = self.chain.as_mut() {
            chain.next.blocks.insert(file_key, record);
        }
        Ok(())
    }

    /// Block `i` of a block directory `dir_member` of the file `meta`.
    fn append_block(
        &mut self,
        dir_member: &[u8],
        meta: &fs::Metadata,
        i: usize,
        mut data: &[u8],
    ) -> io::Result<()> {
        let mut member = dir_member.to_vec();
        member.extend_from_slice(blocks::block_name(i as u64).as_bytes());
        let len = data.len() as u64;
        self.append(
            &member,
            &Attrs::of_block_dir(meta, 0o600, len),
            tar::EntryType::Regular,
            None,
            Payload::Sized(&mut data, len),
        )
    }

    /// The buffer one block is read into, allocated at the first blocked file.
    fn take_block_buf(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.block_buf);
        buf.resize(DEFAULT_BLOCK_SIZE as usize, 0);
        buf
    }

    /// A block directory's own member: in chain mode, its dumpdir lists each block by
    /// `codes` and the index by `index`.
    fn append_block_dir(
        &mut self,
        dir_member: &[u8],
        meta: &fs::Metadata,
        codes: &[Code],
        index: Code,
    ) -> Result<()> {
        let shown = String::from_utf8_lossy(dir_member).into_owned();
        let dumpdir = match self.chain {
            Some(_) => {
                let listed = codes
                    .iter()
                    .enumerate()
                    .map(|(i, code)| (*code, blocks::block_name(i as u64).into_bytes()))
                    .chain([(index, blocks::INDEX_NAME.as_bytes().to_vec())]);
                Some(
                    Dumpdir::new(listed)
                        .with_context(|| format!("cannot list {shown}"))?
                        .render(),
                )
            }
            None => None,
        };
        let payload = Payload::directory(dumpdir.as_deref());
        let attrs = Attrs::of_block_dir(meta, 0o700, 0);
        self.append(dir_member, &attrs, tar::EntryType::Directory, None, payload)
            .with_context(|| format!("cannot archive {shown}"))
    }

    /// The block directory of `src` (the file `meta`): its member, the blocks `first`
    /// (pass 1's whole-file and block hashes) says changed since `parent` (all of them
    /// without a first pass), the index. What it records for the next link.
    fn write_blocks(
        &mut self,
        dir_member: &[u8],
        meta: &fs::Metadata,
        src: &mut dyn BlockSource,
        first: Option<(PartHash, Vec<PartHash>)>,
        parent: Option<&BlockRecord>,
    ) -> Result<BlockRecord> {
        let shown = String::from_utf8_lossy(dir_member).into_owned();
        let (size, block_size) = (src.size(), DEFAULT_BLOCK_SIZE);
        let count = blocks::block_count(size, block_size) as usize;
        let codes = match &first {
            Some((_, hashes)) => blocked::codes(
                &BlockRecord {
                    size,
                    block_size,
                    blocks: hashes.clone(),
                },
                parent,
            ),
            None => vec![Code::Included; count],
        };
        self.append_block_dir(dir_member, meta, &codes, Code::Included)?;
        let mut buf = self.take_block_buf();
        let mut hashes = Vec::with_capacity(count);
        let mut moved = false;
        let file_hash = match first {
            // One pass, every block in order (a database's in one scan): the whole file's
            // hash is of what is written.
            None => {
                let mut whole = PartHasher::new(PartHashAlgo::Xxh3_128);
                src.each_block(block_size, &mut buf, &mut |data| {
                    whole.update(data);
                    hashes.push(blocked::block_hash(data));
                    self.append_block(dir_member, meta, hashes.len() - 1, data)
                })
                .with_context(|| format!("cannot archive {shown}"))?;
                whole.finish()
            }
            // Pass 2: the changed blocks only, read at their offsets.
            Some((file_hash, first)) => {
                for (i, code) in codes.iter().enumerate() {
                    if *code == Code::Unchanged {
                        hashes.push(first[i]);
                        continue;
                    }
                    let len = blocks::block_len(size, block_size, i as u64) as usize;
                    let data = &mut buf[..len];
                    src.read_at(i as u64 * block_size, data)
                        .with_context(|| format!("cannot read {shown}"))?;
                    let hash = blocked::block_hash(data);
                    moved |= first[i] != hash;
                    hashes.push(hash);
                    self.append_block(dir_member, meta, i, data)
                        .with_context(|| format!("cannot archive {shown}"))?;
                }
                file_hash
            }
        };
        if hashes.len() != count {
            bail!(
                "cannot archive {shown}: it gave {} blocks where its size makes {count}",
                hashes.len()
            );
        }
        let file_hash = match moved {
            false => file_hash,
            // Written bytes differ from the first pass's: the file is being written. The
            // whole-file hash must be of what a restore puts together.
            true => {
                rehash(src, &hashes, &mut buf).with_context(|| format!("cannot archive {shown}"))?
            }
        };
        self.block_buf = buf;
        let index = BlockIndex {
            size,
            block_size,
            mode: meta.mode() & 0o7777,
            mtime: (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32),
            file_hash,
            blocks: hashes,
        };
        let text = index.render();
        let mut member = dir_member.to_vec();
        member.extend_from_slice(blocks::INDEX_NAME.as_bytes());
        let len = text.len() as u64;
        self.append(
            &member,
            &Attrs::of_block_dir(meta, 0o600, len),
            tar::EntryType::Regular,
            None,
            Payload::Sized(&mut text.as_bytes(), len),
        )
        .with_context(|| format!("cannot archive {shown}"))?;
        Ok(BlockRecord {
            size,
            block_size,
            blocks: index.blocks,
        })
    }
}

/// The whole-file hash of what a restore puts together from `hashes` (the kept blocks'
/// and those written), reading `src` again: each block must still have its hash, or the
/// file changed in place, where this link could no longer follow, while the save ran.
fn rehash(src: &mut dyn BlockSource, hashes: &[PartHash], buf: &mut [u8]) -> Result<PartHash> {
    let size = src.size();
    let mut whole = PartHasher::new(PartHashAlgo::Xxh3_128);
    for (i, hash) in hashes.iter().enumerate() {
        let len = blocks::block_len(size, DEFAULT_BLOCK_SIZE, i as u64) as usize;
        src.read_at(i as u64 * DEFAULT_BLOCK_SIZE, &mut buf[..len])?;
        if blocked::block_hash(&buf[..len]) != *hash {
            bail!(
                "it was written to in place while the save ran, faster than it could be \
                 read; save again once what writes it is done (the box's own databases are \
                 read in one transaction and never meet this)"
            );
        }
        whole.update(&buf[..len]);
    }
    Ok(whole.finish())
}

/// What a look at one directory entry found.
enum Look {
    /// Gone, or never archived (a socket, the export's own output).
    Gone,
    /// Replaced between two looks: look again.
    Changed,
    Entry(Box<(fs::Metadata, Code, What)>),
}

/// Writes this export's place in its chain into the runtime manifest it archives (its
/// position, and the digest of the backup it builds on): how a restore finds the parent,
/// inside the encrypted file. An export outside a chain (`None`) takes the keys out: a
/// manifest that still named the last chain's parent would make this backup claim it too.
/// With it, what the check of the databases' copies found (`sqlite_check`).
/// The manifest keeps its owner. (The agent can write this file: box compares what the
/// published backup says with the parent it asked for.)
fn record_manifest(root: &Path, chain: Option<&ChainOptions>, sqlite_check: &str) -> Result<()> {
    use box_proto::manifest::{
        CHAIN_LINK_KEY, CHAIN_PARENT_KEY, RuntimeManifest, SQLITE_CHECK_KEY,
    };
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
        // Outside a chain, a tree without a manifest gets none (a box always has one).
        Err(e) if e.kind() == io::ErrorKind::NotFound && chain.is_none() => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (RuntimeManifest::new(), None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    match chain {
        Some(chain) => {
            let (link, parent) = match &chain.parent {
                Some(p) => (p.link + 1, p.backup.clone().unwrap_or_default()),
                None => (0, String::new()),
            };
            manifest.set(CHAIN_LINK_KEY, &link.to_string());
            manifest.set(CHAIN_PARENT_KEY, &parent);
        }
        None => {
            manifest.remove(CHAIN_LINK_KEY);
            manifest.remove(CHAIN_PARENT_KEY);
        }
    }
    manifest.set(SQLITE_CHECK_KEY, sqlite_check);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    crate::fsutil::write_private(&path, manifest.render().as_bytes(), 0o600, owner)
}

/// Runs an export. `warn` receives one line per skipped special file, and per entry that
/// went away while it ran.
pub fn export(opts: &ExportOptions, warn: Box<dyn FnMut(&str)>) -> Result<ExportSummary> {
    export_announcing(opts, warn, None)
}

/// [`export`], announcing each finished part to a reader as [`Announce`] says.
pub fn export_announcing(
    opts: &ExportOptions,
    mut warn: Box<dyn FnMut(&str)>,
    announce: Option<Announce>,
) -> Result<ExportSummary> {
    let root_meta = fs::metadata(&opts.root)
        .with_context(|| format!("cannot read the data root {}", opts.root.display()))?;
    if !root_meta.is_dir() {
        bail!("data root {} is not a directory", opts.root.display());
    }
    let mut parts = PartWriter::create(&opts.out, opts.part_size)?.hashing(opts.part_hash);
    if let Some(announce) = announce {
        parts = parts.announcing(announce);
    }
    let out_id = fs::metadata(&opts.out).ok().map(|m| (m.dev(), m.ino()));
    // The live databases first: their copies are what the walk archives, and what they
    // say goes into the manifest the walk archives too.
    let parent = opts.chain.as_ref().and_then(|c| c.parent.as_ref());
    let live = LiveDatabases::prepare(&opts.root, &opts.out, parent, opts.block_files_above)?;
    for (db, why) in &live.damaged {
        warn(&format!(
            "the database {db} fails SQLite's quick_check ({why}); it is saved as it is, sidecars included"
        ));
    }
    record_manifest(&opts.root, opts.chain.as_ref(), &live.verdict())?;
    let out = WriteBehind::spawn(parts).context("cannot start the export's output thread")?;
    let mut encoder =
        zstd::stream::write::Encoder::new(out, opts.level).context("cannot start zstd")?;
    encoder
        .include_checksum(true)
        .context("cannot configure zstd")?;
    compress::use_workers(&mut encoder, opts.threads)
        .context("cannot start zstd worker threads")?;
    let mut builder = tar::Builder::new(encoder);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    let mut walker = Walker {
        builder,
        hardlinks: HashMap::new(),
        kept_inodes: HashSet::new(),
        users: HashMap::new(),
        groups: HashMap::new(),
        members: 0,
        skipped: Vec::new(),
        warn,
        out_id,
        open_budget: open_budget(),
        copy_buf: vec![0u8; COPY_BUF],
        block_threshold: opts.block_files_above,
        block_buf: Vec::new(),
        chain: opts.chain.as_ref().map(|c| Chain {
            next: Snapshot {
                backup: None,
                link: c.parent.as_ref().map_or(0, |p| p.link + 1),
                entries: live.stamps.iter().cloned().collect(),
                blocks: HashMap::new(),
                legacy: false,
            },
            parent: c.parent.clone(),
            unchanged: 0,
        }),
        live,
    };
    walker.walk_dir(&opts.root, b"", b"./", &root_meta)?;
    if let Some(chain) = &mut walker.chain {
        walker.live.settle_wal_stamps(&mut chain.next.entries);
    }
    let _ = fs::remove_dir_all(opts.out.join("live-db"));
    let encoder = walker
        .builder
        .into_inner()
        .context("cannot finish the tar stream")?;
    let out = encoder.finish().context("cannot finish the zstd stream")?;
    let parts = out.finish()?;
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
