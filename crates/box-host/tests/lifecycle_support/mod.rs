//! Shared harness of the lifecycle tests: the real `box`, the smolvm simulator with real
//! namespaced guests, and the real `hb` inside them. Each test gets its own BOX_HOME,
//! SMOLVM_SIM_HOME and a free pair of host ports, and every machine is deleted at the end.
#![allow(dead_code)]

#[path = "../sim_support/mod.rs"]
mod sim_support;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use box_host::state::{LockGuard, LockKey, StateDir, locks};
use box_proto::BoxName;
pub use sim_support::{Run, box_bin, sibling};

/// The lifecycle tests share the CPU (two cores in CI) and host ports: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Root and the guest tools; see [`sim_support::prerequisites`].
pub fn prerequisites() -> bool {
    sim_support::prerequisites("lifecycle tests", &[])
}

/// [`sim_support::secret_surfaces`] but the unredacted call log, for a secret that belongs
/// in one call's environment (a bound API key in `machine start`'s); the caller checks that
/// log itself.
pub fn secret_surfaces_but_raw_calls(
    home: &std::path::Path,
    sim_home: &std::path::Path,
) -> Vec<(String, String)> {
    sim_support::secret_surfaces(home, sim_home)
        .into_iter()
        .filter(|(p, _)| !p.ends_with(sim_support::RAW_CALL_LOG))
        .collect()
}

/// The simulator's unredacted call log under `sim_home` has `secret` only in the environment
/// of `machine start` (a bound API key), never on an argv.
pub fn assert_only_in_start_env(sim_home: &std::path::Path, secret: &str) {
    sim_support::assert_only_in_start_env(&sim_support::raw_call_log(sim_home), secret);
}

/// See [`sim_support::assert_start_env_lacks`].
pub fn assert_start_env_lacks(sim_home: &std::path::Path, secret: &str, var: &str) {
    sim_support::assert_start_env_lacks(&sim_support::raw_call_log(sim_home), secret, var);
}

/// One test's world.
pub struct World {
    _serial: MutexGuard<'static, ()>,
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub sim_home: PathBuf,
    pub config: PathBuf,
    pub version: String,
    pub port_lo: u16,
    pub port_hi: u16,
    /// Everything `box` printed in this world, for secret scans.
    pub transcript: String,
    pub extra_env: Vec<(String, String)>,
}

fn free_port_pair() -> u16 {
    for _ in 0..200 {
        // Below the ephemeral ports (32768 up), which outgoing connections take.
        let base = 10000 + rand::random::<u16>() % 22000;
        let ok = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if ok(base) && ok(base + 1) {
            return base;
        }
    }
    panic!("no free port pair for the test");
}

impl World {
    pub fn new(version: &str) -> Self {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("box-home");
        let sim_home = dir.path().join("sim-home");
        std::fs::create_dir_all(&sim_home).unwrap();
        let port_lo = free_port_pair();
        let config = dir.path().join("box.env");
        std::fs::write(
            &config,
            format!(
                "# lifecycle test config: tools the host has, no network installs\n\
                 INSTALL_HERMES=0\n\
                 NODE_MAJOR=20\n\
                 CLAUDE_CODE_VERSION=2.1.197\n\
                 CODEX_VERSION=0.171.0\n\
                 EXECUTOR_VERSION=1.5.9\n\
                 EXECUTOR_PORT_LO={port_lo}\n\
                 EXECUTOR_PORT_HI={}\n\
                 BOX_CPUS=2\n\
                 BOX_MEM_MIB=2048\n\
                 BACKUP_DIR={}\n",
                port_lo + 1,
                dir.path().join("backups").display()
            ),
        )
        .unwrap();
        Self {
            _serial: serial,
            home,
            sim_home,
            config,
            version: version.to_string(),
            port_lo,
            port_hi: port_lo + 1,
            dir,
            transcript: String::new(),
            extra_env: Vec::new(),
        }
    }

    /// Environment for `box` and the simulator.
    fn apply_env(&self, cmd: &mut Command) {
        cmd.env("BOX_HOME", &self.home)
            .env("BOX_CONFIG", &self.config)
            .env("SMOLVM", sibling("smolvm-sim"))
            .env("SMOLVM_SIM_HOME", &self.sim_home)
            // Fast-test shortcut, named: guests run on this host's userland, not a pristine
            // image (the first-run test is the one that takes the user's path).
            .env("SMOLVM_SIM_HOST_USERLAND", "1")
            .env("SMOLVM_SIM_VERSION", &self.version)
            .env(
                "SMOLVM_SIM_RAW_CALL_LOG",
                sim_support::raw_call_log(&self.sim_home),
            )
            .env("BOX_TEST_GUEST_ENV", sim_support::guest_env())
            .env("NO_COLOR", "1")
            .env_remove("SMOLVM_SIM_FAIL")
            .env_remove("BOX_SMOLVM_TIMEOUT")
            .env_remove("BOX_SKIP_PROVISION")
            .env_remove("BOX_BROWSER")
            .env_remove("BOX_KEEP_ON_FAILURE")
            .env_remove("INSTALL_EXECUTOR")
            .env_remove("EXPOSE_EXECUTOR_WEB")
            .env_remove("BOX_HB_BINARY")
            .env_remove("BOX_PROVISION_DIR");
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
    }

