//! `hb quiesce` leaves Hermes running (issue 31: a save never kills the agent; the export
//! copies its live database), and `hb resume` still starts again a gateway that an older
//! hb's quiesce stopped and named in its record. A stand-in `hermes` (bash under that name)
//! plays the gateway, so no Hermes install is needed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::{Box_, procs_with, wait_until};

#[test]
fn quiesce_leaves_hermes_running_and_resume_restarts_what_an_older_hb_stopped() {
    let mut b = Box_::new();
    // No Executor in this box: resume must not wait for one.
    std::fs::write(b.config_file(), "INSTALL_EXECUTOR=0\nINSTALL_HERMES=1\n").unwrap();
    let bin = b.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink("/bin/bash", bin.join("hermes")).unwrap();
    let marker = format!("gateway-{}", std::process::id());
    let path = format!("{}:{}", bin.display(), b.path_env());
    b.extra_env.push(("PATH".into(), path.clone()));
    b.init();

    let mut gw = Command::new("hermes")
        .args(["-c", "sleep 600; :", &marker, "gateway", "run"])
        .env("PATH", &path)
        .process_group(0)
        .spawn()
        .unwrap();
    let first_group = gw.id() as i32;
    assert!(wait_until(Duration::from_secs(5), || !procs_with(&marker).is_empty()));

    // Through a quiesce and its resume, the same process runs on.
    let q = b.ok(&["quiesce"]);
    assert!(!q.contains("stopping"), "{q}");
    assert!(b.hb_config().join("quiesced").exists());
    std::thread::sleep(Duration::from_millis(300));
    assert!(gw.try_wait().unwrap().is_none(), "quiesce stopped Hermes");
    assert!(!frozen(gw.id()), "quiesce froze Hermes (SIGSTOP)");
    let r = b.ok(&["resume"]);
    assert!(!r.contains("hermes: started"), "{r}");
    assert!(gw.try_wait().unwrap().is_none());
    assert_eq!(procs_with(&format!("{marker} gateway run")).len(), 1);

    // A record an older hb wrote (it stopped the gateway): resume starts it again, once.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(first_group),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = gw.wait();
    let argv = ["hermes", "-c", "sleep 600; :", &marker, "gateway", "run"];
    std::fs::write(
        b.hb_config().join("quiesce-record.json"),
        serde_json::json!({ "created_marker": false, "stopped_gateways": [argv] }).to_string(),
    )
    .unwrap();
    let r = b.ok(&["resume"]);
    assert!(r.contains("hermes: started"), "{r}");
    assert!(!b.hb_config().join("quiesce-record.json").exists());
    // resume spawns it and returns: its exec may come a moment later on a loaded machine.
    let running = format!("{marker} gateway run");
    wait_until(Duration::from_secs(5), || !procs_with(&running).is_empty());
    let again = procs_with(&running);
    assert_eq!(
        again.len(),
        1,
        "gateway not restarted exactly once: {again:?}"
    );
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(again[0].0 as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    // A second resume has nothing to undo.
    assert!(b.ok(&["resume"]).contains("nothing to resume"));
}

/// Whether process `pid` is stopped (state `T` or `t` in /proc/PID/stat): alive, but not
/// running.
fn frozen(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
}
