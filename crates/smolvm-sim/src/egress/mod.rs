//! The network room of a machine with an egress policy (`--allow-host`, `--allow-cidr`,
//! `--block-private`, `--allow-private`, `--credential`): smolvm's gateway DNS filter, its
//! connect/sendto decisions, the credential interceptor and the denial log, put around the
//! simulator's slirp4netns NAT. A machine without a policy keeps the plain NAT.
//!
//! Layout while it runs: slirp4netns (started with `--disable-dns`, under the connect
//! filter) carries the guest's flows; the guest's resolver `10.0.2.3:53` is a socket of the
//! supervisor inside the guest's network namespace (the address on the guest's `lo`); the
//! supervisor's threads answer DNS, slirp's connects and, for credentials, HTTPS.

pub mod audit;
pub mod connect_filter;
pub mod dns;
pub mod policy;

use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::credentials::ca::Ca;
use crate::credentials::intercept::{Interceptor, Redirects};
use crate::registry::Record;
use audit::Audit;
use connect_filter::ConnectFilter;
use policy::Policy;

/// The guest-side address of the gateway's DNS.
pub const GUEST_DNS: &str = "10.0.2.3";

/// Everything a policy machine's supervisor serves. Made before slirp4netns starts (whose
/// very first netlink calls already wait on the connect filter), completed once the guest's
/// network is up.
pub struct Room {
    policy: Policy,
    audit: Audit,
    intercept: Option<(std::net::SocketAddr, Redirects)>,
    interceptor: Option<Interceptor>,
    dns: Option<(UdpSocket, TcpListener)>,
}

/// Block the supervisor's stop signals in the calling thread: only its main thread may take
/// them (a thread spawned before the main thread blocks them would otherwise be picked).
fn block_stop_signals_here() {
    // SAFETY: building and installing this thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The policy a record asks for, as the starting process's environment shapes it.
pub fn policy_of(r: &Record) -> Policy {
    let allow_private_env = std::env::var("SMOLVM_EGRESS_ALLOW_PRIVATE")
        .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    Policy::new(
        &r.allowed_cidrs,
        r.allowed_hosts.as_deref(),
        r.block_private,
        &r.allow_private,
        allow_private_env,
    )
}

/// Run `ip ARGS` inside the network namespace of `pid` (the host's `ip`: the guest's image
/// need not have one).
fn ip_in(pid: i32, args: &[&str]) -> Result<(), String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("guest network namespace: {e}"))?;
    let fd = ns.as_raw_fd();
    let mut cmd = Command::new("ip");
    // Run by `machine start`: none of its environment (bound credentials' values) goes on.
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setns is a plain syscall, async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The DNS sockets, made inside the guest's network namespace by a thread that enters it.
fn dns_sockets(pid: i32) -> Result<(UdpSocket, TcpListener), String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| format!("guest network namespace: {e}"))?;
    std::thread::spawn(move || {
        // SAFETY: setns on this thread only (network namespaces are per thread).
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(format!("setns: {}", std::io::Error::last_os_error()));
        }
        let at = format!("{GUEST_DNS}:53");
        let udp = UdpSocket::bind(&at).map_err(|e| format!("dns udp {at}: {e}"))?;
        let tcp = TcpListener::bind(&at).map_err(|e| format!("dns tcp {at}: {e}"))?;
        Ok((udp, tcp))
    })
    .join()
    .map_err(|_| "dns socket thread panicked".to_string())?
}

impl Room {
    /// The policy, the audit trail and, with credential bindings, the interceptor.
    pub fn new(r: &Record, data: &Path) -> Result<Self, String> {
        let mut room = Self {
            policy: policy_of(r),
            audit: Audit::new(data),
            intercept: None,
            interceptor: None,
            dns: None,
        };
        if !r.credentials.is_empty() {
            let ca = Ca::load(data, &r.name, &r.credentials)?;
            let redirects = Redirects::default();
            let (i, addr) = Interceptor::bind(
                ca,
                r.credentials.clone(),
                r.placeholders.clone(),
                redirects.clone(),
            )
            .map_err(|e| format!("credential interceptor: {e}"))?;
            room.intercept = Some((addr, redirects));
            room.interceptor = Some(i);
        }
        Ok(room)
    }

    /// Answer slirp4netns's calls (pid `slirp`, started under the filter) from now on.
    pub fn start_filter(&self, slirp: i32) -> Result<(), String> {
        let mut filter = ConnectFilter::attach(slirp, self.policy.clone(), self.audit.clone())
            .map_err(|e| format!("egress filter on slirp4netns: {e}"))?;
        filter.intercept = self.intercept.clone();
        std::thread::spawn(move || {
            block_stop_signals_here();
            filter.serve();
        });
        Ok(())
    }

    /// The guest's resolver address and the DNS sockets behind it, in the guest's network
    /// namespace (guest PID 1 `init_pid`).
    pub fn open_dns(&mut self, init_pid: i32) -> Result<(), String> {
        ip_in(
            init_pid,
            &["addr", "add", &format!("{GUEST_DNS}/32"), "dev", "lo"],
        )?;
        self.dns = Some(dns_sockets(init_pid)?);
        Ok(())
    }

    /// Serve DNS and HTTPS on threads of the supervisor.
    pub fn spawn(self) {
        if let Some((udp, tcp)) = self.dns {
            let dns = dns::Filter {
                policy: self.policy,
                audit: self.audit,
                stand_ins: dns::stand_ins_from_env(),
                upstream: dns::host_upstream(),
            };
            let dns2 = dns.clone();
            std::thread::spawn(move || dns.serve_udp(udp));
            std::thread::spawn(move || dns2.serve_tcp(tcp));
        }
        if let Some(i) = self.interceptor {
            std::thread::spawn(move || i.serve());
        }
    }
}
