//! Extraction of validated members into a fresh, private staging directory, shared by
//! `box extract` (host) and `hb import` (guest).
//!
//! Members come from [`walk`](crate::archive::validate::walk) (our own tar reader, as GNU
//! tar reads archives) and are written here, never by the `tar` crate:
//!
//! * every member's parent must be a directory this extraction made (a child listed before
//!   its directory gets a private 0700 one, which the directory's member then claims; rule
//!   9 refuses the archive if it never comes), so nothing is ever written through a
//!   symlink or outside the root;
//! * files are created `O_EXCL|O_NOFOLLOW`; a sparse file's stored runs are written at
//!   their offsets and the file set to its real size, so holes stay holes, and long zero
//!   runs of any file become holes too ([`holes`](crate::archive::holes)); every byte
//!   written is first taken from the destination's [`Room`] (free space, total cap);
//! * ownership is never taken from the archive; every mode bit is, as GNU tar restores
//!   them (as root, and as a user with `-p`): sticky and setgid directories, set-id files,
//!   except that [`Unpacker::set_id_files`] can drop set-id bits from files (box
//!   extracting as root on the host must not make root-owned set-id programs);
//! * the root's mode comes from the archive only when [`Unpacker::archive_root_mode`] says
//!   so (`hb import` sets its own; `box extract`'s target keeps the user's mode);
//! * times, then modes: a file's through its open descriptor; a directory's at the very
//!   end, deepest first, the root last, with `utimensat` on the path (which needs no read
//!   permission), so a directory of mode 000 or 0311 neither stops its own children from
//!   being written nor its own time from being set by an unprivileged user (issue 13).
//!
//! The staging directory must be new and private (0700) and nobody else may write in it.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::archive::copy::COPY_BUF;
use crate::archive::holes::copy_with_holes;
use crate::archive::incremental::{Code, Dumpdir};
use crate::archive::reassemble::{Writing, reassemble};
use crate::archive::room::Room;
use crate::archive::shown::shown_name;
use crate::archive::tarread::MemberKind;
use crate::archive::times::{Time, set_times_fd, set_times_path};
use crate::archive::validate::{Entry, Limits};

/// Unpacks members one at a time into `root`.
#[derive(Debug)]
pub struct Unpacker {
    root: PathBuf,
    /// Directories made, by key: their member's mode and time once it came (`None` while
    /// only made for a child listed first).
    dirs: HashMap<Vec<u8>, Option<(u32, Time)>>,
    root_meta: Option<(u32, Time)>,
    unpacked: u64,
    /// One buffer for every file's data (allocated at the first file).
    copy_buf: Vec<u8>,
    room: Room,
    set_id_files: bool,
    archive_root_mode: bool,
    /// Which link of a chain is being applied (0: the first, or a standalone archive).
    link: u32,
    /// The link each directory was made in: a dumpdir purges only what earlier links left.
    made_in: HashMap<Vec<u8>, u32>,
}

fn context(e: io::Error, what: &str, key: &[u8]) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", shown_name(key)))
}

impl Unpacker {
    /// `root` must exist, be empty and be private to this process. The data written is
    /// capped by [`Limits::default`]'s total and by the room on `root`'s filesystem.
    pub fn new(root: &Path) -> Self {
        Self::with_room(root, Room::new(root, Limits::default().max_total_bytes))
    }

    /// The same with another [`Room`] (tests, other caps).
    pub fn with_room(root: &Path, room: Room) -> Self {
        Unpacker {
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            root_meta: None,
            unpacked: 0,
            copy_buf: Vec::new(),
            room,
            set_id_files: true,
            archive_root_mode: true,
            link: 0,
            made_in: HashMap::new(),
        }
    }

    /// Whether files keep their setuid and setgid bits (default: yes, as GNU tar).
    pub fn set_id_files(mut self, keep: bool) -> Self {
        self.set_id_files = keep;
        self
    }

    /// Whether the root takes the archive root's mode (default: yes). Its time is set
    /// either way.
    pub fn archive_root_mode(mut self, apply: bool) -> Self {
        self.archive_root_mode = apply;
        self
    }

    /// Bytes of file data really written (holes not counted).
    pub fn written(&self) -> u64 {
        self.room.written()
    }

    /// The members that follow belong to the next link of a chain, applied over what the
    /// earlier ones left (as `tar -x -g /dev/null` applies them in order): each of its
    /// dumpdirs first removes what its directory no longer holds, and a file it brings
    /// replaces the one there. [`Unpacker::finish`] runs once, after the last link.
    pub fn next_link(&mut self) {
        self.link += 1;
    }

