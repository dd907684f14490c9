//! `hb workload` supervising the real Executor (npm `executor` 1.5.9, installed by
//! scripts/setup.sh into /opt/hermes-box-ci): healthy handshake, durable pause, restart
//! after a kill, quiesce with SQLite checkpoints, resume, wiring read back by the real
//! codex and claude CLIs, SIGTERM; and the token nowhere it should not be.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use box_proto::mcp::{self, BearerToken, ProbeOptions};
use common::{Box_, Workload, files_with, port_open, procs_with, wait_until};

fn healthy(port: u16, token: &str) -> Result<mcp::Healthy, mcp::ProbeError> {
    let t = BearerToken::new(token).unwrap();
    mcp::probe(&mcp::executor_url(port), Some(&t), &ProbeOptions::default())
}

fn status(b: &Box_) -> serde_json::Value {
    serde_json::from_str(&b.ok(&["status", "--json"])).unwrap()
}

fn executor_pid(b: &Box_) -> u64 {
    status(b)["executor"]["pid"].as_u64().expect("executor pid")
}

/// A WAL database with committed rows still only in the -wal file (an idle writer keeps
/// its connection open, so nothing checkpoints them).
fn wal_db_with_pending_rows(path: &Path, rows: i64) -> rusqlite::Connection {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.execute_batch(
        "PRAGMA wal_autocheckpoint=0; CREATE TABLE messages(id INTEGER PRIMARY KEY, body TEXT);",
    )
    .unwrap();
    for i in 0..rows {
        conn.execute(
            "INSERT INTO messages(body) VALUES (?1)",
            [format!("message {i} {}", "x".repeat(200))],
        )
        .unwrap();
    }
    conn
}

