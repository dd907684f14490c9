//! `pack create --from-vm NAME -o OUT`: a stopped machine's state as `OUT` (the stub
//! executable) plus `OUT.smolmachine` (the payload). Texts from smolvm v1.0.4
//! `src/cli/pack.rs` `pack_from_vm`/`finalize_pack` (~L465-860); v1.9.3 moved the export
//! into `src/pack_export.rs` with the same refusals. Format and quirks: `crate::pack`.

use std::os::unix::fs::PermissionsExt;

use crate::cli::PackCreateCmd;
use crate::context::Ctx;
use crate::machine::rootfs;
use crate::output::{VerbResult, agent, config};
use crate::pack;
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, c: PackCreateCmd) -> VerbResult {
    let Some(vm_name) = c.from_vm.clone() else {
        return Err(config(
            "pack create",
            "smolvm-sim packs only machines (--from-vm NAME); packing an image or a Smolfile \
             is not simulated",
        ));
    };
    if c.smolfile.is_some() {
        return Err(config(
            "smolfile",
            "Smolfiles are not supported by smolvm-sim",
        ));
    }
    let r = registry::load(&vm_name)?
        .ok_or_else(|| agent("pack from VM", format!("VM '{vm_name}' not found")))?;
    if r.live_state(&ctx.faults) == State::Running {
        return Err(agent(
            "pack from VM",
            format!(
                "VM '{vm_name}' is running. Stop it first with: smolvm machine stop --name {vm_name}"
            ),
        ));
    }
    let data = registry::data_dir(&vm_name);
    let guest = rootfs::guest_dir(&data);
    if !guest.is_dir() {
        // smolvm's overlay.raw appears at the first start.
        return Err(agent(
            "pack from VM",
            format!(
                "overlay disk not found at {}. The VM may not have been started yet.",
                data.join("overlay.raw").display()
            ),
        ));
    }
    if !r.host_userland
        && (data.join(pack::shared::POINTER).exists() || pack::boot_layer(&data).is_some())
    {
        // Its files are the pack's layer plus its own upper dir; smolvm's export flattens
        // them (v1.9.3 src/pack_export.rs), the simulator does not.
        return Err(config(
            "pack create",
            format!(
                "smolvm-sim cannot pack '{vm_name}': it was created from a pack, and \
                 flattening its layers is not simulated"
            ),
        ));
    }
    ctx.fault_point("pack", &vm_name)?;
    println!("Packing VM '{vm_name}' snapshot...");
    println!("Collecting runtime libraries...");
    println!("Collecting agent rootfs...");
    println!("Creating storage template...");
    if let (Some(image), false) = (&r.image, r.host_userland) {
        // An image machine is exported through a temporary VM that pulls the image again
        // (v1.0.4: "Pull the same image ... the agent needs the manifest"; v1.9.3: "Pulling
        // IMAGE in export VM..."), so packing needs the image's registry.
        if ctx.personality.is_head() {
            eprintln!("Pulling {image} in export VM...");
        } else {
            println!("Starting agent VM to export layers...");
        }
        crate::image::cache::pull(image, r.sim_image.as_deref())?;
        println!("Exporting 1 layers...");
        println!("Exporting container overlay...");
    }
    let manifest = pack::manifest_for(&r, c.entrypoint.as_deref(), c.cpus, c.mem);
    let sidecar = pack::sidecar_for(&c.output);
    println!(
        "Copying overlay disk ({})...",
        data.join("overlay.raw").display()
    );
    let size = pack::write(&manifest, &guest, &sidecar)?;
    let stub = format!(
        "#!/bin/sh\necho 'smolvm-sim: this is the stub of a simulated pack; use smolvm machine \
         create --from {}' >&2\nexit 1\n",
        sidecar.display()
    );
    std::fs::write(&c.output, stub)
        .and_then(|_| std::fs::set_permissions(&c.output, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| agent("pack binary", format!("{}: {e}", c.output.display())))?;
    println!(
        "Packed: {} (stub: 1KB, total: {}KB)",
        c.output.display(),
        size / 1024 + 1
    );
    println!(
        "Assets: {} ({}KB compressed)",
        sidecar.display(),
        size / 1024
    );
    println!("\nRun with: {}", c.output.display());
    println!("Note: Keep the .smolmachine file alongside the binary");
    println!("Options: --help for usage");
    Ok(0)
}
