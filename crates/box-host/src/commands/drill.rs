//! `box drill NAME [BACKUP] [--keep] [--json]`: a restore drill. An integrity check is not
//! a restore; this one restores.
//!
//! backup found (the newest of NAME, or the one named) → passphrase → pass 1 over its
//! chain, as `box load` validates it, before anything is created → the chain unpacked on
//! the host into a private scratch dir (`<state>/tmp`, removed on exit and signals; it needs
//! the data's size in host disk) and listed: what the chain restores to → a throwaway box
//! `drill-<name>-<stamp>` made and restored exactly as `box load` makes one (the sealed
//! policy, from a base when there is one) → `hb doctor` in it → its `/data` listed in the
//! guest and compared with the backup's listing → when the source box runs, its `/data`
//! listed too: a source that changed since the save is said, not counted as damage → the
//! throwaway box removed whatever happened (HUP/INT/TERM included), unless `--keep`.
//!
//! The throwaway box's registry row stays "incomplete" all its life (it is never marked
//! complete unless kept): a drill killed with SIGKILL leaves a box `box ls` shows as
//! incomplete, which `box doctor --fix` (or `box rm drill-… --force`) removes.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use box_proto::BoxName;
use secrecy::SecretString;

use super::Context;
use super::load::{LoadRun, describe, recorded};
use super::new;
use crate::backup::load::ValidatedBackup;
use crate::backup::tree_listing::{self, Difference, Listing};
use crate::backup::{BackupError, chain, cleanup, load, location, open_chain, passphrase};
use crate::cli::DrillArgs;
use crate::lifecycle::cleanup::{Rollback, rollback_created};
use crate::lifecycle::guest::HB_PATH;
use crate::lifecycle::signals::DeferredSignals;
use crate::smolvm::Smolvm;
use crate::state::reserved::DRILL_PREFIX;
use crate::state::{LockKey, Registry, locks};
use crate::transfer::guest_hb::Guest;
use crate::transfer::{self, host_dir};
use crate::ui;

/// As `box doctor` gives `hb doctor`.
const DOCTOR_TIMEOUT: Duration = Duration::from_secs(60);

/// How long listing a `/data` in a guest may take (it reads every byte once).
const LISTING_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

