//! A base on the user's path (issue 15): the shipped box.env plus `GUEST_CA_CERTS` (this
//! network inspects TLS), a pristine `ubuntu:24.04` (the simulator's Debian 13 stand-in),
//! provisioning from the real network into the base, then `box new` and `box load` from it
//! with no network provisioning, on smolvm 1.0.4 (the ownership quirk and the eviction cap
//! apply), then `box new` and `box load` on 1.9.2 (the shared pack store: the base's layers
//! read-only under every box). Prints the times and the base's size. No host-userland guest, no local tools.
//!
//! Needs root, slirp4netns, mmdebstrap (or the image cache setup.sh fills), the host's CA
//! bundle and the network.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "sim_support/mod.rs"]
mod sim_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sim_support::{Run, box_bin, detach, sibling};

const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

fn prerequisites() -> bool {
    let mut missing = sim_support::missing_root_and_commands(&["slirp4netns", "mmdebstrap"]);
    if !Path::new(CA_BUNDLE).is_file() {
        missing.push(format!("{CA_BUNDLE} (the host's CA bundle)"));
    }
    sim_support::require("pristine base test", &missing)
}

struct User {
    dir: tempfile::TempDir,
    config: PathBuf,
    transcript: String,
}

impl User {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("base-pristine-")
            .tempdir()
            .unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../box.env");
        let mut text: String = std::fs::read_to_string(&shipped)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("GUEST_CA_CERTS=") && !l.starts_with("BACKUP_DIR="))
            .map(|l| format!("{l}\n"))
            .collect();
        text.push_str(&format!("GUEST_CA_CERTS={CA_BUNDLE}\n"));
        text.push_str(&format!(
            "BACKUP_DIR={}\n",
            dir.path().join("backups").display()
        ));
        let config = dir.path().join("box.env");
        std::fs::write(&config, text).unwrap();
        std::fs::write(dir.path().join("passphrase"), "pristine-base-pp-41c9\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sim")).unwrap();
        Self {
            dir,
            config,
            transcript: String::new(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(box_bin());
        cmd.args(args)
            .stdin(Stdio::null())
            .env("BOX_HOME", self.dir.path().join("box-home"))
            .env("BOX_CONFIG", &self.config)
            .env("BOX_PASSPHRASE_FILE", self.dir.path().join("passphrase"))
            .env("SMOLVM", sibling("smolvm-sim"))
            .env("SMOLVM_SIM_HOME", self.dir.path().join("sim"))
            .env("NO_COLOR", "1")
            .env_remove("SMOLVM_SIM_HOST_USERLAND")
            .env_remove("SMOLVM_SIM_IMAGE_MAP")
            // hermes-box's pin, whose quirks the first half is about; the simulator's own
            // default is the newest release it models.
            .env("SMOLVM_SIM_VERSION", "1.0.4")
            .env_remove("SMOLVM_SIM_FAIL")
            .env_remove("BOX_TEST_GUEST_ENV")
            .env_remove("BOX_SMOLVM_TIMEOUT")
            .env_remove("BOX_HB_BINARY")
            .env_remove("BOX_PROVISION_DIR")
            .env_remove("BOX_PASSPHRASE");
        for key in box_proto::box_env::KEYS {
            cmd.env_remove(key);
        }
        for key in box_proto::proxy::NAMES {
            cmd.env_remove(key).env_remove(key.to_ascii_lowercase());
        }
        detach(&mut cmd);
        cmd
    }

    fn timed(&mut self, label: &str, args: &[&str]) -> (Run, f64) {
        self.timed_on(None, label, args)
    }

    /// [`Self::timed`] with `SMOLVM_SIM_VERSION=version` (None: 1.0.4, the pin).
    fn timed_on(&mut self, version: Option<&str>, label: &str, args: &[&str]) -> (Run, f64) {
        let mut cmd = self.command(args);
        if let Some(v) = version {
            cmd.env("SMOLVM_SIM_VERSION", v);
        }
        let t = Instant::now();
        let run = Run::from(&cmd.output().unwrap());
        let secs = t.elapsed().as_secs_f64();
        eprintln!("base-pristine phase {label}: {secs:.1} s");
        self.transcript
            .push_str(&format!("$ box {}\n{run}\n", args.join(" ")));
        (run, secs)
    }
}

