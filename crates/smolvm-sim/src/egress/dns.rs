//! The gateway's DNS filter (smolvm-network 1.33.0 `dns.rs`, `stack.rs`
//! `classify_dns_query`): a guest question for a name outside the allow-host list gets
//! NXDOMAIN on the spot (never forwarded, so it carries nothing out) and is recorded as a
//! `resolve` denial; an allowed one is forwarded to the host's resolver and the A/AAAA
//! records of its answer are learned. Without an allow-host list every question is forwarded
//! and nothing is learned. An unparseable question gets SERVFAIL.
//!
//! The simulator serves it on the guest's `10.0.2.3:53` (UDP and TCP), which the guest's
//! resolv.conf names. Upstream is the first `nameserver` of the host's `/etc/resolv.conf`.
//!
//! `SMOLVM_SIM_DNS_HOSTS=name=ip[,name=ip…]` (simulator only, for tests: the world's DNS)
//! answers those names itself, as an upstream resolver would, TTL 60, before the question
//! would leave the host. The filter still decides first, so a name outside the allow list is
//! NXDOMAIN whatever that map says. Tests use it to stand servers in their own network
//! namespaces in for public names (`api.anthropic.com`) without touching the real ones.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use super::audit::Audit;
use super::policy::Policy;

const HEADER: usize = 12;
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const RCODE_SERVFAIL: u16 = 2;
const RCODE_NXDOMAIN: u16 = 3;
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// What a stand-in answer's records say.
const STAND_IN_TTL: u32 = 60;

fn u16_at(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*p.get(at)?, *p.get(at + 1)?]))
}

fn u32_at(p: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(p.get(at..at + 4)?.try_into().ok()?))
}

/// A (possibly compressed) name at `at`: the name and the offset just after it in place.
fn read_name(p: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut after = None;
    for _ in 0..128 {
        let len = *p.get(at)?;
        if len & 0xc0 == 0xc0 {
            let target = (usize::from(len & 0x3f) << 8) | usize::from(*p.get(at + 1)?);
            after.get_or_insert(at + 2);
            if target >= at {
                return None;
            }
            at = target;
            continue;
        }
        if len == 0 {
            return Some((labels.join("."), after.unwrap_or(at + 1)));
        }
        if len > 63 {
            return None;
        }
        let label = p.get(at + 1..at + 1 + usize::from(len))?;
        labels.push(String::from_utf8_lossy(label).into_owned());
        at += 1 + usize::from(len);
    }
    None
}

/// The one question of a query: its name (lowercase, no trailing dot), type, and where the
/// question section ends.
pub fn question(p: &[u8]) -> Option<(String, u16, usize)> {
    if p.len() < HEADER || u16_at(p, 4)? != 1 {
        return None;
    }
    let (name, after) = read_name(p, HEADER)?;
    let qtype = u16_at(p, after)?;
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some((name, qtype, after + 4))
}

/// The A and AAAA records of an answer, with their TTLs.
pub fn answer_records(p: &[u8]) -> Vec<(IpAddr, u32)> {
    let parse = || -> Option<Vec<(IpAddr, u32)>> {
        let qd = u16_at(p, 4)?;
        let an = u16_at(p, 6)?;
        let mut at = HEADER;
        for _ in 0..qd {
            at = read_name(p, at)?.1 + 4;
        }
        let mut out = Vec::new();
        for _ in 0..an {
            at = read_name(p, at)?.1;
            let (rtype, class, ttl) = (u16_at(p, at)?, u16_at(p, at + 2)?, u32_at(p, at + 4)?);
            let len = usize::from(u16_at(p, at + 8)?);
            let data = p.get(at + 10..at + 10 + len)?;
            at += 10 + len;
            match (rtype, class, len) {
                (TYPE_A, CLASS_IN, 4) => {
                    let b: [u8; 4] = data.try_into().ok()?;
                    out.push((IpAddr::from(b), ttl));
                }
                (TYPE_AAAA, CLASS_IN, 16) => {
                    let b: [u8; 16] = data.try_into().ok()?;
                    out.push((IpAddr::from(b), ttl));
                }
                _ => {}
            }
        }
        Some(out)
    };
    parse().unwrap_or_default()
}

