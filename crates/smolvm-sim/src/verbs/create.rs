//! `machine create`: writes the record only; nothing boots.

use std::io::Read;

use crate::cli::CreateCmd;
use crate::context::Ctx;
use crate::faults::Action;
use crate::image::refs::Resolved;
use crate::output::{self, VerbResult, config};
use crate::registry::{self, Record, State};

pub fn run(ctx: &Ctx, c: CreateCmd) -> VerbResult {
    if ctx.personality.is_head() {
        note_stray_flags(ctx, &c.command);
    }
    if let Some(from) = &c.from {
        let name = c.name.clone().unwrap_or_else(generate_name);
        return super::create_from::run(ctx, &c, from, name);
    }
    if c.smolfile.is_some() {
        return Err(config(
            "smolfile",
            "Smolfiles are not supported by smolvm-sim",
        ));
    }
    let labels = super::create_checks::check(ctx.personality, &c, &ctx.extras)?;
    let egress = super::create_egress::from_flags(ctx, &c)?;
    let net = c.net || egress.implies_net();
    let name = c.name.clone().unwrap_or_else(generate_name);
    registry::validate_name(&name).map_err(|r| config("create machine", r))?;
    super::create_checks::image_fetchable(ctx.personality, &c, &ctx.extras)?;
    let host_userland = crate::image::host_userland_from_env()?;
    let sim_image = match (&c.image, host_userland) {
        (Some(image), false) => match crate::image::resolve_at_create(image)? {
            Resolved::Buildable(b) => Some(b),
            Resolved::StandIn { stand_in, .. } => Some(stand_in),
            Resolved::Unknown => None,
        },
        _ => None,
    };
    let record = Record {
        name: name.clone(),
        state: State::Created,
        pid: None,
        pid_start_time: None,
        init_pid: None,
        slirp_pid: None,
        workload_pid: None,
        workload_start_time: None,
        cpus: c.cpus,
        mem: c.mem,
        image: c.image.clone(),
        entrypoint: Vec::new(),
        cmd: c.command.clone(),
        ports: c.port.clone(),
        mounts: c.volume.clone(),
        network: net,
        net_backend: c.net_backend.clone(),
        env: super::parse_env(&c.env),
        workdir: c.workdir.clone(),
        storage_gb: c.storage,
        overlay_gb: c.overlay,
        init: c.init.clone(),
        init_completed: false,
        created_at: registry::now_secs(),
        labels,
        secret_env: c.secret_env.clone(),
        secret_file: c.secret_file.clone(),
        gpu: c.gpu,
        gpu_vram_mib: c.gpu_vram_mib,
        allowed_cidrs: egress.allowed_cidrs,
        host_userland,
        sim_image,
        source_smolmachine: None,
        allowed_hosts: egress.allowed_hosts,
        block_private: egress.block_private,
        allow_private: egress.allow_private,
        credentials: egress.credentials,
        placeholders: egress.placeholders,
    };

    let _lock = registry::lock()?;
    if registry::load(&name)?.is_some() || registry::is_reserved(&name) {
        return Err(config(
            "create machine",
            format!("machine '{name}' already exists or is being created"),
        ));
    }
    let fault = ctx.fault_point("create", &name)?;
    super::create_egress::mint_ca(&registry::data_dir(&name), &name, &record.credentials)?;
    registry::save(&record)?;
    if fault == Some(Action::After) {
        return Err(crate::context::fault_error("create", &name));
    }
    print!(
        "{}",
        output::create_success(
            &name,
            c.cpus,
            c.mem,
            c.volume.len(),
            c.port.len(),
            c.init.len()
        )
    );
    Ok(0)
}

fn generate_name() -> String {
    let mut buf = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut buf);
    }
    format!("vm-{}", hex::encode(buf))
}

/// 1.9.2 names machine options written after `--` (they went to the workload).
fn note_stray_flags(ctx: &Ctx, command: &[String]) {
    let cmd = crate::cli::command(ctx.personality);
    let Some(create) = cmd
        .find_subcommand("machine")
        .and_then(|m| m.find_subcommand("create"))
    else {
        return;
    };
    let longs: Vec<String> = create
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let mut found: Vec<&str> = Vec::new();
    for w in command {
        if longs.iter().any(|l| l == w) && !found.contains(&w.as_str()) {
            found.push(w);
        }
    }
    if !found.is_empty() {
        eprintln!(
            "note: {} came after `--`, so {} passed to the workload and did not configure the machine. Machine options go before `--`.",
            found.join(", "),
            if found.len() == 1 {
                "it was"
            } else {
                "they were"
            }
        );
    }
}
