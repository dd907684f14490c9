//! `hb doctor [--json]`: every check with ✓/✗ and a one-line fix; exit 1 on any ✗.
//!
//! Checks: required tools, the durable layout and its permissions, private secret files,
//! the login profile, Executor up (or durably paused, with its port closed), a complete
//! MCP handshake with the current token, each enabled Hermes service running (or paused
//! with Executor), the token's source, and the wiring.

use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;

use anyhow::Result;
use box_proto::mcp::{self, ProbeError};
use serde::Serialize;

use super::init::LAYOUT;
use crate::account::Agent;
use crate::context::Context;
use crate::fsutil::mode_of;
use crate::paths::Paths;
use crate::workload_state::WorkloadState;
use crate::{config, executor, pause, token, wiring};

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        ok: true,
        detail: detail.into(),
        fix: None,
    }
}

fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        ok: false,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

/// What box handed in from the host's network set-up (PROPAGATE_PROXY, GUEST_CA_CERTS):
/// proxies with credentials hidden, and whether the extra CA certificates are in the trust
/// store. `HB_PROXY_ENV`/`HB_CA_CERTS`/`HB_CA_TRUSTED` override the paths (tests).
fn guest_network() -> Check {
    let ca = crate::netenv::ca_certs_file().display().to_string();
    let trusted = std::env::var("HB_CA_TRUSTED")
        .unwrap_or_else(|_| "/usr/local/share/ca-certificates/hermes-box.crt".into());
    let proxies: Vec<String> = crate::netenv::proxies()
        .into_iter()
        .filter(|(k, _)| box_proto::proxy::NAMES.contains(&k.as_str()))
        .map(|(k, v)| {
            if box_proto::proxy::is_url_var(&k) {
                format!("{k}={}", box_proto::proxy::redact(&v))
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    let proxies = if proxies.is_empty() {
        "proxies: none".to_string()
    } else {
        format!("proxies: {}", proxies.join(" "))
    };
    let pem = std::fs::read(&ca).unwrap_or_default();
    if pem.is_empty() {
        return pass(
            "guest network",
            format!("{proxies}; extra CA certificates: none"),
        );
    }
    let count = String::from_utf8_lossy(&pem)
        .matches("-----BEGIN CERTIFICATE-----")
        .count();
    if std::fs::read(&trusted).ok().as_deref() != Some(pem.as_slice()) {
        return fail(
            "guest network",
            format!(
                "{proxies}; {count} extra CA certificate(s) in {ca} are not in the trust store ({trusted})"
            ),
            "`box repair <box>` on the host (provisioning installs them)",
        );
    }
    pass(
        "guest network",
        format!("{proxies}; extra CA certificates: {count} (GUEST_CA_CERTS), trusted"),
    )
}

fn layout_problem(paths: &Paths, agent: &Agent) -> Option<String> {
    for (rel, mode, agent_owned) in LAYOUT {
        let p = if rel.is_empty() {
            paths.data.clone()
        } else {
            paths.data.join(rel)
        };
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            return Some(format!("{} is missing", p.display()));
        };
        if !meta.is_dir() {
            return Some(format!("{} is not a directory", p.display()));
        }
        let got = meta.mode() & 0o7777;
        if got != *mode {
            return Some(format!(
                "{} has mode {got:o}, expected {mode:o}",
                p.display()
            ));
        }
        if *agent_owned && meta.uid() != agent.uid.as_raw() {
            return Some(format!(
                "{} is owned by uid {}, expected {} ({})",
                p.display(),
                meta.uid(),
                agent.uid,
                agent.name
            ));
        }
    }
    None
}

fn secret_files(paths: &Paths) -> Vec<std::path::PathBuf> {
    vec![
        paths.minted_token(),
        paths.executor_auth_json(),
        paths.mcp_env(),
        paths.wire_marker(),
        paths.claude_json(),
        paths.codex_home().join("config.toml"),
        paths.codex_home().join(".env"),
        paths.hermes_home().join("config.yaml"),
        paths.hermes_home().join(".env"),
        paths.manifest(),
    ]
}

fn probe_fix(e: &ProbeError) -> &'static str {
    match e {
        ProbeError::Unauthorized { .. } => {
            "the token does not match the running Executor: restart it (`hb down && hb up`) and re-run `hb wire-mcp`"
        }
        ProbeError::Refused { .. } => "start Executor: `hb up` (see `hb logs executor`)",
        ProbeError::Timeout { .. } => {
            "Executor hangs: `hb down && hb up`, then see `hb logs executor`"
        }
        _ => {
            "another program answers on Executor's port, or Executor is broken: see `hb logs executor`"
        }
    }
}

/// How many of a failed service's last log lines its check quotes.
const SERVICE_LOG_LINES: usize = 3;

/// The last `n` non-empty lines of a log, each escaped and cut short: the log is the
/// agent's and holds what Hermes printed.
fn log_tail(path: &std::path::Path, n: usize) -> Vec<String> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const TAIL_BYTES: u64 = 8192;
    let Ok(mut f) = crate::fsutil::open_regular(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))
        .is_err()
        || f.take(TAIL_BYTES).read_to_end(&mut bytes).is_err()
    {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| box_proto::guest_output::quoted(l, 200))
        .collect()
}

