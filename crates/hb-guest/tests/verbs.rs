//! The smaller verbs: init (layout, modes, no symlink following), write-manifest, status
//! without a workload, logs, down without a workload, resume without a quiesce.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::MetadataExt;

use common::{Box_, mode};

#[test]
fn init_creates_the_layout_idempotently_and_refuses_symlinks() {
    let b = Box_::new();
    b.init();
    let data = b.data();
    assert_eq!(mode(&data), 0o711);
    assert_eq!(mode(&data.join("home")), 0o711);
    for d in [
        "",
        ".config/hermes-box",
        ".executor",
        ".claude",
        ".codex",
        ".hermes",
        "workspace",
    ] {
        assert_eq!(mode(&b.home().join(d)), 0o700, "{d}");
    }
    assert_eq!(mode(&data.join("logs")), 0o700);
    // The agent's files inside are not touched by a re-run.
    std::fs::write(b.home().join("workspace/notes.txt"), "mine").unwrap();
    std::fs::set_permissions(
        b.home().join("workspace/notes.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    b.init();
    assert_eq!(mode(&b.home().join("workspace/notes.txt")), 0o644);

    // A managed dir replaced by a symlink (e.g. to /etc) is refused, never chmod'ed through.
    let target = b.dir.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::remove_dir(b.home().join(".codex")).unwrap();
    std::os::unix::fs::symlink(&target, b.home().join(".codex")).unwrap();
    let out = b.run(&["init"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a symlink"));
    assert_eq!(mode(&target), 0o755);
}

/// `init --paused` (a box about to be restored into) leaves the pause marker with the
/// layout, before the workload could start Executor on it; a later plain `init` keeps it.
#[test]
fn init_paused_leaves_the_pause_marker_and_a_plain_init_keeps_it() {
    let b = Box_::new();
    b.ok(&["init", "--paused"]);
    let marker = b.hb_config().join("quiesced");
    let text = std::fs::read_to_string(&marker).unwrap();
    assert!(text.starts_with("paused by hb init --paused at "), "{text}");
    assert_eq!(
        mode(&b.home().join("workspace")),
        0o700,
        "the rest of the layout"
    );
    b.init();
    assert!(marker.exists());
}

/// The manifest names the `box` and smolvm that made the box as `box` passes them; a rewrite
/// without them (quiesce, provisioning) keeps them; one no `box` ever wrote says `unknown`.
#[test]
fn write_manifest_records_the_host_versions_box_passes() {
    let b = Box_::new();
    b.init();
    let path = b.hb_config().join("runtime-manifest");
    let read =
        || box_proto::RuntimeManifest::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    b.ok(&["write-manifest"]);
    assert_eq!(read().get("box"), Some("unknown"));
    assert_eq!(read().get("smolvm"), Some("unknown"));
    b.ok(&[
        "write-manifest",
        "--box-version",
        "0.1.0 (abc123)",
        "--smolvm-version",
        "1.9.2",
    ]);
    b.ok(&["write-manifest"]);
    let m = read();
    assert_eq!(m.get("box"), Some("0.1.0 (abc123)"));
    assert_eq!(m.get("smolvm"), Some("1.9.2"));
    assert!(m.get("hb").unwrap().starts_with(env!("CARGO_PKG_VERSION")));
    // A hostile value cannot add a line of its own.
    b.ok(&["write-manifest", "--box-version", "1\nhb=forged"]);
    let m = read();
    assert_eq!(m.get("box"), Some("1 hb=forged"));
    assert!(m.get("hb").unwrap().starts_with(env!("CARGO_PKG_VERSION")));
}

/// The policy `box` passes at a save lands in the manifest (what `box load` reads back);
/// rewrites without it (quiesce, provisioning) keep it; a key that is not a policy key, or a
/// value with a control character, is refused and changes nothing.
#[test]
fn write_manifest_records_the_policy_box_passes() {
    let b = Box_::new();
    b.init();
    let path = b.hb_config().join("runtime-manifest");
    let read =
        || box_proto::RuntimeManifest::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    b.ok(&[
        "write-manifest",
        "--policy",
        "egress=allowlist",
        "--policy",
        "credentials=ANTHROPIC_API_KEY@api.anthropic.com",
        "--policy",
        "egress_allow_hosts=",
    ]);
    b.ok(&["write-manifest"]);
    let m = read();
    assert_eq!(m.get("egress"), Some("allowlist"));
    assert_eq!(
        m.get("credentials"),
        Some("ANTHROPIC_API_KEY@api.anthropic.com")
    );
    assert_eq!(m.get("egress_allow_hosts"), Some(""));
    let before = std::fs::read_to_string(&path).unwrap();
    for (bad, why) in [
        ("box=forged", "'box' is not a policy key"),
        ("egress", "expected KEY=VALUE"),
        ("egress=open\nhb=forged", "control character"),
    ] {
        let out = b.run(&["write-manifest", "--policy", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{bad:?}: {err}");
    }
    // A refused word changes nothing: no forged key, no other value.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn write_manifest_is_private_atomic_and_keeps_unknown_keys() {
    let b = Box_::new();
    b.init();
    let path = b.hb_config().join("runtime-manifest");
    std::fs::write(&path, "created_at=old\nfuture_key=kept\n").unwrap();
    b.ok(&["write-manifest"]);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(
        std::fs::metadata(&path).unwrap().uid(),
        nix::unistd::Uid::effective().as_raw()
    );
    let m = box_proto::RuntimeManifest::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for k in box_proto::manifest::KNOWN_KEYS {
        assert!(m.get(k).is_some(), "{k} missing");
    }
    assert_eq!(m.get("future_key"), Some("kept"));
    assert_ne!(m.get("created_at"), Some("old"));
    assert!(m.get("hb").unwrap().starts_with(env!("CARGO_PKG_VERSION")));
    let leftovers: Vec<_> = std::fs::read_dir(b.hb_config())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn status_and_down_without_a_workload() {
    let b = Box_::new();
    b.init();
    let s: serde_json::Value = serde_json::from_str(&b.ok(&["status", "--json"])).unwrap();
    assert_eq!(s["executor"]["state"], "stopped");
    assert!(s["workload"].is_null());
    assert!(s["memory"]["total_bytes"].as_u64().unwrap() > 0);
    assert!(s["data"]["total_bytes"].as_u64().unwrap() > 0);
    let human = b.ok(&["status"]);
    assert!(human.starts_with("executor: stopped"), "{human}");
    // Down with nothing running: the marker is written and the port is already closed.
    b.ok(&["down"]);
    assert!(b.hb_config().join("quiesced").exists());
    let s: serde_json::Value = serde_json::from_str(&b.ok(&["status", "--json"])).unwrap();
    assert_eq!(s["executor"]["state"], "paused");
    let r = b.ok(&["resume"]);
    assert!(r.contains("nothing to resume"), "{r}");
    assert!(
        b.hb_config().join("quiesced").exists(),
        "resume without a quiesce must not clear a pause"
    );
}

#[test]
fn logs_shows_the_tail_and_rejects_unknown_services() {
    let b = Box_::new();
    b.init();
    let lines: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    std::fs::write(b.data().join("logs/executor.log"), lines).unwrap();
    assert_eq!(b.ok(&["logs", "executor", "-n", "2"]), "line 49\nline 50\n");
    let out = b.run(&["logs", "../../etc/passwd"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown service"));
    let out = b.run(&["logs"]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn logs_follow_sees_new_lines_and_survives_rotation() {
    use std::io::{BufRead, BufReader, Write};
    let b = Box_::new();
    b.init();
    let log = b.data().join("logs/executor.log");
    std::fs::write(&log, "old 1\nold 2\n").unwrap();
    let mut child = b
        .hb(&["logs", "executor", "-f", "-n", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // Watchdog: a follow that never delivers must fail the test, not hang it.
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(30));
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "old 2\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(b"new 3\n")
        .unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "new 3\n");
    // Rotation: the workload renames the log and starts a new file.
    std::fs::rename(&log, b.data().join("logs/executor.log.1")).unwrap();
    std::fs::write(&log, "after rotation\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "after rotation\n");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The check of `hb doctor --json` named `name`.
fn doctor_check(b: &Box_, name: &str) -> serde_json::Value {
    let d: serde_json::Value =
        serde_json::from_slice(&b.run(&["doctor", "--json"]).stdout).unwrap();
    d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no check {name}: {d}"))
}

#[test]
fn doctor_says_who_paused_executor_and_fails_on_an_interrupted_save() {
    let b = Box_::new();
    b.init();
    b.ok(&["down"]);
    let c = doctor_check(&b, "executor durably paused");
    assert_eq!(c["ok"], true, "{c}");
    assert!(
        c["detail"].as_str().unwrap().contains("by hb down at 20"),
        "{c}"
    );
    // `hb up` clears the pause first (then fails here: no workload runs in this test).
    b.run(&["up"]);
    assert!(!b.hb_config().join("quiesced").exists());

    // A save SIGKILLed after its quiesce: the record stays, nothing resumed.
    let q = b.run(&["quiesce"]);
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let c = doctor_check(&b, "executor paused by an interrupted save");
    assert_eq!(c["ok"], false, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(detail.contains("paused by hb quiesce at 20"), "{c}");
    assert!(
        c["fix"].as_str().unwrap().contains("box doctor --fix"),
        "{c}"
    );
    // The way out doctor names: resume clears the pause (and then, with no workload
    // here, cannot start Executor).
    b.run(&["resume"]);
    assert!(!b.hb_config().join("quiesced").exists());
}

#[test]
fn doctor_shows_the_guest_network_with_credentials_hidden() {
    let mut b = Box_::new();
    b.init();
    let proxy = b.dir.path().join("proxy.env");
    std::fs::write(
        &proxy,
        "# written by box\nHTTPS_PROXY='http://user:hunter2@proxy.corp:3128'\nhttps_proxy='http://user:hunter2@proxy.corp:3128'\nNO_PROXY='localhost'\n",
    )
    .unwrap();
    let ca = b.dir.path().join("ca.pem");
    let trusted = b.dir.path().join("trusted.crt");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    for (k, v) in [
        ("HB_PROXY_ENV", &proxy),
        ("HB_CA_CERTS", &ca),
        ("HB_CA_TRUSTED", &trusted),
    ] {
        b.extra_env.push((k.into(), v.display().to_string()));
    }
    let c = doctor_check(&b, "guest network");
    assert_eq!(c["ok"], false, "not yet in the trust store: {c}");
    std::fs::copy(&ca, &trusted).unwrap();
    let c = doctor_check(&b, "guest network");
    assert_eq!(c["ok"], true, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.contains("HTTPS_PROXY=http://***@proxy.corp:3128"),
        "{detail}"
    );
    assert!(
        detail.contains("NO_PROXY=localhost") && detail.contains("1 (GUEST_CA_CERTS)"),
        "{detail}"
    );
    assert!(!b.transcript.borrow().contains("hunter2"));
}

/// A damaged database of the box's software does not stop a save's export (a backup of a
/// damaged box beats none): hb warns, archives it as it is, and records it in the runtime
/// manifest the backup carries, which `box save` reads to warn. Before issue 21 the save
/// failed and the box had no backup. Its writer holds it open through both exports, with
/// rows committed only to its `-wal`: archived as it is, the database keeps its `-wal` in
/// the archive (before issue 39 only its main file went, without those rows).
#[test]
fn an_export_warns_about_a_damaged_database_and_keeps_its_wal() {
    use std::os::unix::fs::FileExt;
    let b = Box_::new();
    b.init();
    let db = b.home().join(".hermes/state.db");
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer
        .execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE t(v TEXT);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 2000)
             INSERT INTO t SELECT printf('%0200d', i) FROM n;
             PRAGMA wal_checkpoint(TRUNCATE);
             CREATE TABLE since_checkpoint(v TEXT);
             INSERT INTO since_checkpoint VALUES ('only in the wal');",
        )
        .unwrap();
    let wal = b.home().join(".hermes/state.db-wal");
    // As a save runs it: the manifest first (quiesce writes it), then the export.
    b.ok(&["write-manifest"]);
    let manifest = || std::fs::read_to_string(b.hb_config().join("runtime-manifest")).unwrap();
    let out = b.dir.path().join("first");
    let e = b.run(&["export", "--out", out.to_str().unwrap()]);
    assert!(e.status.success(), "{}", String::from_utf8_lossy(&e.stderr));
    assert!(manifest().contains("sqlite_check=ok"), "{}", manifest());
    let first = common::archived(&out);
    assert!(first.contains_key("./home/agent/.hermes/state.db"));
    assert!(
        !first.contains_key("./home/agent/.hermes/state.db-wal"),
        "a consistent copy holds every row: its -wal is left out"
    );

    let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    f.write_all_at(&[0xA5; 4096], 4 * 4096).unwrap();
    let out = b.dir.path().join("second");
    let e = b.run(&["export", "--out", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(e.status.success(), "{err}");
    assert!(
        err.contains("the database home/agent/.hermes/state.db fails SQLite's quick_check"),
        "{err}"
    );
    assert!(
        manifest().contains("sqlite_check=damaged home/agent/.hermes/state.db"),
        "{}",
        manifest()
    );
    let second = common::archived(&out);
    let live_wal = std::fs::read(&wal).unwrap();
    assert!(!live_wal.is_empty(), "the writer's rows are in its -wal");
    assert_eq!(
        second.get("./home/agent/.hermes/state.db-wal"),
        Some(&live_wal),
        "a database archived as it is keeps its -wal"
    );
    drop(writer);
}
