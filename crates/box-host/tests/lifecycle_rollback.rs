//! `box new` failing: every rollback rule of docs/design.md ("new"), driven by the
//! simulator's fault injection and by HUP/INT/TERM delivered at each step. After each: no
//! machine box created is left (or the row is kept with recovery advice), and no lock is
//! held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;

use std::time::{Duration, Instant};

use box_host::state::LockKey;
use lifecycle_support::World;

fn new_with(w: &mut World, faults: &str) -> lifecycle_support::Run {
    w.run_env(&["new", "alpha"], &[("SMOLVM_SIM_FAIL", faults)])
}

#[test]
fn create_failure_deletes_nothing() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    // The machine appears, create reports failure: ownership is unknown.
    let mut w = World::new("1.0.4");
    let r = new_with(&mut w, "create:after");
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr.contains(
            "smolvm create failed for 'alpha'; ownership is unknown, so no VM will be deleted automatically"
        ),
        "{r}"
    );
    assert!(
        r.stderr
            .contains("inspect with: smolvm machine status --name 'alpha'"),
        "{r}"
    );
    assert!(r.stderr.contains("transcript: "), "{r}");
    assert!(!w.called(&["machine", "delete"]), "{}", w.calls_text());
    assert!(!w.called(&["machine", "start"]), "{}", w.calls_text());
    assert_eq!(w.machines().len(), 1, "the machine must be left alone");
    assert!(!w.row_exists("alpha"));
    w.assert_no_locks("alpha");

    // A same-named machine box did not create is refused, untouched, on the next try.
    let r = w.run(&["new", "alpha"]);
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr.contains("smolvm machine 'alpha' already exists"),
        "{r}"
    );
    assert!(!w.called(&["machine", "delete"]));
    assert_eq!(w.machines().len(), 1);
}

/// smolvm 1.17 made `delete` without `-f` on a stdin that is not a terminal exit 1 ("needs
/// confirmation but stdin is not a terminal"); before, it printed `Cancelled` and exited 0
/// without deleting. box must always pass `-f`: against the 1.17 personality a delete
/// without it leaves the machine behind, and this test fails.
#[test]
fn cleanup_deletes_with_force_on_smolvm_1_17() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.17.0");
    let r = new_with(&mut w, "start:always");
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        !r.stderr.contains("outside the checked range"),
        "1.17 is in the checked table now: {r}"
    );
    assert!(
        w.called(&["machine", "delete", "--name", "alpha", "-f"]),
        "{}",
        w.calls_text()
    );
    assert!(!r.all().contains("needs confirmation"), "{r}");
    assert!(w.machines().is_empty(), "{:?}\n{r}", w.machines());
    assert!(!w.row_exists("alpha"));
    w.assert_no_locks("alpha");
}

/// A `machine cp` that fails mid-transfer ends its stderr with `\r<progress>Error: …` on one
/// line (smolvm's progress bar has no newline). box must still read smolvm's own message
/// (and not fall back to "exited with status 1" and a stderr tail), then roll back.
#[test]
fn a_failed_upload_reports_smolvms_own_error_text() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let r = new_with(&mut w, "cp:always@hb.new");
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr.contains(
            "failed: agent operation failed: transfer file: agent connection closed unexpectedly"
        ),
        "{r}"
    );
    assert!(!r.stderr.contains("exited with status 1"), "{r}");
    assert!(
        !r.stderr.contains("Uploading "),
        "no progress text in the error: {r}"
    );
    assert!(w.called(&["machine", "delete", "--name", "alpha", "-f"]));
    assert!(w.machines().is_empty(), "{:?}", w.machines());
    assert!(!w.row_exists("alpha"));
}

