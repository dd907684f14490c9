//! The remote-host harness (tests/remote_support) checks itself, without `box`: a real
//! OpenSSH session reaches the remote through the ProxyCommand and nothing listens on this
//! host; the remote does not see the laptop's test directory, `/tmp` or `/root`; it reaches
//! the internet; a wrong host key stops ssh; the fault and scan helpers see what they are
//! meant to see (each is shown to fail when it should).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod remote_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use remote_support::{ALIAS, Remote, prerequisites, processes_holding};

fn text(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Listeners of this host's network namespace that this remote's processes hold: sshd,
/// ssh, nsenter, or the remote's slirp4netns.
fn listeners_of_ours(r: &Remote, before: &std::collections::BTreeSet<String>) -> Vec<String> {
    // By pid, not by name: other tests on this host run ssh forwards and slirp4netns too.
    let ours = r.host_pids_of_ours();
    Remote::host_listeners()
        .difference(before)
        .filter(|l| {
            l.contains("\"sshd\"")
                || l.contains(":22 ")
                || ours.iter().any(|p| l.contains(&format!("pid={p},")))
        })
        .cloned()
        .collect()
}

#[test]
fn ssh_reaches_the_remote_through_the_proxy_command_and_nothing_listens() {
    if !prerequisites() {
        return;
    }
    let before = Remote::host_listeners();
    let r = Remote::new();
    let out = r.ssh(&["true"]);
    assert!(out.status.success(), "ssh {ALIAS} true: {}", text(&out));
    // The session really ran in the remote's namespaces: its own network (tap0 from
    // slirp4netns, no host interfaces) and PID namespace (PID 1 is the reaper).
    let out = r.ssh(&["ip -o link show; echo; cat /proc/1/cmdline | tr '\\0' ' '"]);
    assert!(out.status.success(), "{}", text(&out));
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains("tap0"), "the remote has no tap0:\n{seen}");
    assert!(
        seen.contains("/usr/bin/python3 -c"),
        "PID 1 is not the reaper:\n{seen}"
    );
    let host_links = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    for line in String::from_utf8_lossy(&host_links.stdout).lines() {
        let name = line.split(':').nth(1).unwrap_or("").trim();
        if name != "lo" && !name.is_empty() {
            assert!(
                !seen.contains(&format!(": {name}:")),
                "the remote sees this host's interface {name}:\n{seen}"
            );
        }
    }
    // A long session: nothing of ours listens on this host while it runs.
    let mut long = Command::new("ssh")
        .arg("-F")
        .arg(r.ssh_config())
        .args([ALIAS, "sleep 2"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let during = listeners_of_ours(&r, &before);
    assert!(long.wait().unwrap().success());
    assert!(
        during.is_empty(),
        "new listeners during the run: {during:?}"
    );
    let log = std::fs::read_to_string(r.sshd_log()).unwrap();
    assert!(
        log.contains("Accepted publickey for root"),
        "sshd's log does not show the key login:\n{log}"
    );
    assert!(listeners_of_ours(&r, &before).is_empty());
}

#[test]
fn the_remote_sees_none_of_the_laptops_test_files() {
    if !prerequisites() {
        return;
    }
    assert_the_remote_sees_none_of_the_laptops_files(&Remote::new());
}

/// The laptop's state, TMPDIR, passphrase file, box.env and /tmp are invisible on the
/// remote, and what the remote writes to its /tmp stays there.
fn assert_the_remote_sees_none_of_the_laptops_files(r: &Remote) {
    let w = &r.world;
    std::fs::write(w.tmp().join("laptop-tmp-file"), "laptop").unwrap();
    std::fs::write(w.home().join("laptop-state-file"), "laptop").unwrap();
    let laptop_tmp_marker =
        std::env::temp_dir().join(format!("box-remote-probe-{}", std::process::id()));
    std::fs::write(&laptop_tmp_marker, "laptop").unwrap();
    let script = format!(
        "ls -A '{home}' '{tmp}' /tmp /root; test -e '{pf}' && echo PASSPHRASE-FILE-VISIBLE; \
         test -e '{cfg}' && echo CONFIG-VISIBLE; test -e '{marker}' && echo TMP-MARKER-VISIBLE; \
         echo remote >/tmp/remote-only; true",
        home = w.home().display(),
        tmp = w.tmp().display(),
        pf = w.passphrase_file().display(),
        cfg = w.config().display(),
        marker = laptop_tmp_marker.display(),
    );
    let out = r.ssh(&[&script]);
    let _ = std::fs::remove_file(&laptop_tmp_marker);
    assert!(out.status.success(), "{}", text(&out));
    let seen = String::from_utf8_lossy(&out.stdout);
    for leak in [
        "laptop-tmp-file",
        "laptop-state-file",
        "VISIBLE",
        "box-remote-probe",
    ] {
        assert!(!seen.contains(leak), "the remote sees {leak}:\n{seen}");
    }
    // And the other way: what the remote writes to its /tmp is not on the laptop's.
    assert!(!std::path::Path::new("/tmp/remote-only").exists());
    assert!(r.ns.path("/tmp/remote-only").is_file());
    // The laptop still has its files (the tmpfs is the remote's only).
    assert!(w.passphrase_file().is_file());
}

/// A checkout under `/tmp` (a clone made there) or `/root` (root's home on a fresh
/// server): the remote's empty `/tmp` and `/root` hide the laptop there too, yet the
/// harness's own files (sshd's config and keys, the resolver, the simulator binary under
/// the checkout's `target/debug`) are still there for it, and box drives it.
#[test]
fn the_harness_works_from_a_checkout_under_tmp_or_root() {
    if !prerequisites() {
        return;
    }
    for root in ["/tmp", "/root"] {
        let checkout = tempfile::Builder::new()
            .prefix("box-checkout-")
            .tempdir_in(root)
            .unwrap();
        let debug = checkout.path().join("target/debug");
        let target_tmp = checkout.path().join("target/tmp");
        std::fs::create_dir_all(&debug).unwrap();
        std::fs::create_dir_all(&target_tmp).unwrap();
        let sim = debug.join("smolvm-sim");
        let st = Command::new("install")
            .args(["-m", "755"])
            .arg(remote_support::sim_support::sibling("smolvm-sim"))
            .arg(&sim)
            .status()
            .unwrap();
        assert!(st.success(), "install smolvm-sim under {root}");
        // Beside the checkout's build output: hidden from the remote like the rest.
        std::fs::write(checkout.path().join("laptop-checkout-file"), "laptop").unwrap();
        let r = Remote::new_in(&target_tmp, sim);
        let out = r.ssh(&[&format!(
            "{} machine ls --json && ls -A '{}'",
            r.smolvm().display(),
            checkout.path().display()
        )]);
        assert!(
            out.status.success(),
            "the remote smolvm does not run from a checkout under {root}: {}",
            text(&out)
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("laptop-checkout-file"),
            "the remote sees the checkout under {root}: {}",
            text(&out)
        );
        assert_the_remote_sees_none_of_the_laptops_files(&r);
        // The scans see the harness's own files once, and the way to them is no temp dir
        // box left (`box-checkout-…` has `box` in its name).
        let probe = format!("probe-{}", std::process::id());
        std::fs::write(r.dir.path().join("probe"), &probe).unwrap();
        assert_eq!(r.files_holding(std::slice::from_ref(&probe)).len(), 1);
        assert_eq!(r.box_temps(), Vec::<String>::new());
        let ls = r.world.run(&["base", "ls"], &[]);
        assert!(
            ls.ok(),
            "box base ls on the remote, checkout under {root}: {ls}"
        );
        assert!(
            std::fs::read_to_string(r.sshd_log())
                .unwrap()
                .contains("Accepted publickey"),
            "box never reached the remote: {ls}"
        );
    }
}

#[test]
fn the_remote_reaches_the_registries() {
    if !prerequisites() {
        return;
    }
    let r = Remote::new();
    for url in [
        "https://registry.npmjs.org/-/ping",
        "https://deb.debian.org/debian/dists/bookworm/Release",
    ] {
        let out = r.ssh(&[&format!(
            "curl -sS -o /dev/null -w '%{{http_code}}' --max-time 30 {url}"
        )]);
        assert!(
            out.status.success(),
            "{url} from the remote: {}",
            text(&out)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{url}");
    }
}

#[test]
fn a_wrong_host_key_stops_ssh() {
    if !prerequisites() {
        return;
    }
    let r = Remote::new();
    assert!(r.ssh(&["true"]).status.success());
    r.trust_a_wrong_host_key();
    let out = r.ssh(&["echo SHOULD-NOT-RUN"]);
    assert_eq!(out.status.code(), Some(255), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("SHOULD-NOT-RUN"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
            || err.contains("Host key verification failed"),
        "{err}"
    );
    // No known host at all is refused too (BatchMode cannot ask).
    std::fs::write(r.known_hosts(), "").unwrap();
    let out = r.ssh(&["true"]);
    assert_eq!(out.status.code(), Some(255), "{}", text(&out));
}

#[test]
fn remote_smolvm_runs_the_simulator_with_the_remotes_own_home() {
    if !prerequisites() {
        return;
    }
    let r = Remote::new();
    let smolvm = r.smolvm().display().to_string();
    let out = r.ssh(&[&format!("{smolvm} machine ls --json")]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    let calls = r.calls();
    assert_eq!(calls, vec![vec!["machine", "ls", "--json"]], "{calls:?}");
    assert!(r.raw_call_log().is_file(), "no raw call log on the remote");
    // The laptop's simulator saw nothing.
    assert!(r.world.calls().is_empty());
    // Fault injection reaches remote calls through the sim.env file.
    r.set_remote_sim_env(&[("SMOLVM_SIM_FAIL", "ls:always")]);
    let out = r.ssh(&[&format!("{smolvm} machine ls --json")]);
    assert!(!out.status.success(), "{}", text(&out));
}

#[test]
fn the_fault_and_scan_helpers_see_what_they_should() {
    if !prerequisites() {
        return;
    }
    let r = Remote::new();
    let marker = format!("secret-{}", std::process::id());
    // The sampler sees a remote process's environment and argv.
    let sampler = r.sample_processes();
    let out = r.ssh(&[&format!(
        "env PROBE={marker} sh -c 'sleep 0.5; {smolvm} machine ls >/dev/null'",
        smolvm = r.smolvm().display()
    )]);
    assert!(out.status.success(), "{}", text(&out));
    let (seen, rounds) = sampler.finish();
    assert!(rounds > 3, "the sampler ran {rounds} rounds");
    let found = processes_holding(&seen, rounds, std::slice::from_ref(&marker));
    assert!(
        found.iter().any(|f| f.contains("environment of sleep 0.5")),
        "the process scan missed a secret in a remote environment: {found:?}"
    );
    // The laptop sampler sees an ssh client's environment (and nothing else's).
    let laptop = r.sample_laptop_ssh();
    let out = Command::new("env")
        .arg(format!("PROBE={marker}"))
        .arg("ssh")
        .arg("-F")
        .arg(r.ssh_config())
        .args([
            ALIAS,
            &format!("sleep 0.5; {} machine ls", r.smolvm().display()),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let (seen, rounds) = laptop.finish();
    let found = processes_holding(&seen, rounds, std::slice::from_ref(&marker));
    assert!(
        found.iter().any(|f| f.contains("environment of ssh -F")),
        "the laptop ssh scan missed a secret in ssh's environment: {found:?}"
    );
    assert!(seen.iter().all(|p| p.args.starts_with("ssh ")), "{seen:?}");

    // The file scan sees a secret in the remote's /tmp and /root (a marker no smolvm call
    // saw: the raw call log holds the environment of the call above, PROBE included).
    let found = r.files_holding(std::slice::from_ref(&marker));
    assert!(
        found.iter().any(|f| f.ends_with("raw-calls.jsonl")),
        "the file scan missed the secret in the raw call log: {found:?}"
    );
    let marker = format!("file-{marker}");
    for place in ["/tmp/x", "/root/.cache/y"] {
        let out = r.ssh(&[&format!(
            "mkdir -p $(dirname {place}); echo {marker} >{place}"
        )]);
        assert!(out.status.success(), "{}", text(&out));
        let found = r.files_holding(std::slice::from_ref(&marker));
        assert_eq!(found.len(), 1, "the file scan for {place}: {found:?}");
        let out = r.ssh(&[&format!("rm -f {place}")]);
        assert!(out.status.success());
    }
    r.assert_files_free_of(std::slice::from_ref(&marker));

    // drop_connection cuts a running session; the remote itself lives on.
    let mut long = Command::new("ssh")
        .arg("-F")
        .arg(r.ssh_config())
        .args([ALIAS, "sleep 60"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !r.ns.processes().iter().any(|p| p.args == "sleep 60") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the session never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(r.drop_connection() >= 1);
    let st = long.wait().unwrap();
    assert!(!st.success());
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(
        r.ssh(&["true"]).status.success(),
        "the remote is gone after a dropped connection"
    );

    // kill_remote_smolvm kills a hanging call.
    r.set_remote_sim_env(&[("SMOLVM_SIM_FAIL", "ls:hang")]);
    let mut hung = Command::new("ssh")
        .arg("-F")
        .arg(r.ssh_config())
        .args([ALIAS, &format!("{} machine ls", r.smolvm().display())])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while r.kill_remote_smolvm() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no remote smolvm call to kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = hung.wait().unwrap();
    assert!(!st.success(), "the killed call reported success");
}

#[test]
fn dropping_the_remote_ends_every_process_it_started() {
    if !prerequisites() {
        return;
    }
    let r = Remote::new();
    // A process detached from its session outlives the connection, as a machine does.
    let out = r.ssh(&["setsid sleep 300 </dev/null >/dev/null 2>&1 & echo started"]);
    assert!(out.status.success(), "{}", text(&out));
    let init = r.ns.pid;
    let ns_link = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    drop(r);
    let start = Instant::now();
    loop {
        let left: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .filter(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).is_ok_and(|l| l == ns_link))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "remote processes left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_remote_machine_outlives_its_session_and_publishes_on_the_remotes_loopback_only() {
    if !prerequisites() {
        return;
    }
    let r = Remote::new();
    let before = Remote::host_listeners();
    let port = 45000 + (std::process::id() % 5000) as u16;
    let smolvm = r.smolvm().display().to_string();
    let out = r.ssh(&[&format!(
        "{smolvm} machine create --name rm1 --image debian:12 --net -p {port}:{port} \
         -- /bin/sh -c 'exec python3 -m http.server {port}' && {smolvm} machine start --name rm1"
    )]);
    assert!(out.status.success(), "{}", text(&out));
    // The session is over; the machine runs on, its port on the remote's 127.0.0.1.
    let start = Instant::now();
    loop {
        let out = r.ssh(&[&format!(
            "curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/"
        )]);
        if String::from_utf8_lossy(&out.stdout) == "200" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the remote machine's port never answered on the remote: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the remote's published port answers on this host"
    );
    assert!(listeners_of_ours(&r, &before).is_empty());
    // The guest reaches the registries through the remote's network.
    let out = r.sim(&[
        "machine",
        "exec",
        "--name",
        "rm1",
        "--",
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "30",
        "https://registry.npmjs.org/-/ping",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{}",
        text(&out)
    );
    assert_eq!(
        r.machines(),
        vec![("rm1".to_string(), "running".to_string())]
    );
}
