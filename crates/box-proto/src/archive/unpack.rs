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
//!   their offsets and the file set to its real size, so holes stay holes;
//! * ownership is never taken from the archive, set-id and sticky bits are dropped;
//! * times, then modes: a file's through its open descriptor; a directory's at the very
//!   end, deepest first, the root last, with `utimensat` on the path (which needs no read
//!   permission), so a directory of mode 000 or 0311 neither stops its own children from
//!   being written nor its own time from being set by an unprivileged user (issue 13).
//!
//! The staging directory must be new and private (0700) and nobody else may write in it.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::archive::tarread::{MemberKind, shown_name};
use crate::archive::validate::Entry;

type Time = (i64, u32);

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
}

/// How much of a member's data is copied at a time (here and by `hb export`): `io::copy`
/// copies 8 KiB pieces, a syscall and a (de)compressor call per 8 KiB of every file.
pub const COPY_BUF: usize = 1 << 20;

/// Copies `from` to `to` through `buf` to EOF; returns the bytes copied.
pub fn copy_through(buf: &mut [u8], from: &mut dyn Read, to: &mut dyn Write) -> io::Result<u64> {
    let mut copied = 0u64;
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(copied),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        copied += n as u64;
    }
}

fn context(e: io::Error, what: &str, key: &[u8]) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", shown_name(key)))
}

impl Unpacker {
    /// `root` must exist, be empty and be private to this process.
    pub fn new(root: &Path) -> Self {
        Unpacker {
            root: root.to_path_buf(),
            dirs: HashMap::new(),
            root_meta: None,
            unpacked: 0,
            copy_buf: Vec::new(),
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
        let mode = member.mode & 0o777;
        let mtime = member.mtime;
        self.unpacked += 1;
        if key.is_empty() {
            self.root_meta = Some((mode, mtime));
            return Ok(());
        }
        self.ensure_parents(key)?;
        let path = self.path_of(key);
        match member.kind {
            MemberKind::Dir => {
                match fs::DirBuilder::new().mode(0o700).create(&path) {
                    Ok(()) => {}
                    Err(e)
                        if e.kind() == io::ErrorKind::AlreadyExists
                            && self.dirs.get(key) == Some(&None) => {}
                    Err(e) => return Err(context(e, "cannot create directory", key)),
                }
                self.dirs.insert(key.to_vec(), Some((mode, mtime)));
            }
            MemberKind::File => {
                let mut file = fs::OpenOptions::new()
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
                let written = match &member.sparse {
                    None => copy_through(buf, entry, &mut file),
                    Some(map) => write_sparse(buf, entry, &mut file, map, member.size),
                }
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

    /// Applies directory times then modes, deepest first, then the root's.
    pub fn finish(self) -> io::Result<()> {
        let mut dirs: Vec<(Vec<u8>, (u32, Time))> = self
            .dirs
            .into_iter()
            .filter_map(|(k, meta)| meta.map(|m| (k, m)))
            .collect();
        // A directory's descendants sort after it: reversed, they come first.
        dirs.sort_by(|a, b| b.0.cmp(&a.0));
        for (key, (mode, mtime)) in &dirs {
            let path = self.root.join(OsStr::from_bytes(key));
            set_times_path(&path, *mtime).map_err(|e| context(e, "cannot set the time of", key))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(*mode))
                .map_err(|e| context(e, "cannot set the mode of", key))?;
        }
        if let Some((mode, mtime)) = self.root_meta {
            set_times_path(&self.root, mtime)?;
            fs::set_permissions(&self.root, fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    }
}

/// Writes a sparse file's stored runs at their offsets and sets its real size: what lies
/// between the runs is never written, so the filesystem keeps it as holes. Each run's data
/// starts on a block boundary of the stored data (GNU tar's reading; the map was checked
/// to fit), the rest of its last block is padding.
fn write_sparse(
    buf: &mut [u8],
    data: &mut dyn Read,
    file: &mut fs::File,
    map: &[(u64, u64)],
    size: u64,
) -> io::Result<u64> {
    for (offset, len) in map {
        file.seek(SeekFrom::Start(*offset))?;
        let copied = copy_through(buf, &mut data.take(*len), file)?;
        let pad = len.div_ceil(512) * 512 - len;
        // The last run's padding may be cut short by the member's end: nothing to check.
        io::copy(&mut data.take(pad), &mut io::sink())?;
        if copied != *len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the archive ends inside a sparse file's data",
            ));
        }
    }
    file.set_len(size)?;
    file.flush()?;
    Ok(size)
}

fn timespecs(mtime: Time) -> [libc::timespec; 2] {
    let t = libc::timespec {
        tv_sec: mtime.0 as libc::time_t,
        tv_nsec: i64::from(mtime.1) as _,
    };
    [t, t]
}

fn set_times_fd(file: &fs::File, mtime: Time) -> io::Result<()> {
    let ts = timespecs(mtime);
    // SAFETY: a valid descriptor and a two-element timespec array.
    if unsafe { libc::futimens(file.as_raw_fd(), ts.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a path's access and modification times without following a final symlink, and
/// without opening it (a directory without read permission is fine).
pub fn set_times_path(path: &Path, mtime: Time) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path holds a NUL byte"))?;
    let ts = timespecs(mtime);
    // SAFETY: a NUL-terminated path and a two-element timespec array.
    if unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets a path's times (whole seconds) without following a final symlink.
pub fn set_mtime_nofollow(path: &Path, mtime: u64) -> io::Result<()> {
    set_times_path(path, (i64::try_from(mtime).unwrap_or(i64::MAX), 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::validate::{Limits, WalkError, walk};
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
}