pub fn run(ctx: &Context, args: &DrillArgs) -> Result<ExitCode> {
    let source = BoxName::parse(&args.name)?;
    if args.json {
        ui::set_quiet(true);
    }
    let file = match &args.backup {
        Some(given) => location::find_file(&ctx.config, &ctx.state, given),
        None => newest_backup(ctx, &source)?,
    };
    load::check_backup_file(&file)?;
    cleanup::install();
    cleanup::set_deferred(true);
    let signals = DeferredSignals::install()?;
    host_dir::sweep_stale(&ctx.state);
    let pass = passphrase::resolve(passphrase::Purpose::Decrypt)?;
    let part_size = transfer::part_size()?;

    ui::say(format!(
        "Drill of {}: decrypting and validating it as box load does",
        file.display()
    ));
    let found = match open_chain::find(&file, None, &pass) {
        Ok(found) => found,
        Err(_) if signals.pending().is_some() => return Ok(interrupted(&signals, &source)),
        Err(e) => return Ok(fail_before_box(args, &file, &format!("{e:#}"))),
    };
    let chain = match found.validate(&pass) {
        Ok(v) => v,
        Err(_) if signals.pending().is_some() => return Ok(interrupted(&signals, &source)),
        Err(e) if matches!(e.downcast_ref(), Some(BackupError::Unsupported(_))) => return Err(e),
        Err(e) => return Ok(fail_before_box(args, &file, &format!("{e:#}"))),
    };
    for warning in chain.warnings() {
        ui::warn(warning);
    }
    let Some((tip, _)) = chain.links.last() else {
        bail!("nothing in {}", file.display());
    };
    describe(tip);

    ui::say("Listing what the backup restores to (unpacked in a private dir on the host)");
    let expected = match backup_listing(ctx, &chain.links, &pass) {
        Ok(l) => l,
        Err(_) if signals.pending().is_some() => return Ok(interrupted(&signals, &source)),
        Err(e) => return Ok(fail_before_box(args, &file, &format!("{e:#}"))),
    };
    if signals.pending().is_some() {
        return Ok(interrupted(&signals, &source));
    }

    let name = throwaway_name(&source)?;
    let _lock = locks::try_acquire(
        &ctx.state,
        LockKey::Box(name.clone()),
        &format!("box drill {source}"),
    )?;
    if Registry::new(&ctx.state).get(&name)?.is_some() {
        bail!("box '{name}' already exists; run the drill again in a second");
    }
    let carried = crate::lifecycle::containment::settle(crate::policy::carried::for_load(
        &ctx.config.env,
        recorded(tip),
        &crate::policy::carried::CarryFlags::default(),
    )?);
    ui::say(format!("Creating the throwaway box '{name}'"));
    let provisioned = match new::create_and_provision(ctx, &name, "drill", false, false, carried) {
        Ok(p) => p,
        Err(code) => {
            ui::error(format!(
                "could not make the throwaway box '{name}'; nothing was restored"
            ));
            return Ok(code);
        }
    };
    let mut run = LoadRun {
        ctx,
        verb: "drill",
        name: name.clone(),
        box_: provisioned,
        signals,
        guest_dir: None,
        keep_on_failure: false,
        own_token: false,
    };
    let validated: Vec<ValidatedBackup> = chain.links.into_iter().map(|(v, _)| v).collect();
    if let Err(e) = run.restore(&validated, &pass, part_size) {
        // Removes the throwaway box (keep_on_failure is off) and says why.
        return Ok(run.fail(&e));
    }

    let outcome = examine(ctx, &mut run, &source, &expected);
    let interrupted_by = run.signals.pending();
    let kept = args.keep && interrupted_by.is_none();
    let removed = if kept {
        Registry::new(&ctx.state).mark_complete(&name)?;
        None
    } else {
        Some(remove(ctx, &run))
    };
    if let Some(sig) = interrupted_by {
        ui::error(format!(
            "box drill {source} interrupted by {}",
            DeferredSignals::name(sig)
        ));
        return Ok(ExitCode::from(DeferredSignals::exit_status(sig)));
    }
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            ui::error(format!("the drill could not finish: {e:#}"));
            return Ok(ExitCode::FAILURE);
        }
    };
    let report = Report {
        box_name: source.to_string(),
        backup: file.display().to_string(),
        links: validated.len(),
        throwaway: name.to_string(),
        kept,
        removed: removed.map(|r| r == Rollback::Clean),
        doctor_ok: outcome.doctor_ok,
        doctor: outcome.doctor,
        entries: expected.len(),
        differences: outcome.differences,
        source: outcome.source,
    };
    report.print(args.json)?;
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The newest backup of `source`: where its record says its chain is, or (a box no
/// longer registered) the newest file of that name in any place backups are kept.
fn newest_backup(ctx: &Context, source: &BoxName) -> Result<std::path::PathBuf> {
    if let Some(record) = Registry::new(&ctx.state).get(source)? {
        if let Some(newest) = location::chain_of(&ctx.config, &record)?.newest {
            return Ok(newest);
        }
    } else {
        let places = location::places_of(&ctx.config, &ctx.state, None)?;
        let files = location::files_by_box(&places, Some(source.as_str()))?;
        let newest = files
            .into_values()
            .flatten()
            .filter_map(|p| chain::box_and_stamp(&p).map(|(_, stamp)| (stamp, p)))
            .max();
        if let Some((_, path)) = newest {
            return Ok(path);
        }
    }
    bail!(
        "no backups of '{source}' found (see box backups {source}); save one with: box save {source}"
    )
}

/// `drill-<name>-<stamp>`, the name cut to fit a box name.
fn throwaway_name(source: &BoxName) -> Result<BoxName> {
    let stamp = transfer::stamp();
    let room = box_proto::name::MAX_NAME_LEN - DRILL_PREFIX.len() - 1 - stamp.len();
    let cut: String = source.as_str().chars().take(room).collect();
    Ok(BoxName::parse(&format!(
        "{DRILL_PREFIX}{}-{stamp}",
        cut.trim_end_matches('-')
    ))?)
}

/// The chain unpacked into a private scratch dir and listed; the dir is gone afterwards.
fn backup_listing(
    ctx: &Context,
    links: &[(
        ValidatedBackup,
        Option<std::rc::Rc<box_proto::archive::chain_state::ChainState>>,
    )],
    pass: &SecretString,
) -> Result<Listing> {
    // Kind "load": a scratch dir a killed drill left is swept by the next save or load.
    let scratch = host_dir::create(&ctx.state, "load")?;
    let tree = scratch.path().join("tree");
    load::extract_chain(links, pass, &tree)?;
    tree_listing::of_host_dir(&tree, &|| Ok(cleanup::check()?))
}

/// What the drill found in the restored box.
struct Outcome {
    doctor_ok: bool,
    doctor: String,
    differences: Vec<Difference>,
    source: SourceState,
}

/// The source box, as the drill found it.
#[derive(Debug, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum SourceState {
    /// Not a registered box here (or not running): nothing to compare.
    NotCompared { why: String },
    /// Its `/data` is what the backup holds, and the restored box equals both.
    Unchanged,
    /// It changed since the save: the restore is compared with the backup only.
    Changed { differences: Vec<Difference> },
}

