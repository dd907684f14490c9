//! The save-path driver shared by `examples/backup_harness.rs` (bench) and the signal
//! tests (which re-execute their own binary in harness mode). A test and bench driver for the save path without a VM: `hb export`-style part
//! directories in, a published backup out, through exactly the pipeline `box save` uses.
//!
//! ```text
//! backup_harness save <parts-dir> <out.tar.zst.gpg>     # encrypt + validate + verify + publish
//! backup_harness save-stream <hb> <data-root> <scratch> <out>
//!                                      # `hb export --stream-parts` as a child, its parts
//!                                      # consumed as they are announced: box save minus smolvm
//! backup_harness verify <backup>                         # pass 1 only (decrypt, validate, hash)
//! backup_harness parts <backup> <dir> <part-size>        # pass 1 + pass 2 into parts + index
//! backup_harness encrypt <plain> <out>                   # bench: the bulk SEIPDv1 writer alone
//! backup_harness decrypt-own <backup>                    # bench: the bulk verify-decrypt alone
//! backup_harness decrypt <backup>                        # bench: sequoia's decryption alone
//! ```
//! The passphrase comes from BOX_PASSPHRASE_FILE / BOX_PASSPHRASE as for `box`.
//! `HARNESS_PAUSE_MS=<n>` sleeps n ms after each part and before verify/publish, so tests
//! can land signals inside each phase.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use box_host::backup::{cleanup, crypto, load, passphrase, save, seipd};
use box_host::transfer::{self, announced};
use box_proto::archive::parts::Part;

/// The "guest" of `save-stream`: a local export dir, read as box reads a guest's.
struct LocalParts(PathBuf);

impl announced::PartSource for LocalParts {
    fn fetch(&mut self, name: &str, local: &Path) -> Result<()> {
        std::fs::copy(self.0.join(name), local).with_context(|| format!("cannot copy {name}"))?;
        Ok(())
    }
    fn release(&mut self, name: &str) -> Result<()> {
        std::fs::remove_file(self.0.join(name)).with_context(|| format!("cannot remove {name}"))
    }
}

/// `hb export --stream-parts --part-hash xxh3-128` as a child, its announcements as events, then its exit.
fn spawn_export(
    hb: &str,
    data: &str,
    scratch: &str,
    part_size: u64,
    pending: u16,
) -> Result<mpsc::Receiver<announced::ExportEvent>> {
    use announced::{ExportEvent, ExportExit};
    let mut child = Command::new(hb)
        .args(["export", "--root", data, "--out", scratch, "--part-size"])
        .arg(part_size.to_string())
        .arg("--stream-parts")
        .arg(pending.to_string())
        // As box asks for them.
        .args(["--part-hash", "xxh3-128"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {hb}"))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let event = match Part::parse_ready(&line) {
                Some(Ok(p)) => ExportEvent::Ready(p),
                Some(Err(_)) => ExportEvent::Malformed(line),
                None => continue,
            };
            let _ = tx.send(event);
        }
        let exit = match child.wait() {
            Ok(st) if st.success() => ExportExit::Done,
            Ok(st) => ExportExit::Failed(anyhow!("hb export failed: {st}")),
            Err(e) => ExportExit::Failed(anyhow!("cannot wait for hb export: {e}")),
        };
        let _ = tx.send(ExportEvent::Exited(exit));
    });
    Ok(rx)
}

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
            let index = save::read_index(Path::new(parts))?;
            let mut p = save::Pipeline::begin_in_parts(out, &pass, index.parts[0].size)?;
            phase("encrypt");
            for part in &index.parts {
                p.feed_part(&Path::new(parts).join(&part.name), Some(part))?;
                pause();
            }
            let sealed = p.finish()?;
            sealed.matches_index(&index)?;
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
        ["save-stream", hb, data, scratch, out] => {
            let t0 = Instant::now();
            let out = Path::new(out);
            save::check_destination(out)?;
            let pass = passphrase::resolve(passphrase::Purpose::Encrypt)?;
            let part_size = transfer::part_size()?;
            let pending = transfer::stream_pending()?.unwrap_or(transfer::STREAM_PENDING);
            let host = cleanup::Temp::create_dir(
                out.parent().unwrap_or(Path::new(".")),
                ".harness-host-",
            )?;
            let p = save::Pipeline::begin_in_parts(out, &pass, part_size)?;
            let events = spawn_export(hb, data, scratch, part_size, pending)?;
            let mut stages = announced::Stages::default();
            let streamed = announced::seal_announced(
                &events,
                &mut LocalParts(PathBuf::from(scratch)),
                host.path(),
                p,
                None,
                &mut stages,
            )?;
            let announced::Streamed::Sealed { sealed, .. } = streamed else {
                bail!("hb export did not stream its parts");
            };
            let _ = std::fs::remove_dir_all(scratch);
            let sealed_at = t0.elapsed();
            let verified = sealed.verify()?;
            let verified_at = t0.elapsed();
            let published = verified.publish()?;
            eprintln!(
                "stages: export + {} = {:.2}s; verify {:.2}s; publish {:.2}s",
                stages.summary(),
                sealed_at.as_secs_f64(),
                (verified_at - sealed_at).as_secs_f64(),
                (t0.elapsed() - verified_at).as_secs_f64()
            );
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
            let found = seipd::verify_own(file, backup, &pass, |_| {})?;
            println!("ok {} {}", hex::encode(found.mdc), found.bytes);
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
