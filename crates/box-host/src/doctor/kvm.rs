//! Whether a smolvm microVM can boot on this Linux host, for `box doctor`.
//!
//! Being able to open `/dev/kvm` is not enough, and was all doctor used to check:
//! * the hypervisor behind `/dev/kvm` must run libkrunfw's stock kernel. `kvm_intel` and
//!   `kvm_amd` (hardware virtualization, the CPU's `vmx`/`svm` flags) do; `kvm_pvm`
//!   (Pagetable-based VM, a software hypervisor some cloud VMs offer instead of nested
//!   virtualization) runs only PVM-patched guest kernels, so every boot hangs;
//! * the process that opens `/dev/kvm` is the VMM, not box: smolvm run as root drops each
//!   VMM to its own uid (from 2000000) keeping only the `kvm` group
//!   (`src/process.rs` at smolvm a5df5001: `vm_uid_drop_active`, `drop_privileges`), unless
//!   `SMOLVM_VM_UID_DROP=off`. A root-only `/dev/kvm` then fails every start.
//!
//! [`facts`] reads the host; [`judge`] is pure, so every combination is tested.

use super::{Check, Status};

/// What decides a boot, as read from this host.
#[derive(Debug, Clone)]
pub struct KvmFacts {
    /// `/dev/kvm`'s mode bits, owner and group; `None` when it does not exist.
    pub dev: Option<DevNode>,
    /// Whether this process could open it read-write (the error otherwise).
    pub open_rw: Result<(), String>,
    /// The CPU's `vmx` or `svm` flag, if any.
    pub virt_flag: Option<&'static str>,
    /// The CPU's `hypervisor` flag: this host is itself a VM.
    pub is_guest: bool,
    /// Loaded KVM modules among `kvm_intel`, `kvm_amd`, `kvm_pvm`.
    pub modules: Vec<&'static str>,
    pub euid: u32,
    /// `SMOLVM_VM_UID_DROP=off` in the environment smolvm inherits.
    pub uid_drop_off: bool,
    /// The gid of the `kvm` group, if the host has one.
    pub kvm_gid: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevNode {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl Default for DevNode {
    fn default() -> Self {
        Self {
            mode: 0o600,
            uid: 0,
            gid: 0,
        }
    }
}

/// The uid smolvm drops a VMM to (`VM_UID_BASE`, `src/process.rs`); only its magnitude
/// matters here: it is nobody the host knows.
const VM_UID_BASE: u32 = 2_000_000;

/// Reads this host's facts.
pub fn facts() -> KvmFacts {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata("/dev/kvm").ok().map(|m| DevNode {
        mode: m.mode() & 0o777,
        uid: m.uid(),
        gid: m.gid(),
    });
    let open_rw = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| e.to_string());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .flat_map(|l| l.split_whitespace())
        .collect();
    let virt_flag = ["vmx", "svm"].into_iter().find(|f| flags.contains(f));
    let modules = ["kvm_intel", "kvm_amd", "kvm_pvm"]
        .into_iter()
        .filter(|m| std::path::Path::new("/sys/module").join(m).exists())
        .collect();
    KvmFacts {
        dev,
        open_rw,
        virt_flag,
        is_guest: flags.contains(&"hypervisor"),
        modules,
        // SAFETY: geteuid has no preconditions and cannot fail.
        euid: unsafe { libc::geteuid() },
        uid_drop_off: std::env::var_os("SMOLVM_VM_UID_DROP").is_some_and(|v| v == "off"),
        kvm_gid: nix::unistd::Group::from_name("kvm")
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw()),
    }
}

/// doctor's lines: `/dev/kvm` for you, the hypervisor behind it, the VMM's uid.
pub fn judge(f: &KvmFacts) -> Vec<Check> {
    let h = "host";
    let mut out = Vec::new();
    let Some(dev) = f.dev else {
        out.push(Check::new(
            h,
            "kvm",
            Status::Fail,
            "/dev/kvm does not exist: no VM can boot here. Enable virtualization (VT-x/AMD-V) \
             in the firmware and load kvm_intel or kvm_amd; on a cloud VM, pick an instance \
             type with nested virtualization",
        ));
        return out;
    };
    out.push(match &f.open_rw {
        Ok(()) => Check::new(
            h,
            "kvm",
            Status::Ok,
            format!("/dev/kvm is readable and writable by uid {}", f.euid),
        ),
        Err(e) => Check::new(
            h,
            "kvm",
            Status::Fail,
            format!(
                "/dev/kvm: {e}; add yourself to the kvm group (sudo usermod -aG kvm $USER, \
                 then log in again)"
            ),
        ),
    });
    out.push(hypervisor(f));
    if let Some(c) = vmm_uid(f, dev) {
        out.push(c);
    }
    out
}

