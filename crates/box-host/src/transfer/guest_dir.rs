//! The guest scratch dir of one transfer: `/root/hb-<save|load>-<stamp>-<pid>`, mode 0700,
//! root's home (not `/tmp`: the seed moved off it because smolvm staging there broke). It
//! holds plaintext parts, so it is removed before Executor resumes (save) and before the VM
//! is deleted (load), and a later save or load of the same box sweeps what a killed run
//! left (both run under the box lock, so no live transfer owns such a dir then).

use anyhow::{Result, bail};

use super::guest_hb::{Guest, timeouts};

/// Where scratch dirs live in the guest, and their name prefix.
pub const PARENT: &str = "/root";
pub const PREFIX: &str = "hb-";

/// The path of a new scratch dir for `kind` (`save` or `load`).
pub fn new_path(kind: &str) -> String {
    format!(
        "{PARENT}/{PREFIX}{kind}-{}-{}",
        super::stamp(),
        std::process::id()
    )
}

/// Removes `path` and checks it is gone.
pub fn remove(guest: &mut Guest<'_>, path: &str) -> Result<()> {
    guest.exec_ok(
        "removing the guest scratch dir",
        &["rm", "-rf", "--", path],
        timeouts::SHORT,
        false,
    )?;
    let out = guest.exec(&["test", "-e", path], timeouts::SHORT, false)?;
    if out.code == Some(1) {
        return Ok(());
    }
    bail!("{path} is still there after rm -rf")
}

/// Removes every `/root/hb-save-*` and `/root/hb-load-*` (scratch of killed runs). Only
/// call it under the box lock.
pub fn sweep_stale(guest: &mut Guest<'_>) -> Result<()> {
    // A save killed with SIGKILL may leave its export running for a moment (it ends at
    // its next write to the vanished box); rm -rf then races its last file: try again.
    let script = format!(
        "for d in {PARENT}/{PREFIX}save-* {PARENT}/{PREFIX}load-*; do \
         [ -e \"$d\" ] || continue; echo \"removing stale scratch $d\"; \
         for t in 1 2 3 4 5; do rm -rf -- \"$d\" 2>/dev/null && break; sleep 1; done; \
         [ ! -e \"$d\" ] || rm -rf -- \"$d\" || exit 1; done"
    );
    guest.exec_ok(
        "removing scratch left by an interrupted save or load",
        &["sh", "-c", &script],
        timeouts::SHORT,
        false,
    )?;
    Ok(())
}

/// Removes the staging dir a killed `hb import` left in the data root (the restored
/// plaintext so far; never a rollback dir, which holds the state from before a swap). For
/// a VM that stays after a failed load; the import is gone by then (its exec was killed),
/// but its last write may still race the first rm: try again.
pub fn remove_import_stages(guest: &mut Guest<'_>) -> Result<()> {
    let script = format!(
        "for d in /data/{stage}*; do [ -e \"$d\" ] || continue; \
         for t in 1 2 3 4 5; do rm -rf -- \"$d\" 2>/dev/null && break; sleep 1; done; \
         [ ! -e \"$d\" ] || rm -rf -- \"$d\" || exit 1; done",
        stage = box_proto::layout::RESTORE_STAGE_PREFIX
    );
    guest.exec_ok(
        "removing the staging dir of the interrupted import",
        &["sh", "-c", &script],
        timeouts::SHORT,
        false,
    )?;
    Ok(())
}

/// Prints how to remove a scratch dir box could not remove itself.
pub fn warn_left(machine: &str, path: &str, why: &anyhow::Error) {
    crate::ui::warn(format!(
        "could not remove the plaintext scratch dir {path} in box '{machine}': {why:#}"
    ));
    crate::ui::warn(format!(
        "remove it with: smolvm machine exec --name {machine} -- rm -rf -- {path} (the next box save or load of this box also removes it)"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_lives_in_roots_home() {
        let p = new_path("save");
        assert!(p.starts_with("/root/hb-save-"), "{p}");
        assert!(p.ends_with(&format!("-{}", std::process::id())));
    }
}
