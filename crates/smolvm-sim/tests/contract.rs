//! The smolvm contract, checked through the command line only.
//!
//! By default it runs the freshly built `smolvm-sim`. Point it at a real smolvm with
//! `SMOLVM=/path/to/smolvm just contract` (tests that look at simulator internals, fault
//! injection, the call log or personalities are skipped then). Guest images for a real smolvm:
//! SMOLVM_CONTRACT_IMAGE (default ubuntu:24.04) and SMOLVM_CONTRACT_PY_IMAGE (default
//! python:3.12-slim, for the tests whose workload is `python3 -m http.server`).
//! The slow real-network test (`apt-get install -y cowsay`) is `#[ignore]`d: run it with
//! `cargo test -p smolvm-sim --test contract -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

fn binary() -> PathBuf {
    match std::env::var_os("SMOLVM") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_smolvm-sim")),
    }
}

/// True when the binary under test is the simulator (sim-only checks run).
fn is_sim() -> bool {
    binary()
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains("smolvm-sim"))
}

/// Prints one `SKIPPED: <test>: <why>` line past libtest's capture, so a run against a real
/// smolvm says which tests asserted nothing.
fn skipped(test: &str, why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// The calling test's name, for SKIPPED lines.
macro_rules! test_name {
    () => {{
        fn f() {}
        let full = std::any::type_name_of_val(&f);
        full.trim_end_matches("::f")
            .rsplit("::")
            .next()
            .unwrap_or(full)
            .to_string()
    }};
}

/// True (and a SKIPPED line) when the binary is a real smolvm and the calling test looks at
/// what only the simulator has: fault injection, the call log, personalities, its images.
macro_rules! sim_only {
    () => {{
        let real = !is_sim();
        if real {
            skipped(
                &test_name!(),
                "simulator only (fault injection, call log, personalities or simulator images)",
            );
        }
        real
    }};
}

/// The binary's `--version` as (major, minor, patch); (0, 0, 0) when unreadable.
fn binary_version() -> (u64, u64, u64) {
    static V: std::sync::OnceLock<(u64, u64, u64)> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let out = Smol::new().run(&["--version"]).stdout;
        let v: Vec<u64> = out
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .split(['-', '+'])
            .next()
            .unwrap_or("")
            .split('.')
            .filter_map(|p| p.parse().ok())
            .collect();
        match v.as_slice() {
            [a, b, c] => (*a, *b, *c),
            _ => (0, 0, 0),
        }
    })
}

/// With a real smolvm: whether this host boots a machine at all, learned once by creating,
/// starting and deleting one small machine. A start that fails here fails for a host reason
/// (no usable KVM, a uid that cannot open /dev/kvm, too little memory), not for the
/// contract under test; the error is kept for the SKIPPED lines.
fn real_boot_failure() -> Option<String> {
    static R: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let s = Smol::new();
        let n = s.name("bootprobe");
        let img = image();
        let o = s.run(&[
            "machine", "create", "--name", &n, "--image", &img, "--net", "--mem", "1024",
        ]);
        if o.code != 0 {
            return Some(format!("create failed: {}", o.stderr.trim()));
        }
        let o = s.run(&["machine", "start", "--name", &n]);
        (o.code != 0).then(|| {
            let last = o
                .stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            format!("start failed: {}", last.trim())
        })
    })
    .clone()
}

/// Guests need root and namespaces (and slirp4netns) under the simulator. Where they are
/// missing: fail under CI=true, else say why and skip. With a real smolvm they need a host
/// that boots: else "SKIPPED: needs a booting smolvm".
macro_rules! guests_available {
    () => {
        guests_available(&test_name!())
    };
}

fn guests_available(test: &str) -> bool {
    if !is_sim() {
        return match real_boot_failure() {
            None => true,
            Some(why) => {
                skipped(test, &format!("needs a booting smolvm ({why})"));
                false
            }
        };
    }
    let mut why = Vec::new();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        why.push("not root");
    }
    if !Path::new("/proc/self/ns/mnt").exists() {
        why.push("no namespaces");
    }
    let slirp = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("slirp4netns").exists()))
        .unwrap_or(false);
    if !slirp {
        why.push("slirp4netns not installed (just setup)");
    }
    if why.is_empty() {
        return true;
    }
    let msg = format!("guest tests need {}", why.join(", "));
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg} (CI=true: failing instead of skipping)");
    }
    skipped(test, &msg);
    false
}

