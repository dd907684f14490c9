//! Doctor's "the published port listens on loopback only" check. smolvm publishes `-p` on
//! 127.0.0.1 (and ::1), unless `SMOLVM_PUBLISH_ADDR` says otherwise; a box whose Executor
//! port answers on 0.0.0.0 is reachable from the network with nothing but the token in
//! between, so doctor fails it (the seed verified its forwarded port the same way, with
//! `lsof -iTCP:PORT -sTCP:LISTEN`; docs/smolvm.md, "What the guest is"). On Linux the
//! kernel's socket tables (`/proc/net/tcp`, `/proc/net/tcp6`) list every listener of this
//! network namespace, with no tool to install.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Check, Status};

/// Kernel TCP state number of LISTEN in /proc/net/tcp*.
const LISTEN: &str = "0A";

/// The local addresses listening on `port` in one /proc/net/tcp or tcp6 table. Lines that
/// do not parse are skipped (the header, or a format a future kernel might add).
pub fn listening_on(table: &str, port: u16) -> Vec<IpAddr> {
    table
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _slot = fields.next()?;
            let local = fields.next()?;
            let _remote = fields.next()?;
            let state = fields.next()?;
            if state != LISTEN {
                return None;
            }
            let (addr, p) = local.split_once(':')?;
            (u16::from_str_radix(p, 16).ok()? == port).then_some(())?;
            parse_addr(addr)
        })
        .collect()
}

/// The kernel prints each 32-bit word of the address in host byte order.
fn parse_addr(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

fn is_loopback(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The check for one box's published `port`, from the socket tables' texts (`None`: the
/// table could not be read, e.g. not Linux).
pub fn check_tables(scope: &str, port: u16, tables: &[Option<String>]) -> Check {
    let name = "port-loopback";
    if tables.iter().all(Option::is_none) {
        return Check::new(
            scope,
            name,
            Status::Skip,
            format!("cannot list the listeners of port {port} here (no /proc/net/tcp)"),
        );
    }
    let addrs: Vec<IpAddr> = tables
        .iter()
        .flatten()
        .flat_map(|t| listening_on(t, port))
        .collect();
    let exposed: Vec<String> = addrs
        .iter()
        .filter(|a| !is_loopback(a))
        .map(|a| a.to_string())
        .collect();
    if !exposed.is_empty() {
        return Check::new(
            scope,
            name,
            Status::Fail,
            format!(
                "published port {port} listens on {} (not only loopback): Executor is reachable from the network; \
                 stop the box and check SMOLVM_PUBLISH_ADDR and smolvm's -p",
                exposed.join(", ")
            ),
        );
    }
    if addrs.is_empty() {
        return Check::new(
            scope,
            name,
            Status::Warn,
            format!("nothing listens on published port {port}"),
        );
    }
    Check::new(
        scope,
        name,
        Status::Ok,
        format!("published port {port} listens on 127.0.0.1 only"),
    )
}

/// [`check_tables`] on this host's tables.
pub fn check(scope: &str, port: u16) -> Check {
    let tables = ["/proc/net/tcp", "/proc/net/tcp6"].map(|p| std::fs::read_to_string(p).ok());
    check_tables(scope, port, &tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:4E21 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
   1: 00000000:4E22 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n\
   2: 0100007F:4E22 0100007F:9999 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0\n\
   garbage line\n\
   3: ZZZZ:4E21 00000000:0000 0A\n";

    const TCP6: &str = "  sl  local_address                         remote_address                        st\n\
   0: 00000000000000000000000001000000:4E21 00000000000000000000000000000000:0000 0A\n\
   1: 00000000000000000000000000000000:4E23 00000000000000000000000000000000:0000 0A\n";

    #[test]
    fn reads_listeners_of_one_port_and_skips_what_does_not_parse() {
        // These fixtures are little-endian words, as x86 and arm64 kernels print them.
        if cfg!(target_endian = "big") {
            return;
        }
        assert_eq!(
            listening_on(TCP, 0x4E21),
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
        );
        assert_eq!(
            listening_on(TCP, 0x4E22),
            vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)],
            "an established socket is not a listener"
        );
        assert_eq!(
            listening_on(TCP6, 0x4E21),
            vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]
        );
        let t = [Some(TCP.to_string()), Some(TCP6.to_string())];
        assert_eq!(check_tables("box a", 0x4E21, &t).status, Status::Ok);
        let wide = check_tables("box a", 0x4E22, &t);
        assert_eq!(wide.status, Status::Fail);
        assert!(
            wide.detail.contains("listens on 0.0.0.0"),
            "{}",
            wide.detail
        );
        assert_eq!(check_tables("box a", 0x4E23, &t).status, Status::Fail);
        assert_eq!(check_tables("box a", 1, &t).status, Status::Warn);
        assert_eq!(check_tables("box a", 1, &[None, None]).status, Status::Skip);
        assert!(listening_on("", 1).is_empty());
        assert!(listening_on("0: 0100007F 00 0A\n0: :: 0A\n\u{0}\n", 1).is_empty());
    }

    /// The real tables of this host: a socket this test binds on all interfaces fails the
    /// check, one on loopback passes.
    #[test]
    fn a_real_wildcard_listener_fails_and_a_loopback_one_passes() {
        if !std::path::Path::new("/proc/net/tcp").exists() {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: no /proc/net/tcp on this OS");
            return;
        }
        let wide = std::net::TcpListener::bind("0.0.0.0:0").expect("bind 0.0.0.0");
        let port = wide.local_addr().expect("addr").port();
        let c = check("box t", port);
        assert_eq!(c.status, Status::Fail, "{}", c.detail);
        drop(wide);
        let local = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = local.local_addr().expect("addr").port();
        let c = check("box t", port);
        assert_eq!(c.status, Status::Ok, "{}", c.detail);
    }
}
