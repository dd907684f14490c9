//! Locks between real processes: one winner, instant takeover after SIGKILL, no fd leaks.
//!
//! The contenders are this test binary re-executed in "holder" mode (see `holder_entry`),
//! so each one is a separate process with its own open file description, exactly as two
//! `box` invocations would be.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use box_host::state::{LockKey, StateDir, locks};
use box_proto::BoxName;

const MODE: &str = "BOX_TEST_LOCK_HOLDER";

fn alpha() -> LockKey {
    LockKey::Box(BoxName::parse("alpha").unwrap())
}

/// Entry point of a holder process: takes the lock (or reports why not), optionally spawns
/// a long-lived child, then waits to be killed. Ignored in a normal test run; the tests
/// below re-run this binary with `--ignored --exact holder_entry`.
#[test]
#[ignore = "entry point of the lock holder child processes, not a test"]
fn holder_entry() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let state = StateDir::at(std::env::var("BOX_HOME").unwrap().into());
    match locks::try_acquire(&state, alpha(), "box save alpha") {
        Ok(_guard) => {
            if mode == "spawn-child" {
                // Deliberately never waited for: the grandchild must outlive this holder
                // (the test kills it once it has checked the lock).
                #[allow(clippy::zombie_processes)]
                let child = Command::new("sleep").arg("120").spawn().unwrap();
                println!("@@child {}", child.id());
            }
            println!("@@locked");
            std::thread::sleep(Duration::from_secs(120));
        }
        Err(e) => println!("@@busy: {e}"),
    }
}

fn spawn_holder(home: &Path, mode: &str) -> (Child, Vec<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "holder_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MODE, mode)
        .env("BOX_HOME", home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        // libtest prints "test holder_entry ... " without a newline before our output.
        let Some((_, ours)) = line.split_once("@@") else {
            continue;
        };
        let line = ours.trim().to_string();
        let done = line == "locked" || line.starts_with("busy:");
        lines.push(line);
        if done {
            break;
        }
    }
    (child, lines)
}

fn kill9(child: &mut Child) {
    send_sigkill(child.id() as i32);
    let _ = child.wait();
}

fn send_sigkill(pid: i32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[test]
fn two_contenders_one_wins_and_the_loser_names_the_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut first, first_lines) = spawn_holder(tmp.path(), "hold");
    assert_eq!(first_lines.last().map(String::as_str), Some("locked"));
    let (mut second, second_lines) = spawn_holder(tmp.path(), "hold");
    let last = second_lines.last().unwrap();
    assert_eq!(
        last,
        &format!(
            "busy: another operation (box save alpha, pid {}) holds the 'alpha' lock; try again when it has finished",
            first.id()
        )
    );
    kill9(&mut first);
    kill9(&mut second);
}

#[test]
fn a_sigkilled_holder_releases_the_lock_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut holder, lines) = spawn_holder(tmp.path(), "hold");
    assert_eq!(lines.last().map(String::as_str), Some("locked"));
    kill9(&mut holder);
    let state = StateDir::at(tmp.path().to_path_buf());
    let started = Instant::now();
    locks::try_acquire(&state, alpha(), "box stop alpha").expect("lock free after SIGKILL");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn lock_fds_do_not_leak_into_child_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut holder, lines) = spawn_holder(tmp.path(), "spawn-child");
    let child_pid: i32 = lines
        .iter()
        .find_map(|l| l.strip_prefix("child "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(lines.last().map(String::as_str), Some("locked"));
    // The grandchild has no descriptor of the lock file open...
    let fds = std::fs::read_dir(format!("/proc/{child_pid}/fd")).unwrap();
    for fd in fds {
        let target = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
        assert!(
            !target.to_string_lossy().contains("box-alpha.lock"),
            "leaked: {target:?}"
        );
    }
    // ...so once the holder dies, the lock is free although the grandchild lives on.
    kill9(&mut holder);
    let state = StateDir::at(tmp.path().to_path_buf());
    locks::try_acquire(&state, alpha(), "box stop alpha").expect("grandchild kept the lock");
    send_sigkill(child_pid);
}
