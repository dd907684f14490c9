//! `box load <file> [name] [--keep-on-failure]` (docs/design.md, "load"):
//!
//! file exists → box lock, name free → passphrase → pass 1 decrypts and validates the whole
//! backup before any smolvm call → a fresh box created and provisioned as `box new` does
//! (from a matching base when there is one), without starting its runtime → `hb quiesce` →
//! `hb import --follow` runs while pass 2 cuts the plaintext into parts (hash equal to pass
//! 1's), each copied into a 0700 guest scratch dir with its marker, at most
//! `BOX_STREAM_PARTS` not yet taken (transfer::parts_follow; `BOX_STREAM_PARTS=0`: all parts
//! in, then `hb import`) → the import stages, fixes owners, re-arms the quiesce marker,
//! swaps with rollback → guest scratch removed → guest assets refreshed
//! (provisioning again, only the per-box steps for a box from a base; then `hb init`) → `hb resume` + `hb up` → `hb wire-mcp` (the running
//! Executor's token wins over the restored one) → doctor →
//! `Restored and verified. Enter with: box enter <name>`.
//!
//! On a failure or HUP/INT/TERM: the guest scratch goes first, the box is never resumed,
//! and the VM this invocation created is deleted as a failed `box new` deletes it
//! (docs/design.md, "Rollback of a failed new") unless `--keep-on-failure` /
//! `BOX_KEEP_ON_FAILURE=1`; the transcript stays in `<state>/logs`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use box_proto::archive::parts::PartIndex;
use box_proto::escape::shown;
use box_proto::layout;
use box_proto::manifest::{SQLITE_CHECK_KEY, SqliteCheck};
use box_proto::{BoxName, RuntimeManifest};
use secrecy::SecretString;

use super::Context;
use super::new::{self, Provisioned};
use crate::backup::host_facts::Sealing;
use crate::backup::load::{self, ValidatedBackup};
use crate::backup::open_chain;
use crate::backup::{BackupError, chain, cleanup, location, passphrase};
use crate::lifecycle::boxes;
use crate::lifecycle::cleanup::rollback_created;
use crate::lifecycle::setup::Setup;
use crate::lifecycle::signals::DeferredSignals;
use crate::policy::carried::Recorded;
use crate::state::{LockKey, Registry, locks};
use crate::transfer::guest_hb::{Guest, timeouts};
use crate::transfer::parts_follow::{self, Follower};
use crate::transfer::{self, guest_dir, host_dir, parts_in};
use crate::ui;
use crate::ui::progress::Phase;
use crate::ui::progress::human;

/// The `hb import` flag that drops the imported tree's Executor token (`box clone`).
pub(super) const OWN_TOKEN_FLAG: &str = "--forget-executor-token";
/// The `hb import` flag that takes the parts while they arrive.
const FOLLOW_FLAG: &str = "--follow";
/// Load's overlapped step, in the step line and the transcript.
const FOLLOWED_STEP: &str = "copy in + import";

