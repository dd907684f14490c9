//! `machine delete` (alias `rm`): stop if running, confirm unless -f, remove the record and
//! the data dir (the guest's whole filesystem). Not idempotent, like smolvm. Without `-f`,
//! up to 1.9.3 a non-terminal stdin is read as the answer (EOF: `Cancelled`, exit 0); 1.17
//! refuses it with exit 1.

use std::io::BufRead;

use crate::cli::DeleteCmd;
use crate::context::Ctx;
use crate::faults::Action;
use crate::machine::supervisor;
use crate::output::{self, VerbResult, agent, storage};
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, c: DeleteCmd) -> VerbResult {
    let name = c.name.clone();
    let _lock = registry::lock()?;
    let r = super::require(&name)?;
    if !c.force && !ctx.extras.cascade && ctx.personality.delete_needs_tty() {
        // SAFETY: isatty on fd 0 has no preconditions.
        if unsafe { libc::isatty(0) } != 1 {
            return Err(agent(
                "delete",
                format!(
                    "machine '{name}' needs confirmation but stdin is not a terminal; pass \
                     --force to delete it, or --cascade to remove it together with any \
                     machines branched from it"
                ),
            ));
        }
    }
    let fault = ctx.fault_point("delete", &name)?;
    match r.live_state(&ctx.faults) {
        State::Running => {
            println!("{}", output::stopping(&name));
            supervisor::kill_machine(&r);
        }
        State::Unreachable => supervisor::kill_machine(&r),
        _ => {}
    }
    if r.state == State::Running {
        let mut r2 = r.clone();
        super::mark_stopped(&mut r2)?;
    }
    if !c.force && !ctx.extras.cascade {
        eprint!("{}", output::delete_prompt(&name));
        let mut input = String::new();
        let ok = std::io::stdin().lock().read_line(&mut input).is_ok();
        let a = input.trim().to_lowercase();
        if !ok || (a != "y" && a != "yes") {
            println!("{}", output::CANCELLED);
            return Ok(0);
        }
    }
    let data = registry::data_dir(&name);
    let datadir_fails = fault == Some(Action::Datadir);
    let remove_data = || -> Result<(), std::io::Error> {
        if datadir_fails {
            return Err(std::io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        remove_in_background(&data)
    };
    if ctx.personality.is_head() {
        // 1.9.2: data dir first; on failure the record stays, so a retry is safe.
        if data.exists() {
            println!("{}", output::cleaning_up(&name));
            remove_data()
                .map_err(|e| storage("delete machine data", format!("{}: {e}", data.display())))?;
        }
        registry::remove(&name)?;
    } else {
        // 1.0.4: record first; a data dir that cannot be removed is only a warning.
        registry::remove(&name)?;
        if data.exists() {
            println!("{}", output::cleaning_up(&name));
            if let Err(e) = remove_data() {
                output::warn(&format!(
                    "Failed to remove VM data directory: {} error={e}",
                    data.display()
                ));
            }
        }
    }
    if fault == Some(Action::After) {
        return Err(crate::context::fault_error("delete", &name));
    }
    println!("{}", output::deleted(&name));
    Ok(0)
}

/// Takes the machine's data away at once, as smolvm's delete does (it unlinks a few disk
/// image files), and frees the space behind it. A simulated machine's disk is a directory
/// tree (a provisioned guest: hundreds of thousands of files) whose removal took longer
/// than box waits for a delete on a loaded host, which real smolvm never does. So the tree
/// is renamed aside (the one step that can fail, and fails as the removal would) and a
/// detached `rm -rf` removes it after this call has returned.
fn remove_in_background(data: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let mut aside = data.as_os_str().to_owned();
    aside.push(format!(".deleting-{}", std::process::id()));
    let aside = std::path::PathBuf::from(aside);
    std::fs::rename(data, &aside)?;
    let mut rm = std::process::Command::new("rm");
    rm.arg("-rf")
        .arg("--")
        .arg(&aside)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    if rm.spawn().is_err() {
        // No rm to hand it to: remove it here, slowly, rather than leave it.
        std::fs::remove_dir_all(&aside)?;
    }
    Ok(())
}
