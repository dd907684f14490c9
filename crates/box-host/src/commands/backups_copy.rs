//! `box backups copy [BOX] DEST [--all]`: a box's newest backup and every file it stands on
//! (with `--all`, every backup file of the box, or of every box) copied to another
//! directory, each one read back before it is named there ([`crate::backup::copy_to`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};

use box_proto::BoxName;

use super::Context;
use crate::backup::copy_to::{self, Copied};
use crate::backup::tree_cache::Known;
use crate::backup::{chain, location, open_chain, passphrase};
use crate::ui;
use crate::ui::progress::{Phase, human};

/// A file to copy and the SHA-256 it must have.
struct ToCopy {
    path: PathBuf,
    digest: [u8; 32],
}

pub fn run(ctx: &Context, args: &crate::cli::CopyArgs) -> Result<ExitCode> {
    let (only, dest) = match args.args.as_slice() {
        [dest] => (None, PathBuf::from(dest)),
        [name, dest] => (Some(name.as_str()), PathBuf::from(dest)),
        _ => bail!("usage: box backups copy [BOX] DEST [--all]"),
    };
    let places = location::places_of(&ctx.config, &ctx.state, only)?;
    let boxes = location::files_by_box(&places, only)?;
    if boxes.is_empty() {
        bail!(
            "no backups{} in {}",
            only.map(|n| format!(" of '{n}'")).unwrap_or_default(),
            places[0].dir.display()
        );
    }
    if only.is_none() && !args.all && boxes.len() > 1 {
        let names: Vec<&str> = boxes.keys().map(String::as_str).collect();
        bail!(
            "backups of several boxes are here ({}): name one (box backups copy BOX {}), or \
             copy them all with --all",
            names.join(", "),
            dest.display()
        );
    }
    let mut files = Vec::new();
    if args.all {
        for paths in boxes.values() {
            for path in paths {
                files.push(ToCopy {
                    digest: chain::file_digest(path)?,
                    path: path.clone(),
                });
            }
        }
    } else {
        let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
        for paths in boxes.values() {
            let Some(newest) = paths
                .iter()
                .max_by_key(|p| chain::box_and_stamp(p).map(|(_, stamp)| stamp))
            else {
                continue;
            };
            let found = open_chain::find(newest, None, &pass)?;
            files.extend(found.links.into_iter().map(|l| ToCopy {
                path: l.path,
                digest: l.digest,
            }));
        }
    }
    // Oldest first: names are `<box>-<stamp>`, so a chain lands parent before child.
    files.sort_by(|a, b| a.path.file_name().cmp(&b.path.file_name()));
    copy_all(&files, &dest)
}

/// Copies each of `files` into `dest`, saying what became of each; a refusal is named and
/// the rest still copied.
fn copy_all(files: &[ToCopy], dest: &Path) -> Result<ExitCode> {
    std::fs::create_dir_all(dest).with_context(|| format!("cannot make {}", dest.display()))?;
    let bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(&f.path).ok())
        .map(|m| m.len() * 2)
        .sum();
    let mut phase = Phase::start("copying and reading back", Some(bytes));
    let (mut copied, mut there, mut failed, mut copied_bytes) = (0usize, 0usize, 0usize, 0u64);
    for file in files {
        let name = file.path.file_name().map(Path::new).unwrap_or(&file.path);
        match copy_to::copy_file(&file.path, &file.digest, dest, &mut phase) {
            Ok(Copied::New) => {
                copied += 1;
                let size = std::fs::metadata(&file.path).map_or(0, |m| m.len());
                copied_bytes += size;
                ui::say(format!("copied {} ({})", name.display(), human(size)));
            }
            Ok(Copied::AlreadyThere) => {
                there += 1;
                ui::say(format!("already there: {}", name.display()));
            }
            Err(e) => {
                failed += 1;
                ui::error(format!("{e:#}"));
            }
        }
    }
    phase.finish();
    ui::say(format!(
        "{} to {}: {copied} file(s) copied ({}) and read back, {there} already there{}",
        if failed == 0 { "done" } else { "incomplete" },
        dest.display(),
        human(copied_bytes),
        if failed == 0 {
            String::new()
        } else {
            format!(", {failed} not copied (above)")
        }
    ));
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// After a save published and verified `published` (SHA-256 `digest`): with `BACKUP_MIRROR`
/// set, the mirror gets it and every file of its chain it lacks (the save's own record of
/// the chain says which and their digests). Nothing here fails the save: a mirror that is
/// not there (a NAS not mounted) or a copy that fails is a warning, and the next save copies
/// what the mirror still lacks.
pub fn mirror_after_save(ctx: &Context, name: &BoxName, published: &Path, digest: &[u8; 32]) {
    let Some(mirror) = &ctx.config.env.backup_mirror else {
        return;
    };
    if !mirror.is_dir() {
        ui::warn(format!(
            "BACKUP_MIRROR {} is not there (not mounted?): {} was not mirrored; the next save \
             copies what the mirror lacks",
            mirror.display(),
            published.display()
        ));
        return;
    }
    let dir = chain::dir_of(published);
    let mut files: Vec<ToCopy> = Known::recorded(&ctx.state, name)
        .into_iter()
        .filter(|r| chain::dir_of(&r.path) == dir && r.path != published && r.path.exists())
        .map(|r| ToCopy {
            path: r.path,
            digest: r.digest,
        })
        .collect();
    files.push(ToCopy {
        path: published.to_path_buf(),
        digest: *digest,
    });
    files.sort_by(|a, b| a.path.file_name().cmp(&b.path.file_name()));
    let mut phase = Phase::hidden();
    let (mut copied, mut failed) = (0usize, 0usize);
    for file in &files {
        match copy_to::copy_file(&file.path, &file.digest, mirror, &mut phase) {
            Ok(Copied::New) => copied += 1,
            Ok(Copied::AlreadyThere) => {}
            Err(e) => {
                failed += 1;
                ui::warn(format!("BACKUP_MIRROR: {e:#}"));
            }
        }
    }
    if failed == 0 {
        ui::say(format!(
            "Mirrored to {} ({copied} file(s) copied and read back; the chain is whole there)",
            mirror.display()
        ));
    }
}

/// After `box backups prune` removed `removed` (whose SHA-256 was `digest`): the mirror's
/// file of that name goes too when it is the same backup; another file of that name stays,
/// and is said.
pub fn prune_mirror(ctx: &Context, removed: &Path, digest: &[u8; 32], dry_run: bool) {
    let (Some(mirror), Some(file_name)) = (&ctx.config.env.backup_mirror, removed.file_name())
    else {
        return;
    };
    let there = mirror.join(file_name);
    if there == removed || !there.is_file() {
        return;
    }
    match chain::file_digest(&there) {
        Ok(d) if d == *digest => {
            if dry_run {
                println!("would remove {}", there.display());
            } else if let Err(e) = std::fs::remove_file(&there) {
                ui::warn(format!("cannot remove {}: {e}", there.display()));
            } else {
                println!("removed {}", there.display());
            }
        }
        Ok(_) => ui::warn(format!(
            "{} is not the backup pruned under that name (another SHA-256): left as it is",
            there.display()
        )),
        Err(e) => ui::warn(format!("{e:#}")),
    }
}