/// What serves `/dev/kvm`, and whether libkrunfw's kernel can run on it.
fn hypervisor(f: &KvmFacts) -> Check {
    let h = "host";
    let has = |m| f.modules.contains(&m);
    if has("kvm_pvm") && !has("kvm_intel") && !has("kvm_amd") {
        return Check::new(
            h,
            "hypervisor",
            Status::Fail,
            format!(
                "no VM can boot here: /dev/kvm is served by kvm_pvm (PVM, a software hypervisor \
                 that runs only PVM-patched guest kernels; smolvm's kernel is not one, so a start \
                 hangs until \"agent did not become ready\"), and the CPU has {}. Run box on a \
                 host with hardware virtualization, or on a VM type with nested virtualization \
                 (vmx/svm visible inside it)",
                f.virt_flag.unwrap_or("no vmx/svm flag")
            ),
        );
    }
    let Some(flag) = f.virt_flag else {
        return Check::new(
            h,
            "hypervisor",
            Status::Fail,
            format!(
                "no VM can boot here: the CPU shows no vmx/svm flag{}. Enable VT-x/AMD-V in the \
                 firmware{}",
                if f.is_guest {
                    " (this host is itself a VM without nested virtualization)"
                } else {
                    ""
                },
                if f.is_guest {
                    ", or turn on nested virtualization for this VM in its hypervisor"
                } else {
                    ""
                }
            ),
        );
    };
    let module = if flag == "vmx" {
        "kvm_intel"
    } else {
        "kvm_amd"
    };
    if !has(module) {
        return Check::new(
            h,
            "hypervisor",
            Status::Fail,
            format!("the CPU has {flag} but {module} is not loaded: sudo modprobe {module}"),
        );
    }
    if f.is_guest {
        Check::new(
            h,
            "hypervisor",
            Status::Ok,
            format!(
                "nested virtualization ({flag}, {module}): this host is itself a VM; boxes boot, \
                 more slowly than on bare metal"
            ),
        )
    } else {
        Check::new(
            h,
            "hypervisor",
            Status::Ok,
            format!("hardware virtualization ({flag}, {module})"),
        )
    }
}