/// Rows visible from the `.db` file alone, copied away from its -wal and -shm.
fn rows_in_db_file_alone(path: &Path, table: &str) -> i64 {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    std::fs::copy(path, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap_or(-1)
}

fn wal_len(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

fn client(b: &Box_, bin: &Path, args: &[&str]) -> String {
    let home = b.dir.path().join("client-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(bin)
        .args(args)
        .current_dir(b.home().join("workspace"))
        .env("HOME", &home)
        .env("PATH", b.path_env())
        .env("CLAUDE_CONFIG_DIR", b.home().join(".claude"))
        .env("CODEX_HOME", b.home().join(".codex"))
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env_remove("EXECUTOR_MCP_TOKEN")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = b.record(&out);
    assert!(out.status.success(), "{} {args:?}: {text}", bin.display());
    text
}

#[test]
fn workload_supervises_the_real_executor_end_to_end() {
    let Some(_executor) = common::require_tool("executor") else {
        return;
    };
    let b = Box_::new();
    std::fs::write(b.config_file(), "INSTALL_HERMES=0\n").unwrap();
    b.init();
    let web_port = common::free_port();
    let mut wl = Workload::start(&b, Some(web_port));

    // Up and healthy, through the loopback port and through the web bridge.
    let up = b.ok(&["up"]);
    assert!(up.contains("handshake ok"), "{up}");
    let token = b.token().expect("hb minted a token for executor 1.5.9");
    let h = healthy(b.port, &token).unwrap();
    assert_eq!(h.server.name, "executor");
    assert_eq!(h.protocol_version, "2025-11-25");
    let err = mcp::probe(&mcp::executor_url(b.port), None, &ProbeOptions::default()).unwrap_err();
    assert_eq!(err.kind(), "unauthorized", "auth must be on: {err}");
    assert!(
        wait_until(Duration::from_secs(5), || port_open(web_port)),
        "bridge not listening"
    );
    healthy(web_port, &token).expect("handshake through the web bridge");
    assert_eq!(common::mode(&b.hb_config().join("executor-token")), 0o600);

    // The token on argv only where Executor 1.5.9 needs it (its launcher and binary).
    let holders = procs_with(&token);
    assert!(!holders.is_empty(), "1.5.9 receives the token on argv");
    for (pid, argv) in &holders {
        assert!(
            argv.contains("daemon run --foreground"),
            "token in argv of pid {pid}: {argv}"
        );
    }
    let s = status(&b);
    assert_eq!(s["executor"]["state"], "running");
    assert_eq!(s["executor"]["token_source"], "minted");
    assert_eq!(s["workload"].as_u64(), Some(wl.pid() as u64));

    // Wiring, read back by the real CLIs; then doctor passes every check.
    let wired = b.ok(&["wire-mcp"]);
    assert!(wired.contains("registered for claude, codex"), "{wired}");
    let again = b.ok(&["wire-mcp"]);
    assert!(again.contains("nothing to do"), "{again}");
    if let Some(codex) = common::require_tool("codex") {
        let got = client(&b, &codex, &["mcp", "get", "executor"]);
        assert!(
            got.contains(&format!("url: http://127.0.0.1:{}/mcp", b.port)),
            "{got}"
        );
        assert!(
            got.contains("bearer_token_env_var: EXECUTOR_MCP_TOKEN"),
            "{got}"
        );
        let list = client(&b, &codex, &["mcp", "list"]);
        assert!(
            list.contains("executor") && list.contains("enabled"),
            "{list}"
        );
    }
    if let Some(claude) = common::require_tool("claude") {
        let got = client(&b, &claude, &["mcp", "get", "executor"]);
        assert!(
            got.contains("Connected"),
            "claude did not connect with the helper's header: {got}"
        );
        assert!(got.contains("Scope: User config"), "{got}");
    }
    let doctor = b.run(&["doctor"]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "doctor failed:\n{text}");
    assert!(text.contains("✓ MCP handshake"), "{text}");
    assert!(text.contains("✓ MCP wiring"), "{text}");
    assert!(
        text.contains("--auth-token="),
        "doctor must say how 1.5.9 gets its token: {text}"
    );

    // Durable pause: port closed, not restarted, reported as paused.
    b.ok(&["down"]);
    assert!(!port_open(b.port));
    assert_eq!(healthy(b.port, &token).unwrap_err().kind(), "refused");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !port_open(b.port),
        "the workload restarted a paused Executor"
    );
    assert!(
        !port_open(web_port),
        "the bridge listens while Executor is paused"
    );
    assert_eq!(status(&b)["executor"]["state"], "paused");
    let d: serde_json::Value =
        serde_json::from_slice(&b.run(&["doctor", "--json"]).stdout).unwrap();
    let check = |name: &str| {
        d["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no check {name}: {d}"))
    };
    assert_eq!(check("executor durably paused")["ok"], true);
    assert_eq!(check("executor port closed while paused")["ok"], true);
    b.ok(&["up"]);
    healthy(b.port, &token).unwrap();

    // A killed Executor comes back.
    let pid = executor_pid(&b);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || {
            status(&b)["executor"]["pid"]
                .as_u64()
                .is_some_and(|p| p != pid)
                && healthy(b.port, &token).is_ok()
        }),
        "Executor was not restarted after SIGKILL"
    );
    let wlog = std::fs::read_to_string(b.data().join("logs/workload.log")).unwrap();
    assert!(wlog.contains("exited with 137"), "{wlog}");

    // Quiesce: the port closed, and nothing else stopped or checkpointed (issue 31): the
    // export archives consistent copies of the live databases, so every committed row is
    // in the restored .db files themselves, with no WAL beside them.
    let state_db = b.home().join(".hermes/state.db");
    let _idle_writer = wal_db_with_pending_rows(&state_db, 300);
    assert!(wal_len(&state_db) > 0);
    assert!(
        rows_in_db_file_alone(&state_db, "messages") < 300,
        "rows should still be in the WAL"
    );
    let q = b.ok(&["quiesce"]);
    assert!(!q.contains("checkpointed"), "{q}");
    assert!(!port_open(b.port));
    assert!(wal_len(&state_db) > 0, "quiesce leaves a live WAL alone");
    let parts = b.dir.path().join("export-parts");
    b.ok(&["export", "--out", parts.to_str().unwrap()]);
    let restored = b.dir.path().join("restored");
    std::fs::create_dir(&restored).unwrap();
    hb_guest::archive::import::import(&restored, &parts).unwrap();
    let home = restored.join("home/agent");
    for db in [".hermes/state.db", ".executor/data.db"] {
        assert!(
            !home.join(format!("{db}-wal")).exists(),
            "{db}: a WAL was archived"
        );
    }
    assert_eq!(
        rows_in_db_file_alone(&home.join(".hermes/state.db"), "messages"),
        300
    );
    assert!(
        rows_in_db_file_alone(&home.join(".executor/data.db"), "sqlite_master") > 0,
        "Executor's schema must be in data.db"
    );
    assert!(
        b.home()
            .join(".config/hermes-box/runtime-manifest")
            .exists()
    );
    b.ok(&["resume"]);
    healthy(b.port, &token).unwrap();
    assert!(!b.hb_config().join("quiesced").exists());

    // Resume undoes only what quiesce did: a pause from before stays.
    b.ok(&["down"]);
    b.ok(&["quiesce"]);
    let r = b.ok(&["resume"]);
    assert!(r.contains("stays paused"), "{r}");
    assert!(b.hb_config().join("quiesced").exists());
    std::thread::sleep(Duration::from_secs(1));
    assert!(!port_open(b.port));
    b.ok(&["up"]);

    // SIGTERM: children stopped, exit 0.
    let st = wl
        .terminate(Duration::from_secs(20))
        .expect("workload did not exit after SIGTERM");
    assert!(st.success(), "workload exit {st:?}: {}", wl.stderr());
    assert!(!port_open(b.port), "Executor survived the workload");
    assert!(
        procs_with(&token).is_empty(),
        "Executor processes left behind"
    );

    // The token never in output, logs or the clients' config files.
    assert!(
        !b.transcript.borrow().contains(&token),
        "token in hb or client output"
    );
    assert!(
        !wl.stderr().contains(&token),
        "token in the workload's stderr"
    );
    let holders = files_with(&b.data(), &token);
    let allowed = [
        b.hb_config().join("executor-token"),
        b.hb_config().join("executor-mcp.env"),
        b.home().join(".codex/.env"),
        // Wired when `hermes` is on PATH (scripts/setup.sh installs it for these tests).
        b.home().join(".hermes/.env"),
    ];
    for f in &holders {
        let executor_state = f.starts_with(b.home().join(".executor"));
        assert!(
            allowed.contains(f) || executor_state,
            "token written to {}",
            f.display()
        );
        assert_eq!(
            common::mode(f),
            0o600,
            "{} holds the token but is not 0600",
            f.display()
        );
    }
}

