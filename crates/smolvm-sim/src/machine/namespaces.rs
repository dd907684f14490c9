//! Creating and joining a machine's mount, PID, UTS and network namespaces.

/// The umask of everything in a guest: smolvm's agent is the guest's init and starts with
/// the kernel's 022, and `exec` and `cp` run as its children whatever the umask of the
/// shell that ran smolvm on the host (a caller's `umask 077` never reaches a real guest).
pub const GUEST_UMASK: libc::mode_t = 0o022;

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The namespaces a guest gets.
pub const GUEST_NS: libc::c_int =
    libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUTS | libc::CLONE_NEWNET;

/// fork() into fresh namespaces: the child is PID 1 of a new PID namespace.
/// Returns 0 in the child, the child's host PID in the parent.
///
/// # Safety
/// The caller must be single-threaded (as with fork).
pub unsafe fn clone_into_new_namespaces() -> std::io::Result<i32> {
    // SAFETY: raw clone with no new stack behaves like fork(); caller is single-threaded.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (GUEST_NS | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// Open file descriptors on a running guest's namespaces (via its PID 1's host PID).
pub struct GuestNs {
    pub pid: File,
    pub mnt: File,
    pub uts: File,
    pub net: File,
}

impl GuestNs {
    pub fn open(init_pid: i32) -> std::io::Result<Self> {
        let o = |n: &str| File::open(format!("/proc/{init_pid}/ns/{n}"));
        Ok(GuestNs {
            pid: o("pid")?,
            mnt: o("mnt")?,
            uts: o("uts")?,
            net: o("net")?,
        })
    }

    /// Raw fds for use after fork (in pre_exec), in join order.
    pub fn raw_after_fork(&self) -> [(RawFd, libc::c_int); 3] {
        [
            (self.uts.as_raw_fd(), libc::CLONE_NEWUTS),
            (self.net.as_raw_fd(), libc::CLONE_NEWNET),
            (self.mnt.as_raw_fd(), libc::CLONE_NEWNS),
        ]
    }
}

pub fn setns(fd: RawFd, nstype: libc::c_int) -> std::io::Result<()> {
    // SAFETY: plain syscall on an fd we hold.
    if unsafe { libc::setns(fd, nstype) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bring up `lo` in the current network namespace.
pub fn loopback_up() -> std::io::Result<()> {
    // SAFETY: ioctl on a socket we create and close; ifreq is zero-initialised.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        let mut rc = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr);
        if rc == 0 {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            rc = libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr);
        }
        let e = std::io::Error::last_os_error();
        libc::close(s);
        if rc != 0 { Err(e) } else { Ok(()) }
    }
}

pub fn set_hostname(h: &str) -> std::io::Result<()> {
    // SAFETY: pointer/len of a live byte slice.
    if unsafe { libc::sethostname(h.as_ptr().cast(), h.len()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A pipe with both ends close-on-exec.
pub fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// The guest-side PID of a host PID (last field of NSpid in /proc/PID/status).
pub fn guest_pid(host_pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}