fn image() -> String {
    std::env::var("SMOLVM_CONTRACT_IMAGE").unwrap_or_else(|_| "ubuntu:24.04".into())
}
fn py_image() -> String {
    std::env::var("SMOLVM_CONTRACT_PY_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into())
}

/// True when libtest runs tests in parallel (anything but `--test-threads=1`).
fn concurrent_tests() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let one = args
        .windows(2)
        .any(|w| w[0] == "--test-threads" && w[1] == "1")
        || args.iter().any(|a| a == "--test-threads=1")
        || std::env::var("RUST_TEST_THREADS").is_ok_and(|v| v == "1");
    !one
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A free high TCP port, distinct per call and per test process.
fn free_port() -> u16 {
    loop {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let p = 20000 + ((std::process::id() * 37 + n * 7) % 40000) as u16;
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Out {
    fn from(o: Output) -> Self {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// One isolated simulator home; every machine it created is deleted on drop, even when the
/// test failed.
struct Smol {
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
    names: std::cell::RefCell<Vec<String>>,
}

impl Smol {
    fn new() -> Self {
        let home = tempfile::Builder::new()
            .prefix("smolvm-contract-")
            .tempdir_in("/tmp")
            .unwrap();
        Smol {
            home,
            env: Vec::new(),
            names: Default::default(),
        }
    }

    fn with_env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    /// A unique machine name (lowercase DNS label), registered for cleanup.
    fn name(&self, tag: &str) -> String {
        let n = format!(
            "ct{}-{tag}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        self.names.borrow_mut().push(n.clone());
        n
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(binary());
        c.args(args)
            .env("SMOLVM_SIM_HOME", self.home())
            // Fast-test shortcut for the CLI contract: guests run on this host's userland
            // (real smolvm ignores it). The image tests (`image_*`) take it off again.
            .env("SMOLVM_SIM_HOST_USERLAND", "1")
            .env_remove("SMOLVM_SIM_IMAGE_MAP")
            .env_remove("SMOLVM_SIM_FAIL")
            .env_remove("SMOLVM_SIM_VERSION")
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        self.cmd(args).output().unwrap().into()
    }

    fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> Out {
        let mut c = self.cmd(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap().into()
    }

    fn ok(&self, args: &[&str]) -> Out {
        let o = self.run(args);
        assert_eq!(o.code, 0, "{args:?} failed: {o:?}");
        o
    }

    fn create(&self, name: &str, extra: &[&str]) -> Out {
        let mut a = vec!["machine", "create", "--name", name];
        a.extend_from_slice(extra);
        self.ok(&a)
    }

    fn start(&self, name: &str) -> Out {
        self.ok(&["machine", "start", "--name", name])
    }

    fn exec(&self, name: &str, argv: &[&str]) -> Out {
        let mut a = vec!["machine", "exec", "--name", name, "--"];
        a.extend_from_slice(argv);
        self.run(&a)
    }

    fn sh(&self, name: &str, script: &str) -> Out {
        self.exec(name, &["/bin/sh", "-c", script])
    }

    fn ls_json(&self) -> Vec<serde_json::Value> {
        let o = self.ok(&["machine", "ls", "--json"]);
        serde_json::from_str::<serde_json::Value>(&o.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    fn state(&self, name: &str) -> Option<String> {
        self.ls_json()
            .into_iter()
            .find(|m| m["name"] == name)
            .map(|m| m["state"].as_str().unwrap().to_string())
    }

    fn calls(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.home().join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Smol {
    fn drop(&mut self) {
        for n in self.names.borrow().iter() {
            let _ = self.cmd(&["machine", "delete", "--name", n, "-f"]).output();
        }
    }
}

fn http_get(port: u16, path: &str) -> Option<String> {
    http_get_at(std::net::IpAddr::from([127, 0, 0, 1]), port, path)
}

/// True when this host has an IPv6 loopback to test `[::1]` publishing against.
fn has_ipv6_loopback() -> bool {
    TcpListener::bind("[::1]:0").is_ok()
}

fn http_get_at(ip: std::net::IpAddr, port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&(ip, port).into(), Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    if b.starts_with("HTTP/") {
        Some(b)
    } else {
        None
    }
}

fn wait_http(port: u16, path: &str, max: Duration) -> Option<String> {
    let t0 = Instant::now();
    while t0.elapsed() < max {
        if let Some(b) = http_get(port, path) {
            return Some(b);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Every live process whose namespace link `/proc/PID/ns/<ns>` equals `target`, as
/// (pid, start time). Namespace inode numbers are reused once freed, so "still there" checks
/// compare these identities, not the inode alone.
fn procs_in_ns(ns: &str, target: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if !n.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(l) = std::fs::read_link(format!("/proc/{n}/ns/{ns}"))
            && l.to_string_lossy() == target
        {
            out.push((n.clone(), start_time(&n)));
        }
    }
    out
}

fn start_time(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s[s.rfind(')')? + 2..].to_string();
            rest.split_whitespace().nth(19).map(str::to_string)
        })
        .unwrap_or_default()
}

/// Which of `before` still live (same PID, same start time).
fn survivors(before: &[(String, String)]) -> Vec<String> {
    before
        .iter()
        .filter(|(p, st)| !st.is_empty() && start_time(p) == *st)
        .map(|(p, _)| p.clone())
        .collect()
}

fn mounts_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if !n.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(m) = std::fs::read_to_string(format!("/proc/{n}/mountinfo")) {
            for l in m.lines().filter(|l| l.contains(needle)) {
                out.push(format!("{n}: {l}"));
            }
        }
    }
    out
}

/// The guest PID 1 (host view) of a running simulator machine: the supervisor's only child
/// that is not slirp4netns.
fn sim_guest_init(smol: &Smol, name: &str) -> i32 {
    let sup = smol
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == name)
        .unwrap()["pid"]
        .as_i64()
        .unwrap();
    let kids = std::fs::read_to_string(format!("/proc/{sup}/task/{sup}/children")).unwrap();
    kids.split_whitespace()
        .map(|k| k.parse::<i32>().unwrap())
        .find(|k| {
            std::fs::read_to_string(format!("/proc/{k}/comm"))
                .map(|c| c.trim() != "slirp4netns")
                .unwrap_or(false)
        })
        .unwrap()
}

/// `machine ls --json` keys of smolvm v1.0.4 (`machine_status_json`, tag v1.0.4 at 2bb0c07c).
const S104_KEYS: [&str; 25] = [
    "cmd",
    "cpus",
    "created_at",
    "entrypoint",
    "ephemeral",
    "gpu",
    "gpu_vram_mib",
    "health_cmd",
    "health_interval_secs",
    "health_retries",
    "health_startup_grace_secs",
    "health_timeout_secs",
    "image",
    "memory_mib",
    "mounts",
    "name",
    "network",
    "overlay_gb",
    "pid",
    "ports",
    "restart_count",
    "restart_max_retries",
    "restart_policy",
    "state",
    "storage_gb",
];
/// Keys 1.9 adds (smolvm main at a5df5001, whose version is 1.9.2; docs/smolvm.md).
const SHEAD_EXTRA: [&str; 6] = [
    "cuda",
    "cuda_fork_pool_size",
    "cuda_vram_limit_mib",
    "forkable",
    "forkpoint_held",
    "labels",
];

/// Keys ~1.33 adds (`machine_status_json`, `src/cli/vm_common.rs` at smolvm 5240fda5).
const CURRENT_EXTRA: [&str; 7] = [
    "block_io",
    "branchable",
    "branchpoint_held",
    "cuda_branch_pool_size",
    "detached",
    "disks",
    "parent_machine",
];

/// Keys in the order they appear in pretty JSON text of one object.
fn key_order(obj_text: &str) -> Vec<String> {
    obj_text
        .lines()
        .filter(|l| l.starts_with("    \""))
        .map(|l| {
            l.trim()
                .trim_start_matches('"')
                .split('"')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Surface: version, usage errors, outputs of record-only verbs
// ---------------------------------------------------------------------------------------------

#[test]
fn version() {
    let s = Smol::new();
    let o = s.ok(&["--version"]);
    if is_sim() {
        // The default is the newest release modelled: what a user installs today.
        assert_eq!(o.stdout, "smolvm 1.33.0\n");
        for v in ["1.0.4", "1.9.2", "1.9.3", "1.17.0", "1.33.0"] {
            let o = s.run_env(&[("SMOLVM_SIM_VERSION", v)], &["--version"]);
            assert_eq!(o.stdout, format!("smolvm {v}\n"));
        }
    } else {
        assert!(o.stdout.starts_with("smolvm "), "{o:?}");
    }
}

#[test]
fn usage_errors_exit_2_like_clap() {
    let s = Smol::new();
    let o = s.run(&["machine", "ls", "--bogus"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr
            .starts_with("error: unexpected argument '--bogus' found"),
        "{o:?}"
    );
    // -n is not accepted on exec.
    let o = s.run(&["machine", "exec", "-n", "x", "--", "true"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr
            .starts_with("error: unexpected argument '-n' found"),
        "{o:?}"
    );
    // create's workload needs `--`.
    let o = s.run(&["machine", "create", "--name", "x", "sleep", "1"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr
            .starts_with("error: unexpected argument 'sleep' found"),
        "{o:?}"
    );
    let o = s.run(&["machine", "frobnicate"]);
    assert_eq!(o.code, 2, "{o:?}");
    let o = s.run(&["machine", "create", "--name", "x", "-p", "0:80"]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(
        o.stderr
            .contains("host port 0 is not valid for VM port forwarding"),
        "{o:?}"
    );
    // -n works on the other verbs (here: a clean not-found, not a usage error).
    for verb in ["start", "stop", "status", "data-dir"] {
        let o = s.run(&["machine", verb, "-n", "nope-missing"]);
        assert_eq!(o.code, 1, "{verb}: {o:?}");
    }
}

#[test]
fn empty_listing() {
    let s = Smol::new();
    if !is_sim() && s.ok(&["machine", "ls", "--json"]).stdout != "[]\n" {
        skipped(&test_name!(), "this host already has machines");
        return;
    }
    assert_eq!(s.ok(&["machine", "ls", "--json"]).stdout, "[]\n");
    assert_eq!(s.ok(&["machine", "ls"]).stdout, "No machines found\n");
    assert_eq!(s.ok(&["vm", "list", "--json"]).stdout, "[]\n");
}

#[test]
fn not_found_errors() {
    let s = Smol::new();
    let n = "ct-missing-machine";
    for args in [
        vec!["machine", "start", "--name", n],
        vec!["machine", "stop", "--name", n],
        vec!["machine", "delete", "--name", n, "-f"],
        vec!["machine", "rm", "--name", n, "-f"],
        vec!["machine", "data-dir", "--name", n],
        vec!["machine", "status", "--name", n],
        vec!["machine", "exec", "--name", n, "--", "true"],
        vec!["machine", "cp", "/etc/hostname", &format!("{n}:/tmp/x")],
    ] {
        let o = s.run(&args);
        assert_eq!(o.code, 1, "{args:?}: {o:?}");
        assert_eq!(o.stderr, format!("Error: vm not found: {n}\n"), "{args:?}");
        assert_eq!(o.stdout, "", "{args:?}");
    }
    let o = s.run(&["machine", "status", "--name", n, "--json"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        format!("Error: config operation failed: machine status: machine '{n}' not found\n")
    );
    let o = s.run(&["machine", "update", "--name", n, "--net"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        format!("Error: config operation failed: update: machine '{n}' not found\n")
    );
}

#[test]
fn create_outputs_and_errors() {
    let s = Smol::new();
    let n = s.name("create");
    let o = s.create(
        &n,
        &[
            "--image",
            &image(),
            "-p",
            &format!("{}:80", free_port()),
            "--net",
        ],
    );
    assert_eq!(
        o.stdout,
        format!(
            "Created machine: {n}\n  CPUs: 4, Memory: 8192 MiB\n  Ports: 1\n\nUse 'smolvm machine start --name {n}' to start the machine\nThen use 'smolvm machine exec --name {n} -- <command>' to run commands\n"
        )
    );
    let o = s.run(&["machine", "create", "--name", &n]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        format!(
            "Error: config operation failed: create machine: machine '{n}' already exists or is being created\n"
        )
    );
    let o = s.run(&["machine", "create", "--name", "-bad"]);
    assert_eq!(o.code, 2, "a leading dash is a flag to clap: {o:?}");
    let o = s.run(&["machine", "create", "--name", "bad--name"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        "Error: config operation failed: create machine: machine name cannot contain consecutive hyphens\n"
    );
    let o = s.run(&["machine", "create", "--name", "bad.name"]);
    assert_eq!(
        o.stderr,
        "Error: config operation failed: create machine: machine name contains invalid character: '.'\n"
    );

    // A record only: state created, status text, data-dir.
    assert_eq!(s.state(&n).as_deref(), Some("created"));
    assert_eq!(
        s.ok(&["machine", "status", "--name", &n]).stdout,
        format!("Machine '{n}': created\n")
    );
    let dd = s.ok(&["machine", "data-dir", "--name", &n]).stdout;
    let last = Path::new(dd.trim())
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(last.len(), 16, "{dd}");
    assert!(last.chars().all(|c| c.is_ascii_hexdigit()));
    if is_sim() {
        assert!(
            dd.starts_with(&s.home().join("vms").to_string_lossy().into_owned()),
            "{dd}"
        );
    }
    // Stop on a machine that never ran: idempotent, exit 0.
    assert_eq!(
        s.ok(&["machine", "stop", "--name", &n]).stdout,
        format!("Machine '{n}' is not running (state: created)\n")
    );
    // exec never auto-starts.
    let o = s.exec(&n, &["true"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        format!(
            "Error: agent operation failed: connect: machine '{n}' is not running. Use 'smolvm machine start --name {n}' first.\n"
        )
    );
    assert_eq!(
        s.state(&n).as_deref(),
        Some("created"),
        "exec must not start the machine"
    );
    // update only when stopped; output lines.
    let o = s.ok(&["machine", "update", "--name", &n, "--net"]);
    assert_eq!(
        o.stdout,
        format!(
            "Updated machine '{n}':\n  network: enabled\n\nStart with: smolvm machine start --name {n}\n"
        )
    );
    assert_eq!(
        s.ok(&["machine", "update", "--name", &n]).stdout,
        "No changes specified.\n"
    );
}

/// What `machine create` refuses on every release (seen on a real 1.9.2, read in 1.0.4's
/// and 1.9.2's `src/data/resources.rs` and `src/network/launch.rs`): no record is written.
#[test]
fn create_refuses_impossible_resources_and_tsi_ports() {
    let versions: &[&str] = if is_sim() {
        &["1.0.4", "1.9.2", "1.17.0", "1.33.0"]
    } else {
        &[""]
    };
    for v in versions {
        let s = Smol::new().with_env("SMOLVM_SIM_VERSION", v);
        let n = s.name("refused");
        let port = format!("{}:80", free_port());
        for (extra, err) in [
            (
                vec!["--cpus", "0"],
                "validate resources: CPU count must be at least 1",
            ),
            (
                vec!["--mem", "32"],
                "validate resources: memory must be at least 64 MiB (got 32 MiB)",
            ),
            (
                vec!["--net", "--net-backend", "tsi", "-p", &port],
                "ports: published ports require the virtio-net backend (TSI is outbound-only); \
                 remove --net-backend tsi or set it to virtio-net",
            ),
            (
                vec!["--net-backend", "virtio-net"],
                "--net-backend: --net-backend virtio-net requires --net",
            ),
        ] {
            let mut a = vec!["machine", "create", "--name", &n];
            a.extend_from_slice(&extra);
            let o = s.run(&a);
            assert_eq!(
                (o.code, o.stderr.as_str()),
                (
                    1,
                    format!("Error: config operation failed: {err}\n").as_str()
                ),
                "{v} {extra:?}: {o:?}"
            );
            assert_eq!(s.state(&n), None, "{v} {extra:?}: nothing recorded");
        }
    }
}

/// A registry image on a machine without network: smolvm 1.7.3 (PR #807) through the 1.17
/// line refuses it at create, because the guest pulls the image and could not; 1.0.4 accepts
/// it (and fails at start); ~1.33 fetches it on the host and accepts it (`src/config.rs` at
/// 090d4512: `validate_image_fetchable` is a no-op). A local archive path is never refused.
#[test]
fn registry_image_without_network_by_version() {
    let refusal = |img: &str| {
        format!(
            "Error: config operation failed: create machine: image '{img}' must be pulled from a \
             registry, but this machine has no network, so the pull can never succeed. Add --net \
             (or publish a port with -p, or set an egress policy with --allow-cidr/--allow-host). \
             To keep the machine network-isolated, supply the image locally instead: \
             `docker save {img} | smolvm machine create --image - ...`\n"
        )
    };
    let cases: Vec<(&str, bool)> = if is_sim() {
        vec![
            ("1.0.4", false),
            ("1.9.2", true),
            ("1.9.3", true),
            ("1.17.0", true),
            ("1.33.0", false),
        ]
    } else {
        let v = binary_version();
        if !((1, 7, 3)..(1, 18, 0)).contains(&v) {
            // Read: refused from 1.7.3, fetched on the host by ~1.33; the release in between
            // that changed it was not found, so only the read ones are asserted.
            skipped(
                &test_name!(),
                &format!("smolvm {v:?}: the no-network pull rule was read for 1.7.3-1.17.x only"),
            );
            return;
        }
        vec![("", true)]
    };
    let img = image();
    for (v, refused) in cases {
        let s = Smol::new().with_env("SMOLVM_SIM_VERSION", v);
        let n = s.name("offline");
        let o = s.run(&["machine", "create", "--name", &n, "--image", &img]);
        if refused {
            assert_eq!((o.code, o.stderr.clone()), (1, refusal(&img)), "{v}: {o:?}");
            assert_eq!(s.state(&n), None, "{v}: nothing recorded");
            // Any network intent lifts it: --net, a published port, an egress policy.
            for extra in [
                vec!["--net"],
                vec!["-p", &format!("{}:80", free_port())],
                vec!["--allow-cidr", "10.0.0.0/8"],
            ] {
                let m = s.name("online");
                let mut a = vec!["machine", "create", "--name", &m, "--image", &img];
                a.extend_from_slice(&extra);
                let o = s.run(&a);
                assert_eq!(o.code, 0, "{v} {extra:?}: {o:?}");
            }
        } else {
            assert_eq!(o.code, 0, "{v}: {o:?}");
            assert_eq!(s.state(&n).as_deref(), Some("created"), "{v}");
        }
    }
}

/// ~1.33's listing: the newer keys (`machine_status_json` at smolvm 5240fda5), name order
/// (a BTreeMap from `src/config.rs` at 090d4512), labels as given at create (PR #899), and
/// `--label`'s own refusals (`smolvm::util::parse_labels`).
#[test]
fn current_listing_keys_order_and_labels() {
    if !is_sim() && binary_version() < (1, 18, 0) {
        skipped(
            &test_name!(),
            "the ~1.33 listing needs smolvm 1.18 or newer",
        );
        return;
    }
    let s = Smol::new();
    let names: Vec<String> = (0..3).map(|i| s.name(&format!("cur{i}"))).collect();
    for (i, n) in names.iter().enumerate().rev() {
        let idx = format!("idx={i}");
        s.create(
            n,
            &[
                "--label",
                "hermes-box=alpha",
                "--label",
                &idx,
                "--label",
                "eq=a=b",
            ],
        );
    }
    for _ in 0..5 {
        let o = s.ok(&["machine", "ls", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        let listed: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["name"].as_str())
            .filter(|n| names.iter().any(|x| x == n))
            .collect();
        assert_eq!(
            listed,
            names.iter().map(String::as_str).collect::<Vec<_>>(),
            "name order"
        );
        let first_obj = &o.stdout[..o.stdout.find("\n  }").unwrap()];
        let keys: BTreeSet<String> = key_order(first_obj).into_iter().collect();
        let want: BTreeSet<String> = S104_KEYS
            .iter()
            .chain(SHEAD_EXTRA.iter())
            .chain(CURRENT_EXTRA.iter())
            .map(|k| k.to_string())
            .collect();
        if is_sim() {
            assert_eq!(keys, want);
        } else {
            assert!(keys.is_superset(&want), "{keys:?}");
        }
    }
    let m = s
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == names[1].as_str())
        .unwrap();
    assert_eq!(
        m["labels"],
        serde_json::json!({"eq": "a=b", "hermes-box": "alpha", "idx": "1"})
    );
    let bad = s.name("badlabel");
    for (label, err) in [
        ("novalue", "--label: expected KEY=VALUE, got 'novalue'"),
        ("=v", "--label: label key cannot be empty (in '=v')"),
    ] {
        let o = s.run(&["machine", "create", "--name", &bad, "--label", label]);
        assert_eq!(
            (o.code, o.stderr.as_str()),
            (
                1,
                format!("Error: config operation failed: {err}\n").as_str()
            ),
        );
    }
    assert_eq!(s.state(&bad), None);
}

/// A paused machine (1.18+, docs/pause-resume.md): listed as `paused`; plain `start` and
/// `stop` refuse it with smolvm's texts; `resume` brings it back; `delete -f` removes it.
#[test]
fn paused_machine_refuses_start_and_stop() {
    if !is_sim() && binary_version() < (1, 18, 0) {
        skipped(&test_name!(), "machine pause needs smolvm 1.18 or newer");
        return;
    }
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("paused");
    s.create(&n, &["--", "sleep", "infinity"]);
    s.start(&n);
    s.ok(&["machine", "pause", "--name", &n]);
    assert_eq!(s.state(&n).as_deref(), Some("paused"));
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(
        (o.code, o.stderr.lines().last().unwrap_or("")),
        (
            1,
            "Error: agent operation failed: start: machine has saved execution; use resume"
        ),
        "{o:?}"
    );
    let o = s.run(&["machine", "stop", "--name", &n]);
    assert_eq!(
        (o.code, o.stderr.lines().last().unwrap_or("")),
        (
            1,
            "Error: agent operation failed: stop: machine has saved execution; use resume or delete"
        ),
        "{o:?}"
    );
    assert_eq!(
        s.state(&n).as_deref(),
        Some("paused"),
        "refusals change nothing"
    );
    assert_ne!(
        s.exec(&n, &["true"]).code,
        0,
        "no exec into a paused machine"
    );
    s.ok(&["machine", "resume", "--name", &n]);
    assert_eq!(s.state(&n).as_deref(), Some("running"));
    s.ok(&["machine", "pause", "--name", &n]);
    s.ok(&["machine", "delete", "--name", &n, "--force"]);
    assert_eq!(s.state(&n), None);
    if is_sim() {
        // Older personalities have no such verb: clap's usage error.
        let o = s.run_env(
            &[("SMOLVM_SIM_VERSION", "1.17.0")],
            &["machine", "pause", "--name", &n],
        );
        assert_eq!(o.code, 2, "{o:?}");
    }
}

#[test]
fn ls_json_shape_alphabetical_and_shuffled() {
    // 1.0.4's key set; the 1.33 listing has its own test.
    let s = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let names: Vec<String> = (0..4).map(|i| s.name(&format!("ls{i}"))).collect();
    for n in &names {
        s.create(n, &["--image", &image(), "--net"]);
    }
    let mut orders = BTreeSet::new();
    for _ in 0..10 {
        let o = s.ok(&["machine", "ls", "--json"]);
        assert!(
            o.stdout.starts_with("[\n  {\n    \""),
            "pretty, 2-space indent: {}",
            o.stdout
        );
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        let arr = v.as_array().unwrap();
        let ours: Vec<String> = arr
            .iter()
            .map(|m| m["name"].as_str().unwrap().to_string())
            .filter(|n| names.contains(n))
            .collect();
        assert_eq!(ours.len(), names.len());
        orders.insert(ours.join(","));
        // Keys alphabetical in the text, and (for the simulator) exactly the S104 set.
        let first_obj = &o.stdout[..o.stdout.find("\n  }").unwrap()];
        let keys = key_order(first_obj);
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "keys must be alphabetical");
        if is_sim() {
            assert_eq!(
                keys,
                S104_KEYS.iter().map(|k| k.to_string()).collect::<Vec<_>>()
            );
        } else {
            for k in S104_KEYS {
                assert!(keys.iter().any(|x| x == k), "missing key {k}");
            }
        }
        for m in arr
            .iter()
            .filter(|m| names.iter().any(|n| m["name"] == n.as_str()))
        {
            assert_eq!(m["state"], "created");
            assert_eq!(m["pid"], serde_json::Value::Null);
            assert_eq!(m["cpus"], 4);
            assert_eq!(m["memory_mib"], 8192);
            assert_eq!(m["ports"], 0);
            assert_eq!(m["image"], image().as_str());
        }
    }
    assert!(
        orders.len() > 1,
        "ls --json order must vary between calls: {orders:?}"
    );
    let status = s
        .ok(&["machine", "status", "--name", &names[0], "--json"])
        .stdout;
    assert!(status.starts_with("{\n  \"cmd\": "), "{status}");
}

#[test]
fn delete_without_force_on_non_tty_cancels_or_refuses() {
    let s = Smol::new();
    let n = s.name("del");
    s.create(&n, &[]);
    let o = s.run(&["machine", "delete", "--name", &n]);
    if binary_version() >= (1, 17, 0) {
        // PR #1333: from 1.17 a non-terminal stdin is refused instead of read.
        assert_eq!(o.code, 1, "{o:?}");
        assert!(
            o.stderr.starts_with(&format!("Error: agent operation failed: delete: machine '{n}' needs confirmation but stdin is not a terminal; pass --force")),
            "{o:?}"
        );
    } else {
        assert_eq!(o.code, 0, "{o:?}");
        assert_eq!(o.stderr, format!("Delete machine '{n}'? [y/N] "));
        assert_eq!(o.stdout, "Cancelled\n");
    }
    assert!(s.state(&n).is_some(), "nothing deleted");
    let o = s.ok(&["machine", "delete", "--name", &n, "--force"]);
    assert_eq!(
        o.stdout,
        format!("Deleted machine: {n}\n"),
        "never started: no data dir to clean"
    );
    assert!(s.state(&n).is_none());
    let o = s.run(&["machine", "delete", "--name", &n, "-f"]);
    assert_eq!(
        (o.code, o.stderr.as_str()),
        (1, format!("Error: vm not found: {n}\n").as_str()),
        "not idempotent"
    );
}

#[test]
fn concurrent_creates_have_one_winner() {
    let s = Smol::new();
    let n = s.name("race");
    let kids: Vec<_> = (0..8)
        .map(|_| {
            s.cmd(&["machine", "create", "--name", &n])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Out> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap().into())
        .collect();
    assert_eq!(outs.iter().filter(|o| o.code == 0).count(), 1, "{outs:?}");
    // smolvm reserves the name in its database before it commits the record; a loser that
    // got past the reservation fails at the commit with the second text.
    let lost = [
        format!(
            "Error: config operation failed: create machine: machine '{n}' already exists or is being created\n"
        ),
        format!(
            "Error: config operation failed: create machine: machine '{n}' already exists or is no longer reserved\n"
        ),
    ];
    for o in outs.iter().filter(|o| o.code != 0) {
        assert_eq!(o.code, 1);
        if is_sim() {
            assert_eq!(o.stderr, lost[0]);
        } else {
            assert!(lost.contains(&o.stderr), "{o:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Guests: lifecycle, ports, exec, cp, isolation, cleanup
// ---------------------------------------------------------------------------------------------

#[test]
fn lifecycle_published_port_and_timings() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("http");
    let port = free_port();
    s.create(
        &n,
        &["--image", &py_image(), "--net", "-p", &format!("{port}:{port}"), "--", "/bin/sh", "-c", &format!(
            "echo hello-from-guest > /tmp/index.html && cd /tmp && exec python3 -m http.server {port}"
        )],
    );
    let t0 = Instant::now();
    let o = s.start(&n);
    let start_time = t0.elapsed();
    let pid: i64 = s
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == n.as_str())
        .unwrap()["pid"]
        .as_i64()
        .unwrap();
    assert_eq!(o.stdout, format!("Machine '{n}' running (PID: {pid})\n"));
    let starting = format!("Starting machine '{n}' and 1 port mapping(s)...\n");
    if is_sim() {
        assert_eq!(o.stderr, starting);
    } else {
        // A real first boot also pulls the image (progress on stderr).
        assert!(o.stderr.starts_with(&starting), "{o:?}");
    }
    assert_eq!(s.state(&n).as_deref(), Some("running"));
    assert_eq!(
        s.ok(&["machine", "status", "--name", &n]).stdout,
        format!("Machine '{n}': running (PID: {pid})\n")
    );
    // Idempotent start.
    assert_eq!(
        s.start(&n).stdout,
        format!("Machine '{n}' already running (PID: {pid})\n")
    );

    let body =
        wait_http(port, "/index.html", Duration::from_secs(20)).expect("published port answers");
    assert!(body.contains("hello-from-guest"), "{body}");
    let ready = t0.elapsed();
    let v6 = std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
    if has_ipv6_loopback() {
        let b6 =
            http_get_at(v6, port, "/index.html").expect("[::1] is published too (best effort)");
        assert!(b6.contains("hello-from-guest"));
    }

    // exec round trip, and exec sees the workload's processes.
    let t1 = Instant::now();
    for _ in 0..5 {
        assert_eq!(s.exec(&n, &["true"]).code, 0);
    }
    let rtt = t1.elapsed() / 5;
    let o = s.sh(&n, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '");
    assert!(
        o.stdout.contains("http.server"),
        "exec must share the workload's PID namespace: {o:?}"
    );
    eprintln!(
        "MEASURED start: {start_time:?} (service answering after {ready:?}); exec round trip: {rtt:?}"
    );

    let o = s.ok(&["machine", "stop", "--name", &n]);
    assert_eq!(
        o.stdout,
        format!("Stopping machine '{n}'...\nStopped machine: {n}\n")
    );
    assert!(
        http_get(port, "/index.html").is_none(),
        "port must stop answering after stop"
    );
    assert_eq!(
        s.ok(&["machine", "stop", "--name", &n]).stdout,
        format!("Machine '{n}' is not running (state: stopped)\n")
    );
    assert_eq!(s.state(&n).as_deref(), Some("stopped"));
    assert_eq!(s.exec(&n, &["true"]).code, 1);

    // Start again: files persist (the guest overlay survives stop/start), port answers again.
    s.start(&n);
    let body =
        wait_http(port, "/index.html", Duration::from_secs(20)).expect("answers after restart");
    assert!(body.contains("hello-from-guest"));
}

#[test]
fn loopback_only_service_is_not_published_and_guests_do_not_collide() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let port = free_port();
    let a = s.name("lo-a");
    let b = s.name("lo-b");
    for (n, extra) in [
        (&a, vec!["-p".to_string(), format!("{port}:4788")]),
        (&b, vec![]),
    ] {
        let mut args = vec!["--image".to_string(), py_image(), "--net".into()];
        args.extend(extra);
        args.extend([
            "--".into(),
            "/bin/sh".into(),
            "-c".into(),
            format!(
                "echo {n} > /tmp/id && cd /tmp && exec python3 -m http.server 4788 --bind 127.0.0.1"
            ),
        ]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        s.create(n, &refs);
        s.start(n);
    }
    let fetch = "import urllib.request,time\nfor i in range(100):\n  try:\n    print(urllib.request.urlopen('http://127.0.0.1:4788/id').read().decode().strip()); break\n  except Exception: time.sleep(0.1)";
    assert_eq!(s.exec(&a, &["python3", "-c", fetch]).stdout.trim(), a);
    assert_eq!(s.exec(&b, &["python3", "-c", fetch]).stdout.trim(), b);
    // Published port relays to the guest's non-loopback address: nothing listens there.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        http_get(port, "/id").is_none(),
        "a 127.0.0.1-only guest service must not be reachable"
    );
}

#[test]
fn exec_semantics() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("exec");
    s.create(
        &n,
        &[
            "--image",
            &image(),
            "--net",
            "-e",
            "FROM_RECORD=rec",
            "-e",
            "OVERRIDE=rec",
            "--",
            "sleep",
            "infinity",
        ],
    );
    s.start(&n);
    let o = s.run(&["machine", "update", "--name", &n, "--net"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(
        o.stderr,
        "Error: invalid vm state: expected stopped, got Running\n"
    );
    let table = s.ok(&["machine", "ls"]).stdout;
    let mut lines = table.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("NAME                 STATE         CPUS     MEMORY")
    );
    assert_eq!(lines.next().unwrap(), "-".repeat(88));
    assert!(
        table.contains(&format!("{n:<20} running")) || n.len() > 18,
        "{table}"
    );
    let o = s.sh(&n, "echo out; echo err >&2; exit 7");
    assert_eq!(
        (o.code, o.stdout.as_str(), o.stderr.as_str()),
        (7, "out\n", "err\n")
    );
    let o = s.run(&[
        "machine",
        "exec",
        "--name",
        &n,
        "-e",
        "OVERRIDE=cli",
        "--",
        "/bin/sh",
        "-c",
        "echo $FROM_RECORD $OVERRIDE; pwd; id -u",
    ]);
    assert_eq!(o.stdout, "rec cli\n/\n0\n", "{o:?}");
    let o = s.run(&["machine", "exec", "--name", &n, "-w", "/tmp", "--", "pwd"]);
    assert_eq!(o.stdout, "/tmp\n");
    // --timeout → 124, promptly.
    let t0 = Instant::now();
    let o = s.run(&[
        "machine",
        "exec",
        "--name",
        &n,
        "--timeout",
        "1s",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(o.code, 124, "{o:?}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    // stdin is not forwarded by default; -i forwards it.
    let mut c = s.cmd(&["machine", "exec", "--name", &n, "--", "cat"]);
    let o: Out = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|mut ch| {
            ch.stdin.take().unwrap().write_all(b"ignored\n").ok();
            ch.wait_with_output().unwrap()
        })
        .unwrap()
        .into();
    assert_eq!(o.stdout, "", "{o:?}");
    let mut c = s.cmd(&["machine", "exec", "-i", "--name", &n, "--", "cat"]);
    let o: Out = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(|mut ch| {
            ch.stdin.take().unwrap().write_all(b"forwarded\n").ok();
            ch.wait_with_output().unwrap()
        })
        .unwrap()
        .into();
    assert_eq!(o.stdout, "forwarded\n", "{o:?}");
    let o = s.run(&[
        "machine",
        "exec",
        "--stream",
        "--name",
        &n,
        "--",
        "/bin/sh",
        "-c",
        "echo a; echo b >&2",
    ]);
    assert_eq!(
        (o.code, o.stdout.as_str(), o.stderr.as_str()),
        (0, "a\n", "b\n")
    );
    // -t allocates a terminal.
    let o = s.run(&[
        "machine",
        "exec",
        "-t",
        "--name",
        &n,
        "--",
        "/bin/sh",
        "-c",
        "test -t 0 && test -t 1 && echo tty",
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("tty"), "{o:?}");
    // A missing command is the guest's failure, not smolvm's.
    let o = s.exec(&n, &["/no/such/binary"]);
    assert_ne!(o.code, 0);
    assert!(!o.stderr.starts_with("Error: "), "{o:?}");
    // The machine's name from 1.9.0 (a DNS label), `container` before.
    let host = if binary_version() >= (1, 9, 0) {
        n.as_str()
    } else {
        "container"
    };
    assert_eq!(s.exec(&n, &["hostname"]).stdout, format!("{host}\n"));
}

#[test]
fn cp_rules() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("cp");
    s.create(
        &n,
        &["--image", &image(), "--net", "--", "sleep", "infinity"],
    );
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let src_s = src.to_str().unwrap();

    // Requires a running machine.
    let o = s.run(&["machine", "cp", src_s, &format!("{n}:/tmp/x")]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("is not running"), "{o:?}");
    s.start(&n);

    let o = s.run(&["machine", "cp", src_s, "/tmp/nowhere"]);
    assert_eq!(o.code, 1);
    assert_eq!(
        o.stderr,
        "Error: config operation failed: cp: one of SRC or DST must use machine:path syntax (e.g., myvm:/workspace/file)\n"
    );
    let o = s.run(&[
        "machine",
        "cp",
        src_s,
        &format!("{n}:/opt/new/deep/file.bin"),
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(o.stdout, "", "progress goes to stderr only");
    let o = s.sh(&n, "stat -c '%a %u %g %s' /opt/new/deep/file.bin");
    assert_eq!(o.stdout, format!("644 0 0 {}\n", data.len()));
    assert_eq!(
        s.sh(&n, "stat -c %a /opt/new /opt/new/deep").stdout,
        "755\n755\n"
    );

    // The guest's agent makes the parents and runs commands with its own umask (022), not
    // the caller's: a `umask 077` shell (box's remote copy scripts) changes nothing inside.
    let mut c = s.cmd(&[
        "machine",
        "cp",
        src_s,
        &format!("{n}:/opt/strict/deep/file.bin"),
    ]);
    unsafe {
        use std::os::unix::process::CommandExt;
        c.pre_exec(|| {
            libc::umask(0o077);
            Ok(())
        });
    }
    assert!(c.status().unwrap().success());
    assert_eq!(
        s.sh(&n, "stat -c %a /opt/strict /opt/strict/deep; umask")
            .stdout,
        "755\n755\n0022\n"
    );
    assert!(
        !Path::new("/opt/new/deep/file.bin").exists(),
        "upload must not touch the host"
    );

    let back = tmp.path().join("back.bin");
    let o = s.run(&[
        "machine",
        "cp",
        &format!("{n}:/opt/new/deep/file.bin"),
        back.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(o.stdout, "");
    assert_eq!(std::fs::read(&back).unwrap(), data);

    // A failed download deletes the local destination.
    std::fs::write(&back, b"old").unwrap();
    let o = s.run(&[
        "machine",
        "cp",
        &format!("{n}:/no/such/file"),
        back.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.starts_with("Error: "), "{o:?}");
    assert!(!back.exists(), "local dst must be removed on error");

    // Directories are refused both ways.
    let o = s.run(&[
        "machine",
        "cp",
        tmp.path().to_str().unwrap(),
        &format!("{n}:/tmp/dir"),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    let o = s.run(&[
        "machine",
        "cp",
        &format!("{n}:/etc"),
        tmp.path().join("etc").to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1, "{o:?}");

    // Files over 4 GiB are refused (sparse, nothing is read).
    let big = tmp.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 * 1024 * 1024 * 1024 + 1)
        .unwrap();
    let o = s.run(&[
        "machine",
        "cp",
        big.to_str().unwrap(),
        &format!("{n}:/tmp/big"),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.starts_with("Error: "));

    // The first colon decides: SRC with a colon is the machine side.
    let o = s.run(&[
        "machine",
        "cp",
        &format!("{n}:/opt/new/deep/file.bin"),
        &format!("{n}:/tmp/x"),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
}

#[test]
fn guest_writes_leave_host_and_other_guests_unchanged() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let a = s.name("iso-a");
    let b = s.name("iso-b");
    for n in [&a, &b] {
        s.create(
            n,
            &["--image", &image(), "--net", "--", "sleep", "infinity"],
        );
        s.start(n);
    }
    let marker = format!("ct-marker-{}", std::process::id());
    let o = s.sh(
        &a,
        &format!(
            "printf '#!/bin/sh\\necho {marker}\\n' > /usr/local/bin/{marker} && chmod 755 /usr/local/bin/{marker} && echo {marker} >> /etc/{marker}.conf && mkdir -p /data/x && echo y > /data/x/y && {marker}"
        ),
    );
    assert_eq!(o.stdout.trim(), marker, "{o:?}");
    assert!(
        !Path::new(&format!("/usr/local/bin/{marker}")).exists(),
        "host /usr/local/bin changed"
    );
    assert!(
        !Path::new(&format!("/etc/{marker}.conf")).exists(),
        "host /etc changed"
    );
    let o = s.sh(
        &b,
        &format!("ls /usr/local/bin/{marker} /etc/{marker}.conf /data/x 2>&1; true"),
    );
    assert!(
        o.stdout.matches("No such file").count() == 3,
        "other machine changed: {o:?}"
    );
    // Persistence across stop/start.
    s.ok(&["machine", "stop", "--name", &a]);
    s.start(&a);
    assert_eq!(
        s.sh(&a, &format!("{marker}; cat /data/x/y")).stdout,
        format!("{marker}\ny\n")
    );
}

#[test]
fn delete_force_leaves_nothing_behind() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("gone");
    s.create(
        &n,
        &[
            "--net",
            "-p",
            &format!("{}:80", free_port()),
            "--",
            "sleep",
            "infinity",
        ],
    );
    s.start(&n);
    s.sh(&n, "sleep 1000 & sleep 1000 & true");
    let data = s
        .ok(&["machine", "data-dir", "--name", &n])
        .stdout
        .trim()
        .to_string();
    let init = sim_guest_init(&s, &n);
    let pidns = std::fs::read_link(format!("/proc/{init}/ns/pid"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let netns = std::fs::read_link(format!("/proc/{init}/ns/net"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mntns = std::fs::read_link(format!("/proc/{init}/ns/mnt"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let in_pid = procs_in_ns("pid", &pidns);
    let in_net = procs_in_ns("net", &netns);
    let in_mnt = procs_in_ns("mnt", &mntns);
    assert!(in_pid.len() >= 3, "{in_pid:?}");
    let o = s.ok(&["machine", "delete", "--name", &n, "-f"]);
    assert_eq!(
        o.stdout,
        format!(
            "Stopping machine '{n}'...\nCleaning up data directory for vm: {n}\nDeleted machine: {n}\n"
        )
    );
    assert!(
        survivors(&in_pid).is_empty(),
        "processes of the machine remain"
    );
    assert!(
        survivors(&in_net).is_empty(),
        "network namespace still in use"
    );
    assert!(
        survivors(&in_mnt).is_empty(),
        "mount namespace still in use"
    );
    if !concurrent_tests() {
        // Run alone (just contract), a freed namespace inode is not reused by another test.
        assert!(procs_in_ns("pid", &pidns).is_empty());
        assert!(procs_in_ns("net", &netns).is_empty());
        assert!(procs_in_ns("mnt", &mntns).is_empty());
    }
    assert!(
        mounts_mentioning(&data).is_empty(),
        "mounts remain: {:?}",
        mounts_mentioning(&data)
    );
    assert!(!Path::new(&data).exists(), "data dir removed");
    // The tree is removed behind the call (smolvm's delete unlinks a few image files at
    // once; the simulator renames its tree aside and an `rm -rf` frees it): within a
    // minute nothing refers to it and nothing of it is left.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let left = || {
        let refers = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("cmdline"))
                .map(|c| c.contains(&data))
                .unwrap_or(false)
        });
        let parent = Path::new(&data).parent().unwrap();
        let base = Path::new(&data)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let aside = std::fs::read_dir(parent).unwrap().flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{base}.deleting-"))
        });
        refers || aside
    };
    while left() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        !left(),
        "a process still refers to the data dir, or its tree is left"
    );
}

#[test]
#[ignore = "needs the network and minutes (apt-get install in a guest): run with --ignored"]
fn net_apt_install_cowsay_is_isolated() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let a = s.name("apt-a");
    let b = s.name("apt-b");
    for n in [&a, &b] {
        s.create(
            n,
            &["--image", &image(), "--net", "--", "sleep", "infinity"],
        );
        s.start(n);
    }
    let host_had = Path::new("/usr/games/cowsay").exists();
    let o = s.sh(&a, "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq cowsay >/dev/null && /usr/games/cowsay moo");
    assert_eq!(o.code, 0, "{o:?}");
    assert!(o.stdout.contains("moo"));
    assert_eq!(
        Path::new("/usr/games/cowsay").exists(),
        host_had,
        "host changed"
    );
    let o = s.sh(
        &b,
        "test -e /usr/games/cowsay && echo present || echo absent",
    );
    assert_eq!(o.stdout.trim(), if host_had { "present" } else { "absent" });
}

// ---------------------------------------------------------------------------------------------
// Simulator-only: personalities, fault injection, call log
// ---------------------------------------------------------------------------------------------

#[test]
fn personality_1_9_2_differences() {
    if sim_only!() {
        return;
    }
    let old = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let new = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.9.2");
    // create --label, exec -d and cp --mode exist only in 1.9.2.
    assert_eq!(
        old.run(&["machine", "create", "--name", "x", "--label", "a=b"])
            .code,
        2
    );
    let n = new.name("head");
    new.create(&n, &["--label", "team=core", "--", "sleep", "infinity"]);
    let m = new
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == n.as_str())
        .unwrap();
    let keys: BTreeSet<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = S104_KEYS
        .iter()
        .chain(SHEAD_EXTRA.iter())
        .copied()
        .collect();
    assert_eq!(keys, want);
    assert_eq!(m["labels"]["team"], "core");
    let stray = new.name("stray");
    let o = new.run(&[
        "machine", "create", "--name", &stray, "--", "sleep", "--mem", "1",
    ]);
    assert_eq!(
        o.stderr,
        "note: --mem came after `--`, so it was passed to the workload and did not configure the machine. Machine options go before `--`.\n"
    );
    let stray_old = old.name("stray");
    assert_eq!(
        old.run(&[
            "machine", "create", "--name", &stray_old, "--", "sleep", "--mem", "1"
        ])
        .stderr,
        ""
    );
    assert_eq!(
        old.run(&["machine", "exec", "--name", "x", "-d", "--", "true"])
            .code,
        2
    );
    assert_eq!(
        old.run(&["machine", "cp", "--mode", "0755", "a", "x:/b"])
            .code,
        2
    );
    if !guests_available!() {
        return;
    }
    new.start(&n);
    assert_eq!(new.exec(&n, &["hostname"]).stdout, format!("{n}\n"));
    let o = new.run(&["machine", "exec", "--name", &n, "-d", "--", "sleep", "300"]);
    assert_eq!(o.code, 0, "{o:?}");
    let gpid: i32 = o.stdout.trim().parse().unwrap();
    assert_eq!(
        new.sh(&n, &format!("cat /proc/{gpid}/comm")).stdout,
        "sleep\n",
        "detached process survives"
    );
    let f = new.home().join("tool");
    std::fs::write(&f, "#!/bin/sh\necho ok\n").unwrap();
    let o = new.run(&[
        "machine",
        "cp",
        "--mode",
        "0755",
        "--uid",
        "1000",
        f.to_str().unwrap(),
        &format!("{n}:/usr/local/bin/tool"),
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        new.sh(&n, "stat -c '%a %u' /usr/local/bin/tool; tool")
            .stdout,
        "755 1000\nok\n"
    );
}

#[test]
fn delete_when_data_dir_cannot_be_removed_differs_by_version() {
    if sim_only!() || !guests_available!() {
        return;
    }
    for (ver, record_kept) in [("1.0.4", false), ("1.9.2", true)] {
        let s = Smol::new().with_env("SMOLVM_SIM_VERSION", ver);
        let n = s.name("dd");
        s.create(&n, &["--", "sleep", "infinity"]);
        s.start(&n);
        let o = s.run_env(
            &[("SMOLVM_SIM_FAIL", "delete:datadir")],
            &["machine", "delete", "--name", &n, "-f"],
        );
        if record_kept {
            assert_eq!(o.code, 1, "{o:?}");
            assert!(
                o.stderr
                    .starts_with("Error: storage operation failed: delete machine data: "),
                "{o:?}"
            );
            assert!(
                o.stderr.ends_with(": Directory not empty (os error 39)\n"),
                "{o:?}"
            );
            assert!(s.state(&n).is_some());
        } else {
            assert_eq!(o.code, 0, "{o:?}");
            assert!(o.stdout.ends_with(&format!("Deleted machine: {n}\n")));
            assert!(o.stderr.contains("WARN"), "{o:?}");
            assert!(s.state(&n).is_none());
        }
    }
}

#[test]
fn faults_start_once_and_always_stop_always() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("f-start");
    s.create(&n, &["--", "sleep", "infinity"]);
    let once = [("SMOLVM_SIM_FAIL", "start:once")];
    let o = s.run_env(&once, &["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.starts_with("Error: agent operation failed: "),
        "{o:?}"
    );
    assert_ne!(s.state(&n).as_deref(), Some("running"));
    let o = s.run_env(&once, &["machine", "start", "--name", &n]);
    assert_eq!(o.code, 0, "second start succeeds: {o:?}");
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "stop:always")],
        &["machine", "stop", "--name", &n],
    );
    assert_eq!(o.code, 1);
    assert_eq!(s.state(&n).as_deref(), Some("running"));
    s.ok(&["machine", "stop", "--name", &n]);
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "start:always")],
        &["machine", "start", "--name", &n],
    );
    assert_eq!(o.code, 1);
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "start:always")],
        &["machine", "start", "--name", &n],
    );
    assert_eq!(o.code, 1);
}

#[test]
fn faults_create_after_and_delete_always() {
    if sim_only!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("f-create");
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "create:after")],
        &["machine", "create", "--name", &n],
    );
    assert_eq!(o.code, 1);
    assert!(
        o.stderr
            .starts_with("Error: config operation failed: create machine: "),
        "{o:?}"
    );
    assert_eq!(o.stdout, "");
    assert_eq!(
        s.state(&n).as_deref(),
        Some("created"),
        "the record exists anyway"
    );
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "delete:always")],
        &["machine", "delete", "--name", &n, "-f"],
    );
    assert_eq!(o.code, 1);
    assert!(o.stderr.starts_with("Error: "));
    assert!(s.state(&n).is_some());
}

#[test]
fn faults_exec_hang_matching_and_cp_truncate_and_state() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("f-exec");
    s.create(&n, &["--", "sleep", "infinity"]);
    s.start(&n);
    // Only calls whose argv contains the text hang.
    let fail = [("SMOLVM_SIM_FAIL", "exec:hang@hb quiesce")];
    let o = s.run_env(
        &fail,
        &[
            "machine", "exec", "--name", &n, "--", "echo", "hb", "status",
        ],
    );
    assert_eq!(o.code, 0);
    let mut c = s.cmd(&[
        "machine", "exec", "--name", &n, "--", "echo", "hb", "quiesce",
    ]);
    c.env("SMOLVM_SIM_FAIL", "exec:hang@hb quiesce")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(child.try_wait().unwrap().is_none(), "exec:hang must block");
    child.kill().unwrap();
    child.wait().unwrap();

    // cp:truncate: a silent corruption (exit 0, half the bytes).
    s.sh(&n, "head -c 100000 /dev/urandom > /tmp/blob");
    let dst = s.home().join("blob");
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "cp:truncate")],
        &[
            "machine",
            "cp",
            &format!("{n}:/tmp/blob"),
            dst.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(std::fs::metadata(&dst).unwrap().len(), 50000);

    // state:unreachable for a running machine.
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "state:unreachable")],
        &["machine", "ls", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v[0]["state"], "unreachable");
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "state:unreachable")],
        &["machine", "status", "--name", &n],
    );
    assert_eq!(o.stdout, format!("Machine '{n}': unreachable\n"));
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "state:unreachable")],
        &["machine", "exec", "--name", &n, "--", "true"],
    );
    assert_eq!(o.code, 1, "an unreachable agent cannot exec: {o:?}");
}

#[test]
fn call_log_records_argv_and_redacts_secrets() {
    if sim_only!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("log");
    s.run_env(
        &[
            ("SMOLVM_SIM_FAIL", "exec:hang@never-matches"),
            ("SMOLVM_SIM_VERSION", "1.0.4"),
        ],
        &[
            "machine",
            "create",
            "--name",
            &n,
            "-e",
            "GITHUB_TOKEN=ghp_supersecret",
            "-e",
            "MODE=dev",
            "--env=DB_PASSWORD=hunter2",
        ],
    );
    let calls = s.calls();
    let c = calls
        .iter()
        .find(|c| c["argv"][1] == "machine" && c["argv"][2] == "create")
        .unwrap();
    let argv: Vec<&str> = c["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        &argv[1..],
        [
            "machine",
            "create",
            "--name",
            n.as_str(),
            "-e",
            "GITHUB_TOKEN=<redacted>",
            "-e",
            "MODE=dev",
            "--env=DB_PASSWORD=<redacted>"
        ]
    );
    assert_eq!(c["env"]["SMOLVM_SIM_FAIL"], "exec:hang@never-matches");
    assert_eq!(c["env"]["SMOLVM_SIM_VERSION"], "1.0.4");
    let raw = std::fs::read_to_string(s.home().join("calls.jsonl")).unwrap();
    assert!(!raw.contains("supersecret") && !raw.contains("hunter2"));
}

#[test]
fn box_flow_workload_waits_for_uploaded_helper() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("boxflow");
    let launcher =
        "while [ ! -x /usr/local/bin/hb ]; do sleep 0.1; done; exec /usr/local/bin/hb workload";
    s.create(
        &n,
        &[
            "--image",
            &image(),
            "--net",
            "-e",
            "BOX_NAME=flow",
            "--",
            "/bin/sh",
            "-c",
            launcher,
        ],
    );
    s.start(&n);
    let tmp = tempfile::tempdir().unwrap();
    let hb = tmp.path().join("hb");
    std::fs::write(
        &hb,
        "#!/bin/sh\ncase \"$1\" in\n workload) echo \"$BOX_NAME\" > /data/workload-ran; exec sleep infinity;;\n status) cat /data/workload-ran;;\nesac\n",
    )
    .unwrap();
    let o = s.run(&[
        "machine",
        "cp",
        hb.to_str().unwrap(),
        &format!("{n}:/usr/local/bin/hb"),
    ]);
    assert_eq!(o.code, 0, "{o:?}");
    // Uploaded 0644: not yet executable, so the launcher keeps waiting.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s.sh(&n, "test -e /data/workload-ran && echo ran || echo waiting")
            .stdout,
        "waiting\n"
    );
    assert_eq!(s.exec(&n, &["chmod", "0755", "/usr/local/bin/hb"]).code, 0);
    let t0 = Instant::now();
    loop {
        let o = s.exec(&n, &["hb", "status"]);
        if o.code == 0 && o.stdout == "flow\n" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "workload never ran: {o:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // After stop/start the launcher finds hb at once.
    s.ok(&["machine", "stop", "--name", &n]);
    s.sh(&n, "true"); // not running: fails, ignored
    s.start(&n);
    let t0 = Instant::now();
    while !s
        .sh(&n, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        .stdout
        .contains("sleep infinity")
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "workload not restarted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn secret_references_resolve_at_start_and_exec() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("secret");
    s.create(
        &n,
        &[
            "--secret-env",
            "GUEST_TOKEN=CT_HOST_TOKEN",
            "--",
            "sleep",
            "infinity",
        ],
    );
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "an unset host variable fails the start: {o:?}");
    assert!(
        o.stderr
            .contains("\nError: agent operation failed: resolve secrets: "),
        "{o:?}"
    );
    let env = [("CT_HOST_TOKEN", "tok-value-123")];
    assert_eq!(s.run_env(&env, &["machine", "start", "--name", &n]).code, 0);
    let o = s.run_env(
        &env,
        &[
            "machine",
            "exec",
            "--name",
            &n,
            "--",
            "/bin/sh",
            "-c",
            "echo $GUEST_TOKEN",
        ],
    );
    assert_eq!(o.stdout, "tok-value-123\n");
    let raw = std::fs::read_to_string(s.home().join("calls.jsonl")).unwrap();
    assert!(
        !raw.contains("tok-value-123"),
        "the call log never holds a secret value"
    );
    let rec = std::fs::read_to_string(s.home().join("machines").join(format!("{n}.json"))).unwrap();
    assert!(
        !rec.contains("tok-value-123"),
        "the record holds only the reference"
    );
}

#[test]
fn backgrounded_exec_processes_by_version_and_workload() {
    if sim_only!() || !guests_available!() {
        return;
    }
    // (personality, workload?, survives?)
    for (ver, workload, survives) in [
        ("1.0.4", false, false),
        ("1.0.4", true, true),
        ("1.9.2", false, true),
    ] {
        let s = Smol::new().with_env("SMOLVM_SIM_VERSION", ver);
        let n = s.name("bg");
        if workload {
            s.create(&n, &["--", "sleep", "infinity"]);
        } else {
            s.create(&n, &[]);
        }
        s.start(&n);
        let o = s.sh(&n, "sleep 300 >/dev/null 2>&1 & echo $!");
        let pid = o.stdout.trim().to_string();
        assert!(!pid.is_empty(), "{o:?}");
        let alive = s
            .sh(
                &n,
                &format!(
                    "grep -q '^State:.*[RSD]' /proc/{pid}/status 2>/dev/null && echo yes || echo no"
                ),
            )
            .stdout;
        assert_eq!(
            alive.trim() == "yes",
            survives,
            "{ver} workload={workload}: {alive}"
        );
    }
}

#[test]
fn smolvm_data_dir_is_honoured_only_by_1_9_2() {
    if sim_only!() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let run = |ver: &str| -> Out {
        Command::new(binary())
            .args(["machine", "create", "--name", "dd-probe"])
            .env_remove("SMOLVM_SIM_HOME")
            .env("HOME", tmp.path().join("home"))
            .env_remove("XDG_DATA_HOME")
            .env("SMOLVM_DATA_DIR", d)
            .env("SMOLVM_SIM_VERSION", ver)
            .output()
            .unwrap()
            .into()
    };
    assert_eq!(run("1.9.2").code, 0);
    assert!(
        tmp.path()
            .join(".local/share/smolvm-sim/machines/dd-probe.json")
            .exists()
    );
    assert_eq!(run("1.0.4").code, 0);
    assert!(
        tmp.path()
            .join("home/.local/share/smolvm-sim/machines/dd-probe.json")
            .exists()
    );
}

#[test]
fn faults_counted_slow_failed_and_after() {
    if sim_only!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("f-misc");
    s.create(&n, &[]);
    // `N`: the first N calls fail, then calls succeed (counted across processes).
    let two = [("SMOLVM_SIM_FAIL", "data-dir:2")];
    assert_eq!(
        s.run_env(&two, &["machine", "data-dir", "--name", &n]).code,
        1
    );
    assert_eq!(
        s.run_env(&two, &["machine", "data-dir", "--name", &n]).code,
        1
    );
    assert_eq!(
        s.run_env(&two, &["machine", "data-dir", "--name", &n]).code,
        0
    );
    // slow: delayed, then normal.
    let t0 = Instant::now();
    let o = s.run_env(
        &[
            ("SMOLVM_SIM_FAIL", "ls:slow"),
            ("SMOLVM_SIM_SLOW_SECS", "0.4"),
        ],
        &["machine", "ls", "--json"],
    );
    assert_eq!(o.code, 0);
    assert!(t0.elapsed() >= Duration::from_millis(400));
    // state:failed for a machine that is not running.
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "state:failed")],
        &["machine", "status", "--name", &n],
    );
    assert_eq!(o.stdout, format!("Machine '{n}': failed\n"));
    // always on a read-only verb, and @TEXT not matching leaves the call alone.
    let o = s.run_env(&[("SMOLVM_SIM_FAIL", "ls:always")], &["machine", "ls"]);
    assert_eq!((o.code, o.stderr.starts_with("Error: ")), (1, true));
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "status:always@nomatch")],
        &["machine", "status", "--name", &n],
    );
    assert_eq!(o.code, 0);
    // delete:after: gone, but exit 1.
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "delete:after")],
        &["machine", "delete", "--name", &n, "-f"],
    );
    assert_eq!(o.code, 1);
    assert!(s.state(&n).is_none());
}