    /// A dumpdir of a directory an earlier link made: remove what the listing no longer
    /// has, or has as another kind (GNU tar's `purge_directory`, never following a
    /// symlink), and check that what it keeps is there.
    fn purge(&mut self, key: &[u8], listing: &Dumpdir) -> io::Result<()> {
        let dir = self.path_of(key);
        let mut present = Vec::new();
        for e in fs::read_dir(&dir).map_err(|e| context(e, "cannot list", key))? {
            let e = e?;
            present.push((e.file_name().as_bytes().to_vec(), e.file_type()?.is_dir()));
        }
        for name in listing.purge(present.iter().map(|(n, d)| (n.as_slice(), *d))) {
            let mut child = key.to_vec();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(&name);
            let path = self.path_of(&child);
            let removed = if fs::symlink_metadata(&path)?.is_dir() {
                // Forget the directories inside: a later member may make them again.
                let mut inside = child.clone();
                inside.push(b'/');
                self.dirs
                    .retain(|k, _| *k != child && !k.starts_with(&inside));
                self.made_in
                    .retain(|k, _| *k != child && !k.starts_with(&inside));
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(|e| context(e, "cannot remove", &child))?;
        }
        // What the listing keeps is never purged, so it is there exactly when the
        // directory listed it: no lstat per kept entry (a link keeps almost every file).
        let present: HashSet<&[u8]> = present.iter().map(|(n, _)| n.as_slice()).collect();
        for (code, name) in listing.entries() {
            if *code == Code::Unchanged && !present.contains(name.as_slice()) {
                return Err(io::Error::other(format!(
                    "{}/{} should be there from an earlier backup of the chain, and is not",
                    shown_name(key),
                    shown_name(name)
                )));
            }
        }
        Ok(())
    }

    /// Before a non-directory member: whatever an earlier link left at its path goes
    /// (a directory there is an error: its parent's dumpdir would have removed it).
    fn replace_earlier(&self, key: &[u8], path: &Path) -> io::Result<()> {
        if self.link == 0 {
            return Ok(());
        }
        match fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => Err(io::Error::other(format!(
                "{} is a directory where this link brings a file",
                shown_name(key)
            ))),
            Ok(_) => fs::remove_file(path).map_err(|e| context(e, "cannot replace", key)),
            Err(_) => Ok(()),
        }
    }

    fn path_of(&self, key: &[u8]) -> PathBuf {
        self.root.join(OsStr::from_bytes(key))
    }