/// What a restore's `fill` did.
pub(super) enum Filled {
    /// Copied the parts of each link into its dir (with its index), for `hb import`.
    Copied(Vec<(String, PartIndex)>),
    /// Imported them as they arrived (`hb import --follow`), in the step named so.
    Imported(&'static str),
}

pub fn run(ctx: &Context, args: &crate::cli::LoadArgs) -> Result<ExitCode> {
    let file = location::find_file(&ctx.config, &ctx.state, &args.file);
    let file = file.as_path();
    if std::fs::symlink_metadata(file).is_err() {
        bail!("no such archive: {}", file.display());
    }
    load::check_backup_file(file)?;
    let name = BoxName::parse(&args.name)?;
    crate::state::reserved::refuse_reserved(&name)?;
    cleanup::install();
    cleanup::set_deferred(true);
    let signals = DeferredSignals::install()?;
    let _lock = locks::try_acquire(
        &ctx.state,
        LockKey::Box(name.clone()),
        &format!("box load {name}"),
    )?;
    // Plaintext parts a killed save or load left on the host (their owners are gone).
    host_dir::sweep_stale(&ctx.state);
    if let Some(taken) = Registry::new(&ctx.state).get(&name)? {
        let refusal = format!(
            "box '{name}' already exists; load into another name: box load {} <name>",
            file.display()
        );
        return Err(boxes::name_taken(&taken, refusal));
    }
    let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
    let part_size = transfer::part_size()?;
    let mut timings = crate::ui::timings::Timings::start();

    // An incremental backup brings the links before it (found beside it by digest), each
    // validated after the ones before: all of it before any VM exists.
    let found = match open_chain::find(file, args.chain_dir.as_deref(), &pass) {
        Ok(found) => found,
        Err(_) if signals.pending().is_some() => return Ok(interrupted(&signals, &name)),
        Err(e) => {
            let looked_in = args
                .chain_dir
                .clone()
                .unwrap_or_else(|| chain::dir_of(file));
            let e = crate::backup::missing::explain(&ctx.config, &ctx.state, &looked_in, e);
            bail!("archive is invalid or unsafe: {e:#}")
        }
    };
    if found.links.len() > 1 {
        ui::say(format!(
            "{} is link {} of a chain; restoring the chain, oldest first",
            file.display(),
            found.links.len()
        ));
    }
    ui::say("Decrypting and validating archive before creating a VM");
    let chain = match found.validate(&pass) {
        Ok(v) => v,
        Err(_) if signals.pending().is_some() => return Ok(interrupted(&signals, &name)),
        // A sound file in an envelope box refuses: not "invalid", and the message says
        // how to re-encrypt it.
        Err(e) if matches!(e.downcast_ref(), Some(BackupError::Unsupported(_))) => return Err(e),
        Err(e) => bail!("archive is invalid or unsafe: {e:#}"),
    };
    for warning in chain.warnings() {
        ui::warn(warning);
    }
    let chain = chain.links;
    let Some((validated, _)) = chain.last() else {
        bail!(
            "archive is invalid or unsafe: nothing in {}",
            file.display()
        );
    };
    describe(validated);
    if signals.pending().is_some() {
        return Ok(interrupted(&signals, &name));
    }

    timings.mark("validate (pass 1)");
    // The restored box gets the policy box sealed into the backup (the user's flags on
    // top), and placeholders of its own machine.
    let carried = crate::lifecycle::containment::settle(crate::policy::carried::for_load(
        &ctx.config.env,
        recorded(validated),
        &args.making.carry_flags(args.policy_from_backup),
    )?);
    ui::say(format!("Creating and provisioning fresh instance '{name}'"));
    let mut provisioned = match new::create_and_provision(
        ctx,
        &name,
        "load",
        args.making.keep_on_failure,
        args.making.fresh,
        carried,
    ) {
        Ok(p) => p,
        Err(code) => {
            ui::error(format!(
                "destination provisioning failed; nothing was restored into '{name}'"
            ));
            return Ok(code);
        }
    };
    timings.absorb(std::mem::replace(
        &mut provisioned.timings,
        crate::ui::timings::Timings::start(),
    ));
    provisioned.timings = timings;
    let mut run = LoadRun {
        ctx,
        verb: "load",
        name,
        box_: provisioned,
        signals,
        guest_dir: None,
        keep_on_failure: args.making.keep_on_failure,
        own_token: false,
    };
    let validated: Vec<ValidatedBackup> = chain.into_iter().map(|(v, _)| v).collect();
    match run.restore(&validated, &pass, part_size) {
        Ok(()) => {
            run.complete("restored and verified")?;
            println!("Restored and verified. Enter with: box enter {}", run.name);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(run.fail(&e)),
    }
}

/// Pass 2 of every link, each part handed to `follower` as the engine cuts it (its hash
/// equal to pass 1's, checked at the end of the link), then the link's index.
fn cut_into(
    follower: &mut Follower<'_, '_, '_>,
    links: &[ValidatedBackup],
    pass: &SecretString,
    host_dir: &Path,
    part_size: u64,
) -> Result<()> {
    let total = links.iter().map(|l| l.plaintext_size).sum();
    let mut phase = Phase::start("copying in", Some(total));
    for validated in links {
        let index = load::write_parts(
            &validated.path,
            pass,
            &validated.sha256,
            part_size,
            host_dir,
            |path, part| {
                follower.part(path, part)?;
                phase.add(part.size);
                Ok(())
            },
        )?;
        follower.end(&index)?;
    }
    phase.finish();
    Ok(())
}

/// What the backup holds of its box's policy: sealed by box, or only in its manifest.
pub(super) fn recorded(v: &ValidatedBackup) -> Recorded<'_> {
    match &v.sealing {
        Sealing::Sealed(facts) => Recorded::Sealed(facts.policy.as_ref()),
        Sealing::Unsealed => Recorded::Unsealed {
            manifest: v.manifest.as_ref(),
            why: None,
        },
        Sealing::NotBoxs(why) => Recorded::Unsealed {
            manifest: v.manifest.as_ref(),
            why: Some(why),
        },
    }
}

fn interrupted(signals: &DeferredSignals, name: &BoxName) -> ExitCode {
    let sig = signals.pending().unwrap_or(15);
    ui::error(format!(
        "box load {name} interrupted by {} before any VM was created",
        DeferredSignals::name(sig)
    ));
    ExitCode::from(DeferredSignals::exit_status(sig))
}

pub(super) fn describe(v: &ValidatedBackup) {
    // When it was saved: as box sealed it; as the manifest says, for an older backup.
    let created = match &v.sealing {
        Sealing::Sealed(facts) => format!(
            ", saved {} by box {}",
            facts.saved_at,
            box_proto::escape::shown(facts.box_version.as_bytes())
        ),
        _ => v
            .manifest
            .as_ref()
            .and_then(|m| m.get("created_at"))
            .map(|t| format!(", saved {}", box_proto::escape::shown(t.as_bytes())))
            .unwrap_or_default(),
    };
    ui::say(format!(
        "Archive ok: {} members, {} of {} data{created}",
        v.report.members,
        human(v.plaintext_size),
        v.report.compression.as_str()
    ));
    if let Some(e) = &v.manifest_error {
        ui::warn(format!(
            "the runtime manifest in this backup is unreadable: {e}"
        ));
    } else if v.manifest.is_none() {
        ui::warn("this backup has no runtime manifest (a seed backup?)");
    }
    let damaged = v
        .manifest
        .as_ref()
        .map(damaged_databases)
        .unwrap_or_default();
    for (db, then) in &damaged.named {
        ui::warn(format!(
            "the backup says its database {db} was damaged when it was saved; {then}"
        ));
    }
    if damaged.more > 0 {
        ui::warn(format!(
            "the backup says {} more of its databases were damaged when it was saved",
            damaged.more
        ));
    }
}

/// The databases a backup's manifest says were saved damaged.
#[derive(Debug, Default)]
pub(super) struct DamagedDatabases {
    /// Each shown for a terminal, with what a restore does with it.
    pub named: Vec<(String, &'static str)>,
    /// Past [`SqliteCheck::MAX_NAMED`]: counted, not named.
    pub more: usize,
}

/// What `sqlite_check` in a backup's manifest says (`box save` and `box load` both tell
/// it). Written in the guest, where the agent can write it: said, never acted on.
pub(super) fn damaged_databases(manifest: &RuntimeManifest) -> DamagedDatabases {
    let Some(value) = manifest.get(SQLITE_CHECK_KEY) else {
        return DamagedDatabases::default();
    };
    let damaged = SqliteCheck::damaged_in(value);
    let named = damaged
        .named
        .iter()
        .map(|db| {
            // `hb import` restores Codex's databases as they are (Codex may write through a
            // save) and stops at any other of the box's.
            let then = if db.starts_with(&format!("{}/", layout::CODEX_HOME)) {
                "a restore keeps it as it is"
            } else {
                "a restore stops at it before anything is swapped (`box extract` still takes the files out)"
            };
            (shown(db.as_bytes()), then)
        })
        .collect();
    DamagedDatabases {
        named,
        more: damaged.more,
    }
}

/// The restore into a box this invocation created (`box load`, and `box clone`'s new box).
pub(super) struct LoadRun<'a> {
    pub ctx: &'a Context,
    /// `load` or `clone`, for messages.
    pub verb: &'static str,
    pub name: BoxName,
    pub box_: Provisioned,
    pub signals: DeferredSignals,
    pub guest_dir: Option<String>,
    pub keep_on_failure: bool,
    /// The restored tree is another live box's (`box clone`): `hb import` drops its
    /// Executor token, so this box's Executor gets one of its own.
    pub own_token: bool,
}

impl LoadRun<'_> {
    fn checkpoint(&self) -> Result<()> {
        transfer::checkpoint(Some(self.signals.flag()))
    }