#[test]
fn init_commands_run_on_first_start_only() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("init");
    s.create(
        &n,
        &[
            "--image",
            &image(),
            "--net",
            "--init",
            "echo once >> /data/init-log",
            "--",
            "sleep",
            "infinity",
        ],
    );
    s.start(&n);
    s.ok(&["machine", "stop", "--name", &n]);
    let o = s.start(&n);
    assert!(
        o.stdout
            .starts_with("Init already completed, skipping 1 command(s)\n"),
        "{o:?}"
    );
    assert_eq!(s.sh(&n, "cat /data/init-log").stdout, "once\n");
    if is_sim() {
        let bad = s.name("init-bad");
        s.create(
            &bad,
            &[
                "--init",
                "echo broken >&2; exit 3",
                "--",
                "sleep",
                "infinity",
            ],
        );
        let o = s.run(&["machine", "start", "--name", &bad]);
        assert_eq!(o.code, 1);
        assert!(
            o.stderr.ends_with(
                "Error: agent operation failed: init: init[0] failed (exit 3): broken\n"
            ),
            "{o:?}"
        );
        assert_ne!(s.state(&bad).as_deref(), Some("running"));
    }
}

// ---------------------------------------------------------------------------------------------
// Pristine images (simulator only: a real smolvm pulls from a registry). These machines do not
// opt into the host-userland shortcut. The images come from the cache scripts/setup.sh fills
// (/var/cache/smolvm-sim/images); a missing one is built on first start (about a minute).
// ---------------------------------------------------------------------------------------------

