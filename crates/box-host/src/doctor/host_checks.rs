//! The host half of `box doctor`: smolvm present and in the checked range, whether a VM can
//! boot (Linux: `kvm`), Apple Silicon on macOS, a browser opener.

use std::path::Path;

use super::{Check, Status};
use crate::smolvm::{Smolvm, SmolvmVersion};

/// An Intel Mac: smolvm's installer stops at the download, since no `darwin-x86_64` archive is
/// published from 1.23.0 (smolvm docs/install/SKILL.md at f7b2b064, "Platform arms").
pub const INTEL_MAC: &str = "this is an Intel (x86_64) Mac: smolvm publishes no darwin-x86_64 \
     build from 1.23, and boxes need Apple Silicon (arm64) on macOS; use an Apple Silicon Mac \
     or a Linux host with KVM";

/// The memory smolvm's image seed helper asks for (docs/install/SKILL.md at f7b2b064).
const SEED_VM_MIB: u64 = 8192;

/// From 1.22 the first pull of each registry image boots an 8192 MiB seed helper whatever
/// `--mem` says; on a host with less free memory it cannot start, and smolvm waits 30 s
/// before pulling in the guest instead. A warning (with the cost) when that will happen.
pub fn seed_memory(v: SmolvmVersion, available_mib: Option<u64>) -> Option<Check> {
    let avail = available_mib?;
    if !v.seeds_images_in_a_helper_vm() || avail >= SEED_VM_MIB {
        return None;
    }
    Some(Check::new(
        "host",
        "memory",
        Status::Warn,
        format!(
            "smolvm {v} starts an {SEED_VM_MIB} MiB seed VM on the first pull of each image \
             (whatever MEM_MIB says) and this host has {avail} MiB available: the first box new \
             or box base build of an image waits 30 s for it to give up (\"WARN no image seed; \
             pulling in the guest\"), then pulls inside the box. Later boxes from the same image \
             do not pay it"
        ),
    ))
}

/// `MemAvailable` from /proc/meminfo, in MiB; `None` where there is none (macOS).
pub fn available_mib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// Whether SMOLVM names the bundled simulator (which needs no KVM).
pub fn is_simulator(smolvm: &Smolvm) -> bool {
    Path::new(smolvm.binary())
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("smolvm-sim"))
}

pub fn run(smolvm: &Smolvm) -> Vec<Check> {
    let mut out = Vec::new();
    let h = "host";
    match smolvm.version() {
        Ok(v) if v.is_tested() => {
            out.push(Check::new(h, "smolvm", Status::Ok, format!("smolvm {v}")))
        }
        Ok(v) => out.push(Check::new(
            h,
            "smolvm",
            Status::Warn,
            format!(
                "smolvm {v} is outside the checked range {}",
                crate::smolvm::version::checked_range()
            ),
        )),
        Err(e) => out.push(Check::new(h, "smolvm", Status::Fail, e.to_string())),
    }
    if let Ok(v) = smolvm.version()
        && !is_simulator(smolvm)
        && let Some(c) = seed_memory(v, available_mib())
    {
        out.push(c);
    }
    if let Ok(v) = smolvm.version() {
        out.push(if v.has_block_private() {
            Check::new(
                h,
                "lan",
                Status::Ok,
                "new boxes cannot reach the LAN (--block-private)",
            )
        } else {
            Check::new(
                h,
                "lan",
                Status::Warn,
                format!(
                    "smolvm {v} cannot close the LAN to a box (--block-private needs 1.33): new \
                     boxes can reach your local network; EGRESS_REQUIRE=1 makes box new refuse"
                ),
            )
        });
    }
    if cfg!(target_os = "linux") {
        if is_simulator(smolvm) {
            out.push(Check::new(
                h,
                "kvm",
                Status::Skip,
                "the smolvm simulator needs no /dev/kvm",
            ));
        } else {
            out.extend(super::kvm::judge(&super::kvm::facts()));
        }
    } else if cfg!(target_os = "macos") {
        if std::env::consts::ARCH == "aarch64" {
            out.push(Check::new(h, "cpu", Status::Ok, "Apple Silicon"));
        } else {
            out.push(Check::new(h, "cpu", Status::Fail, INTEL_MAC));
        }
    }
    match super::opener::find_opener() {
        Ok((p, _)) => out.push(Check::new(
            h,
            "opener",
            Status::Ok,
            format!("browser opener {}", p.display()),
        )),
        Err(e) => out.push(Check::new(
            h,
            "opener",
            Status::Warn,
            format!("{e} (only box open needs it)"),
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_vm_warning_needs_1_22_and_too_little_memory() {
        let v = |m| SmolvmVersion::new(1, m, 0);
        let w = seed_memory(v(22), Some(4096)).expect("a warning");
        assert_eq!(w.status, Status::Warn);
        assert!(w.detail.contains("8192 MiB seed VM") && w.detail.contains("4096 MiB available"));
        assert!(w.detail.contains("waits 30 s"), "{}", w.detail);
        assert!(
            seed_memory(v(21), Some(4096)).is_none(),
            "no seed helper before 1.22"
        );
        assert!(seed_memory(v(33), Some(16384)).is_none(), "room for it");
        assert!(
            seed_memory(v(33), None).is_none(),
            "unknown memory: no guess"
        );
    }
}
