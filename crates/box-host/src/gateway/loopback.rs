//! The gateway's port: listened on at 127.0.0.1 only, and held on ::1 without listening.
//!
//! A browser resolves the box's `*.localhost` name to both ::1 and 127.0.0.1 and tries
//! ::1 first (Chromium 156 does). Whatever listened on `[::1]:<port>` would get the
//! browser's requests for the box's host name, and the session cookie with them. So the
//! gateway binds `[::1]:<port>` as well, without `SO_REUSEADDR`/`SO_REUSEPORT` (no other
//! socket may then bind it, the wildcard `[::]` included), and never listens there: the
//! browser's connection is refused at once and it goes on to 127.0.0.1. A port whose ::1
//! twin is taken is given back and another one chosen. A host without ::1 has nothing
//! anyone could listen on there.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Context as _, Result, bail};
use tokio::net::{TcpListener, TcpSocket};

/// Ports tried before giving up (each is a fresh ephemeral port of the kernel's choice).
const ATTEMPTS: usize = 32;

/// The gateway's listener on 127.0.0.1 and the hold on the same port of ::1.
pub struct Loopback {
    pub listener: TcpListener,
    pub port: u16,
    /// Bound, never listening; kept as long as the listener is.
    _v6_hold: Option<TcpSocket>,
}

/// Listens on a free 127.0.0.1 port whose ::1 twin it can hold.
pub async fn bind() -> Result<Loopback> {
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("cannot listen on 127.0.0.1")?;
        let port = listener.local_addr()?.port();
        match hold_v6(port) {
            Ok(hold) => {
                return Ok(Loopback {
                    listener,
                    port,
                    _v6_hold: hold,
                });
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                tracing::debug!("[::1]:{port} is taken; choosing another port");
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot hold [::1]:{port}"));
            }
        }
    }
    bail!("found no port free on both 127.0.0.1 and ::1 in {ATTEMPTS} tries")
}

/// Binds `[::1]:port` without listening; `Ok(None)` where this host has no ::1.
fn hold_v6(port: u16) -> std::io::Result<Option<TcpSocket>> {
    let socket = match TcpSocket::new_v6() {
        Ok(s) => s,
        Err(e) if no_ipv6(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    match socket.bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))) {
        Ok(()) => Ok(Some(socket)),
        Err(e) if no_ipv6(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// IPv6 is off in this kernel (`EAFNOSUPPORT`) or ::1 is not configured (`EADDRNOTAVAIL`).
fn no_ipv6(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::AddrNotAvailable || e.raw_os_error() == Some(libc::EAFNOSUPPORT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another program (another user's server) cannot take the gateway's port on ::1 or
    /// 127.0.0.1, whatever socket options it sets, while the gateway runs;
    /// a browser trying ::1 first is refused at once and goes on to the gateway.
    #[tokio::test]
    async fn nobody_else_can_take_the_gateways_port_on_either_loopback() {
        let gw = bind().await.unwrap();
        let port = gw.port;
        // Without ::1 on this host there is nothing anyone could listen on there.
        let has_ipv6 = TcpSocket::new_v6()
            .and_then(|s| s.bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0))))
            .is_ok();
        let mut places = vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))];
        if has_ipv6 {
            places.push(SocketAddr::from((Ipv6Addr::LOCALHOST, port)));
        }
        for (reuse_addr, reuse_port) in [(false, false), (true, false), (true, true)] {
            for at in &places {
                let squatter = match at {
                    SocketAddr::V4(_) => TcpSocket::new_v4(),
                    SocketAddr::V6(_) => TcpSocket::new_v6(),
                }
                .unwrap();
                squatter.set_reuseaddr(reuse_addr).unwrap();
                squatter.set_reuseport(reuse_port).unwrap();
                assert!(
                    squatter.bind(*at).is_err(),
                    "{at} taken beside the gateway (reuseaddr {reuse_addr}, reuseport {reuse_port})"
                );
            }
        }
        if has_ipv6 {
            let refused = tokio::net::TcpStream::connect((Ipv6Addr::LOCALHOST, port)).await;
            assert!(refused.is_err(), "something answers on [::1]:{port}");
        }
        let accepted = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port));
        let (ok, _) = tokio::join!(accepted, gw.listener.accept());
        ok.expect("the gateway listens on 127.0.0.1");
        drop(gw);
        if has_ipv6 {
            // Given back with the gateway.
            let again = TcpSocket::new_v6().unwrap();
            again
                .bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port)))
                .unwrap();
        }
    }
}
