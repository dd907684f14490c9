//! Choosing the host loopback port for a box's Executor web UI.
//!
//! A port is free when no other box's record holds it and both `127.0.0.1:P` and `[::1]:P`
//! can be bound right now. Hosts without IPv6 loopback are fine: EAFNOSUPPORT,
//! EPROTONOSUPPORT and EADDRNOTAVAIL on `::1` are not "taken". Ports are tried in random
//! order so two hosts' boxes do not pile onto the low end, and every port of the range is
//! tried before giving up. The choice is made under the registry lock and recorded before
//! the lock is released, so two `box new` never pick the same port.
//!
//! A box on a remote host publishes its port on the remote's loopback, so the remote
//! decides: a port something listens on there (another laptop's box on the same account,
//! any service) is taken, whatever this machine has bound ([`listening`], read from the
//! remote's `/proc/net/tcp` and `tcp6` in one call).

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::ops::RangeInclusive;

use anyhow::{Result, bail};
use rand::seq::SliceRandom;

use crate::remote::RemoteHost;
use crate::smolvm::driver::{Smolvm, timeouts};

/// Whether a port can be bound on loopback now (both families where the host has them).
pub fn is_bindable(port: u16) -> bool {
    if TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).is_err() {
        return false;
    }
    match TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))) {
        Ok(_) => true,
        Err(e) => matches!(
            e.raw_os_error(),
            Some(libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT | libc::EADDRNOTAVAIL)
        ),
    }
}

/// A free port in `range` that is not in `held` (ports other boxes hold).
pub fn pick(range: RangeInclusive<u16>, held: &[u16]) -> Result<u16> {
    pick_where(range, held, &is_bindable, "")
}

/// [`pick`] for a box on `host`: free there, not here (`listening`: the ports something
/// listens on there).
pub fn pick_on(
    range: RangeInclusive<u16>,
    held: &[u16],
    listening: &HashSet<u16>,
    host: &RemoteHost,
) -> Result<u16> {
    pick_where(
        range,
        held,
        &|p| !listening.contains(&p),
        &format!(" on {host}"),
    )
}

fn pick_where(
    range: RangeInclusive<u16>,
    held: &[u16],
    free: &dyn Fn(u16) -> bool,
    on: &str,
) -> Result<u16> {
    let (lo, hi) = (*range.start(), *range.end());
    if lo < 1024 || lo > hi {
        bail!(
            "invalid Executor host-port range {lo}-{hi}: it must lie within 1024-65535 (EXECUTOR_PORT_LO, EXECUTOR_PORT_HI)"
        );
    }
    let mut candidates: Vec<u16> = range.filter(|p| !held.contains(p)).collect();
    candidates.shuffle(&mut rand::rng());
    match candidates.into_iter().find(|p| free(*p)) {
        Some(p) => Ok(p),
        None => bail!(
            "no free host port in {lo}-{hi}{on}; free one, or widen EXECUTOR_PORT_LO/EXECUTOR_PORT_HI in box.env"
        ),
    }
}

/// The TCP ports something listens on, on the host `smolvm` runs on (remote hosts only:
/// here [`is_bindable`] asks the kernel itself). A host without `/proc/net/tcp` says
/// nothing, and smolvm's own error tells when its port is taken.
pub fn listening_on(smolvm: &Smolvm) -> Result<HashSet<u16>> {
    let out = smolvm
        .host_shell(
            "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; exit 0",
            &[],
            timeouts::QUERY,
        )
        .map_err(|e| anyhow::anyhow!("cannot list the ports in use there: {e}"))?;
    Ok(listening(&out.stdout))
}

/// The local ports of the sockets in state LISTEN (`0A`) in `/proc/net/tcp`-format text,
/// on any address (a listener on `0.0.0.0` or `::` takes the loopback's port too).
pub fn listening(proc_net_tcp: &str) -> HashSet<u16> {
    proc_net_tcp
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state) = (fields.get(1)?, fields.get(3)?);
            if *state != "0A" {
                return None;
            }
            u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_pair() -> (TcpListener, u16) {
        // Let the kernel find a port whose neighbour we can test; good enough for a test.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        (l, p)
    }

    #[test]
    fn a_port_held_by_a_stranger_is_skipped() {
        let (taken, port) = free_pair();
        assert!(!is_bindable(port));
        let err = pick(port..=port, &[]).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "no free host port in {port}-{port}; free one, or widen EXECUTOR_PORT_LO/EXECUTOR_PORT_HI in box.env"
            )
        );
        drop(taken);
        assert_eq!(pick(port..=port, &[]).unwrap(), port);
    }

    #[test]
    fn ports_of_other_boxes_are_skipped() {
        let (l, port) = free_pair();
        drop(l);
        assert!(pick(port..=port, &[port]).is_err());
    }

    /// What a remote's `/proc/net/tcp` and `tcp6` say is listening: the header and
    /// established or closing sockets are not.
    #[test]
    fn listening_ports_are_read_from_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A0F1 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 41 1 0 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42 1 0 100 0 0 10 0
   2: 0100007F:A0F2 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 43 1 0 20 4 30 10 -1
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:A0F3 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 44 1 0 100 0 0 10 0
   1: 00000000000000000000000001000000:A0F4 00000000000000000000000000000000:0000 06 00000000:00000000 03:00000c5c 00000000     0        0 0 3 0
";
        let ports = listening(text);
        assert_eq!(
            ports,
            HashSet::from([0xA0F1, 0x16, 0xA0F3]),
            "LISTEN sockets of both files, nothing else"
        );
        let host = RemoteHost::parse("ssh://me@bighost").unwrap();
        let e = pick_on(0xA0F1..=0xA0F1, &[], &ports, &host)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no free host port in 41201-41201 on ssh://me@bighost"),
            "{e}"
        );
        assert_eq!(
            pick_on(0xA0F1..=0xA0F2, &[], &ports, &host).unwrap(),
            0xA0F2
        );
    }

    #[test]
    fn bad_ranges_are_refused() {
        assert!(
            pick(80..=90, &[])
                .unwrap_err()
                .to_string()
                .contains("invalid")
        );
    }
}
