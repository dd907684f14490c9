//! `box save`'s (and `box clone`'s) export, overlapped through smolvm: `hb export --stream-parts N`
//! runs in a streaming `machine exec` on one thread, its `part-ready` lines become
//! [`ExportEvent`]s, and this thread consumes them ([`super::announced`]): each part is
//! copied out with `machine cp`, removed in the guest with an `rm` exec (which lets the
//! export go on: it keeps at most N announced parts), and encrypted.
//!
//! A pending signal kills the export's exec (and with it the guest command: smolvm's agent
//! kills what a vanished client ran) and the part copy in flight; so does a failure on this
//! side. The caller's cleanup then removes the guest scratch, host temporaries, and resumes.
//!
//! Box asks for XXH3-128 part hashes (`--part-hash xxh3-128`: a sixth of SHA-256's CPU,
//! twice per byte; box_proto::archive::part_hash says why it is enough). An `hb` that does
//! not know `--part-hash` (an older one in a box created before) rejects it with clap's
//! usage error, exit 2, before touching anything: the export runs again streaming with
//! SHA-256. One that does not know `--stream-parts` (clap names the first unknown flag,
//! and that one comes first) rejects that the same way: the export then runs again the old
//! way and [`super::parts_out`] copies its parts afterwards.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use anyhow::{Result, anyhow};
use box_proto::archive::chain_line::{self, ChainSaid};
use box_proto::archive::part_hash::PartHashAlgo;
use box_proto::archive::parts::PartIndex;
use box_proto::guest_output::{self, ExportLine};

use super::announced::{self, Consumed, ExportEvent, ExportExit, PartSink, PartSource, Stages};
use super::guest_hb::{Guest, timeouts};
use super::parts_out;
use crate::lifecycle::guest::{self, HB_PATH};
use crate::smolvm::{ExecOpts, Output, Smolvm, SmolvmError, Stream};

/// The flag an `hb` that streams its parts knows.
pub const STREAM_FLAG: &str = "--stream-parts";
/// The flag an `hb` that hashes its parts with XXH3-128 when asked knows.
pub const PART_HASH_FLAG: &str = "--part-hash";
/// The flag an `hb` that keeps large files in blocks knows (box_proto::archive::blocks).
pub const BLOCKS_FLAG: &str = "--block-files-above";

/// How often the signal forwarder looks.
const TICK: Duration = Duration::from_millis(20);
/// What the consumer stores in the export's stop flag when it gives up on its own.
const ABANDONED: usize = usize::MAX;

/// An export whose every part went into a sink, and how it went.
pub struct ExportedInto<S> {
    pub sink: S,
    pub index: PartIndex,
    /// `None`: the sequential path ran (an `hb` that does not stream, or streaming off).
    pub stages: Option<Stages>,
    /// The export's own wall time (the exec call).
    pub export_wall: Duration,
}

