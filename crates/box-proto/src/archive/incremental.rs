//! The incremental backup format: GNU tar's listed-incremental archives (`tar -g`), so that
//! a chain of backups restores with stock tools alone (docs/chains.md):
//!
//! ```sh
//! for f in alpha-1.tar.zst.gpg alpha-2.tar.zst.gpg …; do
//!   gpg -d "$f" | zstd -d | tar -x -g /dev/null -C out
//! done
//! ```
//!
//! Every directory of every link (the full one too) is a *dumpdir* member: type flag `D`
//! (GNU format, which `hb export` already writes), its data the directory's entries as
//! `<code><name>\0` … `\0`, with code `Y` (in this archive), `N` (unchanged since the
//! parent: kept from an earlier link) or `D` (a subdirectory, which has a dumpdir of its
//! own). Unchanged files are left out of the archive; deleted ones are simply not listed;
//! a rename is a deletion plus a new `Y` entry (GNU tar's `R`/`T`/`X` rename codes are
//! never written and refused on reading).
//!
//! On extraction with `-g`, GNU tar first *purges* each directory that has a dumpdir
//! ([`Dumpdir::purge`], after `purge_directory` in GNU tar's `incremen.c`): whatever is
//! on disk but not listed goes, and so does an entry whose kind changed (listed `D` but
//! not a directory, listed `Y` but a directory); then the directory's members arrive. box's
//! own restore does the same, never following a symlink (GNU tar follows one when it
//! looks at an entry's kind; box looks at the link itself).
//!
//! Why this and not a format of our own (a deletion list member, content-addressed chunks
//! as smolvm's checkpoints keep): dumpdirs are the only deletion record stock `tar`
//! applies by itself, so a user with `gpg`, `zstd` and GNU tar restores any link of a
//! chain without box, and each link stays an ordinary tar a validator can walk member by
//! member. The price is a listing of every directory in every link (a few KiB per
//! thousand files), which is what an unchanged `/data` re-saved costs.

use std::fmt;

use crate::archive::shown::shown_name;

/// The tar type flag of a dumpdir member (GNU's `GNUTYPE_DUMPDIR`).
pub const DUMPDIR_TYPE: u8 = b'D';

/// What a dumpdir says of one entry of its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// `Y`: the entry is a member of this archive.
    Included,
    /// `N`: the entry was there and has not changed since the parent: not in this archive.
    Unchanged,
    /// `D`: a subdirectory (it has a dumpdir member of its own).
    Directory,
}

impl Code {
    pub fn byte(self) -> u8 {
        match self {
            Code::Included => b'Y',
            Code::Unchanged => b'N',
            Code::Directory => b'D',
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'Y' => Some(Code::Included),
            b'N' => Some(Code::Unchanged),
            b'D' => Some(Code::Directory),
            _ => None,
        }
    }
}

/// Why a dumpdir is refused. Messages name the directory (as the archive spells it, with
/// control characters escaped) and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpdirError {
    /// The data does not end with the terminating empty entry.
    Unterminated,
    /// An entry with no name after its code.
    EmptyName,
    /// A name with a `/`, or `.`/`..`: a dumpdir lists one directory's own entries.
    BadName(String),
    /// A code other than `Y`, `N`, `D` (GNU's rename codes `R`, `T`, `X` included).
    UnknownCode(u8),
    /// The same name twice.
    Duplicate(String),
    /// A dumpdir that does not list, as a directory, an entry every backup keeps (applying
    /// it would delete it).
    Deletes { dir: String, entry: String },
}

impl fmt::Display for DumpdirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpdirError::Unterminated => write!(f, "the dumpdir does not end with an empty entry"),
            DumpdirError::EmptyName => write!(f, "the dumpdir lists an entry without a name"),
            DumpdirError::BadName(n) => write!(
                f,
                "the dumpdir lists {n:?}, which is not a name inside its directory"
            ),
            DumpdirError::UnknownCode(c) => write!(
                f,
                "the dumpdir uses the code {:?} (box writes only Y, N and D; renames are a deletion plus a new entry)",
                char::from(*c)
            ),
            DumpdirError::Duplicate(n) => write!(f, "the dumpdir lists {n:?} twice"),
            DumpdirError::Deletes { dir, entry } => write!(
                f,
                "the dumpdir of {dir:?} does not keep {entry:?} as a directory: applying it would delete {dir}/{entry}, which every backup keeps"
            ),
        }
    }
}

impl std::error::Error for DumpdirError {}

