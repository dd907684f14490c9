//! Boxes on a remote Linux host (issue 24), through `box` as a user drives it, against the
//! remote of tests/remote_support: a namespace reached only by OpenSSH (`sshd -i` as the
//! ProxyCommand of `BOX_SSH_COMMAND=ssh -F cfg`), smolvm-sim as its smolvm, nothing
//! listening anywhere, the laptop's test files invisible there. The passphrase is set the
//! way users set it, `BOX_PASSPHRASE` in box's environment (no file).
//!
//! * `remote_whole_path_new_enter_open_save_load_rm` (CI): `box new` on the remote →
//!   `box ls` says where it lives → `box enter` lands in its tmux session → `box open`
//!   signs headless Chromium in to its Executor through the forward → a base built there
//!   and a box made from it → `box save` writes the
//!   backup on the laptop → `box load` into a second remote box and into a local one, each
//!   with what was saved → `box rm` all three. The remote's process table is sampled all
//!   along; then no trace of the user's secrets, set the way users set them (the
//!   passphrase, a proxy's password, model API keys), in it, its files (guests' disks
//!   included), the simulator's raw call log or sshd's log, nor of Executor's token outside
//!   the guest it belongs to; the proxy went to the local box only (`REMOTE_PROXY_HOSTS`
//!   names no host).
//! * `remote_faults_*` (CI): the connection dropped mid-save and mid-load, the remote
//!   smolvm killed mid-save, a wrong host key (for a new box and for an existing one's
//!   save): nothing published, nothing half-restored,
//!   the remote temp dir gone, the box still usable.
//! * Heavier variants (`BOX_TEST_HEAVY=1`): a pristine image provisioned from the real
//!   registries on the remote, and the timing report (remote vs local).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "browser_support/mod.rs"]
mod browser_support;
mod remote_support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use remote_support::{
    ALIAS, ProcSampler, Remote, Run, UserSecrets, assert_processes_free_of, outside_guests, serial,
};

/// Heavier variants run only when asked (minutes each, the network's speed).
fn heavy() -> bool {
    if std::env::var("BOX_TEST_HEAVY").is_ok_and(|v| v == "1") {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: heavy remote variant (set BOX_TEST_HEAVY=1 to run it)"
    );
    false
}

/// The remote machine that backs box `name` (`hb-<state id>-<name>`), if any.
fn remote_machine(r: &Remote, name: &str) -> Option<String> {
    r.machines()
        .into_iter()
        .map(|(m, _)| m)
        .find(|m| m.starts_with("hb-") && m.ends_with(&format!("-{name}")))
}

/// The local machine of box `name`, if any (local boxes keep their plain name).
fn local_machine(r: &Remote, name: &str) -> Option<String> {
    r.world
        .machines()
        .into_iter()
        .map(|(m, _)| m)
        .find(|m| m == name || m.ends_with(&format!("-{name}")))
}