/// On a pristine image (the harness's host-userland shortcut turned off) the simulator
/// boots debian:13 for ubuntu:24.04 and says so at create; box passes the note on, so a
/// user never takes the guest for Ubuntu. (Start then fails by injection: the rollback is
/// the cheap way out, provisioning from the network is the first-run test's business.)
#[test]
fn a_stand_in_image_is_named_to_the_user() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let r = w.run_env(
        &["new", "alpha"],
        &[
            ("SMOLVM_SIM_HOST_USERLAND", "0"),
            ("SMOLVM_SIM_FAIL", "start:always"),
        ],
    );
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr.contains(
            "warning: smolvm note: ubuntu:24.04 cannot be built here (no archive for it); \
             this machine boots the debian:13 image instead."
        ),
        "{r}"
    );
    assert!(w.machines().is_empty(), "{:?}", w.machines());
}

#[test]
fn start_failure_removes_the_machine_then_the_row() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let r = new_with(&mut w, "start:always");
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr
            .contains("box creation failed while creating the base VM"),
        "{r}"
    );
    assert!(r.stderr.contains("did not become ready"), "{r}");
    assert!(w.called(&["machine", "delete", "--name", "alpha", "-f"]));
    // Absence is verified with ls --json after the delete.
    let calls: Vec<String> = w.calls().iter().map(|c| c.join(" ")).collect();
    let del = calls
        .iter()
        .position(|c| c.starts_with("machine delete"))
        .unwrap();
    assert!(
        calls[del + 1..].iter().any(|c| c == "machine ls --json"),
        "{calls:#?}"
    );
    assert!(w.machines().is_empty());
    assert!(!w.row_exists("alpha"));
    let transcript = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("warning: transcript: "))
        .unwrap();
    assert!(std::path::Path::new(transcript).is_file(), "{transcript}");
    w.assert_no_locks("alpha");
}

#[test]
fn delete_failure_keeps_the_row_with_recovery_advice() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    for (version, faults, machine_left) in [
        // delete fails outright: the machine is still there.
        ("1.0.4", "start:always,delete:always", true),
        // the first delete fails (a transient error): still never read as absence.
        ("1.9.2", "start:always,delete:once", true),
        // delete acts, then errors: gone, but a delete error is never read as success.
        ("1.9.2", "start:always,delete:after", false),
    ] {
        let mut w = World::new(version);
        let r = new_with(&mut w, faults);
        assert_eq!(r.code, Some(1), "{faults}: {r}");
        assert!(
            r.stderr.contains("could not remove incomplete box 'alpha'")
                && r.stderr.contains("registry metadata was preserved"),
            "{faults}: {r}"
        );
        assert!(
            r.stderr.contains("recover with: box rm alpha --force"),
            "{faults}: {r}"
        );
        assert!(w.row_exists("alpha"), "{faults}: the row must be kept");
        assert_eq!(!w.machines().is_empty(), machine_left, "{faults}");
        w.assert_no_locks("alpha");
        // The advice works.
        let rm = w.run(&["rm", "alpha", "--force"]);
        assert!(rm.ok(), "{faults}: {rm}");
        assert!(w.machines().is_empty(), "{faults}");
        assert!(!w.row_exists("alpha"), "{faults}");
    }
}

#[test]
fn busy_registry_lock_during_rollback_keeps_the_row() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    // start hangs; box gives up after its (capped) deadline and rolls back while this test
    // holds the registry lock.
    let child = w.spawn(
        &["new", "alpha"],
        &[
            ("SMOLVM_SIM_FAIL", "start:hang"),
            ("BOX_SMOLVM_TIMEOUT", "4"),
        ],
    );
    w.wait_for_call("machine start", Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.row_exists("alpha") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = w.hold(LockKey::Registry, "box rm other");
    let r = w.collect(child, "box new alpha");
    drop(held);
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr
            .contains("removed VM 'alpha', but the registry lock is busy")
            && r.stderr.contains("metadata was preserved"),
        "{r}"
    );
    assert!(r.stderr.contains("box rm alpha --force"), "{r}");
    assert!(w.machines().is_empty());
    assert!(w.row_exists("alpha"));
    w.assert_no_locks("alpha");
    // doctor reports the stale row; --fix removes it and says so.
    let d = w.run(&["doctor"]);
    assert_eq!(d.code, Some(1), "{d}");
    assert!(
        d.stdout.contains("smolvm machine 'alpha' is missing"),
        "{d}"
    );
    let d = w.run(&["doctor", "--fix"]);
    assert!(d.ok(), "{d}");
    assert!(
        d.stdout
            .contains("fixed: removed the registry entry of 'alpha'"),
        "{d}"
    );
    assert!(!w.row_exists("alpha"));
}

