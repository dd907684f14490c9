//! The box lifecycle end to end: the real `box` against the smolvm simulator (real
//! namespaced guests, real published ports) with the real `hb` and a real provisioning run
//! inside, on both simulator personalities (smolvm 1.0.4 and 1.9.2).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;
mod pty_support;

use std::net::TcpListener;

use box_host::state::LockKey;
use box_proto::BoxName;
use lifecycle_support::World;

fn full_lifecycle(version: &str) {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new(version);
    // An unrelated process holds the first port of the range: box must skip it.
    let stranger = TcpListener::bind(("127.0.0.1", w.port_lo)).unwrap();

    let new = w.run(&["new", "alpha"]);
    assert!(new.ok(), "{new}");
    assert!(
        new.stdout.contains("Ready. Enter with: box enter alpha"),
        "{new}"
    );
    assert!(
        new.stdout.contains("==>   ["),
        "provisioning steps are shown: {new}"
    );
    assert!(new.stdout.contains("npm-tools"), "{new}");
    let port = w.port_hi;
    assert_eq!(
        w.row("alpha")["web_port"],
        port,
        "the taken port {} was not skipped",
        w.port_lo
    );
    assert!(
        new.stdout.contains(&format!(
            "host Executor MCP: healthy on http://127.0.0.1:{port}"
        )),
        "{new}"
    );
    drop(stranger);
    // 1.0.4 needs the NIC workaround between create and the first start; 1.9 does not.
    assert_eq!(
        w.called(&["machine", "update", "--name", "alpha", "--net"]),
        version == "1.0.4"
    );
    // Every create is the waiting launcher with the port published on loopback.
    let create = w
        .calls()
        .into_iter()
        .find(|c| c.get(1).is_some_and(|v| v == "create"))
        .unwrap();
    let create = create.join(" ");
    assert!(create.contains(&format!("-p {port}:{port}")), "{create}");
    assert!(
        create.contains(&format!("-e HB_WEB_PORT={port}")),
        "{create}"
    );
    assert!(
        create.contains("exec /usr/local/bin/hb workload"),
        "{create}"
    );

    // A registered name is refused before anything is created.
    let creates = |w: &World| {
        w.calls()
            .iter()
            .filter(|c| c.get(1).is_some_and(|v| v == "create"))
            .count()
    };
    let before = creates(&w);
    let again = w.run(&["new", "alpha"]);
    assert_eq!(again.code, Some(1), "{again}");
    assert!(
        again.stderr.contains("box 'alpha' is already registered"),
        "{again}"
    );
    assert_eq!(creates(&w), before);
    assert_eq!(w.machines().len(), 1, "the existing box must be untouched");

    let ls = w.run(&["ls", "--json"]);
    assert!(ls.ok(), "{ls}");
    let rows: serde_json::Value = serde_json::from_str(&ls.stdout).unwrap();
    assert_eq!(rows[0]["name"], "alpha");
    assert_eq!(rows[0]["state"], "running");
    assert_eq!(rows[0]["web_port"], port);

    let doctor = w.run(&["doctor"]);
    assert!(doctor.ok(), "{doctor}");
    assert!(doctor.stdout.contains("hb doctor passed"), "{doctor}");
    assert!(
        doctor
            .stdout
            .contains(&format!("published port {port} listens on 127.0.0.1 only")),
        "{doctor}"
    );
    assert!(
        doctor.stdout.contains(&format!(
            "host Executor MCP: healthy on http://127.0.0.1:{port}"
        )),
        "{doctor}"
    );

    // A held box lock: clear refusal and not a single smolvm call.
    let before = w.calls().len();
    let held = w.hold(
        LockKey::Box(BoxName::parse("alpha").unwrap()),
        "box save alpha",
    );
    let stop = w.run(&["stop", "alpha"]);
    assert_eq!(stop.code, Some(1), "{stop}");
    assert!(
        stop.stderr
            .contains("another operation (box save alpha, pid ")
            && stop.stderr.contains("holds the 'alpha' lock"),
        "{stop}"
    );
    assert_eq!(
        w.calls().len(),
        before,
        "box stop called smolvm while the lock was held"
    );
    drop(held);

    let stop = w.run(&["stop", "alpha"]);
    assert!(stop.ok(), "{stop}");
    let calls: Vec<String> = w.calls().iter().map(|c| c.join(" ")).collect();
    let quiesce = calls
        .iter()
        .rposition(|c| c.ends_with("-- /usr/local/bin/hb quiesce"));
    let mstop = calls.iter().rposition(|c| c == "machine stop --name alpha");
    assert!(
        quiesce.is_some() && quiesce < mstop,
        "hb quiesce must precede machine stop: {calls:#?}"
    );
    assert_eq!(w.machines(), [("alpha".to_string(), "stopped".to_string())]);
    let ls = w.run(&["ls"]);
    assert!(
        ls.stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["alpha", "stopped", &format!("http://127.0.0.1:{port}")]),
        "{ls}"
    );

    let start = w.run(&["start", "alpha"]);
    assert!(start.ok(), "{start}");
    assert!(
        start.stdout.contains("'alpha' is running and healthy"),
        "{start}"
    );
    let doctor = w.run(&["doctor", "alpha", "--json"]);
    assert!(doctor.ok(), "{doctor}");
    let report: serde_json::Value = serde_json::from_str(&doctor.stdout).unwrap();
    assert_eq!(report["ok"], true);
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "host-mcp" && c["status"] == "ok"),
        "{doctor}"
    );

    // A pause the user chose survives a stop and start; box start says so and open refuses.
    assert!(w.hb("alpha", &["down"]).status.success());
    assert!(w.run(&["stop", "alpha"]).ok());
    let start = w.run(&["start", "alpha"]);
    assert!(start.ok(), "{start}");
    assert!(
        start
            .stdout
            .contains("Executor stays paused as you left it"),
        "{start}"
    );
    let open = w.run_env(&["open", "alpha"], &[("BOX_BROWSER", "true")]);
    assert_eq!(open.code, Some(1), "{open}");
    assert!(
        open.stderr.contains("Executor in 'alpha' is paused"),
        "{open}"
    );
    assert!(w.hb("alpha", &["up"]).status.success());

    // box open: the opener gets the file URL of a private sign-in page of box's gateway,
    // never the one-time URL or the token (the gateway is tested in open_gateway*.rs).
    let opened = w.dir.path().join("opened-url");
    let browser = w.dir.path().join("record-browser");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$#\" \"$1\" > '{}'\n",
            opened.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let open = w.run_env(
        &["open", "alpha"],
        &[("BOX_BROWSER", browser.to_str().unwrap())],
    );
    assert!(open.ok(), "{open}");
    assert!(
        open.stdout
            .contains("Opening Executor UI of 'alpha' at http://box-alpha.localhost:"),
        "{open}"
    );
    let got = std::fs::read_to_string(&opened).unwrap();
    let mut lines = got.lines();
    assert_eq!(
        lines.next(),
        Some("1"),
        "the URL must be the opener's only argument"
    );
    let url = lines.next().unwrap();
    assert!(url.starts_with("file:///"), "{url}");
    assert!(!url.contains("nonce"), "{url}");
    let token_out = w.hb("alpha", &["token"]);
    assert!(token_out.status.success());
    let token = String::from_utf8(token_out.stdout).unwrap();
    let token = token.trim();
    assert!(
        token.len() >= 16,
        "implausible token length {}",
        token.len()
    );
    assert!(!url.contains(token), "the token is in the opener's URL");

    // Before rm removes the row and the machine record: neither the URL's token nor
    // Executor's MCP token is in box's output, its state dir, or anything the simulator
    // recorded (machine records, unredacted argv and env of every smolvm call).
    let mcp_token = w.hb("alpha", &["token"]);
    assert!(mcp_token.status.success(), "hb token");
    let mcp_token = String::from_utf8_lossy(&mcp_token.stdout)
        .trim()
        .to_string();
    assert!(mcp_token.len() >= 16, "implausible MCP token");
    w.assert_no_secrets(&[token.to_string(), mcp_token.clone()]);

    // rm: no terminal and no --force is refused; with --force the box is gone.
    let rm = w.run(&["rm", "alpha"]);
    assert_eq!(rm.code, Some(1), "{rm}");
    assert!(
        rm.stderr
            .contains("refusing non-interactive deletion without --force"),
        "{rm}"
    );
    assert!(rm.stderr.contains("no backup found for 'alpha'"), "{rm}");
    assert_eq!(w.machines().len(), 1);
    let rm = w.run(&["rm", "alpha", "--force"]);
    assert!(rm.ok(), "{rm}");
    assert!(rm.stdout.contains("deleted 'alpha'"), "{rm}");
    assert!(w.machines().is_empty());
    assert!(!w.row_exists("alpha"));
    let ls = w.run(&["ls"]);
    assert!(ls.stdout.contains("No hermes-box-lite boxes yet"), "{ls}");
    w.assert_no_locks("alpha");

    // The token never reached our output, our logs or smolvm's argv.
    assert!(!w.transcript.contains(token), "token in box output");
    assert!(!w.logs().contains(token), "token in box logs");
    assert!(
        !w.calls_text().contains(token),
        "token in the smolvm call log"
    );
}

