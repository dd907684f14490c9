//! `machine start`: boot the guest and its workload; idempotent when already running.

use crate::cli::StartCmd;
use crate::context::Ctx;
use crate::faults::Action;
use crate::machine::{rootfs, supervisor};
use crate::output::{self, VerbResult, config};
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, c: StartCmd) -> VerbResult {
    let name = c.name.clone().unwrap_or_else(|| "default".to_string());
    let mut _lock = registry::lock()?;
    let mut r = super::require(&name)?;
    match r.live_state(&ctx.faults) {
        State::Running => {
            println!("{}", output::already_running(&name, r.live_pid()));
            return Ok(0);
        }
        State::Unreachable => {
            println!("{}", output::unreachable_cleanup(&name, r.pid.unwrap_or(0)));
            supervisor::kill_machine(&r);
        }
        State::Paused => return Err(super::refuse_paused("start")),
        _ => {}
    }
    for other in registry::list()? {
        if other.name == name || !other.really_running() {
            continue;
        }
        for (h, _) in &r.ports {
            if other.ports.iter().any(|(oh, _)| oh == h) {
                return Err(config(
                    "start machine",
                    format!(
                        "host port {h} is already in use by running machine '{}'",
                        other.name
                    ),
                ));
            }
        }
    }
    if !r.ports.is_empty() && r.net_backend.as_deref() == Some("tsi") {
        return Err(config(
            "ports",
            "published ports require the virtio-net backend (TSI is outbound-only); \
             remove --net-backend tsi or set it to virtio-net",
        ));
    }
    let fault = ctx.fault_point("start", &name)?;
    rootfs::check_home(&crate::home::home()).map_err(|e| config("start machine", e))?;
    if !r.host_userland && r.image.is_none() {
        return Err(config(
            "start machine",
            "smolvm-sim cannot boot a machine without --image (smolvm's bare agent VM runs \
             its Alpine agent rootfs, which the simulator does not have): create it with \
             --image debian:13, or with SMOLVM_SIM_HOST_USERLAND=1 for the host-userland \
             fast-test guest",
        ));
    }
    if r.source_smolmachine.is_some() {
        // A machine made from a pack boots from the layers extracted at create; 1.0.4's
        // cache eviction can remove them (crate::pack). The wording is the simulator's:
        // smolvm's own failure text for this case was not read.
        let data = registry::data_dir(&name);
        let cache = data.join("pack");
        let shared = data.join(crate::pack::shared::POINTER).exists();
        if shared && crate::pack::shared::read_pointer(&data).is_none() {
            return Err(crate::output::agent(
                "start",
                format!(
                    "packed layers missing: the shared copy {} names is gone; recreate the \
                     machine from its .smolmachine",
                    data.join(crate::pack::shared::POINTER).display()
                ),
            ));
        }
        if !shared && !cache.join(crate::pack::EXTRACTED_MARKER).exists() {
            return Err(crate::output::agent(
                "start",
                format!(
                    "packed layers missing: {} has no {} (the extraction was evicted or \
                     removed); recreate the machine with SMOLVM_PACK_CACHE_MAX_BYTES above \
                     the pack's size",
                    cache.display(),
                    crate::pack::EXTRACTED_MARKER
                ),
            ));
        }
    }
    eprintln!("{}", output::starting(&name, r.mounts.len(), r.ports.len()));
    if !r.init_completed && !r.host_userland {
        // First boot pulls the image (smolvm: in the guest, after boot; here: before the
        // guest exists, so a failed pull leaves nothing running). A build can take a
        // minute: do it without the registry lock, then look at the record again.
        drop(_lock);
        let image = r.image.clone().unwrap_or_default();
        crate::image::cache::pull(&image, r.sim_image.as_deref())?;
        _lock = registry::lock()?;
        r = super::require(&name)?;
        if r.live_state(&ctx.faults) == State::Running {
            println!("{}", output::already_running(&name, r.live_pid()));
            return Ok(0);
        }
    }
    let l = supervisor::launch(&r)?;
    let first_boot = !r.init_completed;
    r.state = State::Running;
    r.pid = Some(l.pid);
    r.pid_start_time = registry::proc_start_time(l.pid);
    r.init_pid = Some(l.init_pid);
    r.slirp_pid = l.slirp_pid;
    r.workload_pid = (l.workload_pid > 0).then_some(l.workload_pid);
    r.workload_start_time = r.workload_pid.and_then(registry::proc_start_time);
    if !r.init.is_empty() || r.image.is_some() {
        r.init_completed = true;
    }
    registry::save(&r)?;
    if fault == Some(Action::After) {
        return Err(crate::context::fault_error("start", &name));
    }
    if !first_boot && !r.init.is_empty() {
        println!("{}", output::init_skipped(r.init.len()));
    }
    println!("{}", output::running(&name, l.pid));
    Ok(0)
}
