//! Hermes's gateway stays up, end to end through the smolvm simulator with the real `box`,
//! `hb` and provisioning: `box new --hermes-gateway` enables it, the workload runs it as
//! soon as Hermes is there, a VM restart (`box stop`/`box start`) brings it back, a killed
//! one is back within the backoff, `hb down` stops it and `hb up` brings it back, `box
//! save` leaves it running, `box doctor` and `box logs` show it, and `box clone` warns
//! that the clone runs one too (its set came along in /data) and how to stop it there.
//!
//! Hermes here is a FAST-TEST STAND-IN: a shell script named `hermes` in a directory of
//! this host's /var (simulator guests see the host's /var through an overlay) that the
//! guests' PATH names first, so provisioning finds "hermes present" and installs nothing.
//! Its `gateway run` stays up as the real one does. What is under test is box and hb
//! around it; the real Hermes gateway runs in first_run.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use save_load_support::{World, prerequisites, serial};

const FAKE_HERMES: &str = r#"#!/bin/sh
# Fast-test stand-in for Hermes Agent (not Hermes): crates/box-host/tests/hermes_gateway.rs
if [ "$1 $2" = "gateway run" ]; then
  echo "fake gateway up as $(id -un) args $* home $HERMES_HOME"
  exec sleep 100000
fi
echo "unexpected: $*" >&2
exit 64
"#;

/// The stand-in in a directory of its own under the host's /var, and the guest
/// environment (`BOX_TEST_GUEST_ENV`) that puts it first on the guests' PATH.
fn fake_hermes() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new()
        .prefix("hermes-box-fake-hermes-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("hermes");
    std::fs::write(&bin, FAKE_HERMES).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tools = "/var/lib/hermes-box-lifecycle-tools";
    let env = format!(
        "HB_TOOL_PREFIX={tools},PATH={}:{tools}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        dir.path().display()
    );
    (dir, env)
}

