//! The real Hermes Agent (PyPI `hermes-agent` 0.19.0 with its `mcp` extra, installed by
//! scripts/setup.sh into /opt/hermes-box-ci) reads the wiring `hb wire-mcp` writes:
//! `hermes mcp list` shows `executor` with our URL beside the user's own servers,
//! `hermes mcp test executor` resolves `${EXECUTOR_MCP_TOKEN}` from `$HERMES_HOME/.env`
//! (it shows the header masked) and connects to the real Executor with it; box-proto's test
//! MCP server records the exact Authorization header Hermes sends. Listing and testing
//! rewrite nothing, a repeat `wire-mcp` changes nothing, disabling the wiring leaves a config
//! Hermes still reads, and a file Hermes re-serialised itself (`hermes mcp remove`) is
//! re-wired in one run. No LLM provider is contacted: only `hermes mcp`. ~12 s.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "../../box-proto/tests/mcp_server/mod.rs"]
mod mcp_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Box_, Workload, files_with};
use mcp_server::{Mode, TestServer};

/// A user's own Hermes config: comments, another server (disabled, so nothing dials it),
/// settings after the mapping.
const USER_YAML: &str = "# my hermes settings\nmodel:\n  default: some/model   # keep this comment\nmcp_servers:\n  # servers I use\n  github:\n    url: https://example.invalid/mcp\n    enabled: false\nterminal:\n  backend: local\n";

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn hermes_home(b: &Box_) -> PathBuf {
    b.home().join(".hermes")
}

/// Runs the real `hermes` against the box's HERMES_HOME, with no token in its environment
/// (it can only come from `.env`) and a HOME of its own. Returns stdout and stderr.
fn hermes(b: &Box_, bin: &Path, args: &[&str]) -> String {
    let home = b.dir.path().join("client-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(bin)
        .args(args)
        .current_dir(b.home().join("workspace"))
        .env("HOME", &home)
        .env("HERMES_HOME", hermes_home(b))
        .env("PATH", b.path_env())
        .env("NO_COLOR", "1")
        .env_remove("EXECUTOR_MCP_TOKEN")
        .env_remove("HERMES_REVISION")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = b.record(&out);
    assert!(out.status.success(), "hermes {args:?}: {text}");
    text
}

/// The `hermes mcp list` row of one server, whitespace-collapsed.
fn row(list: &str, name: &str) -> Option<String> {
    list.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| l.starts_with(&format!("{name} ")))
}

/// How `hermes mcp test` masks a resolved `Bearer <token>` header: its first four
/// characters, `***`, the token's last four.
fn masked(token: &str) -> String {
    format!("Authorization: Bear***{}", &token[token.len() - 4..])
}

#[test]
fn hermes_reads_our_wiring_beside_the_users_servers_and_connects_to_the_real_executor() {
    let Some(hermes_bin) = common::require_tool("hermes") else {
        return;
    };
    if common::require_tool("executor").is_none() {
        return;
    }
    let b = Box_::new();
    std::fs::write(b.config_file(), "INSTALL_HERMES=1\n").unwrap();
    b.init();
    let config = hermes_home(&b).join("config.yaml");
    let dotenv = hermes_home(&b).join(".env");
    std::fs::write(&config, USER_YAML).unwrap();
    std::fs::write(&dotenv, "OPENROUTER_API_KEY=or-keep\n").unwrap();
    let _wl = Workload::start(&b, None);
    let up = b.ok(&["up"]);
    assert!(up.contains("handshake ok"), "{up}");
    let wired = b.ok(&["wire-mcp"]);
    assert!(wired.contains("hermes"), "{wired}");
    let token = b.token().expect("minted token");
    let url = format!("http://127.0.0.1:{}/mcp", b.port);

    // Our block goes first in the user's mapping; everything of theirs stays as it was.
    let wired_yaml = read(&config);
    assert_eq!(
        wired_yaml,
        format!(
            "# my hermes settings\nmodel:\n  default: some/model   # keep this comment\nmcp_servers:\n  executor:\n    url: \"{url}\"\n    headers:\n      Authorization: \"Bearer ${{EXECUTOR_MCP_TOKEN}}\"\n    enabled: true\n  # servers I use\n  github:\n    url: https://example.invalid/mcp\n    enabled: false\nterminal:\n  backend: local\n"
        )
    );
    let wired_env = read(&dotenv);

    // Hermes's own parser sees both servers.
    let list = hermes(&b, &hermes_bin, &["mcp", "list"]);
    let ours = row(&list, "executor").unwrap_or_else(|| panic!("no executor row:\n{list}"));
    assert!(
        ours.contains(&url) && ours.contains("enabled") && !ours.contains("disabled"),
        "{ours}"
    );
    let theirs = row(&list, "github").unwrap_or_else(|| panic!("no github row:\n{list}"));
    assert!(
        theirs.contains("https://example.invalid/mcp") && theirs.contains("disabled"),
        "{theirs}"
    );

    // ... resolves the header from .env and connects to the real Executor with it
    // (Executor answers 401 without the token).
    let test = hermes(&b, &hermes_bin, &["mcp", "test", "executor"]);
    assert!(test.contains(&format!("Transport: HTTP → {url}")), "{test}");
    assert!(
        test.contains(&masked(&token)),
        "the header did not resolve from .env:\n{test}"
    );
    assert!(test.contains("✓ Connected"), "{test}");
    assert!(test.contains("Tools discovered:"), "{test}");
    assert!(test.contains("execute"), "{test}");

    // Hermes rewrote neither file, and the token is only in its .env.
    assert_eq!(read(&config), wired_yaml, "hermes rewrote config.yaml");
    assert_eq!(read(&dotenv), wired_env, "hermes rewrote .env");
    assert_eq!(
        files_with(&hermes_home(&b), &token),
        std::slice::from_ref(&dotenv)
    );

    // A repeat run changes nothing, and Hermes reads the same.
    let mtime = || std::fs::metadata(&config).unwrap().modified().unwrap();
    let before = mtime();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = b.ok(&["wire-mcp"]);
    assert!(again.contains("nothing to do"), "{again}");
    assert_eq!(mtime(), before, "config.yaml rewritten");
    assert_eq!(read(&config), wired_yaml);
    assert_eq!(read(&dotenv), wired_env);
    assert_eq!(hermes(&b, &hermes_bin, &["mcp", "list"]), list);

    // Disabling removes exactly our entry: the user's file comes back byte for byte and
    // Hermes still reads their server.
    b.unwire();
    assert_eq!(read(&config), USER_YAML);
    assert_eq!(read(&dotenv), "OPENROUTER_API_KEY=or-keep\n");
    let list = hermes(&b, &hermes_bin, &["mcp", "list"]);
    assert!(row(&list, "executor").is_none(), "{list}");
    assert!(row(&list, "github").is_some(), "{list}");

    // Wired again, then Hermes itself rewrites the whole file (its own `mcp remove`
    // re-serialises config.yaml: our quotes and the user's comments go, defaults come in).
    // wire-mcp still understands Hermes's YAML, settles in one run, and Hermes connects.
    b.ok(&["wire-mcp"]);
    assert_eq!(read(&config), wired_yaml);
    let removed = hermes(&b, &hermes_bin, &["mcp", "remove", "github"]);
    assert!(removed.contains("Removed 'github'"), "{removed}");
    let rewritten = read(&config);
    assert!(
        rewritten != wired_yaml && !rewritten.contains("github"),
        "{rewritten}"
    );
    b.ok(&["wire-mcp"]);
    let settled = read(&config);
    assert!(
        settled.contains(&format!(
            "mcp_servers:\n  executor:\n    url: \"{url}\"\n    headers:\n      Authorization: \"Bearer ${{EXECUTOR_MCP_TOKEN}}\"\n    enabled: true\n"
        )),
        "{settled}"
    );
    let again = b.ok(&["wire-mcp"]);
    assert!(again.contains("nothing to do"), "{again}");
    let list = hermes(&b, &hermes_bin, &["mcp", "list"]);
    assert!(
        row(&list, "executor").is_some_and(|r| r.contains(&url)),
        "{list}"
    );
    let test = hermes(&b, &hermes_bin, &["mcp", "test", "executor"]);
    assert!(test.contains("✓ Connected"), "{test}");
    assert_eq!(
        files_with(&hermes_home(&b), &token),
        std::slice::from_ref(&dotenv)
    );

    assert!(!b.transcript.borrow().contains(&token));
}

