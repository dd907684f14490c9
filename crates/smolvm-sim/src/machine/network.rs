//! Guest networking through slirp4netns: outbound NAT (guest 10.0.2.100/24, gateway
//! 10.0.2.2, DNS 10.0.2.3) and published ports. `-p HOST:GUEST` becomes a slirp host
//! forward from host 127.0.0.1:HOST (and `[::1]:HOST`, best effort) to the guest's eth
//! address 10.0.2.100:GUEST, so, as with smolvm, a guest service bound only to 127.0.0.1 is
//! not reachable through a published port.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const GUEST_ADDR: &str = "10.0.2.100";

pub struct Slirp {
    pub child: Child,
    pub sock: PathBuf,
    /// Held open by the supervisor: slirp4netns exits when it closes (--exit-fd).
    _exit_w: OwnedFd,
}

/// Start slirp4netns for the network namespace of `target_pid` and wait until it is ready.
/// `filtered` (a machine with an egress policy): slirp runs under the connect filter
/// (`crate::egress::connect_filter`) with its own DNS forwarder off, the gateway's DNS
/// filter answering instead.
pub fn start(
    target_pid: i32,
    data: &Path,
    room: Option<&crate::egress::Room>,
) -> Result<Slirp, String> {
    let filtered = room.is_some();
    let sock = data.join("slirp.sock");
    let _ = std::fs::remove_file(&sock);
    let (exit_r, exit_w) = super::namespaces::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (ready_r, ready_w) = super::namespaces::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (er, rw) = (exit_r.as_raw_fd(), ready_w.as_raw_fd());
    let mut cmd = Command::new("slirp4netns");
    cmd.args([
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--api-socket",
    ])
    .arg(&sock)
    .args(["--exit-fd", "3", "--ready-fd", "4"]);
    if filtered {
        cmd.arg("--disable-dns");
    }
    // smolvm's gateway runs inside its own VM process: no other process gets `machine
    // start`'s environment, where the values of bound credentials are. slirp4netns, this
    // simulator's stand-in for that gateway, needs none of it.
    cmd.arg(target_pid.to_string())
        .arg("tap0")
        .env_clear()
        .stdin(Stdio::null());
    let program = filtered.then(crate::egress::connect_filter::program);
    // SAFETY: only async-signal-safe calls (dup2, prctl, seccomp) between fork and exec;
    // the program was built before the fork and lives in the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(er, 3) < 0 || libc::dup2(rw, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(prog) = &program {
                crate::egress::connect_filter::install_in_child(prog)?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "slirp4netns not found in PATH (Debian: apt-get install slirp4netns)".to_string()
        } else {
            format!("spawn slirp4netns: {e}")
        }
    })?;
    drop(exit_r);
    drop(ready_w);
    let mut slirp = Slirp {
        child,
        sock,
        _exit_w: exit_w,
    };
    if let Some(room) = room
        && let Err(e) = room.start_filter(slirp.child.id() as i32)
    {
        let _ = slirp.child.kill();
        let _ = slirp.child.wait();
        return Err(e);
    }
    let mut f = std::fs::File::from(ready_r);
    let mut b = [0u8; 1];
    match f.read(&mut b) {
        Ok(1) => {}
        _ => {
            let _ = slirp.child.kill();
            let _ = slirp.child.wait();
            return Err("slirp4netns exited before it was ready".to_string());
        }
    }
    // The API socket appears just after readiness on some versions; wait briefly.
    let t0 = Instant::now();
    while !slirp.sock.exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(slirp)
}

/// Ask slirp4netns to forward host `addr:host_port` to guest `GUEST_ADDR:guest_port`.
pub fn add_hostfwd(sock: &Path, addr: &str, host_port: u16, guest_port: u16) -> Result<(), String> {
    let req = serde_json::json!({
        "execute": "add_hostfwd",
        "arguments": {
            "proto": "tcp",
            "host_addr": addr,
            "host_port": host_port,
            "guest_addr": GUEST_ADDR,
            "guest_port": guest_port,
        }
    });
    let mut s =
        UnixStream::connect(sock).map_err(|e| format!("connect {}: {e}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(req.to_string().as_bytes())
        .map_err(|e| format!("slirp api: {e}"))?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .map_err(|e| format!("slirp api: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap_or(serde_json::Value::Null);
    if v.get("return").is_some() {
        Ok(())
    } else {
        Err(v
            .pointer("/error/desc")
            .and_then(|d| d.as_str())
            .unwrap_or(resp.trim())
            .to_string())
    }
}

/// `[::1]:HOST` for each published port, relayed to slirp's `127.0.0.1:HOST` forward (this
/// slirp4netns cannot listen on IPv6 itself). The guest side is unchanged: connections still
/// arrive at the guest's eth address. Best effort: a host without IPv6 loopback is skipped.
/// Threads live in the supervisor, which is in the host namespaces.
pub fn ipv6_loopback_relays(ports: &[(u16, u16)]) {
    for &(h, _) in ports {
        let Ok(l) = std::net::TcpListener::bind(("::1", h)) else {
            eprintln!("smolvm-sim: [::1]:{h} not published (best effort)");
            continue;
        };
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                std::thread::spawn(move || relay(c, h));
            }
        });
    }
}

fn relay(client: std::net::TcpStream, port: u16) {
    let Ok(up) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), up.try_clone()) else {
        return;
    };
    let t = std::thread::spawn(move || {
        let mut c = client;
        let mut u = up;
        let _ = std::io::copy(&mut c, &mut u);
        let _ = u.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut u2, &mut c2);
    let _ = c2.shutdown(std::net::Shutdown::Write);
    let _ = t.join();
}
