//! Change detection for incremental exports, from metadata only (as GNU tar's
//! `--listed-incremental` and restic's parent snapshots do): an export in chain mode
//! records a [`Snapshot`] of every file and link it saw; the next one leaves out (lists as
//! `N` in its dumpdir, box_proto::archive::incremental) each entry whose [`Stamp`] is the
//! same, without reading its contents.
//!
//! The stamp holds the inode change time with its nanoseconds: a file rewritten within the
//! same second with the same size keeps its size and may keep its mtime (`touch -d`, a
//! coarse clock, or a tool that restores the mtime), but every write, chmod, chown, rename
//! and new hard link sets the ctime to now, and nobody can set it back. The inode number
//! catches a file replaced by another (`mv new old`).
//!
//! A snapshot belongs to the backup it was made with. It is written beside the current one
//! as `<file>.next` by the export, and only [`commit`] (run by box once that backup is
//! published and verified, with its digest) makes it current: a save that dies before
//! leaves the old snapshot, whose digest no longer names the newest backup, so the next
//! save is a full one — never an increment on a parent that does not exist.
//!
//! A file kept in blocks (box_proto::archive::blocks) has, beside its stamp, a
//! [`BlockRecord`]: its size, block size and each block's hash, so the next export writes
//! only the blocks whose hash changed. Version 3 records them; a version 2 snapshot still
//! reads (it has none: its large files are written whole, every block new).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::blocks;
use box_proto::archive::part_hash::PartHash;

use crate::fsutil::write_private;

/// First word of a snapshot file, and its version.
const MAGIC: &str = "box-snapshot";
const VERSION: &str = "3";
/// The version before files were kept in blocks: the same lines, none with blocks.
const BEFORE_BLOCKS_VERSION: &str = "2";
/// The version hb wrote before version 2: it recorded a database archived as it is (its
/// copy failed) like one copied, so its databases cannot be kept from it.
const LEGACY_VERSION: &str = "1";
/// The digest a snapshot carries before [`commit`] gives it its backup's.
const UNCOMMITTED: &str = "-";

/// What decides whether a file or link changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// `f` a regular file, `l` a symlink.
    pub kind: u8,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Stamp {
    pub fn of(meta: &fs::Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            kind: if meta.file_type().is_symlink() {
                b'l'
            } else {
                b'f'
            },
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            mode: meta.mode(),
            uid: meta.uid(),
            gid: meta.gid(),
        }
    }
}

/// What an export wrote of a file it kept in blocks: enough to tell, next time, which
/// blocks are the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    pub size: u64,
    pub block_size: u64,
    /// Each block's XXH3-128, in order: exactly `block_count(size, block_size)`.
    pub blocks: Vec<PartHash>,
}

impl BlockRecord {
    /// ` b <size> <block size> <hex> <hex> …`: appended to the file's line.
    fn render_into(&self, out: &mut String) {
        out.push_str(&format!(" b {} {}", self.size, self.block_size));
        for h in &self.blocks {
            out.push(' ');
            if let PartHash::Xxh3_128(bytes) = h {
                out.push_str(&hex::encode(bytes));
            }
        }
    }

    /// [`Self::render_into`]'s fields after the `b`; `None` when anything is off.
    fn parse(fields: &[&str]) -> Option<Self> {
        let [size, block_size, hashes @ ..] = fields else {
            return None;
        };
        let size: u64 = size.parse().ok()?;
        let block_size: u64 = block_size.parse().ok()?;
        let sane = (blocks::MIN_BLOCK_SIZE..=blocks::MAX_BLOCK_SIZE).contains(&block_size)
            && block_size.is_power_of_two()
            && blocks::block_count(size, block_size) == hashes.len() as u64;
        if !sane {
            return None;
        }
        let blocks = hashes
            .iter()
            .map(|h| PartHash::parse(&format!("xxh3-128:{h}")))
            .collect::<Option<Vec<_>>>()?;
        Some(BlockRecord {
            size,
            block_size,
            blocks,
        })
    }
}

/// Every file and link one export saw, keyed like archive members (data-root-relative,
/// no `./`), and the backup it went into.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The SHA-256 (hex) of the backup file this snapshot describes; `None` until
    /// committed.
    pub backup: Option<String>,
    /// The position of that backup in its chain: 0 for a full one.
    pub link: u32,
    pub entries: HashMap<Vec<u8>, Stamp>,
    /// The files of `entries` that were kept in blocks.
    pub blocks: HashMap<Vec<u8>, BlockRecord>,
    /// Read from a `LEGACY_VERSION` file: every database is copied again rather than
    /// kept from it (a database's stamp there may be of a main file archived without its
    /// WAL).
    pub legacy: bool,
}

impl Snapshot {
    /// Whether the entry at `key` is exactly as this snapshot saw it.
    pub fn unchanged(&self, key: &[u8], now: &Stamp) -> bool {
        self.entries.get(key) == Some(now)
    }