/// `hb doctor`, then the restored tree against the backup's, then the source's.
fn examine(
    ctx: &Context,
    run: &mut LoadRun<'_>,
    source: &BoxName,
    expected: &Listing,
) -> Result<Outcome> {
    ui::say(format!("Running hb doctor in '{}'", run.name));
    // As `box doctor` runs it: its failure is a finding, not an error of the drill.
    let out = guest(run).exec(&[HB_PATH, "doctor"], DOCTOR_TIMEOUT, true)?;
    let doctor_ok = out.success();
    let doctor = if doctor_ok {
        "hb doctor passed".to_string()
    } else {
        format!(
            "hb doctor failed ({}){}",
            crate::lifecycle::guest::status(&out),
            crate::lifecycle::guest::last_lines(&out.stderr, &out.stdout)
        )
    };
    transfer::checkpoint(Some(run.signals.flag()))?;
    ui::say(format!("Listing /data in '{}'", run.name));
    let restored = list_guest(&mut guest(run))?;
    transfer::checkpoint(Some(run.signals.flag()))?;
    let differences = tree_listing::compare(expected, &restored);
    let source = source_state(ctx, run, source, expected)?;
    Ok(Outcome {
        doctor_ok,
        doctor,
        differences,
        source,
    })
}

fn guest<'a>(run: &'a mut LoadRun<'_>) -> Guest<'a> {
    Guest {
        smolvm: &run.box_.smolvm,
        machine: &run.box_.machine,
        transcript: &mut run.box_.transcript,
        cancel: Some(run.signals.flag()),
    }
}

/// A guest's `/data`, listed by [`tree_listing::guest_script`] and parsed as hostile data.
fn list_guest(guest: &mut Guest<'_>) -> Result<Listing> {
    let script = tree_listing::guest_script();
    let out = guest.exec_ok(
        "listing /data",
        &["sh", "-c", &script],
        LISTING_TIMEOUT,
        true,
    )?;
    tree_listing::parse_guest(&out.stdout)
}

/// The source box's `/data` against the backup, when it is registered here and running.
fn source_state(
    ctx: &Context,
    run: &mut LoadRun<'_>,
    source: &BoxName,
    expected: &Listing,
) -> Result<SourceState> {
    let not = |why: &str| Ok(SourceState::NotCompared { why: why.into() });
    let Some(record) = Registry::new(&ctx.state).get(source)? else {
        return not("no box of that name here");
    };
    let smolvm: Smolvm = crate::lifecycle::boxes::smolvm(ctx, &record)?;
    match crate::lifecycle::boxes::machine(&smolvm, &record) {
        Ok(m) if m.state.is_running() => {}
        Ok(_) => return not("not running"),
        Err(e) => return not(&format!("{e:#}")),
    }
    ui::say(format!("Listing /data in the source box '{source}'"));
    let listing = list_guest(&mut Guest {
        smolvm: &smolvm,
        machine: &record.machine,
        transcript: &mut run.box_.transcript,
        cancel: Some(run.signals.flag()),
    })?;
    let differences = tree_listing::compare(expected, &listing);
    Ok(if differences.is_empty() {
        SourceState::Unchanged
    } else {
        SourceState::Changed { differences }
    })
}

