//! The tree each box's newest backup builds, kept between saves, so the next save checks
//! its new link against the real tree before calling it verified: a link that keeps what
//! the tree lacks, or writes through what the tree has, would be refused by every restore
//! (issue 30), and is never published.
//!
//! The tree is what the save's own validation found: the host's word, not the guest's. It
//! lives in `<state dir>/chain-trees/<box>.tree` (0600 in a 0700 dir), every path a salted
//! hash ([`ChainState::encode`]): no name of the user's data sits on the host in the clear.
//! Where it is missing or of another backup (the first save after an upgrade, a backup
//! made elsewhere), the save builds it by validating the chain as a load would.
//!
//! Beside it, [`Known`]: each file of that chain as the last save found or wrote it (its
//! state, SHA-256 and place in the chain), so the next save's check of the chain reads no
//! older link that did not change: hashing the chain's full backup (1.3 GiB with a 1 GiB
//! Hermes database: 0.9 s) and a key derivation per link were fixed costs of every save
//! (issue 32). The newest backup is read and hashed on every save whatever the memo says:
//! it is the file the new link names (usually a small link). Digests of encrypted files and
//! link numbers only: nothing of the data or the passphrase.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use box_proto::BoxName;
use box_proto::archive::chain_state::ChainState;

use super::chain::{FileState, Link, Place};
use crate::state::StateDir;
use crate::state::registry::write_atomically;

/// First bytes of a kept tree: this format, then the digest of the backup it is of.
const MAGIC: &[u8; 12] = b"boxchaintree";

fn path_of(state: &StateDir, name: &BoxName) -> PathBuf {
    state
        .root()
        .join("chain-trees")
        .join(format!("{}.tree", name.as_str()))
}

/// The tree of the backup whose file digest is `digest`, when it is the one kept for
/// `name` (strict: a link kept against it must hold every entry it keeps).
pub fn load(state: &StateDir, name: &BoxName, digest: &[u8; 32]) -> Option<ChainState> {
    let bytes = std::fs::read(path_of(state, name)).ok()?;
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (of, tree) = rest.split_at_checked(32)?;
    if of != digest {
        return None;
    }
    match ChainState::decode(tree) {
        Ok(tree) => Some(tree.strict()),
        Err(e) => {
            tracing::warn!("ignoring the kept tree of '{name}': {e}");
            None
        }
    }
}

/// Keeps `tree` as the tree of `name`'s newest backup, `digest`.
pub fn store(state: &StateDir, name: &BoxName, digest: &[u8; 32], tree: &ChainState) -> Result<()> {
    let path = path_of(state, name);
    if let Some(dir) = path.parent() {
        StateDir::ensure_private_dir(dir)?;
    }
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(digest);
    bytes.extend_from_slice(&tree.encode(rand::random()));
    write_atomically(&path, &bytes).with_context(|| format!("cannot keep {}", path.display()))
}

/// Drops what is kept for `name` (its box is gone).
pub fn forget(state: &StateDir, name: &BoxName) {
    let _ = std::fs::remove_file(path_of(state, name));
    let _ = std::fs::remove_file(known_path(state, name));
}

fn known_path(state: &StateDir, name: &BoxName) -> PathBuf {
    path_of(state, name).with_extension("known")
}

/// How long what a save learned of its chain's files is trusted: past it, the next save
/// reads and hashes every file of the chain again. A file's metadata says it is unchanged,
/// but media errors and filesystems that make up inode numbers or ctimes (sshfs, SMB,
/// FAT) can change bytes under the same metadata, and a chain damaged so must start a new
/// one rather than gain a link no load would take. A day bounds that to a day's saves.
const KNOWN_TRUSTED_SECS: u64 = 24 * 3600;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A file of a chain as a save knew it: where, in which state, its SHA-256, its place.
type Row = (PathBuf, FileState, [u8; 32], Option<Place>);

/// One file as a save recorded it (its digest and place are the host's word about the
/// bytes it wrote or read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub path: PathBuf,
    pub size: u64,
    pub digest: [u8; 32],
    pub place: Option<Place>,
}

/// The files of `name`'s newest chain as the last save knew them: for
/// [`super::chain::discover_links_knowing`].
#[derive(Debug, Default)]
pub struct Known {
    rows: Vec<Row>,
    /// When every file in `rows` was last read and hashed (Unix seconds; 0: never).
    hashed_at: u64,
}

impl Known {
    /// Nothing known yet, as of now: for a chain just started (its one file just hashed).
    pub fn fresh() -> Known {
        Known {
            rows: Vec::new(),
            hashed_at: now_secs(),
        }
    }

