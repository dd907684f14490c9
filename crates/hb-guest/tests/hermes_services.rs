//! The workload supervises the Hermes services as it supervises Executor: `hb service
//! enable` starts one, a killed one is back within the backoff, `hb down` stops it and `hb
//! up` brings it back, a save's quiesce leaves it running, a restart request (what `hb
//! wire-mcp` writes) restarts it, a workload that starts again (a VM restart) starts it
//! again, and `hb doctor` fails with its last log lines, escaped, when it keeps exiting.
//!
//! Hermes here is a FAST-TEST STAND-IN, a shell script named `hermes` first on PATH
//! (`gateway run` stays up as the real one does, `cron tick` prints and exits): what is
//! under test is hb's supervision. The real Hermes runs under it in
//! crates/box-host/tests/first_run.rs. Executor is off (INSTALL_EXECUTOR=0), so nothing
//! here waits for it. ~15 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use box_proto::{HermesService, guest_output};
use common::{Box_, Workload, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The stand-in: `gateway run` prints what it was given and stays up; with `fail` in its
/// HERMES_HOME it prints a terminal escape and exits 3 at once; `cron tick` prints a line.
const FAKE_HERMES: &str = r#"#!/bin/sh
# Fast-test stand-in for Hermes Agent (not Hermes): see crates/hb-guest/tests/hermes_services.rs
case "$1 $2" in
  "gateway run")
    if [ -e "$HERMES_HOME/fail" ]; then
      printf 'fake gateway: \033]0;owned\007cannot start\n' >&2
      exit 3
    fi
    echo "fake gateway up: pid $$ args $* home $HERMES_HOME supervisor ${HERMES_GATEWAY_EXTERNAL_SUPERVISOR:-none}"
    exec sleep 100000 ;;
  "cron tick")
    echo "fake cron tick"
    exit 0 ;;
esac
echo "unexpected: $*" >&2
exit 64
"#;

fn setup() -> Box_ {
    let mut b = Box_::new();
    let bin = b.dir.path().join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let hermes = bin.join("hermes");
    std::fs::write(&hermes, FAKE_HERMES).unwrap();
    std::fs::set_permissions(&hermes, std::fs::Permissions::from_mode(0o755)).unwrap();
    b.extra_env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    std::fs::write(
        b.config_file(),
        "INSTALL_EXECUTOR=0\nINSTALL_HERMES=1\nHERMES_SERVICES=gateway\n",
    )
    .unwrap();
    b
}

