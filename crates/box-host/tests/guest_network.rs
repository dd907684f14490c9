//! GUEST_CA_CERTS and PROPAGATE_PROXY end to end through the simulator (fast-test
//! shortcut: the lifecycle harness's host-userland guest and local tools, so no download
//! goes through the fake proxy; the pristine, from-the-network path is tests/first_run.rs):
//!
//! * `box new` with a proxy holding credentials and a private CA (made here, trusted by
//!   nothing else): the agent's login shell has both proxies (both cases) and the CA
//!   variables, `box doctor` shows them redacted, and curl in the box trusts an HTTPS
//!   server on the host side of the guest's network whose certificate that CA signed,
//!   which the host itself does not;
//! * they persist across `box stop`/`box start` and a `box repair` from a shell with no
//!   proxy set; `PROPAGATE_PROXY=0` takes them out, and with `GUEST_CA_CERTS` unset the
//!   box no longer trusts that server;
//! * the password never appears in anything box printed, its logs, or smolvm's argv or
//!   environment;
//! * a proxy on the host's loopback is refused before any VM exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use lifecycle_support::World;

const PASSWORD: &str = "pr0xy-s3cret-9f2";

/// The agent's login environment in the box, as `box enter` gives it.
fn login_env(w: &World, name: &str) -> String {
    let out = w.sim(&[
        "machine", "exec", "--name", name, "--", "runuser", "-l", "agent", "-c", "env",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// This host's address on its own network (not loopback, which a guest cannot reach):
/// the source address of a route out; nothing is sent.
fn host_address() -> String {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.255:9")
        .or_else(|_| s.connect("10.255.255.255:9"))
        .unwrap();
    let ip = s.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "no non-loopback address on this host");
    ip.to_string()
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private CA (`ca.pem`) and a server certificate for `ip` it signed (`srv.pem`,
/// `srv.key`), in `dir`.
fn private_ca(dir: &Path, ip: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req", "-x509", "-days", "2", "-keyout", "ca.key", "-out", "ca.pem",
    ];
    ca.extend(ec);
    ca.extend([
        "-subj",
        "/CN=hermes-box test private CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-keyout", "srv.key", "-out", "srv.csr", "-subj"];
    let cn = format!("/CN={ip}");
    csr.push(&cn);
    csr.extend(ec);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("srv.ext"),
        format!(
            "subjectAltName=IP:{ip}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "srv.ext",
            "-out",
            "srv.pem",
        ],
    );
}

/// `openssl s_server` answering HTTPS on every address of this host, with `srv.pem`.
struct HttpsServer {
    child: Child,
    port: u16,
}

impl HttpsServer {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("0.0.0.0:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("openssl")
            .args([
                "s_server", "-quiet", "-www", "-cert", "srv.pem", "-key", "srv.key",
            ])
            .arg("-accept")
            .arg(port.to_string())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "s_server did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Self { child, port }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// curl in the agent's login shell of box `name` (its trust store and CA variables);
/// `(exit code, stderr)`.
fn guest_curl(w: &World, name: &str, url: &str) -> (Option<i32>, String) {
    // Straight to the server: the fake proxy of this test does not exist.
    let cmd = format!("curl -sS -o /dev/null --noproxy '*' --max-time 15 {url}");
    let out = w.sim(&[
        "machine", "exec", "--name", name, "--", "runuser", "-l", "agent", "-c", &cmd,
    ]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn proxies_and_ca_certificates_reach_the_box_and_stay() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    // A private CA, not the host's bundle: the guest would trust that without the feature.
    let ip = host_address();
    let pki = w.dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    private_ca(&pki, &ip);
    let server = HttpsServer::start(&pki);
    let url = format!("https://{ip}:{}/", server.port);
    let host_curl = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "--max-time", "10", &url])
        .output()
        .unwrap();
    assert_eq!(
        host_curl.status.code(),
        Some(60),
        "the host itself must not trust the private CA"
    );
    let ca = pki.join("ca.pem");
    let ca_s = ca.display().to_string();
    let proxy = format!("http://alice:{PASSWORD}@proxy.corp.example:3128");
    let env = [
        ("GUEST_CA_CERTS", ca_s.as_str()),
        ("https_proxy", proxy.as_str()),
        ("NO_PROXY", "localhost,.corp.example"),
    ];

    let new = w.run_env(&["new", "alpha"], &env);
    assert!(new.ok(), "{new}");
    assert!(
        new.stdout
            .contains("HTTPS_PROXY=http://***@proxy.corp.example:3128"),
        "{new}"
    );
    let check = |w: &World, when: &str| {
        let e = login_env(w, "alpha");
        for want in [
            format!("HTTPS_PROXY={proxy}"),
            format!("https_proxy={proxy}"),
            "no_proxy=localhost,.corp.example".to_string(),
            "NODE_EXTRA_CA_CERTS=/etc/hermes-box/node-extra-ca.pem".to_string(),
            "PIP_CERT=/etc/ssl/certs/ca-certificates.crt".to_string(),
            "GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt".to_string(),
        ] {
            assert!(e.contains(&want), "{when}: the login env lacks {want}");
        }
    };
    check(&w, "after new");
    let (code, err) = guest_curl(&w, "alpha", &url);
    assert_eq!(
        code,
        Some(0),
        "the box does not trust the GUEST_CA_CERTS server: {err}"
    );
    let doctor = w.run_env(&["doctor", "alpha"], &env);
    assert!(doctor.ok(), "{doctor}");
    assert!(
        doctor
            .stdout
            .contains("guest network: proxies: HTTPS_PROXY=http://***@proxy.corp.example:3128")
            && doctor.stdout.contains("(GUEST_CA_CERTS), trusted"),
        "{doctor}"
    );

    assert!(w.run(&["stop", "alpha"]).ok());
    assert!(w.run(&["start", "alpha"]).ok());
    check(&w, "after stop/start");

    // A repair from a shell without the proxy keeps the box's own.
    let repair = w.run_env(&["repair", "alpha"], &[("GUEST_CA_CERTS", ca_s.as_str())]);
    assert!(repair.ok(), "{repair}");
    check(&w, "after a repair without proxies on the host");

    let repair = w.run_env(
        &["repair", "alpha"],
        &[("GUEST_CA_CERTS", ""), ("PROPAGATE_PROXY", "0")],
    );
    assert!(repair.ok(), "{repair}");
    let e = login_env(&w, "alpha");
    assert!(
        !e.contains("proxy.corp.example"),
        "PROPAGATE_PROXY=0 kept the proxy"
    );
    assert!(
        !e.contains("NODE_EXTRA_CA_CERTS"),
        "the CA stayed after GUEST_CA_CERTS was unset"
    );
    let (code, err) = guest_curl(&w, "alpha", &url);
    assert_eq!(
        code,
        Some(60),
        "still trusted after GUEST_CA_CERTS was unset: {err}"
    );
    assert!(
        repair.all().contains("removed the extra CA certificates")
            || w.logs().contains("removed the extra CA certificates")
    );

    assert!(w.run(&["rm", "alpha", "--force"]).ok());
    for (what, text) in [
        ("box output", w.transcript.clone()),
        ("box logs", w.logs()),
        ("smolvm argv", w.calls_text()),
        // argv and environment of every smolvm call: proxies are no child's business.
        (
            "smolvm's raw call log",
            std::fs::read_to_string(w.sim_home.join("raw-calls.jsonl")).unwrap(),
        ),
    ] {
        assert!(
            !text.contains(PASSWORD),
            "the proxy password is in the {what}"
        );
    }
}

#[test]
fn a_loopback_proxy_is_refused_before_any_vm_exists() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let proxy = format!("http://alice:{PASSWORD}@127.0.0.1:3128");
    let new = w.run_env(&["new", "alpha"], &[("HTTP_PROXY", proxy.as_str())]);
    assert_eq!(new.code, Some(1), "{new}");
    assert!(
        new.stderr
            .contains("HTTP_PROXY=http://***@127.0.0.1:3128 is on this host's loopback")
            && new.stderr.contains("PROPAGATE_PROXY=0"),
        "{new}"
    );
    assert!(!new.all().contains(PASSWORD));
    assert!(w.machines().is_empty());
    assert!(!w.called(&["machine", "create"]));
    // PROPAGATE_PROXY=0: the same host proxy is ignored.
    let new = w.run_env(
        &["new", "alpha"],
        &[("HTTP_PROXY", proxy.as_str()), ("PROPAGATE_PROXY", "0")],
    );
    assert!(new.ok(), "{new}");
    assert!(
        new.stdout.contains("proxies: off (PROPAGATE_PROXY=0)"),
        "{new}"
    );
    assert!(w.run(&["rm", "alpha", "--force"]).ok());
}
