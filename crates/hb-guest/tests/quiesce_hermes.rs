//! `hb quiesce` stops Hermes writers (every `hermes` process; they all write state.db) and
//! `hb resume` starts again only the gateway it stopped. A stand-in `hermes` (bash under
//! that name) plays the gateway, so no Hermes install is needed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::{Box_, procs_with, wait_until};

#[test]
fn quiesce_stops_the_hermes_gateway_and_resume_restarts_it() {
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

    let q = b.ok(&["quiesce"]);
    assert!(q.contains("hermes: stopping pid"), "{q}");
    assert!(
        gw.try_wait().unwrap().is_some()
            || wait_until(Duration::from_secs(5), || gw.try_wait().unwrap().is_some())
    );
    assert!(b.hb_config().join("quiesced").exists());

    let r = b.ok(&["resume"]);
    assert!(r.contains("hermes: started"), "{r}");
    assert!(!b.hb_config().join("quiesced").exists());
    assert!(!b.hb_config().join("quiesce-record.json").exists());
    let again = procs_with(&format!("{marker} gateway run"));
    assert_eq!(
        again.len(),
        1,
        "gateway not restarted exactly once: {again:?}"
    );
    // Clean up both stand-ins and their `sleep` children (resume starts the gateway in its
    // own process group).
    for group in [first_group, again[0].0 as i32] {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    // A second resume has nothing to undo.
    assert!(b.ok(&["resume"]).contains("nothing to resume"));
}