/// A reply carrying only `rcode`, echoing the query's id and question.
pub fn error_reply(query: &[u8], rcode: u16) -> Vec<u8> {
    let qend = question(query).map_or(HEADER, |(_, _, end)| end);
    let mut out = query.get(..qend.min(query.len())).unwrap_or(&[]).to_vec();
    if out.len() < HEADER {
        out.resize(HEADER, 0);
    }
    let rd = u16_at(query, 2).unwrap_or(0) & 0x0100;
    let flags = 0x8000 | rd | 0x0080 | rcode;
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    let qd: u16 = if qend > HEADER { 1 } else { 0 };
    out[4..6].copy_from_slice(&qd.to_be_bytes());
    out[6..12].fill(0);
    out
}

/// An answer with `ips` (of the question's type), as an upstream resolver gives it.
fn stand_in_reply(query: &[u8], qtype: u16, ips: &[IpAddr]) -> Vec<u8> {
    let mut out = error_reply(query, 0);
    let records: Vec<&IpAddr> = ips
        .iter()
        .filter(|ip| match qtype {
            TYPE_A => ip.is_ipv4(),
            TYPE_AAAA => ip.is_ipv6(),
            _ => false,
        })
        .collect();
    out[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
    for ip in records {
        out.extend_from_slice(&[0xc0, 0x0c]);
        out.extend_from_slice(&qtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&STAND_IN_TTL.to_be_bytes());
        match ip {
            IpAddr::V4(v) => {
                out.extend_from_slice(&4u16.to_be_bytes());
                out.extend_from_slice(&v.octets());
            }
            IpAddr::V6(v) => {
                out.extend_from_slice(&16u16.to_be_bytes());
                out.extend_from_slice(&v.octets());
            }
        }
    }
    out
}

/// `SMOLVM_SIM_DNS_HOSTS`, parsed; malformed entries are skipped.
pub fn stand_ins_from_env() -> HashMap<String, Vec<IpAddr>> {
    let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
    let raw = std::env::var("SMOLVM_SIM_DNS_HOSTS").unwrap_or_default();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if let Some((name, ip)) = entry.split_once('=')
            && let Ok(ip) = ip.trim().parse::<IpAddr>()
        {
            map.entry(name.trim().trim_end_matches('.').to_ascii_lowercase())
                .or_default()
                .push(ip);
        }
    }
    map
}

/// The first `nameserver` of the host's resolv.conf.
pub fn host_upstream() -> Option<IpAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").ok()?;
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("nameserver"))
            .then(|| w.next()?.parse().ok())
            .flatten()
    })
}

/// The filter: decides a question and produces the reply.
#[derive(Clone)]
pub struct Filter {
    pub policy: Policy,
    pub audit: Audit,
    pub stand_ins: HashMap<String, Vec<IpAddr>>,
    pub upstream: Option<IpAddr>,
}

enum Transport {
    Udp,
    Tcp,
}

impl Filter {
    /// The reply to one query (`None`: the upstream did not answer; the guest times out as
    /// it would with smolvm).
    fn answer(&self, query: &[u8], transport: Transport) -> Option<Vec<u8>> {
        let Some((name, qtype, _)) = question(query) else {
            return Some(error_reply(query, RCODE_SERVFAIL));
        };
        if self.policy.filters_dns() && !self.policy.name_allowed(&name) {
            self.audit.denied("resolve", &name);
            return Some(error_reply(query, RCODE_NXDOMAIN));
        }
        let reply = match self.stand_ins.get(&name) {
            Some(ips) => stand_in_reply(query, qtype, ips),
            None => match transport {
                Transport::Udp => self.forward_udp(query)?,
                Transport::Tcp => self.forward_tcp(query)?,
            },
        };
        self.policy.learn(&answer_records(&reply));
        Some(reply)
    }

