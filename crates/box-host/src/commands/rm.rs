//! `box rm <name> [--force]`: show the newest backup and check that it restores the way
//! `box load` checks it before any VM (its whole chain found, each link decrypted and
//! validated on the tree the links before it build). Without `--force`, rm never deletes
//! past a check that failed or could not run: a damaged backup or a broken chain is
//! refused, naming the file; a passphrase that does not open the backup is asked for again
//! on the terminal, and refused when it came from the environment or none opens it; no
//! passphrase at all is refused too. Then rm asks for the exact name on the terminal
//! unless `--force`, and under the box lock stops, `delete -f`s, verifies the machine is
//! gone, and drops the row under the registry lock. `--force` never asks anything: it
//! checks the backup only with a passphrase the environment holds, and deletes whatever
//! the check says (saying it).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use secrecy::SecretString;

use super::Context;
use crate::backup::crypto::DecryptReader;
use crate::backup::{BackupError, chain, hex_sha, location, open_chain, passphrase, tree_cache};
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
        Newest::Unchecked(why) if !args.force => bail!(
            "cannot check that the latest backup of '{name}' restores: {why}\n\
             nothing was deleted; to delete it without that check: box rm {name} --force"
        ),
        Newest::Broken(why) => ui::warn(format!(
            "the latest backup of '{name}' does not restore ({why}); deleting anyway (--force)"
        )),
        Newest::Unchecked(why) => ui::say(format!("not checking that it restores ({why})")),
        Newest::None | Newest::Sound => {}
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
    /// Could not be checked (no passphrase, another passphrase, an unreadable dir): refused
    /// without `--force`, said with it.
    Unchecked(String),
    /// Damaged, or a link whose chain is broken: no restore would use it.
    Broken(String),
}

/// How many passphrases a person gets to type before rm gives up.
const TRIES: usize = 3;

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
        Err(e) => return Newest::Unchecked(format!("cannot look for its backups: {e:#}")),
    };
    let age = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| format!(" ({} old)", human_age(d.as_secs())))
        .unwrap_or_default();
    ui::say(format!("latest backup: {}{age}", path.display()));
    // Which backup a link builds on is written inside it: the passphrase is needed.
    let pass = match passphrase_that_opens(ctx, record, &path, force) {
        Ok(pass) => pass,
        Err(verdict) => return verdict,
    };
    // Opened as `box load` opens it (a link that does not open with the passphrase that
    // opened the newest is damaged, never "another passphrase").
    let checked = open_chain::find(&path, None, &pass).and_then(|found| {
        ui::say("checking that it restores (decrypting and validating it, as box load would)");
        found.validate(&pass).map(|v| (found.links.len(), v))
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
        Err(e) => Newest::Broken(format!("{e:#}")),
    }
}

/// The passphrase that opens the newest backup at `path`: the environment's or the
/// keychain's (one try), else asked on the terminal, again after one that does not open it
/// ([`TRIES`] times), never with `force`. `Err` is the verdict when none does: a file
/// damaged in its first bytes is broken (asking again would not help), a passphrase that
/// only is not this file's leaves it unchecked ([`unopened`]).
fn passphrase_that_opens(
    ctx: &Context,
    record: &BoxRecord,
    path: &Path,
    force: bool,
) -> Result<SecretString, Newest> {
    let mut from_environment = passphrase::from_environment();
    let tries = match (&from_environment, force) {
        (Some(_), _) => 1,
        (None, true) => {
            return Err(Newest::Unchecked(
                "--force, and no passphrase set (BOX_PASSPHRASE*, or the keychain) to check it with".into(),
            ));
        }
        (None, false) => TRIES,
    };
    let mut attempt = 1;
    loop {
        let resolved = from_environment
            .take()
            .unwrap_or_else(|| passphrase::resolve(passphrase::Purpose::Decrypt));
        let pass = resolved
            .map_err(|e| Newest::Unchecked(format!("the backup passphrase is needed ({e:#})")))?;
        match DecryptReader::open(path, &pass) {
            Ok(_) => return Ok(pass),
            Err(BackupError::WrongPassphrase) => match unopened(ctx, record, path) {
                Unopened::Damaged(why) => return Err(Newest::Broken(why)),
                Unopened::AnotherPassphrase(why) if attempt < tries => {
                    ui::warn(format!("{why}; try again"));
                    attempt += 1;
                }
                Unopened::AnotherPassphrase(why) => return Err(Newest::Unchecked(why)),
            },
            Err(e) => return Err(Newest::Broken(e.to_string())),
        }
    }
}

/// Why a passphrase did not open a backup.
enum Unopened {
    AnotherPassphrase(String),
    Damaged(String),
}

/// Tells "another passphrase" from "damaged" for a backup a passphrase did not open.
/// [`DecryptReader::open`] already calls damage in the first blocks damage; damage to the
/// salt, the S2K count or the encrypted session key derives another key, exactly as another
/// passphrase does, so the file alone cannot tell. What can is the SHA-256 box recorded
/// when a save of this box wrote or last read the file ([`tree_cache::Known`]): other
/// bytes now are damage (or a rewrite by another program), the same bytes are a file box
/// saved and verified under its passphrase, so this one is another.
fn unopened(ctx: &Context, record: &BoxRecord, path: &Path) -> Unopened {
    let another = |how: &str| {
        Unopened::AnotherPassphrase(format!(
            "the passphrase given does not open {}{how}",
            path.display()
        ))
    };
    let Some(recorded) = tree_cache::Known::recorded_digest(&ctx.state, &record.name, path) else {
        return another("");
    };
    match chain::file_digest(path) {
        Ok(now) if now == recorded => another(
            " (its bytes are those box saved and verified: it was saved under another passphrase)",
        ),
        Ok(now) => Unopened::Damaged(format!(
            "{} is damaged: its SHA-256 is {}, not the {} box recorded when it saved it",
            path.display(),
            hex_sha(&now),
            hex_sha(&recorded)
        )),
        Err(e) => Unopened::Damaged(format!("{e:#}")),
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
