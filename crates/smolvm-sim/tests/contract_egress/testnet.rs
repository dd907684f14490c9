//! Servers in network namespaces this test process makes itself: one veth pair per server
//! (`<host>/30` on this side, `<peer>` inside), named after the test process's pid, removed
//! on drop. Every test talks only to these.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

static N: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `/30` of `base` (`198.18` or `172.29`) for this process: (host side, server side).
pub fn pair(base: &str) -> (String, String) {
    let n = N.fetch_add(1, Ordering::SeqCst);
    let slot = (std::process::id() % 4000) * 16 + n;
    let (third, fourth) = ((slot / 64) % 256, (slot % 64) * 4);
    (
        format!("{base}.{third}.{}", fourth + 1),
        format!("{base}.{third}.{}", fourth + 2),
    )
}

/// One namespace with an address; its servers are bound inside it.
pub struct Netns {
    name: String,
    veth: String,
    pub addr: String,
}

impl Netns {
    pub fn new((host, peer): (String, String)) -> Self {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let name = format!("smolct-{}-{n}", std::process::id());
        let veth = format!("sct{}x{n}", std::process::id() % 1_000_000);
        let inner = format!("{veth}i");
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &inner]);
        ip(&["link", "set", &inner, "netns", &name]);
        ip(&["addr", "add", &format!("{host}/30"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{peer}/30"),
            "dev",
            &inner,
        ]);
        ip(&["-n", &name, "link", "set", &inner, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ip(&["-n", &name, "route", "add", "default", "via", &host]);
        Self {
            name,
            veth,
            addr: peer,
        }
    }

    /// A listener on `addr:port` inside the namespace.
    pub fn listen(&self, port: u16) -> TcpListener {
        let path = PathBuf::from("/run/netns").join(&self.name);
        let at = format!("{}:{port}", self.addr);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(path).unwrap();
            // SAFETY: setns on this short-lived thread only.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            TcpListener::bind(at).unwrap()
        })
        .join()
        .unwrap()
    }

    /// A plain TCP server that answers every connection with `hello\n`.
    pub fn hello(&self, port: u16) {
        let l = self.listen(port);
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let mut c = c;
                let _ = c.write_all(b"hello\n");
            }
        });
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A test CA (written to `dir/ca.pem`) and an HTTPS server for `host` inside `ns` on 443,
/// which records every request it gets (head and body) and answers `200 {"ok":true}`; a
/// request with a `model` (an Anthropic Messages call, as Claude Code makes it) gets a
/// message whose text is [`REPLY`] (as server-sent events when it asks for a stream), and
/// `HEAD` the head alone.
pub struct Https {
    pub ca: PathBuf,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl Https {
    pub fn start(ns: &Netns, host: &str, dir: &Path) -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::default();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "smolvm-sim contract test CA");
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec![host.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(
                    vec![leaf.der().clone()],
                    rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
                )
                .unwrap(),
        );
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let l = ns.listen(443);
        let s2 = Arc::clone(&seen);
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let (config, seen) = (Arc::clone(&config), Arc::clone(&s2));
                std::thread::spawn(move || serve(c, config, &seen));
            }
        });
        Self { ca, seen }
    }

    pub fn seen(&self) -> String {
        self.seen.lock().unwrap().join("\n---\n")
    }
}

fn serve(c: TcpStream, config: Arc<rustls::ServerConfig>, seen: &Mutex<Vec<String>>) {
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = BufReader::new(rustls::StreamOwned::new(conn, c));
    loop {
        let mut head = String::new();
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if tls.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0u8; len];
        if tls.read_exact(&mut body).is_err() {
            return;
        }
        let is_head = head.starts_with("HEAD ");
        let (content_type, out) = answer(&body);
        head.push_str(&String::from_utf8_lossy(&body));
        seen.lock().unwrap().push(head);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            out.len()
        );
        let w = tls.get_mut();
        if w.write_all(resp.as_bytes())
            .and_then(|_| if is_head { Ok(()) } else { w.write_all(&out) })
            .is_err()
        {
            return;
        }
        let _ = w.flush();
    }
}

/// The text of the message the server answers a Messages call with.
pub const REPLY: &str = "hello from the test server";

/// The body (and its type) for a request body: a Messages call gets a message, anything else
/// `{"ok":true}`.
fn answer(body: &[u8]) -> (&'static str, Vec<u8>) {
    let req: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let Some(model) = req.get("model").and_then(|m| m.as_str()) else {
        return ("application/json", b"{\"ok\":true}".to_vec());
    };
    let usage = serde_json::json!({"input_tokens": 1, "output_tokens": 5});
    let message = |content: serde_json::Value, stop: serde_json::Value| {
        serde_json::json!({
            "id": "msg_test", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage,
        })
    };
    if req.get("stream") != Some(&serde_json::Value::Bool(true)) {
        let text = serde_json::json!([{"type": "text", "text": REPLY}]);
        let m = message(text, "end_turn".into());
        return ("application/json", m.to_string().into_bytes());
    }
    let events = [
        (
            "message_start",
            serde_json::json!({"type": "message_start", "message": message(serde_json::json!([]), serde_json::Value::Null)}),
        ),
        (
            "content_block_start",
            serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": REPLY}}),
        ),
        (
            "content_block_stop",
            serde_json::json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", serde_json::json!({"type": "message_stop"})),
    ];
    let sse: String = events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect();
    ("text/event-stream", sse.into_bytes())
}