/// A state root whose machines boot pristine images (the default a user gets).
fn pristine() -> Smol {
    Smol::new().with_env("SMOLVM_SIM_HOST_USERLAND", "0")
}

#[test]
fn image_guest_is_the_pristine_image_with_a_per_machine_overlay() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine();
    let a = s.name("img-a");
    let b = s.name("img-b");
    s.create(
        &a,
        &["--image", "debian:13", "--net", "--", "sleep", "infinity"],
    );
    s.create(
        &b,
        &["--image", "debian:13", "--net", "--", "sleep", "infinity"],
    );
    let o = s.start(&a);
    // smolvm's first-boot pull lines: "Pulling IMAGE...", then the \r-drawn bar ending "done.".
    assert!(o.stderr.contains("Pulling debian:13...\n"), "{o:?}");
    assert!(
        o.stderr.contains("\rPulling image debian:13... done."),
        "{o:?}"
    );
    s.start(&b);
    let o = s.sh(
        &a,
        ". /etc/os-release; echo $VERSION_CODENAME; \
         for t in bash apt-get dpkg ls; do command -v $t >/dev/null || echo missing-$t; done; \
         for t in curl sudo update-ca-certificates tmux node gpg git; do \
           command -v $t >/dev/null && echo present-$t; done; \
         test -d /workspace && echo workspace; test -e /data || echo no-data; \
         ls /var/lib/apt/lists | grep -c _ ; \
         echo mine > /etc/only-in-a; touch /root/a-was-here",
    );
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        o.stdout, "trixie\nworkspace\nno-data\n0\n",
        "what an OCI debian:13 has: bash/apt/coreutils, no curl/sudo/CA/tmux/node/gpg/git, \
         no apt lists, smolvm's /workspace, no /data: {o:?}"
    );
    let o = s.sh(&b, "cat /etc/only-in-a 2>&1; ls /root");
    assert!(
        o.stdout.contains("No such file"),
        "machines share only the read-only image: {o:?}"
    );
    // A second start pulls nothing and keeps the machine's own writes.
    s.ok(&["machine", "stop", "--name", &a]);
    let o = s.start(&a);
    assert!(!o.stderr.contains("Pulling"), "{o:?}");
    let o = s.sh(&a, "cat /etc/only-in-a; ls /root");
    assert_eq!(o.stdout, "mine\na-was-here\n", "{o:?}");
    // The image in the cache is untouched.
    let cache = std::env::var("SMOLVM_SIM_IMAGES")
        .unwrap_or_else(|_| "/var/cache/smolvm-sim/images".into());
    assert!(
        !Path::new(&cache)
            .join("debian_13/rootfs/etc/only-in-a")
            .exists()
    );
}

