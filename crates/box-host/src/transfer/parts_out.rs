//! Save, sequential (an `hb` that does not stream its parts; see [`super::announced`]):
//! the parts `hb export` wrote in the guest scratch dir come out one at a time. Each
//! is copied with `machine cp` into the host scratch dir, checked against the part index
//! (size first, for a clear "arrived truncated", then its hash in the sink: while it
//! streams into the engine, or before clone copies it on), and deleted. For a save the
//! index's total must then equal what the engine hashed (the caller checks).

use std::path::Path;
use std::sync::atomic::AtomicUsize;

use anyhow::{Context as _, Result};
use box_proto::archive::parts::{INDEX_FILE, PartIndex};

use super::announced::PartSink;
use super::checkpoint;
use super::guest_hb::Guest;
use crate::backup::hex_sha;
use crate::backup::save::read_index;
use crate::ui::progress::human;

/// Copies the index and every part out of `guest_dir`, one at a time, into `sink`;
/// returns the index.
pub fn copy_out(
    guest: &mut Guest<'_>,
    guest_dir: &str,
    host_dir: &Path,
    sink: &mut impl PartSink,
    cancel: Option<&AtomicUsize>,
) -> Result<PartIndex> {
    let index_path = host_dir.join(INDEX_FILE);
    guest
        .smolvm
        .copy_out(
            guest.machine,
            &format!("{guest_dir}/{INDEX_FILE}"),
            &index_path,
        )
        .context("cannot copy the part index out of the box")?;
    let index = read_index(host_dir)?;
    let _ = std::fs::remove_file(&index_path);
    for part in &index.parts {
        super::check_copyable(part)?;
    }
    guest.transcript.line(&format!(
        "part index: {} part(s), {} bytes, SHA-256 {}",
        index.parts.len(),
        index.total_size,
        index
            .total_sha256
            .as_ref()
            .map_or("(not listed)".into(), hex_sha)
    ));
    let mut phase = super::announced::parts_phase(sink, "copying out", Some(index.total_size));
    for part in &index.parts {
        checkpoint(cancel)?;
        let local = host_dir.join(&part.name);
        guest
            .smolvm
            .copy_out(guest.machine, &format!("{guest_dir}/{}", part.name), &local)
            .with_context(|| format!("cannot copy {} out of the box", part.name))?;
        if let Err(e) = super::check_arrived(&local, part) {
            let _ = std::fs::remove_file(&local);
            return Err(e);
        }
        let fed = sink.take_part(&local, part);
        let _ = std::fs::remove_file(&local);
        fed?;
        phase.add(part.size);
    }
    let took = phase.finish();
    checkpoint(cancel)?;
    guest.transcript.line(&format!(
        "copied out {} in {:.1}s",
        human(index.total_size),
        took.as_secs_f64()
    ));
    Ok(index)
}
