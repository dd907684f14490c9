//! `box doctor` for a remote host (above the driver: it asks smolvm there, through it): the connection, smolvm there, and what decides whether
//! VMs can boot and keep running there (KVM for the uid that runs them, systemd-logind
//! killing a logged-out user's processes, free disk and memory).
//!
//! One remote shell script gathers the facts as `key=value` lines; [`judge`] turns them
//! into doctor lines, each saying what to do. `/dev/kvm` is judged by the same rules as on
//! this machine ([`kvm::judge`]), from facts read there.

use std::time::Duration;

use super::kvm::{self, DevNode, KvmFacts};
use super::{Check, Status, host_checks};
use crate::smolvm::Smolvm;

/// Below this much free disk where smolvm keeps its machines, doctor warns (each machine's
/// storage disk is 20 GiB sparse and grows as the box is used).
const DISK_WARN_MIB: u64 = 10 * 1024;
/// Below this, a new box will not get far.
const DISK_FAIL_MIB: u64 = 2 * 1024;
const MEM_WARN_MIB: u64 = 2 * 1024;

/// Reads the facts; prints `key=value` lines. Nothing it runs needs privileges.
const FACTS: &str = concat!(
    r#"if [ -e /dev/kvm ]; then echo "kvm_dev=$(stat -c '%a %u %g' /dev/kvm 2>/dev/null)"; fi; "#,
    r#"if ( : <>/dev/kvm ) 2>/dev/null; then echo kvm_open=ok; else echo "kvm_open=$( ( : <>/dev/kvm ) 2>&1 | tail -n 1)"; fi; "#,
    r#"grep -qw vmx /proc/cpuinfo && echo virt=vmx; grep -qw svm /proc/cpuinfo && echo virt=svm; "#,
    r#"grep -qw hypervisor /proc/cpuinfo && echo guest=1; "#,
    r#"for m in kvm_intel kvm_amd kvm_pvm; do [ -e /sys/module/$m ] && echo mod=$m; done; "#,
    r#"echo "euid=$(id -u)"; echo "user=$(id -un)"; "#,
    r#"[ "${SMOLVM_VM_UID_DROP-}" = off ] && echo uid_drop=off; "#,
    r#"g=$(getent group kvm 2>/dev/null | cut -d: -f3); [ -n "$g" ] && echo "kvm_gid=$g"; "#,
    r#"if command -v loginctl >/dev/null 2>&1; then "#,
    r#"echo "linger=$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)"; "#,
    r#"echo "kill_user=$(loginctl show -p KillUserProcesses --value 2>/dev/null)"; "#,
    r#"else echo loginctl=missing; fi; "#,
    r#"d=${SMOLVM_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}}; [ -d "$d" ] || d=$HOME; "#,
    r#"echo "disk_dir=$d"; echo "disk_free_kib=$(df -Pk "$d" 2>/dev/null | awk 'NR==2 {print $4}')"; "#,
    r#"echo "mem_avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null)"; "#,
    r#"echo "kernel=$(uname -sr)""#,
);

/// Every remote-host line of `box doctor` for the host `smolvm` runs on (nothing for
/// this machine).
pub fn checks(smolvm: &Smolvm) -> Vec<Check> {
    let Some(host) = smolvm.host() else {
        return Vec::new();
    };
    let scope = format!("host {host}");
    let mut out = Vec::new();
    let reach = match smolvm.session() {
        Some(s) => s.ensure_open().map(|()| s.target().by_hand()),
        None => Ok(String::new()),
    };
    match reach {
        Ok(by_hand) => out.push(Check::new(
            &scope,
            "ssh",
            Status::Ok,
            format!("reachable over ssh (`{by_hand}`), host key known"),
        )),
        Err(e) => {
            // Nothing else can be asked there.
            out.push(Check::new(&scope, "ssh", Status::Fail, e.to_string()));
            return out;
        }
    }
    let version = smolvm.version();
    match &version {
        Ok(v) if v.is_tested() => out.push(Check::new(
            &scope,
            "smolvm",
            Status::Ok,
            format!("smolvm {v} there"),
        )),
        Ok(v) => out.push(Check::new(
            &scope,
            "smolvm",
            Status::Warn,
            format!(
                "smolvm {v} there is outside the checked range {}",
                crate::smolvm::version::checked_range()
            ),
        )),
        Err(e) => out.push(Check::new(&scope, "smolvm", Status::Fail, e.to_string())),
    }
    match smolvm.host_shell(FACTS, &[], Duration::from_secs(30)) {
        Ok(o) => {
            let facts = Facts::parse(&o.stdout);
            out.extend(judge(&scope, &facts));
            if let Ok(v) = version
                && let Some(mut c) =
                    host_checks::seed_memory(v, facts.mem_avail_kib.map(|k| k / 1024))
            {
                c.scope = scope.clone();
                out.push(c);
            }
        }
        Err(e) => out.push(Check::new(
            &scope,
            "facts",
            Status::Fail,
            format!("cannot read the host's facts: {e}"),
        )),
    }
    out
}