/// Exports `/data` into `scratch` in parts of `part_size`, each part copied out and handed
/// to `sink` (then removed on both sides); `pending`: how many announced parts the guest may
/// hold (`None`: the sequential path); `block_files_above`: files this size or larger in
/// blocks (`--block-files-above`, a save's; an `hb` that does not know it saves them whole).
#[allow(clippy::too_many_arguments)]
pub fn export_into<S: PartSink>(
    guest: &mut Guest<'_>,
    scratch: &str,
    part_size: u64,
    pending: Option<u16>,
    extra: &[&str],
    block_files_above: Option<u64>,
    host_dir: &Path,
    sink: S,
) -> Result<ExportedInto<S>> {
    let size_arg = part_size.to_string();
    let mut plain = vec!["export", "--out", scratch, "--part-size", &size_arg];
    // `--listed-incremental …` for a save in a chain.
    plain.extend_from_slice(extra);
    let Some(pending) = pending else {
        return sequential(guest, &plain, scratch, host_dir, sink);
    };
    let pending_arg = pending.to_string();
    let stream = vec![STREAM_FLAG, &pending_arg];
    let hashed = vec![
        STREAM_FLAG,
        &pending_arg,
        PART_HASH_FLAG,
        PartHashAlgo::Xxh3_128.as_str(),
    ];
    let blocks_arg = block_files_above.map(|b| b.to_string());
    // Newest first: each flag came with a newer hb than the ones after it, so an hb that
    // refuses one is tried with the next, older set.
    let mut attempts = Vec::new();
    if let Some(bytes) = &blocks_arg {
        attempts.push([&hashed[..], &[BLOCKS_FLAG, bytes.as_str()]].concat());
    }
    attempts.push(hashed);
    attempts.push(stream);
    let mut sink = sink;
    let mut next = 0;
    while let Some(flags) = attempts.get(next) {
        let mut argv = vec![HB_PATH];
        argv.extend_from_slice(&plain);
        argv.extend_from_slice(flags);
        match streamed(guest, &argv, scratch, host_dir, sink)? {
            Streamed::Exported(exported) => return Ok(exported),
            Streamed::Refused {
                sink: untouched,
                flag,
            } => {
                sink = untouched;
                match flag {
                    STREAM_FLAG => {
                        guest.transcript.line(&format!(
                            "this box's hb does not know {STREAM_FLAG}: exporting first, then copying"
                        ));
                        break;
                    }
                    BLOCKS_FLAG => {
                        crate::ui::say(
                            "this box's hb saves large files whole, not in blocks (box repair updates it)",
                        );
                        next += 1;
                    }
                    _ => {
                        guest.transcript.line(&format!(
                            "this box's hb does not know {flag}: streaming with SHA-256 part hashes"
                        ));
                        next = attempts.len() - 1;
                    }
                }
            }
        }
    }
    sequential(guest, &plain, scratch, host_dir, sink)
}

/// The flag an older `hb` refused, from clap's usage error ("unexpected argument
/// '--block-files-above' found", or an invalid value of '--part-hash').
fn refused_flag(stderr: &str) -> Option<&'static str> {
    [STREAM_FLAG, BLOCKS_FLAG, PART_HASH_FLAG]
        .into_iter()
        .find(|flag| stderr.contains(&format!("unexpected argument '{flag}")))
        .or_else(|| stderr.contains(PART_HASH_FLAG).then_some(PART_HASH_FLAG))
}

/// How one streaming export went.
enum Streamed<S> {
    Exported(ExportedInto<S>),
    /// The guest's `hb` refused `flag` before it did anything: the sink, untouched.
    Refused {
        sink: S,
        flag: &'static str,
    },
}

/// One streaming export with `argv`.
fn streamed<S: PartSink>(
    guest: &mut Guest<'_>,
    argv: &[&str],
    scratch: &str,
    host_dir: &Path,
    sink: S,
) -> Result<Streamed<S>> {
    guest.transcript.line(&format!("$ {}", argv.join(" ")));

    let (smolvm, machine, signals) = (guest.smolvm, guest.machine, guest.cancel);
    let mut stages = Stages::default();
    let (tx, rx) = mpsc::channel();
    let (consumed, exec) = beside_exec(
        signals,
        |stop| run_export(smolvm, machine, argv, stop, tx),
        || {
            let mut source = GuestParts {
                guest: &mut *guest,
                dir: scratch,
            };
            announced::consume_announced(&rx, &mut source, host_dir, sink, signals, &mut stages)
        },
        "hb export",
    )?;
    let export_wall = match &exec {
        Some(out) => {
            guest.record(out);
            out.elapsed
        }
        None => Duration::ZERO,
    };
    match consumed? {
        Consumed::All { sink, index } => Ok(Streamed::Exported(ExportedInto {
            sink,
            index,
            stages: Some(stages),
            export_wall,
        })),
        Consumed::NotStreamed {
            mut sink,
            exported: true,
        } => {
            let index = parts_out::copy_out(guest, scratch, host_dir, &mut sink, signals)?;
            Ok(Streamed::Exported(ExportedInto {
                sink,
                index,
                stages: None,
                export_wall,
            }))
        }
        Consumed::NotStreamed {
            sink,
            exported: false,
        } => {
            // clap names the first flag it does not know.
            let flag = exec.as_ref().and_then(|out| refused_flag(&out.stderr));
            Ok(Streamed::Refused {
                sink,
                flag: flag.unwrap_or(PART_HASH_FLAG),
            })
        }
    }
}

