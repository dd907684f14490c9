//! `box clone` end to end through the smolvm simulator, with the real `hb`, the real
//! provisioning script and the real Executor 1.5.9 inside namespaced guests: the clone's
//! /data is the source's (every byte, mode, owner, link and mtime, the agents' logins, a
//! WAL-mode database with rows still only in its WAL), its Executor has a token of its own
//! that answers on its own port, the source is back up and nothing is left on the host;
//! the new box imports while the source exports, holding at most `BOX_STREAM_PARTS` + 1
//! parts (`BOX_STREAM_PARTS=0`: the sequential clone); a clone interrupted mid-copy
//! leaves no new box and the source running; and a clone onto a taken name or from a box
//! that does not exist never calls smolvm.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod save_load_support;

use save_load_support::{World, followed, prerequisites, serial, step_line, tree_listing};

const HOME: &str = "/data/home/agent";

/// A project, the agents' logins, and a Hermes database whose last rows sit in its WAL.
const POPULATE: &str = r#"set -e
H=/data/home/agent
mkdir -p $H/workspace/proj/sub $H/.hermes
cd $H/workspace/proj
printf 'hello\n' > hello.txt
printf 'private\n' > private.txt; chmod 0600 private.txt
printf '#!/bin/sh\necho hi\n' > run.sh; chmod 0755 run.sh
ln -s hello.txt link-rel
head -c 2500000 /dev/urandom > sub/random.bin
printf '{"claudeAiOauth":{"accessToken":"login-of-alpha"}}\n' > $H/.claude/.credentials.json
chmod 0600 $H/.claude/.credentials.json
printf '{"OPENAI_API_KEY":"key-of-alpha"}\n' > $H/.codex/auth.json
chmod 0600 $H/.codex/auth.json
printf 'history line\n' > $H/.codex/history.jsonl
sqlite3 $H/.hermes/state.db "PRAGMA journal_mode=WAL; CREATE TABLE t(v TEXT); INSERT INTO t VALUES('base');" >/dev/null
chown -R agent:agent $H/workspace $H/.hermes $H/.claude $H/.codex
find $H/workspace/proj -depth -exec touch -h -d @1000000000 {} +
"#;

/// What must come along: the project and the agents' logins and history, exactly. (The
/// Hermes database is compared by its rows: the source keeps a WAL file that a copy leaves
/// out; Codex's `.env` holds the MCP token, which must differ.)
fn listing(w: &World, machine: &str) -> String {
    let mut all = tree_listing(w, machine, "/data/home/agent/workspace/proj");
    all.push_str(&tree_listing(w, machine, "/data/home/agent/.claude"));
    all.push_str(&w.sh(
        machine,
        "cd /data/home/agent/.codex && stat -c '%n %a %U:%G %s %Y' auth.json history.jsonl config.toml && sha256sum auth.json history.jsonl config.toml",
    ));
    all
}

