//! Choosing the host loopback port for a box's Executor web UI (reference/hermes-box.md §3.5).
//!
//! A port is free when no other box's record holds it and both `127.0.0.1:P` and `[::1]:P`
//! can be bound right now. Hosts without IPv6 loopback are fine: EAFNOSUPPORT,
//! EPROTONOSUPPORT and EADDRNOTAVAIL on `::1` are not "taken". Ports are tried in random
//! order so two hosts' boxes do not pile onto the low end, and every port of the range is
//! tried before giving up. The choice is made under the registry lock and recorded before
//! the lock is released, so two `box new` never pick the same port.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::ops::RangeInclusive;

use anyhow::{Result, bail};
use rand::seq::SliceRandom;

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
    let (lo, hi) = (*range.start(), *range.end());
    if lo < 1024 || lo > hi {
        bail!(
            "invalid Executor host-port range {lo}-{hi}: it must lie within 1024-65535 (EXECUTOR_PORT_LO, EXECUTOR_PORT_HI)"
        );
    }
    let mut candidates: Vec<u16> = range.filter(|p| !held.contains(p)).collect();
    candidates.shuffle(&mut rand::rng());
    match candidates.into_iter().find(|p| is_bindable(*p)) {
        Some(p) => Ok(p),
        None => bail!(
            "no free host port in {lo}-{hi}; free one, or widen EXECUTOR_PORT_LO/EXECUTOR_PORT_HI in box.env"
        ),
    }
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
