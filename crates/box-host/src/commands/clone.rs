//! `box clone <source> <name>`: a new box whose `/data` is the source's at this moment — a
//! branch of the agent's state (logins, history, workspace), with its own VM, Executor
//! token and port.
//!
//! Both box locks → the name free (before any smolvm call) → the source running → the new
//! box created and provisioned as `box load` creates its box (from a base when there is
//! one) → the new box paused, its scratch dir made → the source quiesced as `box save`
//! quiesces it → `hb export` in the source, each part copied out into the host scratch dir
//! (one at a time, 0600 in a 0700 dir), checked, copied into the new box and deleted →
//! the source's scratch removed and the source resumed → the index copied in → `hb import
//! --forget-executor-token` → the rest of `box load` (guest assets, resume, up, wiring,
//! doctor).
//!
//! No encryption: nothing reaches a backup file, and the host never holds more than one
//! part. No passphrase is asked. On a failure or HUP/INT/TERM the source is cleaned up as a
//! save is (its scratch first, then resumed) and the new box is deleted as a failed load's
//! is (or kept with `--keep-on-failure`).

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use box_proto::archive::parts::{Part, hash_part};
use box_proto::{BoxName, HermesService, guest_output};
use sha2::{Digest, Sha256};

use super::Context;
use super::load::{Filled, LoadRun};
use super::new;
use super::save::SaveRun;
use crate::backup::cleanup;
use crate::lifecycle::boxes;
use crate::lifecycle::signals::DeferredSignals;
use crate::smolvm::Smolvm;
use crate::state::{LockKey, Registry, locks};
use crate::transfer::announced::PartSink;
use crate::transfer::guest_hb::Guest;
use crate::transfer::{self, host_dir, parts_in};
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

/// The source quiesced, exported part by part into the target's scratch dir, resumed.
fn copy_across(
    source: &mut SaveRun<'_>,
    target: &mut LoadRun<'_>,
    scratch: &str,
    part_size: u64,
    pending: Option<u16>,
) -> Result<Filled> {
    source.quiesce()?;
    ui::say(format!(
        "Copying /data of '{}' into '{}'",
        source.record.name, target.name
    ));
    let t = Instant::now();
    let sink = IntoGuest {
        smolvm: &target.box_.smolvm,
        machine: &target.box_.machine,
        dir: scratch,
        total: Sha256::new(),
    };
    let exported = source.export_into(sink, part_size, pending, &[])?;
    source.resume();
    let mut index = exported.index;
    // A streaming export lists no whole-stream hash (box save has the engine's); `hb
    // import` insists on one: the hash of what this host checked and passed on.
    index.total_sha256 = Some(exported.sink.total.finalize().into());
    source.transcript.line(&format!(
        "copied {} bytes in {} part(s) into '{}' in {:.2}s",
        index.total_size,
        index.parts.len(),
        target.name,
        t.elapsed().as_secs_f64()
    ));
    let host = host_dir::create(&target.ctx.state, "load")?;
    let mut guest = Guest {
        smolvm: &target.box_.smolvm,
        machine: &target.box_.machine,
        transcript: &mut target.box_.transcript,
        cancel: Some(target.signals.flag()),
    };
    parts_in::send_index(&mut guest, &index, host.path(), scratch)?;
    Ok(Filled::Copied(vec![(scratch.to_string(), index)]))
}

/// Clone's sink: each part, checked against what the export said of it, copied into the
/// new box's scratch dir (the caller deletes the host copy).
struct IntoGuest<'a> {
    smolvm: &'a Smolvm,
    machine: &'a str,
    dir: &'a str,
    /// SHA-256 of every part so far, in order: the whole stream's.
    total: Sha256,
}

impl PartSink for IntoGuest<'_> {
    fn take_part(&mut self, local: &Path, part: &Part) -> Result<()> {
        check_hash(local, part, &mut self.total)?;
        self.smolvm
            .copy_in(local, self.machine, &format!("{}/{}", self.dir, part.name))
            .with_context(|| format!("cannot copy {} into '{}'", part.name, self.machine))
    }
}

/// A part's hash against the export's word for it (a part damaged on its way out is
/// named here, not as a failed import in the other box), its bytes added to `total`.
fn check_hash(local: &Path, part: &Part, total: &mut Sha256) -> Result<()> {
    let file =
        std::fs::File::open(local).with_context(|| format!("cannot read {}", local.display()))?;
    let got = hash_part(file, part.hash.algorithm(), total)
        .with_context(|| format!("cannot read {}", local.display()))?;
    if got != part.hash {
        bail!(
            "{} changed on its way out of the box ({got}, the export said {}); retry the clone",
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
            let mut total = Sha256::new();
            check_hash(&f, &part, &mut total).unwrap();
            assert_eq!(
                <[u8; 32]>::from(total.finalize()),
                <[u8; 32]>::from(Sha256::digest(b"abc"))
            );
            part.hash = PartHash::of(algo, b"abd");
            let e = check_hash(&f, &part, &mut Sha256::new())
                .unwrap_err()
                .to_string();
            assert!(e.contains("part-000000 changed on its way out"), "{e}");
        }
    }
}