#[test]
fn image_tmp_is_a_fresh_tmpfs_from_1_9() {
    if sim_only!() || !guests_available!() {
        return;
    }
    for (version, survives) in [("1.0.4", true), ("1.9.2", false)] {
        let s = pristine().with_env("SMOLVM_SIM_VERSION", version);
        let n = s.name("img-tmp");
        s.create(
            &n,
            &["--image", "debian:12", "--net", "--", "sleep", "infinity"],
        );
        s.start(&n);
        s.sh(&n, "echo x > /tmp/f");
        s.ok(&["machine", "stop", "--name", &n]);
        s.start(&n);
        let o = s.sh(
            &n,
            "cat /tmp/f 2>/dev/null || echo gone; . /etc/os-release; echo $VERSION_CODENAME",
        );
        let want = if survives {
            "x\nbookworm\n"
        } else {
            "gone\nbookworm\n"
        };
        assert_eq!(o.stdout, want, "{version}: {o:?}");
    }
}

#[test]
fn image_ubuntu_boots_a_named_stand_in() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine();
    let n = s.name("img-ubuntu");
    let o = s.create(
        &n,
        &[
            "--image",
            "ubuntu:24.04",
            "--net",
            "--",
            "sleep",
            "infinity",
        ],
    );
    assert!(
        o.stderr.contains("ubuntu:24.04 cannot be built here")
            && o.stderr.contains("boots the debian:13 image instead")
            && o.stderr.contains("SMOLVM_SIM_IMAGE_MAP"),
        "every create says so: {o:?}"
    );
    let m = s
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == n.as_str())
        .unwrap();
    assert_eq!(m["image"], "ubuntu:24.04", "ls shows the image asked for");
    let o = s.start(&n);
    assert!(o.stderr.contains("Pulling ubuntu:24.04..."), "{o:?}");
    let o = s.sh(&n, ". /etc/os-release; echo $ID $VERSION_CODENAME");
    assert_eq!(
        o.stdout, "debian trixie\n",
        "never pretends to be Ubuntu: {o:?}"
    );

    let m2 = pristine().with_env("SMOLVM_SIM_IMAGE_MAP", "ubuntu:24.04=debian:12");
    let n2 = m2.name("img-map");
    let o = m2.create(
        &n2,
        &[
            "--image",
            "docker.io/library/ubuntu:24.04",
            "--net",
            "--",
            "sleep",
            "infinity",
        ],
    );
    assert!(
        o.stderr.contains("boots the debian:12 image instead"),
        "{o:?}"
    );
    m2.start(&n2);
    let o = m2.sh(&n2, ". /etc/os-release; echo $VERSION_CODENAME");
    assert_eq!(o.stdout, "bookworm\n", "{o:?}");

    // A map to something unbuildable, or a malformed one, is refused at create.
    for bad in ["ubuntu:24.04=alpine:3.19", "ubuntu:24.04"] {
        let o = pristine().with_env("SMOLVM_SIM_IMAGE_MAP", bad).run(&[
            "machine",
            "create",
            "--name",
            "bad-map",
            "--image",
            "ubuntu:24.04",
        ]);
        assert_eq!(o.code, 1, "{bad}: {o:?}");
        assert!(
            o.stderr.starts_with(
                "Error: config operation failed: create machine: SMOLVM_SIM_IMAGE_MAP"
            ),
            "{o:?}"
        );
    }
}

