//! The first run as a user has it (issue 11 §4): the repo's default box.env plus the one
//! line this network needs (`GUEST_CA_CERTS`, the CA bundle the host trusts), a pristine
//! guest image (`ubuntu:24.04`, which the simulator boots as its stand-in, a minbase
//! Debian 13 with no curl, no CA certificates, no sudo, no tmux, no node), and provisioning
//! from the real network: the Debian archive, the npm registry, PyPI.
//!
//! `box new` → `box doctor` (guest + host MCP handshake) → `box enter` has the tmux session
//! → `box exec` (exit code, stdin) and `box logs` → Hermes's real gateway enabled (`hb
//! service enable`), back after a VM restart and after a SIGKILL → `box save
//! --progress=json` (its manifest names box, hb and smolvm) → `box load` into a second
//! pristine box, which runs the gateway too → `box doctor` → `box rm` both.
//! No local-tools hook (`BOX_TEST_GUEST_ENV`) and no host-userland guest
//! (`SMOLVM_SIM_HOST_USERLAND`). Each phase's wall time is printed.
//!
//! Beside it, the same first run WITHOUT the CA fails on this TLS-inspecting network, and
//! the error names GUEST_CA_CERTS. The two tests run in parallel (each its own world).
//!
//! Needs root (namespaced guests), slirp4netns, mmdebstrap (the simulator builds the image
//! on its first start when scripts/setup.sh has not), the host CA bundle and the network.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "sim_support/mod.rs"]
mod sim_support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sim_support::{Run, box_bin, detach, sibling};

const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn prerequisites() -> bool {
    let mut missing =
        sim_support::missing_root_and_commands(&["slirp4netns", "mmdebstrap", "script"]);
    if !Path::new(CA_BUNDLE).is_file() {
        missing.push(format!("{CA_BUNDLE} (the host's CA bundle)"));
    }
    sim_support::require("first-run tests", &missing)
}

/// One user's machine: their own BOX_HOME, simulator home, box.env and backups.
struct User {
    dir: tempfile::TempDir,
    config: PathBuf,
    passphrase: PathBuf,
    /// Everything box printed, for the secret scan.
    transcript: String,
}

impl User {
    /// The repo's box.env as shipped, plus `extra` lines (a user's own edits).
    fn new(extra: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("first-run-")
            .tempdir()
            .unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../box.env");
        let mut text = std::fs::read_to_string(&shipped).unwrap();
        // The user's edit of the shipped keys: replace the line, keep everything else.
        for line in extra.lines() {
            let key = line.split('=').next().unwrap();
            text = text
                .lines()
                .filter(|l| !l.starts_with(&format!("{key}=")))
                .collect::<Vec<_>>()
                .join("\n");
            text.push('\n');
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(&format!(
            "BACKUP_DIR={}\n",
            dir.path().join("backups").display()
        ));
        let text = text.replace("BACKUP_DIR=backups\n", "");
        let config = dir.path().join("box.env");
        std::fs::write(&config, text).unwrap();
        let passphrase = dir.path().join("passphrase");
        std::fs::write(&passphrase, "first-run-pp-7d1c0a\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sim")).unwrap();
        Self {
            dir,
            config,
            passphrase,
            transcript: String::new(),
        }
    }

    fn sim_home(&self) -> PathBuf {
        self.dir.path().join("sim")
    }

