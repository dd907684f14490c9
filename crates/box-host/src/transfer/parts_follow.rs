//! An import that takes the parts while they arrive (box_proto::archive::follow): `hb
//! import --follow` runs in a streaming `machine exec` on one thread, and this thread feeds
//! it meanwhile through a [`Follower`]: each part is copied into the guest, then its
//! marker; after a link's last part, the part index and the end marker. The guest's import
//! takes each part as it arrives, says so (`part-taken`), and removes it; the follower
//! copies a part only while fewer than `pending` copied parts are not yet taken, so the
//! guest holds at most that many (plus the one being copied), whatever the size of the
//! data — not all of it compressed beside the restored data, as the sequential path needs.
//!
//! Two feeders share it: `box load` (pass 2 of the engine cuts each link of the backup into
//! parts) and `box clone` (the source box's streaming export, each part checked on the
//! host; the export is then paced by this hold-back too, as it keeps at most its own
//! `pending` parts not yet copied out).
//!
//! What the import says is guest output, read through `box_proto::guest_output` (a line
//! that names no part fails the run; a claim to have taken a part box never copied does
//! too). It decides nothing but when the next part is copied.
//!
//! The feeder may hand out parts before its own integrity check at its end (load's pass 2;
//! clone's export index): the import extracts into its private stage, and swaps nothing in
//! before the end marker of the last link, which the feeder gives only once it is done.
//!
//! A failure on either side stops the other: the import's exit ends the feeding with the
//! import's own error (escaped), and a failure of the feeder (or a pending signal, through
//! the forwarder) kills the import's exec, which ends the guest command.

use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::archive::follow::{END_MARKER, EndMarker, ready_marker};
use box_proto::archive::parts::{Part, PartIndex};
use box_proto::guest_output::{self, ImportLine};

use super::checkpoint;
use super::guest_hb::Guest;
use super::parts_in::{copy_index, copy_text};
use super::parts_stream::{beside_exec, exec_streaming};
use crate::lifecycle::guest::{self, HB_PATH};
use crate::smolvm::{Output, Smolvm};

/// How often the copying side wakes up while it holds back, to notice a signal.
const TICK: Duration = Duration::from_millis(20);

/// What the import's thread reports, in order: taken parts, then one exit.
enum ImportEvent {
    /// The import took part number `n` of the directory it is in.
    Taken(usize),
    /// A line that starts like a `part-taken` line and names no part, quoted.
    Malformed(String),
    /// The import ended: `Ok` when it succeeded.
    Exited(Result<()>),
}

/// How a followed import went.
#[derive(Debug, Default, Clone)]
pub struct Followed {
    pub parts: usize,
    pub bytes: u64,
    /// The most parts the guest held at once, counted by box: copied (or being copied)
    /// and not yet said taken.
    pub held_most: usize,
    /// Time spent holding back (the import is the slower side).
    pub held_back: Duration,
    /// Time spent in `machine cp` of parts and markers.
    pub copy: Duration,
}

impl Followed {
    /// The transcript's line of the overlapped `step` (`copy in + import`), `guest` the
    /// box that imported as the reader knows it.
    pub fn summary(&self, step: &str, guest: &str, pending: u16) -> String {
        format!(
            "{step}: {} part(s), {} bytes; {guest} held at most {} part(s) (BOX_STREAM_PARTS={pending}); held back {:.2}s, copy {:.2}s",
            self.parts,
            self.bytes,
            self.held_most,
            self.held_back.as_secs_f64(),
            self.copy.as_secs_f64()
        )
    }
}