/// Each enabled Hermes service runs, or is paused on purpose; a set file hb cannot read
/// is a failure too (nothing it names runs).
fn hermes_service_checks(paths: &Paths) -> Vec<Check> {
    let mut out = Vec::new();
    let problems = crate::hermes_services::read(paths).problems;
    if !problems.is_empty() {
        out.push(fail(
            "hermes services list",
            problems.join("; "),
            "`hb service enable|disable <service>` rewrites it",
        ));
    }
    // A service the workload is stopping or starting right now (a restart `hb wire-mcp`
    // asked for) is judged once it has done so.
    let enabled = crate::hermes_services::read(paths).set;
    let settle = crate::workload::supervisor::STOP_GRACE + std::time::Duration::from_secs(2);
    for v in crate::hermes_services::wait_settled(paths, &enabled, settle) {
        out.push(match v.state.as_str() {
            "running" => pass(v.name, v.summary()),
            "paused" => pass(
                v.name,
                format!(
                    "paused with Executor{}; `hb up` resumes both",
                    pause::paused_by(paths)
                        .map(|(op, at)| format!(" by {op} at {at}"))
                        .unwrap_or_default()
                ),
            ),
            _ => {
                let tail = log_tail(&paths.log(v.name), SERVICE_LOG_LINES);
                fail(
                    v.name,
                    format!(
                        "not running: {}{}",
                        v.summary(),
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!("; last log lines: {}", tail.join(" | "))
                        }
                    ),
                    format!(
                        "see `hb logs {0}` (and `hb logs workload`); `hb service disable {0}` stops hb starting it",
                        v.name
                    ),
                )
            }
        });
    }
    out
}