    fn env(&self, cmd: &mut Command) {
        cmd.env("BOX_HOME", self.dir.path().join("box-home"))
            .env("BOX_CONFIG", &self.config)
            .env("BOX_PASSPHRASE_FILE", &self.passphrase)
            .env("SMOLVM", sibling("smolvm-sim"))
            .env("SMOLVM_SIM_HOME", self.sim_home())
            .env("NO_COLOR", "1")
            // The user's path: a pristine image, the default stand-in map, no test hooks.
            .env_remove("SMOLVM_SIM_HOST_USERLAND")
            .env_remove("SMOLVM_SIM_IMAGE_MAP")
            .env_remove("SMOLVM_SIM_VERSION")
            .env_remove("SMOLVM_SIM_FAIL")
            .env_remove("BOX_TEST_GUEST_ENV")
            .env_remove("BOX_SMOLVM_TIMEOUT")
            .env_remove("BOX_KEEP_ON_FAILURE")
            .env_remove("BOX_HB_BINARY")
            .env_remove("BOX_PROVISION_DIR")
            .env_remove("BOX_PASSPHRASE");
        // Every box.env key comes from the file, as for a user who exported none of them,
        // and no proxy of the machine running the tests leaks into the expectations.
        for key in box_proto::box_env::KEYS {
            cmd.env_remove(key);
        }
        for key in box_proto::proxy::NAMES {
            cmd.env_remove(key).env_remove(key.to_ascii_lowercase());
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(box_bin());
        // Run from the user's own directory (box extract's default target is there).
        cmd.args(args)
            .stdin(Stdio::null())
            .current_dir(self.dir.path());
        self.env(&mut cmd);
        detach(&mut cmd);
        cmd
    }

    /// `box args…`, timed; prints the phase's wall time.
    fn phase(&mut self, label: &str, args: &[&str]) -> (Run, Duration) {
        let t = Instant::now();
        let run = Run::from(&self.command(args).output().unwrap());
        let took = t.elapsed();
        eprintln!("first-run phase {label}: {:.1} s", took.as_secs_f64());
        self.transcript
            .push_str(&format!("$ box {}\n{run}\n", args.join(" ")));
        (run, took)
    }

    /// `box enter NAME` on a real pty (script(1)): types a command into the session.
    fn enter(&mut self, name: &str) -> Run {
        let t = Instant::now();
        let mut cmd = Command::new("script");
        cmd.args([
            "-qec",
            &format!("{} enter {name}", box_bin().display()),
            "/dev/null",
        ]);
        self.env(&mut cmd);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            let _ = stdin.write_all(
                b"echo in-$(tmux display-message -p '#S')-as-$(whoami)-ca-${NODE_EXTRA_CA_CERTS:-none}-tools-$(command -v claude codex executor hermes | wc -l)-token-${EXECUTOR_MCP_TOKEN:+set}\r",
            );
            std::thread::sleep(Duration::from_secs(2));
            let _ = stdin.write_all(b"exit\r");
            std::thread::sleep(Duration::from_secs(3));
        });
        let run = Run::from(&child.wait_with_output().unwrap());
        eprintln!(
            "first-run phase enter {name}: {:.1} s",
            t.elapsed().as_secs_f64()
        );
        self.transcript
            .push_str(&format!("$ script box enter {name}\n{run}\n"));
        run
    }

    /// The provisioning step lines of a `box new`/`load` (`[mm:ss] step`), for the report.
    fn print_steps(label: &str, run: &Run) {
        let all = run.all();
        let steps: Vec<String> = all
            .lines()
            .filter_map(|l| l.strip_prefix("==>   ["))
            .map(|l| l.replacen("] ", " ", 1))
            .collect();
        eprintln!(
            "first-run {label} provisioning steps (start time): {}",
            steps.join(", ")
        );
    }

    fn backups(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir.path().join("backups"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    }

    /// `smolvm-sim args…` in this user's world.
    fn sim(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new(sibling("smolvm-sim"));
        cmd.args(args).stdin(Stdio::null());
        self.env(&mut cmd);
        cmd.output().unwrap()
    }

    /// Machines left in the simulator (every test removes what it made).
    fn machines(&self) -> Vec<(String, String)> {
        sim_support::parse_machines(&self.sim(&["machine", "ls", "--json"]).stdout)
    }
}

impl Drop for User {
    fn drop(&mut self) {
        // A failed assertion must not leave namespaced guests running.
        for (name, _) in self.machines() {
            let mut cmd = Command::new(sibling("smolvm-sim"));
            cmd.args(["machine", "delete", "-f", "--name", &name]);
            self.env(&mut cmd);
            let _ = cmd.output();
        }
    }
}

fn doctor_ok(user: &mut User, name: &str) {
    let (d, _) = user.phase(&format!("doctor {name}"), &["doctor", name]);
    assert!(d.ok(), "{d}");
    for want in [
        "hb doctor passed",
        "host Executor MCP: healthy",
        "guest network: proxies: none; extra CA certificates:",
        "(GUEST_CA_CERTS), trusted",
    ] {
        assert!(
            d.stdout.contains(want),
            "doctor {name} lacks {want:?}:\n{d}"
        );
    }
}