/// Runs `hb <import_args>` (which names `dirs` with `--follow`; each dir 0700 and empty)
/// while `feed` hands each link's parts to the [`Follower`], link after link in the order
/// of `dirs`, at most `pending` of them not yet taken. Returns what `feed` returned once
/// the import succeeded.
pub fn follow_import<T>(
    guest: &mut Guest<'_>,
    dirs: &[String],
    import_args: &[&str],
    host_dir: &Path,
    pending: u16,
    feed: impl FnOnce(&mut Follower<'_, '_, '_>) -> Result<T>,
) -> Result<(T, Followed)> {
    let mut argv = vec![HB_PATH];
    argv.extend_from_slice(import_args);
    guest.transcript.line(&format!("$ {}", argv.join(" ")));
    let (smolvm, machine, signals) = (guest.smolvm, guest.machine, guest.cancel);
    let (tx, rx) = mpsc::channel();
    let (fed, exec) = beside_exec(
        signals,
        |stop| run_import(smolvm, machine, &argv, stop, tx),
        || {
            let mut follower = Follower {
                guest: &mut *guest,
                dirs,
                host_dir,
                copying: Copying::new(&rx, pending, signals),
            };
            let value = feed(&mut follower)?;
            follower.finish()?;
            Ok((value, follower.copying.done.clone()))
        },
        "hb import",
    )?;
    if let Some(out) = &exec {
        guest.record(out);
    }
    fed
}

/// The feeding side of [`follow_import`]: parts in, link after link.
pub struct Follower<'f, 'g, 'a> {
    guest: &'f mut Guest<'a>,
    dirs: &'f [String],
    host_dir: &'f Path,
    copying: Copying<'g>,
}

impl Follower<'_, '_, '_> {
    /// Copies the part at `local` (`part` says its name, size and hash, which the import
    /// checks) into the current link's dir, then its marker, once the guest has room.
    pub fn part(&mut self, local: &Path, part: &Part) -> Result<()> {
        let dir = self.current_dir()?;
        let copying = &mut self.copying;
        copying.wait_for_room()?;
        let held = copying.copied - copying.taken + 1;
        copying.done.held_most = copying.done.held_most.max(held);
        let (smolvm, machine) = (self.guest.smolvm, self.guest.machine);
        let t = Instant::now();
        smolvm
            .copy_in_cancellable(
                local,
                machine,
                &format!("{dir}/{}", part.name),
                copying.cancel,
            )
            .with_context(|| format!("cannot copy {} into '{machine}'", part.name))?;
        copy_text(
            smolvm,
            machine,
            self.host_dir,
            &format!("{dir}/{}", ready_marker(&part.name)),
            &format!("{}\n", part.render_ready()),
        )
        .with_context(|| format!("cannot copy the marker of {} into '{machine}'", part.name))?;
        copying.done.copy += t.elapsed();
        copying.copied += 1;
        if let Some(link) = copying.link_parts.last_mut() {
            link.0 += 1;
        }
        copying.done.parts += 1;
        copying.done.bytes += part.size;
        Ok(())
    }

    /// The current link's parts are all in: its `index` (which must list them, as the
    /// import checks), then its end marker.
    pub fn end(&mut self, index: &PartIndex) -> Result<()> {
        let dir = self.current_dir()?;
        checkpoint(self.copying.cancel)?;
        self.copying.drain()?;
        copy_index(self.guest, index, self.host_dir, &dir)?;
        let end = EndMarker {
            parts: index.parts.len(),
            total: index.total_size,
        };
        copy_text(
            self.guest.smolvm,
            self.guest.machine,
            self.host_dir,
            &format!("{dir}/{END_MARKER}"),
            &end.render(),
        )
        .with_context(|| format!("cannot copy the end marker into '{}'", self.guest.machine))?;
        self.copying.link_ended();
        Ok(())
    }

    /// The dir of the link being fed, opening the next one after an end.
    fn current_dir(&mut self) -> Result<String> {
        let links = &mut self.copying.link_parts;
        if links.last().is_none_or(|&(_, ended)| ended) {
            links.push((0, false));
        }
        self.dirs.get(links.len() - 1).cloned().ok_or_else(|| {
            anyhow!(
                "more links than the {} dir(s) of the import",
                self.dirs.len()
            )
        })
    }

    /// After the feeder: every link ended, and the import's end, which must be a success.
    fn finish(&mut self) -> Result<()> {
        let ended = self.copying.link_parts.iter().filter(|l| l.1).count();
        if ended != self.dirs.len() {
            bail!(
                "box gave the import {ended} of its {} link(s)",
                self.dirs.len()
            );
        }
        self.copying.wait_for_exit()
    }
}

