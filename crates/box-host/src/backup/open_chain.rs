//! One way to open a chain. Every verb that reads one (`box load`, `box extract`, `box rm`'s
//! check, `box save`'s choice of a parent, `box backups`) finds its links here and validates
//! them here, as a restore will:
//!
//! 1. [`find`]: the backups the chain of a file stands on, by digest, beside it (or in the
//!    directory the user named), each one's place in its chain read (its sealed host facts;
//!    the runtime manifest of a backup made before box sealed them): nothing read through;
//! 2. [`FoundChain::validate`]: each link decrypted and validated after the tree the links
//!    before it built, every file still the one that was hashed.
//!
//! A verb says what it found between the two (a chain's validation is the long part).

use std::path::Path;

use anyhow::{Result, anyhow};
use secrecy::SecretString;

use super::BackupError;
use super::chain::{self, Link, Place};
use super::load::{self, ValidatedChain};
use super::tree_cache::Known;

/// The links of a backup's chain, oldest first: found, not yet read through.
#[derive(Debug)]
pub struct FoundChain {
    pub links: Vec<Link>,
}

impl FoundChain {
    /// Pass 1 over every link (see [`load::validate_chain`]).
    pub fn validate(&self, passphrase: &SecretString) -> Result<ValidatedChain> {
        load::validate_chain(&self.links, passphrase)
    }
}

/// The chain of `file`, found beside it or in `chain_dir`.
pub fn find(
    file: &Path,
    chain_dir: Option<&Path>,
    passphrase: &SecretString,
) -> Result<FoundChain> {
    let links = chain::discover_links(file, chain_dir, &place_reader(file, passphrase))?;
    Ok(FoundChain { links })
}

/// [`find`] beside `file`, taking what `known` (the last save's memo) says of a file that
/// is still as it was then (never of `file` itself, which is read and hashed).
pub fn find_knowing(file: &Path, passphrase: &SecretString, known: &Known) -> Result<FoundChain> {
    let links =
        chain::discover_links_knowing(file, None, &place_reader(file, passphrase), &|p, state| {
            known.get(p, state)
        })?;
    Ok(FoundChain { links })
}

/// [`find`], then [`FoundChain::validate`].
pub fn open(
    file: &Path,
    chain_dir: Option<&Path>,
    passphrase: &SecretString,
) -> Result<(FoundChain, ValidatedChain)> {
    let found = find(file, chain_dir, passphrase)?;
    let validated = found.validate(passphrase)?;
    Ok((found, validated))
}

/// The place of each of `paths` (a listing of many backups, which need not be one chain).
pub fn places(paths: &[&Path], passphrase: &SecretString) -> Result<Vec<Option<Place>>> {
    chain::places_of(paths, &|p| {
        load::peek_place(p, passphrase).map_err(|e| e.context(p.display().to_string()))
    })
}

/// How every opening reads a file's place. The tip's errors name it and stay what they are
/// (a wrong passphrase is the user's to fix). Every link of a chain was saved on its parent under
/// one passphrase (a save builds only on a parent its passphrase opens), so once the tip
/// opened, another file that does not open is damaged (or no link of this chain), never
/// "another passphrase".
fn place_reader<'a>(
    tip: &'a Path,
    passphrase: &'a SecretString,
) -> impl Fn(&Path) -> Result<Option<Place>> + 'a {
    move |p: &Path| {
        load::peek_place(p, passphrase).map_err(|e| {
            let wrong = matches!(
                e.downcast_ref::<BackupError>(),
                Some(BackupError::WrongPassphrase)
            );
            if p == tip {
                load::naming(e, p)
            } else if wrong {
                anyhow!(
                    "{} does not open with the passphrase that opens {}; the links of a chain \
                     are all saved under one passphrase, so it is damaged (or no link of this \
                     chain)",
                    p.display(),
                    tip.display()
                )
            } else {
                e.context(p.display().to_string())
            }
        })
    }
}