impl User {
    /// `smolvm-sim args…` in this user's world (`version`: SMOLVM_SIM_VERSION).
    fn sim(&self, version: Option<&str>, args: &[&str]) -> std::io::Result<std::process::Output> {
        let mut cmd = Command::new(sibling("smolvm-sim"));
        cmd.args(args)
            .env("SMOLVM_SIM_HOME", self.dir.path().join("sim"))
            .stdin(Stdio::null());
        if let Some(v) = version {
            cmd.env("SMOLVM_SIM_VERSION", v);
        }
        cmd.output()
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if let Ok(out) = self.sim(None, &["machine", "ls", "--json"]) {
            for (name, _) in sim_support::parse_machines(&out.stdout) {
                let _ = self.sim(None, &["machine", "delete", "--name", &name, "-f"]);
            }
        }
    }
}

#[test]
fn pristine_base_then_new_and_load_without_network_provisioning() {
    if !prerequisites() {
        return;
    }
    let mut u = User::new();
    let (build, build_secs) = u.timed("base build", &["base", "build"]);
    assert!(build.ok(), "{build}");
    assert!(build.stdout.contains("apt-packages"), "{build}");
    let ls = u.command(&["base", "ls", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let size = v[0]["size_bytes"].as_u64().unwrap();
    let digest = v[0]["key"].as_str().unwrap().to_string();

    let (new, new_secs) = u.timed("new alpha from base", &["new", "alpha"]);
    assert!(new.ok(), "{new}");
    assert!(new.stdout.contains(&format!("from base {digest}")), "{new}");
    assert!(
        !new.stdout.contains("apt-packages") && !new.stdout.contains("npm-tools"),
        "no network provisioning: {new}"
    );
    assert!(
        new.stdout.contains("repaired ownership"),
        "1.0.4 returned root's files as the host user: {new}"
    );
    let (doctor, _) = u.timed("doctor alpha", &["doctor", "alpha"]);
    assert!(doctor.ok(), "{doctor}");
    let marker = sim_support::write_marker(&|a| u.sim(None, a).unwrap(), "alpha");
    let (save, _) = u.timed("save alpha", &["save", "alpha"]);
    assert!(save.ok(), "{save}");
    let backup = std::fs::read_dir(u.dir.path().join("backups"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tar.zst.gpg"))
        .unwrap();
    // alpha stays (the default port range has room): deleting a 2 GiB guest tree in the
    // simulator can outlast box's 90 s delete deadline on a loaded host.
    let (load, load_secs) = u.timed(
        "load into beta from base",
        &["load", backup.to_str().unwrap(), "beta"],
    );
    assert!(load.ok(), "{load}");
    assert!(
        load.stdout.contains(&format!("Using base {digest}")),
        "{load}"
    );
    sim_support::assert_marker(&|a| u.sim(None, a).unwrap(), "beta", &marker);
    let (doctor, _) = u.timed("doctor beta", &["doctor", "beta"]);
    assert!(doctor.ok(), "{doctor}");
    // smolvm 1.9 on Linux: the shared pack store. The base is extracted once (by gamma's
    // create) and every box boots its layers read-only, where a rename of a directory fails
    // with EXDEV: the load (hb import swaps /data by rename) must still work.
    let v19 = Some("1.9.2");
    let (new19, new19_secs) = u.timed_on(v19, "new gamma from base (1.9.2)", &["new", "gamma"]);
    assert!(new19.ok(), "{new19}");
    assert!(
        new19.stdout.contains(&format!("from base {digest}")),
        "{new19}"
    );
    let (load19, load19_secs) = u.timed_on(
        v19,
        "load into delta from base (1.9.2, warm)",
        &["load", backup.to_str().unwrap(), "delta"],
    );
    assert!(load19.ok(), "{load19}");
    sim_support::assert_marker(&|a| u.sim(v19, a).unwrap(), "delta", &marker);
    let (doctor, _) = u.timed_on(v19, "doctor delta", &["doctor", "delta"]);
    assert!(doctor.ok(), "{doctor}");
    eprintln!(
        "BENCH pristine base (ubuntu:24.04 -> debian:13 stand-in): build {build_secs:.1} s, \
         pack {:.0} MiB; 1.0.4: new from base {new_secs:.1} s, load from base {load_secs:.1} s; \
         1.9.2: new (first, extracts) {new19_secs:.1} s, load (warm) {load19_secs:.1} s",
        size as f64 / 1048576.0
    );
    assert!(!u.transcript.contains("pristine-base-pp-41c9"));
}
