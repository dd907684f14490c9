//! `box backups [box] [--json]` and `box backups prune [box] --keep-last N [--keep-daily D]
//! [--dry-run]`: the backups in the backup dir, per box, grouped by chain (backup::chain),
//! and their removal without ever breaking what a kept backup needs to restore. `box backups
//! check` is `backups_check.rs`.
//!
//! Which backup builds on which is written inside each one (its manifest), so both ask
//! for the passphrase and read each backup as far as its manifest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context as _, Result};
use box_proto::BoxName;

use super::Context;
use crate::backup::chain::{self, Link};
use crate::backup::location::{self, Place, Source};
use crate::backup::{open_chain, passphrase};
use crate::state::{LockKey, locks};
use crate::ui;
use crate::ui::progress::human;

/// One backup file as the listing shows it.
struct Listed {
    link: Link,
    /// Its chain's full backup, or `None` when the chain is broken.
    chain: Option<PathBuf>,
    size: u64,
    age_secs: u64,
}

/// Every backup in `places` of `only` (or of every box), by box.
fn read(places: &[Place], only: Option<&str>) -> Result<BTreeMap<String, Vec<Listed>>> {
    let files = location::files_by_box(places, only)?;
    if files.is_empty() {
        return Ok(BTreeMap::new());
    }
    let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
    read_boxes(files, &pass)
}

/// The listing of each box's `paths`.
fn read_boxes(
    files: BTreeMap<String, Vec<PathBuf>>,
    pass: &secrecy::SecretString,
) -> Result<BTreeMap<String, Vec<Listed>>> {
    let now = SystemTime::now();
    let mut out = BTreeMap::new();
    for (name, paths) in files {
        let mut links = Vec::new();
        let places = open_chain::places(
            &paths.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            pass,
        )?;
        for (path, place) in paths.into_iter().zip(places) {
            let stamp = chain::box_and_stamp(&path)
                .map(|(_, s)| s)
                .unwrap_or_default();
            links.push(Link {
                digest: chain::file_digest(&path)?,
                parent: place.and_then(|p| p.parent),
                stamp,
                path,
                hashed: None,
            });
        }
        let mut listed: Vec<Listed> = links
            .iter()
            .map(|l| {
                let meta = std::fs::metadata(&l.path).ok();
                Listed {
                    chain: chain::chain_of(l, &links)
                        .ok()
                        .and_then(|c| c.first().map(|f| f.path.clone())),
                    size: meta.as_ref().map_or(0, |m| m.len()),
                    age_secs: meta
                        .and_then(|m| m.modified().ok())
                        .and_then(|t| now.duration_since(t).ok())
                        .map_or(0, |d| d.as_secs()),
                    link: l.clone(),
                }
            })
            .collect();
        listed.sort_by(|a, b| a.link.stamp.cmp(&b.link.stamp));
        out.insert(name, listed);
    }
    Ok(out)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s} s ago"),
        s if s < 7200 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86400),
    }
}

