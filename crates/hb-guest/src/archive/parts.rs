//! Splitting a stream into part files of a set size, with the part index
//! (box_proto::archive::parts), and reading them back as one stream.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::Compression;
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex, part_name};
use sha2::{Digest, Sha256};

/// A writer that cuts its input into `part-NNNNNN` files of `part_size` bytes (0600) in a
/// new 0700 directory.
pub struct PartWriter {
    dir: PathBuf,
    part_size: u64,
    current: Option<(File, Sha256, u64)>,
    parts: Vec<Part>,
    total: Sha256,
    total_size: u64,
}

impl PartWriter {
    /// Creates `dir` (0700; it must not exist).
    pub fn create(dir: &Path, part_size: u64) -> Result<Self> {
        if part_size == 0 {
            bail!("--part-size must be at least 1 byte");
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .with_context(|| {
                format!(
                    "cannot create export directory {} (it must not exist)",
                    dir.display()
                )
            })?;
        Ok(PartWriter {
            dir: dir.to_path_buf(),
            part_size,
            current: None,
            parts: Vec::new(),
            total: Sha256::new(),
            total_size: 0,
        })
    }

    fn close_current(&mut self) -> io::Result<()> {
        if let Some((file, hasher, size)) = self.current.take() {
            file.sync_all()?;
            self.parts.push(Part {
                name: part_name(self.parts.len()),
                size,
                sha256: hasher.finalize().into(),
            });
        }
        Ok(())
    }

    /// Closes the last part and writes the index (temp + rename). Returns it.
    pub fn finish(mut self, compression: Compression) -> Result<PartIndex> {
        self.close_current()?;
        let index = PartIndex {
            compression,
            total_size: self.total_size,
            total_sha256: self.total.clone().finalize().into(),
            parts: std::mem::take(&mut self.parts),
        };
        let tmp = self.dir.join(format!(".{INDEX_FILE}.tmp"));
        {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(index.render().as_bytes())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(INDEX_FILE))?;
        File::open(&self.dir)?.sync_all()?;
        Ok(index)
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.current.as_ref().is_some_and(|c| c.2 >= self.part_size) {
            self.close_current()?;
        }
        if self.current.is_none() {
            let path = self.dir.join(part_name(self.parts.len()));
            let file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            self.current = Some((file, Sha256::new(), 0));
        }
        let Some((file, hasher, size)) = self.current.as_mut() else {
            return Err(io::Error::other("no current part"));
        };
        let room = (self.part_size - *size).min(buf.len() as u64) as usize;
        let n = file.write(&buf[..room])?;
        hasher.update(&buf[..n]);
        *size += n as u64;
        self.total.update(&buf[..n]);
        self.total_size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.current.as_mut() {
            Some((f, _, _)) => f.flush(),
            None => Ok(()),
        }
    }
}

/// Reads `<dir>/parts.index` and checks every part: a regular file (not a link) of the
/// listed size and SHA-256, and the whole stream's hash.
pub fn check_parts(dir: &Path) -> Result<PartIndex> {
    let path = dir.join(INDEX_FILE);
    let text = fs::read_to_string(&path)
        .with_context(|| format!("cannot read part index {}", path.display()))?;
    let index =
        PartIndex::parse(&text).with_context(|| format!("bad part index {}", path.display()))?;
    let mut total = Sha256::new();
    for part in &index.parts {
        let p = dir.join(&part.name);
        let meta =
            fs::symlink_metadata(&p).with_context(|| format!("missing part {}", p.display()))?;
        if !meta.file_type().is_file() {
            bail!("part {} is not a regular file", p.display());
        }
        if meta.len() != part.size {
            bail!(
                "part {} has {} bytes, the index says {}",
                p.display(),
                meta.len(),
                part.size
            );
        }
        let mut hasher = Sha256::new();
        let mut f = open_nofollow(&p)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            total.update(&buf[..n]);
        }
        let got: [u8; 32] = hasher.finalize().into();
        if got != part.sha256 {
            bail!(
                "part {} does not match the index (SHA-256 {}, expected {})",
                p.display(),
                hex::encode(got),
                hex::encode(part.sha256)
            );
        }
    }
    let got: [u8; 32] = total.finalize().into();
    if got != index.total_sha256 {
        bail!("the parts together do not match the index's total SHA-256");
    }
    Ok(index)
}

fn open_nofollow(p: &Path) -> io::Result<File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
}

/// The parts of an index read back as one stream, hashed on the way.
pub struct PartsReader {
    dir: PathBuf,
    names: std::vec::IntoIter<String>,
    current: Option<File>,
    hasher: std::rc::Rc<std::cell::RefCell<Sha256>>,
}

impl PartsReader {
    pub fn new(dir: &Path, index: &PartIndex) -> (Self, std::rc::Rc<std::cell::RefCell<Sha256>>) {
        let hasher = std::rc::Rc::new(std::cell::RefCell::new(Sha256::new()));
        (
            PartsReader {
                dir: dir.to_path_buf(),
                names: index
                    .parts
                    .iter()
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>()
                    .into_iter(),
                current: None,
                hasher: hasher.clone(),
            },
            hasher,
        )
    }
}

impl Read for PartsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.current.is_none() {
                match self.names.next() {
                    Some(name) => self.current = Some(open_nofollow(&self.dir.join(name))?),
                    None => return Ok(0),
                }
            }
            let Some(f) = self.current.as_mut() else {
                return Ok(0);
            };
            let n = f.read(buf)?;
            if n == 0 && !buf.is_empty() {
                self.current = None;
                continue;
            }
            self.hasher.borrow_mut().update(&buf[..n]);
            return Ok(n);
        }
    }
}
