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

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use box_proto::BoxName;
use box_proto::archive::validate::ChainState;

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
}

/// Where the tree of `name` is kept (for messages and tests).
pub fn kept_at(state: &StateDir, name: &BoxName) -> PathBuf {
    path_of(state, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use box_proto::archive::validate::validate_link;

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
}
