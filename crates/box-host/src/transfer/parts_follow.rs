//! Load, overlapped: `hb import --follow` (box_proto::archive::follow) runs in a streaming
//! `machine exec` on one thread, and this thread does pass 2 meanwhile: each part the
//! engine cuts is copied into the guest, then its marker; after a link's last part, the
//! part index and the end marker. The guest's import takes each part as it arrives, says
//! so (`part-taken`), and removes it; this side copies a part only while fewer than
//! `pending` copied parts are not yet taken, so the guest holds at most that many (plus the
//! one being copied), whatever the size of the backup — not the whole compressed backup
//! beside the restored data, as the sequential path needs.
//!
//! What the import says is guest output, read through `box_proto::guest_output` (a line
//! that names no part fails the load; a claim to have taken a part box never copied does
//! too). It decides nothing but when the next part is copied.
//!
//! The engine hands out each part before the backup's integrity check at its end (pass 1
//! checked it whole; pass 2 checks it again): the import extracts into its private stage,
//! and swaps nothing in before the end marker of the last link, which is copied only once
//! the engine passed the whole backup again.
//!
//! A failure on either side stops the other: the import's exit ends the copying with the
//! import's own error (escaped), and a failure here (or a pending signal, through the
//! forwarder) kills the import's exec, which ends the guest command.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use box_proto::archive::follow::{END_MARKER, EndMarker, ready_marker};
use box_proto::archive::parts::Part;
use box_proto::guest_output::{self, ImportLine};
use secrecy::SecretString;

use super::checkpoint;
use super::guest_hb::Guest;
use super::parts_in::copy_index;
use super::parts_stream::{ABANDONED, exec_streaming, forward_signals};
use crate::backup::cleanup::Temp;
use crate::backup::load::{ValidatedBackup, write_parts};
use crate::lifecycle::guest::{self, HB_PATH};
use crate::smolvm::{Output, Smolvm};
use crate::ui::progress::Phase;

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
    pub fn summary(&self, pending: u16) -> String {
        format!(
            "copy in + import: {} part(s), {} bytes; the guest held at most {} part(s) (BOX_STREAM_PARTS={pending}); held back {:.2}s, copy {:.2}s",
            self.parts,
            self.bytes,
            self.held_most,
            self.held_back.as_secs_f64(),
            self.copy.as_secs_f64()
        )
    }
}