/// Today's path for an `hb` that does not stream: export to the end, then copy.
fn sequential<S: PartSink>(
    guest: &mut Guest<'_>,
    args: &[&str],
    scratch: &str,
    host_dir: &Path,
    mut sink: S,
) -> Result<ExportedInto<S>> {
    let out = guest.hb(args, timeouts::BULK, true)?;
    super::checkpoint(guest.cancel)?;
    for said in chain_lines(&out.stdout)? {
        sink.chain_said(said)?;
    }
    let cancel = guest.cancel;
    let index = parts_out::copy_out(guest, scratch, host_dir, &mut sink, cancel)?;
    Ok(ExportedInto {
        sink,
        index,
        stages: None,
        export_wall: out.elapsed,
    })
}

/// The chain lines of an export's whole output (the sequential path reads it at the end).
fn chain_lines(stdout: &str) -> Result<Vec<ChainSaid>> {
    stdout
        .lines()
        .filter_map(chain_line::parse)
        .map(|said| said.map_err(|e| anyhow!("{e}")))
        .collect()
}

/// The export's thread: a streaming exec whose `part-ready` lines go to the consumer as
/// they arrive, then how it ended. Returns the call's output for the transcript.
fn run_export(
    smolvm: &Smolvm,
    machine: &str,
    argv: &[&str],
    stop: &AtomicUsize,
    tx: Sender<ExportEvent>,
) -> Option<Output> {
    let mut announced = 0usize;
    let out = exec_streaming(smolvm, machine, argv, stop, &tx, |line| {
        let event = match guest_output::export_line(line) {
            ExportLine::Ready(part) => ExportEvent::Ready(part),
            ExportLine::Chain(said) => ExportEvent::Chain(said),
            ExportLine::Malformed(quoted) => ExportEvent::Malformed(quoted),
            ExportLine::Other => return None,
        };
        announced += 1;
        Some(event)
    });
    let exit = match &out {
        Ok(o) if o.success() => ExportExit::Done,
        // clap's "error: unexpected argument '--stream-parts' found" (or of the value
        // of '--part-hash'), exit 2: an older hb.
        Ok(o) if o.code == Some(2) && announced == 0 && refused_flag(&o.stderr).is_some() => {
            ExportExit::Unsupported
        }
        Ok(o) => ExportExit::Failed(anyhow!(
            "`hb export` in box '{machine}' failed ({}){}",
            guest::status(o),
            guest::last_lines(&o.stderr, &o.stdout)
        )),
        Err(e) => ExportExit::Failed(anyhow!("hb export in box '{machine}': {e}")),
    };
    let _ = tx.send(ExportEvent::Exited(exit));
    out.ok()
}

/// `argv` in a streaming exec (the guest's long `hb` verb of a transfer), each stdout line
/// that `parse` reads as an event sent to `tx` as it arrives; `stop` ends the call (and
/// with it the guest command).
pub(super) fn exec_streaming<E>(
    smolvm: &Smolvm,
    machine: &str,
    argv: &[&str],
    stop: &AtomicUsize,
    tx: &Sender<E>,
    mut parse: impl FnMut(&str) -> Option<E>,
) -> Result<Output, SmolvmError> {
    let mut on_line = |stream: Stream, line: &str| {
        if stream != Stream::Stdout {
            return;
        }
        if let Some(event) = parse(line) {
            // A consumer that gave up has dropped its end; the stop flag ends this call.
            let _ = tx.send(event);
        }
    };
    smolvm.exec(
        machine,
        argv,
        ExecOpts {
            timeout: Some(timeouts::BULK),
            on_line: Some(&mut on_line),
            cancel: Some(stop),
            env: Vec::new(),
        },
    )
}

