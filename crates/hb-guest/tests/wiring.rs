//! `hb wire-mcp` at file level for Claude Code, Codex and Hermes: the user's other
//! settings survive, legacy wiring is replaced, the token stays out of every config file
//! that can do without it, files are 0600, a repeat run touches nothing, and
//! WIRE_EXECUTOR_MCP=0 removes exactly our wiring. Codex's own CLI parses the result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{Box_, mode};

const CLAUDE_JSON: &str = r#"{
  "numStartups": 7,
  "theme": "dark",
  "mcpServers": {
    "github": {"type": "http", "url": "https://example.invalid/mcp"}
  },
  "projects": {
    "/data/home/agent/workspace": {
      "allowedTools": ["Bash"],
      "mcpServers": {"executor": {"type": "stdio", "command": "executor", "args": ["mcp"]}}
    }
  }
}
"#;

const CODEX_TOML: &str = r#"# my codex settings
model = "o4-mini"   # keep this comment

[mcp_servers.github]
url = "https://example.invalid/mcp"

[mcp_servers.executor]
command = "executor"
args = ["mcp"]
tool_timeout_sec = 120
"#;

const HERMES_YAML: &str = "# hermes settings\nmodel:\n  default: some/model\nmcp_servers:\n  github:\n    url: https://example.invalid/mcp\n  executor:\n    command: executor\n    args: [mcp]\nterminal:\n  backend: local\n";

