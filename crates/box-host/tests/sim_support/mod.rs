//! What the simulator-backed harnesses (lifecycle_support, save_load_support) share: the
//! binaries under test, the prerequisites check, a finished run, the guest tool prefix, and
//! reading the simulator's machine list and call log.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The npm tools (executor 1.5.9, codex, claude) as simulator guests see them: the
/// simulator gives each guest an empty /opt (as a stock image has), but overlays the host's
/// /var, so scripts/setup.sh (host lifecycle section) hard-links /opt/hermes-box-ci here.
/// Provisioning finds them through HB_TOOL_PREFIX and installs nothing from the network.
pub const TOOL_PREFIX: &str = "/var/lib/hermes-box-lifecycle-tools";

/// `BOX_TEST_GUEST_ENV`: how provisioning inside a guest finds the tools above.
pub fn guest_env() -> String {
    format!(
        "HB_TOOL_PREFIX={TOOL_PREFIX},PATH={TOOL_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )
}

pub fn box_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_box"))
}

/// `smolvm-sim` and `hb` are built beside `box` by `cargo test --workspace`.
pub fn sibling(name: &str) -> PathBuf {
    let p = box_bin().with_file_name(name);
    assert!(
        p.is_file(),
        "{} is missing: build it first (cargo build -p smolvm-sim -p hb-guest, or cargo test --workspace)",
        p.display()
    );
    p
}

/// Root (the simulator builds namespaced guests), the npm tools under [`TOOL_PREFIX`] and
/// the host `commands` a suite needs. Missing: fail under CI=true, else skip with the
/// reason (`suite` names who needs them).
pub fn prerequisites(suite: &str, commands: &[&str]) -> bool {
    let mut missing = missing_root_and_commands(commands);
    for t in ["executor", "codex", "claude"] {
        if !Path::new(TOOL_PREFIX).join("bin").join(t).exists() {
            missing.push(format!(
                "{TOOL_PREFIX}/bin/{t} (run scripts/setup.sh, which links the CI tools there for simulator guests)"
            ));
        }
    }
    require(suite, &missing)
}

/// What of root and the host `commands` is missing, each with how to get it.
pub fn missing_root_and_commands(commands: &[&str]) -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root (the simulator builds namespaced guests)".to_string());
    }
    for t in commands {
        if Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            missing.push(format!("{t} (apt-get install it; scripts/setup.sh does)"));
        }
    }
    missing
}

/// Nothing missing: true. Otherwise fail under CI=true, else print a visible
/// `SKIPPED: <suite> need: …` line and return false.
pub fn require(suite: &str, missing: &[String]) -> bool {
    if missing.is_empty() {
        return true;
    }
    let why = format!("{suite} need: {}", missing.join(", "));
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    {
        // Written past libtest's capture (eprintln! of a passing test is hidden).
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    }
    false
}

