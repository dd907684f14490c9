//! Moving a box's `/data` through smolvm for `box save` and `box load` (docs/design.md,
//! "save" and "load").
//!
//! The backup engine (`crate::backup`) does the cryptography and validation; this module
//! does what sits between it and the guest:
//!
//! * [`guest_dir`]: the 0700 guest scratch dir under `/root` (never `/tmp`, which smolvm
//!   does not share reliably) that holds plaintext parts, and its removal;
//! * [`host_dir`]: the 0700 host scratch dir under `<state>/tmp` that holds at most one
//!   plaintext part at a time, and the sweep of dirs a killed run left behind;
//! * [`parts_stream`] + [`announced`] (save): `hb export` announces each finished part
//!   while it runs; each is copied out, removed in the guest, checked and streamed into the
//!   engine while the next is being exported; the index, written last, must agree;
//! * [`parts_out`] (save with an `hb` that does not stream): after the export, copy each
//!   part out, check it against the part index, stream it into the engine, delete it;
//! * [`parts_follow`] (load, clone): `hb import --follow` runs while the parts come (pass 2
//!   of the engine cutting the plaintext, or the source box's export), each copied in with
//!   a marker the import waits for, at most N not yet taken; then each link's index and
//!   end marker;
//! * [`parts_in`] (load and clone with streaming off): the parts are copied in 0600, then
//!   the index that `hb import` insists on;
//! * [`guest_hb`]: the `hb` verbs a transfer runs, with the transcript and a pending-signal
//!   flag that cuts long ones short.

pub mod announced;
pub mod guest_dir;
pub mod guest_hb;
pub mod host_dir;
pub mod parts_follow;
pub mod parts_in;
pub mod parts_out;
pub mod parts_stream;

use std::sync::atomic::{AtomicUsize, Ordering};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use box_proto::archive::parts::Part;

/// A HUP, INT or TERM arrived; the run stops at its next checkpoint and cleans up.
#[derive(Debug, thiserror::Error)]
#[error("interrupted by {}", crate::lifecycle::signals::DeferredSignals::name(*.0))]
pub struct Interrupted(pub usize);

/// Fails with [`Interrupted`] once a signal is pending on `flag`.
pub fn checkpoint(flag: Option<&AtomicUsize>) -> Result<()> {
    match flag.map(|f| f.load(Ordering::SeqCst)) {
        Some(sig) if sig != 0 => Err(Interrupted(sig).into()),
        _ => Ok(()),
    }
}

/// The part size of a save (and of load's re-chunking): 64 MiB. Small enough that the
/// export of part N+1 overlaps the copy and encryption of part N from early on, the tail
/// after the export (the parts it still holds) is short, and the guest holds little
/// plaintext ([`STREAM_PENDING`] + 1 parts); large enough that the two smolvm calls per
/// part (`cp`, `rm`) are small next to the data. Through the simulator (313 MiB of /data,
/// 151 MiB compressed, loaded machine), export..publish took 2.91 s with 32 MiB parts,
/// 2.75 s with 64, 2.97 s with 128 and 3.25 s with 256 (one part: no overlap).
pub const DEFAULT_PART_SIZE: u64 = 64 << 20;
/// smolvm's `machine cp` refuses files of 4 GiB and more; a part stays below.
pub const MAX_PART_SIZE: u64 = (4 << 30) - 1;
/// How many announced, not yet copied parts a streaming export may keep in the guest
/// before it waits: two, so it runs on while the host encrypts one and copies the next.
pub const STREAM_PENDING: u16 = 2;

/// The part size for this run: `BOX_PART_SIZE` (bytes; tests use small ones), else
/// [`DEFAULT_PART_SIZE`].
pub fn part_size() -> Result<u64> {
    match std::env::var("BOX_PART_SIZE") {
        Ok(v) if !v.trim().is_empty() => parse_part_size(&v),
        _ => Ok(DEFAULT_PART_SIZE),
    }
}

/// Whether save overlaps export and encryption, and with how many pending parts:
/// `BOX_STREAM_PARTS` (0 = the sequential path: export everything, then copy), else
/// [`STREAM_PENDING`].
pub fn stream_pending() -> Result<Option<u16>> {
    match std::env::var("BOX_STREAM_PARTS") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u16>() {
            Ok(0) => Ok(None),
            Ok(n) if n <= 64 => Ok(Some(n)),
            _ => bail!(
                "BOX_STREAM_PARTS must be 0 (export first, then copy) or a number of parts from 1 to 64, not {:?}",
                v.chars().take(40).collect::<String>()
            ),
        },
        _ => Ok(Some(STREAM_PENDING)),
    }
}

fn parse_part_size(v: &str) -> Result<u64> {
    match v.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_PART_SIZE).contains(&n) => Ok(n),
        _ => bail!(
            "BOX_PART_SIZE must be a number of bytes from 1 to {MAX_PART_SIZE} (smolvm copies files below 4 GiB), not {:?}",
            v.chars().take(40).collect::<String>()
        ),
    }
}

/// A part smolvm can copy: `machine cp` refuses files of 4 GiB and more.
pub(crate) fn check_copyable(part: &Part) -> Result<()> {
    if part.size > MAX_PART_SIZE {
        bail!(
            "{} is {} bytes, more than smolvm can copy (4 GiB); set BOX_PART_SIZE lower",
            part.name,
            part.size
        );
    }
    Ok(())
}

/// A part just copied out to `local`: made private (0600) and checked whole, by size, for
/// a clear "arrived truncated" before its hash (XXH3-128 from a current `hb`, SHA-256 from
/// an older one) is checked while it streams.
pub(crate) fn check_arrived(local: &Path, part: &Part) -> Result<()> {
    std::fs::set_permissions(local, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", local.display()))?;
    let got = std::fs::metadata(local)
        .with_context(|| format!("{} did not arrive", part.name))?
        .len();
    if got != part.size {
        bail!(
            "{} arrived truncated from the box: {got} of {} bytes (smolvm machine cp); nothing was published, retry the save",
            part.name,
            part.size
        );
    }
    Ok(())
}

/// `20261129-120000`, the stamp used in scratch names.
pub fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_sizes() {
        assert_eq!(parse_part_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_part_size(" 1 ").unwrap(), 1);
        assert!(parse_part_size("0").is_err());
        assert!(parse_part_size("4294967296").is_err());
        assert!(parse_part_size("1GiB").is_err());
        assert_eq!(parse_part_size("4294967295").unwrap(), MAX_PART_SIZE);
    }
}
