//! Where the next save goes in its box's chain: the newest backup as its parent when the
//! next link may build on it (its whole chain is there and restores, it is not too old),
//! a full backup that starts a chain otherwise; and, once the save is published, what the
//! save after it knows of the chain without reading it (the tree it restores to, the
//! chain's files). `box save` asks the box's `hb` whether it makes chain-mode exports and
//! tells it to commit its snapshot; everything else of a chain's next link is here.

use std::path::Path;

use anyhow::{Context as _, Result};
use box_proto::BoxName;
use box_proto::archive::chain_state::ChainState;
use box_proto::archive::naming::newest_backup;
use box_proto::manifest::{CHAIN_LINK_KEY, CHAIN_PARENT_KEY};
use secrecy::SecretString;

use super::chain::{self, Place};
use super::hex_sha;
use super::open_chain;
use super::save::{ChainIntent, Published, Sealed};
use super::tree_cache;
use crate::state::StateDir;
use crate::ui;

/// What a save needs to know to plan its place in the chain.
pub struct NextLink<'a> {
    pub state: &'a StateDir,
    pub name: &'a BoxName,
    /// Where the box's chain is.
    pub dir: &'a Path,
    /// Build on the newest backup there (not `--full`, not an output of the user's choice).
    pub on_newest: bool,
    /// The box's `hb` makes chain-mode exports.
    pub knows_chains: bool,
    /// `BACKUP_CHAIN_MAX`.
    pub chain_max: u32,
    /// `BACKUP_CHAIN_MAX_AGE_DAYS`.
    pub max_age_days: u32,
    pub passphrase: &'a SecretString,
}

/// How a save joins a chain.
#[derive(Default)]
pub struct ChainPlan {
    /// `hb export`'s chain flags (none: an hb without chain mode).
    pub flags: Vec<String>,
    /// The backup it builds on, when it may.
    pub parent: Option<Parent>,
}

/// The newest backup as the parent of the next link.
pub struct Parent {
    pub digest: [u8; 32],
    /// Its position in its chain (0: the full backup).
    pub position: u32,
    /// The tree a restore of its chain builds: the new link is validated against it.
    pub tree: ChainState,
    /// Its chain's files as found: what the next save knows of them with the new link.
    known: tree_cache::Known,
}

impl ChainPlan {
    /// Always chain mode (so a later save can build on it) when the box's `hb` knows it,
    /// on the newest backup when asked and its chain checks out. `hb` decides in the end:
    /// it writes a full backup when its snapshot is not of that parent or the chain is full
    /// (and says which before its first part: the save seals what it said).
    pub fn new(next: NextLink<'_>) -> Result<Self> {
        if !next.knows_chains {
            ui::say(format!(
                "box '{}' has an hb without incremental saves: a full backup (box repair {0} updates it)",
                next.name
            ));
            return Ok(ChainPlan::default());
        }
        let mut plan = ChainPlan {
            flags: vec![
                "--listed-incremental".to_string(),
                "--chain-max".to_string(),
                next.chain_max.to_string(),
            ],
            parent: None,
        };
        if !next.on_newest {
            return Ok(plan);
        }
        if let Some(newest) = newest_backup(next.dir, next.name.as_str())
            .with_context(|| format!("cannot list {}", next.dir.display()))?
            && let Some(parent) = parent_to_build_on(&next, &newest)
        {
            plan.flags
                .extend(["--parent".to_string(), hex_sha(&parent.digest)]);
            plan.parent = Some(parent);
        }
        Ok(plan)
    }

    /// The same save as a full one, starting a chain.
    pub fn without_parent(&self) -> ChainPlan {
        let mut flags = self.flags.clone();
        if let Some(at) = flags.iter().position(|f| f == "--parent") {
            flags.drain(at..(at + 2).min(flags.len()));
        }
        ChainPlan {
            flags,
            parent: None,
        }
    }

    /// What this save seals of its chain: outside chains (an `hb` without them), or in
    /// one, on the planned parent when there is one.
    pub fn intent(&self) -> ChainIntent {
        if self.flags.is_empty() {
            ChainIntent::Outside
        } else {
            ChainIntent::InChain {
                parent: self.parent.as_ref().map(|p| (p.digest, p.position)),
            }
        }
    }