pub fn checks(ctx: &Context) -> Result<Vec<Check>> {
    let paths = Paths::new(&ctx.data);
    let cfg = config::load(ctx)?;
    let mut out = Vec::new();
    let repair = "re-run provisioning: `box repair <box>`";

    let mut required = vec!["node", "claude", "codex"];
    if cfg.install_executor {
        required.push("executor");
    }
    if cfg.install_hermes {
        required.push("hermes");
    }
    required.extend(["tmux", "git"]);
    for tool in required {
        out.push(match executor::find_tool(tool) {
            Some(p) => pass(format!("{tool} installed"), p.display().to_string()),
            None => fail(
                format!("{tool} installed"),
                "not found on PATH or in /opt/hermes-box/bin",
                repair,
            ),
        });
    }

    match Agent::resolve() {
        Ok(agent) => out.push(match layout_problem(&paths, &agent) {
            None => pass(
                "durable layout and permissions",
                format!("{} (home owned by {})", paths.data.display(), agent.name),
            ),
            Some(p) => fail(
                "durable layout and permissions",
                p,
                "run `hb init` as root (or `box repair <box>`)",
            ),
        }),
        Err(e) => out.push(fail("agent account", format!("{e:#}"), repair)),
    }
    let loose: Vec<String> = secret_files(&paths)
        .into_iter()
        .filter(|p| mode_of(p).is_some_and(|m| m & 0o077 != 0))
        .map(|p| format!("{} ({:o})", p.display(), mode_of(&p).unwrap_or(0)))
        .collect();
    out.push(if loose.is_empty() {
        pass(
            "secret files private",
            "token, env and client config files are 0600",
        )
    } else {
        fail(
            "secret files private",
            format!("readable by others: {}", loose.join(", ")),
            "chmod 600 each file listed",
        )
    });
    let profile = crate::account::login_profile().display().to_string();
    out.push(if std::fs::File::open(&profile).is_ok() {
        pass("login profile present", profile)
    } else {
        fail(
            "login profile present",
            format!("{profile} is missing or unreadable"),
            repair,
        )
    });

    out.push(guest_network());

    let port = cfg.executor_port;
    let live = WorkloadState::read_live(&paths);
    let source = live.as_ref().and_then(|s| s.token_source());
    let tok = token::current(&paths, source);
    if !cfg.install_executor {
        out.push(pass("executor", "disabled (INSTALL_EXECUTOR=0)"));
    } else if pause::is_paused(&paths) {
        let (op, at) = pause::paused_by(&paths)
            .unwrap_or_else(|| ("an unknown operation".into(), "an unknown time".into()));
        if paths.quiesce_record().exists() {
            // `hb quiesce` (box save, box load) left its record: nothing resumed it, so the
            // save or load was interrupted (box doctor holds the box lock: none is running).
            out.push(fail(
                "executor paused by an interrupted save",
                format!(
                    "paused by {op} at {at}, and the box save/load that ran it never resumed it (quiesce record {})",
                    paths.quiesce_record().display()
                ),
                "`box doctor --fix <box>` on the host, or inside: `hb resume` then `hb up`",
            ));
        } else {
            out.push(pass(
                "executor durably paused",
                format!(
                    "by {op} at {at} (marker {}); `hb up` resumes it",
                    paths.quiesced_marker().display()
                ),
            ));
        }
        out.push(if executor::port_open(port) {
            fail(
                "executor port closed while paused",
                format!("127.0.0.1:{port} still accepts connections"),
                "stop whatever listens there; check `hb status`",
            )
        } else {
            pass(
                "executor port closed while paused",
                format!("127.0.0.1:{port}"),
            )
        });
    } else {
        out.push(if executor::port_open(port) {
            pass("executor listening", format!("127.0.0.1:{port}"))
        } else {
            fail(
                "executor listening",
                format!(
                    "nothing listens on 127.0.0.1:{port}{}",
                    live.as_ref()
                        .map_or(" (the workload is not running)".into(), |s| format!(
                            " (workload: {})",
                            s.note
                        ))
                ),
                "`hb up`; if that fails see `hb logs executor` and `hb logs workload`",
            )
        });
        let t = tok.as_ref().ok().and_then(|t| t.as_ref()).map(|(t, _)| t);
        out.push(
            match mcp::probe(&mcp::executor_url(port), t, &mcp::ProbeOptions::default()) {
                Ok(h) => pass(
                    "MCP handshake",
                    format!(
                        "{} {} speaks {} ({} ms)",
                        h.server.name,
                        h.server.version,
                        h.protocol_version,
                        h.elapsed.as_millis()
                    ),
                ),
                Err(e) => fail("MCP handshake", e.to_string(), probe_fix(&e)),
            },
        );
    }
    out.extend(hermes_service_checks(&paths));
    match &tok {
        Ok(Some((_, s))) => out.push(pass("executor token", s.describe())),
        Ok(None) if !cfg.install_executor => {}
        Ok(None) => out.push(fail(
            "executor token",
            "no token yet",
            "start Executor (`hb up`); it writes or receives one",
        )),
        Err(e) => out.push(fail(
            "executor token",
            format!("{e:#}"),
            "fix or remove the token file named above, then `hb down && hb up`",
        )),
    }

    if !cfg.wire_executor_mcp || !cfg.install_executor {
        out.push(pass(
            "MCP wiring",
            "disabled (WIRE_EXECUTOR_MCP=0 or INSTALL_EXECUTOR=0)",
        ));
    } else if let Ok(Some((t, _))) = &tok {
        let url = mcp::executor_url(port);
        let clients = wiring::clients(&paths);
        let problems = wiring::check(&paths, &url, t, &clients);
        let marker_ok = wiring::is_current(&paths, &url, t, &clients);
        out.push(if problems.is_empty() && marker_ok {
            let names: Vec<&str> = clients.iter().map(|c| c.name()).collect();
            pass(
                "MCP wiring",
                format!(
                    "{} carry the current token ({})",
                    names.join(", "),
                    wiring::WIRE_VERSION
                ),
            )
        } else if problems.is_empty() {
            fail(
                "MCP wiring",
                "the wiring marker is missing or from another version",
                "`hb wire-mcp`",
            )
        } else {
            let text: Vec<String> = problems
                .iter()
                .map(|(c, p)| format!("{}: {p}", c.name()))
                .collect();
            fail("MCP wiring", text.join("; "), "`hb wire-mcp`")
        });
    } else {
        out.push(fail(
            "MCP wiring",
            "cannot check without a token",
            "start Executor (`hb up`), then `hb wire-mcp`",
        ));
    }
    Ok(out)
}

pub fn run(ctx: &Context, args: &crate::cli::JsonArg) -> Result<ExitCode> {
    let checks = checks(ctx)?;
    let ok = checks.iter().all(|c| c.ok);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"ok": ok, "checks": checks}))?
        );
    } else {
        for c in &checks {
            if c.ok {
                println!("✓ {}: {}", c.name, c.detail);
            } else {
                println!("✗ {}: {}", c.name, c.detail);
                if let Some(f) = &c.fix {
                    println!("    fix: {f}");
                }
            }
        }
        let bad = checks.iter().filter(|c| !c.ok).count();
        if bad == 0 {
            println!("all {} checks passed", checks.len());
        } else {
            println!("{bad} of {} checks failed", checks.len());
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