    pub fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(box_bin());
        cmd.args(args).stdin(Stdio::null());
        self.apply_env(&mut cmd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        sim_support::detach(&mut cmd);
        cmd
    }

    /// Runs `box args…` with extra environment and waits (bounded by the call deadlines).
    pub fn run_env(&mut self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let out = self.command(args, env).output().unwrap();
        let run = Run::from(&out);
        self.transcript
            .push_str(&format!("$ box {}\n{run}\n", args.join(" ")));
        run
    }

    pub fn run(&mut self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// Starts `box args…` in the background, output piped.
    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = self.command(args, env);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    pub fn collect(&mut self, child: Child, label: &str) -> Run {
        let run = Run::from(&child.wait_with_output().unwrap());
        self.transcript.push_str(&format!("$ {label}\n{run}\n"));
        run
    }

    /// The simulator directly (for inspection and cleanup), without faults.
    pub fn sim(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(sibling("smolvm-sim"));
        cmd.args(args).stdin(Stdio::null());
        self.apply_env(&mut cmd);
        cmd.output().unwrap()
    }

    /// `hb ARGS` in `machine`, as root, straight through the simulator.
    pub fn hb(&self, machine: &str, args: &[&str]) -> Output {
        sim_support::guest_hb(&|a| self.sim(a), machine, args)
    }

    /// Writes a marker into `machine`'s agent home (see [`sim_support::write_marker`]).
    pub fn write_marker(&self, machine: &str) -> String {
        sim_support::write_marker(&|args| self.sim(args), machine)
    }

    /// The marker written before a save is in the loaded box `machine`.
    pub fn assert_marker(&self, machine: &str, content: &str) {
        sim_support::assert_marker(&|args| self.sim(args), machine, content)
    }

    /// `(name, state)` of every machine the simulator has.
    pub fn machines(&self) -> Vec<(String, String)> {
        let out = self.sim(&["machine", "ls", "--json"]);
        assert!(
            out.status.success(),
            "sim ls failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        sim_support::parse_machines(&out.stdout)
    }

    /// argv (after the program) of every smolvm call so far.
    pub fn calls(&self) -> Vec<Vec<String>> {
        sim_support::logged_calls(&self.sim_home)
    }

    pub fn calls_text(&self) -> String {
        std::fs::read_to_string(self.sim_home.join("calls.jsonl")).unwrap_or_default()
    }

    /// Whether some call's argv starts with `prefix`.
    pub fn called(&self, prefix: &[&str]) -> bool {
        self.calls()
            .iter()
            .any(|c| c.len() >= prefix.len() && c.iter().zip(prefix).all(|(a, b)| a == b))
    }

    pub fn state(&self) -> StateDir {
        StateDir::at(self.home.clone())
    }

    pub fn row_exists(&self, name: &str) -> bool {
        self.home
            .join("boxes")
            .join(format!("{name}.json"))
            .exists()
    }

    pub fn row(&self, name: &str) -> serde_json::Value {
        let text =
            std::fs::read_to_string(self.home.join("boxes").join(format!("{name}.json"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Takes a lock from this (another) process, as a concurrent `box` would.
    pub fn hold(&self, key: LockKey, operation: &str) -> LockGuard {
        locks::try_acquire(&self.state(), key, operation).unwrap()
    }

    /// Asserts that neither the registry lock nor `name`'s lock is held by anyone.
    pub fn assert_no_locks(&self, name: &str) {
        let state = self.state();
        locks::try_acquire(&state, LockKey::Registry, "test").expect("registry lock still held");
        locks::try_acquire(&state, LockKey::Box(BoxName::parse(name).unwrap()), "test")
            .expect("box lock still held");
    }

    /// Waits until a smolvm call containing `needle` in its argv has been logged.
    pub fn wait_for_call(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.calls().iter().any(|c| c.join(" ").contains(needle)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "no smolvm call with {needle:?} within {timeout:?}; calls:\n{}",
            self.calls_text()
        );
    }

    /// Asserts none of `secrets` is in box's output, anywhere in its state dir, or in what
    /// the simulator recorded (machine records, redacted and unredacted call logs). Call it
    /// before `box rm` removes the rows and records.
    pub fn assert_no_secrets(&self, secrets: &[String]) {
        let mut surfaces = sim_support::secret_surfaces(&self.home, &self.sim_home);
        surfaces.push(("box output".into(), self.transcript.clone()));
        sim_support::assert_no_secrets(&surfaces, secrets);
    }

    /// Every log file box wrote, concatenated.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        if let Ok(rd) = std::fs::read_dir(self.home.join("logs")) {
            for e in rd.flatten() {
                all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        all
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Always leave no machine behind, whatever the test did.
        let out = self.sim(&["machine", "ls", "--json"]);
        for (name, _) in sim_support::parse_machines(&out.stdout) {
            let _ = self.sim(&["machine", "delete", "--name", &name, "-f"]);
        }
    }
}
