//! The credential interceptor: every HTTPS connection (port 443) of a credentialed machine
//! arrives here (see `egress::connect_filter`), after the egress policy admitted it. It
//! reads the TLS server name:
//!
//! * a host some binding allows: TLS is terminated with a certificate the machine's CA issues
//!   for that name (ALPN `http/1.1` only), each request goes through the substitution rules
//!   (`http::substitute`) and on to the address the guest dialled, over a fresh TLS
//!   connection verified for that host (roots: `SSL_CERT_FILE` of `machine start`'s
//!   environment, else the host's bundle); responses stream back;
//! * any other name (or none): the bytes are relayed untouched, the guest sees the real
//!   server's certificate.
//!
//! The value is read from the supervisor's own environment, which is `machine start`'s.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::ca::Ca;
use super::http::{self, Refusal, UPSTREAM_FAILED};
use crate::policy::credential::Binding;

const HOST_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Original destinations of redirected connections, by the local port the redirected socket
/// was bound to (the interceptor sees that port as its peer's). The connect filter writes
/// each one as it redirects a connection here.
pub type Redirects = Arc<Mutex<HashMap<u16, SocketAddr>>>;

struct Shared {
    bindings: Vec<Binding>,
    placeholders: BTreeMap<String, String>,
    ca: Ca,
    /// Leaf certificates issued so far, by host.
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    client: Arc<rustls::ClientConfig>,
    redirects: Redirects,
}

pub struct Interceptor {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// Trust roots for upstream connections.
fn roots() -> rustls::RootCertStore {
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    let path = std::env::var("SSL_CERT_FILE")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| HOST_BUNDLE.to_string());
    if let Ok(iter) = CertificateDer::pem_file_iter(&path) {
        for cert in iter.flatten() {
            let _ = store.add(cert);
        }
    }
    store
}

impl Interceptor {
    /// Listen on host loopback; returns the address the connect filter sends port 443 to.
    pub fn bind(
        ca: Ca,
        bindings: Vec<Binding>,
        placeholders: BTreeMap<String, String>,
        redirects: Redirects,
    ) -> io::Result<(Self, SocketAddr)> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let mut client = rustls::ClientConfig::builder()
            .with_root_certificates(roots())
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok((
            Self {
                listener,
                shared: Arc::new(Shared {
                    bindings,
                    placeholders,
                    ca,
                    leaves: Mutex::default(),
                    client: Arc::new(client),
                    redirects,
                }),
            },
            addr,
        ))
    }

    pub fn serve(self) {
        for conn in self.listener.incoming() {
            let Ok(conn) = conn else { break };
            let shared = Arc::clone(&self.shared);
            std::thread::spawn(move || handle(conn, &shared));
        }
    }
}

/// Where the guest meant to go: the redirect the connect filter recorded for this peer.
fn original_destination(conn: &TcpStream, shared: &Shared) -> Option<SocketAddr> {
    let port = conn.peer_addr().ok()?.port();
    for _ in 0..200 {
        if let Some(d) = shared.redirects.lock().ok()?.remove(&port) {
            return Some(d);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn handle(conn: TcpStream, shared: &Shared) {
    let Some(dest) = original_destination(&conn, shared) else {
        return;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(300)));
    let mut first = Vec::new();
    let sni = read_client_hello(&conn, &mut first).and_then(|hello| server_name(&hello));
    match sni {
        Some(host) if shared.bindings.iter().any(|b| b.allows_host(&host)) => {
            terminate(conn, first, &host, dest, shared);
        }
        _ => passthrough(conn, first, dest),
    }
}

/// The first TLS record (a ClientHello, when it is TLS), also kept in `seen` to replay.
fn read_client_hello(mut conn: &TcpStream, seen: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut header = [0u8; 5];
    conn.read_exact(&mut header).ok()?;
    seen.extend_from_slice(&header);
    if header[0] != 0x16 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).ok()?;
    seen.extend_from_slice(&body);
    Some(body)
}

/// The server_name of a ClientHello handshake message.
pub fn server_name(hello: &[u8]) -> Option<String> {
    let mut at = 0usize;
    let byte = |at: usize| hello.get(at).copied();
    let u16_at = |at: usize| Some(u16::from_be_bytes([*hello.get(at)?, *hello.get(at + 1)?]));
    if byte(0)? != 1 {
        return None;
    }
    at += 4 + 2 + 32;
    at += 1 + usize::from(byte(at)?);
    at += 2 + usize::from(u16_at(at)?);
    at += 1 + usize::from(byte(at)?);
    let ext_end = at + 2 + usize::from(u16_at(at)?);
    at += 2;
    while at + 4 <= ext_end {
        let (kind, len) = (u16_at(at)?, usize::from(u16_at(at + 2)?));
        at += 4;
        if kind == 0 {
            // server_name_list: length, then (type 0, length, name).
            if byte(at + 2)? != 0 {
                return None;
            }
            let n = usize::from(u16_at(at + 3)?);
            let name = hello.get(at + 5..at + 5 + n)?;
            return Some(String::from_utf8_lossy(name).to_ascii_lowercase());
        }
        at += len;
    }
    None
}

/// Relay the connection to `dest` byte for byte, starting with what was already read.
fn passthrough(conn: TcpStream, first: Vec<u8>, dest: SocketAddr) {
    let Ok(mut up) = TcpStream::connect_timeout(&dest, Duration::from_secs(10)) else {
        return;
    };
    if up.write_all(&first).is_err() {
        return;
    }
    let (Ok(mut c2), Ok(mut u2)) = (conn.try_clone(), up.try_clone()) else {
        return;
    };
    let t = std::thread::spawn(move || {
        let mut c = conn;
        let _ = io::copy(&mut c, &mut up);
        let _ = up.shutdown(Shutdown::Write);
    });
    let _ = io::copy(&mut u2, &mut c2);
    let _ = c2.shutdown(Shutdown::Write);
    let _ = t.join();
}

/// The guest's TCP stream with the bytes already read put back in front.
struct Replayed {
    first: io::Cursor<Vec<u8>>,
    conn: TcpStream,
}

impl Read for Replayed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.first.read(buf)?;
        if n > 0 {
            return Ok(n);
        }
        self.conn.read(buf)
    }
}

