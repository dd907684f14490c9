//! Reassembly of a large file kept in blocks ([`blocks`](crate::archive::blocks)) when a
//! restore has unpacked its block directory: `dir/NAME.box-blocks/` becomes `dir/NAME`
//! again, checked against its index, before the restore is swapped in or published.
//!
//! Everything in the directory was written in the guest, so it is checked as hostile input:
//!
//! * a directory counts as a block directory only by its suffix *and* an `index` regular
//!   file whose first line is [`MAGIC`]; any other directory is left as it is (a user's own
//!   `x.box-blocks`);
//! * the index must parse, and the directory must hold exactly it and the blocks it lists,
//!   each a regular file with one link, of its length and hash; the whole file's hash is
//!   checked at the end. Anything else refuses the restore, naming the file and the block;
//! * every open is relative to a directory descriptor and never follows a symlink; `NAME`
//!   is created `O_EXCL`, so one already there refuses the restore rather than be replaced;
//! * the file is written with the unpacker's [`copy_with_holes`] and [`Room`], so zero
//!   runs stay holes and the destination keeps its margin; each block is removed as soon
//!   as it is copied, so the extra room needed is one block, not the file.

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::archive::blocks::{self, BlockIndex, INDEX_NAME, MAGIC};
use crate::archive::copy::COPY_BUF;
use crate::archive::holes::copy_with_holes;
use crate::archive::part_hash::{PartHashAlgo, PartHasher};
use crate::archive::room::Room;
use crate::archive::shown::shown_name;
use crate::archive::times::set_times_fd;

/// What a reassembly writes with: the unpacker's copy buffer (allocated at the first
/// file), its room, and whether files keep their set-id bits.
pub(crate) struct Writing<'a> {
    pub buf: &'a mut Vec<u8>,
    pub room: &'a mut Room,
    pub set_id_files: bool,
}

/// If the directory `key` (relative to `root`, made by the unpack) is a block directory,
/// reassembles its file beside it and removes it: `Ok(true)`. `Ok(false)`: not a block
/// directory, left as it is.
pub(crate) fn reassemble(root: &Path, key: &[u8], writing: &mut Writing<'_>) -> io::Result<bool> {
    let (parent_key, dir_name) = match key.iter().rposition(|b| *b == b'/') {
        Some(i) => (&key[..i], &key[i + 1..]),
        None => (&b""[..], key),
    };
    let Some(name) = blocks::file_name(dir_name) else {
        return Ok(false);
    };
    let mut file_key = parent_key.to_vec();
    if !file_key.is_empty() {
        file_key.push(b'/');
    }
    file_key.extend_from_slice(name);
    let said = Said {
        file_key: &file_key,
        dir_name,
    };

    let parent = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(root.join(OsStr::from_bytes(parent_key)))
        .map_err(|e| said.failed(e, "open the directory of"))?;
    let dir = open_at(&parent, dir_name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(|e| said.failed(e, "open the blocks of"))?;
    let Some(index) = open_index(&dir).map_err(|e| said.failed(e, "read the block index of"))?
    else {
        return Ok(false);
    };
    let listed = names_in(&dir).map_err(|e| said.failed(e, "list the blocks of"))?;
    // An index holds one line per block: one longer than the blocks beside it make is
    // refused before it is read (the format's own cap is hundreds of MiB).
    let cap = INDEX_HEADER_BYTES + INDEX_LINE_BYTES * listed.len() as u64;
    let index = read_index(index, cap)
        .map_err(|e| said.failed(e, "read the block index of"))?
        .ok_or_else(|| said.refused(format!("its index is longer than {cap} bytes")))?;
    let index = BlockIndex::parse(&index).map_err(|e| said.refused(e.to_string()))?;
    check_listing(&listed, index.blocks.len() as u64).map_err(|why| said.refused(why))?;

    let out = open_at(
        &parent,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )
    .map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => said.refused("a file of that name is already there".into()),
        _ => said.failed(e, "create"),
    })?;
    if writing.buf.is_empty() {
        *writing.buf = vec![0u8; COPY_BUF];
    }
    let mut whole = PartHasher::new(PartHashAlgo::Xxh3_128);
    for i in 0..index.blocks.len() as u64 {
        copy_block(&said, &dir, &index, i, &out, &mut whole, writing)?;
    }
    if whole.finish() != index.file_hash {
        return Err(
            said.refused("its blocks together do not have the file hash its index gives".into())
        );
    }
    // A file that ends in zeros ends in a hole: its length is set, not written.
    if out.metadata().map_err(|e| said.failed(e, "read"))?.len() != index.size {
        out.set_len(index.size)
            .map_err(|e| said.failed(e, "set the length of"))?;
    }
    let mut mode = index.mode & 0o7777;
    if !writing.set_id_files {
        mode &= !0o6000;
    }
    set_times_fd(&out, index.mtime).map_err(|e| said.failed(e, "set the time of"))?;
    out.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| said.failed(e, "set the mode of"))?;
    unlink_at(&dir, INDEX_NAME.as_bytes(), 0).map_err(|e| said.failed(e, "remove the index of"))?;
    drop(dir);
    unlink_at(&parent, dir_name, libc::AT_REMOVEDIR)
        .map_err(|e| said.failed(e, "remove the block directory of"))?;
    Ok(true)
}

