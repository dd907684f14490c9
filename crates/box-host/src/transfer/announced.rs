//! Save, overlapped: `hb export --stream-parts N` announces each part as soon as it is
//! complete in the guest (box_proto::archive::parts::READY), and the host copies it out,
//! frees it in the guest and encrypts it while the export goes on writing the next ones —
//! the guest's zstd and the host's encryption run at the same time on different cores.
//!
//! This module is the consumer of the announcements, whatever produces them and wherever
//! the parts go: `box save` (an exec streaming through smolvm, parts copied with `machine
//! cp`; see [`super::parts_stream`]; each part encrypted), `box clone` (the same export,
//! each part copied on into the new box) and the bench harness (`hb export` as a child,
//! parts copied from a local dir) run this same code. For each announcement, in order:
//!
//! 1. the name must be the next in sequence and the size one smolvm can copy;
//! 2. copy it to the host scratch dir (0600), check the size;
//! 3. release it in the guest (remove it: the export holds back until it has room);
//! 4. hand it to the [`PartSink`] (the engine streams it, checking its hash against the
//!    announcement; clone checks it and copies it into the new box);
//! 5. delete the host copy — the host holds one plaintext part at a time.
//!
//! When the export has exited, its index (written last) must list exactly the announced
//! parts, and its size must be what the engine took in. An `hb` that does not stream (an
//! older one in an existing box rejects the flag; see [`ExportExit::Unsupported`]) hands
//! the untouched pipeline back, for the sequential path of [`super::parts_out`].

use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use box_proto::archive::chain_line::ChainSaid;
use box_proto::archive::parts::{INDEX_FILE, Part, PartIndex, part_name};

use super::checkpoint;
use crate::backup::save::{Pipeline, Sealed, read_index};
use crate::ui::progress::Phase;

/// How often the consumer wakes up while waiting for the next part, to notice a signal.
const TICK: Duration = Duration::from_millis(20);

/// What the producer of the export reports, in order: parts, then one exit.
pub enum ExportEvent {
    /// The export's chain line (box_proto::archive::chain_line), before any part.
    Chain(ChainSaid),
    /// A `part-ready` line, parsed.
    Ready(Part),
    /// A line that starts like an announcement but is not one.
    Malformed(String),
    Exited(ExportExit),
}

/// How the export ended.
pub enum ExportExit {
    Done,
    /// The guest's `hb` does not know `--stream-parts` (a usage error before it did
    /// anything): run the export the old way.
    Unsupported,
    Failed(anyhow::Error),
}

/// Where announced parts are, and how they come to the host.
pub trait PartSource {
    /// Copies the export's file `name` (a part or the index) to `local`.
    fn fetch(&mut self, name: &str, local: &Path) -> Result<()>;
    /// Removes part `name` from the export's directory: the export may go on.
    fn release(&mut self, name: &str) -> Result<()>;
}

/// Where each part goes once it is on the host (a 0600 file in the host scratch dir, its
/// size checked; deleted after the call, whatever it returns).
pub trait PartSink {
    /// Takes the part at `local`; `part` is what the export announced or listed for it,
    /// whose hash (in the algorithm it names) the sink must check.
    fn take_part(&mut self, local: &Path, part: &Part) -> Result<()>;

    /// What the export said it makes, before its first part (a save seals it into the
    /// backup's host facts; others need not care).
    fn chain_said(&mut self, _said: ChainSaid) -> Result<()> {
        Ok(())
    }

    /// Whether the sink shows the progress of what it takes itself (a save's encryption
    /// counts the same bytes, finer than a part at a time).
    fn shows_progress(&self) -> bool {
        false
    }
}

impl PartSink for Pipeline {
    fn take_part(&mut self, local: &Path, part: &Part) -> Result<()> {
        self.feed_part(local, Some(part))
    }

    fn chain_said(&mut self, said: ChainSaid) -> Result<()> {
        Pipeline::chain_said(self, said)
    }

    fn shows_progress(&self) -> bool {
        true
    }
}

/// The progress phase of parts going into `sink`: one display per phase, so none when the
/// sink shows its own.
pub fn parts_phase(sink: &impl PartSink, name: &str, total: Option<u64>) -> Phase {
    if sink.shows_progress() {
        Phase::hidden()
    } else {
        Phase::start(name, total)
    }
}

