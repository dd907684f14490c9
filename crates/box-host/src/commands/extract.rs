//! `box extract <file> [dir]`: decrypt, validate, extract into a staging dir beside the
//! target and rename it into place. Pass 1 validates everything without writing; pass 2
//! extracts into a private staging dir that is promoted only after the OpenPGP integrity
//! check passed and the plaintext hash equals pass 1's. An existing target is never
//! touched.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use box_proto::archive::naming::strip_backup_extension;

use super::Context;
use crate::backup::{cleanup, load, passphrase};
use crate::ui;

/// `<backup dir>/<file name minus .tar.zst.gpg or .tar.gz.gpg>-extracted`.
pub fn default_target(backup_dir: &Path, file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".to_string());
    backup_dir.join(format!("{}-extracted", strip_backup_extension(&name)))
}

pub fn run(ctx: &Context, args: &crate::cli::ExtractArgs) -> Result<ExitCode> {
    cleanup::install();
    load::check_backup_file(&args.file)?;
    let target = match &args.dir {
        Some(dir) => dir.clone(),
        None => default_target(&ctx.config.backup_dir(), &args.file),
    };
    if std::fs::symlink_metadata(&target).is_ok() {
        bail!(
            "refusing to overwrite existing directory: {}",
            target.display()
        );
    }
    let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
    ui::say(format!("Decrypting and validating {}", args.file.display()));
    let validated = load::validate_backup(&args.file, &pass)?;
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
    let done = load::extract(&validated, &pass, &target)?;
    println!("Extracted {} files -> {}/", done.files, done.dir.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir() {
        let d = Path::new("/b");
        assert_eq!(
            default_target(d, Path::new("/x/alpha-20261129-120000.tar.zst.gpg")),
            Path::new("/b/alpha-20261129-120000-extracted")
        );
        assert_eq!(
            default_target(d, Path::new("old.tar.gz.gpg")),
            Path::new("/b/old-extracted")
        );
    }
}