#[test]
fn full_lifecycle_on_smolvm_1_0_4() {
    full_lifecycle("1.0.4");
}

#[test]
fn full_lifecycle_on_smolvm_1_9_2() {
    full_lifecycle("1.9.2");
}

#[test]
fn two_concurrent_news_of_one_name_make_exactly_one_machine() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");
    // A slow create widens the window in which both are in flight.
    let env = [
        ("SMOLVM_SIM_FAIL", "create:slow"),
        ("SMOLVM_SIM_SLOW_SECS", "1"),
    ];
    let a = w.spawn(&["new", "same"], &env);
    let b = w.spawn(&["new", "same"], &env);
    let a = w.collect(a, "box new same (a)");
    let b = w.collect(b, "box new same (b)");
    let (won, lost) = if a.ok() { (a, b) } else { (b, a) };
    assert!(won.ok(), "{won}");
    assert_eq!(lost.code, Some(1), "{lost}");
    assert!(
        lost.stderr.contains("holds the 'same' lock")
            || lost.stderr.contains("already registered")
            || lost.stderr.contains("already exists"),
        "{lost}"
    );
    assert_eq!(w.machines(), [("same".to_string(), "running".to_string())]);
    let creates = w
        .calls()
        .iter()
        .filter(|c| c.get(1).is_some_and(|v| v == "create"))
        .count();
    assert_eq!(creates, 1, "{}", w.calls_text());
    let rm = w.run(&["rm", "same", "--force"]);
    assert!(rm.ok(), "{rm}");
    w.assert_no_locks("same");
}

