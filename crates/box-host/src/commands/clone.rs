//! `box clone <source> <name>`: a new box whose `/data` is the source's at this moment — a
//! branch of the agent's state (logins, history, workspace), with its own VM, Executor
//! token and port.
//!
//! Both box locks → the name free (before any smolvm call) → the source running → the new
//! box created and provisioned as `box load` creates its box (from a base when there is
//! one) → the new box paused, its scratch dir made → the source quiesced as `box save`
//! quiesces it → the new box's `hb import --follow --forget-executor-token` started, then
//! `hb export` in the source: each part copied out into the host scratch dir (one at a
//! time, 0600 in a 0700 dir), checked, copied into the new box with its marker and deleted,
//! while the import takes the parts in (at most `BOX_STREAM_PARTS` copied and not yet
//! taken, which paces the export in turn; transfer::parts_follow) → the source's scratch
//! removed and the source resumed as soon as its data is out → the index and the end
//! marker → the import ends → the rest of `box load` (guest assets, resume, up, wiring,
//! doctor). With `BOX_STREAM_PARTS=0` every part lands in the new box first, then `hb
//! import` runs.
//!
//! No encryption: nothing reaches a backup file, and the host never holds more than one
//! part. No passphrase is asked. On a failure or HUP/INT/TERM the source is cleaned up as a
//! save is (its scratch first, then resumed) and the new box is deleted as a failed load's
//! is (or kept with `--keep-on-failure`). A failure on either side stops the other (the
//! export's and the import's execs are killed), and the error names the box it came from.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use box_proto::archive::parts::{Part, PartIndex, hash_part};
use box_proto::{BoxName, HermesService, guest_output};
use sha2::{Digest, Sha256};

use super::Context;
use super::load::{Filled, LoadRun};
use super::new;
use super::save::SaveRun;
use crate::backup::cleanup;
use crate::lifecycle::boxes;
use crate::lifecycle::signals::DeferredSignals;
use crate::state::{LockKey, Registry, locks};
use crate::transfer::announced::PartSink;
use crate::transfer::{self, host_dir, parts_follow, parts_in};
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::CloneArgs) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.source)?;
    let name = BoxName::parse(&args.name)?;
    crate::state::reserved::refuse_reserved(&name)?;
    if name == record.name {
        bail!("a clone needs a name of its own: box clone {name} <new-name>");
    }
    cleanup::install();
    cleanup::set_deferred(true);
    let operation = format!("box clone {} {name}", record.name);
    let _source_lock = boxes::lock(ctx, &record, &operation)?;
    let _lock = locks::try_acquire(&ctx.state, LockKey::Box(name.clone()), &operation)?;
    if let Some(taken) = Registry::new(&ctx.state).get(&name)? {
        let refusal = format!(
            "box '{name}' already exists; clone into another name: box clone {} <name>",
            record.name
        );
        return Err(boxes::name_taken(&taken, refusal));
    }
    let part_size = transfer::part_size()?;
    let pending = transfer::stream_pending()?;
    let started = Instant::now();
    let mut source = SaveRun::new(ctx, record, DeferredSignals::install()?, "clone")?;
    let source_name = source.record.name.clone();
    source.check_running()?;

    ui::say(format!(
        "Creating and provisioning '{name}' to clone '{source_name}' into"
    ));
    // A clone keeps its source's policy and API key bindings, the user's flags on top (the
    // keys themselves come from this shell at each start; the clone gets placeholders of
    // its own).
    let carried = crate::lifecycle::containment::settle(crate::policy::carried::for_clone(
        &ctx.config.env,
        &source_name,
        source.record.containment.as_ref(),
        &args.making.carry_flags(false),
    )?);
    let provisioned = match new::create_and_provision(
        ctx,
        &name,
        "clone",
        args.making.keep_on_failure,
        args.making.fresh,
        carried,
    ) {
        Ok(p) => p,
        Err(code) => {
            ui::error(format!(
                "creating '{name}' failed; '{source_name}' was not touched"
            ));
            return Ok(code);
        }
    };
    let mut target = LoadRun {
        ctx,
        verb: "clone",
        name,
        box_: provisioned,
        signals: DeferredSignals::install()?,
        guest_dir: None,
        keep_on_failure: args.making.keep_on_failure,
        own_token: true,
    };
    let restored = target.restore_with(|target, scratch| {
        let copied = copy_across(&mut source, target, scratch, part_size, pending);
        // The source comes back as soon as its data is out, whatever happened.
        source.cleanup();
        copied
    });
    // Already done on the way unless `restore_with` failed before `fill` ran.
    source.cleanup();
    if let Some(e) = source.take_resume_error() {
        ui::error(format!("box '{source_name}' did not resume: {e:#}"));
        ui::warn(format!(
            "Executor may stay paused; try: box stop {source_name} && box start {source_name}"
        ));
    }
    match restored {
        Ok(()) => {
            target.complete("cloned")?;
            warn_if_two_gateways(&target, &source_name);
            println!(
                "Cloned '{source_name}' into '{}' in {:.1} s. Enter with: box enter {}",
                target.name,
                started.elapsed().as_secs_f64(),
                target.name
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            source
                .transcript
                .line(&format!("clone into {} failed: {e:#}", target.name));
            Ok(target.fail(&e))
        }
    }
}

