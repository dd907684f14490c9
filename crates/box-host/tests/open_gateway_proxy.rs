//! The `box open` gateway's proxy against a scripted upstream (no VM): the same `serve`
//! the gateway process runs, with a fake box behind it. Covers what a real Executor does
//! not exercise on demand: an SSE stream that must arrive before the upstream finishes, a
//! WebSocket-style upgrade, a token that changes under a running gateway, redirects, and
//! the idle timeout. The browser-facing behaviour against the real Executor is in
//! `open_gateway.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod browser_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use box_host::gateway::{self, BoxProbe, control, serve};
use box_host::state::StateDir;
use box_proto::mcp::BearerToken;
use browser_support::text_of;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const OLD_TOKEN: &str = "old-token-Zq3xVb8t";
const NEW_TOKEN: &str = "new-token-Kp2wMm7r";
/// A page's part that shows, as `jar[<document.cookie>]`, the cookies its scripts can read
/// before the page's own scripts write any.
const JAR: &str = "<p id=jar></p><script>document.getElementById('jar').textContent = 'jar[' + document.cookie + ']'</script>";

/// A box whose token changes to NEW_TOKEN after the first read.
struct FakeBox {
    reads: AtomicUsize,
}

impl BoxProbe for FakeBox {
    fn token(&self) -> anyhow::Result<BearerToken> {
        let n = self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(BearerToken::new(if n == 0 { OLD_TOKEN } else { NEW_TOKEN }).unwrap())
    }
    fn running(&self) -> anyhow::Result<bool> {
        Ok(true)
    }
    fn registered(&self) -> bool {
        true
    }
}

/// What the upstream saw: the request head of each connection.
type Seen = Arc<Mutex<Vec<String>>>;

async fn read_head(stream: &mut BufReader<TcpStream>) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap() == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}

/// A scripted Executor: `/sse` streams one event, waits for `release`, sends another and
/// ends; `/ws` switches protocols and echoes; `/redirect` points at its own origin; every
/// other path answers 401 unless the Bearer is NEW_TOKEN.
async fn upstream(seen: Seen, release: Arc<tokio::sync::Notify>) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let seen = Arc::clone(&seen);
            let release = Arc::clone(&release);
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let head = read_head(&mut stream).await;
                seen.lock().unwrap().push(head.clone());
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let s = stream.get_mut();
                if path == "/sse" {
                    s.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n").await.unwrap();
                    let chunk = |t: &str| format!("{:x}\r\n{t}\r\n", t.len());
                    s.write_all(chunk("data: one\n\n").as_bytes())
                        .await
                        .unwrap();
                    s.flush().await.unwrap();
                    release.notified().await;
                    s.write_all(chunk("data: two\n\n").as_bytes())
                        .await
                        .unwrap();
                    s.write_all(b"0\r\n\r\n").await.unwrap();
                } else if path == "/ws" {
                    s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: x\r\n\r\n").await.unwrap();
                    let mut buf = [0u8; 64];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 || stream.get_mut().write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                } else if path == "/" {
                    // Executor's UI: its own cookies (one its scripts may read) and CSP, and a
                    // script that shows the cookies it can read and calls its API. A hostile
                    // guest also sets another local app's cookie name on a path no page uses,
                    // hoping to be sent the real one (which the browser sends on `/`), and
                    // its script tries to plant a cookie on every parent of its host name.
                    let body = format!(
                        "<!doctype html><title>Executor</title><p id=ui>Executor UI</p>{JAR}\
                        <script>const labels = location.hostname.split('.');\
                        for (let i = 1; i < labels.length; i++) document.cookie = 'planted=' + location.hostname + '; Domain=' + labels.slice(i).join('.') + '; Path=/; Max-Age=3600';\
                        fetch('/api/after').then(r => document.getElementById('ui').textContent += ' api ' + r.status)</script>"
                    );
                    let r = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nset-cookie: exec_sid=e1; Path=/; HttpOnly\r\nset-cookie: exec_theme=dark; Path=/; Max-Age=3600\r\nset-cookie: jupyter_token=bait; Path=/nowhere; Max-Age=3600\r\ncontent-security-policy: default-src 'self' 'unsafe-inline'\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    s.write_all(r.as_bytes()).await.unwrap();
                } else if path == "/redirect" {
                    let r = format!(
                        "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{port}/after?x=1\r\nset-cookie: exec=1; Path=/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    s.write_all(r.as_bytes()).await.unwrap();
                } else if head.contains(&format!("authorization: Bearer {NEW_TOKEN}")) {
                    s.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await
                    .unwrap();
                } else {
                    s.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 12\r\nconnection: close\r\n\r\nUnauthorized").await.unwrap();
                }
            });
        }
    });
    port
}