#[test]
fn ls_during_new_repair_keeps_data_hostile_names_and_no_web_exposure() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.9.2");

    // Hostile names are refused before any smolvm call.
    for bad in ["../evil", "Alpha", "a b", "x\u{1b}[31m", "-rf", "a--b", ""] {
        for verb in ["new", "stop", "rm", "open", "doctor"] {
            let r = w.run(&[verb, bad]);
            assert_ne!(r.code, Some(0), "box {verb} {bad:?}: {r}");
            assert!(!r.stderr.contains('\u{1b}'), "raw escape echoed: {r}");
        }
    }
    assert!(w.calls().is_empty(), "{}", w.calls_text());

    // ls answers while a box is being created (it takes no lock).
    let child = w.spawn(
        &["new", "alpha"],
        &[
            ("SMOLVM_SIM_FAIL", "create:slow"),
            ("SMOLVM_SIM_SLOW_SECS", "2"),
        ],
    );
    w.wait_for_call("machine create", std::time::Duration::from_secs(30));
    let ls = w.run(&["ls"]);
    assert!(ls.ok(), "{ls}");
    let mut child = child;
    assert!(
        child.try_wait().unwrap().is_none(),
        "box new finished before ls returned: ls was not shown to run beside it"
    );
    let new = w.collect(child, "box new alpha");
    assert!(new.ok(), "{new}");

    // repair re-provisions and never touches /data contents.
    let put = w.sim(&[
        "machine",
        "exec",
        "--name",
        "alpha",
        "--",
        "sh",
        "-c",
        "echo precious > /data/home/agent/workspace/keep.txt",
    ]);
    assert!(put.status.success());
    let user_files = |w: &World| {
        let out = w.sim(&[
            "machine",
            "exec",
            "--name",
            "alpha",
            "--",
            "sh",
            "-c",
            "cd /data/home/agent/workspace && find . -printf '%p %y %m %u %T@\\n' | sort && find . -type f -print0 | sort -z | xargs -0 -r sha256sum",
        ]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let files_before = user_files(&w);
    // Break the box first: hb gone, Claude's executor entry gone, the login profile gone.
    let claude_json = "/data/home/agent/.claude/.claude.json";
    let got = w.sim(&[
        "machine",
        "exec",
        "--name",
        "alpha",
        "--",
        "cat",
        claude_json,
    ]);
    assert!(got.status.success(), "no {claude_json}");
    let mut claude: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert!(
        claude["mcpServers"]["executor"].is_object(),
        "{claude_json} has no executor entry to break"
    );
    claude["mcpServers"]
        .as_object_mut()
        .unwrap()
        .remove("executor");
    let broken = base64(serde_json::to_string(&claude).unwrap().as_bytes());
    let breaker = format!(
        "set -e; rm /usr/local/bin/hb /etc/profile.d/hermes-box.sh; \
         echo {broken} | base64 -d > {claude_json}; chown agent:agent {claude_json}"
    );
    let broke = w.sim(&[
        "machine", "exec", "--name", "alpha", "--", "sh", "-c", &breaker,
    ]);
    assert!(
        broke.status.success(),
        "{}",
        String::from_utf8_lossy(&broke.stderr)
    );
    let check = "test -x /usr/local/bin/hb && test -s /etc/profile.d/hermes-box.sh && \
                 grep -q '\"executor\"' /data/home/agent/.claude/.claude.json";
    let state = |w: &World| {
        w.sim(&[
            "machine", "exec", "--name", "alpha", "--", "sh", "-c", check,
        ])
        .status
        .success()
    };
    assert!(!state(&w), "the box was not broken");
    let repair = w.run(&["repair", "alpha"]);
    assert!(repair.ok(), "{repair}");
    assert!(
        repair.stdout.contains("repair completed for 'alpha'"),
        "{repair}"
    );
    assert!(
        repair.stdout.contains("Repairing 'alpha' in place"),
        "repair says it provisions in place rather than rebasing: {repair}"
    );
    assert!(repair.stdout.contains("==>   ["), "{repair}");
    let got = w.sim(&[
        "machine",
        "exec",
        "--name",
        "alpha",
        "--",
        "cat",
        "/data/home/agent/workspace/keep.txt",
    ]);
    assert_eq!(String::from_utf8_lossy(&got.stdout), "precious\n");
    assert!(
        state(&w),
        "repair left hb, the profile or Claude's executor entry missing"
    );
    let doctor = w.hb("alpha", &["doctor"]);
    assert!(
        doctor.status.success(),
        "hb doctor after repair: {}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    assert_eq!(
        user_files(&w),
        files_before,
        "repair changed the user's files"
    );

    // enter: starts a stopped box, attaches tmux session `main` as agent, on a real pty.
    let stop = w.run(&["stop", "alpha"]);
    assert!(stop.ok(), "{stop}");
    // The MCP token in the agent's login shell. The tools are not on this world's login
    // PATH (they come from HB_TOOL_PREFIX, the line prints tools-0): first_run.rs, which
    // provisions the real /opt/hermes-box layout, checks all four there.
    let enter = enter_typing(
        &mut w,
        &[
            "echo hello-from-$(whoami)-in-$TMUX_PANE",
            "echo token-${EXECUTOR_MCP_TOKEN:+set}-tools-$(command -v claude codex executor | wc -l)",
        ],
    );
    assert!(enter.ok(), "{enter}");
    assert!(enter.stdout.contains("hello-from-agent-in-%"), "{enter}");
    assert!(
        enter.stdout.contains("token-set-tools-"),
        "EXECUTOR_MCP_TOKEN is not set in the agent's login shell: {enter}"
    );
    assert_eq!(
        w.machines()[0],
        ("alpha".to_string(), "running".to_string())
    );
    // box stop paused Executor durably; entering a stopped box brought it back.
    let doctor = w.run(&["doctor", "alpha"]);
    assert!(doctor.ok(), "{doctor}");
    assert!(
        doctor.stdout.contains("host Executor MCP: healthy"),
        "{doctor}"
    );

    // Started behind box's back after a `box stop`, Executor stays paused: doctor says so
    // (exit 1) and `--fix` brings it back, saying what it did.
    assert!(w.run(&["stop", "alpha"]).ok());
    assert!(
        w.sim(&["machine", "start", "--name", "alpha"])
            .status
            .success()
    );
    let doctor = w.run(&["doctor", "alpha"]);
    assert_eq!(doctor.code, Some(1), "{doctor}");
    assert!(doctor.stdout.contains("FAIL"), "{doctor}");
    let fix = w.run(&["doctor", "alpha", "--fix"]);
    assert!(fix.ok(), "{fix}");
    assert!(
        fix.stdout
            .contains("fixed: started Executor in 'alpha' (hb up)"),
        "{fix}"
    );
    assert!(fix.stdout.contains("host Executor MCP: healthy"), "{fix}");

    // A pause the user chose (`hb down`) survives `box repair` and `box enter` of a
    // stopped box (both used to run `hb up`, which clears it); each says so.
    let paused = |w: &World| -> bool {
        let out = w.hb("alpha", &["status", "--json"]);
        assert!(out.status.success(), "hb status --json");
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        status["executor"]["state"] == "paused"
    };
    let down = w.hb("alpha", &["down"]);
    assert!(down.status.success());
    assert!(paused(&w));
    let repair = w.run(&["repair", "alpha"]);
    assert!(repair.ok(), "{repair}");
    assert!(
        repair
            .stdout
            .contains("Executor in 'alpha' is paused again, as you left it"),
        "{repair}"
    );
    assert!(paused(&w), "box repair cleared the user's hb down");
    assert!(w.run(&["stop", "alpha"]).ok());
    let enter = enter_typing(&mut w, &[]);
    assert!(enter.ok(), "{enter}");
    assert!(
        enter
            .stdout
            .contains("Executor in 'alpha' stays paused as you left it"),
        "{enter}"
    );
    assert!(
        paused(&w),
        "box enter of a stopped box cleared the user's hb down"
    );
    let up = w.hb("alpha", &["up"]);
    assert!(up.status.success());

    // Without web exposure: no published port, doctor says the host check is skipped,
    // open says how to enable it.
    let new = w.run_env(&["new", "beta"], &[("EXPOSE_EXECUTOR_WEB", "0")]);
    assert!(new.ok(), "{new}");
    assert!(
        new.stdout
            .contains("host endpoint check skipped: web exposure is off"),
        "{new}"
    );
    let create = w
        .calls()
        .into_iter()
        .find(|c| c.get(1).is_some_and(|v| v == "create") && c.contains(&"beta".to_string()))
        .unwrap();
    assert!(!create.contains(&"-p".to_string()), "{create:?}");
    let doctor = w.run(&["doctor", "beta"]);
    assert!(doctor.ok(), "{doctor}");
    assert!(
        doctor
            .stdout
            .contains("host endpoint check skipped: web exposure is off"),
        "{doctor}"
    );
    let open = w.run(&["open", "beta"]);
    assert_eq!(open.code, Some(1), "{open}");
    assert!(
        open.stderr
            .contains("'beta' has no exposed Executor host port")
            && open.stderr.contains("EXPOSE_EXECUTOR_WEB=1"),
        "{open}"
    );
    // Without Executor at all, a box is still created, healthy and checked.
    let new = w.run_env(&["new", "gamma"], &[("INSTALL_EXECUTOR", "0")]);
    assert!(new.ok(), "{new}");
    let create = w
        .calls()
        .into_iter()
        .find(|c| c.get(1).is_some_and(|v| v == "create") && c.contains(&"gamma".to_string()))
        .unwrap();
    assert!(!create.contains(&"-p".to_string()), "{create:?}");
    let doctor = w.run_env(&["doctor", "gamma"], &[("INSTALL_EXECUTOR", "0")]);
    assert!(doctor.ok(), "{doctor}");
    // rm on a terminal: only the exact name deletes; a prefix or an empty line keeps the
    // machine and its row.
    let rm_typing = |w: &mut World, answer: &str| {
        let mut pty = pty_support::spawn(w.command(&["rm", "alpha"], &[]));
        pty.expect(
            "Type the box name 'alpha' to delete it permanently: ",
            std::time::Duration::from_secs(30),
        );
        pty.send(format!("{answer}\r").as_bytes());
        let status = pty.wait(std::time::Duration::from_secs(120));
        let shown = pty.shown();
        w.transcript
            .push_str(&format!("$ box rm alpha (typed {answer:?})\n{shown}\n"));
        (status.code(), shown)
    };
    for answer in ["alph", "", "alpha ", "ALPHA"] {
        let (code, shown) = rm_typing(&mut w, answer);
        assert_eq!(code, Some(1), "typed {answer:?}: {shown}");
        assert!(shown.contains("deletion cancelled"), "{shown}");
        assert!(
            w.machines().iter().any(|(n, _)| n == "alpha"),
            "typed {answer:?}: the machine was deleted"
        );
        assert!(w.row_exists("alpha"), "typed {answer:?}: the row went");
    }
    let (code, shown) = rm_typing(&mut w, "alpha");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("deleted 'alpha'"), "{shown}");
    assert!(!w.machines().iter().any(|(n, _)| n == "alpha"));
    assert!(!w.row_exists("alpha"));
    for name in ["beta", "gamma"] {
        let rm = w.run(&["rm", name, "--force"]);
        assert!(rm.ok(), "{rm}");
    }
    assert!(w.machines().is_empty());
}

/// Standard base64, for handing a file's bytes to a guest shell in an argument.
/// `box enter alpha` on a real pty (`script`), typing each of `lines` into the session,
/// then `exit`.
fn enter_typing(w: &mut World, lines: &[&str]) -> lifecycle_support::Run {
    let mut cmd = std::process::Command::new("script");
    cmd.args([
        "-qec",
        &format!("{} enter alpha", lifecycle_support::box_bin().display()),
        "/dev/null",
    ]);
    for (k, v) in w.command(&[], &[]).get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let typed: Vec<String> = lines.iter().map(|l| format!("{l}\r")).collect();
    std::thread::spawn(move || {
        use std::io::Write;
        std::thread::sleep(std::time::Duration::from_secs(4));
        for line in typed {
            let _ = stdin.write_all(line.as_bytes());
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let _ = stdin.write_all(b"exit\r");
        std::thread::sleep(std::time::Duration::from_secs(3));
    });
    w.collect(child, "script box enter alpha")
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