/// A clone of a box whose Hermes gateway is enabled runs one too, with the same messaging
/// identity (the bot tokens in `~/.hermes`): two gateways polling one bot conflict, so say
/// so and how to stop one. What the clone's `hb status` says is guest output, read with
/// guest_output's limits; a clone whose status cannot be read is said to be unknown.
fn warn_if_two_gateways(target: &LoadRun<'_>, source: &BoxName) {
    let status = crate::lifecycle::guest::hb(
        &target.box_.smolvm,
        &target.box_.machine,
        &["status", "--json"],
        std::time::Duration::from_secs(60),
    );
    let gateway = match status {
        Ok(out) if out.success() => guest_output::enabled_services(&out.stdout)
            .ok()
            .map(|set| set.contains(&HermesService::Gateway)),
        _ => None,
    };
    let name = &target.name;
    match gateway {
        Some(false) => {}
        Some(true) => ui::warn(format!(
            "'{source}' has Hermes's messaging gateway enabled, so '{name}' runs one too, with \
             the same messaging identity (its bot tokens came along): two gateways polling one \
             bot conflict. Keep one: box exec {name} -- hb service disable hermes-gateway (or \
             give '{name}' accounts of its own with hermes gateway setup)"
        )),
        None => ui::warn(format!(
            "cannot tell whether '{name}' runs Hermes's messaging gateway as '{source}' may; two \
             gateways polling one bot conflict: check with box exec {name} -- hb service list"
        )),
    }
}

/// Clone's overlapped step, in the step line and the transcript: the source's export, the
/// copy across and the target's import run at once.
const FOLLOWED_STEP: &str = "export + copy across + import";