/// No controlling terminal and a process group of its own, as in CI: `box rm` must refuse
/// without --force, and a signal to the test does not reach `box`.
pub fn detach(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// What a finished `box` call printed.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: &Output) -> Self {
        Self {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `(name, state)` of every machine in `smolvm machine ls --json` output, sorted.
pub fn parse_machines(json: &[u8]) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    let mut machines: Vec<(String, String)> = v
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["name"].as_str().unwrap_or("").to_string(),
                        m["state"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    machines.sort();
    machines
}

/// argv (after the program) of every smolvm call the simulator logged under `sim_home`.
pub fn logged_calls(sim_home: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(sim_home.join("calls.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            v["argv"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .skip(1)
                        .map(|s| s.as_str().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// File name (under the simulator home) of the simulator's TEST-ONLY unredacted call log:
/// argv and environment of every smolvm call, as `ps` and /proc/<pid>/environ show them.
pub const RAW_CALL_LOG: &str = "raw-calls.jsonl";

/// `SMOLVM_SIM_RAW_CALL_LOG` for a world whose simulator home is `sim_home`.
pub fn raw_call_log(sim_home: &Path) -> PathBuf {
    sim_home.join(RAW_CALL_LOG)
}

/// The user's path for a `box` or simulator command: none of box's or the simulator's test
/// hooks (host-userland guests, image map, version, faults, local tools, binaries, deadlines),
/// no passphrase, no box.env key and no proxy from the environment the tests run in: every
/// setting comes from the box.env file, as for a user who exported none.
pub fn users_path(cmd: &mut Command) {
    for hook in [
        "SMOLVM_SIM_HOST_USERLAND",
        "SMOLVM_SIM_IMAGE_MAP",
        "SMOLVM_SIM_VERSION",
        "SMOLVM_SIM_FAIL",
        "BOX_TEST_GUEST_ENV",
        "BOX_SMOLVM_TIMEOUT",
        "BOX_KEEP_ON_FAILURE",
        "BOX_HB_BINARY",
        "BOX_PROVISION_DIR",
        "BOX_PASSPHRASE",
    ] {
        cmd.env_remove(hook);
    }
    for key in box_proto::box_env::KEYS {
        cmd.env_remove(key);
    }
    for key in box_proto::proxy::NAMES {
        cmd.env_remove(key).env_remove(key.to_ascii_lowercase());
    }
}

/// The unredacted call log at `raw_log` has `secret` only in the environment of `machine
/// start` (where smolvm reads a bound API key), never on any call's argv.
pub fn assert_only_in_start_env(raw_log: &Path, secret: &str) {
    let raw = std::fs::read_to_string(raw_log).unwrap_or_default();
    // Every caller bound the key: a log without it (not written, or no longer recording
    // environments) would make the check below pass on nothing.
    assert!(
        raw.lines().any(|l| l.contains(secret)),
        "the raw call log {} never shows the key: this check proves nothing",
        raw_log.display()
    );
    for line in raw.lines().filter(|l| l.contains(secret)) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        let argv: Vec<&str> = v["argv"]
            .as_array()
            .map(|a| a.iter().filter_map(|a| a.as_str()).collect())
            .unwrap_or_default();
        assert!(
            argv.get(1..3) == Some(&["machine", "start"][..])
                && !argv.iter().any(|a| a.contains(secret)),
            "the secret reached the call {:?}",
            argv.iter()
                .map(|a| a.replace(secret, "<SECRET>"))
                .collect::<Vec<_>>()
        );
    }
}

/// The calls that hold `secret` (the keyed `machine start`s) have no `var` in their
/// environment, while other calls of the same shell do (so the check is not vacuous).
pub fn assert_start_env_lacks(raw_log: &Path, secret: &str, var: &str) {
    let raw = std::fs::read_to_string(raw_log).unwrap_or_default();
    let calls: Vec<serde_json::Value> = raw
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let holds = |c: &serde_json::Value| c.to_string().contains(secret);
    assert!(
        calls.iter().any(holds),
        "no call holds the key: this check proves nothing"
    );
    assert!(
        calls
            .iter()
            .any(|c| !holds(c) && c["env"].get(var).is_some()),
        "no other call had {var}: this check proves nothing"
    );
    for c in calls.iter().filter(|c| holds(c)) {
        assert!(
            c["env"].get(var).is_none(),
            "the keyed call {} got {var}",
            c["argv"]
        );
    }
}

/// Every place a secret could leak to on the host, as `(what, text)`: every file of box's
/// state dir (registry rows, locks, logs, scratch), the simulator's machine records (its
/// "DB": create flags and env), its redacted and unredacted call logs. The guests' disks
/// (`vms/`) are left out: the guest is where the token belongs. Read before anything is
/// removed, so `box rm` cannot hide a leak.
pub fn secret_surfaces(state_dir: &Path, sim_home: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, skip: &[&str], out: &mut Vec<(String, String)>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                if !skip.contains(&name.as_str()) {
                    walk(&p, &[], out);
                }
            } else if m.is_file() && (m.len() < (8 << 20) || name.ends_with(".jsonl")) {
                // Large files are data (images, backups); the call logs are read whatever
                // their size: a heavy fault run's unredacted log passes 8 MiB.
                let bytes = std::fs::read(&p).unwrap_or_default();
                out.push((
                    p.display().to_string(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ));
            }
        }
    }
    let mut out = Vec::new();
    walk(state_dir, &[], &mut out);
    walk(sim_home, &["vms"], &mut out);
    // Any smolvm call at all (the redacted log) must have its unredacted line too.
    let logged = |name: &str| out.iter().any(|(p, _)| p.ends_with(name));
    assert!(
        !logged("calls.jsonl") || logged(RAW_CALL_LOG),
        "the simulator wrote no unredacted call log ({RAW_CALL_LOG}): the scan would see nothing"
    );
    out
}

/// Asserts that no `secret` appears in any of `surfaces` (the value is never printed).
pub fn assert_no_secrets(surfaces: &[(String, String)], secrets: &[String]) {
    for (what, text) in surfaces {
        for (i, s) in secrets.iter().enumerate() {
            assert!(
                s.is_empty() || !text.contains(s.as_str()),
                "secret #{i} leaked into {what}"
            );
        }
    }
}

/// Where [`write_marker`] leaves its file: the agent's home, which `box save` archives and
/// `box load` restores.
pub const MARKER: &str = "/data/home/agent/.box-test-marker";

/// `sh -c script sh args…` in `machine` (the arguments as `$1`…, never spliced into it).
fn guest_sh(sim: &dyn Fn(&[&str]) -> Output, machine: &str, script: &str, args: &[&str]) -> Output {
    let mut argv = vec![
        "machine", "exec", "--name", machine, "--", "sh", "-c", script, "sh",
    ];
    argv.extend_from_slice(args);
    sim(&argv)
}

/// `hb ARGS` in `machine`, as root, straight through the simulator (not through box).
pub fn guest_hb(sim: &dyn Fn(&[&str]) -> Output, machine: &str, args: &[&str]) -> Output {
    let mut argv = vec![
        "machine",
        "exec",
        "--name",
        machine,
        "--",
        "/usr/local/bin/hb",
    ];
    argv.extend_from_slice(args);
    sim(&argv)
}

/// Writes a file of content unique to this run into `machine`'s agent home, owned by the
/// agent as the user's own files are, before a `box save`; returns the content for
/// [`assert_marker`] on the box a load of that backup made. `sim` runs smolvm-sim with the
/// world's environment. Without it a load could restore nothing and still pass.
pub fn write_marker(sim: &dyn Fn(&[&str]) -> Output, machine: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let content = format!(
        "saved from {machine} at {nanos} by test pid {}",
        std::process::id()
    );
    let out = guest_sh(
        sim,
        machine,
        r#"printf '%s\n' "$1" >"$2" && chown agent:agent "$2""#,
        &[&content, MARKER],
    );
    assert!(
        out.status.success(),
        "cannot write the marker into {machine}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    content
}

/// The marker [`write_marker`] left before the save is in `machine` (a loaded box), with
/// the same content and owner.
pub fn assert_marker(sim: &dyn Fn(&[&str]) -> Output, machine: &str, content: &str) {
    let out = guest_sh(sim, machine, r#"stat -c %U "$1" && cat "$1""#, &[MARKER]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("agent\n{content}\n"),
        "the loaded box {machine} lacks what was saved ({MARKER}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
