//! `box extract <file> [dir]`: decrypt, validate, extract into a staging dir beside the
//! target and rename it into place. Pass 1 validates everything without writing; pass 2
//! extracts into a private staging dir that is promoted only after the OpenPGP integrity
//! check passed and the plaintext hash equals pass 1's. An existing target is never
//! touched. An incremental backup brings its chain: the links before it, found beside it
//! by digest (backup::chain), are validated and applied first, oldest first.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use box_proto::archive::naming::strip_backup_extension;

use super::Context;
use crate::backup::{chain, cleanup, load, location, open_chain, passphrase};
use crate::ui;

/// `<file name minus .tar.zst.gpg or .tar.gz.gpg>-extracted` in the current directory, as
/// tar extracts: the backups themselves are kept out of the way, in the user's data
/// directory (it used to be `./backups`, the backup dir of those days).
pub fn default_target(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".to_string());
    PathBuf::from(format!("{}-extracted", strip_backup_extension(&name)))
}

pub fn run(ctx: &Context, args: &crate::cli::ExtractArgs) -> Result<ExitCode> {
    cleanup::install();
    let file = location::find_file(&ctx.config, &ctx.state, &args.file);
    load::check_backup_file(&file)?;
    let target = match &args.dir {
        Some(dir) => dir.clone(),
        None => default_target(&file),
    };
    if std::fs::symlink_metadata(&target).is_ok() {
        bail!(
            "refusing to overwrite existing directory: {}",
            target.display()
        );
    }
    let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
    // An incremental backup restores with the links before it: found beside it by digest,
    // each validated after the ones before, before anything is written.
    let found = open_chain::find(&file, args.chain_dir.as_deref(), &pass).map_err(|e| {
        let looked_in = args
            .chain_dir
            .clone()
            .unwrap_or_else(|| chain::dir_of(&file));
        crate::backup::missing::explain(&ctx.config, &ctx.state, &looked_in, e)
    })?;
    let links = &found.links;
    if links.len() > 1 {
        ui::say(format!(
            "{} is link {} of a chain; applying, oldest first: {}",
            file.display(),
            links.len(),
            links
                .iter()
                .map(|l| l
                    .path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    ui::say(format!("Decrypting and validating {}", file.display()));
    let chain = found.validate(&pass)?;
    for warning in chain.warnings() {
        ui::warn(warning);
    }
    let chain = chain.links;
    let Some((validated, _)) = chain.last() else {
        bail!("nothing to extract from {}", file.display());
    };
    match (&validated.manifest, &validated.manifest_error) {
        (Some(manifest), _) => {
            ui::say("Runtime manifest:");
            if !ctx.quiet {
                for (key, value) in manifest.entries() {
                    println!("    {key}={value}");
                }
            }
        }
        (None, Some(e)) => ui::warn(format!(
            "the runtime manifest in this backup is unreadable: {e}"
        )),
        (None, None) => ui::warn("this backup has no runtime manifest"),
    }
    ui::say(format!("Extracting into {}", target.display()));
    let done = load::extract_chain(&chain, &pass, &target)?;
    if chain.len() > 1 {
        println!(
            "Extracted a chain of {} backups -> {}/",
            chain.len(),
            done.dir.display()
        );
    } else {
        println!("Extracted {} files -> {}/", done.files, done.dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_is_in_the_current_directory() {
        assert_eq!(
            default_target(Path::new("/x/alpha-20261129-120000.tar.zst.gpg")),
            Path::new("alpha-20261129-120000-extracted")
        );
        assert_eq!(
            default_target(Path::new("old.tar.gz.gpg")),
            Path::new("old-extracted")
        );
    }
}
