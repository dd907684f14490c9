//! `box rm <name> [--force]`: show the newest backup and check that it restores the way
//! `box load` checks it before any VM (its whole chain found, each link decrypted and
//! validated on the tree the links before it build; refused without `--force` when it
//! does not), ask for the exact name on the terminal unless `--force`, then under the box
//! lock stop, `delete -f`, verify the machine is gone, and drop the row under the registry
//! lock. `--force` never asks anything: it checks the backup only with a passphrase the
//! environment holds, and deletes whatever the check says (saying it).

use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};

use super::Context;
use crate::backup::{BackupError, chain, load, location, passphrase, tree_cache};
use crate::gateway;
use crate::lifecycle::boxes;
use crate::state::{BoxRecord, LockKey, Registry, locks};
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::RmArgs) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let name = record.name.clone();
    match check_newest_backup(ctx, &record, args.force) {
        Newest::Broken(why) if !args.force => bail!(
            "the latest backup of '{name}' does not restore: {why}\n\
             its state is not saved anywhere a load could use; save it first (box save {name} --full), \
             or delete it anyway: box rm {name} --force"
        ),
        Newest::Broken(why) => ui::warn(format!(
            "the latest backup of '{name}' does not restore ({why}); deleting anyway (--force)"
        )),
        Newest::None | Newest::Sound | Newest::Unchecked => {}
    }
    if !args.force && !confirm(name.as_str())? {
        ui::error("deletion cancelled");
        return Ok(ExitCode::FAILURE);
    }
    let _lock = boxes::lock(ctx, &record, &format!("box rm {name}"))?;
    gateway::stop_with_box(&ctx.state, name.as_str());
    let smolvm = boxes::smolvm(ctx, &record)?;
    match smolvm.find(&record.machine)? {
        None => ui::warn(format!(
            "smolvm machine '{}' is already gone; removing the registry entry",
            record.machine
        )),
        Some(m) if !boxes::owned(&m, &record) => ui::warn(format!(
            "smolvm machine '{}' is not the one box created for '{name}' (its labels do not \
             carry this state dir's id): leaving it alone; removing the registry entry",
            record.machine
        )),
        Some(m) => {
            if m.state.is_running() {
                ui::say(format!("Stopping '{name}'"));
                if let Err(e) = smolvm.stop(&record.machine) {
                    ui::warn(format!("{e}; deleting anyway"));
                }
            }
            ui::say(format!("Deleting the VM '{}'", record.machine));
            match smolvm.delete(&record.machine) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => bail!(
                    "{e}; the registry entry of '{name}' was kept, retry: box rm {name} --force"
                ),
            }
            if let Some(m) = smolvm.find(&record.machine).with_context(|| {
                format!("cannot confirm the VM of '{name}' is gone; the registry entry was kept")
            })? {
                bail!(
                    "smolvm still lists '{}' ({}) after delete; the registry entry of '{name}' was kept, retry: box rm {name} --force",
                    m.name,
                    m.state
                );
            }
        }
    }
    let _reg = locks::try_acquire(&ctx.state, LockKey::Registry, &format!("box rm {name}"))?;
    Registry::new(&ctx.state).remove(&name)?;
    tree_cache::forget(&ctx.state, &name);
    ui::say(format!("deleted '{name}'"));
    Ok(ExitCode::SUCCESS)
}

/// What the newest backup of a box is worth as the box's last state.
enum Newest {
    None,
    /// Restores: a full backup, or a link whose whole chain is present and names each
    /// parent by its digest.
    Sound,
    /// Could not be checked (no passphrase, unreadable dir): said, not refused.
    Unchecked,
    /// A link whose chain is broken: no restore would use it.
    Broken(String),
}

/// Shows the newest backup and checks it as `box load` does before any VM: every link of
/// its chain present, each naming its parent's digest, in order, and each decrypted (MDC
/// checked) and validated on the tree the links before it build. `force`: only with a
/// passphrase from the environment, never a prompt.
fn check_newest_backup(ctx: &Context, record: &BoxRecord, force: bool) -> Newest {
    let name = record.name.as_str();
    // Wherever its saves went, whatever directory box runs from.
    let path = match location::chain_of(&ctx.config, record) {
        Ok(location::Chain {
            newest: Some(path), ..
        }) => path,
        Ok(location::Chain { place, .. }) => {
            ui::warn(format!(
                "no backup found for '{name}' in {}",
                place.dir.display()
            ));
            return Newest::None;
        }
        Err(e) => {
            ui::warn(format!("cannot look for backups of '{name}': {e:#}"));
            return Newest::Unchecked;
        }
    };
    let age = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| format!(" ({} old)", human_age(d.as_secs())))
        .unwrap_or_default();
    ui::say(format!("latest backup: {}{age}", path.display()));
    // Which backup a link builds on is written inside it: the passphrase is needed.
    let resolved = if force {
        match passphrase::from_environment(passphrase::Purpose::Decrypt) {
            Some(resolved) => resolved,
            None => {
                ui::say(
                    "not checking that it restores (--force, and no BOX_PASSPHRASE or BOX_PASSPHRASE_FILE to check it with)",
                );
                return Newest::Unchecked;
            }
        }
    } else {
        passphrase::resolve(passphrase::Purpose::Decrypt)
    };
    let pass = match resolved {
        Ok(p) => p,
        Err(e) => {
            ui::warn(format!(
                "cannot check that its chain is whole: the backup passphrase is needed ({e:#})"
            ));
            return Newest::Unchecked;
        }
    };
    let checked =
        chain::discover_links(&path, None, &|p| load::peek_place(p, &pass)).and_then(|links| {
            ui::say("checking that it restores (decrypting and validating it, as box load would)");
            load::validate_chain(&links, &pass).map(|v| (links.len(), v))
        });
    match checked {
        Ok((links, validated)) => {
            for warning in validated.warnings() {
                ui::warn(warning);
            }
            if links > 1 {
                ui::say(format!(
                    "it is link {links} of a chain; every link is there, names the one before it and restores"
                ));
            } else {
                ui::say("it restores");
            }
            Newest::Sound
        }
        // Another passphrase says nothing about the chain.
        Err(e) if matches!(e.downcast_ref(), Some(BackupError::WrongPassphrase)) => {
            ui::warn(format!(
                "cannot check that its chain is whole: the passphrase given does not open {}",
                path.display()
            ));
            Newest::Unchecked
        }
        Err(e) => Newest::Broken(format!("{e:#}")),
    }
}

fn human_age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s} seconds"),
        s if s < 2 * 3600 => format!("{} minutes", s / 60),
        s if s < 2 * 86400 => format!("{} hours", s / 3600),
        s => format!("{} days", s / 86400),
    }
}

/// Asks for the exact name on the controlling terminal. Without one, refuses.
fn confirm(name: &str) -> Result<bool> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let Ok(mut tty) = tty else {
        bail!("refusing non-interactive deletion without --force");
    };
    write!(tty, "Type the box name '{name}' to delete it permanently: ")?;
    tty.flush()?;
    let mut answer = String::new();
    BufReader::new(&tty).read_line(&mut answer)?;
    Ok(answer.trim_end_matches(['\n', '\r']) == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_naturally() {
        assert_eq!(human_age(5), "5 seconds");
        assert_eq!(human_age(600), "10 minutes");
        assert_eq!(human_age(3 * 3600), "3 hours");
        assert_eq!(human_age(3 * 86400), "3 days");
    }
}