/// Waits (at most `secs`) until the remote has no box temp dir left.
fn assert_remote_temps_gone(r: &Remote, secs: u64, when: &str) {
    let start = Instant::now();
    loop {
        let left = r.box_temps();
        if left.is_empty() {
            return;
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let procs: Vec<String> =
                r.ns.processes()
                    .into_iter()
                    .map(|p| format!("{} {}", p.pid, p.args))
                    .filter(|p| !p.contains("_boot-vm") && !p.contains(" hb workload"))
                    .collect();
            panic!(
                "{when}: the remote keeps box's temp dirs {left:?} after {secs} s; its processes: {procs:#?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until a remote smolvm call whose argv (joined) contains `needle` is running or
/// has run since call number `from`.
fn wait_for_remote_call(r: &Remote, from: usize, needle: &str, secs: u64) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if r.calls()
            .iter()
            .skip(from)
            .any(|c| c.join(" ").contains(needle))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// `box args…` with the world's environment, timed.
fn timed(r: &Remote, args: &[&str], env: &[(&str, &str)]) -> (Run, f64) {
    let t = Instant::now();
    let run = r.world.run(args, env);
    let secs = t.elapsed().as_secs_f64();
    eprintln!("remote test: box {} took {secs:.1} s", args.join(" "));
    (run, secs)
}

/// Whether a tmux client is attached to session `main` in the remote guest `machine`.
fn tmux_attached(r: &Remote, machine: &str) -> bool {
    let out = r.sim(&[
        "machine",
        "exec",
        "--name",
        machine,
        "--",
        "runuser",
        "-u",
        "agent",
        "--",
        "tmux",
        "list-clients",
        "-t",
        "main",
    ]);
    out.status.success() && !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// `box enter NAME` on a real pty (script(1)) with the world's environment: once its tmux
/// client is attached in the remote guest `machine`, types one command into the session
/// and leaves; the output shows where it ran.
fn enter(r: &Remote, name: &str, machine: &str) -> Run {
    let base = r.world.command(&[], &[]);
    let mut cmd = Command::new("script");
    cmd.args([
        "-qec",
        &format!(
            "{} enter {name}",
            remote_support::sim_support::box_bin().display()
        ),
        "/dev/null",
    ]);
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Typed too early, keys are lost on the way (ssh and the remote exec set their ptys up
    // after box starts): wait for the attached client.
    let start = Instant::now();
    while !tmux_attached(r, machine) {
        if start.elapsed() > Duration::from_secs(60) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let run = Run::from(&child.wait_with_output().unwrap());
            panic!("box enter {name} never attached to the session:\n{run}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stdin
        .write_all(b"echo in-$(tmux display-message -p '#S')-as-$(whoami)-marker-$(cat ~/.box-test-marker | wc -l)\r")
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    stdin.write_all(b"exit\r").unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let run = Run::from(&child.wait_with_output().unwrap());
            panic!("box enter {name} did not end when its shell exited:\n{run}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(stdin);
    let run = Run::from(&child.wait_with_output().unwrap());
    r.world
        .transcript
        .borrow_mut()
        .push_str(&format!("$ script box enter {name}\n{run}\n"));
    run
}

/// `box open NAME --print-url`, the URL loaded in headless Chromium: Executor's signed-in
/// Integrations page, reached through the laptop's forward to the remote's loopback.
fn open_in_chromium(r: &Remote, name: &str, token: &str) {
    let printed = r.world.run(&["open", name, "--print-url"], &[]);
    assert!(printed.ok(), "box open {name} --print-url: {printed}");
    let url = printed
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("http://box-{name}.localhost:")))
        .unwrap_or_else(|| panic!("no sign-in URL: {printed}"))
        .trim()
        .to_string();
    let profile = r.world.dir.path().join(format!("chromium-{name}"));
    let loaded = browser_support::load(&profile, &url);
    let text = browser_support::text_of(&loaded.dom);
    assert!(
        text.contains("Integrations"),
        "Chromium did not land on Executor's Integrations page through the forward:\n{}\n{}",
        loaded.dom,
        loaded.log
    );
    assert!(!text.contains("Unauthorized"), "{}", loaded.dom);
    assert!(!loaded.dom.contains(token), "the token reached the page");
    let stop = r.world.run(&["open", "--stop", name], &[]);
    assert!(stop.ok(), "box open --stop {name}: {stop}");
}

/// The newest published backup of box `name`.
fn backup_of(r: &Remote, name: &str) -> PathBuf {
    r.world
        .backups_published()
        .into_iter()
        .rfind(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&format!("{name}-")))
        })
        .unwrap_or_else(|| panic!("no backup of {name} in {}", r.world.backups().display()))
}

/// The user's secrets (`secrets`: the passphrase, a proxy's password, API keys) nowhere
/// the remote could see them: its process table as sampled, guests included, its files,
/// guests' disks included, the raw call log, sshd's log; and nowhere on the laptop box
/// should not put them (its output, state dir, the local simulator's logs). A guest's own
/// secrets (`guest_secrets`: Executor's token, which lives in the guest and so on the
/// remote by right) nowhere on the remote outside the guests.
fn assert_remote_never_saw(
    r: &Remote,
    samplers: (ProcSampler, ProcSampler),
    secrets: &[String],
    guest_secrets: &[String],
) {
    let (seen, rounds) = samplers.0.finish();
    eprintln!(
        "remote test: {} distinct remote processes in {rounds} samples",
        seen.len()
    );
    assert_processes_free_of(&seen, rounds, secrets);
    let host_own = outside_guests(&seen);
    assert!(
        !host_own.is_empty() && host_own.len() < seen.len(),
        "the sampler told no guest process from the remote's own ({} of {}): the guest-secret scan would prove nothing",
        host_own.len(),
        seen.len()
    );
    assert_processes_free_of(&host_own, rounds, guest_secrets);
    // box's ssh clients on the laptop: what OpenSSH could send on (SendEnv, a command line).
    let (seen, rounds) = samplers.1.finish();
    eprintln!(
        "remote test: {} distinct laptop ssh processes in {rounds} samples",
        seen.len()
    );
    assert_processes_free_of(&seen, rounds, &[secrets, guest_secrets].concat());
    r.assert_files_free_of(secrets);
    let in_guests = r.files_holding(guest_secrets);
    for i in 0..guest_secrets.len() {
        assert!(
            in_guests
                .iter()
                .any(|f| f.starts_with(&format!("secret #{i} in "))),
            "the file scan does not find guest secret #{i} in its guest: it would prove nothing"
        );
    }
    let found = r.files_outside_guests_holding(guest_secrets);
    assert!(
        found.is_empty(),
        "a guest's secret reached the remote's own files: {found:#?}"
    );
    r.world.scan_secrets();
}

/// Every secret of the user's for the scans: the passphrase and `user`'s.
fn user_secrets(r: &Remote, user: &UserSecrets) -> Vec<String> {
    let mut all = vec![r.world.passphrase.clone()];
    all.extend(user.all());
    all
}

/// The proxies in a guest: `/etc/hermes-box/proxy.env`, or "" when it has none.
const PROXY_ENV: &str = "cat /etc/hermes-box/proxy.env 2>/dev/null || true";

fn prerequisites() -> bool {
    remote_support::prerequisites() && browser_support::available()
}

/// Writes the test marker into the remote guest `machine` (see sim_support::write_marker).
fn write_remote_marker(r: &Remote, machine: &str) -> String {
    remote_support::sim_support::write_marker(&|a| r.sim(a), machine)
}

fn assert_remote_marker(r: &Remote, machine: &str, content: &str) {
    remote_support::sim_support::assert_marker(&|a| r.sim(a), machine, content);
}

/// Executor's token in a remote guest.
fn remote_token(r: &Remote, machine: &str) -> String {
    r.world.token_in(&|a| r.sim(a), machine)
}

#[test]
fn remote_whole_path_new_enter_open_save_load_rm() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let t0 = Instant::now();
    let mut r = Remote::new();
    r.use_passphrase_env();
    let user = r.use_user_secrets_env();
    let sampler = (r.sample_processes(), r.sample_laptop_ssh());
    let host = format!("ssh://root@{ALIAS}");

    // new, on the remote.
    let (new, _) = timed(&r, &["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha on the remote: {new}");
    let alpha = remote_machine(&r, "alpha").unwrap_or_else(|| {
        panic!(
            "no remote machine for alpha; remote: {:?}, local: {:?}",
            r.machines(),
            r.world.machines()
        )
    });
    assert!(
        r.world.machines().is_empty(),
        "box new with BOX_HOST made a local machine: {:?}",
        r.world.machines()
    );
    let ls = r.world.run(&["ls"], &[]);
    assert!(ls.ok(), "{ls}");
    assert!(
        ls.stdout.contains("HOST") && ls.stdout.contains(&host),
        "box ls does not say alpha lives on {host}:\n{ls}"
    );
    let token = remote_token(&r, &alpha);
    // The laptop's proxy stays here: REMOTE_PROXY_HOSTS names no host.
    assert!(
        r.guest_sh(&alpha, PROXY_ENV).is_empty(),
        "the laptop's proxy (password and all) went into a remote box"
    );
    assert!(
        new.stdout.contains(&format!("proxies: none for {host}")),
        "box new does not say the remote box gets no proxies: {new}"
    );

    // enter: the tmux session as agent, in the remote guest.
    let marker = write_remote_marker(&r, &alpha);
    let entered = enter(&r, "alpha", &alpha);
    assert!(entered.ok(), "box enter alpha: {entered}");
    assert!(
        entered.stdout.contains("in-main-as-agent-marker-1"),
        "box enter did not land in alpha's tmux session as agent:\n{entered}"
    );

    // open: Chromium through the laptop's forward to the remote's loopback.
    open_in_chromium(&r, "alpha", &token);

    // A base built on the remote; a second box made from it there (`machine create --from`).
    let (build, _) = timed(&r, &["base", "build"], &[]);
    assert!(build.ok(), "box base build on the remote: {build}");
    let from = r.calls().len();
    let (new, _) = timed(&r, &["new", "delta"], &[]);
    assert!(new.ok(), "box new delta from the remote's base: {new}");
    assert!(
        r.calls()
            .iter()
            .skip(from)
            .any(|c| c.join(" ").contains("create") && c.join(" ").contains("--from")),
        "box new did not create delta from the base on the remote"
    );
    assert!(remote_machine(&r, "delta").is_some());
    assert!(r.world.run(&["rm", "delta", "--force"], &[]).ok());

    // save: the backup is on the laptop; nothing of it stays on the remote.
    let (save, _) = timed(&r, &["save", "alpha"], &[]);
    assert!(save.ok(), "box save alpha: {save}");
    let backup = backup_of(&r, "alpha");
    assert_remote_temps_gone(&r, 10, "after box save");
    r.world.assert_no_plaintext(&[]);

    // load into a second remote box, and into a local one.
    let backup_arg = backup.display().to_string();
    let (load, _) = timed(&r, &["load", &backup_arg, "beta"], &[]);
    assert!(load.ok(), "box load into a remote box: {load}");
    let beta = remote_machine(&r, "beta").expect("no remote machine for beta");
    assert_remote_marker(&r, &beta, &marker);
    assert_remote_temps_gone(&r, 10, "after box load");
    let (load, _) = timed(&r, &["--host", "local", "load", &backup_arg, "gamma"], &[]);
    assert!(load.ok(), "box load into a local box: {load}");
    let gamma = local_machine(&r, "gamma").expect("no local machine for gamma");
    remote_support::sim_support::assert_marker(&|a| r.world.sim(a), &gamma, &marker);
    // A box on this machine does get the proxy: it was in box's environment all along.
    assert!(
        r.world
            .sh(&gamma, PROXY_ENV)
            .contains(&format!("HTTPS_PROXY='{}'", user.proxy_url())),
        "the local box did not get the laptop's proxy: the remote scans would prove nothing"
    );
    assert!(
        remote_machine(&r, "gamma").is_none(),
        "--host local made a remote machine"
    );

    // The scans, before anything is removed.
    assert_remote_never_saw(&r, sampler, &user_secrets(&r, &user), &[token]);

    // rm, all three.
    for name in ["alpha", "beta", "gamma"] {
        let rm = r.world.run(&["rm", name, "--force"], &[]);
        assert!(rm.ok(), "box rm {name}: {rm}");
    }
    assert!(
        r.machines().is_empty(),
        "remote machines left: {:?}",
        r.machines()
    );
    assert!(r.world.machines().is_empty(), "local machines left");
    for name in ["alpha", "beta", "gamma"] {
        assert!(!r.world.registered(name), "{name} still registered");
    }
    assert_remote_temps_gone(&r, 10, "after box rm");
    eprintln!(
        "remote test: whole path {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// One remote box for the fault tests, its backup, and the marker in it.
fn remote_box_with_backup(r: &Remote) -> (String, PathBuf, String) {
    let (new, _) = timed(r, &["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha on the remote: {new}");
    let alpha = remote_machine(r, "alpha").expect("no remote machine for alpha");
    let marker = write_remote_marker(r, &alpha);
    let (save, _) = timed(r, &["save", "alpha"], &[]);
    assert!(save.ok(), "box save alpha: {save}");
    (alpha, backup_of(r, "alpha"), marker)
}

/// A `box` run spawned, the connection dropped once the remote runs a call containing
/// `needle` (made slow so the cut lands inside it), then waited for.
fn cut_during(r: &Remote, args: &[&str], needle: &str) -> Run {
    r.set_remote_sim_env(&[
        ("SMOLVM_SIM_FAIL", &format!("cp:slow@{needle}")),
        ("SMOLVM_SIM_SLOW_SECS", "20"),
    ]);
    let from = r.calls().len();
    let child = r.world.spawn(args, &[]);
    let reached = wait_for_remote_call(r, from, needle, 240);
    // The copy's temp dir is there while it runs (the check below is not vacuous).
    let start = Instant::now();
    while reached && r.box_temps().is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let temps_during = r.box_temps();
    let killed = r.drop_connection();
    let run = r.world.finish(args, child, 180);
    r.set_remote_sim_env(&[]);
    assert!(
        reached,
        "box {} never reached a remote copy: {run}",
        args.join(" ")
    );
    assert!(killed > 0, "nothing to cut");
    assert!(
        !temps_during.is_empty(),
        "no remote temp dir while the copy ran (box {})",
        args.join(" ")
    );
    run
}

#[test]
fn remote_faults_connection_dropped_mid_save_and_mid_load_and_smolvm_killed() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let mut r = Remote::new();
    r.use_passphrase_env();
    let user = r.use_user_secrets_env();
    let sampler = (r.sample_processes(), r.sample_laptop_ssh());
    let (alpha, backup, marker) = remote_box_with_backup(&r);
    let token = remote_token(&r, &alpha);
    let published = r.world.backups_published();

    // The connection dropped mid-save: an error, nothing published, no temp anywhere, and
    // the box saves fine afterwards.
    let run = cut_during(&r, &["save", "alpha"], "/part-0");
    assert!(
        !run.ok(),
        "box save reported success over a dropped connection: {run}"
    );
    assert_eq!(
        r.world.backups_published(),
        published,
        "a cut save published a backup"
    );
    r.world.assert_no_plaintext(&[]);
    assert_remote_temps_gone(&r, 15, "after a save cut mid-copy");
    let again = r.world.run(&["save", "alpha"], &[]);
    assert!(again.ok(), "box save after a dropped connection: {again}");
    let published = r.world.backups_published();

    // The remote smolvm killed mid-save: the same.
    r.set_remote_sim_env(&[("SMOLVM_SIM_FAIL", "exec:hang@export")]);
    let from = r.calls().len();
    let child = r.world.spawn(&["save", "alpha"], &[]);
    assert!(
        wait_for_remote_call(&r, from, "export", 120),
        "box save never ran hb export on the remote"
    );
    let start = Instant::now();
    while r.kill_remote_smolvm() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no remote smolvm call to kill"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = r.world.finish(&["save", "alpha"], child, 180);
    r.set_remote_sim_env(&[]);
    assert!(
        !run.ok(),
        "box save reported success with its smolvm killed: {run}"
    );
    // Over ssh a killed smolvm is seen as the call's status 137: box says the step was
    // killed (it cannot tell smolvm's death from the guest command's).
    assert!(
        run.stderr.contains("alpha")
            && (run.stderr.contains("smolvm") || run.stderr.to_lowercase().contains("killed")),
        "the error does not say which box and that the call was killed: {run}"
    );
    assert_eq!(r.world.backups_published(), published);
    r.world.assert_no_plaintext(&[]);
    assert_remote_temps_gone(&r, 15, "after a save whose smolvm was killed");
    let again = r.world.run(&["save", "alpha"], &[]);
    assert!(again.ok(), "box save after its smolvm was killed: {again}");

    // The connection dropped mid-load: no box, no row, no remote machine, no temp.
    let backup_arg = backup.display().to_string();
    let run = cut_during(&r, &["load", &backup_arg, "beta"], "/part-0");
    assert!(
        !run.ok(),
        "box load reported success over a dropped connection: {run}"
    );
    assert!(
        !r.world.registered("beta"),
        "a cut load left beta registered: {run}"
    );
    assert!(
        remote_machine(&r, "beta").is_none(),
        "a cut load left a half-restored machine on the remote: {:?}\n{run}",
        r.machines()
    );
    r.world.assert_no_plaintext(&[]);
    // alpha is untouched by all this.
    assert_remote_marker(&r, &alpha, &marker);

    // A wrong host key for an existing box: save refuses, says why, publishes nothing.
    let good = r.trust_a_wrong_host_key();
    let published = r.world.backups_published();
    let calls = r.calls().len();
    let save = r.world.run(&["save", "alpha"], &[]);
    std::fs::write(r.known_hosts(), good).unwrap();
    assert!(!save.ok(), "box save went on with a wrong host key: {save}");
    assert!(
        save.all().to_lowercase().contains("host key"),
        "the error does not say the host key is wrong: {save}"
    );
    assert_eq!(r.world.backups_published(), published);
    assert_eq!(
        r.calls().len(),
        calls,
        "smolvm ran on a host whose key is wrong"
    );
    r.world.assert_no_plaintext(&[]);

    assert_remote_never_saw(&r, sampler, &user_secrets(&r, &user), &[token]);
    // Last, so the checks above run whatever this says: the part streamed in for the cut
    // load (plaintext of /data) must not outlive the connection on the remote.
    assert_remote_temps_gone(&r, 15, "after a load cut mid-copy");
}

#[test]
fn remote_faults_wrong_host_key_refused_and_nothing_made() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let r = Remote::new();
    let good = r.trust_a_wrong_host_key();
    let new = r.world.run(&["new", "alpha"], &[]);
    assert!(!new.ok(), "box new went on with a wrong host key: {new}");
    let all = new.all().to_lowercase();
    assert!(
        all.contains("host key"),
        "the error does not say the host key is wrong: {new}"
    );
    assert!(!r.world.registered("alpha"), "a refused new left a row");
    assert!(
        r.calls().is_empty(),
        "smolvm ran on a host whose key is wrong"
    );
    assert!(
        r.world.machines().is_empty(),
        "a refused remote new made a local machine"
    );
    // With the right key back, the same command works (nothing stuck).
    std::fs::write(r.known_hosts(), good).unwrap();
    let ls = r.world.run(&["ls"], &[]);
    assert!(ls.ok(), "{ls}");
}

/// A box's web port is published on the remote's loopback, so the remote decides whether
/// it is free: a port something listens on there (another laptop's box, any service) is
/// not picked, though it is free on this machine, and with no other port in the range
/// `box new` says so before any machine exists.
#[test]
fn remote_new_does_not_pick_a_port_taken_on_the_remote() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let r = Remote::new();
    let mut listener =
        r.ns.enter("python3")
            .args([
                "-c",
                "import socket, time\n\
             s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
             print(s.getsockname()[1], flush=True); time.sleep(600)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(listener.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    assert!(
        box_host::lifecycle::ports::is_bindable(port),
        "port {port} is taken on this machine too: the test proves nothing"
    );
    let p = port.to_string();
    let new = r.world.run(
        &["new", "alpha"],
        &[
            ("EXECUTOR_PORT_LO", p.as_str()),
            ("EXECUTOR_PORT_HI", p.as_str()),
        ],
    );
    let _ = listener.kill();
    let _ = listener.wait();
    assert!(
        !new.ok(),
        "box new took port {port}, taken on the remote: {new}"
    );
    assert!(
        new.all()
            .contains(&format!("no free host port in {port}-{port} on ssh://")),
        "{new}"
    );
    assert!(!r.world.registered("alpha"), "a refused new left a row");
    assert!(
        !r.calls().iter().any(|c| c.iter().any(|a| a == "create")),
        "a machine was created: {:?}",
        r.calls()
    );
}

/// The median of three or more timings.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Heavy: a pristine image on the remote (no host-userland shortcut, no local tools):
/// provisioning from the real registries there, then save and load back.
#[test]
fn remote_heavy_pristine_image_from_the_network() {
    if !prerequisites() || !heavy() {
        return;
    }
    let _serial = serial();
    let mut r = Remote::new();
    r.use_passphrase_env();
    // The remote smolvm boots the pristine image and guests get no local tools.
    r.set_remote_sim_env(&[("SMOLVM_SIM_HOST_USERLAND", "0")]);
    let ca = Path::new("/etc/ssl/certs/ca-certificates.crt");
    // The repo's default image (the simulator boots its pristine stand-in) and this
    // network's CA bundle, as tests/first_run.rs sets them.
    let cfg = std::fs::read_to_string(r.world.config())
        .unwrap()
        .replace("BASE_IMAGE=debian:12\n", "BASE_IMAGE=ubuntu:24.04\n");
    std::fs::write(
        r.world.config(),
        format!("{cfg}GUEST_CA_CERTS={}\n", ca.display()),
    )
    .unwrap();
    let sampler = (r.sample_processes(), r.sample_laptop_ssh());
    let (new, _) = timed(&r, &["new", "alpha"], &[("BOX_TEST_GUEST_ENV", "")]);
    assert!(
        new.ok(),
        "box new alpha from the network on the remote: {new}"
    );
    let alpha = remote_machine(&r, "alpha").expect("remote machine");
    let marker = write_remote_marker(&r, &alpha);
    let (save, _) = timed(&r, &["save", "alpha"], &[]);
    assert!(save.ok(), "{save}");
    let backup = backup_of(&r, "alpha").display().to_string();
    let (load, _) = timed(
        &r,
        &["load", &backup, "beta"],
        &[("BOX_TEST_GUEST_ENV", "")],
    );
    assert!(load.ok(), "{load}");
    assert_remote_marker(&r, &remote_machine(&r, "beta").unwrap(), &marker);
    let token = remote_token(&r, &alpha);
    assert_remote_never_saw(&r, sampler, &[r.world.passphrase.clone()], &[token]);
}

/// A /data like an agent's after some work, about `mb` MiB: many small text files, an
/// incompressible blob and a long log (the shape of save_load_bench's corpus).
fn fill_corpus(mb: u64) -> String {
    let blob = mb / 2;
    let log = mb - blob - 60;
    format!(
        r#"set -e
C=/data/home/agent/corpus; mkdir -p $C; cd $C
awk 'BEGIN {{ for (i = 0; i < 20000; i++) {{ f = sprintf("f%05d.txt", i); for (j = 0; j < 55; j++) print "line " j " of file " i " lorem ipsum dolor sit amet" > f; close(f) }} }}'
head -c {blob}M /dev/urandom > blob.bin
yes 'INFO request served in 12ms path=/api/v1/items status=200' | head -c {log}M > app.log
chown -R agent:agent $C
du -sm /data | cut -f1"#
    )
}

/// Heavy: remote vs local `box new` from a base (one built on each side first),
/// then `box save` and `box load` of a box with a ~300 MiB /data (`BENCH_MB`), 3 runs each,
/// medians printed for the report, never asserted against a time.
#[test]
fn remote_heavy_bench_remote_vs_local() {
    if !prerequisites() || !heavy() {
        return;
    }
    let _serial = serial();
    let mut r = Remote::new();
    r.use_passphrase_env();
    let mb: u64 = std::env::var("BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    // Every save a full backup, as the comparison needs.
    let cfg = std::fs::read_to_string(r.world.config()).unwrap();
    std::fs::write(r.world.config(), format!("{cfg}BACKUP_CHAIN_MAX=1\n")).unwrap();
    let mut rows = Vec::new();
    for side in ["local", "remote"] {
        let host = if side == "local" {
            "local".to_string()
        } else {
            format!("ssh://root@{ALIAS}")
        };
        let (mut new_t, mut save_t, mut load_t) = (Vec::new(), Vec::new(), Vec::new());
        let (run, s) = timed(&r, &["--host", &host, "base", "build"], &[]);
        assert!(run.ok(), "{run}");
        eprintln!("remote bench {side}: base build {s:.1} s");
        for i in 0..3 {
            let name = format!("{side}{i}");
            let (run, s) = timed(&r, &["--host", &host, "new", &name], &[]);
            assert!(run.ok(), "{run}");
            new_t.push(s);
        }
        let first = format!("{side}0");
        let machine = if side == "local" {
            local_machine(&r, &first).unwrap()
        } else {
            remote_machine(&r, &first).unwrap()
        };
        let size = if side == "local" {
            r.world.sh(&machine, &fill_corpus(mb))
        } else {
            r.guest_sh(&machine, &fill_corpus(mb))
        };
        eprintln!("remote bench {side}: /data is {} MiB", size.trim());
        for _ in 0..3 {
            let (run, s) = timed(&r, &["save", &first], &[]);
            assert!(run.ok(), "{run}");
            save_t.push(s);
            std::thread::sleep(Duration::from_millis(1100)); // backup names are per second
        }
        let backup = backup_of(&r, &first).display().to_string();
        for i in 0..3 {
            let loaded = format!("{side}-l{i}");
            let (run, s) = timed(&r, &["--host", &host, "load", &backup, &loaded], &[]);
            assert!(run.ok(), "{run}");
            load_t.push(s);
            assert!(r.world.run(&["rm", &loaded, "--force"], &[]).ok());
        }
        for i in 0..3 {
            assert!(
                r.world
                    .run(&["rm", &format!("{side}{i}"), "--force"], &[])
                    .ok()
            );
        }
        rows.push((side, median(new_t), median(save_t), median(load_t)));
    }
    for (side, n, s, l) in rows {
        eprintln!(
            "remote bench {side}: new {n:.1} s, save {s:.1} s, load {l:.1} s (medians of 3, /data ~{mb} MiB)"
        );
    }
}

/// What box copies into a guest (hb, provisioning's files, the configs it writes) has the
/// same modes and owners in a remote box as in a local one: a part streamed through the
/// remote's private temp dir (umask 077) must not arrive 0600.
#[test]
fn remote_guest_files_keep_the_modes_a_local_box_has() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let r = Remote::new();
    let new = r.world.run(&["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha on the remote: {new}");
    let new = r.world.run(&["--host", "local", "new", "gamma"], &[]);
    assert!(new.ok(), "box new gamma here: {new}");
    let listing = "find /opt/hermes-box /usr/local/bin/hb /etc/hermes-box.env -printf '%m %u:%g %p\\n' 2>/dev/null | sort";
    let remote = r.guest_sh(&remote_machine(&r, "alpha").unwrap(), listing);
    let local = r.world.sh(&local_machine(&r, "gamma").unwrap(), listing);
    assert!(!local.trim().is_empty());
    assert_eq!(
        remote, local,
        "modes in the remote box (left) differ from a local box's (right)"
    );
}

/// The verbs the whole path does not take, on a remote box: stop and start (readiness
/// through the forward), doctor (the remote host's own lines: ssh, smolvm, KVM, logind,
/// disk and memory there), repair in place, and clone (a branch on the same remote host).
#[test]
fn remote_stop_start_doctor_repair_clone() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let mut r = Remote::new();
    r.use_passphrase_env();
    let host = format!("ssh://root@{ALIAS}");
    let (new, _) = timed(&r, &["new", "alpha"], &[]);
    assert!(new.ok(), "box new alpha on the remote: {new}");
    let alpha = remote_machine(&r, "alpha").expect("alpha on the remote");
    let marker = write_remote_marker(&r, &alpha);

    let stop = r.world.run(&["stop", "alpha"], &[]);
    assert!(stop.ok(), "box stop alpha: {stop}");
    assert!(
        r.machines()
            .contains(&(alpha.clone(), "stopped".to_string())),
        "{:?}",
        r.machines()
    );
    let start = r.world.run(&["start", "alpha"], &[]);
    assert!(
        start.ok() && start.stdout.contains("running and healthy"),
        "box start alpha: {start}"
    );

    let doctor = r.world.run(&["doctor", "alpha"], &[]);
    assert!(
        doctor.all().contains(&format!("host {host}"))
            && doctor.all().contains("reachable over ssh")
            && doctor.all().contains("host Executor MCP: healthy"),
        "box doctor alpha says nothing of its remote host or its MCP endpoint: {doctor}"
    );

    let repair = r.world.run(&["repair", "alpha"], &[]);
    assert!(repair.ok(), "box repair alpha: {repair}");
    assert_remote_marker(&r, &alpha, &marker);

    // The laptop's proxy goes to a remote box on a host REMOTE_PROXY_HOSTS names, and out
    // again at the next repair once it no longer does.
    let proxy = "http://boxuser:named-pw-7c1@proxy.invalid:3128";
    let named = r.world.run(
        &["repair", "alpha"],
        &[
            ("HTTPS_PROXY", proxy),
            ("REMOTE_PROXY_HOSTS", host.as_str()),
        ],
    );
    assert!(named.ok(), "box repair alpha, its host named: {named}");
    assert!(
        r.guest_sh(&alpha, PROXY_ENV)
            .contains(&format!("HTTPS_PROXY='{proxy}'")),
        "REMOTE_PROXY_HOSTS names {host}, yet its box got no proxy: {named}"
    );
    let unnamed = r.world.run(&["repair", "alpha"], &[("HTTPS_PROXY", proxy)]);
    assert!(unnamed.ok(), "box repair alpha: {unnamed}");
    assert!(
        r.guest_sh(&alpha, PROXY_ENV).is_empty(),
        "the proxy stayed in a box whose host is no longer named"
    );
    assert!(!unnamed.all().contains("named-pw-7c1"), "{unnamed}");

    let (clone, _) = timed(&r, &["clone", "alpha", "beta"], &[]);
    assert!(clone.ok(), "box clone alpha beta: {clone}");
    let beta = remote_machine(&r, "beta").expect("the clone on the remote");
    assert!(r.world.machines().is_empty(), "a local machine appeared");
    assert_remote_marker(&r, &beta, &marker);
    assert_remote_temps_gone(&r, 10, "after box clone");
    r.world.assert_no_plaintext(&[]);
    for name in ["alpha", "beta"] {
        assert!(r.world.run(&["rm", name, "--force"], &[]).ok());
    }
    assert!(r.machines().is_empty(), "{:?}", r.machines());
}

/// A `BOX_SSH_COMMAND` that would forward the laptop's agent or X11 display to the remote,
/// or move or take over box's control socket, is refused before any ssh runs, naming the
/// word (ssh's letter flags win over box's own `-o` options); the same command without
/// the word reaches the remote.
#[test]
fn remote_ssh_command_with_forwarding_is_refused_naming_the_word() {
    if !remote_support::prerequisites() {
        return;
    }
    let _serial = serial();
    let r = Remote::new();
    let plain = format!("ssh -F {}", r.ssh_config().display());
    for (extra, named) in [
        ("-A", "-A"),
        ("-X", "-X"),
        ("-Y", "-Y"),
        ("-S /tmp/elsewhere", "-S"),
        ("-M", "-M"),
        ("-o ForwardAgent=yes", "-o ForwardAgent"),
        ("-o ForwardX11=yes", "-o ForwardX11"),
        ("-o ControlPath=/tmp/elsewhere", "-o ControlPath"),
        ("-o ControlMaster=auto", "-o ControlMaster"),
    ] {
        let command = format!("{plain} {extra}");
        let new = r
            .world
            .run(&["new", "alpha"], &[("BOX_SSH_COMMAND", command.as_str())]);
        assert_eq!(new.code, Some(1), "box new with `{command}`: {new}");
        assert!(
            new.stderr
                .contains(&format!("BOX_SSH_COMMAND may not set {named}: it ")),
            "the error does not name {named}: {new}"
        );
        assert!(!r.world.registered("alpha"), "a refused new left a row");
    }
    assert!(r.calls().is_empty(), "smolvm ran on the remote");
    assert!(
        !std::fs::read_to_string(r.sshd_log())
            .unwrap_or_default()
            .contains("Accepted publickey"),
        "ssh logged in to the remote with a refused command"
    );
    let ls = r
        .world
        .run(&["base", "ls"], &[("BOX_SSH_COMMAND", plain.as_str())]);
    assert!(ls.ok(), "box base ls on the remote with `{plain}`: {ls}");
    assert!(
        std::fs::read_to_string(r.sshd_log())
            .unwrap_or_default()
            .contains("Accepted publickey"),
        "box base ls never reached the remote: {ls}"
    );
}
