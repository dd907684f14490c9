//! Where the simulator enforces a machine's egress policy: on slirp4netns's own `connect`,
//! `sendto` and `sendmsg` calls, the host sockets every guest flow becomes. smolvm's gateway
//! decides at the same point (`TcpRelayTable::create_tcp_socket`: "disallowed destinations
//! are dropped before any host socket is created"), so the guest sees what smolvm's guest
//! sees: a refused TCP connect (smoltcp answers the SYN with a reset; slirp does the same for
//! ECONNREFUSED) and silently dropped datagrams.
//!
//! slirp4netns runs under a seccomp filter that hands those calls to the supervisor
//! (`SECCOMP_RET_USER_NOTIF`; `sendto` without an address, i.e. TCP data, never leaves the
//! kernel). The supervisor reads the destination from slirp's memory and answers: let the
//! call go on, fail it, or, for port 443 of a machine with credential bindings, connect
//! slirp's very socket to the credential interceptor instead and tell slirp the connect is
//! under way (smolvm: "HTTPS connections from the guest are redirected to an interceptor ...
//! after the machine's egress policy has admitted the destination").

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;

use super::audit::Audit;
use super::policy::Policy;
use crate::credentials::intercept::Redirects;

/// The fd number the listener has in slirp4netns (and where the supervisor fetches it).
pub const LISTENER_FD: RawFd = 9;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
/// `seccomp_data` offsets: nr, arch, `args[4]` (the low and high words of `sendto`'s address).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG4_LO: u32 = 16 + 4 * 8;
const OFF_ARG4_HI: u32 = 16 + 4 * 8 + 4;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jeq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: BPF_JEQ_K,
        jt,
        jf,
        k,
    }
}

/// The program: `connect` and `sendmsg` go to the supervisor, `sendto` only with an address.
pub fn program() -> Vec<libc::sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jeq(AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, RET_ALLOW),
        stmt(BPF_LD_W_ABS, OFF_NR),
        jeq(libc::SYS_connect as u32, 3, 0),
        jeq(libc::SYS_sendmsg as u32, 2, 0),
        jeq(libc::SYS_sendto as u32, 2, 0),
        stmt(BPF_RET_K, RET_ALLOW),
        stmt(BPF_RET_K, RET_NOTIFY),
        // sendto: an address pointer of zero is a connected socket's data.
        stmt(BPF_LD_W_ABS, OFF_ARG4_LO),
        jeq(0, 0, 2),
        stmt(BPF_LD_W_ABS, OFF_ARG4_HI),
        jeq(0, 1, 0),
        stmt(BPF_RET_K, RET_NOTIFY),
        stmt(BPF_RET_K, RET_ALLOW),
    ]
}

