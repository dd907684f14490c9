//! Undoing a failed `box new` (docs/design.md, "new"; the seed's rules), exactly:
//!
//! * only a machine *this invocation* created is ever deleted (a failed create deletes
//!   nothing: the machine may belong to someone else who won a race);
//! * the machine is deleted with `-f`, then its absence is verified with `ls --json`; a
//!   delete error, or a listing that cannot be read, is never taken for absence;
//! * only then is the registry row dropped, under the registry lock (reused if we hold it,
//!   else tried once); when the lock is busy, the row stays and the user is told;
//! * whenever anything is uncertain the row stays and the recovery command is printed.

use box_proto::BoxName;

use crate::smolvm::Smolvm;
use crate::state::{LockGuard, LockKey, Registry, StateDir, locks};
use crate::ui;

/// What the rollback achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollback {
    /// The machine is gone and so is the row (or there was none).
    Clean,
    /// The machine is gone, the row stays (registry lock busy).
    MachineGoneRowKept,
    /// The machine may still exist; the row stays so `box rm --force` can finish the job.
    Uncertain,
}

/// Warning when a failed `machine create` left ownership unknown.
pub fn warn_create_failed(machine: &str) {
    ui::warn(format!(
        "smolvm create failed for '{machine}'; ownership is unknown, so no VM will be deleted automatically"
    ));
    ui::warn(format!(
        "inspect with: smolvm machine status --name '{machine}'"
    ));
}

fn keep_row(name: &BoxName, why: &str) {
    ui::warn(format!(
        "could not remove incomplete box '{name}' ({why}); registry metadata was preserved"
    ));
    ui::warn(format!("recover with: box rm {name} --force"));
}

/// Deletes the machine this invocation created and, once it is verifiably gone, the row.
/// `registry` is the registry lock if the caller still holds it.
pub fn rollback_created(
    state: &StateDir,
    smolvm: &Smolvm,
    name: &BoxName,
    machine: &str,
    registry: Option<LockGuard>,
    row_written: bool,
) -> Rollback {
    ui::say(format!("Removing the incomplete VM '{machine}'"));
    match smolvm.delete(machine) {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {} // already gone; the listing below confirms it
        Err(e) => {
            keep_row(name, &e.to_string());
            return Rollback::Uncertain;
        }
    }
    match smolvm.find(machine) {
        Ok(None) => {}
        Ok(Some(m)) => {
            keep_row(name, &format!("smolvm still lists it as {}", m.state));
            return Rollback::Uncertain;
        }
        Err(e) => {
            keep_row(name, &format!("cannot confirm it is gone: {e}"));
            return Rollback::Uncertain;
        }
    }
    if !row_written {
        ui::say(format!("Removed the incomplete VM '{machine}'"));
        return Rollback::Clean;
    }
    let guard = match registry {
        Some(g) => g,
        None => match locks::try_acquire(
            state,
            LockKey::Registry,
            &format!("box new {name} (rollback)"),
        ) {
            Ok(g) => g,
            Err(e) => {
                ui::warn(format!(
                    "removed VM '{machine}', but the registry lock is busy ({e}); metadata was preserved"
                ));
                ui::warn(format!(
                    "remove the stale entry later with: box rm {name} --force (or box doctor --fix)"
                ));
                return Rollback::MachineGoneRowKept;
            }
        },
    };
    let result = Registry::new(state).remove(name);
    drop(guard);
    match result {
        Ok(_) => {
            ui::say(format!("Removed the incomplete box '{name}'"));
            Rollback::Clean
        }
        Err(e) => {
            ui::warn(format!(
                "removed VM '{machine}', but its registry record could not be removed: {e:#}"
            ));
            ui::warn("remove the stale entry with: box doctor --fix");
            Rollback::MachineGoneRowKept
        }
    }
}

/// Notes on the box's row that a failed run kept it on purpose, so doctor says so rather
/// than suspecting a killed run. Best effort: the box is kept either way.
pub fn mark_kept(state: &StateDir, name: &BoxName, what: &str) {
    if let Err(e) = Registry::new(state).mark_kept(name, what) {
        tracing::warn!("cannot note that '{name}' was kept: {e:#}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::BoxRecord;

    /// A smolvm whose delete succeeds but whose listing then cannot be read: the "status
    /// ambiguous" case, which the simulator cannot single out (all `ls` calls look alike).
    fn ambiguous_smolvm(dir: &std::path::Path) -> Smolvm {
        crate::smolvm::fake_smolvm(
            dir,
            "case \"$2\" in\n  delete) echo 'Deleted machine: alpha';;\n  ls) echo 'Error: config operation failed: load database: database is locked' >&2; exit 1;;\nesac",
        )
    }

    #[test]
    fn an_unreadable_listing_after_delete_keeps_the_row() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().join("state"));
        let name = BoxName::parse("alpha").unwrap();
        let reg = Registry::new(&state);
        reg.insert(&BoxRecord {
            name: name.clone(),
            machine: "alpha".into(),
            web_port: None,
            created_at: "2026-11-29T07:00:00Z".into(),
            box_version: "0.1.0".into(),
            base_image: "ubuntu:24.04".into(),
            incomplete: true,
            kept_after_failure: None,
            machine_label: None,
            host: None,
            containment: None,
            backup_dir: None,
        })
        .unwrap();
        let smolvm = ambiguous_smolvm(tmp.path());
        let outcome = rollback_created(&state, &smolvm, &name, "alpha", None, true);
        assert_eq!(outcome, Rollback::Uncertain);
        assert!(reg.get(&name).unwrap().is_some(), "the row must be kept");
        // And nothing holds the registry lock afterwards.
        locks::try_acquire(&state, LockKey::Registry, "test").unwrap();
    }
}