    /// Makes sure every proper prefix of `key` is a directory this extraction made.
    fn ensure_parents(&mut self, key: &[u8]) -> io::Result<()> {
        for (i, b) in key.iter().enumerate() {
            if *b != b'/' {
                continue;
            }
            let prefix = &key[..i];
            if self.dirs.contains_key(prefix) {
                continue;
            }
            let path = self.path_of(prefix);
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    self.dirs.insert(prefix.to_vec(), None);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(io::Error::other(format!(
                        "{} is not a directory of this archive (a member beneath a non-directory)",
                        shown_name(prefix)
                    )));
                }
                Err(e) => return Err(context(e, "cannot create directory", prefix)),
            }
        }
        Ok(())
    }

    /// Unpacks one entry whose key (validated) is `key`.
    pub fn unpack(&mut self, entry: &mut Entry<'_>, key: &[u8]) -> io::Result<()> {
        let member = entry.member;
        let mut mode = member.mode & 0o7777;
        if member.kind == MemberKind::File && !self.set_id_files {
            mode &= !0o6000; // setuid and setgid
        }
        let mtime = member.mtime;
        self.unpacked += 1;
        let earlier = self.made_in.get(key).is_some_and(|l| *l < self.link)
            || (key.is_empty() && self.link > 0);
        if let (Some(listing), true) = (entry.dumpdir, earlier) {
            self.purge(key, listing)?;
        }
        if key.is_empty() {
            self.root_meta = Some((mode, mtime));
            return Ok(());
        }
        self.ensure_parents(key)?;
        let path = self.path_of(key);
        if member.kind != MemberKind::Dir {
            self.replace_earlier(key, &path)?;
        }
        match member.kind {
            MemberKind::Dir => {
                match fs::DirBuilder::new().mode(0o700).create(&path) {
                    Ok(()) => {}
                    Err(e)
                        if e.kind() == io::ErrorKind::AlreadyExists
                            && (self.dirs.get(key) == Some(&None) || earlier) => {}
                    Err(e) => return Err(context(e, "cannot create directory", key)),
                }
                self.dirs.insert(key.to_vec(), Some((mode, mtime)));
                self.made_in.entry(key.to_vec()).or_insert(self.link);
            }
            MemberKind::File => {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| context(e, "cannot create file", key))?;
                if self.copy_buf.is_empty() {
                    self.copy_buf = vec![0u8; COPY_BUF];
                }
                let buf = &mut self.copy_buf;
                let room = &mut self.room;
                let written = match &member.sparse {
                    None => copy_with_holes(buf, entry, &file, 0, room),
                    Some(map) => write_sparse(buf, entry, &file, map, room),
                }
                .and_then(|n| {
                    // Whatever was left unwritten at the end is a hole too. Most files
                    // end in data, and a truncate per file is a journal update each.
                    if file.metadata()?.len() != member.size {
                        file.set_len(member.size)?;
                    }
                    Ok(n)
                })
                .map_err(|e| context(e, "cannot write", key))?;
                if written != member.size {
                    return Err(io::Error::other(format!(
                        "{} came out {written} bytes long, not {}",
                        shown_name(key),
                        member.size
                    )));
                }
                set_times_fd(&file, mtime)
                    .map_err(|e| context(e, "cannot set the time of", key))?;
                file.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(|e| context(e, "cannot set the mode of", key))?;
            }
            MemberKind::Symlink => {
                std::os::unix::fs::symlink(OsStr::from_bytes(&member.link), &path)
                    .map_err(|e| context(e, "cannot create symlink", key))?;
                set_times_path(&path, mtime)
                    .map_err(|e| context(e, "cannot set the time of", key))?;
            }
            MemberKind::Hardlink => {
                let Some(target) = &entry.hardlink_target else {
                    return Err(io::Error::other(format!(
                        "hardlink {} does not lead to a file extracted before it",
                        shown_name(key)
                    )));
                };
                fs::hard_link(self.path_of(target), &path)
                    .map_err(|e| context(e, "cannot create hardlink", key))?;
            }
            MemberKind::Other(flag) => {
                return Err(io::Error::other(format!(
                    "{} has tar type {:?}, which is never extracted",
                    shown_name(key),
                    flag as char
                )));
            }
        }
        Ok(())
    }

    /// Members unpacked so far (the root included).
    pub fn unpacked(&self) -> u64 {
        self.unpacked
    }

    /// Reassembles the large files kept in blocks (`NAME.box-blocks/` → `NAME`, checked
    /// against its index: `archive::reassemble`), then applies directory times then
    /// modes, deepest first, then the root's. A block directory that does not hold what
    /// its index lists fails here, before the caller swaps or publishes.
    pub fn finish(mut self) -> io::Result<()> {
        let mut dirs: Vec<(Vec<u8>, (u32, Time))> = std::mem::take(&mut self.dirs)
            .into_iter()
            .filter_map(|(k, meta)| meta.map(|m| (k, m)))
            .collect();
        // A directory's descendants sort after it: reversed, they come first.
        dirs.sort_by(|a, b| b.0.cmp(&a.0));
        // Before any directory's time is set: a reassembled file changes its parent's.
        let mut writing = Writing {
            buf: &mut self.copy_buf,
            room: &mut self.room,
            set_id_files: self.set_id_files,
        };
        let mut kept = Vec::with_capacity(dirs.len());
        for dir in dirs {
            if !reassemble(&self.root, &dir.0, &mut writing)? {
                kept.push(dir);
            }
        }
        for (key, (mode, mtime)) in &kept {
            let path = self.root.join(OsStr::from_bytes(key));
            set_times_path(&path, *mtime).map_err(|e| context(e, "cannot set the time of", key))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(*mode))
                .map_err(|e| context(e, "cannot set the mode of", key))?;
        }
        if let Some((mode, mtime)) = self.root_meta {
            set_times_path(&self.root, mtime)?;
            if self.archive_root_mode {
                fs::set_permissions(&self.root, fs::Permissions::from_mode(mode))?;
            }
        }
        Ok(())
    }
}