/// How errors name the file being reassembled: its path under the data root, and its
/// block directory.
struct Said<'a> {
    file_key: &'a [u8],
    dir_name: &'a [u8],
}

impl Said<'_> {
    /// The block directory is not what its index says: the restore is refused.
    fn refused(&self, why: String) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "cannot restore {} from its blocks ({}): {why}",
                shown_name(self.file_key),
                shown_name(self.dir_name)
            ),
        )
    }

    /// A system call failed.
    fn failed(&self, e: io::Error, what: &str) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("cannot {what} {}: {e}", shown_name(self.file_key)),
        )
    }
}

/// The directory holds exactly the index and blocks `b00000000` to the last of `count`.
fn check_listing(listed: &[Vec<u8>], count: u64) -> Result<(), String> {
    let mut present = HashSet::new();
    for entry in listed {
        if entry == INDEX_NAME.as_bytes() {
            continue;
        }
        match blocks::block_number(entry) {
            Some(i) if i < count => {
                present.insert(i);
            }
            _ => {
                return Err(format!(
                    "{} is not one of its {count} blocks",
                    shown_name(entry)
                ));
            }
        }
    }
    match (0..count).find(|i| !present.contains(i)) {
        Some(missing) => Err(format!("block {} is missing", blocks::block_name(missing))),
        None => Ok(()),
    }
}

/// Copies block `i` into `out` at its offset, checking its kind, links, length and hash,
/// and removes it.
fn copy_block(
    said: &Said<'_>,
    dir: &File,
    index: &BlockIndex,
    i: u64,
    out: &File,
    whole: &mut PartHasher,
    writing: &mut Writing<'_>,
) -> io::Result<()> {
    let name = blocks::block_name(i);
    let block =
        open_at(dir, name.as_bytes(), libc::O_RDONLY | libc::O_NONBLOCK, 0).map_err(|e| match e
            .raw_os_error()
        {
            Some(libc::ELOOP) => said.refused(format!("block {name} is a symlink")),
            _ => said.failed(e, &format!("open block {name} of")),
        })?;
    let meta = block
        .metadata()
        .map_err(|e| said.failed(e, &format!("read block {name} of")))?;
    if !meta.is_file() {
        return Err(said.refused(format!("block {name} is not a regular file")));
    }
    if meta.nlink() != 1 {
        return Err(said.refused(format!(
            "block {name} is a hard link ({} links)",
            meta.nlink()
        )));
    }
    let len = index.block_len(i);
    if meta.len() != len {
        return Err(said.refused(format!(
            "block {name} is {} bytes long, not {len}",
            meta.len()
        )));
    }
    let mut reading = Hashing {
        inner: block.take(len),
        block: PartHasher::new(PartHashAlgo::Xxh3_128),
        whole,
    };
    let offset = i * index.block_size;
    let copied = copy_with_holes(writing.buf, &mut reading, out, offset, writing.room)
        .map_err(|e| said.failed(e, "write"))?;
    if copied != len {
        return Err(said.refused(format!(
            "block {name} ended after {copied} of its {len} bytes"
        )));
    }
    if reading.block.finish() != index.blocks[i as usize] {
        return Err(said.refused(format!(
            "block {name} does not have the hash its index gives"
        )));
    }
    unlink_at(dir, name.as_bytes(), 0)
        .map_err(|e| said.failed(e, &format!("remove block {name} of")))
}