/// Copies a pending signal into a streaming exec's stop flag until the exec has ended (the
/// consumer may be busy in a copy or an encryption when it arrives).
/// Runs `exec` (a streaming guest command that ends when its stop flag is set) on a thread
/// while `consume` takes what it produces on this one, with pending signals forwarded into
/// the stop flag; a consumer that fails kills the command rather than waiting for it.
/// Returns what `consume` returned and the command's output (`None`: it ended without one).
/// `what` names the command should its thread panic.
pub(super) fn beside_exec<T>(
    signals: Option<&AtomicUsize>,
    exec: impl FnOnce(&AtomicUsize) -> Option<Output> + Send,
    consume: impl FnOnce() -> Result<T>,
    what: &str,
) -> Result<(Result<T>, Option<Output>)> {
    let stop = AtomicUsize::new(0);
    let exec_done = AtomicBool::new(false);
    let (consumed, exec) = std::thread::scope(|s| {
        let exec = s.spawn(|| exec(&stop));
        let forwarder = s.spawn(|| forward_signals(signals, &stop, &exec_done));
        let consumed = consume();
        if consumed.is_err() {
            let _ = stop.compare_exchange(0, ABANDONED, Ordering::SeqCst, Ordering::SeqCst);
        }
        let exec = exec.join();
        exec_done.store(true, Ordering::SeqCst);
        let _ = forwarder.join();
        (consumed, exec)
    });
    let exec = exec.map_err(|_| anyhow!("the thread running {what} panicked"))?;
    Ok((consumed, exec))
}

fn forward_signals(signals: Option<&AtomicUsize>, stop: &AtomicUsize, done: &AtomicBool) {
    while !done.load(Ordering::SeqCst) {
        if let Some(sig) = signals
            .map(|f| f.load(Ordering::SeqCst))
            .filter(|s| *s != 0)
        {
            let _ = stop.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        }
        std::thread::sleep(TICK);
    }
}

/// Parts in the guest scratch dir: `machine cp` out, `rm -f` in the guest.
struct GuestParts<'g, 'a> {
    guest: &'g mut Guest<'a>,
    dir: &'g str,
}

impl PartSource for GuestParts<'_, '_> {
    fn fetch(&mut self, name: &str, local: &Path) -> Result<()> {
        let g = &*self.guest;
        g.smolvm.copy_out_cancellable(
            g.machine,
            &format!("{}/{name}", self.dir),
            local,
            g.cancel,
        )?;
        Ok(())
    }

    fn release(&mut self, name: &str) -> Result<()> {
        let path = format!("{}/{name}", self.dir);
        self.guest.exec_ok(
            "removing a copied part",
            &["rm", "-f", "--", &path],
            timeouts::SHORT,
            false,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_hb_is_known_by_the_flag_clap_names() {
        let unexpected = |flag: &str| {
            format!(
                "error: unexpected argument '{flag}' found\n\nUsage: hb export [OPTIONS] --out <OUT>\n"
            )
        };
        assert_eq!(
            refused_flag(&unexpected("--block-files-above")),
            Some(BLOCKS_FLAG)
        );
        assert_eq!(
            refused_flag(&unexpected("--stream-parts")),
            Some(STREAM_FLAG)
        );
        assert_eq!(
            refused_flag(&unexpected("--part-hash")),
            Some(PART_HASH_FLAG)
        );
        assert_eq!(
            refused_flag("error: invalid value 'xxh3-128' for '--part-hash <PART_HASH>'\n"),
            Some(PART_HASH_FLAG)
        );
        // Any other failure is the export's own, never taken for an older hb.
        assert_eq!(refused_flag("error: No space left on device\n"), None);
    }
}