/// As root, smolvm runs each VMM as its own uid with only the kvm group: can that open
/// `/dev/kvm`? `None` when the VMM runs as the caller (checked by the `kvm` line).
fn vmm_uid(f: &KvmFacts, dev: DevNode) -> Option<Check> {
    let h = "host";
    if f.euid != 0 {
        return None;
    }
    if f.uid_drop_off {
        return Some(Check::new(
            h,
            "vm uid",
            Status::Ok,
            "SMOLVM_VM_UID_DROP=off: smolvm runs each VM as root (no per-VM uid isolation)",
        ));
    }
    let world_rw = dev.mode & 0o006 == 0o006;
    let group_rw = dev.mode & 0o060 == 0o060 && f.kvm_gid == Some(dev.gid);
    if world_rw || group_rw {
        return Some(Check::new(
            h,
            "vm uid",
            Status::Ok,
            format!(
                "smolvm runs each VM as its own uid (from {VM_UID_BASE}) with the kvm group, \
                 which may open /dev/kvm (mode {:o})",
                dev.mode
            ),
        ));
    }
    Some(Check::new(
        h,
        "vm uid",
        Status::Fail,
        format!(
            "as root, smolvm runs each VM as its own uid (from {VM_UID_BASE}) keeping only the \
             kvm group, and that cannot open /dev/kvm (mode {:o}, {}): every start fails with \
             \"Error creating the Kvm object: Error(13)\". Give /dev/kvm to a kvm group \
             ({}chgrp kvm /dev/kvm && chmod 660 /dev/kvm, kept by a udev rule), or run box as \
             a user in the kvm group, or set SMOLVM_VM_UID_DROP=off (smolvm's switch; VMs then \
             run as root)",
            dev.mode,
            if f.kvm_gid.is_some() {
                "group is not kvm"
            } else {
                "this host has no kvm group"
            },
            if f.kvm_gid.is_some() {
                ""
            } else {
                "groupadd -r kvm && "
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine: root, a root-only /dev/kvm, no vmx/svm, kvm_pvm, no kvm group.
    fn pvm_host() -> KvmFacts {
        KvmFacts {
            dev: Some(DevNode::default()),
            open_rw: Ok(()),
            virt_flag: None,
            is_guest: true,
            modules: vec!["kvm_pvm"],
            euid: 0,
            uid_drop_off: false,
            kvm_gid: None,
        }
    }

    fn line<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} line in {checks:?}"))
    }

    #[test]
    fn a_pvm_host_fails_and_says_why_and_what_to_do() {
        let c = judge(&pvm_host());
        assert_eq!(line(&c, "kvm").status, Status::Ok, "box itself can open it");
        let hv = line(&c, "hypervisor");
        assert_eq!(hv.status, Status::Fail);
        assert!(
            hv.detail.starts_with("no VM can boot here"),
            "{}",
            hv.detail
        );
        assert!(hv.detail.contains("kvm_pvm") && hv.detail.contains("no vmx/svm"));
        assert!(hv.detail.contains("nested virtualization"), "{}", hv.detail);
        let uid = line(&c, "vm uid");
        assert_eq!(uid.status, Status::Fail);
        assert!(
            uid.detail.contains("SMOLVM_VM_UID_DROP=off"),
            "{}",
            uid.detail
        );
        assert!(uid.detail.contains("groupadd -r kvm"), "{}", uid.detail);
    }

    #[test]
    fn the_uid_drop_switch_and_a_kvm_group_satisfy_the_vm_uid_check() {
        let off = KvmFacts {
            uid_drop_off: true,
            ..pvm_host()
        };
        assert_eq!(line(&judge(&off), "vm uid").status, Status::Ok);
        let grouped = KvmFacts {
            dev: Some(DevNode {
                mode: 0o660,
                uid: 0,
                gid: 36,
            }),
            kvm_gid: Some(36),
            ..pvm_host()
        };
        assert_eq!(line(&judge(&grouped), "vm uid").status, Status::Ok);
        let user = KvmFacts {
            euid: 1000,
            ..pvm_host()
        };
        assert!(
            judge(&user).iter().all(|c| c.name != "vm uid"),
            "runs as you"
        );
    }

    #[test]
    fn hardware_nested_and_missing_virtualization_are_named() {
        let metal = KvmFacts {
            virt_flag: Some("vmx"),
            is_guest: false,
            modules: vec!["kvm_intel"],
            euid: 1000,
            ..pvm_host()
        };
        let c = judge(&metal);
        assert_eq!(line(&c, "hypervisor").status, Status::Ok);
        assert_eq!(
            line(&c, "hypervisor").detail,
            "hardware virtualization (vmx, kvm_intel)"
        );
        let nested = KvmFacts {
            is_guest: true,
            virt_flag: Some("svm"),
            modules: vec!["kvm_amd"],
            ..metal.clone()
        };
        let hv = judge(&nested);
        assert!(
            line(&hv, "hypervisor")
                .detail
                .starts_with("nested virtualization (svm")
        );
        let unloaded = KvmFacts {
            modules: vec![],
            ..metal.clone()
        };
        assert!(
            line(&judge(&unloaded), "hypervisor")
                .detail
                .contains("sudo modprobe kvm_intel")
        );
        let bare_guest = KvmFacts {
            virt_flag: None,
            is_guest: true,
            modules: vec![],
            ..metal.clone()
        };
        assert!(
            line(&judge(&bare_guest), "hypervisor")
                .detail
                .contains("turn on nested virtualization")
        );
        let none = KvmFacts { dev: None, ..metal };
        let c = judge(&none);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, Status::Fail);
    }
}