/// The most bytes of an index's lines before its blocks' (its longest header is under 200).
const INDEX_HEADER_BYTES: u64 = 512;
/// The bytes of one block's line: `b00000000 xxh3-128:<32 hex digits>` and its line break.
const INDEX_LINE_BYTES: u64 = 52;

/// The `index` of a block directory, read past its first line: `None` when the directory
/// holds no `index` regular file whose first line is [`MAGIC`] (it is no block directory).
fn open_index(dir: &File) -> io::Result<Option<File>> {
    let mut file = match open_at(
        dir,
        INDEX_NAME.as_bytes(),
        libc::O_RDONLY | libc::O_NONBLOCK,
        0,
    ) {
        Ok(f) => f,
        // No index, or a symlink named index.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP)) => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut first = Vec::with_capacity(MAGIC.len() + 1);
    (&mut file)
        .take(MAGIC.len() as u64 + 1)
        .read_to_end(&mut first)?;
    Ok((first.strip_suffix(b"\n") == Some(MAGIC.as_bytes())).then_some(file))
}

/// The whole index (its first line included) when it is at most `cap` bytes long.
fn read_index(mut rest: File, cap: u64) -> io::Result<Option<Vec<u8>>> {
    let mut index = format!("{MAGIC}\n").into_bytes();
    let left = (cap + 1).saturating_sub(index.len() as u64);
    (&mut rest).take(left).read_to_end(&mut index)?;
    Ok((index.len() as u64 <= cap).then_some(index))
}

/// Feeds what is read to the block's hasher and the whole file's.
struct Hashing<'a, R> {
    inner: R,
    block: PartHasher,
    whole: &'a mut PartHasher,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.block.update(&buf[..n]);
        self.whole.update(&buf[..n]);
        Ok(n)
    }
}

fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::other("a name holds a NUL byte"))
}