/// Entries that must survive every link: the layout `hb init` makes and every restore
/// checks (rule 8). A dumpdir of the parent that leaves one out would delete it, and with
/// it the home: refused. (`home/agent` must stay a directory too: listed `D`.)
pub const KEPT: &[(&str, &str)] = &[("", "home"), ("home", "agent")];

/// A directory's entries as a dumpdir lists them, sorted by name (as GNU tar writes them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dumpdir {
    entries: Vec<(Code, Vec<u8>)>,
}

impl Dumpdir {
    /// From `(code, name)` pairs in any order; names are checked as [`Dumpdir::parse`]
    /// checks them.
    pub fn new(entries: impl IntoIterator<Item = (Code, Vec<u8>)>) -> Result<Self, DumpdirError> {
        let mut entries: Vec<(Code, Vec<u8>)> = entries.into_iter().collect();
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        for (i, (_, name)) in entries.iter().enumerate() {
            check_name(name)?;
            if i > 0 && entries[i - 1].1 == *name {
                return Err(DumpdirError::Duplicate(shown_name(name)));
            }
        }
        Ok(Dumpdir { entries })
    }

    /// Parses a dumpdir member's data.
    pub fn parse(data: &[u8]) -> Result<Self, DumpdirError> {
        let mut entries = Vec::new();
        let mut rest = data;
        loop {
            let Some(end) = rest.iter().position(|&b| b == 0) else {
                return Err(DumpdirError::Unterminated);
            };
            let entry = &rest[..end];
            rest = &rest[end + 1..];
            let Some((&code, name)) = entry.split_first() else {
                // The terminating empty entry; GNU tar pads nothing after it, but the
                // member's data may be block-padded with zeros by other writers.
                if rest.iter().all(|&b| b == 0) {
                    break;
                }
                return Err(DumpdirError::EmptyName);
            };
            let code = Code::from_byte(code).ok_or(DumpdirError::UnknownCode(code))?;
            if name.is_empty() {
                return Err(DumpdirError::EmptyName);
            }
            entries.push((code, name.to_vec()));
        }
        Dumpdir::new(entries)
    }

    /// The member data: `<code><name>\0` per entry, then `\0`.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (code, name) in &self.entries {
            out.push(code.byte());
            out.extend_from_slice(name);
            out.push(0);
        }
        out.push(0);
        out
    }

    pub fn entries(&self) -> &[(Code, Vec<u8>)] {
        &self.entries
    }

    /// The same listing without the entries named in `names`.
    pub fn without(&self, names: &[Vec<u8>]) -> Dumpdir {
        let names: std::collections::HashSet<&[u8]> = names.iter().map(Vec::as_slice).collect();
        Dumpdir {
            entries: self
                .entries
                .iter()
                .filter(|(_, n)| !names.contains(n.as_slice()))
                .cloned()
                .collect(),
        }
    }

    /// What the dumpdir says of `name`, if it lists it.
    pub fn lookup(&self, name: &[u8]) -> Option<Code> {
        self.entries
            .binary_search_by(|(_, n)| n.as_slice().cmp(name))
            .ok()
            .map(|i| self.entries[i].0)
    }

    /// Which of a directory's present entries (`name`, `is_dir` — of the entry itself, a
    /// symlink is not a directory) a restore removes before this link's members of the
    /// directory arrive: those not listed, those listed `D` that are not directories, and
    /// those listed `Y` that are directories (a file, link or dir in their place follows).
    pub fn purge<'a>(&self, present: impl IntoIterator<Item = (&'a [u8], bool)>) -> Vec<Vec<u8>> {
        present
            .into_iter()
            .filter(|(name, is_dir)| match self.lookup(name) {
                None => true,
                Some(Code::Directory) => !is_dir,
                Some(Code::Included) => *is_dir,
                Some(Code::Unchanged) => false,
            })
            .map(|(name, _)| name.to_vec())
            .collect()
    }

    /// The rules a dumpdir of the directory at `key` (data-root-relative, no `./`, `""` for
    /// the root) must follow beyond its own syntax: it never deletes what every backup
    /// keeps ([`KEPT`]).
    pub fn check_at(&self, key: &[u8]) -> Result<(), DumpdirError> {
        for (dir, entry) in KEPT {
            if key == dir.as_bytes() && self.lookup(entry.as_bytes()) != Some(Code::Directory) {
                return Err(DumpdirError::Deletes {
                    dir: if dir.is_empty() {
                        ".".into()
                    } else {
                        (*dir).into()
                    },
                    entry: (*entry).into(),
                });
            }
        }
        Ok(())
    }
}