/// Where the consumer's time went (the stages overlap the export's own time).
#[derive(Debug, Default, Clone)]
pub struct Stages {
    pub parts: usize,
    pub bytes: u64,
    /// Waiting for the next announcement (the export is the slower side).
    pub waiting: Duration,
    pub copy: Duration,
    pub release: Duration,
    /// In the sink: encrypting (save), copying on into the new box (clone).
    pub encrypt: Duration,
}

impl Stages {
    pub fn summary(&self) -> String {
        format!(
            "{} part(s), {} bytes: waiting for parts {:.2}s, copy {:.2}s, release {:.2}s, encrypt {:.2}s",
            self.parts,
            self.bytes,
            self.waiting.as_secs_f64(),
            self.copy.as_secs_f64(),
            self.release.as_secs_f64(),
            self.encrypt.as_secs_f64()
        )
    }
}

/// The result of consuming an export's announcements into any sink.
pub enum Consumed<S> {
    /// Every announced part went into `sink`; `index` lists exactly them.
    All { sink: S, index: PartIndex },
    /// As [`Streamed::NotStreamed`]: nothing went into `sink`.
    NotStreamed { sink: S, exported: bool },
}

/// The result of consuming an export's announcements into the engine.
pub enum Streamed {
    Sealed {
        sealed: Sealed,
        index: PartIndex,
    },
    /// The export did not stream; nothing was fed. `exported`: it ran to the end the old
    /// way (its parts and index are in its directory), else it did not run at all.
    NotStreamed {
        pipeline: Pipeline,
        exported: bool,
    },
}

/// Consumes `events` into the engine, then seals: [`consume_announced`] with the engine as
/// the sink, its size checked against the index.
pub fn seal_announced(
    events: &Receiver<ExportEvent>,
    source: &mut dyn PartSource,
    host_dir: &Path,
    pipeline: Pipeline,
    cancel: Option<&AtomicUsize>,
    stages: &mut Stages,
) -> Result<Streamed> {
    match consume_announced(events, source, host_dir, pipeline, cancel, stages)? {
        Consumed::All { sink, index } => {
            let sealed = sink.finish()?;
            sealed.matches_index(&index)?;
            Ok(Streamed::Sealed { sealed, index })
        }
        Consumed::NotStreamed { sink, exported } => Ok(Streamed::NotStreamed {
            pipeline: sink,
            exported,
        }),
    }
}

/// Consumes `events` as the module documentation says, each part into `sink`.
pub fn consume_announced<S: PartSink>(
    events: &Receiver<ExportEvent>,
    source: &mut dyn PartSource,
    host_dir: &Path,
    mut sink: S,
    cancel: Option<&AtomicUsize>,
    stages: &mut Stages,
) -> Result<Consumed<S>> {
    let mut announced: Vec<Part> = Vec::new();
    let mut phase = parts_phase(&sink, "copying", None);
    let mut waiting_since = Instant::now();
    loop {
        checkpoint(cancel)?;
        let event = match events.recv_timeout(TICK) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => bail!("the export ended without a word"),
        };
        stages.waiting += waiting_since.elapsed();
        match event {
            ExportEvent::Chain(said) => sink.chain_said(said)?,
            ExportEvent::Ready(part) => {
                take_part(&part, announced.len(), source, host_dir, &mut sink, stages)?;
                phase.add(part.size);
                announced.push(part);
            }
            ExportEvent::Malformed(line) => bail!(
                "hb export printed a line box cannot read: {}",
                line.chars().take(120).collect::<String>()
            ),
            ExportEvent::Exited(ExportExit::Done) if announced.is_empty() => {
                // An hb that took the flag but announced nothing: its parts are all
                // there, listed in its index.
                return Ok(Consumed::NotStreamed {
                    sink,
                    exported: true,
                });
            }
            ExportEvent::Exited(ExportExit::Done) => break,
            ExportEvent::Exited(ExportExit::Unsupported) if announced.is_empty() => {
                return Ok(Consumed::NotStreamed {
                    sink,
                    exported: false,
                });
            }
            ExportEvent::Exited(ExportExit::Unsupported) => {
                bail!("hb export announced parts, then refused --stream-parts")
            }
            ExportEvent::Exited(ExportExit::Failed(e)) => return Err(e),
        }
        waiting_since = Instant::now();
    }
    phase.finish();
    checkpoint(cancel)?;
    let index_path = host_dir.join(INDEX_FILE);
    let fetched = source
        .fetch(INDEX_FILE, &index_path)
        .context("cannot copy the part index out of the box");
    let index = fetched.and_then(|()| read_index(host_dir));
    let _ = std::fs::remove_file(&index_path);
    let index = index?;
    check_index_against(&index, &announced)?;
    Ok(Consumed::All { sink, index })
}

