//! What `machine create` refuses before it writes anything, with smolvm's texts and in its
//! order (`CreateCmd::run` in `src/cli/machine.rs`, then `build_vm_record` in
//! `src/cli/vm_common.rs`): labels, resources, network backend, duplicate host ports, the
//! name, and (1.9.x-1.17) a registry image that no network could pull.
//!
//! The simulator could boot every one of these machines; smolvm cannot, so neither may we:
//! a test that creates one here would pass against the simulator and fail against smolvm.

use std::collections::{BTreeMap, HashSet};

use crate::cli::{CreateCmd, ShExtras};
use crate::output::{SimError, config};
use crate::personality::Personality;

/// `--mem` below this is refused (`MIN_MEMORY_MIB`, `src/data/resources.rs`, 1.0.4 and 1.9).
const MIN_MEMORY_MIB: u32 = 64;

/// Every refusal, in smolvm's order; the labels a valid create records.
pub fn check(p: Personality, c: &CreateCmd, x: &ShExtras) -> Result<Labels, SimError> {
    let labels = parse_labels(p, &x.labels)?;
    resources(c)?;
    network_backend(p, c, x)?;
    duplicate_ports(c)?;
    Ok(labels)
}

pub type Labels = BTreeMap<String, String>;

/// `--label KEY=VALUE` (from 1.8.0, PR #899): `smolvm::util::parse_labels`. The value may
/// itself contain `=`.
pub(super) fn parse_labels(p: Personality, raw: &[String]) -> Result<Labels, SimError> {
    let mut out = Labels::new();
    if !p.is_head() {
        return Ok(out);
    }
    for entry in raw {
        let Some((k, v)) = entry.split_once('=') else {
            return Err(config(
                "--label",
                format!("expected KEY=VALUE, got '{entry}'"),
            ));
        };
        if k.is_empty() {
            return Err(config(
                "--label",
                format!("label key cannot be empty (in '{entry}')"),
            ));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// `VmResources::validate` (`src/data/resources.rs`, the same in 1.0.4 and 1.9.2).
fn resources(c: &CreateCmd) -> Result<(), SimError> {
    let op = "validate resources";
    if c.cpus == 0 {
        return Err(config(op, "CPU count must be at least 1"));
    }
    if c.cpus > 16 {
        eprintln!(
            "warning: requested {} vCPUs but the hypervisor supports at most 16; the VM will run with 16 vCPUs",
            c.cpus
        );
    }
    if c.mem < MIN_MEMORY_MIB {
        return Err(config(
            op,
            format!(
                "memory must be at least {MIN_MEMORY_MIB} MiB (got {} MiB)",
                c.mem
            ),
        ));
    }
    if c.storage == Some(0) {
        return Err(config(op, "storage disk size must be greater than 0 GiB"));
    }
    if c.overlay == Some(0) {
        return Err(config(op, "overlay disk size must be greater than 0 GiB"));
    }
    Ok(())
}

fn has_egress_policy(c: &CreateCmd, x: &ShExtras) -> bool {
    !c.allow_cidr.is_empty()
        || !c.allow_host.is_empty()
        || c.outbound_localhost_only
        || x.block_private
        || !x.allow_private.is_empty()
        || !x.credentials.is_empty()
        || !x.allow_host_patterns.is_empty()
}

/// `validate_requested_network_backend` (`src/network/launch.rs`): only an explicit
/// `--net-backend tsi` with ports (or, from 1.9, an egress policy) is a misconfiguration.
/// At 1.33 "TSI is rejected for policy-bearing machines" (`smolvm-network` 1.33.0
/// `egress.rs`), credential bindings and `--block-private` included (the simulator has no
/// libkrun `krun_set_stream_intercept`, so a credential cannot ride TSI here either).
fn network_backend(p: Personality, c: &CreateCmd, x: &ShExtras) -> Result<(), SimError> {
    let explicit_tsi = c.net_backend.as_deref() == Some("tsi");
    if explicit_tsi && !c.port.is_empty() {
        return Err(config(
            "ports",
            "published ports require the virtio-net backend (TSI is outbound-only); \
             remove --net-backend tsi or set it to virtio-net",
        ));
    }
    if p.is_head() && explicit_tsi && has_egress_policy(c, x) {
        return Err(config(
            "egress",
            "egress policy (--allow-cidr/--allow-host/--outbound-localhost-only/--block-private/\
             --allow-private/--credential) requires the virtio-net backend; TSI does not \
             enforce it. Remove --net-backend tsi or set it to virtio-net",
        ));
    }
    if c.net_backend.as_deref() == Some("virtio-net") && !wants_network(c, x) {
        return Err(config(
            "--net-backend",
            "--net-backend virtio-net requires --net",
        ));
    }
    Ok(())
}

/// `plan_launch_network`'s "wants network": `--net`, a published port or an egress policy.
pub fn wants_network(c: &CreateCmd, x: &ShExtras) -> bool {
    c.net || !c.port.is_empty() || has_egress_policy(c, x)
}

/// `PortMapping::check_duplicates`.
fn duplicate_ports(c: &CreateCmd) -> Result<(), SimError> {
    let mut seen = HashSet::new();
    for (h, _) in &c.port {
        if !seen.insert(*h) {
            return Err(config(
                "validate ports",
                format!("duplicate host port {h}: each host port can only be mapped once"),
            ));
        }
    }
    Ok(())
}

/// Last, after the name (`build_vm_record` → `validate_image_fetchable`, PR #807): a
/// registry image on a machine with no network. Local archives (`/…`, `./…`, `../…`,
/// `*.tar`, `*.tar.gz`, `*.tgz`) and `-` are not registry references.
pub fn image_fetchable(p: Personality, c: &CreateCmd, x: &ShExtras) -> Result<(), SimError> {
    let Some(image) = c.image.as_deref() else {
        return Ok(());
    };
    if !p.refuses_offline_registry_image() || wants_network(c, x) || !is_registry_ref(image) {
        return Ok(());
    }
    Err(config(
        "create machine",
        format!(
            "image '{image}' must be pulled from a registry, but this machine has no \
             network, so the pull can never succeed. Add --net (or publish a port with \
             -p, or set an egress policy with --allow-cidr/--allow-host). To keep the \
             machine network-isolated, supply the image locally instead: \
             `docker save {image} | smolvm machine create --image - ...`"
        ),
    ))
}

/// `image_source::classify`: anything that does not look like a local path is a registry
/// reference.
fn is_registry_ref(image: &str) -> bool {
    let local = image == "-"
        || image.starts_with('/')
        || image.starts_with("./")
        || image.starts_with("../")
        || [".tar", ".tar.gz", ".tgz"]
            .iter()
            .any(|s| image.ends_with(s));
    !local
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_refs_are_what_is_not_a_local_path() {
        for r in [
            "ubuntu:24.04",
            "debian:13",
            "docker.io/library/alpine",
            "ghcr.io/a/b:1",
        ] {
            assert!(is_registry_ref(r), "{r}");
        }
        for l in [
            "-",
            "/x/img.tar",
            "./img",
            "../rootfs",
            "img.tar.gz",
            "img.tgz",
        ] {
            assert!(!is_registry_ref(l), "{l}");
        }
    }
}