#[test]
fn hermes_sends_the_token_from_dotenv_as_the_authorization_header() {
    let Some(hermes_bin) = common::require_tool("hermes") else {
        return;
    };
    // A fresh box: no config.yaml yet, so wire-mcp writes the whole file.
    let mut b = Box_::new();
    std::fs::write(b.config_file(), "INSTALL_HERMES=1\n").unwrap();
    b.init();
    b.ok(&["wire-mcp"]);
    let token = b.token().expect("minted token");
    // The test server answers 401 to any other Authorization header (like Executor) and
    // records what it received; re-wired to its port.
    let server = TestServer::start(Mode::Healthy, Some(&token));
    b.port = server.addr.port();
    let out = b.ok(&["wire-mcp"]);
    assert!(out.contains("registered"), "{out}");
    let config = hermes_home(&b).join("config.yaml");
    assert_eq!(
        read(&config),
        format!(
            "mcp_servers:\n  executor:\n    url: \"{}\"\n    headers:\n      Authorization: \"Bearer ${{EXECUTOR_MCP_TOKEN}}\"\n    enabled: true\n",
            server.url()
        )
    );

    let list = hermes(&b, &hermes_bin, &["mcp", "list"]);
    let ours = row(&list, "executor").unwrap_or_else(|| panic!("no executor row:\n{list}"));
    assert!(ours.contains(&server.url()), "{ours}");

    // The test server speaks only the handshake, so Hermes gives up at tools/list (400,
    // after its ~7 s of retries); what counts is that it was let in, not sent away with 401.
    let test = hermes(&b, &hermes_bin, &["mcp", "test", "executor"]);
    assert!(test.contains(&masked(&token)), "{test}");
    // httpx's words for a refusal; a bare "401" also turns up in the port, the elapsed
    // milliseconds and the addresses of a Python traceback.
    assert!(!test.contains("401 Unauthorized"), "{test}");
    let seen = server.seen();
    let init = seen
        .iter()
        .find(|s| s.method == "POST" && s.body.contains("\"initialize\""))
        .unwrap_or_else(|| panic!("hermes sent no initialize:\n{test}"));
    // Compared, never printed.
    assert!(
        init.header("authorization") == Some(format!("Bearer {token}").as_str()),
        "hermes's initialize carried another Authorization header (value not shown)"
    );
    assert!(
        seen.iter()
            .all(|s| s.header("authorization") == Some(format!("Bearer {token}").as_str())),
        "a request without the token (values not shown)"
    );
    assert!(
        seen.iter()
            .any(|s| s.body.contains("notifications/initialized")),
        "hermes did not finish the handshake:\n{test}"
    );

    // Disabled: `mcp_servers: {}` is left, which Hermes reads as no servers.
    b.unwire();
    assert_eq!(read(&config), "mcp_servers: {}\n");
    let list = hermes(&b, &hermes_bin, &["mcp", "list"]);
    assert!(list.contains("No MCP servers configured"), "{list}");

    assert!(!b.transcript.borrow().contains(&token));
}
