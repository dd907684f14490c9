//! The backup passphrase set the way users set it (`BOX_PASSPHRASE` in the environment,
//! not a file) stays in `box`: through new, save, load, open and repair, no other process
//! (smolvm calls, the simulator's long-lived machine processes in its PID namespaces, the
//! gateway, the browser opener) ever has it in its environment or argv, and the
//! simulator's unredacted call log (argv and environment of every smolvm call) never
//! records it. `/proc` is read continuously while each step runs. The same holds for a
//! passphrase a password manager prints (`BOX_PASSPHRASE_COMMAND`) through new, save and
//! load: the command and every smolvm call run without it in argv or environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lifecycle_support::World;

/// Reads every process's environ and cmdline on the host (all PID namespaces: the test
/// runs as root) until stopped; records each process that holds `secret`. The `box` calls
/// themselves are left out when the scan is done: their pids, and a fork of one that has
/// not exec'd yet (same cmdline, its parent's environ until the exec replaces it).
struct Scanner {
    stop: Arc<AtomicBool>,
    excluded: Mutex<HashSet<(u32, String)>>,
    found: Arc<Mutex<Vec<(u32, String, String)>>>,
    scans: Arc<Mutex<usize>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Scanner {
    fn start(secret: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let excluded = Mutex::new(HashSet::new());
        let found = Arc::new(Mutex::new(Vec::new()));
        let scans = Arc::new(Mutex::new(0));
        let thread = {
            let (stop, found, scans) = (stop.clone(), found.clone(), scans.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    scan_once(&secret, &found);
                    *scans.lock().unwrap() += 1;
                    std::thread::sleep(Duration::from_millis(25));
                }
            })
        };
        Self {
            stop,
            excluded,
            found,
            scans,
            thread: Some(thread),
        }
    }

    fn exclude(&self, pid: u32) {
        self.excluded.lock().unwrap().insert((pid, cmdline(pid)));
    }

    fn finish(mut self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        let excluded = self.excluded.lock().unwrap();
        let found = self
            .found
            .lock()
            .unwrap()
            .iter()
            .filter(|(pid, cmd, _)| !excluded.iter().any(|(p, c)| p == pid || c == cmd))
            .map(|(pid, cmd, file)| format!("{file} of {pid} {cmd}"))
            .collect();
        let scans = *self.scans.lock().unwrap();
        (found, scans)
    }
}

/// A process's argv, space-separated.
fn cmdline(pid: u32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmd).replace('\0', " ")
}

fn scan_once(secret: &str, found: &Mutex<Vec<(u32, String, String)>>) {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        for file in ["environ", "cmdline"] {
            let bytes = std::fs::read(e.path().join(file)).unwrap_or_default();
            if String::from_utf8_lossy(&bytes).contains(secret) {
                let hit = (
                    pid,
                    cmdline(pid).replace(secret, "<PASSPHRASE>"),
                    file.to_string(),
                );
                let mut f = found.lock().unwrap();
                if !f.contains(&hit) {
                    f.push(hit);
                }
            }
        }
    }
}

/// Runs `box args…` with the world's environment, its pid excluded from the scan.
fn step(w: &mut World, scanner: &Scanner, args: &[&str], env: &[(&str, &str)]) {
    let child = w.spawn(args, env);
    scanner.exclude(child.id());
    let run = w.collect(child, &format!("box {}", args.join(" ")));
    assert!(run.ok(), "box {}: {run}", args.join(" "));
}

#[test]
fn box_passphrase_from_the_environment_reaches_no_other_process() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let passphrase = format!("pp-env-{:016x}", rand::random::<u64>());
    w.extra_env
        .push(("BOX_PASSPHRASE".into(), passphrase.clone()));
    // An opener that lives long enough to be seen, and says what it was given.
    let opener = w.dir.path().join("slow-opener");
    std::fs::write(&opener, "#!/bin/sh\nsleep 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let backup = w.dir.path().join("alpha.tar.zst.gpg");
    let backup = backup.to_str().unwrap();

    let scanner = Scanner::start(passphrase.clone());
    step(&mut w, &scanner, &["new", "alpha"], &[]);
    step(&mut w, &scanner, &["save", "alpha", backup], &[]);
    step(&mut w, &scanner, &["load", backup, "beta"], &[]);
    step(
        &mut w,
        &scanner,
        &["open", "alpha"],
        &[("BOX_BROWSER", opener.to_str().unwrap())],
    );
    step(&mut w, &scanner, &["repair", "alpha"], &[]);
    // The gateway and the machines still run: one more look at them.
    std::thread::sleep(Duration::from_millis(200));
    let (found, scans) = scanner.finish();
    assert!(scans > 10, "only {scans} scans of /proc");
    assert!(
        found.is_empty(),
        "BOX_PASSPHRASE reached processes box started:\n{}",
        found.join("\n")
    );
    let raw = std::fs::read_to_string(w.sim_home.join("raw-calls.jsonl")).unwrap();
    assert!(raw.contains("\"machine\""), "no smolvm call was logged");
    assert!(
        !raw.contains(&passphrase),
        "the simulator's raw call log recorded the passphrase"
    );
    w.assert_no_secrets(&[passphrase]);
    assert!(w.run(&["open", "--stop", "alpha"]).ok());
}

/// `BOX_PASSPHRASE_COMMAND` as a user sets it for a password manager (`pass show box`'s
/// shape: the passphrase on the first line, notes after): the save and the load both read
/// it from the command, and no process box starts, the command included, holds it in its
/// argv or environment.
#[test]
fn box_passphrase_from_a_command_reaches_no_other_process() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    let passphrase = format!("pp-cmd-{:016x}", rand::random::<u64>());
    let store = w.dir.path().join("store");
    std::fs::write(&store, format!("{passphrase}\nlogin: me\n")).unwrap();
    let runs = w.dir.path().join("runs");
    let manager = w.dir.path().join("fake-pass");
    std::fs::write(
        &manager,
        format!(
            "#!/bin/sh\necho run >> '{}'\nexec cat '{}'\n",
            runs.display(),
            store.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&manager, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.extra_env.push((
        "BOX_PASSPHRASE_COMMAND".into(),
        format!("{} show box", manager.display()),
    ));
    let backup = w.dir.path().join("alpha.tar.zst.gpg");
    let backup = backup.to_str().unwrap();

    let scanner = Scanner::start(passphrase.clone());
    step(&mut w, &scanner, &["new", "alpha"], &[]);
    step(&mut w, &scanner, &["save", "alpha", backup], &[]);
    step(&mut w, &scanner, &["load", backup, "beta"], &[]);
    std::thread::sleep(Duration::from_millis(200));
    let (found, scans) = scanner.finish();
    assert!(scans > 10, "only {scans} scans of /proc");
    assert!(
        found.is_empty(),
        "the command's passphrase reached processes box started:\n{}",
        found.join("\n")
    );
    // Asked once by the save and once by the load, never by new.
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\nrun\n");
    let raw = std::fs::read_to_string(w.sim_home.join("raw-calls.jsonl")).unwrap();
    assert!(raw.contains("\"machine\""), "no smolvm call was logged");
    assert!(!raw.contains(&passphrase), "the raw call log recorded it");
    assert!(
        !raw.contains("fake-pass"),
        "BOX_PASSPHRASE_COMMAND reached a smolvm call"
    );
    w.assert_no_secrets(&[passphrase]);
}
