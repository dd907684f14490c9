//! `box open` as a person uses it: the real `box` against a simulator box running the real
//! Executor 1.5.9, the one-time URL loaded in headless Chromium (Debian's `chromium`), the
//! gateway's whole lifetime, and a scan of every process on the host for the token.
//! The proxy's streaming and upgrade paths are tested against a scripted upstream in
//! `open_gateway_proxy.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod browser_support;
mod lifecycle_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use browser_support::text_of;
use lifecycle_support::World;

/// Root, the guest tools, and Chromium; missing ones fail under CI=true.
fn prerequisites() -> bool {
    lifecycle_support::prerequisites() && browser_support::available()
}

/// The DOM Chromium built for `url` in a fresh profile, after the SPA's scripts ran.
fn chromium_dom(w: &World, url: &str, label: &str) -> String {
    let profile = w.dir.path().join(format!("chromium-{label}"));
    let loaded = browser_support::load(&profile, url);
    std::fs::write(w.dir.path().join(format!("dom-{label}.html")), &loaded.dom).unwrap();
    if loaded.dom.trim().is_empty() {
        eprintln!("chromium left no DOM for {label}; its log:\n{}", loaded.log);
    }
    loaded.dom
}

/// The host name box's gateway serves the box `alpha` at.
const HOST: &str = "box-alpha.localhost";

/// `http://box-alpha.localhost:<port>`: where a browser reaches the gateway on `port`.
fn origin(port: u16) -> String {
    format!("http://{HOST}:{port}")
}

/// One raw HTTP/1.1 request to the gateway; returns the whole response.
fn http(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(port: u16, path: &str, extra: &str) -> String {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\n{extra}connection: close\r\n\r\n"),
    )
}

/// The `cookie:` request header line for the session a sign-in response set.
fn cookie_header(signed: &str) -> String {
    let cookie = signed
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap();
    format!("cookie: {cookie}\r\n")
}

/// A fresh sign-in path (`/__box/sign-in?nonce=…`) from `box open --print-url`.
fn sign_in_path(w: &World, port: u16) -> String {
    let out = w
        .command(&["open", "alpha", "--print-url"], &[])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let url = stdout.lines().find(|l| l.starts_with("http://")).unwrap();
    url.strip_prefix(&origin(port)).expect(url).to_string()
}

/// `(pid, port)` of the gateway box recorded for `name`, if any.
fn recorded_gateway(w: &World, name: &str) -> Option<(u32, u16)> {
    let text =
        std::fs::read_to_string(w.home.join("gateways").join(format!("{name}.json"))).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((v["pid"].as_u64()? as u32, v["port"].as_u64()? as u16))
}

/// Pids of `box __gateway <name>` processes of this world (its BOX_HOME).
fn gateway_processes(w: &World, name: &str) -> Vec<u32> {
    let home = format!("BOX_HOME={}", w.home.display());
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if !args
            .windows(2)
            .any(|p| p[0] == b"__gateway" && p[1] == name.as_bytes())
        {
            continue;
        }
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if environ.split(|b| *b == 0).any(|v| v == home.as_bytes()) {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            if stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            {
                continue;
            }
            pids.push(pid);
        }
    }
    pids
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn port_closed(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_err()
}