    fn forward_udp(&self, query: &[u8]) -> Option<Vec<u8>> {
        let up = SocketAddr::new(self.upstream?, 53);
        let bind: SocketAddr = if up.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            "[::]:0".parse().ok()?
        };
        let s = UdpSocket::bind(bind).ok()?;
        s.set_read_timeout(Some(UPSTREAM_TIMEOUT)).ok()?;
        s.connect(up).ok()?;
        s.send(query).ok()?;
        let mut buf = vec![0u8; 4096];
        let n = s.recv(&mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    }

    fn forward_tcp(&self, query: &[u8]) -> Option<Vec<u8>> {
        let up = SocketAddr::new(self.upstream?, 53);
        let mut s = TcpStream::connect_timeout(&up, UPSTREAM_TIMEOUT).ok()?;
        s.set_read_timeout(Some(UPSTREAM_TIMEOUT)).ok()?;
        write_framed(&mut s, query).ok()?;
        read_framed(&mut s)
    }

    /// Serve UDP questions on `sock` until it fails (the machine went away).
    pub fn serve_udp(self, sock: UdpSocket) {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let query = buf[..n].to_vec();
            let (me, reply_sock) = (self.clone(), sock.try_clone());
            // Off the receiving thread: a slow upstream must not hold up other questions.
            std::thread::spawn(move || {
                if let (Some(reply), Ok(s)) = (me.answer(&query, Transport::Udp), reply_sock) {
                    let _ = s.send_to(&reply, from);
                }
            });
        }
    }

    /// Serve DNS over TCP on `listener`.
    pub fn serve_tcp(self, listener: TcpListener) {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let me = self.clone();
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                while let Some(query) = read_framed(&mut conn) {
                    let Some(reply) = me.answer(&query, Transport::Tcp) else {
                        break;
                    };
                    if write_framed(&mut conn, &reply).is_err() {
                        break;
                    }
                }
            });
        }
    }
}

fn read_framed(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len).ok()?;
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut msg).ok()?;
    Some(msg)
}

fn write_framed(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<()> {
    let len = u16::try_from(msg.len()).map_err(std::io::Error::other)?;
    s.write_all(&len.to_be_bytes())?;
    s.write_all(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` of `qtype`, id 0x1234, RD set.
    pub fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    #[test]
    fn questions_and_answers_round_trip() {
        let q = query("Api.Example.COM", TYPE_A);
        assert_eq!(
            question(&q).map(|(n, t, _)| (n, t)),
            Some(("api.example.com".to_string(), TYPE_A))
        );
        let ips = ["198.18.0.7".parse().unwrap_or(IpAddr::from([0u8; 4]))];
        let a = stand_in_reply(&q, TYPE_A, &ips);
        assert_eq!(&a[..2], &[0x12, 0x34]);
        assert_eq!(answer_records(&a), vec![(ips[0], STAND_IN_TTL)]);
        // An AAAA question for a v4-only stand-in: NOERROR, no records.
        let aaaa = stand_in_reply(&query("api.example.com", TYPE_AAAA), TYPE_AAAA, &ips);
        assert_eq!(u16_at(&aaaa, 2).map(|f| f & 0xf), Some(0));
        assert!(answer_records(&aaaa).is_empty());
    }

    #[test]
    fn refusals_echo_the_question_with_the_rcode() {
        let q = query("denied.example", TYPE_A);
        let r = error_reply(&q, RCODE_NXDOMAIN);
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(u16_at(&r, 2), Some(0x8000 | 0x0100 | 0x0080 | 3));
        assert_eq!(question(&r).map(|(n, ..)| n), Some("denied.example".into()));
        // Garbage gets SERVFAIL, never a panic.
        for junk in [&b""[..], &b"\x00\x01"[..], &[0xffu8; 40][..]] {
            let r = error_reply(junk, RCODE_SERVFAIL);
            assert_eq!(u16_at(&r, 2).map(|f| f & 0xf), Some(RCODE_SERVFAIL));
            assert!(question(junk).is_none());
        }
    }

    #[test]
    fn compression_loops_are_refused() {
        let mut q = query("a.test", TYPE_A);
        // Point the question name at itself.
        q[12] = 0xc0;
        q[13] = 12;
        assert!(question(&q).is_none());
    }
}