/// Runs `hb <import_args>` (which names `dirs` with `--follow`) while the parts of each of
/// `links` are cut and copied into its dir of `dirs` (each 0700 and empty), at most
/// `pending` of them not yet taken. Returns once the import succeeded.
#[allow(clippy::too_many_arguments)]
pub fn import_following(
    guest: &mut Guest<'_>,
    links: &[ValidatedBackup],
    dirs: &[String],
    import_args: &[&str],
    passphrase: &SecretString,
    host_dir: &Path,
    part_size: u64,
    pending: u16,
) -> Result<Followed> {
    let mut argv = vec![HB_PATH];
    argv.extend_from_slice(import_args);
    guest.transcript.line(&format!("$ {}", argv.join(" ")));
    let (smolvm, machine, signals) = (guest.smolvm, guest.machine, guest.cancel);
    let stop = AtomicUsize::new(0);
    let exec_done = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    let mut copying = Copying::new(&rx, pending, signals);
    let (copied, exec) = std::thread::scope(|s| {
        let exec = s.spawn(|| run_import(smolvm, machine, &argv, &stop, tx));
        let forwarder = s.spawn(|| forward_signals(signals, &stop, &exec_done));
        let copied = copy_links(
            &mut copying,
            &mut *guest,
            links,
            dirs,
            passphrase,
            host_dir,
            part_size,
        )
        .and_then(|()| copying.wait_for_exit());
        if copied.is_err() {
            // Kill the import (if still running) rather than wait for it.
            let _ = stop.compare_exchange(0, ABANDONED, Ordering::SeqCst, Ordering::SeqCst);
        }
        let exec = exec.join();
        exec_done.store(true, Ordering::SeqCst);
        let _ = forwarder.join();
        (copied, exec)
    });
    if let Ok(Some(out)) = &exec {
        guest.transcript.block("stdout", &out.stdout);
        guest.transcript.block("stderr", &out.stderr);
        guest.transcript.line(&format!("-> {}", guest::status(out)));
    }
    if exec.is_err() {
        return Err(anyhow!("the thread running hb import panicked"));
    }
    copied?;
    guest.transcript.line(&copying.done.summary(pending));
    Ok(copying.done)
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

/// Pass 2 of every link into its dir: parts and markers, then index and end marker.
fn copy_links(
    copying: &mut Copying<'_>,
    guest: &mut Guest<'_>,
    links: &[ValidatedBackup],
    dirs: &[String],
    passphrase: &SecretString,
    host_dir: &Path,
    part_size: u64,
) -> Result<()> {
    let total = links.iter().map(|l| l.plaintext_size).sum();
    let mut phase = Phase::start("copying in", Some(total));
    for (validated, dir) in links.iter().zip(dirs) {
        copying.link_parts.push((0, false));
        let smolvm = guest.smolvm;
        let machine = guest.machine;
        let index = write_parts(
            &validated.path,
            passphrase,
            &validated.sha256,
            part_size,
            host_dir,
            |path, part| {
                copying.wait_for_room()?;
                let held = copying.copied - copying.taken + 1;
                copying.done.held_most = copying.done.held_most.max(held);
                let t = Instant::now();
                let guest_path = format!("{dir}/{}", part.name);
                smolvm
                    .copy_in_cancellable(path, machine, &guest_path, copying.cancel)
                    .with_context(|| format!("cannot copy {} into the box", part.name))?;
                copy_marker(smolvm, machine, host_dir, dir, part)?;
                copying.done.copy += t.elapsed();
                copying.copied += 1;
                if let Some(link) = copying.link_parts.last_mut() {
                    link.0 += 1;
                }
                copying.done.parts += 1;
                copying.done.bytes += part.size;
                phase.add(part.size);
                Ok(())
            },
        )?;
        checkpoint(copying.cancel)?;
        copying.drain()?;
        copy_index(guest, &index, host_dir, dir)?;
        let end = EndMarker {
            parts: index.parts.len(),
            total: index.total_size,
        };
        copy_text(
            guest.smolvm,
            guest.machine,
            host_dir,
            &format!("{dir}/{END_MARKER}"),
            &end.render(),
        )
        .context("cannot copy the end marker into the box")?;
        if let Some(link) = copying.link_parts.last_mut() {
            link.1 = true;
        }
        // The import may have taken this link's last part before box knew the link ended.
        if copying.guest_link + 1 == copying.link_parts.len()
            && copying.guest_next == index.parts.len()
        {
            copying.guest_link += 1;
            copying.guest_next = 0;
        }
    }
    phase.finish();
    Ok(())
}

/// A part's marker: its announcement line, copied in only after the part itself.
fn copy_marker(
    smolvm: &Smolvm,
    machine: &str,
    host_dir: &Path,
    dir: &str,
    part: &Part,
) -> Result<()> {
    copy_text(
        smolvm,
        machine,
        host_dir,
        &format!("{dir}/{}", ready_marker(&part.name)),
        &format!("{}\n", part.render_ready()),
    )
    .with_context(|| format!("cannot copy the marker of {} into the box", part.name))
}

/// `text` copied into the guest at `guest_path` through a 0600 temp file in `host_dir`.
fn copy_text(
    smolvm: &Smolvm,
    machine: &str,
    host_dir: &Path,
    guest_path: &str,
    text: &str,
) -> Result<()> {
    let (temp, mut file) = Temp::create_file(host_dir, ".marker-")
        .with_context(|| format!("cannot write a marker in {}", host_dir.display()))?;
    file.write_all(text.as_bytes())
        .context("cannot write a marker")?;
    drop(file);
    smolvm.copy_in(temp.path(), machine, guest_path)?;
    Ok(())
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