/// `openat(dir, name)`, never following a symlink at `name`.
fn open_at(dir: &File, name: &[u8], flags: libc::c_int, mode: libc::c_uint) -> io::Result<File> {
    let c = c_name(name)?;
    // SAFETY: a valid directory descriptor and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened and owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn unlink_at(dir: &File, name: &[u8], flags: libc::c_int) -> io::Result<()> {
    let c = c_name(name)?;
    // SAFETY: a valid directory descriptor and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The names in the directory `dir` (without `.` and `..`), read through its descriptor.
fn names_in(dir: &File) -> io::Result<Vec<Vec<u8>>> {
    // SAFETY: duplicating a valid descriptor; fdopendir takes the copy and closedir closes it.
    let fd = unsafe { libc::dup(dir.as_raw_fd()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the copy is still ours to close.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    // The copy shares its offset with `dir`, which nothing read before.
    // SAFETY: a valid stream.
    unsafe { libc::rewinddir(stream) };
    let mut names = Vec::new();
    let result = loop {
        clear_errno();
        // SAFETY: a valid stream; the entry is read before the next call.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            break match e.raw_os_error() {
                Some(0) | None => Ok(names),
                _ => Err(e),
            };
        }
        // SAFETY: readdir's entry holds a NUL-terminated name.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    };
    // SAFETY: a valid stream, closed once.
    unsafe { libc::closedir(stream) };
    result
}

/// readdir says "no more entries" and "failed" both with NULL: only errno tells them apart.
fn clear_errno() {
    // SAFETY: the calling thread's errno.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    unsafe {
        *libc::__errno_location() = 0;
    }
    // SAFETY: as above.
    #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
    unsafe {
        *libc::__error() = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::blocks::{BlockHasher, MIN_BLOCK_SIZE, STOCK_COMMAND};
    use crate::archive::chain_state::ChainState;
    use crate::archive::unpack::Unpacker;
    use crate::archive::validate::{Limits, WalkError, walk_link};
    use std::rc::Rc;

    const BS: usize = MIN_BLOCK_SIZE as usize;
    const MTIME: (i64, u32) = (1_765_000_000, 123_456_789);

    /// One tar member: name, type flag, mode, and data (a file's bytes, a dumpdir's
    /// listing, or a link's target).
    #[derive(Clone, Copy)]
    struct M<'a>(&'a str, u8, u32, &'a [u8]);

    /// A zstd GNU tar of the members, each with mtime 1 600 000 000.
    fn tar_of(members: &[M<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for M(name, flag, mode, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::new(*flag));
            h.set_mode(*mode);
            h.set_mtime(1_600_000_000);
            let link = matches!(flag, b'1' | b'2');
            let stored: &[u8] = if link { b"" } else { data };
            h.set_size(stored.len() as u64);
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if link {
                gnu.linkname[..data.len()].copy_from_slice(data);
            }
            h.set_cksum();
            b.append(&h, stored).unwrap();
        }
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 1).unwrap()
    }

    /// The index `hb export` writes for `data` in 64 KiB blocks.
    fn index_of(data: &[u8], mode: u32) -> String {
        let mut h = BlockHasher::new(MIN_BLOCK_SIZE);
        h.update(data);
        let (file_hash, blocks) = h.finish();
        BlockIndex {
            size: data.len() as u64,
            block_size: MIN_BLOCK_SIZE,
            mode,
            mtime: MTIME,
            file_hash,
            blocks,
        }
        .render()
    }

    /// Applies the links in order into `root`, as `box load` and `hb import` do; the
    /// error of whichever side refused (the validator or the unpacker).
    fn restore(root: &Path, links: &[Vec<u8>], set_id_files: bool) -> Result<(), String> {
        let mut u = Unpacker::new(root).set_id_files(set_id_files);
        let mut prior: Option<Rc<ChainState>> = None;
        for (i, link) in links.iter().enumerate() {
            if i > 0 {
                u.next_link();
            }
            let (_, state) =
                walk_link(link.as_slice(), &Limits::default(), prior.take(), |e, k| {
                    u.unpack(e, k)
                })
                .map_err(|e| match e {
                    WalkError::Callback(e) => e.to_string(),
                    WalkError::Archive(e) => e.to_string(),
                })?;
            prior = Some(Rc::new(state));
        }
        u.finish().map_err(|e| e.to_string())
    }

    /// `home/agent/db` kept in blocks: the directories, then `extra` members inside the
    /// block directory (blocks, an index, whatever a test puts there).
    fn standalone(extra: &[M<'_>]) -> Vec<u8> {
        let mut members = vec![
            M("./", b'5', 0o755, b""),
            M("home/", b'5', 0o755, b""),
            M("home/agent/", b'5', 0o700, b""),
            M("home/agent/db.box-blocks/", b'5', 0o700, b""),
        ];
        members.extend_from_slice(extra);
        tar_of(&members)
    }

    /// Three blocks: data, zeros (to come back as a hole), and a short last one.
    fn sample() -> Vec<u8> {
        let mut data: Vec<u8> = (0..BS as u32).map(|i| (i % 251) as u8 | 1).collect();
        data.extend(vec![0u8; BS]);
        data.extend((0..1000u32).map(|i| (i % 7) as u8 + 1));
        data
    }

    fn blocks_of(data: &[u8]) -> Vec<(String, &[u8])> {
        data.chunks(BS)
            .enumerate()
            .map(|(i, c)| (format!("home/agent/db.box-blocks/b{i:08}"), c))
            .collect()
    }

    /// The members of a well-formed block directory for `data` (its index last).
    fn block_members<'a>(blocks: &'a [(String, &'a [u8])], index: &'a str) -> Vec<M<'a>> {
        let mut m: Vec<M<'_>> = blocks
            .iter()
            .map(|(n, d)| M(n.as_str(), b'0', 0o600, d))
            .collect();
        m.push(M(
            "home/agent/db.box-blocks/index",
            b'0',
            0o600,
            index.as_bytes(),
        ));
        m
    }

    #[test]
    fn a_file_in_blocks_comes_back_whole_with_its_mode_time_and_holes() {
        let data = sample();
        let index = index_of(&data, 0o4755);
        let blocks = blocks_of(&data);
        let tar = standalone(&block_members(&blocks, &index));
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), std::slice::from_ref(&tar), true).unwrap();
        let agent = dir.path().join("home/agent");
        let file = agent.join("db");
        assert_eq!(fs::read(&file).unwrap(), data);
        let m = fs::symlink_metadata(&file).unwrap();
        assert!(m.is_file());
        assert_eq!(m.mode() & 0o7777, 0o4755);
        assert_eq!((m.mtime(), m.mtime_nsec()), (MTIME.0, i64::from(MTIME.1)));
        assert!(
            m.blocks() * 512 <= (BS as u64) + 8 * 4096,
            "the zero block was written out: {} bytes allocated",
            m.blocks() * 512
        );
        let names: Vec<_> = fs::read_dir(&agent)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["db"], "the block directory is gone");
        assert_eq!(
            fs::metadata(&agent).unwrap().mtime(),
            1_600_000_000,
            "the parent's time is the archive's, set after the file was made"
        );
        // Without set-id files (box extract as root), the file loses them as any other.
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), &[tar], false).unwrap();
        let m = fs::metadata(dir.path().join("home/agent/db")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755);
    }

    #[test]
    fn an_empty_file_in_blocks_is_an_index_alone() {
        let index = index_of(b"", 0o644);
        let tar = standalone(&block_members(&[], &index));
        let dir = tempfile::tempdir().unwrap();
        restore(dir.path(), &[tar], true).unwrap();
        let m = fs::metadata(dir.path().join("home/agent/db")).unwrap();
        assert_eq!((m.len(), m.mode() & 0o7777), (0, 0o644));
    }

    /// Each damaged block directory is refused naming the file and what is wrong; the
    /// validator may refuse some first, so what is asserted is what either says.
    #[test]
    fn a_damaged_block_directory_is_refused_naming_the_file_and_the_block() {
        let data = sample();
        let index = index_of(&data, 0o644);
        let blocks = blocks_of(&data);
        let good = block_members(&blocks, &index);
        let (b0, b1, b2, idx) = (good[0].0, good[1].0, good[2].0, good[3].0);
        let mut wrong_byte = data[..BS].to_vec();
        wrong_byte[77] ^= 0x40;
        let short = &data[2 * BS..data.len() - 1];
        let file_line = |t: &str| {
            t.lines()
                .find(|l| l.starts_with("file "))
                .map(str::to_string)
        };
        let other_hash = index.replace(
            &file_line(&index).unwrap(),
            &file_line(&index_of(&vec![9u8; data.len()], 0o644)).unwrap(),
        );
        let too_long = format!("{index}{}", "x".repeat(4096));
        let replaced = |i: usize, m: M<'_>| {
            let mut ms = good.clone();
            ms[i] = m;
            standalone(&ms)
        };
        let added = |m: M<'_>| {
            let mut ms = good.clone();
            ms.push(m);
            standalone(&ms)
        };
        let without_b1: Vec<M<'_>> = good.iter().copied().filter(|m| m.0 != b1).collect();
        let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
            (
                "missing block",
                standalone(&without_b1),
                &["b00000001", "missing"],
            ),
            (
                "extra block",
                added(M("home/agent/db.box-blocks/b00000003", b'0', 0o600, b"x")),
                &["b00000003"],
            ),
            (
                "another file",
                added(M("home/agent/db.box-blocks/notes", b'0', 0o600, b"x")),
                &["notes"],
            ),
            (
                "wrong length",
                replaced(2, M(b2, b'0', 0o600, short)),
                &["b00000002", "999"],
            ),
            (
                "wrong hash",
                replaced(0, M(b0, b'0', 0o600, &wrong_byte)),
                &["b00000000", "hash"],
            ),
            (
                "symlink block",
                replaced(1, M(b1, b'2', 0o777, b"b00000000")),
                &["b00000001"],
            ),
            (
                "file hash",
                replaced(3, M(idx, b'0', 0o600, other_hash.as_bytes())),
                &["file hash"],
            ),
            (
                "index longer than its blocks make",
                replaced(3, M(idx, b'0', 0o600, too_long.as_bytes())),
                &["longer than 720 bytes"],
            ),
            (
                "unparsable index",
                replaced(3, M(idx, b'0', 0o600, b"hermes-box-blocks 1\nsize lots\n")),
                &["size is not a number"],
            ),
        ];
        for (what, tar, says) in cases {
            let dir = tempfile::tempdir().unwrap();
            let e = restore(dir.path(), &[tar], true).expect_err(what);
            assert!(e.contains("home/agent/db"), "{what}: {e}");
            for s in says {
                assert!(e.contains(s), "{what}: {e} should say {s}");
            }
        }
    }

    /// A block that is a hard link (to a user's file, or with a user's file linked to
    /// it) is refused: its bytes are not the block's own.
    #[test]
    fn a_hard_link_as_a_block_is_refused() {
        let data = sample();
        let index = index_of(&data, 0o644);
        let blocks = blocks_of(&data);
        let mut ms = vec![
            M("./", b'5', 0o755, b""),
            M("home/", b'5', 0o755, b""),
            M("home/agent/", b'5', 0o700, b""),
            M("home/agent/copy", b'0', 0o644, blocks[1].1),
            M("home/agent/db.box-blocks/", b'5', 0o700, b""),
        ];
        ms.extend(block_members(&blocks, &index));
        ms[6] = M(blocks[1].0.as_str(), b'1', 0o600, b"home/agent/copy");
        let dir = tempfile::tempdir().unwrap();
        let e = restore(dir.path(), &[tar_of(&ms)], true).unwrap_err();
        assert!(
            e.contains("home/agent/db") && e.contains("b00000001"),
            "{e}"
        );
    }

    #[test]
    fn a_file_already_beside_its_blocks_is_refused() {
        let data = sample();
        let index = index_of(&data, 0o644);
        let blocks = blocks_of(&data);
        let mut ms = vec![M("home/agent/db", b'0', 0o644, b"the user's")];
        ms.extend(block_members(&blocks, &index));
        let dir = tempfile::tempdir().unwrap();
        let e = restore(dir.path(), &[standalone(&ms)], true).unwrap_err();
        assert!(e.contains("home/agent/db"), "{e}");
        assert!(e.contains("already there"), "{e}");
    }

    /// A user's own directory named like a block directory, without an index whose first
    /// line is the magic one, is restored as it is.
    #[test]
    fn a_user_directory_with_the_suffix_is_restored_as_it_is() {
        let notes = |index: Option<(u8, &[u8])>| {
            let mut ms = vec![
                M("./", b'5', 0o755, b""),
                M("home/", b'5', 0o755, b""),
                M("home/agent/", b'5', 0o700, b""),
                M("home/agent/x.box-blocks/", b'5', 0o750, b""),
                M("home/agent/x.box-blocks/b00000000", b'0', 0o644, b"hello"),
            ];
            if let Some((flag, data)) = index {
                ms.push(M("home/agent/x.box-blocks/index", flag, 0o644, data));
            }
            tar_of(&ms)
        };
        for (what, tar) in [
            ("no index", notes(None)),
            (
                "another first line",
                notes(Some((b'0', b"hermes-box-blocks 10\nsize 5\n"))),
            ),
            (
                "an index that is a symlink",
                notes(Some((b'2', b"b00000000"))),
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            restore(dir.path(), &[tar], true).expect(what);
            let kept = dir.path().join("home/agent/x.box-blocks");
            assert_eq!(
                fs::read(kept.join("b00000000")).unwrap(),
                b"hello",
                "{what}"
            );
            assert_eq!(fs::metadata(&kept).unwrap().mode() & 0o7777, 0o750);
            assert!(
                fs::symlink_metadata(dir.path().join("home/agent/x")).is_err(),
                "{what}: nothing reassembled"
            );
        }
    }

    /// The chain: link 1 has four blocks; link 2 changes block 1 and cuts the file inside
    /// block 2, so block 3 is not listed and goes. `box load`'s reassembly and the stock
    /// `tar -x -g /dev/null` loop plus the documented command give the same bytes.
    #[test]
    fn a_chain_changes_one_block_and_truncates_as_stock_tar_and_cat_do() {
        let first: Vec<u8> = (0..(3 * BS + 300) as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut second = first[..2 * BS + 500].to_vec();
        second[BS + 10..BS + 4106].fill(0xAB);
        let one = blocks_of(&first);
        let two = blocks_of(&second);
        let (index1, index2) = (index_of(&first, 0o600), index_of(&second, 0o640));
        let top = [
            M("./", b'D', 0o755, b"Dhome\0\0"),
            M("./home/", b'D', 0o755, b"Dagent\0\0"),
            M("./home/agent/", b'D', 0o700, b"Ddb.box-blocks\0Ynote\0\0"),
        ];
        let mut link1: Vec<M<'_>> = top.to_vec();
        link1.push(M(
            "./home/agent/db.box-blocks/",
            b'D',
            0o700,
            b"Yb00000000\0Yb00000001\0Yb00000002\0Yb00000003\0Yindex\0\0",
        ));
        link1.extend(block_members(&one, &index1));
        link1.push(M("home/agent/note", b'0', 0o644, b"n"));
        let mut link2: Vec<M<'_>> = top.to_vec();
        link2[2] = M("./home/agent/", b'D', 0o700, b"Ddb.box-blocks\0Nnote\0\0");
        link2.push(M(
            "./home/agent/db.box-blocks/",
            b'D',
            0o700,
            b"Nb00000000\0Yb00000001\0Yb00000002\0Yindex\0\0",
        ));
        link2.extend(
            block_members(&two, &index2)
                .into_iter()
                .filter(|m| m.0 != two[0].0),
        );
        let links = [tar_of(&link1), tar_of(&link2)];

        let ours = tempfile::tempdir().unwrap();
        restore(ours.path(), &links, true).unwrap();
        let restored = fs::read(ours.path().join("home/agent/db")).unwrap();
        assert_eq!(restored.len(), second.len());
        assert!(restored == second, "the chain's file is not link 2's");
        let m = fs::metadata(ours.path().join("home/agent/db")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640, "link 2's index gives the mode");
        assert!(!ours.path().join("home/agent/db.box-blocks").exists());

        let gnu = std::process::Command::new("tar")
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("GNU tar"));
        if !gnu {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "GNU tar is needed"
            );
            println!("SKIPPED: GNU tar not found");
            return;
        }
        let stock = tempfile::tempdir().unwrap();
        for link in &links {
            let plain = zstd::decode_all(link.as_slice()).unwrap();
            let mut tar = std::process::Command::new("tar")
                .args(["-x", "-g", "/dev/null", "-C"])
                .arg(stock.path())
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(&mut tar.stdin.take().unwrap(), &plain).unwrap();
            assert!(tar.wait().unwrap().success());
        }
        let agent = stock.path().join("home/agent");
        let cat = std::process::Command::new("sh")
            .arg("-c")
            .arg(STOCK_COMMAND.replace("NAME", "db"))
            .current_dir(&agent)
            .status()
            .unwrap();
        assert!(cat.success());
        assert!(
            fs::read(agent.join("db")).unwrap() == restored,
            "the stock restore and box's differ"
        );
    }
}