/// Sends `signal` to `box new` once the call matching `needle` is in flight, and checks
/// the cleanup. `never_started`: the signal came during create, so start must not run.
fn signal_at(version: &str, faults: &str, needle: &str, signal: i32, never_started: bool) {
    let mut w = World::new(version);
    let child = w.spawn(
        &["new", "alpha"],
        &[("SMOLVM_SIM_FAIL", faults), ("SMOLVM_SIM_SLOW_SECS", "2")],
    );
    w.wait_for_call(needle, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::try_from(signal).unwrap(),
    )
    .unwrap();
    let started = Instant::now();
    let r = w.collect(
        child,
        &format!("box new alpha (signal {signal} at {needle})"),
    );
    let what = format!("signal {signal} at {needle:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{what}: took {:?}",
        started.elapsed()
    );
    assert_eq!(r.code, Some(128 + signal), "{what}: {r}");
    assert!(r.stderr.contains("interrupted by SIG"), "{what}: {r}");
    assert!(
        w.machines().is_empty(),
        "{what}: machine left: {:?}",
        w.machines()
    );
    assert!(!w.row_exists("alpha"), "{what}: row left");
    assert!(
        w.called(&["machine", "delete", "--name", "alpha", "-f"]),
        "{what}"
    );
    if never_started {
        assert!(
            !w.called(&["machine", "start"]),
            "{what}: {}",
            w.calls_text()
        );
    }
    w.assert_no_locks("alpha");
}

#[test]
fn signals_at_each_step_of_new_roll_back() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    use libc::{SIGHUP, SIGINT, SIGTERM};
    // (faults, the call to wait for, start must never have run)
    let steps = [
        // create is never cut short: it completes, then the machine is deleted unstarted.
        ("create:slow", "machine create", true),
        ("start:slow", "machine start", false),
        ("cp:hang@hb.new", "hb.new", false),
        ("exec:hang@provision.sh", "provision.sh", false),
        ("exec:hang@hb init", "hb init", false),
    ];
    for (i, (faults, needle, never_started)) in steps.iter().enumerate() {
        for (j, sig) in [SIGINT, SIGTERM, SIGHUP].into_iter().enumerate() {
            let version = if (i + j) % 2 == 0 { "1.0.4" } else { "1.9.2" };
            signal_at(version, faults, needle, sig, *never_started);
        }
    }
}

/// SIGKILL leaves no chance to clean up: the row stays, marked incomplete, and ls and
/// doctor say so instead of passing the half-built box off as a finished one.
#[test]
fn a_sigkilled_new_leaves_a_row_marked_incomplete() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.0.4");
    let child = w.spawn(
        &["new", "alpha"],
        &[("SMOLVM_SIM_FAIL", "exec:hang@provision.sh")],
    );
    w.wait_for_call("provision.sh", Duration::from_secs(60));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let r = w.collect(child, "box new alpha (SIGKILL during provisioning)");
    assert_eq!(r.code, None, "{r}");
    assert_eq!(w.row("alpha")["incomplete"], true);
    let ls = w.run(&["ls"]);
    assert!(ls.stdout.contains("alpha (incomplete)"), "{ls}");
    let d = w.run(&["doctor", "alpha"]);
    assert_eq!(d.code, Some(1), "{d}");
    assert!(
        d.stdout.contains("the run that created it never finished")
            && d.stdout.contains("box rm alpha --force"),
        "{d}"
    );
    // The way out it names works, and leaves nothing behind.
    let rm = w.run(&["rm", "alpha", "--force"]);
    assert!(rm.ok(), "{rm}");
    assert!(w.machines().is_empty());
    assert!(!w.row_exists("alpha"));
    w.assert_no_locks("alpha");
}