/// The gateway's entry in the box's `hb status --json`.
fn gateway(w: &World, machine: &str) -> serde_json::Value {
    let status: serde_json::Value =
        serde_json::from_str(&w.sh(machine, "/usr/local/bin/hb status --json")).unwrap();
    status["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "hermes-gateway")
        .cloned()
        .unwrap()
}

/// Waits until the gateway runs (with a pid other than `not`); returns its entry.
fn running(w: &World, machine: &str, not: Option<u64>, within: Duration) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let g = gateway(w, machine);
        if g["state"] == "running" && g["pid"].as_u64().is_some_and(|p| Some(p) != not) {
            return g;
        }
        assert!(
            start.elapsed() < within,
            "the gateway in {machine} is not running (again) within {within:?}: {g}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How many times the stand-in started, from its log in the box.
fn starts(w: &World, machine: &str) -> usize {
    w.sh(machine, "cat /data/logs/hermes-gateway.log")
        .matches(
            "fake gateway up as agent args gateway run --replace home /data/home/agent/.hermes",
        )
        .count()
}

#[test]
fn the_hermes_gateway_stays_up_through_restarts_kills_pauses_saves_and_clones() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let mut w = World::new();
    // Without Hermes there is nothing to run: refused before any VM exists.
    let refused = w.run(&["new", "alpha", "--hermes-gateway"], &[]);
    assert_eq!(refused.code, Some(1), "{}", refused.all());
    assert!(
        refused
            .stderr
            .contains("--hermes-gateway: gateway needs Hermes in the box"),
        "{}",
        refused.all()
    );
    assert!(w.calls().is_empty(), "smolvm was called: {:?}", w.calls());

    let (_fake, guest_env) = fake_hermes();
    w.extra_env.push(("BOX_TEST_GUEST_ENV".into(), guest_env));
    let new = w.run(
        &["new", "alpha", "--hermes-gateway"],
        &[("INSTALL_HERMES", "1")],
    );
    assert!(new.ok(), "{}", new.all());
    assert!(
        new.all()
            .contains("Hermes gateway kept running (box logs alpha hermes-gateway;"),
        "{}",
        new.all()
    );
    let g = running(&w, "alpha", None, Duration::from_secs(15));
    assert_eq!(g["enabled"], true, "{g}");
    // Started at the seeding init, then once more when hb wire-mcp wired Hermes to
    // Executor (a gateway reads its MCP configuration at start).
    let log = w.sh("alpha", "cat /data/logs/hermes-gateway.log");
    assert!(log.contains("restart asked for"), "{log}");
    assert_eq!(starts(&w, "alpha"), 2, "{log}");

    // A VM restart: the workload starts it again at boot.
    for verb in ["stop", "start"] {
        let r = w.run(&[verb, "alpha"], &[("INSTALL_HERMES", "1")]);
        assert!(r.ok(), "box {verb}: {}", r.all());
    }
    running(&w, "alpha", None, Duration::from_secs(20));
    assert_eq!(
        starts(&w, "alpha"),
        3,
        "not started again after the restart"
    );

    // Killed: back within the first backoff.
    let pid = gateway(&w, "alpha")["pid"].as_u64().unwrap();
    w.sh("alpha", &format!("kill -KILL {pid}"));
    let g = running(&w, "alpha", Some(pid), Duration::from_secs(5));
    assert_eq!(g["restarts"], 1, "{g}");
    assert_eq!(g["last_exit"]["code"], 137, "{g}");

    // hb down (as the agent, the way a user types it) stops it durably; hb up brings it back.
    let down = w.run(&["exec", "alpha", "--", "hb", "down"], &[]);
    assert!(down.ok(), "{}", down.all());
    assert!(
        down.stdout
            .contains("hermes-gateway: stopped (until `hb up`)"),
        "{}",
        down.all()
    );
    let g = gateway(&w, "alpha");
    assert_eq!(g["state"], "paused", "{g}");
    assert!(g["pid"].is_null(), "{g}");
    let up = w.run(&["exec", "alpha", "--", "hb", "up"], &[]);
    assert!(up.ok(), "{}", up.all());
    assert!(
        up.stdout.contains("hermes-gateway: running (pid"),
        "{}",
        up.all()
    );
    let before_save = running(&w, "alpha", None, Duration::from_secs(10));

    // box doctor and box logs show it.
    let doctor = w.run(&["doctor", "alpha"], &[("INSTALL_HERMES", "1")]);
    assert!(
        doctor.stdout.contains("ok    hermes-gateway: running (pid"),
        "{}",
        doctor.all()
    );
    let logs = w.run(&["logs", "alpha", "hermes-gateway", "-n", "20"], &[]);
    assert!(
        logs.ok() && logs.stdout.contains("fake gateway up as agent"),
        "{}",
        logs.all()
    );

    // A save never stops Hermes.
    let save = w.run(&["save", "alpha"], &[("INSTALL_HERMES", "1")]);
    assert!(save.ok(), "{}", save.all());
    let after_save = gateway(&w, "alpha");
    assert_eq!(
        after_save["pid"], before_save["pid"],
        "the save restarted the gateway"
    );
    assert_eq!(after_save["state"], "running");

    // A clone: the set came along in /data, so the clone runs its own gateway from its
    // first `hb up`, and box says that two gateways now share one messaging identity.
    let clone = w.run(&["clone", "alpha", "beta"], &[("INSTALL_HERMES", "1")]);
    assert!(clone.ok(), "{}", clone.all());
    assert!(
        clone.stderr.contains("so 'beta' runs one too")
            && clone
                .stderr
                .contains("box exec beta -- hb service disable hermes-gateway"),
        "{}",
        clone.all()
    );
    running(&w, "beta", None, Duration::from_secs(15));
    assert_eq!(
        gateway(&w, "alpha")["pid"],
        before_save["pid"],
        "alpha's kept running"
    );
    // The way out the warning names.
    let off = w.run(
        &[
            "exec",
            "beta",
            "--",
            "hb",
            "service",
            "disable",
            "hermes-gateway",
        ],
        &[],
    );
    assert!(
        off.ok() && off.stdout.contains("disabled; not running"),
        "{}",
        off.all()
    );
    assert_eq!(gateway(&w, "beta")["state"], "disabled");
    w.scan_secrets();
}
