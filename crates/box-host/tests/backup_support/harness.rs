//! The save-path driver shared by `examples/backup_harness.rs` (bench) and the signal
//! tests (which re-execute their own binary in harness mode). A test and bench driver for the save path without a VM: `hb export`-style part
//! directories in, a published backup out, through exactly the pipeline `box save` uses.
//!
//! ```text
//! backup_harness save <parts-dir> <out.tar.zst.gpg>     # encrypt + validate + verify + publish
//! backup_harness verify <backup>                         # pass 1 only (decrypt, validate, hash)
//! backup_harness parts <backup> <dir> <part-size>        # pass 1 + pass 2 into parts + index
//! backup_harness encrypt <plain> <out>                   # bench: the bulk SEIPDv1 writer alone
//! backup_harness decrypt-own <backup>                    # bench: the bulk verify-decrypt alone
//! backup_harness decrypt <backup>                        # bench: sequoia's decryption alone
//! ```
//! The passphrase comes from BOX_PASSPHRASE_FILE / BOX_PASSPHRASE as for `box`.
//! `HARNESS_PAUSE_MS=<n>` sleeps n ms after each part and before verify/publish, so tests
//! can land signals inside each phase.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use box_host::backup::{cleanup, crypto, load, passphrase, save, seipd};

fn pause() {
    if let Some(ms) = std::env::var("HARNESS_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

fn phase(name: &str) {
    if std::env::var_os("HARNESS_PHASES").is_some() {
        eprintln!("phase: {name}");
    }
}

fn run(args: &[String]) -> Result<()> {
    cleanup::install();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["save", parts, out] => {
            let out = Path::new(out);
            save::check_destination(out)?;
            let pass = passphrase::resolve(passphrase::Purpose::Encrypt)?;
            let mut p = save::Pipeline::begin(out, &pass)?;
            let index = save::read_index(Path::new(parts))?;
            phase("encrypt");
            for part in &index.parts {
                p.feed_part(&Path::new(parts).join(&part.name), Some(part))?;
                pause();
            }
            let sealed = p.finish()?;
            if sealed.sha256 != index.total_sha256 {
                bail!("the parts do not match the index total");
            }
            phase("verify");
            pause();
            let verified = sealed.verify()?;
            phase("publish");
            pause();
            let published = verified.publish()?;
            println!(
                "Saved and verified {} -> {}",
                published.size,
                published.path.display()
            );
        }
        ["verify", backup] => {
            let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
            let v = load::validate_backup(Path::new(backup), &pass)?;
            println!("ok {} {} members", hex::encode(v.sha256), v.report.members);
        }
        ["parts", backup, dir, size] => {
            let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
            let v = load::validate_backup(Path::new(backup), &pass)?;
            let out = Path::new(dir);
            let index = load::write_parts(
                Path::new(backup),
                &pass,
                &v.sha256,
                size.parse()?,
                out,
                |p, part| {
                    std::fs::copy(p, out.join(&part.name))?;
                    Ok(())
                },
            )?;
            std::fs::write(
                out.join(box_proto::archive::parts::INDEX_FILE),
                index.render(),
            )?;
            println!("{} parts", index.parts.len());
        }
        ["encrypt", plain, out] => {
            let pass = passphrase::resolve(passphrase::Purpose::Encrypt)?;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(out)?;
            let mut w = seipd::SeipdWriter::new(file, &pass)?;
            std::io::copy(&mut std::fs::File::open(plain)?, &mut w)?;
            w.finish()?;
        }
        ["decrypt-own", backup] => {
            let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
            let file = std::fs::File::open(backup)?;
            let (sha, size) = seipd::verify_own(file, backup, &pass, |_| {})?;
            println!("ok {} {size}", hex::encode(sha));
        }
        ["decrypt", backup] => {
            let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
            let mut r = crypto::DecryptReader::open(Path::new(backup), &pass)?;
            let size = std::io::copy(&mut r, &mut std::io::sink())?;
            if !r.authenticated() {
                bail!("not authenticated");
            }
            println!("ok {size}");
        }
        _ => bail!(
            "usage: backup_harness save <parts-dir> <out> | verify <backup> | parts <backup> <dir> <size>"
        ),
    }
    Ok(())
}

/// Runs one harness command (the arguments after the program name).
pub fn main_with_args(args: &[String]) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
