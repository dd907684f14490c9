//! Copying backup files to another directory (`box backups copy`, and each save's copy to
//! `BACKUP_MIRROR`): a USB stick, a mounted NAS, a synced folder.
//!
//! A copy is only published once it is known good: written into an unnamed file (a named
//! 0600 temp where there is none, the module `unpublished`), flushed to the disk and dropped
//! from the page cache, then read back from the disk and hashed; the source's bytes are
//! hashed on the way too, so a file that changed since box hashed it is not copied as if it
//! were the backup. Only then is it linked into place, which never replaces anything: a file
//! of the same name is compared by digest, skipped when it is the same backup and refused
//! (named, with both digests) when it is not.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use sha2::{Digest, Sha256};

use super::chain;
use super::check::short_sha;
use super::page_cache;
use super::unpublished::{TempKind, Unpublished};
use crate::ui::progress::Phase;

const BUF: usize = 1 << 20;

/// What became of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    /// Copied, read back and published.
    New,
    /// The same backup (by SHA-256) is there already: nothing written.
    AlreadyThere,
}

/// Copies the backup `file`, whose SHA-256 is `digest`, into `dest` under its own name.
/// `progress` counts the bytes copied (twice: written, then read back).
pub fn copy_file(
    file: &Path,
    digest: &[u8; 32],
    dest: &Path,
    progress: &mut Phase,
) -> Result<Copied> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no file name", file.display()))?;
    let target = dest.join(name);
    if let Some(copied) = already_there(&target, digest)? {
        return Ok(copied);
    }
    let mut source = File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
    let created = Unpublished::create(dest, name, TempKind::Best)
        .with_context(|| format!("cannot create a file in {}", dest.display()))?;
    let (mut writer, mut reader) = (created.writer, created.follower);
    let written = copy_hashing(&mut source, &mut writer, progress)
        .with_context(|| format!("cannot copy {} into {}", file.display(), dest.display()))?;
    if written.0 != *digest {
        bail!(
            "{} changed since box hashed it (SHA-256 {} then, {} now): not copied",
            file.display(),
            short_sha(digest),
            short_sha(&written.0)
        );
    }
    writer
        .sync_all()
        .with_context(|| format!("cannot flush the copy of {name} to {}", dest.display()))?;
    // What is read back comes from the disk, not from the pages just written.
    page_cache::drop_once_written(&writer, 0, written.1);
    reader.seek(SeekFrom::Start(0))?;
    let read_back = copy_hashing(&mut reader, &mut io::sink(), progress)
        .with_context(|| format!("cannot read back the copy of {name} in {}", dest.display()))?;
    if read_back != written {
        bail!(
            "the copy of {name} in {} reads back differently ({} bytes, SHA-256 {}; written \
             {} bytes, {}): that disk lost bytes; nothing was published",
            dest.display(),
            read_back.1,
            short_sha(&read_back.0),
            written.1,
            short_sha(&written.0)
        );
    }
    match created.unpublished.publish(&target) {
        Ok(()) => {}
        // Something wrote that name meanwhile (another copy of the same backup, say).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return already_there(&target, digest)?
                .with_context(|| format!("{} appeared while the copy was made", target.display()));
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot publish {}", target.display()));
        }
    }
    if let Ok(dir) = File::open(dest) {
        let _ = dir.sync_all();
    }
    Ok(Copied::New)
}

/// What is at `target` already: nothing (`None`), the same backup, or a refusal.
fn already_there(target: &Path, digest: &[u8; 32]) -> Result<Option<Copied>> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot look at {}", target.display())),
    };
    if !meta.is_file() {
        bail!(
            "{} is there and is not a file: not overwritten",
            target.display()
        );
    }
    let there = chain::file_digest(target)?;
    if there == *digest {
        Ok(Some(Copied::AlreadyThere))
    } else {
        bail!(
            "{} is there and is another file (SHA-256 {}, the backup's is {}): not overwritten; \
             move it away or copy to another directory",
            target.display(),
            short_sha(&there),
            short_sha(digest)
        )
    }
}

/// Copies `from` into `to` to its end: the SHA-256 and the length of what went through.
fn copy_hashing(
    from: &mut impl Read,
    to: &mut impl Write,
    progress: &mut Phase,
) -> io::Result<([u8; 32], u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        super::cleanup::check()?;
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n])?;
        total += n as u64;
        progress.add(n as u64);
    }
    to.flush()?;
    Ok((hasher.finalize().into(), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(dir: &Path, name: &str, bytes: &[u8]) -> (std::path::PathBuf, [u8; 32]) {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        (path, Sha256::digest(bytes).into())
    }

    #[test]
    fn copies_skips_the_same_and_never_overwrites_another() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&dst).unwrap();
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (file, digest) = backup(&src, "a-20261207-120000.tar.zst.gpg", &bytes);
        let mut phase = Phase::hidden();
        assert_eq!(
            copy_file(&file, &digest, &dst, &mut phase).unwrap(),
            Copied::New
        );
        assert_eq!(
            std::fs::read(dst.join("a-20261207-120000.tar.zst.gpg")).unwrap(),
            bytes
        );
        assert_eq!(
            copy_file(&file, &digest, &dst, &mut phase).unwrap(),
            Copied::AlreadyThere
        );
        // Another file of that name: refused, left as it was.
        let (other, other_digest) = backup(&src, "b-20261207-120000.tar.zst.gpg", b"other");
        std::fs::write(dst.join("b-20261207-120000.tar.zst.gpg"), b"not the backup").unwrap();
        let err = copy_file(&other, &other_digest, &dst, &mut phase)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is another file") && err.contains("not overwritten"),
            "{err}"
        );
        assert_eq!(
            std::fs::read(dst.join("b-20261207-120000.tar.zst.gpg")).unwrap(),
            b"not the backup"
        );
        // A source that is not what box hashed: nothing published, nothing left.
        let (changed, _) = backup(&src, "c-20261207-120000.tar.zst.gpg", b"changed");
        let err = copy_file(&changed, &[7; 32], &dst, &mut phase)
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed since box hashed it"), "{err}");
        let mut names: Vec<String> = std::fs::read_dir(&dst)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "a-20261207-120000.tar.zst.gpg",
                "b-20261207-120000.tar.zst.gpg"
            ]
        );
    }
}