#[test]
fn image_that_cannot_be_pulled_fails_the_first_start_like_smolvm() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine();
    let n = s.name("img-unknown");
    // smolvm's create only records the image: it succeeds.
    s.create(
        &n,
        &[
            "--image",
            "ubuntu:99.04",
            "--net",
            "--",
            "sleep",
            "infinity",
        ],
    );
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr
            .contains("Pulling ubuntu:99.04...\nPulling image ubuntu:99.04..."),
        "{o:?}"
    );
    let last = o
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap();
    assert_eq!(
        last,
        "Error: agent operation failed: pull image: crane manifest failed: Error: fetching \
         manifest docker.io/library/ubuntu:99.04: GET \
         https://index.docker.io/v2/library/ubuntu/manifests/99.04: MANIFEST_UNKNOWN: manifest \
         unknown; unknown tag=99.04",
        "{o:?}"
    );
    assert_eq!(s.state(&n).as_deref(), Some("created"), "nothing booted");
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "and again on the next start: {o:?}");
    let o = s.exec(&n, &["true"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("is not running"), "{o:?}");
}

#[test]
fn image_bare_machine_and_bad_opt_in_are_refused() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine();
    let n = s.name("bare");
    s.create(&n, &[]);
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains("without --image") && o.stderr.contains("SMOLVM_SIM_HOST_USERLAND=1"),
        "{o:?}"
    );
    let o = Smol::new()
        .with_env("SMOLVM_SIM_HOST_USERLAND", "yes")
        .run(&["machine", "create", "--name", "x", "--image", "debian:13"]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr.contains("SMOLVM_SIM_HOST_USERLAND must be 1 or 0"),
        "{o:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Fidelity items read from smolvm's source (issue 11): exec disconnect kill, `-e KEY`, cp
// progress on failure, the 1.9.3 and 1.17.0 personalities.
// ---------------------------------------------------------------------------------------------

/// Guest processes whose command line contains `needle`, seen from inside the guest.
fn guest_procs(s: &Smol, name: &str, needle: &str) -> String {
    let o = s.sh(
        name,
        &format!(
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done \
             | grep -F -- '{needle}' | grep -v grep || true"
        ),
    );
    o.stdout
}

/// smolvm's agent kills the exec'd command, its children included, with SIGKILL when the
/// client goes away (box's deadline kill does exactly that to the client).
#[test]
fn killing_the_exec_client_kills_the_guest_command_tree() {
    if !guests_available!() {
        return;
    }
    for version in ["1.0.4", "1.9.2"] {
        let s = Smol::new().with_env("SMOLVM_SIM_VERSION", version);
        let n = s.name("disc");
        s.create(
            &n,
            &["--image", &image(), "--net", "--", "sleep", "infinity"],
        );
        s.start(&n);
        // The command ignores TERM/HUP/INT: only a SIGKILL ends it. Its child must go too.
        let mut client = s
            .cmd(&[
                "machine",
                "exec",
                "--stream",
                "--name",
                &n,
                "--",
                "/bin/sh",
                "-c",
                "trap '' TERM HUP INT; sleep 313 & echo ready; sleep 314",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 6];
        client
            .stdout
            .take()
            .unwrap()
            .read_exact(&mut first)
            .unwrap();
        assert_eq!(&first, b"ready\n");
        assert!(guest_procs(&s, &n, "sleep 314").contains("sleep 314"));
        client.kill().unwrap(); // SIGKILL, as box's deadline does
        let _ = client.wait();
        let t0 = Instant::now();
        let mut left = guest_procs(&s, &n, "sleep 31");
        while !left.trim().is_empty() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
            left = guest_procs(&s, &n, "sleep 31");
        }
        assert_eq!(
            left.trim(),
            "",
            "{version}: the command outlived its client"
        );
        // A command that finishes normally is left alone by the watcher.
        let o = s.sh(&n, "sleep 0.2 & echo done");
        assert_eq!((o.code, o.stdout.as_str()), (0, "done\n"), "{o:?}");
    }
}

/// `-e KEY` without `=` forwards the host's value of KEY (smolvm's parse_env_spec), on exec
/// and on create; an unset KEY and an empty key are skipped.
#[test]
fn env_key_without_value_forwards_the_hosts_value() {
    if !guests_available!() {
        return;
    }
    let s = Smol::new().with_env("CT_FWD_CREATE", "from-create");
    let n = s.name("envfwd");
    s.create(
        &n,
        &[
            "--image",
            &image(),
            "--net",
            "-e",
            "CT_FWD_CREATE",
            "--",
            "sleep",
            "infinity",
        ],
    );
    s.start(&n);
    let o = s.run_env(
        &[("CT_FWD_EXEC", "host value with spaces")],
        &[
            "machine",
            "exec",
            "--name",
            &n,
            "-e",
            "CT_FWD_EXEC",
            "-e",
            "CT_FWD_UNSET",
            "-e",
            "=nokey",
            "--",
            "/bin/sh",
            "-c",
            "echo \"$CT_FWD_EXEC|${CT_FWD_UNSET-unset}|$CT_FWD_CREATE\"",
        ],
    );
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        o.stdout, "host value with spaces|unset|from-create\n",
        "{o:?}"
    );
}