    /// One header line, then one line per entry with the key in hex (any byte may be in a
    /// name), sorted so equal snapshots are equal files.
    pub fn render(&self) -> String {
        let mut keys: Vec<&Vec<u8>> = self.entries.keys().collect();
        keys.sort();
        let mut out = format!(
            "{MAGIC} {} {} {}\n",
            if self.legacy { LEGACY_VERSION } else { VERSION },
            self.backup.as_deref().unwrap_or(UNCOMMITTED),
            self.link
        );
        for key in keys {
            let s = &self.entries[key];
            out.push_str(&format!(
                "{} {} {} {} {} {} {} {} {}",
                hex::encode(key),
                char::from(s.kind),
                s.ino,
                s.size,
                s.mtime_ns,
                s.ctime_ns,
                s.mode,
                s.uid,
                s.gid
            ));
            if let Some(record) = self.blocks.get(key) {
                record.render_into(&mut out);
            }
            out.push('\n');
        }
        out
    }

    pub fn parse(text: &str) -> Result<Self> {
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
        let [magic, version, backup, link] = header.as_slice() else {
            bail!("not a box snapshot (bad header)");
        };
        if *magic != MAGIC || ![VERSION, BEFORE_BLOCKS_VERSION, LEGACY_VERSION].contains(version) {
            bail!(
                "not a box snapshot of version {VERSION}, {BEFORE_BLOCKS_VERSION} or {LEGACY_VERSION}"
            );
        }
        let with_blocks = *version == VERSION;
        let backup = match *backup {
            UNCOMMITTED => None,
            d if d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()) => Some(d.to_string()),
            _ => bail!("a snapshot names its backup by a SHA-256"),
        };
        let link = link.parse().context("bad chain position in the snapshot")?;
        let mut entries = HashMap::new();
        let mut block_records = HashMap::new();
        for (n, line) in lines.enumerate() {
            let f: Vec<&str> = line.split(' ').collect();
            let (stamp_fields, record) = match f.get(9..) {
                Some(["b", rest @ ..]) if with_blocks => match BlockRecord::parse(rest) {
                    Some(record) => (&f[..9], Some(record)),
                    None => bail!("bad snapshot line {}", n + 2),
                },
                _ => (f.as_slice(), None),
            };
            let parsed = (|| -> Option<(Vec<u8>, Stamp)> {
                let [key, kind, ino, size, mt, ct, mode, uid, gid] = stamp_fields else {
                    return None;
                };
                let kind = match *kind {
                    "f" => b'f',
                    "l" => b'l',
                    _ => return None,
                };
                Some((
                    hex::decode(key).ok()?,
                    Stamp {
                        kind,
                        ino: ino.parse().ok()?,
                        size: size.parse().ok()?,
                        mtime_ns: mt.parse().ok()?,
                        ctime_ns: ct.parse().ok()?,
                        mode: mode.parse().ok()?,
                        uid: uid.parse().ok()?,
                        gid: gid.parse().ok()?,
                    },
                ))
            })();
            let Some((key, stamp)) = parsed else {
                bail!("bad snapshot line {}", n + 2);
            };
            if let Some(record) = record {
                block_records.insert(key.clone(), record);
            }
            entries.insert(key, stamp);
        }
        Ok(Snapshot {
            backup,
            link,
            entries,
            blocks: block_records,
            legacy: *version == LEGACY_VERSION,
        })
    }

    /// The snapshot at `path`, if there is one.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        match fs::read_to_string(path) {
            Ok(text) => Self::parse(&text)
                .map(Some)
                .with_context(|| format!("cannot read the snapshot {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes it to `path` (0600, temp + fsync + rename), in a 0700 dir of root's.
    pub fn store(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        write_private(path, self.render().as_bytes(), 0o600, None)
            .with_context(|| format!("cannot write the snapshot {}", path.display()))
    }
}

/// Where an export in chain mode writes the snapshot it made.
pub fn next_path(current: &Path) -> PathBuf {
    let mut name = current.as_os_str().to_owned();
    name.push(".next");
    PathBuf::from(name)
}

/// The parent an incremental export compares with: the snapshot at `current`, if it is of
/// the backup whose digest is `parent` and its chain is shorter than `max_links`; else
/// `None` (a full export) and why.
pub fn parent_for(
    current: &Path,
    parent: &str,
    max_links: u32,
) -> Result<(Option<Snapshot>, String)> {
    let Some(snapshot) = Snapshot::load(current)? else {
        return Ok((None, "no snapshot of an earlier save in this box".into()));
    };
    match &snapshot.backup {
        Some(d) if d.eq_ignore_ascii_case(parent) => {}
        _ => {
            return Ok((
                None,
                "this box's last snapshot is not of the newest backup".into(),
            ));
        }
    }
    if snapshot.link + 1 >= max_links {
        return Ok((None, format!("the chain has reached {max_links} links")));
    }
    Ok((Some(snapshot), String::new()))
}

/// Makes the snapshot the last export wrote (`<current>.next`) current, naming the backup
/// it went into by `digest`.
pub fn commit(current: &Path, digest: &str) -> Result<()> {
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("a backup digest is 64 hex digits");
    }
    let next = next_path(current);
    let mut snapshot = Snapshot::load(&next)?
        .with_context(|| format!("no snapshot waiting at {}", next.display()))?;
    snapshot.backup = Some(digest.to_ascii_lowercase());
    snapshot.store(current)?;
    let _ = fs::remove_file(&next);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_any_name_and_commits() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a");
        fs::write(&f, "x").unwrap();
        let mut s = Snapshot::default();
        s.entries.insert(
            b"home/agent/we ird\nname".to_vec(),
            Stamp::of(&fs::symlink_metadata(&f).unwrap()),
        );
        let text = s.render();
        assert_eq!(Snapshot::parse(&text).unwrap(), s);
        let current = d.path().join("snap");
        s.store(&next_path(&current)).unwrap();
        let digest = "ab".repeat(32);
        commit(&current, &digest).unwrap();
        let loaded = Snapshot::load(&current).unwrap().unwrap();
        assert_eq!(loaded.backup.as_deref(), Some(digest.as_str()));
        assert!(!next_path(&current).exists());
        let (parent, _) = parent_for(&current, &digest, 24).unwrap();
        assert!(parent.is_some());
        let (none, why) = parent_for(&current, &"cd".repeat(32), 24).unwrap();
        assert!(
            none.is_none() && why.contains("not of the newest backup"),
            "{why}"
        );
        let (none, why) = parent_for(&current, &digest, 1).unwrap();
        assert!(none.is_none() && why.contains("1 links"), "{why}");
        assert!(Snapshot::parse("box-snapshot 1 - 0\nzz f 1 2 3 4 5 6 7\n").is_err());
    }

    #[test]
    fn a_version_1_snapshot_is_read_as_legacy_and_stays_so() {
        let line = format!(
            "{} f 1 2 3 4 5 6 7\n",
            hex::encode("home/agent/.hermes/state.db")
        );
        let old = Snapshot::parse(&format!("box-snapshot 1 - 0\n{line}")).unwrap();
        assert!(old.legacy);
        assert_eq!(old.entries.len(), 1);
        // Committed, it still says what wrote it.
        assert!(old.render().starts_with("box-snapshot 1 "));
        assert!(Snapshot::default().render().starts_with("box-snapshot 3 "));
        let before_blocks = Snapshot::parse(&format!("box-snapshot 2 - 0\n{line}")).unwrap();
        assert!(!before_blocks.legacy && before_blocks.blocks.is_empty());
        assert!(Snapshot::parse("box-snapshot 4 - 0\n").is_err());
        // Blocks are a version 3 thing: a version 2 line that has them is refused.
        let blocked = format!(
            "{} b 70000 65536 {} {}\n",
            line.trim_end(),
            "a".repeat(32),
            "b".repeat(32)
        );
        assert!(Snapshot::parse(&format!("box-snapshot 2 - 0\n{blocked}")).is_err());
        assert_eq!(
            Snapshot::parse(&format!("box-snapshot 3 - 0\n{blocked}"))
                .unwrap()
                .blocks
                .len(),
            1
        );
    }

    #[test]
    fn a_file_in_blocks_round_trips_and_a_bad_record_is_refused() {
        let mut s = Snapshot::default();
        let stamp = Stamp {
            kind: b'f',
            ino: 9,
            size: 200_000,
            mtime_ns: 1,
            ctime_ns: 2,
            mode: 0o100600,
            uid: 1000,
            gid: 1000,
        };
        let key = b"home/agent/big".to_vec();
        s.entries.insert(key.clone(), stamp);
        s.blocks.insert(
            key,
            BlockRecord {
                size: 200_000,
                block_size: 65_536,
                blocks: (0..4u8).map(|i| PartHash::Xxh3_128([i; 16])).collect(),
            },
        );
        s.entries.insert(b"small".to_vec(), stamp);
        let text = s.render();
        assert_eq!(Snapshot::parse(&text).unwrap(), s);
        let line = text.lines().find(|l| l.contains(" b ")).unwrap();
        for bad in [
            // One hash short of what the size makes.
            line.rsplit_once(' ').unwrap().0.to_string(),
            line.replace(" 65536 ", " 65537 "),
            line.replace(" 65536 ", " 1024 "),
            format!("{line} {}", "c".repeat(32)),
            line.replace(&"00".repeat(16), &"0".repeat(31)),
        ] {
            let text = format!("box-snapshot 3 - 0\n{bad}\n");
            assert!(Snapshot::parse(&text).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_same_second_same_size_rewrite_is_caught_by_the_ctime() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        fs::write(&f, "aaaa").unwrap();
        let before = Stamp::of(&fs::symlink_metadata(&f).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&f, "bbbb").unwrap();
        // The mtime put back to the old one, to the nanosecond: only the ctime tells.
        let t = nix::sys::time::TimeSpec::new(
            (before.mtime_ns / 1_000_000_000) as i64,
            (before.mtime_ns % 1_000_000_000) as i64,
        );
        nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            &f,
            &t,
            &t,
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        )
        .unwrap();
        let after = Stamp::of(&fs::symlink_metadata(&f).unwrap());
        assert_eq!((before.size, before.mtime_ns), (after.size, after.mtime_ns));
        assert_ne!(before, after, "the ctime moved");
    }
}