/// What the facts script printed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Facts {
    pub kvm_dev: Option<(u32, u32, u32)>,
    pub kvm_open: Option<String>,
    pub virt: Option<&'static str>,
    pub guest: bool,
    pub modules: Vec<&'static str>,
    pub euid: Option<u32>,
    pub user: String,
    pub uid_drop_off: bool,
    pub kvm_gid: Option<u32>,
    /// `None`: no loginctl (no systemd).
    pub logind: Option<(String, String)>,
    pub disk_dir: String,
    pub disk_free_kib: Option<u64>,
    pub mem_avail_kib: Option<u64>,
}

impl Facts {
    pub fn parse(text: &str) -> Self {
        let mut f = Facts::default();
        let mut linger = String::new();
        let mut kill_user = String::new();
        let mut has_loginctl = true;
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim();
            match k {
                "kvm_dev" => {
                    let p: Vec<&str> = v.split_whitespace().collect();
                    if let [m, u, g] = p[..]
                        && let (Ok(m), Ok(u), Ok(g)) =
                            (u32::from_str_radix(m, 8), u.parse(), g.parse())
                    {
                        f.kvm_dev = Some((m, u, g));
                    }
                }
                "kvm_open" => f.kvm_open = Some(v.to_string()),
                "virt" => {
                    f.virt = f.virt.or(match v {
                        "vmx" => Some("vmx"),
                        "svm" => Some("svm"),
                        _ => None,
                    })
                }
                "guest" => f.guest = v == "1",
                "mod" => {
                    if let Some(m) = ["kvm_intel", "kvm_amd", "kvm_pvm"]
                        .into_iter()
                        .find(|m| *m == v)
                    {
                        f.modules.push(m);
                    }
                }
                "euid" => f.euid = v.parse().ok(),
                "user" => f.user = v.to_string(),
                "uid_drop" => f.uid_drop_off = v == "off",
                "kvm_gid" => f.kvm_gid = v.parse().ok(),
                "linger" => linger = v.to_string(),
                "kill_user" => kill_user = v.to_string(),
                "loginctl" => has_loginctl = v != "missing",
                "disk_dir" => f.disk_dir = v.to_string(),
                "disk_free_kib" => f.disk_free_kib = v.parse().ok(),
                "mem_avail_kib" => f.mem_avail_kib = v.parse().ok(),
                _ => {}
            }
        }
        if has_loginctl {
            f.logind = Some((linger, kill_user));
        }
        f
    }

    fn kvm(&self) -> Option<KvmFacts> {
        Some(KvmFacts {
            dev: self
                .kvm_dev
                .map(|(mode, uid, gid)| DevNode { mode, uid, gid }),
            open_rw: match self.kvm_open.as_deref()? {
                "ok" => Ok(()),
                e => Err(e.trim_start_matches("sh: ").to_string()),
            },
            virt_flag: self.virt,
            is_guest: self.guest,
            modules: self.modules.clone(),
            euid: self.euid?,
            uid_drop_off: self.uid_drop_off,
            kvm_gid: self.kvm_gid,
        })
    }
}

