//! Load: pass 2 of the engine decrypts the backup again and cuts the plaintext into parts
//! in the host scratch dir; each is copied into the guest scratch dir as it is cut and then
//! deleted. The engine hands out the last part only after the OpenPGP integrity check and
//! a hash equal to pass 1's; the index is written only then, and `hb import` does nothing
//! without it (and checks every part's size and XXH3-128 hash against it, so a part damaged on
//! its way in stops the import before anything is extracted).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicUsize;

use anyhow::{Context as _, Result};
use box_proto::archive::parts::{INDEX_FILE, PartIndex};
use secrecy::SecretString;

use super::checkpoint;
use super::guest_hb::{Guest, timeouts};
use crate::backup::cleanup::Temp;
use crate::backup::load::{ValidatedBackup, write_parts};
use crate::smolvm::Smolvm;
use crate::ui::progress::Phase;

/// Copies the validated backup's plaintext into `guest_dir` as parts plus their index,
/// all 0600 (the dir is 0700).
pub fn copy_in(
    guest: &mut Guest<'_>,
    validated: &ValidatedBackup,
    passphrase: &SecretString,
    host_dir: &Path,
    guest_dir: &str,
    part_size: u64,
    cancel: Option<&AtomicUsize>,
) -> Result<PartIndex> {
    let mut phase = Phase::start("copying in", Some(validated.plaintext_size));
    let index = {
        let smolvm = guest.smolvm;
        let machine = guest.machine;
        write_parts(
            &validated.path,
            passphrase,
            &validated.sha256,
            part_size,
            host_dir,
            |path, part| {
                checkpoint(cancel)?;
                smolvm
                    .copy_in(path, machine, &format!("{guest_dir}/{}", part.name))
                    .with_context(|| format!("cannot copy {} into the box", part.name))?;
                phase.add(part.size);
                Ok(())
            },
        )?
    };
    phase.finish();
    checkpoint(cancel)?;
    send_index(guest, &index, host_dir, guest_dir)?;
    Ok(index)
}

/// Writes `index` into `guest_dir` (through a 0600 temp file in `host_dir`) once every part
/// is there, then makes everything in the dir 0600: `hb import` does nothing without it.
pub fn send_index(
    guest: &mut Guest<'_>,
    index: &PartIndex,
    host_dir: &Path,
    guest_dir: &str,
) -> Result<()> {
    copy_index(guest, index, host_dir, guest_dir)?;
    guest.exec_ok(
        "making the parts private",
        &[
            "find", guest_dir, "-type", "f", "-exec", "chmod", "0600", "{}", "+",
        ],
        timeouts::SHORT,
        false,
    )?;
    guest.transcript.line(&format!(
        "copied in {} part(s), {} bytes",
        index.parts.len(),
        index.total_size
    ));
    Ok(())
}

/// Copies `index` into `guest_dir` as its part index.
pub fn copy_index(
    guest: &mut Guest<'_>,
    index: &PartIndex,
    host_dir: &Path,
    guest_dir: &str,
) -> Result<()> {
    copy_text(
        guest.smolvm,
        guest.machine,
        host_dir,
        &format!("{guest_dir}/{INDEX_FILE}"),
        &index.render(),
    )
    .context("cannot copy the part index into the box")
}

/// Puts `text` at `guest_path` in `machine`, through a 0600 temp file in `host_dir` (the
/// part index, a part's marker: `machine cp` copies files only).
pub fn copy_text(
    smolvm: &Smolvm,
    machine: &str,
    host_dir: &Path,
    guest_path: &str,
    text: &str,
) -> Result<()> {
    let (temp, mut file) = Temp::create_file(host_dir, ".text-")
        .with_context(|| format!("cannot write a temp file in {}", host_dir.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write a temp file in {}", host_dir.display()))?;
    drop(file);
    smolvm.copy_in(temp.path(), machine, guest_path)?;
    Ok(())
}