/// The copying side's view of the import.
struct Copying<'e> {
    events: &'e Receiver<ImportEvent>,
    pending: usize,
    cancel: Option<&'e AtomicUsize>,
    /// Parts copied in, over all links.
    copied: usize,
    /// Parts the import said it took, over all links.
    taken: usize,
    /// Where the import is: the link, and the number of the next part it takes there.
    guest_link: usize,
    guest_next: usize,
    /// Parts copied into each link's dir so far (final once its end marker is copied).
    link_parts: Vec<(usize, bool)>,
    /// The import's end, once it came.
    exited: Option<Result<()>>,
    done: Followed,
}

impl<'e> Copying<'e> {
    fn new(
        events: &'e Receiver<ImportEvent>,
        pending: u16,
        cancel: Option<&'e AtomicUsize>,
    ) -> Self {
        Copying {
            events,
            pending: usize::from(pending.max(1)),
            cancel,
            copied: 0,
            taken: 0,
            guest_link: 0,
            guest_next: 0,
            link_parts: Vec::new(),
            exited: None,
            done: Followed::default(),
        }
    }

    /// One event of the import's thread.
    fn on_event(&mut self, event: ImportEvent) -> Result<()> {
        match event {
            ImportEvent::Taken(n) => self.taken_part(n),
            ImportEvent::Malformed(line) => {
                bail!("hb import printed a line box cannot read: {line}")
            }
            ImportEvent::Exited(how) => {
                self.exited = Some(how);
                Ok(())
            }
        }
    }

    /// The import took part `n` of the link it is in: it must be the next one box copied
    /// there.
    fn taken_part(&mut self, n: usize) -> Result<()> {
        let Some(&(copied, ended)) = self.link_parts.get(self.guest_link) else {
            bail!("hb import said it took part {n} of a link box has not copied");
        };
        if n != self.guest_next || n >= copied {
            bail!(
                "hb import said it took part {n} of link {} where box had copied {copied} and part {} was next",
                self.guest_link + 1,
                self.guest_next
            );
        }
        self.guest_next += 1;
        self.taken += 1;
        if ended && self.guest_next == copied {
            self.guest_link += 1;
            self.guest_next = 0;
        }
        Ok(())
    }

    /// The import's events so far, without waiting; an import that ended early (failed)
    /// stops the copying with its own error.
    fn drain(&mut self) -> Result<()> {
        while let Ok(event) = self.events.try_recv() {
            self.on_event(event)?;
        }
        match self.exited.take() {
            None => Ok(()),
            Some(Err(e)) => Err(e),
            Some(Ok(())) => bail!("hb import ended before box had copied all the parts"),
        }
    }

    /// Waits until fewer than `pending` copied parts are not yet taken.
    fn wait_for_room(&mut self) -> Result<()> {
        let since = Instant::now();
        loop {
            checkpoint(self.cancel)?;
            self.drain()?;
            if self.copied - self.taken < self.pending {
                self.done.held_back += since.elapsed();
                return Ok(());
            }
            match self.events.recv_timeout(TICK) {
                Ok(event) => self.on_event(event)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => bail!("hb import ended without a word"),
            }
        }
    }

    /// The link being copied has ended (its end marker is in). The import may have taken
    /// its last part before box knew the link ended: then it is in the next one.
    fn link_ended(&mut self) {
        let Some(link) = self.link_parts.last_mut() else {
            return;
        };
        link.1 = true;
        let copied = link.0;
        if self.guest_link + 1 == self.link_parts.len() && self.guest_next == copied {
            self.guest_link += 1;
            self.guest_next = 0;
        }
    }

    /// After the last end marker: the import's end, which must be a success.
    fn wait_for_exit(&mut self) -> Result<()> {
        loop {
            checkpoint(self.cancel)?;
            if let Some(how) = self.exited.take() {
                return how;
            }
            match self.events.recv_timeout(TICK) {
                Ok(event) => self.on_event(event)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => bail!("hb import ended without a word"),
            }
        }
    }
}

