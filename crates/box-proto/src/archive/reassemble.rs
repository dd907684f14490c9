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
use crate::archive::holes::copy_with_holes;
use crate::archive::part_hash::{PartHashAlgo, PartHasher};
use crate::archive::room::Room;
use crate::archive::shown::shown_name;
use crate::archive::unpack::{COPY_BUF, set_times_fd};

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
    let refused = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "cannot restore {} from its blocks ({}): {why}",
                shown_name(&file_key),
                shown_name(dir_name)
            ),
        )
    };
    let failed = |e: io::Error, what: &str| {
        io::Error::new(
            e.kind(),
            format!("cannot {what} {}: {e}", shown_name(&file_key)),
        )
    };

    let parent = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(root.join(OsStr::from_bytes(parent_key)))
        .map_err(|e| failed(e, "open the directory of"))?;
    let dir = open_at(&parent, dir_name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .map_err(|e| failed(e, "open the blocks of"))?;
    let Some(index) = open_index(&dir).map_err(|e| failed(e, "read the block index of"))? else {
        return Ok(false);
    };
    let listed = names_in(&dir).map_err(|e| failed(e, "list the blocks of"))?;
    // An index holds one line per block: one longer than the blocks beside it make is
    // refused before it is read (the format's own cap is hundreds of MiB).
    let cap = INDEX_HEADER_BYTES + INDEX_LINE_BYTES * listed.len() as u64;
    let index = read_index(index, cap)
        .map_err(|e| failed(e, "read the block index of"))?
        .ok_or_else(|| refused(format!("its index is longer than {cap} bytes")))?;
    let index = BlockIndex::parse(&index).map_err(|e| refused(e.to_string()))?;
    let count = index.blocks.len() as u64;

    let mut present = HashSet::new();
    for entry in &listed {
        if entry == INDEX_NAME.as_bytes() {
            continue;
        }
        match blocks::block_number(entry) {
            Some(i) if i < count => {
                present.insert(i);
            }
            _ => {
                return Err(refused(format!(
                    "{} is not one of its {count} blocks",
                    shown_name(entry)
                )));
            }
        }
    }
    if let Some(missing) = (0..count).find(|i| !present.contains(i)) {
        return Err(refused(format!(
            "block {} is missing",
            blocks::block_name(missing)
        )));
    }

    let out = open_at(
        &parent,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    )
    .map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => refused("a file of that name is already there".into()),
        _ => failed(e, "create"),
    })?;
    if writing.buf.is_empty() {
        *writing.buf = vec![0u8; COPY_BUF];
    }
    let mut whole = PartHasher::new(PartHashAlgo::Xxh3_128);
    for (i, expected) in (0u64..).zip(&index.blocks) {
        let block_name = blocks::block_name(i);
        let block = open_at(
            &dir,
            block_name.as_bytes(),
            libc::O_RDONLY | libc::O_NONBLOCK,
            0,
        )
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refused(format!("block {block_name} is a symlink")),
            _ => failed(e, &format!("open block {block_name} of")),
        })?;
        let meta = block
            .metadata()
            .map_err(|e| failed(e, &format!("read block {block_name} of")))?;
        if !meta.is_file() {
            return Err(refused(format!("block {block_name} is not a regular file")));
        }
        if meta.nlink() != 1 {
            return Err(refused(format!(
                "block {block_name} is a hard link ({} links)",
                meta.nlink()
            )));
        }
        let len = index.block_len(i);
        if meta.len() != len {
            return Err(refused(format!(
                "block {block_name} is {} bytes long, not {len}",
                meta.len()
            )));
        }
        let mut reading = Hashing {
            inner: block.take(len),
            block: PartHasher::new(PartHashAlgo::Xxh3_128),
            whole: &mut whole,
        };
        let offset = i * index.block_size;
        let copied = copy_with_holes(writing.buf, &mut reading, &out, offset, writing.room)
            .map_err(|e| failed(e, "write"))?;
        if copied != len {
            return Err(refused(format!(
                "block {block_name} ended after {copied} of its {len} bytes"
            )));
        }
        if reading.block.finish() != *expected {
            return Err(refused(format!(
                "block {block_name} does not have the hash its index gives"
            )));
        }
        unlink_at(&dir, block_name.as_bytes(), 0)
            .map_err(|e| failed(e, &format!("remove block {block_name} of")))?;
    }
    if whole.finish() != index.file_hash {
        return Err(refused(
            "its blocks together do not have the file hash its index gives".into(),
        ));
    }
    // A file that ends in zeros ends in a hole: its length is set, not written.
    if out.metadata().map_err(|e| failed(e, "read"))?.len() != index.size {
        out.set_len(index.size).map_err(|e| failed(e, "size"))?;
    }
    let mut mode = index.mode & 0o7777;
    if !writing.set_id_files {
        mode &= !0o6000;
    }
    set_times_fd(&out, index.mtime).map_err(|e| failed(e, "set the time of"))?;
    out.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| failed(e, "set the mode of"))?;
    unlink_at(&dir, INDEX_NAME.as_bytes(), 0).map_err(|e| failed(e, "remove the index of"))?;
    drop(dir);
    unlink_at(&parent, dir_name, libc::AT_REMOVEDIR)
        .map_err(|e| failed(e, "remove the block directory of"))?;
    Ok(true)
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