struct Gw {
    state: StateDir,
    _dir: tempfile::TempDir,
    name: String,
    port: u16,
    /// `box-<name>.localhost:<port>`: the one Host the gateway answers.
    authority: String,
    info: gateway::GatewayInfo,
    task: tokio::task::JoinHandle<anyhow::Result<String>>,
    probe: Arc<FakeBox>,
    /// Every response the gateway gave through [`Gw::raw`], as the browser got it.
    responses: Mutex<Vec<String>>,
}

async fn start_gateway(upstream_port: u16, idle: Duration) -> Gw {
    start_gateway_with("alpha", upstream_port, idle, gateway::Lifetimes::default()).await
}

async fn start_gateway_with(
    name: &str,
    upstream_port: u16,
    idle: Duration,
    sessions: gateway::Lifetimes,
) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path().join("state"));
    let probe = Arc::new(FakeBox {
        reads: AtomicUsize::new(0),
    });
    let opts = serve::Options {
        state: state.clone(),
        box_name: name.into(),
        upstream_port,
        idle_timeout: idle,
        sessions,
    };
    let task = tokio::spawn(serve::serve(opts, probe.clone()));
    for _ in 0..200 {
        let (s, n) = (state.clone(), name.to_string());
        if let Some(info) = tokio::task::spawn_blocking(move || control::status(&s, &n))
            .await
            .unwrap()
            .unwrap()
        {
            return Gw {
                state,
                _dir: dir,
                name: name.into(),
                port: info.port,
                authority: format!("{}:{}", info.host, info.port),
                info,
                task,
                probe,
                responses: Mutex::default(),
            };
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("gateway did not start");
}

impl Gw {
    /// `box-<name>.localhost`: the box's host name.
    fn host(&self) -> &str {
        self.authority.split(':').next().unwrap()
    }

    /// `http://box-<name>.localhost:<port>`: where the browser reaches the gateway.
    fn origin(&self) -> String {
        format!("http://{}", self.authority)
    }

    /// A fresh one-time sign-in URL, as `box open --print-url` prints it.
    async fn sign_in_url(&self) -> String {
        let (s, n) = (self.state.clone(), self.name.clone());
        let nonce = tokio::task::spawn_blocking(move || control::sign_in_nonce(&s, &n))
            .await
            .unwrap()
            .unwrap();
        gateway::sign_in_url(&self.info, &nonce)
    }

    /// Signs in through a fresh nonce; returns the cookie pair.
    async fn sign_in(&self) -> String {
        let url = self.sign_in_url().await;
        let path = url.strip_prefix(&self.origin()).expect(&url);
        let resp = self.get(path, "").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        let cookie = resp
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))
            .unwrap();
        // Host-only: no Domain, so the browser keeps it for the box's host name alone.
        assert!(
            cookie.starts_with("box_gateway_session=")
                && cookie.contains("; HttpOnly; SameSite=Strict; Path=/; Max-Age=")
                && !cookie.to_ascii_lowercase().contains("domain"),
            "{cookie}"
        );
        cookie.split(';').next().unwrap().to_string()
    }

    /// A request with `Connection: close`; returns the whole response.
    async fn raw(&self, request: String) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let first = request.lines().next().unwrap_or("").to_string();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no complete response to {first} within 10 s; got {:?}",
                    String::from_utf8_lossy(&out)
                )
            })
            .unwrap();
        let resp = String::from_utf8_lossy(&out).into_owned();
        self.responses.lock().unwrap().push(resp.clone());
        resp
    }

    async fn get(&self, path: &str, extra: &str) -> String {
        self.raw(format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\n{extra}connection: close\r\n\r\n",
            self.authority
        ))
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_arrive_before_the_upstream_response_ends() {
    let seen = Seen::default();
    let release = Arc::new(tokio::sync::Notify::new());
    let up = upstream(seen.clone(), release.clone()).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    let cookie = gw.sign_in().await;
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    s.write_all(
        format!(
            "GET /sse HTTP/1.1\r\nhost: {}\r\ncookie: {cookie}\r\naccept: text/event-stream\r\n\r\n",
            gw.authority
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    // The first event must come through while the upstream still holds the second back.
    tokio::time::timeout(Duration::from_secs(5), async {
        while !String::from_utf8_lossy(&got).contains("data: one") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "gateway closed early");
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the first SSE event was held back: the gateway buffers streaming responses");
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(!text.contains("data: two"), "{text}");
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    release.notify_one();
    tokio::time::timeout(Duration::from_secs(5), async {
        while !String::from_utf8_lossy(&got).contains("data: two") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("the second event");
    // Upstream was addressed as itself, with the token and without our cookie.
    let heads = seen.lock().unwrap().join("\n---\n");
    assert!(heads.contains(&format!("host: 127.0.0.1:{up}")), "{heads}");
    assert!(
        heads.contains(&format!("authorization: Bearer {OLD_TOKEN}")),
        "{heads}"
    );
    assert!(!heads.contains("box_gateway_"), "{heads}");
    gw.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_sign_in_upgrades_redirects_and_a_changed_token() {
    let seen = Seen::default();
    let up = upstream(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;

    // No cookie: the gateway's own 401 page, nothing forwarded.
    let bare = gw.get("/", "").await;
    assert!(bare.starts_with("HTTP/1.1 401"), "{bare}");
    assert!(bare.contains("box open alpha"), "{bare}");
    // A forged cookie is no better.
    let forged = gw
        .get(
            "/",
            &format!("cookie: box_gateway_session={}\r\n", "0".repeat(64)),
        )
        .await;
    assert!(forged.starts_with("HTTP/1.1 401"), "{forged}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reaches Executor unsigned"
    );

    // A nonce works once.
    let s = gw.state.clone();
    let nonce = tokio::task::spawn_blocking(move || control::sign_in_nonce(&s, "alpha"))
        .await
        .unwrap()
        .unwrap();
    let first = gw.get(&format!("/__box/sign-in?nonce={nonce}"), "").await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains("location.replace(\"/\")"), "{first}");
    let again = gw.get(&format!("/__box/sign-in?nonce={nonce}"), "").await;
    assert!(again.starts_with("HTTP/1.1 401"), "{again}");
    assert!(!again.contains("set-cookie"), "{again}");
    for hostile in ["", "nonce=", "nonce=%00", "nonce=../../x", "x=1&nonce=zz"] {
        let r = gw.get(&format!("/__box/sign-in?{hostile}"), "").await;
        assert!(r.starts_with("HTTP/1.1 401"), "{hostile}: {r}");
    }
    // The URL box open hands out names the box's own host, on the gateway's port.
    let url = gw.sign_in_url().await;
    let expected = format!(
        "http://box-alpha.localhost:{}/__box/sign-in?nonce=",
        gw.port
    );
    assert!(url.starts_with(&expected), "{url}");
    // Presented at any other name, a sign-in URL is refused and not spent.
    let path = url.strip_prefix(&gw.origin()).unwrap();
    let r = gw
        .raw(format!(
            "GET {path} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\n\r\n",
            gw.port
        ))
        .await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(!r.contains("set-cookie"), "{r}");
    assert!(gw.get(path, "").await.starts_with("HTTP/1.1 200"));
    let cookie = gw.sign_in().await;
    let c = format!("cookie: {cookie}\r\n");

    // Host guard, even with a valid session: the loopback names every local app shares,
    // another box's name, another port, DNS rebinding (which sends the victim's cookies).
    let p = gw.port;
    for host in [
        format!("127.0.0.1:{p}"),
        format!("localhost:{p}"),
        format!("[::1]:{p}"),
        format!("box-beta.localhost:{p}"),
        "box-alpha.localhost:1".to_string(),
        format!("box-alpha.localhost.:{p}"),
        format!("x.box-alpha.localhost:{p}"),
        "box-alpha.localhost".to_string(),
        "evil.example".to_string(),
        format!("evil.example:{p}"),
    ] {
        let r = gw
            .raw(format!(
                "GET / HTTP/1.1\r\nhost: {host}\r\n{c}connection: close\r\n\r\n"
            ))
            .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{host}: {r}");
        assert!(r.contains("Wrong host"), "{host}: {r}");
        // A rebinding site reads this page: it names no box.
        assert!(!r.contains("alpha"), "{host}: {r}");
    }
    // Foreign Origin on a state-changing request (another local port is another origin).
    for origin in [
        "http://evil.example".to_string(),
        format!("http://127.0.0.1:{p}"),
        format!("http://localhost:{p}"),
        format!("http://box-beta.localhost:{p}"),
        "http://box-alpha.localhost:1".to_string(),
        "null".to_string(),
    ] {
        let r = gw
            .raw(format!(
                "POST /api/x HTTP/1.1\r\nhost: {}\r\norigin: {origin}\r\n{c}content-length: 2\r\nconnection: close\r\n\r\n{{}}",
                gw.authority
            ))
            .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{origin}: {r}");
        assert!(r.contains("Cross-origin request refused"), "{origin}: {r}");
    }

    // The token changed (Executor restarted): the 401 makes the gateway re-read it and
    // replay the request, so the browser sees 200.
    let before = gw.probe.reads.load(Ordering::SeqCst);
    let r = gw.get("/api/integrations", &c).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.ends_with("ok"), "{r}");
    assert_eq!(gw.probe.reads.load(Ordering::SeqCst), before + 1);
    // Same-origin POST with a body goes through with the new token.
    let r = gw
        .raw(format!(
            "POST /api/x HTTP/1.1\r\nhost: {0}\r\norigin: http://{0}\r\n{c}content-length: 2\r\nconnection: close\r\n\r\n{{}}",
            gw.authority
        ))
        .await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");

    // Redirects to Executor's origin come back pointing at the gateway; cookies pass.
    let r = gw.get("/redirect", &c).await;
    assert!(
        r.contains(&format!("location: {}/after?x=1\r\n", gw.origin())),
        "{r}"
    );
    assert!(r.contains("set-cookie: exec=1; Path=/"), "{r}");

    // An upgrade is spliced through both ways.
    let mut ws = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    ws.write_all(
        format!(
            "GET /ws HTTP/1.1\r\nhost: {0}\r\norigin: http://{0}\r\n{c}connection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-key: k\r\nsec-websocket-version: 13\r\n\r\n",
            gw.authority
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut reader = BufReader::new(ws);
    let head = tokio::time::timeout(Duration::from_secs(5), read_head(&mut reader))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{head}"
    );
    reader.get_mut().write_all(b"ping-frame").await.unwrap();
    let mut echo = [0u8; 10];
    tokio::time::timeout(Duration::from_secs(5), reader.read_exact(&mut echo))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echo, b"ping-frame");
    // A cross-origin upgrade is refused.
    let r = gw
        .raw(format!(
            "GET /ws HTTP/1.1\r\nhost: {}\r\norigin: http://evil.example\r\n{c}connection: Upgrade\r\nupgrade: websocket\r\n\r\n",
            gw.authority
        ))
        .await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");

    // No response the browser got ever carried a token; Executor never saw our cookie.
    let responses = gw.responses.lock().unwrap().join("\n");
    assert!(responses.len() > 1000, "too few responses recorded");
    for t in [OLD_TOKEN, NEW_TOKEN] {
        assert!(!responses.contains(t), "a token reached the browser");
        assert!(!head.contains(t), "a token reached the browser");
    }
    let heads = seen.lock().unwrap().join("\n");
    assert!(!heads.contains("box_gateway_"), "{heads}");
    gw.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_gateway_stops_and_cleans_up_but_not_while_streaming() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = upstream(Seen::default(), release.clone()).await;
    let gw = start_gateway(up, Duration::from_secs(1)).await;
    let cookie = gw.sign_in().await;
    // An open SSE stream keeps it alive past the timeout.
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    s.write_all(
        format!(
            "GET /sse HTTP/1.1\r\nhost: {}\r\ncookie: {cookie}\r\nconnection: close\r\n\r\n",
            gw.authority
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = [0u8; 256];
    tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("the stream's first event")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!gw.task.is_finished(), "stopped while a stream was open");
    release.notify_one();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    drop(s);
    let reason = tokio::time::timeout(Duration::from_secs(10), gw.task)
        .await
        .expect("idle gateway stops")
        .unwrap()
        .unwrap();
    assert_eq!(reason, "idle for 1s");
    let sock = gateway::record::socket_path(&gw.state, "alpha");
    assert!(!sock.exists(), "socket left behind");
    assert!(!gateway::record::info_path(&gw.state, "alpha").exists());
    let s = gw.state.clone();
    assert!(
        tokio::task::spawn_blocking(move || gateway::running(&s, "alpha"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_socket_survives_hostile_requests() {
    use tokio::net::UnixStream;
    let up = upstream(Seen::default(), Arc::new(tokio::sync::Notify::new())).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    let sock = gateway::record::socket_path(&gw.state, "alpha");
    let mode = std::fs::metadata(&sock).unwrap().permissions();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.mode() & 0o777, 0o600, "control socket must be private");
    let dir_mode = std::fs::metadata(gateway::record::dir(&gw.state))
        .unwrap()
        .permissions();
    assert_eq!(dir_mode.mode() & 0o777, 0o700);
    let ask = |bytes: Vec<u8>| {
        let sock = sock.clone();
        async move {
            let mut s = UnixStream::connect(&sock).await.unwrap();
            let _ = s.write_all(&bytes).await;
            let _ = s.shutdown().await;
            let mut out = String::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out)).await;
            out
        }
    };
    assert_eq!(ask(b"STOP\n".to_vec()).await, "error unknown request\n");
    assert_eq!(
        ask(b"sign-in please\n".to_vec()).await,
        "error unknown request\n"
    );
    assert_eq!(ask(b"\0\xff\n".to_vec()).await, "");
    // An endless line is cut at the limit and refused (the refusal may be lost to the
    // reset of a socket closed with unread data: what matters is that nothing is granted
    // and the gateway lives on).
    let endless = ask(vec![b'a'; 100_000]).await;
    assert!(
        endless.is_empty() || endless == "error unknown request\n",
        "{endless}"
    );
    assert_eq!(ask(Vec::new()).await, "error unknown request\n");
    // The gateway is still there and still hands out nonces.
    let s = gw.state.clone();
    let info = tokio::task::spawn_blocking(move || control::status(&s, "alpha"))
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(info.port, gw.port);
    gw.sign_in().await;
    gw.task.abort();
}

/// Another local web app (Jupyter, a dev server, anything listening on the loopback):
/// answers every request with `extra_head` lines and `body`. Returns its port and the
/// request heads it got.
async fn local_page(extra_head: &str, body: String) -> (u16, Seen) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let head = extra_head.to_string();
    let seen = Seen::default();
    let heads = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (head, body, heads) = (head.clone(), body.clone(), Arc::clone(&heads));
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let got = read_head(&mut stream).await;
                heads.lock().unwrap().push(got);
                let r = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n{head}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.get_mut().write_all(r.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

/// One Chromium page load in `profile`, off the runtime's threads.
async fn chromium(profile: &std::path::Path, url: String) -> browser_support::Loaded {
    let profile = profile.to_path_buf();
    tokio::task::spawn_blocking(move || browser_support::load(&profile, &url))
        .await
        .unwrap()
}

/// Signs Chromium in (in `profile`) through a fresh sign-in URL of `gw`; returns the text
/// of Executor's page after its scripts ran, one of which called Executor's API.
async fn open_ui(gw: &Gw, profile: &std::path::Path) -> String {
    let loaded = chromium(profile, gw.sign_in_url().await).await;
    let text = text_of(&loaded.dom);
    assert!(
        text.contains("Executor UI api 200"),
        "not signed in, or the API call failed:\n{}",
        loaded.dom
    );
    text
}

/// Whatever listens on another loopback port can be reached under the box's host name
/// (a link away), and shares that name's cookie jar: Chromium holds cookies such an app
/// set, and Executor sets one of the same name on a path of its own
/// (`jupyter_token=bait; Path=/nowhere`). The real one, which Chromium sends on every
/// path, never reaches Executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_sends_executor_only_the_cookies_executor_set() {
    if !browser_support::available() {
        return;
    }
    let seen = Seen::default();
    let up = upstream(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    // (Max-Age: each Chromium run is a new browser, which keeps only persistent cookies.)
    let (other, _) = local_page(
        "set-cookie: jupyter_token=leak-jt-51c; Path=/; Max-Age=3600\r\nset-cookie: box_gateway_1=other-box-7e2; Path=/; Max-Age=3600\r\n",
        "<p>another app</p>".into(),
    )
    .await;
    let profile = gw._dir.path().join("chromium");
    chromium(&profile, format!("http://{}:{other}/", gw.host())).await;
    let text = open_ui(&gw, &profile).await;
    assert!(
        text.contains("leak-jt-51c"),
        "the app's cookie is not in the box's jar, so this test shows nothing:\n{text}"
    );
    let heads = seen.lock().unwrap().clone();
    let api = heads
        .iter()
        .rfind(|h| h.starts_with("GET /api/after"))
        .expect("the page's API call reached Executor");
    assert!(
        api.contains("exec_sid=e1"),
        "Executor's own cookie must reach it:\n{api}"
    );
    for h in &heads {
        for foreign in ["leak-jt-51c", "other-box-7e2", "box_gateway_"] {
            assert!(!h.contains(foreign), "Executor got {foreign}:\n{h}");
        }
    }
    gw.task.abort();
}

/// The reason for the box's host name: another web app on the user's loopback sets a
/// cookie its scripts may read (`127.0.0.1:<its port>`). A script on Executor's page
/// through the gateway does not see it, and neither that app nor its scripts ever see the
/// gateway's session cookie or Executor's cookies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_keeps_another_loopback_apps_cookies_and_the_boxs_apart() {
    if !browser_support::available() {
        return;
    }
    let up = upstream(Seen::default(), Arc::new(tokio::sync::Notify::new())).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    let (other, other_heads) = local_page(
        "set-cookie: bait=other-app-3f1; Path=/; Max-Age=3600\r\n",
        JAR.into(),
    )
    .await;
    let app = format!("http://127.0.0.1:{other}/");
    let profile = gw._dir.path().join("chromium");
    let first = chromium(&profile, app.clone()).await;
    assert!(
        text_of(&first.dom).contains("jar[bait=other-app-3f1]"),
        "the app's scripts cannot read its own cookie:\n{}",
        first.dom
    );

    let text = open_ui(&gw, &profile).await;
    // Executor's scripts read exactly Executor's own readable cookie: no bait, and not the
    // gateway's session (HttpOnly).
    assert!(text.contains("jar[exec_theme=dark]"), "{text}");

    let again = chromium(&profile, app).await;
    let text = text_of(&again.dom);
    assert!(text.contains("jar[bait=other-app-3f1]"), "{text}");
    // What the browser sent the app on its second visit (its page, and the favicon).
    let heads = other_heads.lock().unwrap().clone();
    let pages: Vec<&String> = heads.iter().filter(|h| h.starts_with("GET / ")).collect();
    assert_eq!(pages.len(), 2, "{heads:#?}");
    let cookies: Vec<&str> = pages[1]
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("cookie"))
        .map(|(_, v)| v.trim())
        .collect();
    assert_eq!(
        cookies,
        ["bait=other-app-3f1"],
        "the app got other cookies than its own:\n{}",
        pages[1]
    );
    for h in &heads {
        for leaked in ["box_gateway_", "exec_", "planted", "jupyter_token"] {
            assert!(!h.contains(leaked), "{leaked}:\n{h}");
        }
    }
    gw.task.abort();
}

/// Two boxes' UIs are two sites: a script on one box's page cannot plant a cookie, for
/// any parent domain of its host name, that the other box's page reads (under
/// `<box>.box.localhost` names it could, for `box.localhost`). The second box's name is as
/// long as a name may be, so its host name is the shortened form; Chromium loads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_boxs_page_cannot_plant_cookies_for_another_boxs() {
    if !browser_support::available() {
        return;
    }
    let up = upstream(Seen::default(), Arc::new(tokio::sync::Notify::new())).await;
    let alpha = start_gateway(up, Duration::from_secs(600)).await;
    let long_name = format!("{}-x", "b".repeat(61));
    let long = start_gateway_with(
        &long_name,
        up,
        Duration::from_secs(600),
        gateway::Lifetimes::default(),
    )
    .await;
    let host = long.host();
    let label = host.strip_suffix(".localhost").expect(host);
    assert_eq!(label.len(), 63, "{host}");
    assert!(
        label.starts_with("box-bbbb") && label.contains("--"),
        "{host}"
    );

    let profile = alpha._dir.path().join("chromium");
    open_ui(&alpha, &profile).await;
    // Chromium reached the box with the long name, and its page's scripts see no cookie
    // the first box's page planted, nor any of the first box's.
    let text = open_ui(&long, &profile).await;
    assert!(text.contains("jar[exec_theme=dark]"), "{text}");
    // Back on the first box's page: the second one's plants did not reach it either.
    let text = open_ui(&alpha, &profile).await;
    assert!(text.contains("jar[exec_theme=dark]"), "{text}");
    alpha.task.abort();
    long.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_local_page_can_neither_frame_nor_fetch_the_signed_in_ui() {
    if !browser_support::available() {
        return;
    }
    let seen = Seen::default();
    let up = upstream(seen.clone(), Arc::new(tokio::sync::Notify::new())).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    let profile = gw._dir.path().join("chromium");
    let signed_in = chromium(&profile, gw.sign_in_url().await).await;
    assert!(
        text_of(&signed_in.dom).contains("Executor UI"),
        "{}",
        signed_in.dom
    );

    // A page on another local port, reached under the box's host name (same site: our
    // SameSite=Strict cookie goes with its requests), frames the signed-in UI and fetches
    // from it.
    let ui = format!("{}/", gw.origin());
    let (framer, _) = local_page(
        "",
        format!(
            "<iframe src=\"{ui}\"></iframe>\
             <script>fetch('{ui}api/framed', {{mode: 'no-cors', credentials: 'include'}})</script>"
        ),
    )
    .await;
    let before = seen.lock().unwrap().len();
    let loaded = chromium(&profile, format!("http://{}:{framer}/", gw.host())).await;
    let blocked = format!(
        "Framing '{ui}' violates the following Content Security Policy directive: \"frame-ancestors 'none'\""
    );
    assert!(
        loaded.log.contains(&blocked),
        "Chromium did not block the frame:\n{}",
        loaded.log
    );
    let reached: Vec<String> = seen.lock().unwrap()[before..].to_vec();
    assert!(
        reached.is_empty(),
        "the framing page's requests reached Executor: {reached:#?}"
    );

    // Its own pages: Executor's CSP kept, framing forbidden beside it.
    let cookie = gw.sign_in().await;
    let c = format!("cookie: {cookie}\r\n");
    let own = gw
        .get("/", &format!("{c}sec-fetch-site: same-origin\r\n"))
        .await;
    assert!(own.starts_with("HTTP/1.1 200"), "{own}");
    let own_lower = own.to_ascii_lowercase();
    assert!(
        own_lower.contains("content-security-policy: default-src 'self' 'unsafe-inline'\r\n"),
        "{own}"
    );
    assert!(
        own_lower.contains("content-security-policy: frame-ancestors 'none'\r\n"),
        "{own}"
    );
    assert!(own_lower.contains("x-frame-options: deny\r\n"), "{own}");

    // A cross-site fetch, even a plain GET with the cookie, gets the gateway's refusal.
    let before = seen.lock().unwrap().len();
    let r = gw
        .get(
            "/api/integrations",
            &format!("{c}origin: http://evil.example\r\nsec-fetch-site: cross-site\r\nsec-fetch-mode: cors\r\nsec-fetch-dest: empty\r\n"),
        )
        .await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(r.contains("Request from another site refused"), "{r}");
    assert!(r.contains("box open alpha"), "{r}");
    // A link from a local page to the gateway may still open it in the whole tab.
    let nav = gw
        .get(
            "/",
            &format!("{c}sec-fetch-site: same-site\r\nsec-fetch-mode: navigate\r\nsec-fetch-dest: document\r\n"),
        )
        .await;
    assert!(nav.starts_with("HTTP/1.1 200"), "{nav}");
    assert_eq!(
        seen.lock().unwrap().len(),
        before + 1,
        "only the navigation reached Executor"
    );
    gw.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_end_when_idle_when_old_and_on_sign_out_streams_included() {
    let release = Arc::new(tokio::sync::Notify::new());
    let up = upstream(Seen::default(), release.clone()).await;
    let refused = |r: &str| r.starts_with("HTTP/1.1 401") && r.contains("box open alpha");

    // Idle: 1 s without a request ends the session; the page says what to run.
    let gw = start_gateway_with(
        "alpha",
        up,
        Duration::from_secs(600),
        gateway::Lifetimes {
            idle: Duration::from_secs(1),
            max_age: Duration::from_secs(600),
        },
    )
    .await;
    let c = format!("cookie: {}\r\n", gw.sign_in().await);
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let r = gw.get("/redirect", &c).await;
        assert!(
            r.starts_with("HTTP/1.1 302"),
            "in use, still signed in: {r}"
        );
    }
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r = gw.get("/redirect", &c).await;
    assert!(refused(&r), "idle past its lifetime: {r}");
    // box open after expiry signs in again.
    let c = format!("cookie: {}\r\n", gw.sign_in().await);
    assert!(gw.get("/redirect", &c).await.starts_with("HTTP/1.1 302"));
    gw.task.abort();

    // Absolute: used all the time, it still ends 2 s after sign-in.
    let gw = start_gateway_with(
        "alpha",
        up,
        Duration::from_secs(600),
        gateway::Lifetimes {
            idle: Duration::from_secs(600),
            max_age: Duration::from_secs(2),
        },
    )
    .await;
    let c = format!("cookie: {}\r\n", gw.sign_in().await);
    let signed_in = tokio::time::Instant::now();
    loop {
        let r = gw.get("/redirect", &c).await;
        if signed_in.elapsed() < Duration::from_millis(1800) {
            assert!(r.starts_with("HTTP/1.1 302"), "{r}");
        } else if signed_in.elapsed() > Duration::from_millis(2200) {
            assert!(refused(&r), "2 s after sign-in: {r}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    gw.task.abort();

    // Sign-out ends every session at once, and the stream open under one.
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    let cookie = gw.sign_in().await;
    let other = format!("cookie: {}\r\n", gw.sign_in().await);
    let mut s = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    s.write_all(
        format!(
            "GET /sse HTTP/1.1\r\nhost: {}\r\ncookie: {cookie}\r\nconnection: close\r\n\r\n",
            gw.authority
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("data: one") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the stream's first event")
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let st = gw.state.clone();
    let ended = tokio::task::spawn_blocking(move || control::sign_out(&st, "alpha"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended, Some(2));
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .expect("the stream of a signed-out session must end")
        .unwrap();
    assert!(!String::from_utf8_lossy(&got).contains("data: two"));
    release.notify_one();
    assert!(refused(
        &gw.get("/redirect", &format!("cookie: {cookie}\r\n")).await
    ));
    assert!(refused(&gw.get("/redirect", &other).await));
    gw.task.abort();
}

/// A gateway an older box started (before host names) answers at 127.0.0.1 only, where
/// the browser sent to `box-<name>.localhost` would be refused: `box open` stops it
/// instead of handing it out, and hands out a current one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn box_open_replaces_a_gateway_an_older_box_started() {
    use tokio::net::UnixListener;
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir::at(dir.path().join("state"));
    StateDir::ensure_private_dir(&gateway::record::dir(&state)).unwrap();
    // The older gateway: a process, its record without a host name, its control socket.
    let process = Arc::new(Mutex::new(
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap(),
    ));
    let pid = process.lock().unwrap().id();
    let info_path = gateway::record::info_path(&state, "alpha");
    let record = format!(
        r#"{{"box":"alpha","pid":{pid},"port":40001,"upstream_port":40002,"started":"2025-01-01T00:00:00Z"}}"#
    );
    std::fs::write(&info_path, &record).unwrap();
    let listener = UnixListener::bind(gateway::record::socket_path(&state, "alpha")).unwrap();
    let asked = Seen::default();
    let (older, questions) = (Arc::clone(&process), Arc::clone(&asked));
    let answering = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            questions.lock().unwrap().push(line.trim().to_string());
            let reply = if line.trim() == "stop" {
                let mut p = older.lock().unwrap();
                p.kill().unwrap();
                p.wait().unwrap();
                std::fs::remove_file(&info_path).unwrap();
                "ok".to_string()
            } else {
                record.clone()
            };
            stream
                .get_mut()
                .write_all(format!("{reply}\n").as_bytes())
                .await
                .unwrap();
        }
    });
    let s = state.clone();
    let reused = tokio::task::spawn_blocking(move || gateway::reusable(&s, "alpha"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reused, None, "an older gateway was handed out");
    assert!(
        asked.lock().unwrap().iter().any(|q| q == "stop"),
        "{asked:?}"
    );
    assert!(!gateway::pid_alive(pid), "the older gateway still runs");
    answering.abort();

    // A current gateway is handed out as it is, at the box's host name.
    let up = upstream(Seen::default(), Arc::new(tokio::sync::Notify::new())).await;
    let gw = start_gateway(up, Duration::from_secs(600)).await;
    let s = gw.state.clone();
    let reused = tokio::task::spawn_blocking(move || gateway::reusable(&s, "alpha"))
        .await
        .unwrap()
        .unwrap()
        .expect("the running gateway");
    assert_eq!(reused.port, gw.port);
    assert_eq!(
        reused.url(),
        format!("http://box-alpha.localhost:{}", gw.port)
    );
    gw.task.abort();
}