/// The doctor lines the facts give, each with its fix.
pub fn judge(scope: &str, f: &Facts) -> Vec<Check> {
    let mut out = Vec::new();
    match f.kvm() {
        Some(k) => out.extend(kvm::judge(&k).into_iter().map(|mut c| {
            c.scope = scope.to_string();
            c
        })),
        None => out.push(Check::new(
            scope,
            "kvm",
            Status::Warn,
            "could not read /dev/kvm's state there",
        )),
    }
    let user = if f.user.is_empty() { "USER" } else { &f.user };
    out.push(match &f.logind {
        None => Check::new(
            scope,
            "logind",
            Status::Skip,
            "no loginctl there (no systemd-logind): nothing stops a user's VMs when box's ssh session ends",
        ),
        Some((linger, kill)) if linger.is_empty() && kill.is_empty() => Check::new(
            scope,
            "logind",
            Status::Skip,
            "loginctl is there but systemd-logind did not answer (not running): nothing stops a user's VMs when box's ssh session ends",
        ),
        Some((linger, kill)) => {
            let lingers = linger == "yes";
            match (kill.as_str(), lingers) {
                (_, true) => Check::new(
                    scope,
                    "logind",
                    Status::Ok,
                    format!("systemd Linger is on for {user}: VMs outlive box's ssh sessions"),
                ),
                ("yes", false) => Check::new(
                    scope,
                    "logind",
                    Status::Fail,
                    format!(
                        "systemd-logind has KillUserProcesses=yes and Linger is off for {user}: every box there stops when box's ssh connection closes; run `sudo loginctl enable-linger {user}` there"
                    ),
                ),
                _ => Check::new(
                    scope,
                    "logind",
                    Status::Warn,
                    format!(
                        "Linger is off for {user} (KillUserProcesses={}): VMs survive logout today, but a logind change would stop them; `sudo loginctl enable-linger {user}` there makes it certain",
                        if kill.is_empty() { "unknown" } else { kill }
                    ),
                ),
            }
        }
    });
    out.push(match f.disk_free_kib.map(|k| k / 1024) {
        None => Check::new(
            scope,
            "disk",
            Status::Warn,
            format!("could not read the free space of {} there", f.disk_dir),
        ),
        Some(mib) if mib < DISK_FAIL_MIB => Check::new(
            scope,
            "disk",
            Status::Fail,
            format!(
                "{mib} MiB free in {} there: a box needs GiBs; free space, or move smolvm's data (SMOLVM_DATA_DIR) to a larger disk",
                f.disk_dir
            ),
        ),
        Some(mib) if mib < DISK_WARN_MIB => Check::new(
            scope,
            "disk",
            Status::Warn,
            format!(
                "{mib} MiB free in {} there; boxes grow as they are used: free space, or move smolvm's data (SMOLVM_DATA_DIR)",
                f.disk_dir
            ),
        ),
        Some(mib) => Check::new(
            scope,
            "disk",
            Status::Ok,
            format!("{mib} MiB free in {} there", f.disk_dir),
        ),
    });
    out.push(match f.mem_avail_kib.map(|k| k / 1024) {
        None => Check::new(
            scope,
            "memory",
            Status::Warn,
            "could not read MemAvailable there",
        ),
        Some(mib) if mib < MEM_WARN_MIB => Check::new(
            scope,
            "memory",
            Status::Warn,
            format!(
                "{mib} MiB of memory available there: a box asks for MEM_MIB (2048 by default); stop other boxes there or lower MEM_MIB"
            ),
        ),
        Some(mib) => Check::new(
            scope,
            "memory",
            Status::Ok,
            format!("{mib} MiB of memory available there"),
        ),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEMD_HOST: &str = "kvm_dev=660 0 993\nkvm_open=ok\nvirt=vmx\nmod=kvm_intel\neuid=1000\nuser=agent\nkvm_gid=993\nlinger=no\nkill_user=yes\ndisk_dir=/home/agent/.cache\ndisk_free_kib=52428800\nmem_avail_kib=16777216\n";

    fn find<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} line in {checks:?}"))
    }

    #[test]
    fn logind_killing_a_logged_out_user_fails_with_the_fix() {
        let f = Facts::parse(SYSTEMD_HOST);
        let checks = judge("host ssh://h", &f);
        let l = find(&checks, "logind");
        assert_eq!(l.status, Status::Fail);
        assert!(
            l.detail.contains("sudo loginctl enable-linger agent"),
            "{}",
            l.detail
        );
        assert!(checks.iter().all(|c| c.scope == "host ssh://h"));
        assert_eq!(find(&checks, "disk").status, Status::Ok);
        assert_eq!(find(&checks, "memory").status, Status::Ok);
        let lingering = Facts::parse(&SYSTEMD_HOST.replace("linger=no", "linger=yes"));
        assert_eq!(find(&judge("s", &lingering), "logind").status, Status::Ok);
    }

    #[test]
    fn no_systemd_is_said_not_failed() {
        let f =
            Facts::parse(&SYSTEMD_HOST.replace("linger=no\nkill_user=yes\n", "loginctl=missing\n"));
        let l = find(&judge("s", &f), "logind").clone();
        assert_eq!(l.status, Status::Skip);
        assert!(l.detail.contains("no loginctl"), "{}", l.detail);
        let silent = Facts::parse(
            &SYSTEMD_HOST.replace("linger=no\nkill_user=yes\n", "linger=\nkill_user=\n"),
        );
        assert_eq!(find(&judge("s", &silent), "logind").status, Status::Skip);
    }

    #[test]
    fn little_disk_or_memory_is_flagged_and_kvm_uses_the_local_rules() {
        let f = Facts::parse(
            &SYSTEMD_HOST
                .replace("disk_free_kib=52428800", "disk_free_kib=1048576")
                .replace("mem_avail_kib=16777216", "mem_avail_kib=1048576")
                .replace(
                    "kvm_open=ok",
                    "kvm_open=sh: 1: cannot create /dev/kvm: Permission denied",
                ),
        );
        let checks = judge("s", &f);
        assert_eq!(find(&checks, "disk").status, Status::Fail);
        assert_eq!(find(&checks, "memory").status, Status::Warn);
        assert!(
            checks
                .iter()
                .any(|c| c.status == Status::Fail && c.detail.contains("/dev/kvm")),
            "{checks:?}"
        );
    }

    /// The facts script runs on a real remote (this machine, over sshd) and says something
    /// for every line.
    #[test]
    fn the_facts_script_runs_over_ssh() {
        let Some(h) = crate::remote::ssh::test_host::test_host() else {
            return;
        };
        let dir = h.dir.path().join("bin");
        std::fs::create_dir_all(&dir).unwrap();
        let _ = crate::smolvm::fake_smolvm(&dir, "echo 'smolvm 1.9.2'");
        let target =
            crate::remote::ssh::SshTarget::new(&h.host, &h.ssh_command, Some(&h.state())).unwrap();
        let s = Smolvm::over_ssh(
            std::sync::Arc::new(crate::remote::ssh::Session::new(target)),
            &dir.join("smolvm").to_string_lossy(),
            None,
        );
        let checks = checks(&s);
        let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(find(&checks, "ssh").status, Status::Ok, "{checks:?}");
        assert_eq!(find(&checks, "smolvm").detail, "smolvm 1.9.2 there");
        for n in ["logind", "disk", "memory"] {
            assert!(names.contains(&n), "{names:?}");
        }
        assert_ne!(find(&checks, "disk").status, Status::Warn, "{checks:?}");
        let out = s.host_shell(FACTS, &[], Duration::from_secs(30)).unwrap();
        let f = Facts::parse(&out.stdout);
        assert_eq!(f.euid, Some(0));
        assert!(f.mem_avail_kib.is_some());
    }

    #[test]
    fn an_unreachable_host_is_one_failed_line() {
        let Some(h) = crate::remote::ssh::test_host::test_host() else {
            return;
        };
        h.forget_host_key();
        let target =
            crate::remote::ssh::SshTarget::new(&h.host, &h.ssh_command, Some(&h.state())).unwrap();
        let s = Smolvm::over_ssh(
            std::sync::Arc::new(crate::remote::ssh::Session::new(target)),
            "smolvm",
            None,
        );
        let checks = checks(&s);
        assert_eq!(checks.len(), 1, "{checks:?}");
        assert_eq!(checks[0].status, Status::Fail);
        assert!(
            checks[0]
                .detail
                .contains("host key of ssh://boxtest is unknown")
        );
    }
}
