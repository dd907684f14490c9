//! `box save <name> [out]` (docs/design.md, "save"):
//!
//! box lock → refuse an existing destination → passphrase → `hb quiesce` → `hb
//! write-manifest` → `hb export` into a 0700 guest scratch dir, announcing each finished
//! part → meanwhile each part out, removed in the guest, checked and streamed through the
//! engine, deleted (transfer::parts_stream) → the index checked against what was
//! announced → guest scratch removed → `hb resume` while the host verifies → publish →
//! `Saved and verified <size> -> <path>`.
//!
//! On a failure or HUP/INT/TERM the cleanup runs in the seed's order: guest scratch (the
//! plaintext parts) first, then host temporaries, then `hb resume` — so Executor never
//! comes back while plaintext sits in the guest — then the lock goes. Nothing is published
//! unless it was verified. A SIGKILL cannot be cleaned up after: the next save of the same
//! box removes the guest scratch and resumes the box (`hb quiesce` keeps the first
//! record, so the next `hb resume` undoes what the killed run did), and sweeps the host
//! scratch dir.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use box_proto::BoxName;
use box_proto::archive::naming::backup_file_name;
use box_proto::archive::naming::newest_backup;
use box_proto::archive::validate::Report;
use secrecy::SecretString;

use super::Context;
use crate::backup::chain;
use crate::backup::hex_sha;
use crate::backup::host_facts::HostFacts;
use crate::backup::next_link::{self, ChainPlan, NextLink};
use crate::backup::save::{self, GeneratedInvalid, Pipeline, Published, SealPlan, Sealed};
use crate::backup::{cleanup, location, passphrase};
use crate::lifecycle::boxes;
use crate::lifecycle::guest::HB_PATH;
use crate::lifecycle::signals::DeferredSignals;
use crate::lifecycle::transcript::Transcript;
use crate::smolvm::Smolvm;
use crate::state::{BoxRecord, Registry};
use crate::transfer::announced::PartSink;
use crate::transfer::guest_hb::{Guest, timeouts};
use crate::transfer::parts_stream::ExportedInto;
use crate::transfer::{self, guest_dir, host_dir, parts_stream};
use crate::ui;
use crate::ui::progress::human;
use crate::ui::timings::Timings;

/// `<backup dir>/<name>-<YYYYmmdd-HHMMSS>.tar.zst.gpg`, named for now, or for a second
/// after the newest backup of the box there when the clock reads earlier than that: the
/// names are the order of saves (the newest backup is the one a restore and the next save
/// take, and a link's parent must be older than it), so a clock set back never makes a
/// backup that sorts before its parent.
pub fn default_out(backup_dir: &Path, name: &BoxName) -> Result<PathBuf> {
    let now = transfer::stamp();
    let newest = newest_backup(backup_dir, name.as_str())
        .with_context(|| format!("cannot list {}", backup_dir.display()))?
        .and_then(|p| chain::box_and_stamp(&p).map(|(_, stamp)| stamp));
    let stamp = match newest.as_deref().and_then(|n| stamp_after(n, &now)) {
        Some(later) => {
            ui::warn(format!(
                "the clock reads {now} UTC, not later than the newest backup of '{name}' ({}): naming this one {later} so the backups stay in the order they were made",
                newest.unwrap_or_default()
            ));
            later
        }
        None => now,
    };
    match backup_file_name(name.as_str(), &stamp) {
        Some(file) => Ok(backup_dir.join(file)),
        None => bail!("cannot name a backup of '{name}' at {stamp}"),
    }
}

/// A second after `newest` (a `YYYYmmdd-HHMMSS` stamp) when `now` is not later than it.
fn stamp_after(newest: &str, now: &str) -> Option<String> {
    if now > newest {
        return None;
    }
    let at = chrono::NaiveDateTime::parse_from_str(newest, "%Y%m%d-%H%M%S").ok()?;
    Some(
        (at + chrono::Duration::seconds(1))
            .format("%Y%m%d-%H%M%S")
            .to_string(),
    )
}

/// One run of `box save` (or the source side of `box clone`): what it changed so far, so
/// cleanup undoes exactly that.
pub(super) struct SaveRun<'a> {
    ctx: &'a Context,
    pub record: BoxRecord,
    smolvm: Smolvm,
    signals: DeferredSignals,
    pub transcript: Transcript,
    /// `hb quiesce` was called (a failed one may still have paused): resume on the way out.
    paused: bool,
    /// The guest scratch dir, while it may exist.
    guest_dir: Option<String>,
    /// `hb resume` failed: the backup still gets verified and published, then we say so.
    resume_error: Option<anyhow::Error>,
    /// Where the seconds went, step by step (the transcript's and -v's last line).
    pub timings: Timings,
}