/// In the child between fork and exec (async-signal-safe calls only): install `prog` with a
/// listener and leave the listener at [`LISTENER_FD`] for the parent to fetch.
///
/// # Safety
/// Call only from a `pre_exec` hook; `prog` must outlive the call.
pub unsafe fn install_in_child(prog: &[libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain syscalls on valid pointers (the caller keeps `prog` alive).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if fd as RawFd != LISTENER_FD && libc::dup2(fd as RawFd, LISTENER_FD) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_getfd(pidfd: &OwnedFd, target: RawFd) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The supervisor's side of slirp4netns's filter.
pub struct ConnectFilter {
    listener: OwnedFd,
    pidfd: OwnedFd,
    mem: File,
    pub policy: Policy,
    pub audit: Audit,
    /// Port 443 goes to the interceptor at this address (a machine with credentials).
    pub intercept: Option<(SocketAddr, Redirects)>,
}

enum Verdict {
    Continue,
    Fail(i32),
}

impl ConnectFilter {
    /// Take the listener slirp4netns (pid `slirp`) was started with.
    pub fn attach(slirp: i32, policy: Policy, audit: Audit) -> std::io::Result<Self> {
        let pidfd = pidfd_open(slirp)?;
        let listener = pidfd_getfd(&pidfd, LISTENER_FD)?;
        let mem = File::open(format!("/proc/{slirp}/mem"))?;
        Ok(Self {
            listener,
            pidfd,
            mem,
            policy,
            audit,
            intercept: None,
        })
    }

    /// Answer slirp's calls until slirp exits (the listener then reports a hang-up).
    pub fn serve(self) {
        loop {
            let mut pfd = libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
            if pfd.revents & libc::POLLIN == 0 {
                return;
            }
            // SAFETY: zeroed plain-old-data structs handed to the kernel.
            let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
            // SAFETY: ioctl on our listener with a buffer of the right type.
            let rc = unsafe {
                libc::ioctl(
                    self.listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_RECV,
                    &mut req,
                )
            };
            if rc != 0 {
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) | Some(libc::ENOENT) => continue,
                    _ => return,
                }
            }
            let verdict = self.decide(&req);
            let (error, flags) = match verdict {
                Verdict::Continue => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
                Verdict::Fail(errno) => (-errno, 0),
            };
            let resp = libc::seccomp_notif_resp {
                id: req.id,
                val: 0,
                error,
                flags,
            };
            // SAFETY: as above. A failure means slirp's call went away: nothing to do.
            unsafe {
                libc::ioctl(
                    self.listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_SEND,
                    &resp,
                )
            };
        }
    }

    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if addr == 0 || len == 0 || len > 4096 {
            return None;
        }
        let mut buf = vec![0u8; len];
        self.mem.read_exact_at(&mut buf, addr).ok()?;
        Some(buf)
    }

    /// The destination a `sockaddr` at `addr` names, when it is IPv4 or IPv6.
    fn sockaddr(&self, addr: u64, len: u64) -> Option<SocketAddr> {
        let raw = self.read(addr, usize::try_from(len).ok()?)?;
        let family = u16::from_ne_bytes([*raw.first()?, *raw.get(1)?]);
        let port = u16::from_be_bytes([*raw.get(2)?, *raw.get(3)?]);
        match i32::from(family) {
            libc::AF_INET => {
                let b: [u8; 4] = raw.get(4..8)?.try_into().ok()?;
                Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(b)), port))
            }
            libc::AF_INET6 => {
                let b: [u8; 16] = raw.get(8..24)?.try_into().ok()?;
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), port))
            }
            _ => None,
        }
    }

    fn decide(&self, req: &libc::seccomp_notif) -> Verdict {
        let a = req.data.args;
        let nr = i64::from(req.data.nr);
        let dest = if nr == libc::SYS_connect {
            self.sockaddr(a[1], a[2])
        } else if nr == libc::SYS_sendto {
            self.sockaddr(a[4], a[5])
        } else {
            // sendmsg: msg_name and msg_namelen lead the msghdr.
            self.read(a[1], 12).and_then(|h| {
                let name = u64::from_ne_bytes(h.get(..8)?.try_into().ok()?);
                let len = u32::from_ne_bytes(h.get(8..12)?.try_into().ok()?);
                self.sockaddr(name, u64::from(len))
            })
        };
        let Some(dest) = dest else {
            return Verdict::Continue;
        };
        if !self.policy.allows(dest.ip()) {
            if nr == libc::SYS_connect {
                self.audit.denied("connect", &format!("to {dest}"));
                return Verdict::Fail(libc::ECONNREFUSED);
            }
            self.audit.denied("sendto", &dest.to_string());
            return Verdict::Fail(libc::EPERM);
        }
        if nr == libc::SYS_connect
            && dest.port() == 443
            && let Some((to, redirects)) = &self.intercept
        {
            return self.redirect(req, a[0] as RawFd, dest, *to, redirects);
        }
        Verdict::Continue
    }

    /// Connect slirp's socket `fd` to the interceptor at `to`, remembering `dest` for it.
    fn redirect(
        &self,
        req: &libc::seccomp_notif,
        fd: RawFd,
        dest: SocketAddr,
        to: SocketAddr,
        redirects: &Redirects,
    ) -> Verdict {
        let Ok(sock) = pidfd_getfd(&self.pidfd, fd) else {
            return Verdict::Fail(libc::ECONNREFUSED);
        };
        // The notification may have gone stale while we looked (slirp killed): then the fd
        // number may be another socket's.
        // SAFETY: ioctl with a pointer to the id.
        let valid = unsafe {
            libc::ioctl(
                self.listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &req.id,
            )
        } == 0;
        let (SocketAddr::V4(to4), true) = (to, valid) else {
            return Verdict::Fail(libc::ECONNREFUSED);
        };
        let sin = |a: std::net::SocketAddrV4| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = sin(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        let mut bound: libc::sockaddr_in = local;
        let mut blen = len;
        // SAFETY: bind/getsockname/connect on a socket fd we hold, with valid sockaddr_in.
        let local_port = unsafe {
            if libc::bind(
                sock.as_raw_fd(),
                &local as *const _ as *const libc::sockaddr,
                len,
            ) != 0
                || libc::getsockname(
                    sock.as_raw_fd(),
                    &mut bound as *mut _ as *mut libc::sockaddr,
                    &mut blen,
                ) != 0
            {
                return Verdict::Fail(libc::ECONNREFUSED);
            }
            u16::from_be(bound.sin_port)
        };
        if let Ok(mut r) = redirects.lock() {
            r.insert(local_port, dest);
        }
        let target = sin(to4);
        // SAFETY: as above.
        let rc = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                &target as *const _ as *const libc::sockaddr,
                len,
            )
        };
        if rc == 0 {
            return Verdict::Fail(0);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            // slirp's socket is non-blocking: it waits for the connect as it would have.
            Some(e @ libc::EINPROGRESS) => Verdict::Fail(e),
            Some(e) => Verdict::Fail(e),
            None => Verdict::Fail(libc::ECONNREFUSED),
        }
    }
}
