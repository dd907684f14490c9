//! GUEST_CA_CERTS and PROPAGATE_PROXY end to end through the simulator (fast-test
//! shortcut: the lifecycle harness's host-userland guest and local tools, so no download
//! goes through the fake proxy; the pristine, from-the-network path is tests/first_run.rs):
//!
//! * `box new` with a proxy holding credentials and a CA file: the agent's login shell has
//!   both proxies (both cases) and the CA variables, `box doctor` shows them redacted;
//! * they persist across `box stop`/`box start` and a `box repair` from a shell with no
//!   proxy set; `PROPAGATE_PROXY=0` takes them out;
//! * the password never appears in anything box printed, its logs, or smolvm's argv;
//! * a proxy on the host's loopback is refused before any VM exists.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;

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

#[test]
fn proxies_and_ca_certificates_reach_the_box_and_stay() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let ca = w.dir.path().join("corp-ca.pem");
    std::fs::copy("/etc/ssl/certs/ca-certificates.crt", &ca).unwrap();
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
            "NODE_EXTRA_CA_CERTS=/etc/hermes-box/ca-certs.pem".to_string(),
            "PIP_CERT=/etc/ssl/certs/ca-certificates.crt".to_string(),
            "GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt".to_string(),
        ] {
            assert!(e.contains(&want), "{when}: the login env lacks {want}");
        }
    };
    check(&w, "after new");
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
    assert!(
        repair.all().contains("removed the extra CA certificates")
            || w.logs().contains("removed the extra CA certificates")
    );

    assert!(w.run(&["rm", "alpha", "--force"]).ok());
    for (what, text) in [
        ("box output", w.transcript.clone()),
        ("box logs", w.logs()),
        ("smolvm argv", w.calls_text()),
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
