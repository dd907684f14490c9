//! Opt-in: provisioning inside a smolvm-sim machine (a namespaced guest on this machine's
//! userland), twice, the second run changing nothing. `box new` in box-host's lifecycle
//! tests runs the first provisioning through the simulator as well; this test pins the
//! idempotence of provision.sh there.
//!
//! Run: `HB_TEST_PROVISION_SIM=1 cargo test -p hb-guest --test provision_sim` after
//! `cargo build -p smolvm-sim` (or point SMOLVM_SIM at a smolvm-sim binary). It uses the
//! npm tools scripts/setup.sh links into /var/lib/hermes-box-lifecycle-tools (guests see
//! the host's /var, not its /opt). Takes ~10 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TOOLS: &str = "/var/lib/hermes-box-lifecycle-tools";

fn sim_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SMOLVM_SIM") {
        return Some(PathBuf::from(p));
    }
    let sibling = common::hb_bin().with_file_name("smolvm-sim");
    sibling.is_file().then_some(sibling)
}

struct Machine {
    sim: PathBuf,
    home: tempfile::TempDir,
    name: String,
}

impl Machine {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.sim)
            .args(args)
            .env("SMOLVM_SIM_HOME", self.home.path())
            // Fast-test shortcut, named: the guest runs on this host's userland.
            .env("SMOLVM_SIM_HOST_USERLAND", "1")
            .env_remove("SMOLVM_SIM_FAIL")
            .output()
            .unwrap()
    }
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "smolvm-sim {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn copy_in(&self, local: &Path, guest: &str) {
        self.ok(&[
            "machine",
            "cp",
            &local.display().to_string(),
            &format!("{}:{guest}", self.name),
        ]);
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = self.run(&["machine", "stop", "--name", &self.name]);
        let _ = self.run(&["machine", "delete", "--name", &self.name, "-f"]);
    }
}

#[test]
fn provisioning_in_a_simulator_machine_is_idempotent() {
    if std::env::var("HB_TEST_PROVISION_SIM").map_or(true, |v| v != "1") {
        eprintln!("SKIP: opt-in; set HB_TEST_PROVISION_SIM=1");
        return;
    }
    let sim =
        sim_bin().expect("smolvm-sim not built: cargo build -p smolvm-sim, or set SMOLVM_SIM");
    assert!(
        Path::new(TOOLS).join("bin/executor").exists(),
        "run scripts/setup.sh first ({TOOLS})"
    );
    let m = Machine {
        sim,
        home: tempfile::tempdir().unwrap(),
        name: format!("hbprov{}", std::process::id()),
    };
    m.ok(&[
        "machine",
        "create",
        "--name",
        &m.name,
        "--net",
        "--",
        "/bin/sh",
        "-c",
        "while true; do sleep 3600; done",
    ]);
    m.ok(&["machine", "start", "--name", &m.name]);
    m.copy_in(&common::hb_bin(), "/usr/local/bin/hb");
    m.ok(&[
        "machine",
        "exec",
        "--name",
        &m.name,
        "--",
        "chmod",
        "0755",
        "/usr/local/bin/hb",
    ]);
    m.ok(&[
        "machine",
        "exec",
        "--name",
        &m.name,
        "--",
        "mkdir",
        "-p",
        "/opt/hermes-box/provision",
    ]);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../provision");
    for f in [
        "provision.sh",
        "profile.sh",
        "agent-bash-profile.sh",
        "tmux.conf",
    ] {
        m.copy_in(&dir.join(f), &format!("/opt/hermes-box/provision/{f}"));
    }
    let env = m.home.path().join("hermes-box.env");
    std::fs::write(&env, "INSTALL_HERMES=0\n").unwrap();
    m.copy_in(&env, "/etc/hermes-box.env");
    let path =
        format!("PATH={TOOLS}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    let prefix = format!("HB_TOOL_PREFIX={TOOLS}");
    let provision = || {
        m.ok(&[
            "machine",
            "exec",
            "--name",
            &m.name,
            "-e",
            &prefix,
            "-e",
            &path,
            "--",
            "/bin/bash",
            "/opt/hermes-box/provision/provision.sh",
        ])
    };
    let first = provision();
    assert!(
        first.contains("==> provisioning complete; changed:"),
        "{first}"
    );
    let second = provision();
    assert!(
        second.contains("==> provisioning: already provisioned, nothing changed"),
        "{second}"
    );
    let doctor = m.run(&[
        "machine", "exec", "--name", &m.name, "-e", &path, "--", "hb", "doctor",
    ]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("✓ durable layout and permissions"), "{text}");
    assert!(text.contains("✓ login profile present"), "{text}");
}