#[test]
fn clone_branches_data_with_its_own_token_and_port() {
    if !prerequisites() {
        return;
    }
    let _serial = serial();
    let w = World::with_box("alpha");
    w.sh("alpha", POPULATE);
    // Committed rows the source's open connection keeps in the WAL: the clone's quiesce
    // must checkpoint them, as a save's does.
    w.sh(
        "alpha",
        r#"setsid sh -c '{ printf "PRAGMA wal_autocheckpoint=0;\nINSERT INTO t VALUES(\"in-wal\");\n"; sleep 3600; } | sqlite3 /data/home/agent/.hermes/state.db' >/dev/null 2>&1 </dev/null &
        i=0; while [ $i -lt 100 ]; do
          [ "$(sqlite3 /data/home/agent/.hermes/state.db 'SELECT count(*) FROM t' 2>/dev/null)" = 2 ] && break
          sleep 0.1; i=$((i+1)); done"#,
    );
    let alpha_token = w.token("alpha");

    // Small parts, two of them ahead at most: beta imports them while alpha exports.
    let clone = w.run(&["clone", "alpha", "beta"], &[SMALL_PARTS, TWO_AHEAD]);
    assert!(clone.ok(), "box clone: {}", clone.all());
    let (parts, held) = followed(
        &w.transcript("beta", "clone"),
        "export + copy across + import",
        "'beta'",
    );
    assert!(parts >= 8, "{parts} parts");
    assert!(
        (1..=3).contains(&held),
        "beta held {held} parts at once, more than BOX_STREAM_PARTS + 1"
    );
    assert!(
        clone.stdout.contains("Cloned 'alpha' into 'beta' in ")
            && clone.stdout.contains("box enter beta"),
        "{}",
        clone.stdout
    );
    assert!(
        !clone.all().to_lowercase().contains("passphrase"),
        "no passphrase is involved: {}",
        clone.all()
    );
    // Listed after the clone: the source's own files are what they were (the clone's
    // quiesce and resume touch only hb's bookkeeping).
    assert_eq!(
        listing(&w, "alpha"),
        listing(&w, "beta"),
        "beta is alpha's /data"
    );
    let rows = w.sh(
        "beta",
        &format!("sqlite3 {HOME}/.hermes/state.db 'PRAGMA integrity_check; SELECT group_concat(v) FROM t'"),
    );
    assert_eq!(rows.trim(), "ok\nbase,in-wal", "the WAL's rows came along");
    let login = w.sh("beta", &format!("cat {HOME}/.claude/.credentials.json"));
    assert!(login.contains("login-of-alpha"), "{login}");

    // Its own Executor: another token, another port; the wiring carries the new token,
    // which Executor accepts on beta's port, and alpha's token is refused there.
    let beta_token = w.token("beta");
    assert_ne!(alpha_token, beta_token, "beta must not share alpha's token");
    let registry = box_host::state::Registry::new(&w.state());
    let port = |n: &str| {
        let r = registry
            .get(&box_proto::BoxName::parse(n).unwrap())
            .unwrap()
            .unwrap();
        assert!(!r.incomplete, "{n} complete");
        r.web_port.expect("a published port")
    };
    let (alpha_port, beta_port) = (port("alpha"), port("beta"));
    assert_ne!(alpha_port, beta_port);
    for env in [".config/hermes-box/executor-mcp.env", ".codex/.env"] {
        let text = w.sh("beta", &format!("cat {HOME}/{env}"));
        assert!(
            text.contains(&beta_token) && !text.contains(&alpha_token),
            "beta's agents carry beta's token ({env})"
        );
    }
    let bearer = |t: &str| box_proto::mcp::BearerToken::new(t).unwrap();
    box_host::lifecycle::guest::host_handshake(beta_port, &bearer(&beta_token), 10, None)
        .expect("beta's Executor answers with beta's token");
    assert!(
        box_host::lifecycle::guest::host_handshake(beta_port, &bearer(&alpha_token), 3, None)
            .is_err(),
        "beta's Executor refuses alpha's token"
    );
    box_host::lifecycle::guest::host_handshake(alpha_port, &bearer(&alpha_token), 10, None)
        .expect("alpha still answers with its own token");

    w.assert_running_unpaused("alpha");
    w.assert_running_unpaused("beta");
    w.assert_no_plaintext(&["alpha", "beta"]);
    assert!(w.lock_free("alpha") && w.lock_free("beta"));
    assert!(w.backups_published().is_empty(), "a clone writes no backup");
    let doctor = w.sh_any("beta", "/usr/local/bin/hb doctor");
    assert!(doctor.0, "hb doctor in the clone:\n{}", doctor.1);

    // Refused before any smolvm call: a taken name, the source itself, a missing source.
    let calls = w.calls().len();
    let taken = w.run(&["clone", "alpha", "beta"], &[]);
    assert_eq!(taken.code, Some(1), "{}", taken.all());
    assert!(
        taken.stderr.contains("box 'beta' already exists"),
        "{}",
        taken.stderr
    );
    let onto_itself = w.run(&["clone", "alpha", "alpha"], &[]);
    assert_eq!(onto_itself.code, Some(1), "{}", onto_itself.all());
    assert!(
        onto_itself.stderr.contains("a name of its own"),
        "{}",
        onto_itself.stderr
    );
    let missing = w.run(&["clone", "ghost", "gamma"], &[]);
    assert_eq!(missing.code, Some(1), "{}", missing.all());
    assert!(missing.stderr.contains("ghost"), "{}", missing.stderr);
    assert!(
        w.calls_since(calls).is_empty(),
        "{:?}",
        w.calls_since(calls)
    );
    assert!(!w.registered("gamma"));

    // BOX_STREAM_PARTS=0: the whole export lands in the new box, then `hb import` runs.
    let sequential = w.run(
        &["clone", "alpha", "epsilon"],
        &[SMALL_PARTS, ("BOX_STREAM_PARTS", "0")],
    );
    assert!(sequential.ok(), "box clone: {}", sequential.all());
    assert_eq!(listing(&w, "alpha"), listing(&w, "epsilon"));
    let said = w.transcript("epsilon", "clone");
    let seconds = step_line(&said);
    assert!(
        seconds.contains("; import ") && !seconds.contains("+ import"),
        "{seconds}"
    );

    interrupted_mid_copy(&w);
    w.scan_secrets();
}

const SMALL_PARTS: (&str, &str) = ("BOX_PART_SIZE", "262144");
const TWO_AHEAD: (&str, &str) = ("BOX_STREAM_PARTS", "2");

/// SIGINT while a part's marker is being copied into the new box (its import running,
/// the source's export holding parts): no new box, no import or export left running, the
/// source back up, no plaintext anywhere.
fn interrupted_mid_copy(w: &World) {
    let args = ["clone", "alpha", "delta"];
    let from = w.calls().len();
    let child = w.spawn(
        &args,
        &[
            SMALL_PARTS,
            TWO_AHEAD,
            ("SMOLVM_SIM_FAIL", "cp:slow@part-000001.ready"),
            ("SMOLVM_SIM_SLOW_SECS", "3"),
        ],
    );
    assert!(
        w.wait_for_call(from, "part-000001.ready", 120),
        "the marker of part-000001 was never copied"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let r = w.finish(&args, child, 240);
    assert_eq!(r.code, Some(130), "{}", r.all());
    assert!(
        r.stderr.contains("box clone delta interrupted by SIGINT"),
        "{}",
        r.stderr
    );
    let calls = w.calls_since(from);
    let import = calls.iter().position(|c| c.contains("hb import --follow"));
    let part = calls.iter().position(|c| {
        c.contains("machine cp")
            && c.contains("delta:/root/hb-load-")
            && c.ends_with("/part-000001")
    });
    assert!(
        matches!((import, part), (Some(i), Some(p)) if i < p),
        "the import ran before the part was copied in: {calls:#?}"
    );
    let machines: Vec<String> = w.machines().into_iter().map(|(n, _)| n).collect();
    assert!(
        !machines.iter().any(|m| m.contains("delta")),
        "no new box left: {machines:?}"
    );
    assert!(!w.registered("delta"));
    let (_, left) = w.sh_any(
        "alpha",
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep 'hb export' | grep -v grep; true",
    );
    assert!(left.trim().is_empty(), "still running in alpha: {left}");
    w.assert_running_unpaused("alpha");
    w.assert_no_plaintext(&["alpha", "beta", "epsilon"]);
    assert!(w.lock_free("alpha") && w.lock_free("delta"));
}