    pub(super) fn guest(&mut self) -> Guest<'_> {
        Guest {
            smolvm: &self.box_.smolvm,
            machine: &self.box_.machine,
            transcript: &mut self.box_.transcript,
            cancel: Some(self.signals.flag()),
        }
    }

    fn setup(&mut self) -> Setup<'_> {
        Setup {
            smolvm: &self.box_.smolvm,
            state: &self.ctx.state,
            env: &self.ctx.config.env,
            machine: &self.box_.machine,
            transcript: &mut self.box_.transcript,
            cancel: Some(self.signals.flag()),
        }
    }

    /// The backup (or each link of its chain, oldest first, into a dir of its own) copied
    /// in as parts and restored: imported while the parts arrive, unless
    /// `BOX_STREAM_PARTS=0` asks for the sequential path (all parts in, then the import).
    pub(super) fn restore(
        &mut self,
        links: &[ValidatedBackup],
        pass: &SecretString,
        part_size: u64,
    ) -> Result<()> {
        let pending = transfer::stream_pending()?;
        self.restore_with(|run, scratch| {
            let host = host_dir::create(&run.ctx.state, "load")?;
            let dirs = run.link_dirs(scratch, links.len())?;
            let Some(pending) = pending else {
                ui::say(format!("Copying the archive into '{}'", run.name));
                let mut guest = run.guest();
                let cancel = guest.cancel;
                let mut copied = Vec::new();
                for (validated, dir) in links.iter().zip(dirs) {
                    let index = parts_in::copy_in(
                        &mut guest,
                        validated,
                        pass,
                        host.path(),
                        &dir,
                        part_size,
                        cancel,
                    )?;
                    copied.push((dir, index));
                }
                return Ok(Filled::Copied(copied));
            };
            ui::say(format!(
                "Copying the archive into '{}' and restoring /data as it arrives",
                run.name
            ));
            let args = run.import_args(&dirs, true);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut guest = run.guest();
            let ((), followed) = parts_follow::follow_import(
                &mut guest,
                &dirs,
                &args,
                host.path(),
                pending,
                |follower| cut_into(follower, links, pass, host.path(), part_size),
            )?;
            guest
                .transcript
                .line(&followed.summary(FOLLOWED_STEP, "the guest", pending));
            Ok(Filled::Imported(FOLLOWED_STEP))
        })
    }

    /// The scratch dir of each of `links` links: the scratch dir itself for one, else a
    /// 0700 dir for each inside it (made in one call).
    fn link_dirs(&mut self, scratch: &str, links: usize) -> Result<Vec<String>> {
        if links == 1 {
            return Ok(vec![scratch.to_string()]);
        }
        let dirs: Vec<String> = (0..links)
            .map(|i| format!("{scratch}/link-{i:03}"))
            .collect();
        let mut mkdir = vec!["mkdir", "-m", "0700", "--"];
        mkdir.extend(dirs.iter().map(String::as_str));
        self.guest().exec_ok(
            "creating the links' scratch dirs",
            &mkdir,
            timeouts::SHORT,
            true,
        )?;
        Ok(dirs)
    }

    /// `hb import`'s arguments for the parts in `dirs`.
    pub(super) fn import_args(&self, dirs: &[String], follow: bool) -> Vec<String> {
        let mut args = vec!["import".to_string()];
        if follow {
            args.push(FOLLOW_FLAG.into());
        }
        for dir in dirs {
            args.extend(["--from".to_string(), dir.clone()]);
        }
        if self.own_token {
            args.push(OWN_TOKEN_FLAG.into());
        }
        args
    }

    /// The restore with the parts put into the guest scratch dir by `fill` (and imported
    /// there, when it says so): pause → scratch dir → `fill` → `hb import` (unless `fill`
    /// did it) → scratch removed → guest assets refreshed → resume, up, wiring, health.
    pub(super) fn restore_with(
        &mut self,
        fill: impl FnOnce(&mut Self, &str) -> Result<Filled>,
    ) -> Result<()> {
        let name = self.name.clone();
        self.checkpoint()?;
        ui::say(format!("Pausing '{name}' for the restore"));
        self.guest().hb(&["quiesce"], timeouts::QUIESCE, true)?;
        self.checkpoint()?;
        self.box_.timings.mark("quiesce");

        let scratch = guest_dir::new_path("load");
        self.guest_dir = Some(scratch.clone());
        self.guest().exec_ok(
            "creating the guest scratch dir",
            &["mkdir", "-m", "0700", "--", &scratch],
            timeouts::SHORT,
            true,
        )?;
        match fill(self, &scratch)? {
            Filled::Imported(step) => {
                self.checkpoint()?;
                self.box_.timings.mark(step);
            }
            Filled::Copied(filled) => {
                self.checkpoint()?;
                self.box_.timings.mark("copy in (pass 2)");
                ui::say(format!(
                    "Restoring /data inside '{name}' ({} part(s){})",
                    filled.iter().map(|(_, i)| i.parts.len()).sum::<usize>(),
                    if filled.len() > 1 {
                        format!(", {} links", filled.len())
                    } else {
                        String::new()
                    }
                ));
                let dirs: Vec<String> = filled.into_iter().map(|(dir, _)| dir).collect();
                let args = self.import_args(&dirs, false);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                self.guest().hb(&args, timeouts::BULK, true)?;
                self.checkpoint()?;
                self.box_.timings.mark("import");
            }
        }
        guest_dir::remove(&mut self.guest(), &scratch)?;
        self.guest_dir = None;
        self.checkpoint()?;

        ui::say(format!("Refreshing guest assets in '{name}'"));
        if self.box_.from_base {
            // The tools are the base's and live outside /data: only what the restored
            // /data needs again (login environment, layout, manifest) is redone.
            self.setup()
                .provision_steps(Some(crate::base::guest_prep::PER_BOX_STEPS))?;
        } else {
            self.setup().provision()?;
        }
        self.checkpoint()?;
        self.guest().hb(&["init"], timeouts::SHORT, true)?;
        let policy = self.box_.containment.clone();
        self.guest().write_manifest(Some(&policy))?;
        self.checkpoint()?;
        self.box_.timings.mark("refresh assets");

        ui::say(format!("Starting the restored services in '{name}'"));
        // The restored tree carries no quiesce record (backups exclude it), so resume has
        // nothing of the source box to undo; up clears the pause import re-armed and waits
        // until Executor answers.
        self.guest().hb(&["resume"], timeouts::RESUME, true)?;
        self.guest().hb(&["up"], timeouts::RESUME, true)?;
        self.checkpoint()?;
        self.box_.timings.mark("resume");
        let env = &self.ctx.config.env;
        if env.install_executor && env.wire_executor_mcp {
            self.guest().hb(&["wire-mcp"], timeouts::SHORT, true)?;
        }
        self.checkpoint()?;
        let port = self.box_.port;
        self.setup().health(port)?;
        self.checkpoint()?;
        self.box_.timings.mark("wire and check");
        Ok(())
    }

    /// The restore went through: the box is complete.
    pub(super) fn complete(&mut self, what: &str) -> Result<()> {
        let timings = self.box_.timings.line();
        self.box_.transcript.line(&timings);
        tracing::info!("{timings}");
        self.box_.transcript.line(what);
        crate::state::Registry::new(&self.ctx.state).mark_complete(&self.name)
    }

    /// Reports, removes the guest scratch, and deletes the VM (or keeps it on request).
    /// Never resumes: a half-restored box must not run.
    pub(super) fn fail(&mut self, e: &anyhow::Error) -> ExitCode {
        let name = self.name.clone();
        let code = match self.signals.pending() {
            Some(sig) => {
                ui::error(format!(
                    "box {} {name} interrupted by {}",
                    self.verb,
                    DeferredSignals::name(sig)
                ));
                ExitCode::from(DeferredSignals::exit_status(sig))
            }
            None => {
                ui::error(format!(
                    "restore failed; attempting cleanup of the incomplete destination: {e:#}"
                ));
                ExitCode::FAILURE
            }
        };
        self.box_.transcript.line(&format!("failed: {e:#}"));
        if let Some(scratch) = self.guest_dir.take()
            && let Err(err) = guest_dir::remove(&mut self.guest(), &scratch)
        {
            guest_dir::warn_left(&self.box_.machine, &scratch, &err);
        }
        if self.keep_on_failure || std::env::var("BOX_KEEP_ON_FAILURE").is_ok_and(|v| v == "1") {
            if let Err(err) = guest_dir::remove_import_stages(&mut self.guest()) {
                ui::warn(format!(
                    "could not remove the interrupted import's staging dir in '{}': {err:#}",
                    self.box_.machine
                ));
            }
            crate::lifecycle::cleanup::mark_kept(
                &self.ctx.state,
                &name,
                &format!("box load failed while restoring: {e:#}"),
            );
            ui::warn(format!(
                "keeping the half-restored VM '{}' for inspection (it stays paused); remove it with: box rm {name} --force",
                self.box_.machine
            ));
        } else {
            let outcome = rollback_created(
                &self.ctx.state,
                &self.box_.smolvm,
                &name,
                &self.box_.machine,
                None,
                true,
            );
            self.box_.transcript.line(&format!("rollback: {outcome:?}"));
        }
        ui::warn(format!(
            "transcript: {}",
            self.box_.transcript.path().display()
        ));
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damaged(value: &str) -> DamagedDatabases {
        let mut manifest = RuntimeManifest::new();
        manifest.set(SQLITE_CHECK_KEY, value);
        damaged_databases(&manifest)
    }

    #[test]
    fn the_manifest_says_which_databases_were_saved_damaged_and_what_a_restore_does() {
        let found = damaged(
            "damaged home/agent/.hermes/state.db home/agent/.codex/logs.db (2 checked, 1 unchanged since the last save)",
        );
        assert_eq!(
            found.named,
            [
                (
                    "home/agent/.hermes/state.db".to_string(),
                    "a restore stops at it before anything is swapped (`box extract` still takes the files out)"
                ),
                (
                    "home/agent/.codex/logs.db".to_string(),
                    "a restore keeps it as it is"
                ),
            ]
        );
        assert_eq!(found.more, 0);
        assert!(
            damaged("ok (1 checked, 2 unchanged since the last save)")
                .named
                .is_empty()
        );
        assert!(damaged_databases(&RuntimeManifest::new()).named.is_empty());
    }

    #[test]
    fn a_hostile_value_is_shown_escaped_and_cut() {
        // The agent can write the manifest: a name that would move the cursor is escaped,
        // one that only looks like Codex's is not taken for it, and a flood is counted.
        let found = damaged("damaged home/agent/.hermes/x%1B[2Jy.db home/agent/.codexx/a.db");
        assert_eq!(found.named[0].0, "home/agent/.hermes/x\\x1b[2Jy.db");
        assert!(found.named[1].1.starts_with("a restore stops at it"));
        let flood: Vec<String> = (0..100)
            .map(|i| format!("home/agent/.hermes/{i}.db"))
            .collect();
        let found = damaged(&format!("damaged {}", flood.join(" ")));
        assert_eq!(found.named.len(), SqliteCheck::MAX_NAMED);
        assert_eq!(found.more, 100 - SqliteCheck::MAX_NAMED);
    }
}
