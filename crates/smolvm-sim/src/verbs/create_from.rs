//! `machine create --from FILE.smolmachine`: a machine whose layers come from a pack.
//!
//! smolvm v1.0.4 `src/cli/machine.rs` `run_from_smolmachine` (~L1742-1900): the manifest's
//! image, entrypoint, cmd, env, workdir, gpu become the record's; `--cpus`/`--mem` override
//! the manifest only when they differ from smolvm's defaults (4, 8192); env is the
//! manifest's followed by `-e`; network is `--net || manifest.network`. The name is
//! reserved, the pack extracted into `<data dir>/pack`, and only then is the record
//! committed: a pack that fails to extract leaves no machine and no data dir. The machine
//! boots the extracted layers read-only under its own fresh upper dir (`pack::boot_layer`).

use std::path::Path;

use crate::cli::CreateCmd;
use crate::context::Ctx;
use crate::machine::rootfs;
use crate::output::{self, VerbResult, agent, config};
use crate::pack;
use crate::registry::{self, Record, State};

const DEFAULT_CPUS: u8 = 4;
const DEFAULT_MEM: u32 = 8192;

pub fn run(ctx: &Ctx, c: &CreateCmd, from: &Path, name: String) -> VerbResult {
    if !from.exists() {
        return Err(config(
            "create from .smolmachine",
            format!("file not found: {}", from.display()),
        ));
    }
    let manifest = pack::read_manifest(from)?;
    registry::validate_name(&name).map_err(|r| config("create machine", r))?;
    let cpus = if c.cpus != DEFAULT_CPUS {
        c.cpus
    } else {
        manifest.cpus
    };
    let mem = if c.mem != DEFAULT_MEM {
        c.mem
    } else {
        manifest.mem
    };
    // smolvm labels a machine from a pack as any other (`run_from_smolmachine` parses
    // `--label` too: src/cli/machine.rs at a5df5001).
    let labels = super::create_checks::parse_labels(ctx.personality, &ctx.extras.labels)?;
    let egress = super::create_egress::from_flags(ctx, c)?;
    let mut env = super::parse_env(&manifest.env);
    env.extend(super::parse_env(&c.env));
    let canonical = std::fs::canonicalize(from)
        .unwrap_or_else(|_| from.to_path_buf())
        .to_string_lossy()
        .into_owned();
    let record = Record {
        name: name.clone(),
        state: State::Created,
        pid: None,
        pid_start_time: None,
        init_pid: None,
        slirp_pid: None,
        workload_pid: None,
        workload_start_time: None,
        cpus,
        mem,
        image: manifest.image.clone(),
        entrypoint: manifest.entrypoint.clone(),
        cmd: manifest.cmd.clone(),
        ports: c.port.clone(),
        mounts: c.volume.clone(),
        network: c.net || manifest.network || egress.implies_net(),
        net_backend: c.net_backend.clone(),
        env,
        workdir: manifest.workdir.clone(),
        storage_gb: c.storage,
        overlay_gb: c.overlay,
        init: c.init.clone(),
        // The pack carries the layers: nothing is pulled at the first start.
        init_completed: true,
        created_at: registry::now_secs(),
        labels,
        secret_env: c.secret_env.clone(),
        secret_file: c.secret_file.clone(),
        gpu: c.gpu,
        gpu_vram_mib: c.gpu_vram_mib,
        allowed_cidrs: egress.allowed_cidrs,
        host_userland: manifest.host_userland,
        sim_image: manifest.sim_image.clone(),
        source_smolmachine: Some(canonical),
        allowed_hosts: egress.allowed_hosts,
        block_private: egress.block_private,
        allow_private: egress.allow_private,
        credentials: egress.credentials,
        placeholders: egress.placeholders,
    };

    let reservation = {
        let _lock = registry::lock()?;
        if registry::load(&name)?.is_some() || registry::is_reserved(&name) {
            return Err(config(
                "create machine",
                format!("machine '{name}' already exists or is being created"),
            ));
        }
        ctx.fault_point("create", &name)?;
        registry::reserve(&name)?
    };
    let data = registry::data_dir(&name);
    let made = extract_for(ctx, from, &data, &name, manifest.host_userland)
        .and_then(|()| super::create_egress::mint_ca(&data, &name, &record.credentials));
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&data);
        return Err(e);
    }
    {
        let _lock = registry::lock()?;
        registry::save(&record)?;
    }
    drop(reservation);
    print!(
        "{}",
        output::create_success(&name, cpus, mem, c.volume.len(), c.port.len(), c.init.len())
    );
    Ok(0)
}

/// 1.9 (Linux): the shared store, extracted once per pack (`pack::shared`). Otherwise:
/// extract into `<data>/pack` and apply the version's quirks; the extraction stays there as
/// the machine's read-only pack layer (`pack::boot_layer`), except for a host-userland
/// machine, whose guest dir is seeded from it.
fn extract_for(
    ctx: &Ctx,
    from: &Path,
    data: &Path,
    name: &str,
    host_userland: bool,
) -> Result<(), crate::output::SimError> {
    std::fs::create_dir_all(data)
        .map_err(|e| agent("create agent manager", format!("{}: {e}", data.display())))?;
    let _ = std::fs::write(data.join("name"), name);
    let cache = data.join("pack");
    println!("Extracting .smolmachine assets...");
    if pack::shared::enabled(ctx.personality) {
        let shared = pack::shared::materialize(from, data)?;
        if host_userland {
            // The host-userland root (the fast-test shortcut) is assembled from per-machine
            // directories that cannot stack a shared layer: it gets a copy. Image machines
            // boot the shared layer read-only (machine::rootfs).
            pack::seed_guest(&shared, &rootfs::guest_dir(data))?;
        }
        return Ok(());
    }
    pack::extract(from, &cache)?;
    if !ctx.personality.is_head() {
        pack::reown_root_files(&cache.join("guest"), pack::host_owner())?;
    }
    if pack::cap_cache(&cache, ctx.personality) {
        // 1.0.4's eviction removed what it just extracted; create still succeeds.
        return Ok(());
    }
    if host_userland {
        // The host-userland root (the fast-test shortcut) is assembled from per-machine
        // directories that cannot stack a pack layer: its persistent layers start as the
        // pack's (a rename: no second copy). Image machines keep the extraction in
        // `<data>/pack` and boot it read-only below their own, empty, upper dir
        // (machine::rootfs), as smolvm mounts `<data dir>/pack/layers` as the overlay's
        // lower layers (v1.0.4 crates/smolvm-agent/src/storage.rs
        // `prepare_for_run_persistent` L2296-2310, `get_packed_lowerdirs` L1973).
        let extracted_guest = cache.join("guest");
        let guest = rootfs::guest_dir(data);
        if extracted_guest.is_dir() {
            std::fs::rename(&extracted_guest, &guest)
                .or_else(|_| {
                    pack::seed_guest(&cache, &guest)
                        .map_err(|e| std::io::Error::other(e.to_string()))
                })
                .map_err(|e| agent("extract sidecar", e.to_string()))?;
        }
    }
    Ok(())
}