/// `hb status --json`'s entry for `service`.
fn service(b: &Box_, service: HermesService) -> serde_json::Value {
    let status: serde_json::Value = serde_json::from_str(&b.ok(&["status", "--json"])).unwrap();
    status["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == service.name())
        .cloned()
        .unwrap()
}

/// Waits until `service` runs with a pid other than `not`; returns it.
fn running_pid(b: &Box_, s: HermesService, not: Option<u64>, within: Duration) -> u64 {
    let mut last = serde_json::Value::Null;
    let ok = wait_until(within, || {
        last = service(b, s);
        last["state"] == "running" && last["pid"].as_u64().is_some_and(|p| Some(p) != not)
    });
    assert!(ok, "{s} not running (again) within {within:?}: {last}");
    last["pid"].as_u64().unwrap()
}

fn alive(pid: u64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

fn log(b: &Box_, s: HermesService) -> String {
    std::fs::read_to_string(b.data().join("logs").join(format!("{}.log", s.name())))
        .unwrap_or_default()
}

#[test]
fn the_workload_keeps_an_enabled_hermes_service_running() {
    use HermesService::{Cron, Gateway};
    let b = setup();
    // A new box: box.env's HERMES_SERVICES seeds its set once.
    let init = b.ok(&["init", "--seed-services"]);
    assert!(
        init.contains("Hermes services enabled (HERMES_SERVICES): hermes-gateway"),
        "{init}"
    );
    let mut workload = Workload::start(&b, None);

    let first = running_pid(&b, Gateway, None, Duration::from_secs(10));
    assert!(wait_until(Duration::from_secs(5), || log(&b, Gateway)
        .contains("fake gateway up")));
    let text = log(&b, Gateway);
    assert!(
        text.contains("args gateway run --replace")
            && text.contains(&format!("home {}", b.home().join(".hermes").display()))
            && text.contains("supervisor 1"),
        "{text}"
    );
    assert_eq!(service(&b, Cron)["state"], "disabled");

    // Killed: back within the first backoff (1 s), counted, its exit recorded.
    kill(Pid::from_raw(first as i32), Signal::SIGKILL).unwrap();
    let second = running_pid(&b, Gateway, Some(first), Duration::from_secs(5));
    let s = service(&b, Gateway);
    assert_eq!(s["restarts"], 1, "{s}");
    assert_eq!(s["last_exit"]["code"], 137, "{s}");

    // hb down stops it with Executor, durably; hb up brings it back.
    let down = b.ok(&["down"]);
    assert!(
        down.contains("hermes-gateway: stopped (until `hb up`)"),
        "{down}"
    );
    assert!(!alive(second), "the gateway outlived hb down");
    assert_eq!(service(&b, Gateway)["state"], "paused");
    let doctor = b.run(&["doctor"]);
    let said = guest_output::doctor(&String::from_utf8_lossy(&doctor.stdout));
    assert!(
        said.services[0].ok
            && said.services[0]
                .detail
                .contains("paused with Executor by hb down"),
        "{said:?}"
    );
    let up = b.ok(&["up"]);
    assert!(up.contains("hermes-gateway: running (pid"), "{up}");
    let third = running_pid(&b, Gateway, Some(second), Duration::from_secs(5));

    // A save's quiesce never stops Hermes; resume leaves it as it was.
    b.ok(&["quiesce"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        service(&b, Gateway)["pid"],
        third,
        "quiesce touched the gateway"
    );
    assert!(alive(third));
    b.ok(&["resume"]);
    assert_eq!(service(&b, Gateway)["pid"], third);

    // What hb wire-mcp asks for when Hermes's wiring changed: a restart, no backoff.
    std::fs::write(b.hb_config().join("restart-hermes-services"), "test\n").unwrap();
    let fourth = running_pid(&b, Gateway, Some(third), Duration::from_secs(15));
    assert!(!b.hb_config().join("restart-hermes-services").exists());
    assert_eq!(
        service(&b, Gateway)["restarts"],
        1,
        "an asked-for restart is no crash"
    );

    // A second service beside it; enabling waits until it runs.
    let enabled = b.ok(&["service", "enable", "cron"]);
    assert!(enabled.contains("hermes-cron: running (pid"), "{enabled}");
    assert!(wait_until(Duration::from_secs(5), || log(&b, Cron)
        .contains("fake cron tick")));
    let list = b.ok(&["service", "list"]);
    assert!(
        list.contains("hermes-gateway  running") && list.contains("hermes-cron     running"),
        "{list}"
    );

    // The workload ends (a VM stop): the services end with it; the next one starts them.
    let cron_pid = service(&b, Cron)["pid"].as_u64().unwrap();
    workload
        .terminate(Duration::from_secs(15))
        .expect("workload did not stop");
    assert!(
        !alive(fourth) && !alive(cron_pid),
        "a service outlived the workload"
    );
    let _workload = Workload::start(&b, None);
    running_pid(&b, Gateway, Some(fourth), Duration::from_secs(10));
    running_pid(&b, Cron, Some(cron_pid), Duration::from_secs(10));

    // Disabled: stopped, and hb doctor no longer checks it.
    let off = b.ok(&["service", "disable", "hermes-cron"]);
    assert!(off.contains("hermes-cron: disabled; not running"), "{off}");
    assert_eq!(service(&b, Cron)["state"], "disabled");
    let set = std::fs::read_to_string(b.hb_config().join("hermes-services")).unwrap();
    assert!(
        set.contains("hermes-gateway") && !set.contains("hermes-cron"),
        "{set}"
    );
}

#[test]
fn a_service_that_keeps_exiting_fails_doctor_with_its_last_lines_escaped() {
    let b = setup();
    b.init();
    std::fs::write(b.home().join(".hermes/fail"), "").unwrap();
    // Not seeded (a plain init): nothing runs until enabled.
    assert_eq!(service(&b, HermesService::Gateway)["state"], "disabled");
    let _workload = Workload::start(&b, None);
    b.ok(&["service", "enable", "hermes-gateway"]);
    let mut last = serde_json::Value::Null;
    assert!(
        wait_until(Duration::from_secs(10), || {
            last = service(&b, HermesService::Gateway);
            last["state"] == "restarting" && last["restarts"].as_u64() >= Some(2)
        }),
        "{last}"
    );
    assert_eq!(last["last_exit"]["code"], 3, "{last}");

    let out = b.run(&["doctor"]);
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = guest_output::doctor(&stdout);
    let gateway = &said.services[0];
    assert_eq!(gateway.service, HermesService::Gateway);
    assert!(!gateway.ok, "{stdout}");
    assert!(
        gateway.detail.contains("not running: restarting")
            && gateway.detail.contains("last exit 3")
            && gateway.detail.contains("cannot start"),
        "{}",
        gateway.detail
    );
    // The escape sequence the service printed never reaches a terminal as one.
    assert!(
        !stdout.contains('\x1b') && stdout.contains("\\x1b]0;owned\\x07"),
        "{stdout}"
    );
    assert!(
        stdout.contains("fix: see `hb logs hermes-gateway`"),
        "{stdout}"
    );
}

#[test]
fn a_hostile_set_file_runs_only_what_it_names_correctly() {
    let b = setup();
    b.init();
    std::fs::write(
        b.hb_config().join("hermes-services"),
        "hermes-cron\n/bin/sh -c 'touch /tmp/owned'\n\x1b[2Jhermes-dashboard\n",
    )
    .unwrap();
    let list = b.run(&["service", "list"]);
    let err = String::from_utf8_lossy(&list.stderr);
    assert!(err.contains("ignored") && !err.contains('\x1b'), "{err}");
    let out = b.run(&["doctor"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("✗ hermes services list: ignored"),
        "{stdout}"
    );
    let _workload = Workload::start(&b, None);
    running_pid(&b, HermesService::Cron, None, Duration::from_secs(10));
    assert_eq!(service(&b, HermesService::Gateway)["state"], "disabled");
}