/// Executor runs as the agent account (here `nobody`), not as the root workload, and the
/// files it and hb create in the home belong to that account.
#[test]
fn executor_runs_as_the_agent_not_as_root() {
    let Some(_executor) = common::require_tool("executor") else {
        return;
    };
    if !nix::unistd::Uid::effective().is_root() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "needs root under CI"
        );
        {
            // Written past libtest's capture (eprintln! of a passing test is hidden).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: needs root to switch users");
        }
        return;
    }
    let nobody = nix::unistd::User::from_name("nobody")
        .unwrap()
        .expect("user nobody");
    let mut b = Box_::new();
    b.extra_env.push(("HB_AGENT_USER".into(), "nobody".into()));
    std::fs::write(b.config_file(), "INSTALL_HERMES=0\n").unwrap();
    // The temp dir stands in for /: traversable, like the real root.
    std::fs::set_permissions(
        b.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    b.init();
    let mut wl = Workload::start(&b, None);
    b.ok(&["up"]);
    let pid = executor_pid(&b);
    let uid_of = |pid: u64| -> u32 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert_eq!(
        uid_of(pid),
        nobody.uid.as_raw(),
        "Executor's launcher is not the agent"
    );
    for (child, _) in procs_with(&format!("daemon run --foreground --port {} ", b.port)) {
        assert_eq!(
            uid_of(child as u64),
            nobody.uid.as_raw(),
            "pid {child} runs as another user"
        );
    }
    use std::os::unix::fs::MetadataExt;
    for f in [
        b.home().join(".executor/data.db"),
        b.hb_config().join("executor-token"),
        b.hb_config().join("workload-state.json"),
        b.data().join("logs/executor.log"),
        b.data().join("logs/workload.log"),
    ] {
        let m = std::fs::metadata(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(
            m.uid(),
            nobody.uid.as_raw(),
            "{} is not the agent's",
            f.display()
        );
        assert_eq!(m.mode() & 0o077, 0, "{} is readable by others", f.display());
    }
    assert!(
        wl.terminate(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
}

/// `box new` starts the workload before provisioning: no layout, no Executor yet. The
/// workload waits (saying why) and starts Executor once both appear.
#[test]
fn workload_waits_for_provisioning_then_starts_executor() {
    let Some(executor) = common::require_tool("executor") else {
        return;
    };
    let mut b = Box_::new();
    std::fs::write(b.config_file(), "INSTALL_HERMES=0\n").unwrap();
    let bin = b.dir.path().join("late-bin");
    std::fs::create_dir(&bin).unwrap();
    // PATH without the CI tool prefix: Executor "is installed" later, into late-bin.
    b.extra_env.push((
        "PATH".into(),
        format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
    ));
    std::fs::create_dir_all(b.data()).unwrap();
    let wl = Workload::start(&b, None);
    assert!(wait_until(Duration::from_secs(5), || wl.stderr().contains(
        "waiting for provisioning: executor is not installed yet"
    )));
    std::os::unix::fs::symlink(&executor, bin.join("executor")).unwrap();
    assert!(wait_until(Duration::from_secs(8), || wl
        .stderr()
        .contains("the agent's home does not exist yet")));
    b.init();
    assert!(
        wait_until(Duration::from_secs(30), || port_open(b.port)),
        "Executor did not start after provisioning: {}",
        wl.stderr()
    );
    b.ok(&["up"]);
    drop(wl);
    assert!(!port_open(b.port));
}