/// Steps 1-5 of the module documentation for part number `n`.
fn take_part(
    part: &Part,
    n: usize,
    source: &mut dyn PartSource,
    host_dir: &Path,
    sink: &mut impl PartSink,
    stages: &mut Stages,
) -> Result<()> {
    let expected = part_name(n);
    if part.name != expected {
        bail!(
            "hb export announced {} where {expected} was next; nothing was published, retry the save",
            part.name
        );
    }
    super::check_copyable(part)?;
    let local = host_dir.join(&part.name);
    let t = Instant::now();
    let fetched = source
        .fetch(&part.name, &local)
        .with_context(|| format!("cannot copy {} out of the box", part.name));
    stages.copy += t.elapsed();
    let arrived = fetched.and_then(|()| super::check_arrived(&local, part));
    if let Err(e) = arrived {
        let _ = std::fs::remove_file(&local);
        return Err(e);
    }
    // Free the guest's copy before the slow step, so the export goes on meanwhile.
    let t = Instant::now();
    let released = source
        .release(&part.name)
        .with_context(|| format!("cannot remove {} in the box", part.name));
    stages.release += t.elapsed();
    if let Err(e) = released {
        let _ = std::fs::remove_file(&local);
        return Err(e);
    }
    let t = Instant::now();
    let fed = sink.take_part(&local, part);
    let _ = std::fs::remove_file(&local);
    stages.encrypt += t.elapsed();
    fed?;
    stages.parts += 1;
    stages.bytes += part.size;
    Ok(())
}

/// The index must list exactly the announced parts, in order.
fn check_index_against(index: &PartIndex, announced: &[Part]) -> Result<()> {
    for (i, listed) in index.parts.iter().enumerate() {
        let Some(got) = announced.get(i) else {
            bail!(
                "the part index lists {} which hb export never announced ({} announced); nothing was published, retry the save",
                listed.name,
                announced.len()
            );
        };
        if got != listed {
            bail!(
                "{} was announced as {} bytes, {}, but the part index says {} bytes, {}; nothing was published, retry the save",
                listed.name,
                got.size,
                got.hash,
                listed.size,
                listed.hash
            );
        }
    }
    if announced.len() > index.parts.len() {
        bail!(
            "hb export announced {} part(s) but its part index lists {}; nothing was published, retry the save",
            announced.len(),
            index.parts.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use box_proto::archive::compress::Compression;
    use box_proto::archive::part_hash::PartHash;

    fn part(n: usize, size: u64, fill: u8) -> Part {
        Part {
            name: part_name(n),
            size,
            hash: PartHash::Xxh3_128([fill; 16]),
        }
    }

    fn index(parts: Vec<Part>) -> PartIndex {
        PartIndex {
            compression: Compression::Zstd,
            total_size: parts.iter().map(|p| p.size).sum(),
            total_sha256: None,
            parts,
        }
    }

    #[test]
    fn the_index_must_list_exactly_what_was_announced() {
        let a = vec![part(0, 10, 1), part(1, 4, 2)];
        check_index_against(&index(a.clone()), &a).unwrap();
        let err = |idx: Vec<Part>, ann: &[Part]| {
            check_index_against(&index(idx), ann)
                .unwrap_err()
                .to_string()
        };
        let e = err(vec![part(0, 10, 1), part(1, 4, 3)], &a);
        assert!(e.contains("part-000001 was announced as 4 bytes"), "{e}");
        let e = err(vec![part(0, 10, 1), part(1, 4, 2), part(2, 1, 1)], &a);
        assert!(
            e.contains("lists part-000002 which hb export never announced"),
            "{e}"
        );
        let e = err(vec![part(0, 10, 1)], &a);
        assert!(
            e.contains("announced 2 part(s) but its part index lists 1"),
            "{e}"
        );
    }
}