/// A box with pre-existing client configs and no Executor on PATH (hb mints the token, as
/// it does for Executor 1.5.9).
fn seeded() -> Box_ {
    let b = Box_::new();
    b.init();
    let home = b.home();
    std::fs::write(home.join(".claude/.claude.json"), CLAUDE_JSON).unwrap();
    std::fs::write(home.join(".codex/config.toml"), CODEX_TOML).unwrap();
    std::fs::write(home.join(".codex/.env"), "OPENAI_API_KEY=sk-test-keep\n").unwrap();
    std::fs::write(home.join(".hermes/config.yaml"), HERMES_YAML).unwrap();
    std::fs::write(home.join(".hermes/.env"), "OPENROUTER_API_KEY=or-keep\n").unwrap();
    b
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn helper_header(b: &Box_) -> serde_json::Value {
    let out = Command::new("sh")
        .arg(b.hb_config().join("executor-mcp-headers"))
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn wires_all_three_clients_and_keeps_everything_else() {
    let b = seeded();
    let out = b.ok(&["wire-mcp"]);
    assert!(
        out.contains("registered for claude, codex, hermes"),
        "{out}"
    );
    let token = b.token().expect("minted token");
    let url = format!("http://127.0.0.1:{}/mcp", b.port);
    let home = b.home();

    // Claude Code: user-scope entry with the helper; the seed's local-scope stdio entry gone.
    let claude: serde_json::Value =
        serde_json::from_str(&read(&home.join(".claude/.claude.json"))).unwrap();
    assert_eq!(claude["numStartups"], 7);
    assert_eq!(claude["theme"], "dark");
    assert_eq!(
        claude["mcpServers"]["github"]["url"],
        "https://example.invalid/mcp"
    );
    assert_eq!(claude["mcpServers"]["executor"]["type"], "http");
    assert_eq!(claude["mcpServers"]["executor"]["url"], url.as_str());
    assert!(claude["mcpServers"]["executor"].get("headers").is_none());
    let projects = &claude["projects"]["/data/home/agent/workspace"];
    assert_eq!(projects["allowedTools"][0], "Bash");
    assert!(
        projects["mcpServers"].get("executor").is_none(),
        "legacy local-scope wiring left"
    );
    assert_eq!(
        helper_header(&b)["Authorization"],
        format!("Bearer {token}")
    );
    assert_eq!(mode(&b.hb_config().join("executor-mcp-headers")), 0o700);

    // Codex: the table rewritten in place, user keys and comments kept, token in .env only.
    let codex = read(&home.join(".codex/config.toml"));
    assert!(
        codex.starts_with("# my codex settings\nmodel = \"o4-mini\"   # keep this comment\n"),
        "{codex}"
    );
    assert!(codex.contains("[mcp_servers.github]"), "{codex}");
    assert!(codex.contains("tool_timeout_sec = 120"), "{codex}");
    assert!(codex.contains(&format!("url = \"{url}\"")), "{codex}");
    assert!(
        codex.contains("bearer_token_env_var = \"EXECUTOR_MCP_TOKEN\""),
        "{codex}"
    );
    assert!(
        !codex.contains("command") && !codex.contains("args"),
        "stale stdio keys left: {codex}"
    );
    assert_eq!(
        read(&home.join(".codex/.env")),
        format!("OPENAI_API_KEY=sk-test-keep\nEXECUTOR_MCP_TOKEN={token}\n")
    );

    // Hermes: the entry replaced as text; the rest byte for byte.
    let hermes = read(&home.join(".hermes/config.yaml"));
    assert_eq!(
        hermes,
        format!(
            "# hermes settings\nmodel:\n  default: some/model\nmcp_servers:\n  github:\n    url: https://example.invalid/mcp\n  executor:\n    url: \"{url}\"\n    headers:\n      Authorization: \"Bearer ${{EXECUTOR_MCP_TOKEN}}\"\n    enabled: true\nterminal:\n  backend: local\n"
        )
    );
    assert_eq!(
        read(&home.join(".hermes/.env")),
        format!("OPENROUTER_API_KEY=or-keep\nEXECUTOR_MCP_TOKEN={token}\n")
    );

    // Every file we wrote is private; the token only where a client needs it.
    for f in [
        ".claude/.claude.json",
        ".codex/config.toml",
        ".codex/.env",
        ".hermes/config.yaml",
        ".hermes/.env",
        ".config/hermes-box/executor-mcp.env",
        ".config/hermes-box/mcp-wired",
    ] {
        assert_eq!(mode(&home.join(f)), 0o600, "{f}");
    }
    let holders = common::files_with(&b.data(), &token);
    let holders: Vec<String> = holders
        .iter()
        .map(|p| p.strip_prefix(&home).unwrap().display().to_string())
        .collect();
    assert_eq!(
        holders,
        [
            ".codex/.env",
            ".config/hermes-box/executor-mcp.env",
            ".config/hermes-box/executor-token",
            ".hermes/.env"
        ]
    );
    assert!(!b.transcript.borrow().contains(&token));

    // A repeat run is a no-op: nothing rewritten.
    let before: Vec<_> = [
        "claude/.claude.json",
        "codex/config.toml",
        "hermes/config.yaml",
    ]
    .iter()
    .map(|f| {
        std::fs::metadata(home.join(format!(".{f}")))
            .unwrap()
            .modified()
            .unwrap()
    })
    .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = b.ok(&["wire-mcp"]);
    assert!(again.contains("nothing to do"), "{again}");
    let after: Vec<_> = [
        "claude/.claude.json",
        "codex/config.toml",
        "hermes/config.yaml",
    ]
    .iter()
    .map(|f| {
        std::fs::metadata(home.join(format!(".{f}")))
            .unwrap()
            .modified()
            .unwrap()
    })
    .collect();
    assert_eq!(before, after);

    // Codex's own parser accepts the edited file and shows the env-var name, not a value.
    if let Some(codex_bin) = common::require_tool("codex") {
        let out = Command::new(codex_bin)
            .args(["mcp", "get", "executor"])
            .env("CODEX_HOME", home.join(".codex"))
            .env("HOME", b.dir.path())
            .env_remove("EXECUTOR_MCP_TOKEN")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("bearer_token_env_var: EXECUTOR_MCP_TOKEN"),
            "{text}"
        );
        assert!(
            text.contains("tool_timeout_sec: 120") || text.contains("120"),
            "{text}"
        );
        assert!(!text.contains(&token));
    }
}

#[test]
fn a_new_token_is_rewired_and_disabling_removes_only_ours() {
    let b = seeded();
    b.ok(&["wire-mcp"]);
    let home = b.home();
    // A restore or an Executor upgrade brings another token: the next run must carry it.
    let new_token = "f".repeat(64);
    std::fs::write(
        b.hb_config().join("executor-token"),
        format!("{new_token}\n"),
    )
    .unwrap();
    let out = b.ok(&["wire-mcp"]);
    assert!(out.contains("registered"), "{out}");
    assert_eq!(
        helper_header(&b)["Authorization"],
        format!("Bearer {new_token}")
    );
    assert!(read(&home.join(".codex/.env")).contains(&new_token));
    assert!(read(&home.join(".hermes/.env")).contains(&new_token));

    let text = b.unwire();
    assert!(
        text.contains("disabled") && text.contains("removed"),
        "{text}"
    );
    let claude: serde_json::Value =
        serde_json::from_str(&read(&home.join(".claude/.claude.json"))).unwrap();
    assert!(claude["mcpServers"].get("executor").is_none());
    assert_eq!(claude["mcpServers"]["github"]["type"], "http");
    let codex = read(&home.join(".codex/config.toml"));
    assert!(!codex.contains("mcp_servers.executor"), "{codex}");
    assert!(codex.contains("[mcp_servers.github]"));
    assert_eq!(
        read(&home.join(".codex/.env")),
        "OPENAI_API_KEY=sk-test-keep\n"
    );
    let hermes = read(&home.join(".hermes/config.yaml"));
    assert!(!hermes.contains("executor"), "{hermes}");
    assert!(hermes.contains("github:") && hermes.contains("terminal:"));
    assert_eq!(
        read(&home.join(".hermes/.env")),
        "OPENROUTER_API_KEY=or-keep\n"
    );
    assert!(!b.hb_config().join("executor-mcp.env").exists());
    assert!(!b.hb_config().join("mcp-wired").exists());
    assert!(
        common::files_with(&home, &new_token)
            .iter()
            .all(|p| p.ends_with("executor-token"))
    );
}

#[test]
fn bad_client_config_is_reported_and_left_alone() {
    let b = Box_::new();
    b.init();
    let claude = b.home().join(".claude/.claude.json");
    std::fs::write(&claude, "{ not json").unwrap();
    let out = b.run(&["wire-mcp"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(".claude.json is not valid JSON"), "{err}");
    assert_eq!(read(&claude), "{ not json");
    assert!(
        !b.hb_config().join("mcp-wired").exists(),
        "a failed run must not mark the wiring current"
    );

    let b = Box_::new();
    b.init();
    std::fs::write(
        b.home().join(".hermes/config.yaml"),
        "mcp_servers: {github: {url: x}}\n",
    )
    .unwrap();
    let out = b.run(&["wire-mcp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("flow style"));
}

#[test]
fn wiring_is_refused_while_paused() {
    let b = Box_::new();
    b.init();
    std::fs::write(b.hb_config().join("quiesced"), "").unwrap();
    let out = b.run(&["wire-mcp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `hb up`"));
}

#[test]
fn token_verb_prints_only_the_token() {
    let b = Box_::new();
    b.init();
    b.ok(&["wire-mcp"]);
    let out = b.ok(&["token"]);
    assert_eq!(out, format!("{}\n", b.token().unwrap()));
    // Executor >= 1.5.12's own file wins when the workload has not said otherwise.
    let sc = b.home().join(".executor/server-control");
    std::fs::create_dir_all(&sc).unwrap();
    std::fs::write(sc.join("auth.json"), "{\n  \"token\": \"-Zx_9\"\n}\n").unwrap();
    assert_eq!(b.ok(&["token"]), "-Zx_9\n");
}

#[test]
fn no_wiring_without_executor() {
    let b = seeded();
    b.ok(&["wire-mcp"]);
    let out = b
        .hb(&["wire-mcp"])
        .env("INSTALL_EXECUTOR", "0")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("disabled (INSTALL_EXECUTOR=0)") && text.contains("removed"),
        "{text}"
    );
    let codex = read(&b.home().join(".codex/config.toml"));
    assert!(!codex.contains("mcp_servers.executor"), "{codex}");
}