pub fn run(ctx: &Context, args: &crate::cli::SaveArgs) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    // Our own rollback must run on a signal, so the engine's handler only cleans up its
    // temporaries and records the signal; DeferredSignals makes the rest wait for us.
    cleanup::install();
    cleanup::set_deferred(true);
    let signals = DeferredSignals::install()?;
    let _lock = boxes::lock(ctx, &record, &format!("box save {}", record.name))?;
    if let Some(out) = &args.out {
        save::check_destination(out)?;
    }
    let pass = passphrase::resolve(passphrase::Purpose::Encrypt)?;
    let mut run = SaveRun::new(ctx, record, signals, "save")?;
    // Incremental on the newest backup beside it, unless asked for a full one or written
    // somewhere of the user's choosing (a chain is found by name, beside its links).
    let chain_on_newest = !args.full && args.out.is_none();
    let result = run.steps(args.out.as_deref(), &pass, chain_on_newest);
    let failed = result.as_ref().err().map(|e| run.report(e));
    run.cleanup();
    run.timings.mark("resume");
    let timings = run.timings.line();
    run.transcript.line(&timings);
    tracing::info!("{timings}");
    let resumed = match run.take_resume_error() {
        Some(e) => Err(e),
        None => Ok(()),
    };
    if let Err(e) = &resumed {
        ui::error(format!("box '{}' did not resume: {e:#}", run.record.name));
        ui::warn(format!(
            "Executor may stay paused; try: box stop {0} && box start {0}",
            run.record.name
        ));
    }
    if let Some(code) = failed {
        ui::warn(format!("transcript: {}", run.transcript.path().display()));
        return Ok(code);
    }
    if let Ok(published) = result {
        println!(
            "Saved and verified {} -> {}{}",
            human(published.size),
            published.path.display(),
            chain_words(&published)
        );
        super::backups_copy::mirror_after_save(
            ctx,
            &run.record.name,
            &published.path,
            &published.digest,
        );
        if args.check {
            let checked =
                super::backups_check::after_save(ctx, &run.record.name, &published.path, &pass)?;
            if checked != ExitCode::SUCCESS {
                return Ok(checked);
            }
        }
    }
    Ok(if resumed.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

impl<'a> SaveRun<'a> {
    pub(super) fn new(
        ctx: &'a Context,
        record: BoxRecord,
        signals: DeferredSignals,
        verb: &str,
    ) -> Result<Self> {
        let transcript = Transcript::create(&ctx.state, record.name.as_str(), verb)?;
        let smolvm = boxes::smolvm(ctx, &record)?;
        Ok(SaveRun {
            ctx,
            record,
            smolvm,
            signals,
            transcript,
            paused: false,
            guest_dir: None,
            resume_error: None,
            timings: Timings::start(),
        })
    }

    fn checkpoint(&self) -> Result<()> {
        transfer::checkpoint(Some(self.signals.flag()))
    }

    fn guest(&mut self) -> Guest<'_> {
        Guest {
            smolvm: &self.smolvm,
            machine: &self.record.machine,
            transcript: &mut self.transcript,
            cancel: Some(self.signals.flag()),
        }
    }

    /// The box must be running: a stopped box has no guest to export from.
    pub(super) fn check_running(&self) -> Result<()> {
        let name = &self.record.name;
        let machine = boxes::machine(&self.smolvm, &self.record)?;
        if !machine.state.is_running() {
            bail!(
                "box '{name}' is {}; start it with: box start {name}",
                machine.state
            );
        }
        Ok(())
    }

    /// Leftovers of a killed run swept (we hold the box lock), then `hb quiesce`: Executor
    /// paused durably. The agents go on; the export copies their live databases.
    pub(super) fn quiesce(&mut self) -> Result<()> {
        let name = self.record.name.clone();
        self.checkpoint()?;
        host_dir::sweep_stale(&self.ctx.state);
        guest_dir::sweep_stale(&mut self.guest())?;

        ui::say(format!(
            "Pausing Executor inside '{name}' (the agents and their chats go on)"
        ));
        // Before the call: a pause can take effect and still report failure.
        self.paused = true;
        self.guest().hb(&["quiesce"], timeouts::QUIESCE, true)?;
        self.checkpoint()
    }

    /// `hb export` into a fresh guest scratch dir, each part copied out through a host
    /// scratch dir (one part at a time) into `sink`; the guest scratch is removed before
    /// this returns (the caller resumes the box next).
    pub(super) fn export_into<S: PartSink>(
        &mut self,
        sink: S,
        part_size: u64,
        pending: Option<u16>,
        extra: &[&str],
    ) -> Result<ExportedInto<S>> {
        let scratch = guest_dir::new_path("save");
        self.guest_dir = Some(scratch.clone());
        let host = host_dir::create(&self.ctx.state, "save")?;
        let blocks = self.block_files_above(extra);
        let exported = parts_stream::export_into(
            &mut self.guest(),
            &scratch,
            part_size,
            pending,
            extra,
            blocks,
            host.path(),
            sink,
        )?;
        drop(host);
        self.transcript.line(&format!(
            "{} part(s) of {part_size} bytes, {} bytes",
            exported.index.parts.len(),
            exported.index.total_size
        ));
        // Plaintext leaves the guest before Executor comes back.
        guest_dir::remove(&mut self.guest(), &scratch)?;
        self.guest_dir = None;
        Ok(exported)
    }

    /// Large files in blocks, for a save in chain mode (a link then holds only their changed
    /// blocks; an `hb` older than chains knows neither), unless `BACKUP_BLOCK_FILES_ABOVE=0`.
    fn block_files_above(&self, extra: &[&str]) -> Option<u64> {
        let bytes = self.ctx.config.env.backup_block_files_above;
        (bytes > 0 && extra.contains(&"--listed-incremental")).then_some(bytes)
    }

    /// Whether the box's `hb` makes chain-mode exports: `commit-snapshot` came with them.
    /// (Not `hb export --help`: nothing but the export itself runs as `hb export`.) Only
    /// hb's own answer that it has no such verb means an older hb; a call that fails for
    /// any other reason (a busy VM, a dropped connection) is asked again, then fails the
    /// save: guessing "older hb" on a failure would write a backup outside the chain.
    fn hb_knows_chains(&mut self) -> Result<bool> {
        let argv = [HB_PATH, "commit-snapshot", "--help"];
        let mut last = None;
        for attempt in 0..3 {
            if attempt > 0 {
                std::thread::sleep(std::time::Duration::from_secs(attempt));
            }
            self.checkpoint()?;
            match self.guest().exec(&argv, timeouts::SHORT, true) {
                Ok(out) if out.success() && out.stdout.contains("--digest") => return Ok(true),
                Ok(out)
                    if out.code == Some(2) && out.stderr.contains("unrecognized subcommand") =>
                {
                    return Ok(false);
                }
                Ok(out) => {
                    last = Some(format!(
                        "it answered {}{}",
                        crate::lifecycle::guest::status(&out),
                        crate::lifecycle::guest::last_lines(&out.stderr, &out.stdout)
                    ));
                }
                Err(e) => last = Some(format!("{e:#}")),
            }
        }
        bail!(
            "cannot tell whether the hb in box '{}' makes incremental saves ({}); nothing was saved, retry the save",
            self.record.name,
            last.unwrap_or_default()
        )
    }

    /// After publishing a chain-mode backup: the box's snapshot becomes the one the next
    /// save compares with, named by this file's digest, and the tree it restores to and
    /// the chain's files are kept for the next save's check. If that fails, the next save
    /// is a full one (it never builds on a parent that is not there), so it is only said.
    fn commit_snapshot(&mut self, published: &Published, plan: &mut ChainPlan) {
        let name = self.record.name.clone();
        let committed = plan
            .record(&self.ctx.state, &name, published)
            .and_then(|()| {
                self.guest()
                    .hb(
                        &["commit-snapshot", "--digest", &hex_sha(&published.digest)],
                        timeouts::SHORT,
                        false,
                    )
                    .map(drop)
            });
        if let Err(e) = committed {
            ui::warn(format!(
                "box '{name}': the next save will be a full one (cannot record this backup as its parent: {e:#})"
            ));
        }
    }

    /// Export, copy out, encrypt and validate into a sealed temp beside `out`, as `plan`
    /// says (the guest scratch removed either way before this returns).
    fn seal(
        &mut self,
        out: &Path,
        pass: &SecretString,
        part_size: u64,
        pending: Option<u16>,
        plan: &ChainPlan,
    ) -> Result<(Sealed, String)> {
        let flags: Vec<&str> = plan.flags.iter().map(String::as_str).collect();
        let prior = plan.parent.as_ref().map(|p| p.tree.clone());
        let mut pipeline = Pipeline::begin_link(out, pass, part_size, prior)?;
        pipeline.seal_with(SealPlan {
            facts: self.host_facts(),
            chain: plan.intent(),
        })?;
        let exported = match self.export_into(pipeline, part_size, pending, &flags) {
            Ok(exported) => exported,
            Err(e) => {
                self.remove_guest_scratch();
                return Err(e);
            }
        };
        let sealed = exported.sink.finish()?;
        sealed.matches_index(&exported.index)?;
        if let Some(said) = next_link::manifest_disagrees(&sealed) {
            self.transcript.line(&said);
            ui::warn(format!("box '{}': {said}", self.record.name));
        }
        let mut timings = format!(
            "stages: export {:.2}s (in the guest)",
            exported.export_wall.as_secs_f64()
        );
        match &exported.stages {
            Some(stages) => timings.push_str(&format!(
                ", overlapped with the host's {}",
                stages.summary()
            )),
            None => timings.push_str(", then copied out and encrypted (sequential)"),
        }
        Ok((sealed, timings))
    }

    /// What box vouches for in this backup, its chain place aside (the pipeline fixes it
    /// from the export's word): written by the host, from the box's registry row.
    fn host_facts(&self) -> HostFacts {
        HostFacts {
            box_name: self.record.name.to_string(),
            box_version: crate::version::LONG.to_string(),
            smolvm: self.smolvm.version().ok().map(|v| v.to_string()),
            saved_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            policy: self.record.containment.clone(),
            place: None,
        }
    }

    /// The guest scratch dir, if a failed export left it (plaintext: before anything else).
    fn remove_guest_scratch(&mut self) {
        if let Some(scratch) = self.guest_dir.take()
            && let Err(e) = guest_dir::remove(&mut self.guest(), &scratch)
        {
            guest_dir::warn_left(&self.record.machine, &scratch, &e);
        }
    }

    fn steps(
        &mut self,
        explicit_out: Option<&Path>,
        pass: &SecretString,
        on_newest: bool,
    ) -> Result<Published> {
        let name = self.record.name.clone();
        self.check_running()?;
        let part_size = transfer::part_size()?;
        let pending = transfer::stream_pending()?;
        // The box's chain wherever box runs from (a new one: the backup dir).
        let home = location::save_dir(&self.ctx.config, &self.record, on_newest)?;
        let dir = explicit_out.map_or_else(|| home.clone(), chain::dir_of);
        // Before the pause: hashing the newest backup takes a moment.
        let knows_chains = self.hb_knows_chains()?;
        let mut plan = ChainPlan::new(NextLink {
            state: &self.ctx.state,
            name: &name,
            dir: &dir,
            on_newest,
            knows_chains,
            chain_max: self.ctx.config.env.backup_chain_max,
            max_age_days: self.ctx.config.env.backup_chain_max_age_days,
            passphrase: pass,
        })?;
        if let Some(parent) = &plan.parent {
            self.transcript
                .line(&format!("parent {}", hex_sha(&parent.digest)));
        }
        let out = match explicit_out {
            Some(out) => out.to_path_buf(),
            None => default_out(&dir, &name)?,
        };
        save::check_destination(&out)?;
        // Leftovers of a killed save of this box (we hold its lock).
        host_dir::sweep_backup_temps(&home, &name);
        self.timings.mark("check the chain");
        self.quiesce()?;
        self.timings.mark("quiesce");
        let policy = self.record.containment.clone();
        self.guest().write_manifest(policy.as_ref())?;
        self.checkpoint()?;
        self.timings.mark("manifest");

        ui::say(format!(
            "Archiving /data inside '{name}', copying out and encrypting into {}",
            out.display()
        ));
        // export → copy → encrypt → verify → publish, quiesce and resume left out: the
        // stages `just bench` compares with the seed's same steps.
        let started = Instant::now();
        let (sealed, mut timings) = match self.seal(&out, pass, part_size, pending, &plan) {
            Err(e) if plan.parent.is_some() && GeneratedInvalid::misfits_chain(&e) => {
                // What the guest kept from its last save is not what that backup restores
                // to (a box whose older hb left some links out): the link would not
                // restore, so a full backup instead.
                ui::warn(format!(
                    "box '{name}': an incremental link would not restore on the chain of its newest backup ({e:#}); saving a full backup instead, which starts a new chain"
                ));
                self.checkpoint()?;
                self.seal(&out, pass, part_size, pending, &plan.without_parent())?
            }
            sealed => sealed?,
        };
        self.transcript
            .line(&format!("{} members", sealed.report.members));
        warn_damaged_databases(&name, &sealed.report);
        self.timings.mark("export, copy, encrypt");

        // Executor comes back (`hb resume` waits for its MCP handshake) while the host
        // verifies the file: neither needs the other, and the guest scratch is gone.
        let sealed_in = started.elapsed();
        ui::say("Verifying the encrypted backup");
        let (verified, verify_took) = std::thread::scope(|s| {
            let verifying = s.spawn(move || {
                let t = Instant::now();
                (sealed.verify(), t.elapsed())
            });
            self.resume();
            verifying.join()
        })
        .map_err(|_| anyhow::anyhow!("the thread verifying the backup panicked"))?;
        let verified = verified?;
        timings.push_str(&format!("; verify {:.2}s", verify_took.as_secs_f64()));
        self.checkpoint()?;
        self.timings.mark("resume with verify");
        let t = Instant::now();
        let published = verified.publish()?;
        let publish_took = t.elapsed();
        timings.push_str(&format!(
            "; publish {:.2}s; export..publish {:.2}s (quiesce and resume left out)",
            publish_took.as_secs_f64(),
            (sealed_in + verify_took + publish_took).as_secs_f64()
        ));
        self.transcript.line(&timings);
        tracing::info!("{timings}");
        self.transcript
            .line(&format!("published {}", published.path.display()));
        self.timings.mark("publish");
        if !plan.flags.is_empty() {
            self.commit_snapshot(&published, &mut plan);
            self.timings.mark("record the snapshot");
        }
        if explicit_out.is_none()
            && let Err(e) = Registry::new(&self.ctx.state).remember_backup_dir(&name, &home)
        {
            ui::warn(format!(
                "box '{name}': cannot record where its backups are ({e:#}); box finds them in {} while BACKUP_DIR says so",
                home.display()
            ));
        }
        Ok(published)
    }

    /// `hb resume`, once; a failure is kept for the end (the backup is still good).
    pub(super) fn resume(&mut self) {
        if !self.paused {
            return;
        }
        self.paused = false;
        ui::say(format!("Resuming '{}'", self.record.name));
        if let Err(e) = self.guest().hb(&["resume"], timeouts::RESUME, false) {
            self.resume_error = Some(e);
        }
    }

    /// The seed's cleanup order: guest scratch, host temporaries (already dropped with
    /// `steps`), resume.
    pub(super) fn cleanup(&mut self) {
        self.remove_guest_scratch();
        self.resume();
    }

    /// Why `hb resume` failed, if it did (said once, at the end).
    pub(super) fn take_resume_error(&mut self) -> Option<anyhow::Error> {
        self.resume_error.take()
    }

    fn report(&mut self, e: &anyhow::Error) -> ExitCode {
        let name = self.record.name.clone();
        let code = match self.signals.pending() {
            Some(sig) => {
                ui::error(format!(
                    "box save {name} interrupted by {}; nothing was published",
                    DeferredSignals::name(sig)
                ));
                ExitCode::from(DeferredSignals::exit_status(sig))
            }
            None => {
                ui::error(format!("box save {name} failed: {e:#}"));
                ExitCode::FAILURE
            }
        };
        self.transcript.line(&format!("failed: {e:#}"));
        code
    }
}