/// smolvm draws cp progress with `\r` and no newline; a transfer that fails after a
/// progress update leaves `\r<progress>Error: …` on one line. Success ends with the
/// summary line `(100.0%, RATE)` for an upload and `BYTES (RATE)` for a download.
#[test]
fn cp_progress_is_carriage_return_drawn_and_precedes_a_mid_transfer_error() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new();
    let n = s.name("cpprog");
    s.create(
        &n,
        &["--image", &image(), "--net", "--", "sleep", "infinity"],
    );
    s.start(&n);
    let local = s.home().join("payload.bin");
    std::fs::write(&local, vec![7u8; 3 * 1024 * 1024]).unwrap();
    let up = format!("{n}:/root/payload.bin");
    let o = s.ok(&["machine", "cp", local.to_str().unwrap(), &up]);
    let last = o.stderr.rsplit('\r').next().unwrap();
    assert!(
        o.stderr.starts_with('\r')
            && last.starts_with(&format!(
                "Uploading {} -> /root/payload.bin: 3.0 MB / 3.0 MB (100.0%, ",
                local.display()
            ))
            && last.ends_with("/s)\n"),
        "{:?}",
        o.stderr
    );
    let back = s.home().join("back.bin");
    let o = s.ok(&["machine", "cp", &up, back.to_str().unwrap()]);
    assert!(
        o.stderr.contains("\rDownloading /root/payload.bin -> "),
        "{:?}",
        o.stderr
    );
    assert!(
        o.stderr.trim_end().ends_with("/s)") && o.stderr.contains("3.0 MB ("),
        "{:?}",
        o.stderr
    );
    let o = s.run_env(
        &[("SMOLVM_SIM_FAIL", "cp:always")],
        &[
            "machine",
            "cp",
            local.to_str().unwrap(),
            &format!("{n}:/root/other.bin"),
        ],
    );
    assert_eq!(o.code, 1, "{o:?}");
    let line = o.stderr.lines().last().unwrap();
    assert!(
        line.starts_with("\rUploading ")
            && line.contains("(33.3%, ")
            && line.ends_with("/s)Error: agent operation failed: transfer file: agent connection closed unexpectedly"),
        "{:?}",
        o.stderr
    );
    let o = s.sh(&n, "ls /root");
    assert_eq!(
        o.stdout, "payload.bin\n",
        "a failed upload leaves nothing: {o:?}"
    );
}

#[test]
fn personality_1_9_3_is_the_1_9_2_contract() {
    if sim_only!() {
        return;
    }
    let s = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.9.3");
    assert_eq!(s.ok(&["--version"]).stdout, "smolvm 1.9.3\n");
    let n = s.name("v193");
    s.create(&n, &["--label", "team=core"]);
    let m = s
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == n.as_str())
        .unwrap();
    assert_eq!(m["labels"]["team"], "core", "1.9 keys: {m}");
    // Delete without -f still reads the answer from stdin (EOF: Cancelled, exit 0).
    let o = s.run(&["machine", "delete", "--name", &n]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "Cancelled\n"), "{o:?}");
    let o = Smol::new()
        .with_env("SMOLVM_SIM_VERSION", "1.10.0")
        .run(&["--version"]);
    assert_eq!(o.code, 1, "unknown personalities are refused: {o:?}");
}

/// From 1.17 (smolvm PR #1333) `delete` without `--force` refuses a stdin that is not a
/// terminal, exit 1, and deletes nothing; `--force` works as before. Text as observed on
/// a real 1.18.2.
#[test]
fn personality_1_17_0_delete_needs_a_terminal_or_force() {
    if sim_only!() {
        return;
    }
    let s = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.17.0");
    assert_eq!(s.ok(&["--version"]).stdout, "smolvm 1.17.0\n");
    let n = s.name("v117");
    s.create(&n, &[]);
    let o = s.run(&["machine", "delete", "--name", &n]);
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(
        o.stderr,
        format!(
            "Error: agent operation failed: delete: machine '{n}' needs confirmation but stdin \
             is not a terminal; pass --force to delete it, or --cascade to remove it together \
             with any machines branched from it\n"
        )
    );
    assert!(s.state(&n).is_some(), "nothing deleted");
    let o = s.ok(&["machine", "delete", "--name", &n, "-f"]);
    assert_eq!(o.stdout, format!("Deleted machine: {n}\n"));
    let o = s.run(&["machine", "delete", "--name", "nosuch"]);
    assert_eq!(o.stderr, "Error: vm not found: nosuch\n", "{o:?}");
}

// ---------------------------------------------------------------------------------------------
// Packs: `pack create --from-vm` and `machine create --from` (simulator only: a real smolvm's
// pack is its own binary format; the tests read ours). Spec: docs/smolvm.md (`pack create
// --from-vm`, `create --from`); smolvm v1.0.4 src/cli/pack.rs pack_from_vm, src/cli/machine.rs
// run_from_smolmachine, crates/smolvm-pack/src/extract.rs; v1.9.3 src/pack_export.rs.
// ---------------------------------------------------------------------------------------------

/// A stopped source machine of the given state root, with root-owned and agent-owned files,
/// a deleted image file (an overlay whiteout) and a recorded env; packed to `<home>/pk`.
fn packed_source(s: &Smol, extra_create: &[&str]) -> (String, PathBuf) {
    let src = s.name("pack-src");
    let mut a = vec![
        "--net",
        "-e",
        "BAKED=from-pack",
        "--cpus",
        "2",
        "--mem",
        "1024",
    ];
    a.extend_from_slice(extra_create);
    a.extend_from_slice(&["--", "/bin/sh", "-c", "sleep infinity"]);
    s.create(&src, &a);
    s.start(&src);
    let o = s.sh(
        &src,
        "mkdir -p /data/home/agent /opt/tool && echo tool > /opt/tool/bin && \
         chown 1000:1000 /data/home/agent && echo mine > /data/home/agent/f && \
         chown 1000:1000 /data/home/agent/f && rm -f /etc/debian_version",
    );
    assert_eq!(o.code, 0, "{o:?}");
    let out = s.home().join("pk");
    let o = s.run(&[
        "pack",
        "create",
        "--from-vm",
        &src,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert_eq!(
        o.stderr,
        format!(
            "Error: agent operation failed: pack from VM: VM '{src}' is running. Stop it first \
             with: smolvm machine stop --name {src}\n"
        ),
        "smolvm's exact refusal of a running machine"
    );
    s.ok(&["machine", "stop", "--name", &src]);
    let o = s.ok(&[
        "pack",
        "create",
        "--from-vm",
        &src,
        "-o",
        out.to_str().unwrap(),
        "--entrypoint",
        "/bin/sh",
        "--cpus",
        "3",
    ]);
    assert!(
        o.stdout
            .starts_with(&format!("Packing VM '{src}' snapshot...\n")),
        "{o:?}"
    );
    assert!(
        o.stdout
            .contains("Note: Keep the .smolmachine file alongside the binary")
    );
    (src, PathBuf::from(format!("{}.smolmachine", out.display())))
}

#[test]
fn pack_from_vm_and_create_from_on_1_0_4() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let o = s.run(&["pack", "create", "--from-vm", "nope", "-o", "/tmp/x"]);
    assert_eq!(
        o.stderr, "Error: agent operation failed: pack from VM: VM 'nope' not found\n",
        "{o:?}"
    );
    let (_src, sidecar) = packed_source(&s, &[]);
    assert!(
        s.home().join("pk").is_file(),
        "the stub OUT is written beside the payload"
    );
    assert!(sidecar.is_file());

    let n = s.name("from");
    let o = s.ok(&[
        "machine",
        "create",
        "--name",
        &n,
        "--from",
        sidecar.to_str().unwrap(),
        "-e",
        "EXTRA=cli",
    ]);
    assert!(
        o.stdout.starts_with("Extracting .smolmachine assets...\n"),
        "{o:?}"
    );
    // --cpus/--mem left at smolvm's defaults: the manifest's (pack --cpus 3, mem default).
    assert!(o.stdout.contains("CPUs: 3, Memory: 8192 MiB"), "{o:?}");
    let data = s.ok(&["machine", "data-dir", "--name", &n]).stdout;
    let pack_dir = PathBuf::from(data.trim()).join("pack");
    assert!(
        pack_dir.join(".smolvm-extracted").exists(),
        "marker after create"
    );
    s.start(&n);
    let o = s.sh(
        &n,
        "cat /opt/tool/bin /data/home/agent/f; test -e /etc/debian_version || echo whiteout; \
         echo $BAKED $EXTRA; stat -c '%u:%g %n' /opt/tool/bin /data/home/agent/f",
    );
    assert_eq!(o.code, 0, "{o:?}");
    assert_eq!(
        o.stdout,
        "tool\nmine\nwhiteout\nfrom-pack cli\n501:20 /opt/tool/bin\n1000:1000 /data/home/agent/f\n",
        "1.0.4: the pack's files and env come back; root's files are the host user's: {o:?}"
    );
    // The workload baked into the pack (entrypoint /bin/sh + the source's cmd) runs.
    let m = s
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == n.as_str())
        .unwrap();
    assert_eq!(m["entrypoint"], serde_json::json!(["/bin/sh"]));
    assert_eq!(
        m["cmd"],
        serde_json::json!(["/bin/sh", "-c", "sleep infinity"])
    );
}

#[test]
fn pack_1_0_4_evicts_itself_past_the_cache_cap_and_1_9_does_not() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let (_src, sidecar) = packed_source(&s, &[]);
    let sc = sidecar.to_str().unwrap();
    let n = s.name("evicted");
    let o = s.run_env(
        &[("SMOLVM_PACK_CACHE_MAX_BYTES", "4096")],
        &["machine", "create", "--name", &n, "--from", sc],
    );
    assert_eq!(
        o.code, 0,
        "1.0.4's create succeeds although it evicted its own layers: {o:?}"
    );
    let data = s.ok(&["machine", "data-dir", "--name", &n]).stdout;
    assert!(
        !PathBuf::from(data.trim())
            .join("pack/.smolvm-extracted")
            .exists()
    );
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("packed layers missing"), "{o:?}");
    // Raising the cap (what hermes-box does) avoids it.
    let n2 = s.name("kept");
    s.run_env(
        &[("SMOLVM_PACK_CACHE_MAX_BYTES", "17179869184")],
        &["machine", "create", "--name", &n2, "--from", sc],
    );
    let data = s.ok(&["machine", "data-dir", "--name", &n2]).stdout;
    assert!(
        PathBuf::from(data.trim())
            .join("pack/.smolvm-extracted")
            .exists()
    );
    // 1.9 protects what it just extracted and keeps the owners.
    let n3 = s.name("head");
    let o = s.run_env(
        &[
            ("SMOLVM_SIM_VERSION", "1.9.2"),
            ("SMOLVM_PACK_CACHE_MAX_BYTES", "4096"),
        ],
        &["machine", "create", "--name", &n3, "--from", sc],
    );
    assert_eq!(o.code, 0, "{o:?}");
    let o = s.run_env(
        &[("SMOLVM_SIM_VERSION", "1.9.2")],
        &["machine", "start", "--name", &n3],
    );
    assert_eq!(o.code, 0, "{o:?}");
    let o = s.run_env(
        &[("SMOLVM_SIM_VERSION", "1.9.2")],
        &[
            "machine",
            "exec",
            "--name",
            &n3,
            "--",
            "stat",
            "-c",
            "%u:%g",
            "/opt/tool/bin",
        ],
    );
    assert_eq!(o.stdout, "0:0\n", "1.9 keeps root's ownership: {o:?}");
}

/// `assets_size` from the simulator's footer (the last 512 bytes, a text line).
fn pack_assets_size(pack: &[u8]) -> usize {
    let footer = String::from_utf8_lossy(&pack[pack.len() - 512..]).to_string();
    assert!(
        footer.starts_with("SMOLVM-SIM-PACK-FOOTER/2 "),
        "{footer:?}"
    );
    footer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("assets_size="))
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[test]
fn a_pack_is_zstd_assets_then_the_manifest_then_a_footer() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new();
    let (_src, sidecar) = packed_source(&s, &[]);
    let bytes = std::fs::read(&sidecar).unwrap();
    // smolvm's layout (crates/smolvm-pack/src/format.rs@v1.0.4): compressed assets, the
    // manifest, the footer; assets are zstd (its frame magic 28 b5 2f fd).
    assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd assets first");
    let assets = pack_assets_size(&bytes);
    let manifest: serde_json::Value =
        serde_json::from_slice(&bytes[assets..bytes.len() - 512]).unwrap();
    assert!(
        manifest["env"].to_string().contains("BAKED=from-pack"),
        "{manifest}"
    );
    // The footer's CRC32 covers assets + manifest (smolvm's PackFooter.checksum).
    let footer = String::from_utf8_lossy(&bytes[bytes.len() - 512..]).to_string();
    let crc = footer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("crc32="))
        .unwrap()
        .trim_end_matches('\0')
        .to_string();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys,zlib;d=open(sys.argv[1],'rb').read();print('%08x'%zlib.crc32(d[:len(d)-512]))",
        ])
        .arg(&sidecar)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), crc);
    // The assets decode to the guest tree: zstd -d | tar -t.
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "head -c \"$1\" \"$2\" | zstd -dqc | tar -tf - | grep -c '^guest/'",
            "sh",
        ])
        .arg(assets.to_string())
        .arg(&sidecar)
        .output()
        .unwrap();
    let n: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(n > 3, "the guest tree is in the assets: {out:?}");
}

