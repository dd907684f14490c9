//! The tree a chain of incremental backups has built so far, as the next link's validation
//! needs it: every path and whether it is a directory, a file or a symlink.
//!
//! A restore gets it by validating the links in order ([`crate::archive::validate`]); a save
//! checks its new link against the tree of the link it builds on, so that a backup box calls
//! verified is one a restore accepts. That side keeps the tree between saves (the host's state
//! dir, [`ChainState::encode`]) with every path replaced by a salted hash: what is looked up
//! is the same, and no file name of the user's data sits on the host in the clear.
//!
//! A block directory's index is told from other files ([`Node::BlockIndex`]): a next link
//! that keeps it (and its blocks) is checked against it without holding its bytes.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// What an entry of a restored tree is. A hard link is a file once restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    Dir,
    File,
    Symlink,
    /// A regular file that is the index of a block directory (`NAME.box-blocks/index`
    /// whose first line is `blocks::MAGIC`, checked against its blocks): what a restore
    /// reassembles `NAME` from. A tree holds one only for a block directory the validator
    /// checked, so one kept in a later link stands for exactly its checked blocks.
    BlockIndex,
    /// A name a link's listing has (`Y`, or kept `N`) with nothing restored under it: what
    /// box before issue 30 wrote for a symlink it skipped. Nothing is there on disk; a
    /// later link that keeps it restores without it (and says so), where a name no listing
    /// ever had is refused.
    Ghost,
}

impl Node {
    fn byte(self) -> u8 {
        match self {
            Node::Dir => b'd',
            Node::File => b'f',
            Node::Symlink => b'l',
            Node::BlockIndex => b'i',
            Node::Ghost => b'g',
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'd' => Some(Node::Dir),
            b'f' => Some(Node::File),
            b'l' => Some(Node::Symlink),
            b'i' => Some(Node::BlockIndex),
            b'g' => Some(Node::Ghost),
            _ => None,
        }
    }
}

/// How the paths are held.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Paths {
    /// By their bytes: what a restore builds as it validates.
    Plain(HashMap<Vec<u8>, Node>),
    /// By SHA-256(salt ‖ path), cut to 16 bytes: what a save keeps between saves. A false
    /// match needs two paths of one tree to collide in 128 bits.
    Hashed {
        salt: [u8; 16],
        paths: HashMap<[u8; 16], Node>,
    },
}

/// The tree after a link of a chain (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainState {
    paths: Paths,
    /// Whether a next link that keeps an entry this tree lacks is refused (the side that
    /// writes a link), or restored without it and said (a restore: GNU tar's own loop
    /// restores such a link too, and older box versions wrote some).
    strict: bool,
}

impl Default for ChainState {
    fn default() -> Self {
        ChainState::plain(HashMap::new())
    }
}

/// First bytes of an encoded tree, with its version. (A box before block directories
/// refuses a tree holding a [`Node::BlockIndex`] as of an unknown kind, and builds the
/// tree again by validating the chain.)
const MAGIC: &[u8; 8] = b"boxtree1";

fn hashed_key(salt: &[u8; 16], path: &[u8]) -> [u8; 16] {
    let digest = Sha256::new()
        .chain_update(salt)
        .chain_update(path)
        .finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

impl ChainState {
    pub(crate) fn plain(paths: HashMap<Vec<u8>, Node>) -> Self {
        ChainState {
            paths: Paths::Plain(paths),
            strict: false,
        }
    }

    /// What the tree holds at `path` (a key as [`crate::archive::validate::key_of`] makes it).
    pub fn get(&self, path: &[u8]) -> Option<Node> {
        match &self.paths {
            Paths::Plain(paths) => paths.get(path).copied(),
            Paths::Hashed { salt, paths } => paths.get(&hashed_key(salt, path)).copied(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.paths {
            Paths::Plain(paths) => paths.len(),
            Paths::Hashed { paths, .. } => paths.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same tree, for the side that writes the next link: a link keeping what the tree
    /// lacks is refused instead of restored without it.
    pub fn strict(mut self) -> Self {
        self.strict = true;
        self
    }

    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// The tree as bytes to keep: its paths hashed with `salt` (a new random one per
    /// tree), each with its kind. A hashed tree encodes as it is.
    pub fn encode(&self, salt: [u8; 16]) -> Vec<u8> {
        let (salt, entries): ([u8; 16], Vec<([u8; 16], Node)>) = match &self.paths {
            Paths::Plain(paths) => (
                salt,
                paths
                    .iter()
                    .map(|(p, n)| (hashed_key(&salt, p), *n))
                    .collect(),
            ),
            Paths::Hashed { salt, paths } => (*salt, paths.iter().map(|(k, n)| (*k, *n)).collect()),
        };
        let mut out = Vec::with_capacity(MAGIC.len() + 16 + 8 + entries.len() * 17);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&salt);
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (key, node) in entries {
            out.extend_from_slice(&key);
            out.push(node.byte());
        }
        out
    }

    /// A tree [`ChainState::encode`] wrote (hashed; not strict until asked).
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or("not a box tree of this version")?;
        if rest.len() < 24 {
            return Err("a box tree cut short".into());
        }
        let (salt, rest) = rest.split_at(16);
        let (count, rest) = rest.split_at(8);
        let count = u64::from_le_bytes(count.try_into().map_err(|_| "bad count")?);
        if (rest.len() as u64) != count.saturating_mul(17) {
            return Err(format!(
                "a box tree of {count} entries holds {} bytes",
                rest.len()
            ));
        }
        let mut paths = HashMap::with_capacity(count as usize);
        for entry in rest.chunks_exact(17) {
            let mut key = [0u8; 16];
            key.copy_from_slice(&entry[..16]);
            let node = Node::from_byte(entry[16]).ok_or("an entry of no known kind")?;
            paths.insert(key, node);
        }
        let mut s = [0u8; 16];
        s.copy_from_slice(salt);
        Ok(ChainState {
            paths: Paths::Hashed { salt: s, paths },
            strict: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_tree_answers_as_the_plain_one_and_holds_no_name() {
        let mut paths = HashMap::new();
        paths.insert(b"home".to_vec(), Node::Dir);
        paths.insert(b"home/agent/venv-python".to_vec(), Node::Symlink);
        paths.insert(b"home/agent/notes.md".to_vec(), Node::File);
        let plain = ChainState::plain(paths);
        let bytes = plain.encode([7u8; 16]);
        assert!(
            !bytes.windows(8).any(|w| w == b"notes.md"),
            "a kept tree holds a file name"
        );
        let kept = ChainState::decode(&bytes).unwrap();
        for path in [
            &b"home"[..],
            b"home/agent/venv-python",
            b"home/agent/notes.md",
            b"nope",
        ] {
            assert_eq!(kept.get(path), plain.get(path), "{path:?}");
        }
        assert_eq!(kept.len(), 3);
        assert!(!kept.is_strict() && kept.clone().strict().is_strict());
        // It encodes again as it is.
        assert_eq!(ChainState::decode(&kept.encode([9u8; 16])).unwrap(), kept);
        for bad in [
            &b""[..],
            b"boxtree1",
            &bytes[..bytes.len() - 1],
            b"boxtree9xxxxxxxxxxxxxxxxxxxxxxxx",
        ] {
            assert!(ChainState::decode(bad).is_err());
        }
    }
}