/// Writes a sparse file's stored runs at their offsets (its length is set by the caller):
/// what lies between the runs is never written, so the filesystem keeps it as holes.
/// Each run's data starts on a block boundary of the stored data (GNU tar's reading; the
/// map was checked to fit), the rest of its last block is padding. Returns the file's
/// size as the map gives it.
fn write_sparse(
    buf: &mut [u8],
    data: &mut dyn Read,
    file: &fs::File,
    map: &[(u64, u64)],
    room: &mut Room,
) -> io::Result<u64> {
    let mut end = 0;
    for (offset, len) in map {
        let copied = copy_with_holes(buf, &mut data.take(*len), file, *offset, room)?;
        let pad = len.div_ceil(512) * 512 - len;
        // The last run's padding may be cut short by the member's end: nothing to check.
        io::copy(&mut data.take(pad), &mut io::sink())?;
        if copied != *len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the archive ends inside a sparse file's data",
            ));
        }
        end = offset + len;
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::validate::{Limits, WalkError, walk};
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    /// A raw ustar header block.
    fn header(name: &[u8], flag: u8, size: u64) -> Vec<u8> {
        let mut h = tar::Header::new_ustar();
        h.as_ustar_mut().unwrap().name[..name.len()].copy_from_slice(name);
        h.set_entry_type(tar::EntryType::new(flag));
        h.set_mode(0o644);
        h.set_size(size);
        h.set_mtime(1_600_000_000);
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    fn padded(mut data: Vec<u8>) -> Vec<u8> {
        data.resize(data.len().div_ceil(512) * 512, 0);
        data
    }

    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (k, v) in records {
            // The length counts its own digits.
            let inner = format!(" {k}={v}\n");
            let len = (1..20)
                .map(|d: usize| inner.len() + d)
                .find(|l| l.to_string().len() + inner.len() == *l)
                .unwrap();
            body.extend_from_slice(format!("{len}{inner}").as_bytes());
        }
        let mut out = header(b"PaxHeaders/x", b'x', body.len() as u64);
        out.extend(padded(body));
        out
    }

    fn archive(members: &[Vec<u8>]) -> Vec<u8> {
        let mut tar = Vec::new();
        tar.extend(header(b"home/", b'5', 0));
        tar.extend(header(b"home/agent/", b'5', 0));
        for m in members {
            tar.extend_from_slice(m);
        }
        tar.extend([0u8; 1024]);
        zstd::encode_all(tar.as_slice(), 1).unwrap()
    }

    fn extract(data: &[u8]) -> Result<tempfile::TempDir, String> {
        let dir = tempfile::tempdir().unwrap();
        let mut u = Unpacker::new(dir.path());
        match walk(data, &Limits::default(), |e, k| u.unpack(e, k)) {
            Ok(_) => {}
            Err(WalkError::Archive(e)) => return Err(e.to_string()),
            Err(WalkError::Callback(e)) => return Err(e.to_string()),
        }
        u.finish().map_err(|e| e.to_string())?;
        Ok(dir)
    }

    /// PAX 1.0 (what `tar --format=posix -S` writes): the map in the data, the real name
    /// in GNU.sparse.name. It used to come back as `GNUSparseFile.0/s`, refused; 0.0 came
    /// back as its packed data (silent loss).
    fn sparse_10(map: &str, runs: &[&[u8]], real: u64) -> Vec<u8> {
        let mut m = pax(&[
            ("GNU.sparse.major", "1"),
            ("GNU.sparse.minor", "0"),
            ("GNU.sparse.name", "home/agent/s"),
            ("GNU.sparse.realsize", &real.to_string()),
        ]);
        let mut data = padded(map.as_bytes().to_vec());
        for r in runs {
            data.extend(padded(r.to_vec()));
        }
        m.extend(header(b"GNUSparseFile.0/s", b'0', data.len() as u64));
        m.extend(padded(data));
        m
    }

    #[test]
    fn pax_sparse_files_come_back_with_real_size_and_holes() {
        let real = (3 << 20) + 5;
        let d = extract(&archive(&[sparse_10(
            "1\n3145728\n5\n",
            &[b"tail\n"],
            real,
        )]))
        .unwrap();
        let p = d.path().join("home/agent/s");
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.len(), real);
        let bytes = fs::read(&p).unwrap();
        assert!(bytes[..3 << 20].iter().all(|b| *b == 0));
        assert_eq!(&bytes[3 << 20..], b"tail\n");
        assert!(m.blocks() * 512 < 1 << 20, "the hole was written out");
        // PAX 0.0: offset/numbytes pairs, the packed data as the member's data.
        let mut m00 = pax(&[
            ("GNU.sparse.size", &real.to_string()),
            ("GNU.sparse.numblocks", "1"),
            ("GNU.sparse.offset", "3145728"),
            ("GNU.sparse.numbytes", "5"),
            ("path", "home/agent/s"),
        ]);
        m00.extend(header(b"home/agent/s", b'0', 5));
        m00.extend(padded(b"tail\n".to_vec()));
        let d = extract(&archive(&[m00])).unwrap();
        assert_eq!(fs::read(d.path().join("home/agent/s")).unwrap(), bytes);
    }

    #[test]
    fn sparse_maps_outside_the_file_or_overlapping_are_refused() {
        for (map, runs, why) in [
            (
                "1\n4000000\n5\n",
                &[&b"tail\n"[..]][..],
                "points outside the file",
            ),
            (
                "2\n0\n600\n100\n5\n",
                &[&[1u8; 600][..], b"tail\n"][..],
                "overlapping",
            ),
            ("1\n0\n2000\n", &[&b"x"[..]][..], "blocks of data"),
            ("1\nx\n", &[][..], "not decimal numbers"),
        ] {
            let e = extract(&archive(&[sparse_10(map, runs, (3 << 20) + 5)])).unwrap_err();
            assert!(e.contains(why), "{map:?}: {e}");
        }
    }

    #[test]
    fn a_directory_size_is_not_data_and_global_headers_apply() {
        // A directory of size 512 followed by a file: GNU tar extracts both.
        let mut dir = header(b"home/agent/d/", b'5', 512);
        dir.extend(header(b"home/agent/kept", b'0', 0));
        // A global header: its mtime applies to the next members.
        let body = b"22 mtime=1500000000.5\n".to_vec();
        let mut g = header(b"GlobalHead", b'g', body.len() as u64);
        g.extend(padded(body));
        g.extend(header(b"home/agent/f", b'0', 0));
        let d = extract(&archive(&[dir, g])).unwrap();
        assert!(d.path().join("home/agent/kept").is_file());
        assert!(d.path().join("home/agent/d").is_dir());
        let m = fs::metadata(d.path().join("home/agent/f")).unwrap();
        assert_eq!(m.mtime(), 1_500_000_000);
    }

    #[test]
    fn malformed_pax_records_are_refused_naming_the_record() {
        let mut m = header(b"PaxHeaders/x", b'x', 12);
        m.extend(padded(b"12 path=abcd".to_vec()));
        m.extend(header(b"home/agent/f", b'0', 0));
        let e = extract(&archive(&[m])).unwrap_err();
        assert!(
            e.contains("malformed PAX record path") && e.contains("missing newline"),
            "{e}"
        );
    }

    #[test]
    fn errors_quote_at_most_200_characters_of_a_name() {
        let name = "n".repeat(5000);
        let mut m = pax(&[("path", &format!("home/agent/{name}/x"))]);
        m.extend(header(b"x", b'0', 0));
        let e = extract(&archive(&[m])).unwrap_err();
        assert!(
            e.chars().count() < 400,
            "{} characters: {e}",
            e.chars().count()
        );
    }

    fn member(name: &[u8], flag: u8, mode: u32, data: &[u8]) -> Vec<u8> {
        let mut h = tar::Header::new_ustar();
        h.as_ustar_mut().unwrap().name[..name.len()].copy_from_slice(name);
        h.set_entry_type(tar::EntryType::new(flag));
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_600_000_000);
        h.set_cksum();
        let mut out = h.as_bytes().to_vec();
        out.extend(padded(data.to_vec()));
        out
    }

    fn unpack_with(data: &[u8], setup: impl FnOnce(Unpacker) -> Unpacker) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut u = setup(Unpacker::new(dir.path()));
        walk(data, &Limits::default(), |e, k| u.unpack(e, k)).unwrap();
        u.finish().unwrap();
        dir
    }

    fn mode_of(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// A zstd tar of (name, type flag, data): a dumpdir's listing, a file's bytes, or a
    /// symlink's target.
    fn link_tar(members: &[(&str, u8, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, flag, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::new(*flag));
            h.set_mode(0o755);
            h.set_mtime(1_000_000_000);
            let stored: &[u8] = if *flag == b'2' { b"" } else { data.as_bytes() };
            h.set_size(stored.len() as u64);
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if *flag == b'2' {
                gnu.linkname[..data.len()].copy_from_slice(data.as_bytes());
            }
            h.set_cksum();
            b.append(&h, stored).unwrap();
        }
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap()
    }

    /// Every path under `root` with its kind and content or target.
    fn listing(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                let m = fs::symlink_metadata(&p).unwrap();
                if m.is_dir() {
                    out.push(format!("{rel}/"));
                    stack.push(p);
                } else if m.file_type().is_symlink() {
                    out.push(format!("{rel} -> {}", fs::read_link(&p).unwrap().display()));
                } else {
                    out.push(format!("{rel} = {}", fs::read_to_string(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    /// Applies `links` in order into `root`, as a restore of a chain does; `between(i)`
    /// runs before link `i` (from 1).
    fn apply_chain(
        root: &Path,
        links: &[&[u8]],
        between: &mut dyn FnMut(usize),
    ) -> Result<(), String> {
        use crate::archive::validate::{WalkError, walk_link};
        let limits = Limits::default();
        let mut u = Unpacker::new(root);
        let mut prior = None;
        for (i, link) in links.iter().enumerate() {
            if i > 0 {
                between(i);
                u.next_link();
            }
            let (_, state) = walk_link(*link, &limits, prior.take(), |e, k| u.unpack(e, k))
                .map_err(|e| match e {
                    WalkError::Callback(e) => e.to_string(),
                    WalkError::Archive(e) => e.to_string(),
                })?;
            prior = Some(std::rc::Rc::new(state));
        }
        u.finish().map_err(|e| e.to_string())
    }

    #[test]
    fn a_chain_applies_link_by_link_as_gnu_tar_g_does() {
        let full = link_tar(&[
            ("./", b'D', "Dhome\0\0"),
            ("./home/", b'D', "Dagent\0\0"),
            (
                "./home/agent/",
                b'D',
                "Ddel-dir\0Dd2l\0Yedit\0Yf2d\0Ygone\0Ykeep\0\0",
            ),
            ("./home/agent/d2l/", b'D', "Yin\0\0"),
            ("./home/agent/d2l/in", b'0', "in"),
            ("./home/agent/del-dir/", b'D', "Yx\0\0"),
            ("./home/agent/del-dir/x", b'0', "x"),
            ("./home/agent/edit", b'0', "old"),
            ("./home/agent/f2d", b'0', "file"),
            ("./home/agent/gone", b'0', "bye"),
            ("./home/agent/keep", b'0', "kept"),
        ]);
        let inc = link_tar(&[
            ("./", b'D', "Dhome\0\0"),
            ("./home/", b'D', "Dagent\0\0"),
            ("./home/agent/", b'D', "Yd2l\0Yedit\0Df2d\0Nkeep\0Ynew\0\0"),
            ("./home/agent/d2l", b'2', "keep"),
            ("./home/agent/edit", b'0', "new text"),
            ("./home/agent/f2d/", b'D', "Yinner\0\0"),
            ("./home/agent/f2d/inner", b'0', "i"),
            ("./home/agent/new", b'0', "n"),
        ]);
        let dir = tempfile::tempdir().unwrap();
        apply_chain(dir.path(), &[&full, &inc], &mut |_| {}).unwrap();
        assert_eq!(
            listing(dir.path()),
            [
                "home/",
                "home/agent/",
                "home/agent/d2l -> keep",
                "home/agent/edit = new text",
                "home/agent/f2d/",
                "home/agent/f2d/inner = i",
                "home/agent/keep = kept",
                "home/agent/new = n",
            ]
        );
        // GNU tar, given the same links in order, leaves the same tree.
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
        let by_tar = tempfile::tempdir().unwrap();
        for link in [&full, &inc] {
            let plain = zstd::decode_all(link.as_slice()).unwrap();
            let mut tar = std::process::Command::new("tar")
                .args(["-x", "-g", "/dev/null", "-C"])
                .arg(by_tar.path())
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            tar.stdin.take().unwrap().write_all(&plain).unwrap();
            assert!(tar.wait().unwrap().success());
        }
        assert_eq!(listing(by_tar.path()), listing(dir.path()));
    }

    /// A link that keeps a file the links before it left (`N` in its dumpdir) finds it
    /// where they put it, or says which is missing.
    #[test]
    fn a_kept_file_that_is_not_there_is_named() {
        let full = link_tar(&[
            ("./", b'D', "Dhome\0\0"),
            ("./home/", b'D', "Dagent\0\0"),
            ("./home/agent/", b'D', "Ykeep\0Ylost\0\0"),
            ("./home/agent/keep", b'0', "kept"),
            ("./home/agent/lost", b'0', "lost"),
        ]);
        let inc = link_tar(&[
            ("./", b'D', "Dhome\0\0"),
            ("./home/", b'D', "Dagent\0\0"),
            ("./home/agent/", b'D', "Nkeep\0Nlost\0\0"),
        ]);
        let apply = |remove: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            apply_chain(dir.path(), &[&full, &inc], &mut |_| {
                if let Some(name) = remove {
                    fs::remove_file(dir.path().join(name)).unwrap();
                }
            })
        };
        assert_eq!(apply(None), Ok(()));
        let e = apply(Some("home/agent/lost")).unwrap_err();
        assert!(
            e.contains("home/agent/lost should be there from an earlier backup"),
            "{e}"
        );
    }

    /// Sticky and setgid directories and set-id files come back as GNU tar restores them
    /// (they came back 0777, 2775 as 0775, before issue 21).
    #[test]
    fn every_mode_bit_comes_back() {
        // The root first, so its mode is the archive's.
        let mut tar = member(b"./", b'5', 0o755, b"");
        tar.extend(member(b"home/", b'5', 0o755, b""));
        tar.extend(member(b"home/agent/", b'5', 0o700, b""));
        tar.extend(member(b"home/agent/tmp/", b'5', 0o1777, b""));
        tar.extend(member(b"home/agent/shared/", b'5', 0o2775, b""));
        tar.extend(member(b"home/agent/tool", b'0', 0o4755, b"#!/bin/sh\n"));
        tar.extend(member(b"home/agent/g", b'0', 0o2711, b"x"));
        tar.extend([0u8; 1024]);
        let z = zstd::encode_all(tar.as_slice(), 1).unwrap();
        let d = unpack_with(&z, |u| u);
        let h = d.path().join("home/agent");
        assert_eq!(mode_of(&h.join("tmp")), 0o1777);
        assert_eq!(mode_of(&h.join("shared")), 0o2775);
        assert_eq!(mode_of(&h.join("tool")), 0o4755);
        assert_eq!(mode_of(&h.join("g")), 0o2711);
        assert_eq!(mode_of(&h), 0o700);
        assert_eq!(
            mode_of(d.path()),
            0o755,
            "the archive root's mode applies by default"
        );
        // Without set-id files (box extract as root): files lose them, directories keep theirs.
        let d = unpack_with(&z, |u| u.set_id_files(false));
        let h = d.path().join("home/agent");
        assert_eq!(mode_of(&h.join("tool")), 0o755);
        assert_eq!(mode_of(&h.join("g")), 0o711);
        assert_eq!(mode_of(&h.join("shared")), 0o2775);
        assert_eq!(mode_of(&h.join("tmp")), 0o1777);
    }

    /// PAX global headers are capped, in count and bytes, and refused fast: each one used
    /// to be copied into every later member, so ~100 MB of them cost hours of CPU.
    #[test]
    fn pax_global_header_bombs_are_refused_fast() {
        use crate::archive::validate::Rule;
        let global = |records: &[(&str, &str)]| {
            let mut g = pax(records);
            g[156] = b'g';
            // The checksum covers the type flag.
            let mut h = tar::Header::from_byte_slice(&g[..512]).clone();
            h.set_cksum();
            g[..512].copy_from_slice(h.as_bytes());
            g
        };
        let refused = |members: Vec<Vec<u8>>| {
            let started = std::time::Instant::now();
            let e = match walk(archive(&members).as_slice(), &Limits::default(), |_, _| {
                Ok::<(), io::Error>(())
            }) {
                Err(WalkError::Archive(e)) => e,
                other => panic!("{:?}", other.map(|_| ())),
            };
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
            e
        };
        // One big global header: 200 KiB of comment.
        let big = "c".repeat(200 << 10);
        let mut m = vec![global(&[("comment", &big)])];
        m.extend((0..100).map(|i| header(format!("home/agent/f{i}").as_bytes(), b'0', 0)));
        let e = refused(m);
        assert_eq!(e.rule(), Some(Rule::GlobalHeaders), "{e}");
        assert!(e.to_string().contains("PAX global headers"), "{e}");
        // Many small ones.
        let many: Vec<Vec<u8>> = (0..1500)
            .map(|i| global(&[("comment", &i.to_string())]))
            .collect();
        assert_eq!(refused(many).rule(), Some(Rule::GlobalHeaders));
        // They count with the members.
        let limits = Limits {
            max_members: 10,
            ..Limits::default()
        };
        let mut m: Vec<Vec<u8>> = (0..8)
            .map(|i| global(&[("comment", &i.to_string())]))
            .collect();
        m.push(header(b"home/agent/f", b'0', 0));
        let e = walk(archive(&m).as_slice(), &limits, |_, _| {
            Ok::<(), io::Error>(())
        })
        .unwrap_err();
        assert!(matches!(e, WalkError::Archive(ref a) if a.rule() == Some(Rule::TooManyMembers)));
        // What git archive writes (one commit id) is fine.
        let mut m = vec![global(&[(
            "comment",
            "0123456789abcdef0123456789abcdef01234567",
        )])];
        m.push(header(b"home/agent/f", b'0', 0));
        assert!(extract(&archive(&m)).is_ok());
    }

    /// A hostile 0777 root must not make the extraction root world-writable.
    #[test]
    fn the_root_can_keep_its_own_mode() {
        let mut tar = member(b"./", b'5', 0o777, b"");
        tar.extend(member(b"home/", b'5', 0o755, b""));
        tar.extend(member(b"home/agent/", b'5', 0o700, b""));
        tar.extend([0u8; 1024]);
        let z = zstd::encode_all(tar.as_slice(), 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let mut u = Unpacker::new(dir.path()).archive_root_mode(false);
        walk(z.as_slice(), &Limits::default(), |e, k| u.unpack(e, k)).unwrap();
        u.finish().unwrap();
        assert_eq!(mode_of(dir.path()), 0o700);
        assert_eq!(
            fs::metadata(dir.path()).unwrap().mtime(),
            1_600_000_000,
            "its time is still the archive's"
        );
    }

    /// 64 MiB of dense zeros in the archive (a `dd`-made image) come back as holes, and
    /// exactly: the archive compresses them a thousandfold and more, which is no reason to
    /// refuse it (the ratio guard did, before issue 21).
    #[test]
    fn dense_zeros_come_back_as_holes() {
        let mut data = vec![0u8; 64 << 20];
        data[10 << 20] = 7;
        let z = archive(&[member(b"home/agent/disk.img", b'0', 0o644, &data)]);
        assert!(z.len() < 64 << 10, "{} bytes compressed", z.len());
        let d = extract(&z).unwrap();
        let p = d.path().join("home/agent/disk.img");
        assert_eq!(fs::read(&p).unwrap(), data);
        let m = fs::metadata(&p).unwrap();
        assert!(
            m.blocks() * 512 <= 1 << 20,
            "{} bytes allocated",
            m.blocks() * 512
        );
    }

    /// The room is taken from as data is written: an archive larger than what the
    /// destination holds stops there with the room named, not with a full disk.
    #[test]
    fn an_extraction_stops_at_the_room_left() {
        /// A 20 MiB filesystem with 3 MiB free before the extraction: what the files
        /// under the root hold is taken off.
        fn tiny(root: &Path) -> io::Result<crate::archive::room::Space> {
            fn used(p: &Path) -> u64 {
                let m = fs::symlink_metadata(p).unwrap();
                let own = m.blocks() * 512;
                if m.is_dir() {
                    own + fs::read_dir(p)
                        .unwrap()
                        .map(|e| used(&e.unwrap().path()))
                        .sum::<u64>()
                } else {
                    own
                }
            }
            Ok(crate::archive::room::Space {
                free: (3u64 << 20).saturating_sub(used(root)),
                total: 20 << 20,
            })
        }
        let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 253) as u8 | 1).collect();
        let z = archive(&[member(b"home/agent/big", b'0', 0o644, &data)]);
        let dir = tempfile::tempdir().unwrap();
        let room = Room::with_probe(dir.path(), u64::MAX, tiny);
        let mut u = Unpacker::with_room(dir.path(), room);
        let e = match walk(z.as_slice(), &Limits::default(), |e, k| u.unpack(e, k)) {
            Err(WalkError::Callback(e)) => e.to_string(),
            other => panic!("{:?}", other.map(|_| ())),
        };
        assert!(
            e.contains("cannot write home/agent/big: not enough room in"),
            "{e}"
        );
        assert!(e.contains("(the margin)"), "{e}");
    }
}