/// A damaged database is saved as it is (a backup of a damaged box beats none), and said,
/// from what the backup's own manifest records of the check (`sqlite_check`).
fn warn_damaged_databases(name: &BoxName, report: &Report) {
    let Some(manifest) = report
        .manifest
        .as_deref()
        .and_then(|m| box_proto::RuntimeManifest::parse_bytes(m).ok())
    else {
        return;
    };
    let damaged = super::load::damaged_databases(&manifest);
    for (db, then) in &damaged.named {
        ui::warn(format!(
            "box '{name}': the database {db} fails SQLite's check; it is saved as it is, and {then}"
        ));
    }
    if damaged.more > 0 {
        ui::warn(format!(
            "box '{name}': and {} more damaged database(s), saved as they are",
            damaged.more
        ));
    }
}

/// ` (incremental: link N of its chain)` or ` (full)` for a chain-mode backup, from its
/// sealed place; nothing for one outside chains.
fn chain_words(published: &Published) -> String {
    let link = published
        .facts
        .as_ref()
        .and_then(|f| f.place)
        .map(|p| p.link);
    match link {
        Some(0) => " (full: starts a chain)".to_string(),
        Some(n) => format!(" (incremental: link {} of its chain)", n + 1),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_has_box_and_stamp() {
        let name = BoxName::parse("alpha").unwrap();
        let out = default_out(Path::new("/b"), &name).unwrap();
        let file = out.file_name().unwrap().to_string_lossy().into_owned();
        assert!(file.starts_with("alpha-"), "{file}");
        assert!(file.ends_with(".tar.zst.gpg"), "{file}");
        assert_eq!(out.parent().unwrap(), Path::new("/b"));
    }
}