/// The source quiesced, exported part by part into the target, resumed as soon as its data
/// is out. With `pending` parts (BOX_STREAM_PARTS), the target's `hb import --follow`
/// takes each part while the export goes on (transfer::parts_follow), and the target holds
/// at most that many; without, every part lands in the target's scratch dir first and the
/// restore imports them afterwards.
fn copy_across(
    source: &mut SaveRun<'_>,
    target: &mut LoadRun<'_>,
    scratch: &str,
    part_size: u64,
    pending: Option<u16>,
) -> Result<Filled> {
    source.quiesce()?;
    let target_name = target.name.clone();
    let host = host_dir::create(&target.ctx.state, "load")?;
    let Some(follow) = pending else {
        ui::say(format!(
            "Copying /data of '{}' into '{target_name}'",
            source.record.name
        ));
        let (smolvm, machine) = (&target.box_.smolvm, target.box_.machine.as_str());
        let into_scratch = |local: &Path, part: &Part| {
            smolvm
                .copy_in(local, machine, &format!("{scratch}/{}", part.name))
                .with_context(|| format!("cannot copy {} into '{machine}'", part.name))
        };
        let index = export_across(source, into_scratch, part_size, None, &target_name)?;
        parts_in::send_index(&mut target.guest(), &index, host.path(), scratch)?;
        return Ok(Filled::Copied(vec![(scratch.to_string(), index)]));
    };
    ui::say(format!(
        "Copying /data of '{}' into '{target_name}' and restoring it there as it arrives",
        source.record.name
    ));
    let dirs = [scratch.to_string()];
    let args = target.import_args(&dirs, true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut guest = target.guest();
    let ((), followed) =
        parts_follow::follow_import(&mut guest, &dirs, &args, host.path(), follow, |follower| {
            let into_import = |local: &Path, part: &Part| follower.part(local, part);
            let index = export_across(source, into_import, part_size, pending, &target_name)?;
            follower.end(&index)
        })?;
    guest
        .transcript
        .line(&followed.summary(FOLLOWED_STEP, &format!("'{target_name}'"), follow));
    Ok(Filled::Imported(FOLLOWED_STEP))
}

/// The source's export, each part checked against what the export said of it and handed
/// to `put`; the source resumed once its data is out. Returns the export's index with the
/// whole stream's hash.
fn export_across(
    source: &mut SaveRun<'_>,
    put: impl FnMut(&Path, &Part) -> Result<()>,
    part_size: u64,
    pending: Option<u16>,
    target: &BoxName,
) -> Result<PartIndex> {
    let t = Instant::now();
    let sink = Checked {
        source: source.record.name.clone(),
        put,
        total: Sha256::new(),
    };
    let exported = source.export_into(sink, part_size, pending, &[])?;
    source.resume();
    let mut index = exported.index;
    // A streaming export lists no whole-stream hash (box save has the engine's); `hb
    // import` insists on one: the hash of what this host checked and passed on.
    index.total_sha256 = Some(exported.sink.total.finalize().into());
    source.transcript.line(&format!(
        "copied {} bytes in {} part(s) into '{target}' in {:.2}s",
        index.total_size,
        index.parts.len(),
        t.elapsed().as_secs_f64()
    ));
    Ok(index)
}

/// Clone's sink: each part, checked against what the export said of it, handed on into the
/// new box (the caller deletes the host copy).
struct Checked<F> {
    /// The box the parts come from, for a part that changed on its way out.
    source: BoxName,
    put: F,
    /// SHA-256 of every part so far, in order: the whole stream's.
    total: Sha256,
}

impl<F: FnMut(&Path, &Part) -> Result<()>> PartSink for Checked<F> {
    fn take_part(&mut self, local: &Path, part: &Part) -> Result<()> {
        check_hash(local, part, &self.source, &mut self.total)?;
        (self.put)(local, part)
    }
}

/// A part's hash against the export's word for it (a part damaged on its way out of
/// `source` is named here, not as a failed import in the other box), its bytes added to
/// `total`.
fn check_hash(local: &Path, part: &Part, source: &BoxName, total: &mut Sha256) -> Result<()> {
    let file =
        std::fs::File::open(local).with_context(|| format!("cannot read {}", local.display()))?;
    let got = hash_part(file, part.hash.algorithm(), total)
        .with_context(|| format!("cannot read {}", local.display()))?;
    if got != part.hash {
        bail!(
            "{} changed on its way out of '{source}' ({got}, the export said {}); retry the clone",
            part.name,
            part.hash
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use box_proto::archive::part_hash::{PartHash, PartHashAlgo};

    #[test]
    fn a_part_must_hash_as_announced() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("part-000000");
        std::fs::write(&f, b"abc").unwrap();
        for algo in [PartHashAlgo::Sha256, PartHashAlgo::Xxh3_128] {
            let mut part = Part {
                name: "part-000000".into(),
                size: 3,
                hash: PartHash::of(algo, b"abc"),
            };
            let source = BoxName::parse("alpha").unwrap();
            let mut total = Sha256::new();
            check_hash(&f, &part, &source, &mut total).unwrap();
            assert_eq!(
                <[u8; 32]>::from(total.finalize()),
                <[u8; 32]>::from(Sha256::digest(b"abc"))
            );
            part.hash = PartHash::of(algo, b"abd");
            let e = check_hash(&f, &part, &source, &mut Sha256::new())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("part-000000 changed on its way out of 'alpha'"),
                "{e}"
            );
        }
    }
}