#[test]
fn a_pack_that_cannot_be_read_or_extracted_leaves_no_machine() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = Smol::new().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let (_src, sidecar) = packed_source(&s, &[]);
    let bytes = std::fs::read(&sidecar).unwrap();
    let before: Vec<_> = std::fs::read_dir(s.home().join("vms")).unwrap().collect();

    let missing = s.name("missing");
    let o = s.run(&[
        "machine",
        "create",
        "--name",
        &missing,
        "--from",
        "/nonexistent.smolmachine",
    ]);
    assert_eq!(
        o.stderr,
        "Error: config operation failed: create from .smolmachine: file not found: \
         /nonexistent.smolmachine\n"
    );
    // Truncated: the footer is gone, so the manifest cannot be read.
    let trunc = s.home().join("trunc.smolmachine");
    std::fs::write(&trunc, &bytes[..bytes.len() / 2]).unwrap();
    let n = s.name("trunc");
    let o = s.run(&[
        "machine",
        "create",
        "--name",
        &n,
        "--from",
        trunc.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr
            .starts_with("Error: agent operation failed: read .smolmachine:"),
        "{o:?}"
    );
    // Corrupt in the middle of the compressed assets: the manifest (after them) reads, the
    // decoding fails (zstd's content checksum, else the tar reader).
    let mut bad = bytes.clone();
    let assets = pack_assets_size(&bytes);
    assert!(
        assets > 600,
        "the assets are zstd, smaller than the tar: {assets}"
    );
    bad[assets / 2..assets / 2 + 200].fill(7);
    let corrupt = s.home().join("corrupt.smolmachine");
    std::fs::write(&corrupt, &bad).unwrap();
    let n2 = s.name("corrupt");
    let o = s.run(&[
        "machine",
        "create",
        "--name",
        &n2,
        "--from",
        corrupt.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(
        o.stderr
            .starts_with("Error: agent operation failed: extract sidecar: "),
        "{o:?}"
    );
    assert!(s.state(&n).is_none() && s.state(&n2).is_none());
    let after: Vec<_> = std::fs::read_dir(s.home().join("vms")).unwrap().collect();
    assert_eq!(before.len(), after.len(), "no data dir is left behind");
    // Not a pack at all.
    let junk = s.home().join("junk.smolmachine");
    std::fs::write(&junk, vec![b'x'; 4096]).unwrap();
    let o = s.run(&[
        "machine",
        "create",
        "--name",
        &n2,
        "--from",
        junk.to_str().unwrap(),
    ]);
    assert!(
        o.stderr
            .starts_with("Error: agent operation failed: read .smolmachine:"),
        "{o:?}"
    );
}

/// smolvm >= 1.3 on Linux (v1.9.3 src/cli/machine.rs run_from_smolmachine,
/// src/artifact_cache.rs materialize_shared_pack_lease, crates/smolvm-pack/src/extract.rs
/// extract_sidecar_shared): a pack is extracted once into `<vms>/_shared/<crc32>`; each
/// machine gets a `.pack-shared` pointer in its data dir and an empty `pack/` (no
/// `.smolvm-extracted` there); later creates from the same pack extract nothing; machines
/// share the layers read-only. `SMOLVM_DISABLE_SHARED_EXTRACT` restores the private copy.
#[test]
fn pack_1_9_extracts_once_into_the_shared_store() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine().with_env("SMOLVM_SIM_VERSION", "1.9.2");
    let (_src, sidecar) = packed_source(&s, &["--image", "debian:13"]);
    let sc = sidecar.to_str().unwrap();
    let data_of =
        |n: &str| PathBuf::from(s.ok(&["machine", "data-dir", "--name", n]).stdout.trim());
    let a = s.name("shared-a");
    let o = s.ok(&[
        "machine",
        "create",
        "--name",
        &a,
        "--from",
        sc,
        "--label",
        "from=pack",
    ]);
    // A machine from a pack carries its labels like any other (run_from_smolmachine).
    let listed = s
        .ls_json()
        .into_iter()
        .find(|m| m["name"] == a.as_str())
        .unwrap();
    assert_eq!(listed["labels"], serde_json::json!({"from": "pack"}));
    assert!(
        o.stdout.starts_with("Extracting .smolmachine assets...\n"),
        "{o:?}"
    );
    let da = data_of(&a);
    let shared = PathBuf::from(std::fs::read_to_string(da.join(".pack-shared")).unwrap());
    assert_eq!(shared.parent().unwrap(), s.home().join("vms/_shared"));
    assert_eq!(
        shared.file_name().unwrap().len(),
        8,
        "keyed by the CRC32: {shared:?}"
    );
    assert!(shared.join(".smolvm-extracted").exists());
    assert!(da.join("pack").is_dir() && !da.join("pack/.smolvm-extracted").exists());
    let marker = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p.join(".smolvm-extracted")).unwrap();
        (m.ino(), m.mtime_nsec())
    };
    let first = marker(&shared);
    // A warm hit: the same copy, not extracted again, and nothing copied per machine.
    let b = s.name("shared-b");
    s.ok(&["machine", "create", "--name", &b, "--from", sc]);
    let db = data_of(&b);
    assert_eq!(
        std::fs::read_to_string(db.join(".pack-shared")).unwrap(),
        shared.to_str().unwrap()
    );
    assert_eq!(
        marker(&shared),
        first,
        "the second create extracted nothing"
    );
    assert!(
        !db.join("guest/image-upper/opt/tool/bin").exists(),
        "no per-machine copy"
    );
    s.start(&a);
    s.start(&b);
    let check = "cat /opt/tool/bin; test -e /etc/debian_version || echo whiteout; echo $BAKED";
    let o = s.sh(&a, &format!("{check}; echo changed > /opt/tool/bin"));
    assert_eq!(o.stdout, "tool\nwhiteout\nfrom-pack\n", "{o:?}");
    let o = s.sh(&b, check);
    assert_eq!(
        o.stdout, "tool\nwhiteout\nfrom-pack\n",
        "a write in one machine stays there: {o:?}"
    );
    // Deleting one machine leaves the shared copy to the other.
    s.ok(&["machine", "delete", "--name", &a, "-f"]);
    s.ok(&["machine", "stop", "--name", &b]);
    s.start(&b);
    assert_eq!(s.sh(&b, "cat /opt/tool/bin").stdout, "tool\n");
    // Without the shared store: the private extraction, as 1.0.4 (owners kept on 1.9).
    let c = s.name("private");
    s.run_env(
        &[("SMOLVM_DISABLE_SHARED_EXTRACT", "1")],
        &["machine", "create", "--name", &c, "--from", sc],
    );
    let dc = data_of(&c);
    assert!(dc.join("pack/.smolvm-extracted").exists() && !dc.join(".pack-shared").exists());
    // A machine layered on a shared pack cannot be packed again (flattening is not simulated).
    s.ok(&["machine", "stop", "--name", &b]);
    let o = s.run(&[
        "pack",
        "create",
        "--from-vm",
        &b,
        "-o",
        s.home().join("pk2").to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1, "{o:?}");
    assert!(o.stderr.contains("not simulated"), "{o:?}");
}

/// smolvm v1.0.4 boots a machine made `--from` a pack with the extracted layers
/// (`<data dir>/pack/layers`, virtiofs) as the container overlay's read-only lower layers and
/// a fresh persistent upper of its own (crates/smolvm-agent/src/storage.rs
/// `prepare_for_run_persistent` L2296-2310, `get_packed_lowerdirs` L1973; src/cli/machine.rs
/// L1856-1877 extracts into `machine_layers_cache_dir`, src/agent/manager.rs L208). The guest
/// kernel has no overlayfs redirect_dir and no metacopy (smol-machines/libkrunfw
/// config-libkrunfw_*), so a rename(2) of a directory from the pack fails with EXDEV and a
/// chown of a pack file copies it up into the machine's own upper.
#[test]
fn pack_1_0_4_boots_the_extracted_layers_read_only_below_a_fresh_upper() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let (_src, sidecar) = packed_source(&s, &["--image", "debian:13"]);
    let n = s.name("ro-from");
    s.ok(&[
        "machine",
        "create",
        "--name",
        &n,
        "--from",
        sidecar.to_str().unwrap(),
    ]);
    let data = PathBuf::from(s.ok(&["machine", "data-dir", "--name", &n]).stdout.trim());
    let own_upper = data.join("guest/image-upper");
    let entries = |p: &Path| std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0);
    assert_eq!(
        entries(&own_upper),
        0,
        "the machine's own upper is empty right after create: {own_upper:?}"
    );
    assert!(
        data.join("pack/guest/image-upper/opt/tool/bin").is_file(),
        "the extraction stays in <data dir>/pack"
    );
    s.start(&n);
    let o = s.sh(
        &n,
        "stat -c '%u:%g' /opt/tool/bin; \
         perl -e 'rename(\"/opt/tool\", \"/opt/tool2\") or print \"$!\\n\"'; \
         mkdir /opt/mine && perl -e 'rename(\"/opt/mine\", \"/opt/mine2\") or print \"$!\\n\"'; \
         ls -d /opt/mine2",
    );
    assert_eq!(
        o.stdout, "501:20\nInvalid cross-device link\n/opt/mine2\n",
        "a directory from the pack cannot be renamed (EXDEV); one of the machine's own can: {o:?}"
    );
    assert!(
        !own_upper.join("opt/tool/bin").exists(),
        "reading a pack file copies nothing up"
    );
    let o = s.sh(
        &n,
        "chown 0:0 /opt/tool/bin && stat -c '%u:%g' /opt/tool/bin",
    );
    assert_eq!(o.stdout, "0:0\n", "{o:?}");
    assert!(
        own_upper.join("opt/tool/bin").is_file(),
        "a chown copies the file up into the machine's own upper"
    );
    assert_eq!(
        std::fs::metadata(data.join("pack/guest/image-upper/opt/tool/bin"))
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap(),
        501,
        "the pack's layer itself is never written"
    );
}

#[test]
fn pack_of_a_pristine_image_machine_re_pulls_and_boots_without_a_pull() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine().with_env("SMOLVM_SIM_VERSION", "1.0.4");
    let (_src, sidecar) = packed_source(&s, &["--image", "debian:13"]);
    let n = s.name("img-from");
    s.ok(&[
        "machine",
        "create",
        "--name",
        &n,
        "--from",
        sidecar.to_str().unwrap(),
    ]);
    let o = s.start(&n);
    assert!(
        !o.stderr.contains("Pulling"),
        "a pack carries its layers: {o:?}"
    );
    let o = s.sh(
        &n,
        ". /etc/os-release; echo $VERSION_CODENAME; cat /opt/tool/bin",
    );
    assert_eq!(o.stdout, "trixie\ntool\n", "{o:?}");
}

/// apt in a pristine image reaches the Debian archive over plain http, as in a stock
/// container (no CA certificates needed). It downloads from the archive.
#[test]
#[ignore = "needs the network (apt-get install in a pristine guest): run with --ignored"]
fn image_apt_installs_from_the_archive() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let s = pristine();
    let n = s.name("img-apt");
    s.create(
        &n,
        &["--image", "debian:13", "--net", "--", "sleep", "infinity"],
    );
    s.start(&n);
    let o = s.sh(
        &n,
        "export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq cowsay >/dev/null 2>&1 \
         && echo installed-without-update; apt-get update -qq && apt-get install -y -qq \
         --no-install-recommends cowsay >/dev/null && /usr/games/cowsay moo",
    );
    assert_eq!(o.code, 0, "{o:?}");
    assert!(
        !o.stdout.contains("installed-without-update") && o.stdout.contains("moo"),
        "empty lists first, as in a stock image; then the archive works: {o:?}"
    );
}

/// A buildable image whose build fails (here: an mmdebstrap that cannot reach the archive)
/// fails the first start like a pull that cannot reach its registry: exit 1, smolvm's
/// `pull image` error naming the cause and the build log; nothing half-built is cached.
#[test]
fn image_that_cannot_be_built_fails_the_first_start_with_the_cause() {
    if sim_only!() || !guests_available!() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("mmdebstrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'I: running apt-get update...'\necho 'E: could not resolve deb.debian.org' >&2\nexit 1\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&fake)
        .status()
        .unwrap();
    let cache = tmp.path().join("images");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let s = pristine()
        .with_env("SMOLVM_SIM_IMAGES", cache.to_str().unwrap())
        .with_env("PATH", &path);
    let n = s.name("img-nobuild");
    s.create(
        &n,
        &["--image", "debian:13", "--net", "--", "sleep", "infinity"],
    );
    let o = s.run(&["machine", "start", "--name", &n]);
    assert_eq!(o.code, 1, "{o:?}");
    let last = o
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap();
    assert!(
        last.starts_with(
            "Error: agent operation failed: pull image: crane manifest failed: Error: fetching \
             manifest docker.io/library/debian:13: smolvm-sim could not build debian:13 with mmdebstrap"
        ) && last.contains("could not resolve deb.debian.org")
            && last.contains("debian_13.build.log"),
        "{o:?}"
    );
    assert!(
        o.stderr.contains("\rPulling image debian:13... done."),
        "{o:?}"
    );
    assert!(
        !cache.join("debian_13").exists(),
        "nothing half-built is cached"
    );
    assert_eq!(s.state(&n).as_deref(), Some("created"));
}

mod contract_egress;