/// Removes the throwaway box: its VM, then (once smolvm confirms it gone) its row.
fn remove(ctx: &Context, run: &LoadRun<'_>) -> Rollback {
    let outcome = rollback_created(
        &ctx.state,
        &run.box_.smolvm,
        &run.name,
        &run.box_.machine,
        None,
        true,
    );
    if outcome != Rollback::Clean {
        ui::warn(format!(
            "the throwaway box '{}' may be left; remove it with: box rm {} --force",
            run.name, run.name
        ));
    }
    outcome
}

/// A backup that does not open or validate: the drill fails before any box exists.
fn fail_before_box(args: &DrillArgs, file: &std::path::Path, why: &str) -> ExitCode {
    if args.json {
        let value = serde_json::json!({
            "box": args.name,
            "backup": file.display().to_string(),
            "passed": false,
            "restorable": false,
            "error": why,
        });
        println!("{value}");
    }
    ui::error(format!(
        "drill failed: {} does not restore: {why}; no box was made",
        file.display()
    ));
    ExitCode::FAILURE
}

fn interrupted(signals: &DeferredSignals, source: &BoxName) -> ExitCode {
    let sig = signals.pending().unwrap_or(15);
    ui::error(format!(
        "box drill {source} interrupted by {} before any box was made",
        DeferredSignals::name(sig)
    ));
    ExitCode::from(DeferredSignals::exit_status(sig))
}

/// What the drill reports.
#[derive(Debug, serde::Serialize)]
struct Report {
    #[serde(rename = "box")]
    box_name: String,
    backup: String,
    links: usize,
    throwaway: String,
    kept: bool,
    /// Whether the throwaway box is verifiably gone (`None`: kept).
    removed: Option<bool>,
    doctor_ok: bool,
    doctor: String,
    /// Entries the backup's tree holds (what was compared).
    entries: usize,
    differences: Vec<Difference>,
    source: SourceState,
}

impl Report {
    fn passed(&self) -> bool {
        self.doctor_ok && self.differences.is_empty() && self.removed != Some(false)
    }

    fn print(&self, json: bool) -> Result<()> {
        if json {
            let mut value = serde_json::to_value(self)?;
            value["passed"] = self.passed().into();
            println!("{value}");
            return Ok(());
        }
        println!(
            "Drill of {} ({}, {} link(s)):",
            self.box_name, self.backup, self.links
        );
        println!("  {}", self.doctor);
        if self.differences.is_empty() {
            println!(
                "  the restored /data equals the backup's listing ({} entries compared)",
                self.entries
            );
        } else {
            println!(
                "  the restored /data differs from the backup's listing ({} difference(s)):",
                self.differences.len()
            );
            for d in &self.differences {
                println!("    {}: {}", d.path, d.what);
            }
        }
        match &self.source {
            SourceState::NotCompared { why } => {
                println!("  source box not compared ({why})");
            }
            SourceState::Unchanged => {
                println!(
                    "  the source box '{}' is unchanged since the save",
                    self.box_name
                );
            }
            SourceState::Changed { differences } => {
                println!(
                    "  the source box '{}' changed since the save ({} path(s), not damage):",
                    self.box_name,
                    differences.len()
                );
                for d in differences.iter().take(20) {
                    println!("    {}: {}", d.path, d.what);
                }
                if differences.len() > 20 {
                    println!("    … and {} more", differences.len() - 20);
                }
            }
        }
        if self.kept {
            println!(
                "  kept the throwaway box '{0}': box enter {0}; remove it with: box rm {0} --force",
                self.throwaway
            );
        }
        println!(
            "{}",
            if self.passed() {
                "drill passed"
            } else {
                "drill FAILED"
            }
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throwaway_name_is_a_valid_box_name_for_the_longest_source() {
        let long = BoxName::parse(&"a".repeat(box_proto::name::MAX_NAME_LEN)).unwrap();
        let name = throwaway_name(&long).unwrap();
        assert!(name.as_str().starts_with("drill-aaa"), "{name}");
        let dashed = BoxName::parse(&format!("{}-b", "a".repeat(40))).unwrap();
        assert!(throwaway_name(&dashed).is_ok());
        assert!(
            throwaway_name(&BoxName::parse("alpha").unwrap())
                .unwrap()
                .as_str()
                .starts_with("drill-alpha-")
        );
    }
}