impl Write for Replayed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.conn.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush()
    }
}

fn server_config(shared: &Shared, host: &str) -> Option<Arc<rustls::ServerConfig>> {
    let mut leaves = shared.leaves.lock().ok()?;
    if let Some(c) = leaves.get(host) {
        return Some(Arc::clone(c));
    }
    let (chain, key): (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) =
        shared.ca.issue(host).ok()?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .ok()?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    leaves.insert(host.to_string(), Arc::clone(&config));
    Some(config)
}

type GuestTls = rustls::StreamOwned<rustls::ServerConnection, Replayed>;
type UpstreamTls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn terminate(conn: TcpStream, first: Vec<u8>, host: &str, dest: SocketAddr, shared: &Shared) {
    let Some(config) = server_config(shared, host) else {
        return;
    };
    let Ok(server) = rustls::ServerConnection::new(config) else {
        return;
    };
    let guest: GuestTls = rustls::StreamOwned::new(
        server,
        Replayed {
            first: io::Cursor::new(first),
            conn,
        },
    );
    let mut guest = BufReader::new(guest);
    let mut upstream: Option<BufReader<UpstreamTls>> = None;
    loop {
        match exchange(&mut guest, &mut upstream, host, dest, shared) {
            Ok(true) => continue,
            Ok(false) => break,
            Err(refusal) => {
                let _ = guest.get_mut().write_all(&refusal.response());
                break;
            }
        }
    }
    let g = guest.get_mut();
    g.conn.send_close_notify();
    let _ = g.flush();
}

fn connect_upstream(
    host: &str,
    dest: SocketAddr,
    shared: &Shared,
) -> io::Result<BufReader<UpstreamTls>> {
    let tcp = TcpStream::connect_timeout(&dest, Duration::from_secs(10))?;
    tcp.set_read_timeout(Some(Duration::from_secs(600)))?;
    let name = ServerName::try_from(host.to_string()).map_err(io::Error::other)?;
    let client = rustls::ClientConnection::new(Arc::clone(&shared.client), name)
        .map_err(io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(client, tcp);
    // Complete the handshake now, so a certificate the host does not trust is an upstream
    // failure before any request byte leaves.
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(BufReader::new(tls))
}

/// One request and its response. `Ok(false)`: the connection is done.
fn exchange(
    guest: &mut BufReader<GuestTls>,
    upstream: &mut Option<BufReader<UpstreamTls>>,
    host: &str,
    dest: SocketAddr,
    shared: &Shared,
) -> Result<bool, Refusal> {
    let Ok(Some(mut head)) = http::read_head(guest) else {
        return Ok(false);
    };
    if head
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        head.remove("expect");
        let _ = guest.get_mut().write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        let _ = guest.get_mut().flush();
    }
    let framing = http::request_body(&head).map_err(|_| Refusal(403, "malformed request"))?;
    let body = http::read_request_body(guest, framing)
        .map_err(|_| Refusal(403, "request body over 8 MiB or malformed"))?;
    http::substitute(
        &mut head,
        &body,
        host,
        &shared.bindings,
        &shared.placeholders,
        |var| std::env::var(var).ok(),
    )?;
    if upstream.is_none() {
        *upstream = Some(connect_upstream(host, dest, shared).map_err(|_| UPSTREAM_FAILED)?);
    }
    let Some(up) = upstream.as_mut() else {
        return Err(UPSTREAM_FAILED);
    };
    let sent = up
        .get_mut()
        .write_all(&head.bytes())
        .and_then(|_| up.get_mut().write_all(&body))
        .and_then(|_| up.get_mut().flush());
    if sent.is_err() {
        return Err(UPSTREAM_FAILED);
    }
    let method = head.first[0].clone();
    let close_after = head
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    loop {
        let resp = match http::read_head(up) {
            Ok(Some(r)) => r,
            _ => return Err(UPSTREAM_FAILED),
        };
        let status: u16 = resp.first[1].parse().unwrap_or(0);
        if guest.get_mut().write_all(&resp.bytes()).is_err() {
            return Ok(false);
        }
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let framing = http::response_body(&method, &resp).map_err(|_| UPSTREAM_FAILED)?;
        if http::relay_body(up, guest.get_mut(), framing).is_err() {
            return Ok(false);
        }
        let _ = guest.get_mut().flush();
        let done = close_after
            || framing == http::Body::UntilClose
            || resp
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        return Ok(!done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_out_of_a_client_hello() {
        // A ClientHello from rustls itself, for the name the test asks for.
        let mut c = rustls::ClientConnection::new(
            Arc::new(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
            ServerName::try_from("api.anthropic.com").unwrap_or_else(|e| panic!("{e}")),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut wire = Vec::new();
        c.write_tls(&mut wire).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            server_name(&wire[5..]).as_deref(),
            Some("api.anthropic.com")
        );
        assert_eq!(server_name(b"\x01\x00"), None);
        assert_eq!(server_name(&[]), None);
    }
}