/// Every process on the host whose argv or environment holds `token`, except those in the
/// simulator guests' PID namespaces: Executor 1.5.9 inside the box gets its token on argv
/// from hb (the guest is its own trust domain; see hb's token.rs). Returns what was found
/// and how many of our own namespace's processes were scanned.
fn processes_holding(token: &str) -> (Vec<String>, usize) {
    let own_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let mut found = Vec::new();
    let mut scanned = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let Ok(ns) = std::fs::read_link(e.path().join("ns/pid")) else {
            continue;
        };
        if ns != own_ns {
            continue;
        }
        scanned += 1;
        for file in ["cmdline", "environ"] {
            let bytes = std::fs::read(e.path().join(file)).unwrap_or_default();
            if String::from_utf8_lossy(&bytes).contains(token) {
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd)
                    .replace('\0', " ")
                    .replace(token, "<TOKEN>");
                found.push(format!("{} {file}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    (found, scanned)
}

#[test]
fn box_open_signs_chromium_in_to_executor_1_5_9_and_the_token_stays_in_box() {
    if !prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let new = w.run(&["new", "alpha"]);
    assert!(new.ok(), "{new}");
    let token = w.hb("alpha", &["token"]);
    assert!(token.status.success());
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();
    assert!(token.len() >= 16, "implausible token");

    // The opener records the URLs it is handed (one per line).
    let opened = w.dir.path().join("opened-urls");
    let opener = w.dir.path().join("record-opener");
    std::fs::write(
        &opener,
        format!(
            "#!/bin/sh\n[ $# -eq 1 ] || exit 9\nprintf '%s\\n' \"$1\" >> '{}'\n",
            opened.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let browser = [("BOX_BROWSER", opener.to_str().unwrap())];

    // Two `box open` at once: both succeed and share one gateway.
    let a = w.spawn(&["open", "alpha"], &browser);
    let b = w.spawn(&["open", "alpha"], &browser);
    let a = w.collect(a, "box open alpha (a)");
    let b = w.collect(b, "box open alpha (b)");
    assert!(a.ok(), "{a}");
    assert!(b.ok(), "{b}");
    let opened_urls: Vec<String> = std::fs::read_to_string(&opened)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(opened_urls.len(), 2, "{opened_urls:?}");
    let (gw_pid, gw_port) = recorded_gateway(&w, "alpha").expect("gateway recorded");
    // The opener's argv (readable by every user of the host) holds only a file URL: the
    // page it names is private to the user and leads on to the one-time sign-in URL.
    let pages: Vec<std::path::PathBuf> = opened_urls
        .iter()
        .map(|u| {
            assert!(!u.contains("nonce"), "a nonce in the opener's argv: {u}");
            assert!(!u.contains("http:"), "a URL in the opener's argv: {u}");
            std::path::PathBuf::from(u.strip_prefix("file://").expect(u))
        })
        .collect();
    use std::os::unix::fs::MetadataExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    let mut urls = Vec::new();
    for page in &pages {
        assert_eq!(mode(page), 0o600, "{}", page.display());
        assert_eq!(mode(page.parent().unwrap()), 0o700, "{}", page.display());
        let text = std::fs::read_to_string(page).unwrap();
        let prefix = format!("{}/__box/sign-in?nonce=", origin(gw_port));
        let at = text.find(&prefix).expect(&text);
        let url = text[at..at + prefix.len() + 64].to_string();
        assert!(
            url[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit()),
            "{url}"
        );
        assert!(!text.contains(&token), "the token is in the sign-in page");
        urls.push(url);
    }
    assert_ne!(urls[0], urls[1], "each open gets its own nonce");
    assert_eq!(
        gateway_processes(&w, "alpha"),
        [gw_pid],
        "exactly one gateway"
    );
    assert_ne!(gw_port, w.port_lo);
    assert_ne!(gw_port, w.port_hi);

    // While it runs, no process of ours holds the token in argv or environment.
    let (found, scanned) = processes_holding(&token);
    assert!(found.is_empty(), "token visible in /proc: {found:#?}");
    assert!(scanned > 0);
    let gw_env = std::fs::read(format!("/proc/{gw_pid}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&gw_env).contains(&token));

    // The real browser, opened on the page as the opener would: it lands on Executor's
    // signed-in Integrations page, and the used page is gone.
    let dom = chromium_dom(&w, &opened_urls[0], "signed-in");
    let text = text_of(&dom);
    let words: Vec<&str> = text.split_whitespace().collect();
    eprintln!("signed-in page text: {}", words.join(" "));
    assert!(
        text.contains("Integrations"),
        "no Integrations page in the DOM:\n{dom}"
    );
    assert!(
        !text.contains("Unauthorized"),
        "Executor refused the gateway:\n{dom}"
    );
    assert!(!dom.contains(&token), "the token reached the page");
    assert!(!pages[0].exists(), "the used sign-in page was left behind");
    // The same URL again (a fresh browser profile): not signed in.
    let dom = chromium_dom(&w, &urls[0], "reused");
    let text = text_of(&dom);
    assert!(text.contains("Sign-in link used or expired"), "{dom}");
    assert!(!text.contains("Integrations"), "{dom}");
    // The bare gateway URL without the cookie: the 401 page that says what to run.
    let dom = chromium_dom(&w, &format!("{}/", origin(gw_port)), "bare");
    assert!(text_of(&dom).contains("box open alpha"), "{dom}");
    // At 127.0.0.1, whose cookies every local web app shares, the gateway does not serve.
    let dom = chromium_dom(&w, &format!("http://127.0.0.1:{gw_port}/"), "by-address");
    assert!(text_of(&dom).contains("Wrong host"), "{dom}");
    let bare = get(gw_port, "/", "");
    assert!(bare.starts_with("HTTP/1.1 401"), "{bare}");

    // The second URL signs a plain client in; Executor's API answers through the gateway.
    let signed = get(gw_port, urls[1].strip_prefix(&origin(gw_port)).unwrap(), "");
    assert!(signed.starts_with("HTTP/1.1 200"), "{signed}");
    assert!(!pages[1].exists(), "the used sign-in page was left behind");
    let c = cookie_header(&signed);
    let api = get(gw_port, "/api/integrations", &c);
    assert!(api.starts_with("HTTP/1.1 200"), "{api}");
    assert!(!api.contains(&token));
    // --sign-out ends the session: the page says what to run; the gateway stays.
    let out = w.run(&["open", "--sign-out", "alpha"]);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("Signed out 2 browser session(s) of 'alpha'"),
        "{out}"
    );
    let refused = get(gw_port, "/api/integrations", &c);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.contains("box open alpha"), "{refused}");
    assert_eq!(recorded_gateway(&w, "alpha"), Some((gw_pid, gw_port)));
    let signed = get(gw_port, &sign_in_path(&w, gw_port), "");
    let c = cookie_header(&signed);
    // A foreign Host is refused, even with the cookie (DNS rebinding).
    let foreign = http(
        gw_port,
        &format!(
            "GET / HTTP/1.1\r\nhost: rebind.example:{gw_port}\r\n{c}connection: close\r\n\r\n"
        ),
    );
    assert!(foreign.starts_with("HTTP/1.1 403"), "{foreign}");
    // A foreign Origin on a state-changing request is refused.
    let post = http(
        gw_port,
        &format!(
            "POST /api/integrations HTTP/1.1\r\nhost: {HOST}:{gw_port}\r\norigin: http://evil.example\r\n{c}content-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
        ),
    );
    assert!(post.starts_with("HTTP/1.1 403"), "{post}");
    // The gateway's own refusal, not a 403 Executor might send itself.
    assert!(post.contains("Cross-origin request refused"), "{post}");

    // Reported, not asserted: what the gateway costs while idle, after serving the UI.
    let status = std::fs::read_to_string(format!("/proc/{gw_pid}/status")).unwrap();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: ?");
    eprintln!("gateway (debug build) after serving the UI: {rss}");

    // ls and doctor show the running gateway.
    let ls = w.run(&["ls", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&ls.stdout).unwrap();
    assert_eq!(rows[0]["gateway"], origin(gw_port), "{ls}");
    let ls = w.run(&["ls"]);
    assert!(
        ls.stdout
            .contains(&format!("(box open gateway: {})", origin(gw_port))),
        "{ls}"
    );
    let doctor = w.run(&["doctor", "alpha"]);
    assert!(doctor.ok(), "{doctor}");
    // Which way Executor 1.5.9 gets its token, said on the host too.
    assert!(
        doctor
            .stdout
            .contains("Executor token: minted by hb and passed as --auth-token="),
        "{doctor}"
    );
    assert!(
        doctor.stdout.contains(&format!(
            "box open gateway running on {} (pid {gw_pid}",
            origin(gw_port)
        )),
        "{doctor}"
    );

    // --print-url: the same gateway, a fresh one-time URL on stdout, no opener.
    let printed = w.run(&["open", "alpha", "--print-url"]);
    assert!(printed.ok(), "{printed}");
    let url = printed
        .stdout
        .lines()
        .find(|l| l.starts_with("http://"))
        .unwrap();
    assert!(
        url.starts_with(&format!("{}/__box/sign-in?nonce=", origin(gw_port))),
        "{printed}"
    );
    assert_eq!(
        std::fs::read_to_string(&opened).unwrap().lines().count(),
        2,
        "opener called"
    );
    let help = w.run(&["open", "--help"]);
    assert!(help.stdout.contains("credential"), "{help}");
    assert!(help.stdout.contains("box-<name>.localhost"), "{help}");

    // --stop: the gateway exits and its port closes.
    let stop = w.run(&["open", "--stop", "alpha"]);
    assert!(stop.ok(), "{stop}");
    assert!(
        stop.stdout.contains("Stopped the gateway of 'alpha'"),
        "{stop}"
    );
    assert!(gateway_processes(&w, "alpha").is_empty());
    assert!(port_closed(gw_port));
    assert!(recorded_gateway(&w, "alpha").is_none());
    let ls = w.run(&["ls", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&ls.stdout).unwrap();
    assert!(rows[0]["gateway"].is_null(), "{ls}");

    // box stop takes the gateway with it.
    assert!(w.run(&["open", "alpha", "--print-url"]).ok());
    let (_, port) = recorded_gateway(&w, "alpha").unwrap();
    let stop = w.run(&["stop", "alpha"]);
    assert!(stop.ok(), "{stop}");
    assert!(
        stop.stdout
            .contains("Stopped the box open gateway of 'alpha'"),
        "{stop}"
    );
    assert!(gateway_processes(&w, "alpha").is_empty());
    assert!(port_closed(port));
    let open = w.run(&["open", "alpha", "--print-url"]);
    assert_eq!(open.code, Some(1), "{open}");
    assert!(open.stderr.contains("box start alpha"), "{open}");
    assert!(
        gateway_processes(&w, "alpha").is_empty(),
        "a gateway for a stopped box"
    );

    // A session idle past OPEN_SESSION_IDLE_TIMEOUT (1 s here) is refused, and box open
    // signs in again; the idle timeout (box.env's OPEN_IDLE_TIMEOUT, 3 s here) then stops
    // the gateway.
    assert!(w.run(&["start", "alpha"]).ok());
    let open = w.run_env(
        &["open", "alpha", "--print-url"],
        &[
            ("OPEN_IDLE_TIMEOUT", "3"),
            ("OPEN_SESSION_IDLE_TIMEOUT", "1"),
        ],
    );
    assert!(open.ok(), "{open}");
    let (_, port) = recorded_gateway(&w, "alpha").unwrap();
    let url = open
        .stdout
        .lines()
        .find(|l| l.starts_with("http://"))
        .unwrap();
    let signed = get(port, url.strip_prefix(&origin(port)).unwrap(), "");
    let c = cookie_header(&signed);
    assert!(get(port, "/api/integrations", &c).starts_with("HTTP/1.1 200"));
    std::thread::sleep(Duration::from_millis(1500));
    let idle = get(port, "/api/integrations", &c);
    assert!(idle.starts_with("HTTP/1.1 401"), "{idle}");
    assert!(idle.contains("box open alpha"), "{idle}");
    let signed = get(port, &sign_in_path(&w, port), "");
    assert!(signed.starts_with("HTTP/1.1 200"), "{signed}");
    wait_until("the idle gateway stops", Duration::from_secs(20), || {
        gateway_processes(&w, "alpha").is_empty()
    });
    assert!(port_closed(port));
    let log = std::fs::read_to_string(w.home.join("logs/gateway-alpha.log")).unwrap();
    assert!(log.contains("stopped: idle for 3s"), "{log}");

    // box rm takes it with it too.
    assert!(w.run(&["open", "alpha", "--print-url"]).ok());
    let (_, port) = recorded_gateway(&w, "alpha").unwrap();
    let rm = w.run(&["rm", "alpha", "--force"]);
    assert!(rm.ok(), "{rm}");
    assert!(gateway_processes(&w, "alpha").is_empty());
    assert!(port_closed(port));

    // Nothing box printed or logged, nor any smolvm argv, ever held the token.
    assert!(!w.transcript.contains(&token), "token in box output");
    assert!(!w.logs().contains(&token), "token in box logs");
    assert!(!w.calls_text().contains(&token), "token in smolvm argv");
    assert!(!std::fs::read_to_string(&opened).unwrap().contains(&token));
}