/// Waits (up to 2 minutes: Python and Hermes start in seconds) until hb's workload runs the
/// real Hermes gateway in `machine` (a pid other than `not`) and Hermes's own
/// gateway_state.json, written at or after `since` (unix seconds), says `running` with that
/// pid. Returns the pid.
fn real_gateway_running(user: &mut User, machine: &str, since: i64, not: Option<u64>) -> u64 {
    let t = Instant::now();
    let mut last = String::new();
    while t.elapsed() < Duration::from_secs(120) {
        let status: serde_json::Value =
            serde_json::from_str(&guest_sh(user, machine, "/usr/local/bin/hb status --json"))
                .unwrap();
        let hb = status["services"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["name"] == "hermes-gateway").cloned())
            .unwrap_or_default();
        let state: serde_json::Value = serde_json::from_str(&guest_sh(
            user,
            machine,
            "cat /data/home/agent/.hermes/gateway_state.json 2>/dev/null || echo null",
        ))
        .unwrap_or_default();
        let written = state["updated_at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map_or(0, |t| t.timestamp());
        let pid = hb["pid"].as_u64();
        if hb["state"] == "running"
            && pid.is_some_and(|p| Some(p) != not)
            && state["gateway_state"] == "running"
            && state["pid"].as_u64() == pid
            && written >= since
        {
            eprintln!(
                "first-run phase real Hermes gateway running in {machine}: {:.1} s",
                t.elapsed().as_secs_f64()
            );
            return pid.unwrap_or_default();
        }
        last = format!(
            "hb: {hb}
Hermes: {state}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = guest_sh(user, machine, "tail -n 30 /data/logs/hermes-gateway.log");
    panic!(
        "the real Hermes gateway is not running in {machine}:
{last}
{log}"
    );
}

/// What ordinary boxes hold (issue 21), written as root into the box before its save: a
/// `dd`-made 600 MiB file of zeros, a 3 GiB sparse image with data in its middle, a setgid
/// shared dir and a sticky one, and a WAL-mode SQLite database whose rows sit in its WAL
/// only (the writer died without a checkpoint).
const ORDINARY: &str = r#"set -e
O=/data/home/agent/workspace/ordinary
mkdir -p $O/shared $O/tmp
dd if=/dev/zero of=$O/zeros.img bs=1M count=600 status=none
truncate -s 3G $O/sparse.img
printf 'the middle of a sparse image' | dd of=$O/sparse.img bs=1 seek=1610612736 conv=notrunc status=none
python3 - "$O/app.db" <<'PY'
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=WAL")
c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT)")
c.execute("BEGIN")
for i in range(5000):
    c.execute("INSERT INTO t(v) VALUES (?)", ("row %d" % i,))
c.execute("COMMIT")
os._exit(0)
PY
chown -R agent:agent $O
chmod 2775 $O/shared
chmod 1777 $O/tmp
"#;

/// How the ordinary data reads: per path its type, mode, size, owner and SHA-256, and the
/// database's row count as SQLite sees it (with its WAL; read-only, so closing it does not
/// checkpoint the WAL away). Allocation is [`ORDINARY_BLOCKS`].
const ORDINARY_LISTING: &str = r#"cd /data/home/agent/workspace/ordinary
stat -c '%n %F %a %s %U' shared tmp zeros.img sparse.img app.db app.db-wal
sha256sum zeros.img sparse.img app.db app.db-wal
python3 -c 'import sqlite3; print(sqlite3.connect("file:app.db?mode=ro", uri=True).execute("SELECT count(*) FROM t").fetchone()[0])'
"#;

/// Allocated 512-byte blocks of the two images.
const ORDINARY_BLOCKS: &str =
    "cd /data/home/agent/workspace/ordinary && stat -c '%n %b' zeros.img sparse.img";

/// Runs `script` as root in `machine`; its stdout.
fn guest_sh(user: &User, machine: &str, script: &str) -> String {
    let out = user.sim(&[
        "machine", "exec", "--name", machine, "--", "sh", "-c", script,
    ]);
    assert!(
        out.status.success(),
        "in {machine}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Both images take almost no disk (zeros as holes, the sparse one's holes kept).
fn assert_images_sparse(blocks: &str, where_: &str) {
    for line in blocks.lines() {
        let (name, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        assert!(n * 512 < 2 << 20, "{where_}: {name} holds {n} blocks");
    }
}

/// `box extract` of the backup as root and as an unprivileged user: the ordinary data
/// comes back byte for byte, every mode bit as GNU tar restores it (the user keeps set-id
/// bits on their own files; root drops none of these, which are directories), zeros as
/// holes.
fn extract_as_root_and_user(user: &mut User, backup: &str) {
    let (ex, _) = user.phase("extract as root", &["extract", backup]);
    assert!(ex.ok(), "{ex}");
    // The backup names the box, hb and smolvm that made it.
    for key in ["box=0.", "hb=0.", "smolvm=1."] {
        assert!(ex.stdout.contains(key), "no {key} in the manifest: {ex}");
    }
    let target = user.dir.path().join(format!(
        "{}-extracted",
        Path::new(backup)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".tar.zst.gpg")
    ));
    // As nobody: its own dir with a copy of the backup and the passphrase.
    let nobody = tempfile::Builder::new()
        .prefix("first-run-nobody-")
        .tempdir()
        .unwrap();
    let copy = nobody.path().join("b.tar.zst.gpg");
    std::fs::copy(backup, &copy).unwrap();
    std::fs::copy(&user.passphrase, nobody.path().join("pass")).unwrap();
    let chown = Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(nobody.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(box_bin())
        .arg("extract")
        .arg(&copy)
        .arg(nobody.path().join("out"))
        .stdin(Stdio::null());
    user.env(&mut cmd);
    cmd.env("BOX_HOME", nobody.path().join("box-home"))
        .env("HOME", nobody.path())
        .env("BOX_PASSPHRASE_FILE", nobody.path().join("pass"));
    let run = Run::from(&cmd.output().unwrap());
    assert!(run.ok(), "box extract as nobody: {run}");
    for (who, root) in [("root", target), ("nobody", nobody.path().join("out"))] {
        let o = root.join("home/agent/workspace/ordinary");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = |p: &str| std::fs::metadata(o.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("shared"), 0o2775, "{who}");
        assert_eq!(mode("tmp"), 0o1777, "{who}");
        for (img, len) in [("zeros.img", 600u64 << 20), ("sparse.img", 3 << 30)] {
            let m = std::fs::metadata(o.join(img)).unwrap();
            assert_eq!(m.len(), len, "{who} {img}");
            assert!(
                m.blocks() * 512 < 2 << 20,
                "{who} {img}: {} blocks",
                m.blocks()
            );
        }
        let mut f = std::fs::File::open(o.join("sparse.img")).unwrap();
        let mut middle = [0u8; 28];
        use std::io::{Read as _, Seek as _};
        f.seek(std::io::SeekFrom::Start(1_610_612_736)).unwrap();
        f.read_exact(&mut middle).unwrap();
        assert_eq!(&middle, b"the middle of a sparse image", "{who}");
    }
}

#[test]
fn first_run_on_a_pristine_image_from_the_network() {
    if !prerequisites() {
        return;
    }
    let mut user = User::new(&format!("GUEST_CA_CERTS={CA_BUNDLE}"));
    let total = Instant::now();

    let (new, _) = user.phase("new alpha", &["new", "alpha"]);
    User::print_steps("new", &new);
    assert!(new.ok(), "{new}");
    let all = new.all();
    assert!(all.contains("Ready. Enter with: box enter alpha"), "{new}");
    // The stand-in is said, never hidden: the guest is Debian 13, not Ubuntu.
    assert!(
        all.contains("ubuntu:24.04 cannot be built here"),
        "the image stand-in is not said: {new}"
    );
    assert!(
        all.contains("extra CA certificates: ") && all.contains("from GUEST_CA_CERTS"),
        "{new}"
    );
    // Provisioning really installed the tools: every step that adds software ran.
    let transcript = std::fs::read_dir(user.dir.path().join("box-home/logs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    for want in [
        "installing: ca-certificates curl",
        "nodejs: distro",
        "npm install @anthropic-ai/claude-code@latest",
        "npm install @openai/codex@latest",
        "npm install executor@latest",
        "hermes-agent",
        "installed ",
    ] {
        assert!(transcript.contains(want), "provisioning did not {want:?}");
    }
    assert!(
        !transcript.contains("HB_TOOL_PREFIX=/var/lib/hermes-box-lifecycle-tools"),
        "the local-tools hook leaked in"
    );

    doctor_ok(&mut user, "alpha");

    let enter = user.enter("alpha");
    assert!(enter.ok(), "{enter}");
    assert!(
        enter
            .stdout
            .contains("in-main-as-agent-ca-/etc/hermes-box/node-extra-ca.pem-tools-4-token-set"),
        "box enter did not land in tmux session main as agent with the CA exported, the four \
         agent tools (claude, codex, executor, hermes) on PATH and the MCP token set:\n{enter}"
    );

    // box exec on the pristine guest: the command's exit code and stdout, stdin passed in.
    let mut exec = user.command(&["exec", "alpha", "--", "sh", "-c", "id -un; cat; exit 3"]);
    exec.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = exec.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from-stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "agent\nfrom-stdin\n");
    let (logs, _) = user.phase(
        "logs alpha executor",
        &["logs", "alpha", "executor", "-n", "5"],
    );
    assert!(logs.ok(), "{logs}");

    // Hermes's gateway, the real one provisioning installed, kept up by the workload: on,
    // back after a VM restart, back after a SIGKILL. No messaging account here: the gateway
    // runs its cron scheduler without one (the API-server platform, which needs none, needs
    // Hermes's `messaging` extra, which a box does not install: "API Server: aiohttp not
    // installed"). What is asserted is what Hermes itself records: gateway_state.json says
    // running, with the pid hb supervises, written after the step.
    let since = chrono::Utc::now().timestamp();
    let (on, _) = user.phase(
        "enable the Hermes gateway",
        &[
            "exec",
            "alpha",
            "--",
            "hb",
            "service",
            "enable",
            "hermes-gateway",
        ],
    );
    assert!(
        on.ok() && on.stdout.contains("hermes-gateway: running (pid"),
        "{on}"
    );
    real_gateway_running(&mut user, "alpha", since, None);
    let since = chrono::Utc::now().timestamp();
    for verb in ["stop", "start"] {
        let (r, _) = user.phase(&format!("{verb} alpha (gateway)"), &[verb, "alpha"]);
        assert!(r.ok(), "{r}");
    }
    let pid = real_gateway_running(&mut user, "alpha", since, None);
    let since = chrono::Utc::now().timestamp();
    guest_sh(&user, "alpha", &format!("kill -KILL {pid}"));
    real_gateway_running(&mut user, "alpha", since, Some(pid));

    let marker = sim_support::write_marker(&|a| user.sim(a), "alpha");
    guest_sh(&user, "alpha", ORDINARY);
    let ordinary = guest_sh(&user, "alpha", ORDINARY_LISTING);
    assert!(ordinary.ends_with("\n5000\n"), "{ordinary}");
    let (save, _) = user.phase("save alpha", &["save", "alpha", "--progress=json"]);
    assert!(save.ok(), "{save}");
    let backups = user.backups();
    assert_eq!(backups.len(), 1, "{backups:?}");
    let backup = backups[0].display().to_string();
    // The wrapper's view: the encryption phase ends with the backup's bytes counted.
    let encrypted = save
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["phase"] == "encrypting" && v["finished"] == true)
        .unwrap_or_else(|| panic!("no finished encrypting line: {save}"));
    let size = std::fs::metadata(&backups[0]).unwrap().len();
    let done = encrypted["bytes_done"].as_u64().unwrap();
    assert!(done > 0 && done <= size, "{encrypted} of {size} bytes");

    let (load, _) = user.phase("load into beta", &["load", &backup, "beta"]);
    User::print_steps("load", &load);
    assert!(load.ok(), "{load}");
    sim_support::assert_marker(&|a| user.sim(a), "beta", &marker);
    assert_eq!(
        guest_sh(&user, "beta", ORDINARY_LISTING),
        ordinary,
        "every byte, mode and row of the ordinary data is back"
    );
    assert_images_sparse(&guest_sh(&user, "beta", ORDINARY_BLOCKS), "beta");
    // The gateway was enabled in alpha's /data: the loaded box runs its own.
    real_gateway_running(&mut user, "beta", 0, None);
    extract_as_root_and_user(&mut user, &backup);
    doctor_ok(&mut user, "beta");

    for name in ["alpha", "beta"] {
        let (rm, _) = user.phase(&format!("rm {name}"), &["rm", name, "--force"]);
        assert!(rm.ok(), "{rm}");
    }
    assert!(user.machines().is_empty(), "{:?}", user.machines());
    assert!(
        !user.transcript.contains("first-run-pp-7d1c0a"),
        "the passphrase was printed"
    );
    eprintln!("first-run total: {:.1} s", total.elapsed().as_secs_f64());
}

#[test]
fn without_the_ca_a_tls_inspecting_network_fails_naming_guest_ca_certs() {
    if !prerequisites() {
        return;
    }
    let mut user = User::new("");
    let (new, _) = user.phase("new without GUEST_CA_CERTS", &["new", "gamma"]);
    User::print_steps("new without the CA", &new);
    assert_eq!(new.code, Some(1), "{new}");
    let err = new.stderr.clone();
    assert!(
        err.contains("a TLS certificate was not trusted")
            && err.contains("set GUEST_CA_CERTS in box.env"),
        "the failure does not name GUEST_CA_CERTS:\n{new}"
    );
    // The failed new rolled its VM back.
    assert!(user.machines().is_empty(), "{:?}", user.machines());
}