    /// Once `published` is: the tree it restores to, for the next save's check, and what
    /// the next save knows of its chain's files without reading them (the links before it,
    /// none when it starts a chain, and itself). The memo is only a memo: when it cannot be
    /// kept, the next save reads the files.
    pub fn record(
        &mut self,
        state: &StateDir,
        name: &BoxName,
        published: &Published,
    ) -> Result<()> {
        // The digest the verifier took of the file it checked (unchanged on disk since).
        tree_cache::store(state, name, &published.digest, &published.tree)?;
        let place = published.facts.as_ref().and_then(|f| f.place);
        let mut known = match (place, self.parent.as_mut()) {
            (Some(Place { link: 1.., .. }), Some(parent)) => std::mem::take(&mut parent.known),
            _ => tree_cache::Known::fresh(),
        };
        let kept = known
            .add(&published.path, published.digest, place)
            .and_then(|()| known.store(state, name));
        if let Err(e) = kept {
            tracing::warn!("the next save will read its chain again: {e:#}");
        }
        Ok(())
    }
}

/// The backup `newest` as the parent of the next link, when the next link may build on
/// it: its whole chain is there and checks out (opened as `box load` opens it), the chain
/// is not older than BACKUP_CHAIN_MAX_AGE_DAYS, and the tree it restores to is known (kept
/// from the save that made it, or found by validating the chain as a load would).
/// Otherwise says why and returns `None`: the save starts a new chain rather than adding
/// to one no restore could use.
fn parent_to_build_on(next: &NextLink<'_>, newest: &Path) -> Option<Parent> {
    let name = next.name;
    // What the last save learned of these files: an older link as it was then is not read
    // again (the newest backup always is: its place shows the passphrase opens it, and its
    // digest, which the new link names, is taken from its bytes).
    let known = tree_cache::Known::load(next.state, name);
    let found = match open_chain::find_knowing(newest, next.passphrase, &known) {
        Ok(found) => found,
        Err(e) => {
            ui::warn(format!(
                "box '{name}': the chain of its newest backup does not check out ({e:#}); starting a new one"
            ));
            return None;
        }
    };
    let (first, tip) = (found.links.first()?, found.links.last()?);
    if let Some(age) = chain::too_old(&first.stamp, chrono::Utc::now(), next.max_age_days) {
        ui::say(format!(
            "box '{name}': {age} (BACKUP_CHAIN_MAX_AGE_DAYS={}); starting a new one",
            next.max_age_days
        ));
        return None;
    }
    let tree = match tree_cache::load(next.state, name, &tip.digest) {
        Some(tree) => tree,
        None => {
            ui::say(format!(
                "box '{name}': checking that the chain of {} restores before adding to it (once: the next save remembers it)",
                newest.display()
            ));
            match found.validate(next.passphrase) {
                Ok(checked) => checked.tree.strict(),
                Err(e) => {
                    ui::warn(format!(
                        "box '{name}': the chain of its newest backup does not restore ({e:#}); starting a new one"
                    ));
                    return None;
                }
            }
        }
    };
    Some(Parent {
        digest: tip.digest,
        position: (found.links.len() - 1) as u32,
        tree,
        known: tree_cache::Known::of_chain(&found.links, &known),
    })
}

/// Where the backup's runtime manifest (which the guest wrote) puts it in its chain, when
/// that is not what box sealed: said, never taken (box reads the sealed place; an agent
/// that rewrites its manifest while a save runs cannot make the save fail or move the
/// backup in its chain).
pub fn manifest_disagrees(sealed: &Sealed) -> Option<String> {
    let manifest = sealed
        .report
        .manifest
        .as_deref()
        .and_then(|m| box_proto::RuntimeManifest::parse_bytes(m).ok());
    let get = |key| manifest.as_ref().and_then(|m| m.get(key)).unwrap_or("");
    let (link, parent) = (get(CHAIN_LINK_KEY), get(CHAIN_PARENT_KEY));
    let place = sealed.facts.as_ref().and_then(|f| f.place);
    let agrees = match place {
        None => link.is_empty() && parent.is_empty(),
        Some(place) => {
            link.parse::<u32>().ok() == Some(place.link)
                && match place.parent {
                    Some(digest) => parent.eq_ignore_ascii_case(&hex_sha(&digest)),
                    None => parent.is_empty(),
                }
        }
    };
    (!agrees).then(|| {
        let shown = |s: &str| box_proto::escape::shown(s.as_bytes());
        format!(
            "the runtime manifest in this backup calls it link {} on parent {} (something in \
             the box rewrote it while the save ran); box goes by what it sealed: {}",
            shown(link),
            shown(parent),
            match place {
                Some(Place {
                    link,
                    parent: Some(d),
                }) => format!("link {link} on {}", hex_sha(&d)),
                Some(_) => "a full backup".to_string(),
                None => "outside any chain".to_string(),
            }
        )
    })
}