/// The import's thread: a streaming exec whose `part-taken` lines go to the copying side
/// as they arrive, then how it ended. Returns the call's output for the transcript.
fn run_import(
    smolvm: &Smolvm,
    machine: &str,
    argv: &[&str],
    stop: &AtomicUsize,
    tx: Sender<ImportEvent>,
) -> Option<Output> {
    let out =
        exec_streaming(
            smolvm,
            machine,
            argv,
            stop,
            &tx,
            |line| match guest_output::import_line(line) {
                ImportLine::Taken(n) => Some(ImportEvent::Taken(n)),
                ImportLine::Malformed(quoted) => Some(ImportEvent::Malformed(quoted)),
                ImportLine::Other => None,
            },
        );
    let exit = match &out {
        Ok(o) if o.success() => Ok(()),
        Ok(o) => Err(anyhow!(
            "`hb import` in box '{machine}' failed ({}){}",
            guest::status(o),
            guest::last_lines(&o.stderr, &o.stdout)
        )),
        Err(e) => Err(anyhow!("hb import in box '{machine}': {e}")),
    };
    let _ = tx.send(ImportEvent::Exited(exit));
    out.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copying(rx: &Receiver<ImportEvent>) -> Copying<'_> {
        Copying::new(rx, 2, None)
    }

    #[test]
    fn the_import_may_only_take_the_next_part_box_copied() {
        let (_tx, rx) = mpsc::channel();
        let mut c = copying(&rx);
        // Link 1: two parts copied, the link ended; link 2: one part so far.
        c.link_parts = vec![(2, true), (1, false)];
        c.copied = 3;
        c.taken_part(0).unwrap();
        c.taken_part(1).unwrap();
        assert_eq!((c.guest_link, c.guest_next, c.taken), (1, 0, 2));
        c.taken_part(0).unwrap();
        // A claim to have taken a part box never copied, or one out of order: the guest
        // is not believed.
        let e = c.taken_part(1).unwrap_err().to_string();
        assert!(
            e.contains("took part 1 of link 2 where box had copied 1"),
            "{e}"
        );
        let mut c = copying(&rx);
        c.link_parts = vec![(3, false)];
        c.copied = 3;
        assert!(c.taken_part(1).is_err());
        assert_eq!(c.taken, 0);
    }

    #[test]
    fn a_link_whose_parts_were_all_taken_before_its_end_moves_the_import_on() {
        let (_tx, rx) = mpsc::channel();
        let mut c = copying(&rx);
        c.link_parts = vec![(2, false)];
        c.copied = 2;
        c.taken_part(0).unwrap();
        c.taken_part(1).unwrap();
        // Box did not know yet that link 1 ended: the import is still in it.
        assert_eq!((c.guest_link, c.guest_next), (0, 2));
        c.link_ended();
        assert_eq!((c.guest_link, c.guest_next), (1, 0));
        // The next link's first part is the one the import may take next.
        c.link_parts.push((1, false));
        c.copied = 3;
        c.taken_part(0).unwrap();
        // A link ended with a part not yet taken: the import stays in it.
        let mut c = copying(&rx);
        c.link_parts = vec![(2, false)];
        c.copied = 2;
        c.taken_part(0).unwrap();
        c.link_ended();
        assert_eq!((c.guest_link, c.guest_next), (0, 1));
        c.taken_part(1).unwrap();
        assert_eq!((c.guest_link, c.guest_next), (1, 0));
    }

    #[test]
    fn an_import_that_ends_before_the_parts_do_stops_the_copying() {
        let (tx, rx) = mpsc::channel();
        let mut c = copying(&rx);
        c.link_parts = vec![(1, false)];
        c.copied = 1;
        tx.send(ImportEvent::Exited(Err(anyhow!(
            "`hb import` failed: no room"
        ))))
        .unwrap();
        let e = c.drain().unwrap_err().to_string();
        assert!(e.contains("no room"), "{e}");
        tx.send(ImportEvent::Exited(Ok(()))).unwrap();
        let e = c.drain().unwrap_err().to_string();
        assert!(
            e.contains("ended before box had copied all the parts"),
            "{e}"
        );
        tx.send(ImportEvent::Malformed("part-taken \\x1b[2J".into()))
            .unwrap();
        let e = c.drain().unwrap_err().to_string();
        assert!(e.contains("cannot read: part-taken \\x1b[2J"), "{e}");
    }
}