pub fn run(ctx: &Context, args: &crate::cli::BackupsArgs) -> Result<ExitCode> {
    match &args.cmd {
        Some(crate::cli::BackupsCmd::Prune(p)) => return prune(ctx, p),
        Some(crate::cli::BackupsCmd::Check(c)) => return super::backups_check::run(ctx, c),
        Some(crate::cli::BackupsCmd::Copy(c)) => return super::backups_copy::run(ctx, c),
        None => {}
    }
    let places = location::places_of(&ctx.config, &ctx.state, args.name.as_deref())?;
    let boxes = read(&places, args.name.as_deref())?;
    // Where each place's backups are listed; the old `./backups` is said once.
    let in_place = |place: &Place| {
        boxes
            .iter()
            .map(|(name, listed)| {
                let here: Vec<&Listed> = listed
                    .iter()
                    .filter(|l| chain::dir_of(&l.link.path) == place.dir)
                    .collect();
                (name, here)
            })
            .filter(|(_, here)| !here.is_empty())
            .collect::<Vec<_>>()
    };
    for legacy in places.iter().filter(|p| p.source == Source::Legacy) {
        if !in_place(legacy).is_empty() {
            location::say_legacy(&legacy.dir, &places[0].dir, args.name.as_deref());
        }
    }
    if args.json {
        let rows: Vec<serde_json::Value> = boxes
            .iter()
            .flat_map(|(name, listed)| {
                listed.iter().map(move |l| {
                    serde_json::json!({
                        "box": name,
                        "file": l.link.path.display().to_string(),
                        "kind": if l.link.parent.is_some() { "incremental" } else { "full" },
                        "chain": l.chain.as_deref().map(file_name),
                        "size": l.size,
                        "stamp": l.link.stamp,
                        "age_secs": l.age_secs,
                    })
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if boxes.is_empty() {
        println!("No backups in {}", places[0].dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    for place in &places {
        let here = in_place(place);
        if !here.is_empty() {
            println!("Backups in {}", place.dir.display());
        }
        for (name, listed) in here {
            print_box(name, &listed);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One box's backups in one place, by chain.
fn print_box(name: &str, listed: &[&Listed]) {
    println!("{name}");
    let mut chains: BTreeMap<String, Vec<&Listed>> = BTreeMap::new();
    for l in listed {
        let key = l.chain.as_deref().map_or_else(
            || "(broken: a link before it is missing)".to_string(),
            file_name,
        );
        chains.entry(key).or_default().push(l);
    }
    for (root, links) in chains {
        let total: u64 = links.iter().map(|l| l.size).sum();
        println!(
            "  chain {root}: {} backup(s), {}",
            links.len(),
            human(total)
        );
        for l in links {
            println!(
                "    {:<40} {:<12} {:>10}  {}",
                file_name(&l.link.path),
                if l.link.parent.is_some() {
                    "incremental"
                } else {
                    "full"
                },
                human(l.size),
                age(l.age_secs)
            );
        }
    }
}

fn prune(ctx: &Context, args: &crate::cli::PruneArgs) -> Result<ExitCode> {
    let places = location::places_of(&ctx.config, &ctx.state, args.name.as_deref())?;
    let boxes = location::files_by_box(&places, args.name.as_deref())?;
    let pass = if boxes.is_empty() {
        None
    } else {
        Some(passphrase::resolve(passphrase::Purpose::Decrypt)?)
    };
    let mut removed = 0usize;
    for name in boxes.keys() {
        // No save of this box may publish while its backups are read and pruned: the
        // lock first, then the listing the plan is made from.
        let _lock = match BoxName::parse(name) {
            Ok(b) => Some(locks::try_acquire(
                &ctx.state,
                LockKey::Box(b),
                &format!("box backups prune {name}"),
            )?),
            Err(_) => None,
        };
        let Some(pass) = &pass else {
            break;
        };
        let files = location::files_by_box(&places, Some(name))?;
        let read = read_boxes(files, pass)?;
        let Some(listed) = read.get(name) else {
            continue;
        };
        let links: Vec<Link> = listed.iter().map(|l| l.link.clone()).collect();
        let plan = chain::prune(&links, args.keep_last, args.keep_daily);
        for (path, why) in &plan.unjudged {
            ui::warn(format!(
                "keeping {} and every backup it stands on: prune cannot judge it ({why})",
                file_name(path)
            ));
        }
        for path in &plan.remove {
            if args.dry_run {
                println!("would remove {}", path.display());
            } else {
                std::fs::remove_file(path)
                    .with_context(|| format!("cannot remove {}", path.display()))?;
                println!("removed {}", path.display());
                removed += 1;
            }
            // The mirror keeps what the backup dir keeps (BACKUP_MIRROR).
            if let Some(link) = links.iter().find(|l| &l.path == path) {
                super::backups_copy::prune_mirror(ctx, path, &link.digest, args.dry_run);
            }
        }
        ui::say(format!(
            "{name}: keeping {} backup(s){}",
            plan.keep.len(),
            if args.dry_run { " (dry run)" } else { "" }
        ));
    }
    if !args.dry_run {
        ui::say(format!("removed {removed} backup(s)"));
    }
    Ok(ExitCode::SUCCESS)
}