fn check_name(name: &[u8]) -> Result<(), DumpdirError> {
    if name.is_empty() {
        return Err(DumpdirError::EmptyName);
    }
    if name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(DumpdirError::BadName(shown_name(name)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(entries: &[(Code, &str)]) -> Dumpdir {
        Dumpdir::new(entries.iter().map(|(c, n)| (*c, n.as_bytes().to_vec()))).unwrap()
    }

    #[test]
    fn renders_as_gnu_tar_does_and_parses_back() {
        let dd = d(&[
            (Code::Unchanged, "b.txt"),
            (Code::Included, "a.txt"),
            (Code::Directory, "sub"),
        ]);
        assert_eq!(dd.render(), b"Ya.txt\0Nb.txt\0Dsub\0\0");
        assert_eq!(Dumpdir::parse(&dd.render()).unwrap(), dd);
        assert_eq!(Dumpdir::parse(b"\0").unwrap(), Dumpdir::default());
        // Block padding after the end is tolerated.
        assert_eq!(
            Dumpdir::parse(b"Ya\0\0\0\0\0").unwrap(),
            d(&[(Code::Included, "a")])
        );
    }

    #[test]
    fn refuses_what_would_reach_outside_or_cannot_be_read() {
        let bad: &[(&[u8], &str)] = &[
            (b"Y../etc\0\0", "not a name inside its directory"),
            (b"Y..\0\0", "not a name inside its directory"),
            (b"Y.\0\0", "not a name inside its directory"),
            (b"Ya/b\0\0", "not a name inside its directory"),
            (b"Ra\0Tb\0\0", "the code 'R'"),
            (b"Xtmp\0\0", "the code 'X'"),
            (b"Y\0Ya\0\0", "without a name"),
            (b"Ya\0Na\0\0", "twice"),
            (b"Ya\0", "does not end"),
            (b"Ya", "does not end"),
            (b"Ya\0\0Yb\0\0", "without a name"),
        ];
        for (data, want) in bad {
            let e = Dumpdir::parse(data).unwrap_err().to_string();
            assert!(e.contains(want), "{:?}: {e}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn never_deletes_the_home() {
        let root_without_home = d(&[(Code::Directory, "logs")]);
        let e = root_without_home.check_at(b"").unwrap_err().to_string();
        assert!(e.contains("would delete ./home"), "{e}");
        let home_as_file = d(&[(Code::Included, "agent")]);
        let e = home_as_file.check_at(b"home").unwrap_err().to_string();
        assert!(e.contains("would delete home/agent"), "{e}");
        d(&[(Code::Directory, "home"), (Code::Directory, "logs")])
            .check_at(b"")
            .unwrap();
        d(&[(Code::Directory, "agent")]).check_at(b"home").unwrap();
        // Elsewhere anything may go.
        d(&[]).check_at(b"home/agent/workspace").unwrap();
    }

    #[test]
    fn purges_like_gnu_tar() {
        let dd = d(&[
            (Code::Unchanged, "kept"),
            (Code::Included, "changed"),
            (Code::Included, "was-dir-now-link"),
            (Code::Directory, "was-file-now-dir"),
            (Code::Directory, "still-dir"),
        ]);
        let present: Vec<(&[u8], bool)> = vec![
            (b"kept", false),
            (b"changed", false),
            (b"deleted", false),
            (b"deleted-dir", true),
            (b"was-dir-now-link", true),
            (b"was-file-now-dir", false),
            (b"still-dir", true),
        ];
        let mut gone = dd.purge(present);
        gone.sort();
        assert_eq!(
            gone,
            vec![
                b"deleted".to_vec(),
                b"deleted-dir".to_vec(),
                b"was-dir-now-link".to_vec(),
                b"was-file-now-dir".to_vec(),
            ]
        );
    }

    proptest! {
        #[test]
        fn any_dumpdir_round_trips_and_parse_never_panics(
            names in proptest::collection::btree_set("[a-zA-Z0-9 ._-]{1,12}", 0..20),
            codes in proptest::collection::vec(0u8..3, 20),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let entries = names
                .iter()
                .filter(|n| *n != "." && *n != "..")
                .zip(codes)
                .map(|(n, c)| ([Code::Included, Code::Unchanged, Code::Directory][c as usize], n.as_bytes().to_vec()));
            let dd = Dumpdir::new(entries).unwrap();
            prop_assert_eq!(Dumpdir::parse(&dd.render()).unwrap(), dd);
            let _ = Dumpdir::parse(&junk);
        }
    }
}