    /// What is kept for `name`; nothing when nothing readable is, or when its files were
    /// last hashed longer ago than `KNOWN_TRUSTED_SECS` (or in the future).
    pub fn load(state: &StateDir, name: &BoxName) -> Known {
        let Ok(text) = std::fs::read_to_string(known_path(state, name)) else {
            return Known::default();
        };
        let mut lines = text.lines();
        let hashed_at = lines
            .next()
            .and_then(|l| l.strip_prefix("hashed_at "))
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|&t| {
                now_secs()
                    .checked_sub(t)
                    .is_some_and(|age| age <= KNOWN_TRUSTED_SECS)
            });
        let Some(hashed_at) = hashed_at else {
            return Known::default();
        };
        Known {
            rows: lines.map_while(Known::row).collect(),
            hashed_at,
        }
    }

    /// One file's line, as [`Known::store`] writes it.
    fn row(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.splitn(5, '\t').collect();
        let [digest, file_state, link, parent, path] = f.as_slice() else {
            return None;
        };
        let place = match (*link, *parent) {
            ("-", "-") => None,
            (link, "-") => Some(Place {
                link: link.parse().ok()?,
                parent: None,
            }),
            (link, parent) => Some(Place {
                link: link.parse().ok()?,
                parent: Some(hex32(parent)?),
            }),
        };
        Some((
            PathBuf::from(path),
            FileState::decode(file_state)?,
            hex32(digest)?,
            place,
        ))
    }

    /// The SHA-256 the last save of `name` recorded for the backup at `path` (the one it
    /// published, or one of its chain as it read it), however long ago and whatever the
    /// file's state now: not to skip reading the file, but to tell whether its bytes are
    /// still those box saved. A backup a passphrase does not open is then told apart: the
    /// same bytes, another passphrase; other bytes, damage (`box rm`).
    pub fn recorded_digest(state: &StateDir, name: &BoxName, path: &Path) -> Option<[u8; 32]> {
        Known::recorded(state, name)
            .into_iter()
            .find(|r| r.path == path)
            .map(|r| r.digest)
    }

    /// Every file the last save of `name` recorded, however long ago and whatever the
    /// files' states now: what `box backups check` compares each file with.
    pub fn recorded(state: &StateDir, name: &BoxName) -> Vec<Recorded> {
        let Ok(text) = std::fs::read_to_string(known_path(state, name)) else {
            return Vec::new();
        };
        text.lines()
            .skip(1)
            .map_while(Known::row)
            .map(|(path, file_state, digest, place)| Recorded {
                path,
                size: file_state.size(),
                digest,
                place,
            })
            .collect()
    }

    /// The digest and place of the file at `path`, when it is still in `state`.
    pub fn get(&self, path: &Path, state: &FileState) -> Option<([u8; 32], Option<Place>)> {
        self.rows
            .iter()
            .find(|(p, s, _, _)| p == path && s == state)
            .map(|(_, _, digest, place)| (*digest, *place))
    }

    /// The links of a chain, oldest first, as discovered (each as it was hashed), taking
    /// from `used` (what the discovery knew) when its files were last all hashed: now, when
    /// it knew nothing and so read every one.
    pub fn of_chain(links: &[Link], used: &Known) -> Known {
        let rows = links
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let place = Place {
                    link: u32::try_from(i).ok()?,
                    parent: l.parent,
                };
                Some((l.path.clone(), l.hashed?, l.digest, Some(place)))
            })
            .collect();
        let hashed_at = if used.rows.is_empty() {
            now_secs()
        } else {
            used.hashed_at
        };
        Known { rows, hashed_at }
    }

    /// Adds the file at `path` as it is now (a backup just published).
    pub fn add(&mut self, path: &Path, digest: [u8; 32], place: Option<Place>) -> Result<()> {
        self.rows
            .push((path.to_path_buf(), FileState::at(path)?, digest, place));
        Ok(())
    }

    /// Keeps this as what is known of `name`'s chain, replacing what was.
    pub fn store(&self, state: &StateDir, name: &BoxName) -> Result<()> {
        let path = known_path(state, name);
        if let Some(dir) = path.parent() {
            StateDir::ensure_private_dir(dir)?;
        }
        let mut text = format!("hashed_at {}\n", self.hashed_at);
        for (file, file_state, digest, place) in &self.rows {
            // A path no line can hold is only not known next time.
            let Some(file) = file.to_str().filter(|f| !f.contains(['\t', '\n'])) else {
                continue;
            };
            let (link, parent) = match place {
                None => ("-".to_string(), "-".to_string()),
                Some(p) => (
                    p.link.to_string(),
                    p.parent.map_or_else(|| "-".to_string(), hex::encode),
                ),
            };
            text.push_str(&format!(
                "{}\t{}\t{link}\t{parent}\t{file}\n",
                hex::encode(digest),
                file_state.encode()
            ));
        }
        write_atomically(&path, text.as_bytes())
            .with_context(|| format!("cannot keep {}", path.display()))
    }
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// Where the tree of `name` is kept (for messages and tests).
pub fn kept_at(state: &StateDir, name: &BoxName) -> PathBuf {
    path_of(state, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use box_proto::archive::validate::validate_link;
    use std::path::Path;

    fn tree() -> ChainState {
        let desc = b"D./ -> Dhome\0\0\nD./home/ -> Dagent\0\0\nD./home/agent/ -> Ynotes.md\0\0\nf./home/agent/notes.md -> hi";
        let tar = box_proto::fuzzing::build_tar(desc).unwrap();
        validate_link(tar.as_slice(), &Default::default(), None)
            .unwrap()
            .1
    }

    #[test]
    fn a_kept_tree_is_found_by_its_backup_only() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path().to_path_buf());
        let name = BoxName::parse("alpha").unwrap();
        let tree = tree();
        assert!(tree.get(b"home/agent/notes.md").is_some());
        store(&state, &name, &[1; 32], &tree).unwrap();
        let kept = load(&state, &name, &[1; 32]).unwrap();
        assert!(kept.is_strict());
        assert_eq!(kept.len(), tree.len());
        assert_eq!(
            kept.get(b"home/agent/notes.md"),
            tree.get(b"home/agent/notes.md")
        );
        assert!(
            load(&state, &name, &[2; 32]).is_none(),
            "another backup's tree"
        );
        let bytes = std::fs::read(kept_at(&state, &name)).unwrap();
        assert!(!bytes.windows(8).any(|w| w == b"notes.md"));
        std::fs::write(kept_at(&state, &name), &bytes[..bytes.len() - 3]).unwrap();
        assert!(load(&state, &name, &[1; 32]).is_none(), "a cut file");
        forget(&state, &name);
        assert!(!kept_at(&state, &name).exists());
    }

    #[test]
    fn what_a_save_knew_of_its_chain_comes_back_for_the_same_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path().join("state"));
        let name = BoxName::parse("alpha").unwrap();
        let full = dir.path().join("alpha-20261201-100000.tar.zst.gpg");
        let link = dir.path().join("alpha-20261201-110000.tar.zst.gpg");
        std::fs::write(&full, b"full").unwrap();
        std::fs::write(&link, b"link").unwrap();
        let mut known = Known::fresh();
        let at = |link, parent| Some(Place { link, parent });
        known.add(&full, [1; 32], at(0, None)).unwrap();
        known.add(&link, [2; 32], at(1, Some([1; 32]))).unwrap();
        known.store(&state, &name).unwrap();
        let back = Known::load(&state, &name);
        let now = |p: &Path| FileState::at(p).unwrap();
        assert_eq!(back.get(&full, &now(&full)), Some(([1; 32], at(0, None))));
        assert_eq!(
            back.get(&link, &now(&link)),
            Some(([2; 32], at(1, Some([1; 32]))))
        );
        // Another file at the same path, or another path: not known.
        std::fs::remove_file(&link).unwrap();
        std::fs::write(&link, b"other").unwrap();
        assert_eq!(back.get(&link, &now(&link)), None);
        assert_eq!(back.get(&dir.path().join("x"), &now(&full)), None);
        // Files last hashed more than a day ago (or in the future) are read again; what
        // box recorded of them still tells whether their bytes are the ones it saved.
        for hashed_at in [now_secs() - KNOWN_TRUSTED_SECS - 60, now_secs() + 3600] {
            known.hashed_at = hashed_at;
            known.store(&state, &name).unwrap();
            assert_eq!(
                Known::load(&state, &name).get(&full, &now(&full)),
                None,
                "hashed at {hashed_at}"
            );
            assert_eq!(Known::recorded_digest(&state, &name, &full), Some([1; 32]));
            assert_eq!(Known::recorded_digest(&state, &name, &link), Some([2; 32]));
        }
        assert_eq!(
            Known::recorded_digest(&state, &name, &dir.path().join("x")),
            None
        );
        // What a chain's discovery knew keeps its time; knowing nothing, it read all now.
        known.hashed_at = now_secs() - 7200;
        assert_eq!(Known::of_chain(&[], &known).hashed_at, known.hashed_at);
        assert!(Known::of_chain(&[], &Known::default()).hashed_at >= now_secs() - 60);
        // A damaged memo is only a slower save.
        let memo = kept_at(&state, &name).with_extension("known");
        std::fs::write(&memo, "nonsense\n").unwrap();
        assert_eq!(Known::load(&state, &name).get(&full, &now(&full)), None);
        assert_eq!(Known::recorded_digest(&state, &name, &full), None);
        forget(&state, &name);
        assert!(!memo.exists());
    }
}
