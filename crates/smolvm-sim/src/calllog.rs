//! The call log: one JSON line per invocation at `$SMOLVM_SIM_HOME/calls.jsonl`:
//! `{"argv":[...],"env":{"SMOLVM_SIM_FAIL":..,"SMOLVM_SIM_VERSION":..},"pid":N,"ts":UNIX}`.
//! `argv[0]` is the program as invoked. Values of `-e/--env KEY=VALUE` whose KEY contains
//! TOKEN, PASS, SECRET or KEY are replaced by `<redacted>`.
//!
//! TEST-ONLY: with `SMOLVM_SIM_RAW_CALL_LOG=<file>` every invocation is also appended there
//! unredacted, argv and the whole environment, one JSON line each. That is what `ps` and
//! `/proc/<pid>/environ` show of a real smolvm call (and what its machine DB keeps), so
//! secret scans must read it: the redacted log above would hide `-e EXECUTOR_MCP_TOKEN=…`.
//! Real smolvm has no such switch; nothing but tests may set it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

const LOGGED_ENV: [&str; 2] = ["SMOLVM_SIM_VERSION", "SMOLVM_SIM_FAIL"];

fn sensitive(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    ["TOKEN", "PASS", "SECRET", "KEY"]
        .iter()
        .any(|w| k.contains(w))
}

fn redact_kv(kv: &str) -> String {
    match kv.split_once('=') {
        Some((k, _)) if sensitive(k) => format!("{k}=<redacted>"),
        _ => kv.to_string(),
    }
}

/// Redact env values in smolvm's own flags (the guest argv after `--` is left alone).
pub fn redact(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut next_is_env = false;
    let mut after_dashdash = false;
    for a in argv {
        if after_dashdash {
            out.push(a.clone());
            continue;
        }
        if next_is_env {
            out.push(redact_kv(a));
            next_is_env = false;
            continue;
        }
        if a == "--" {
            after_dashdash = true;
            out.push(a.clone());
        } else if a == "-e" || a == "--env" {
            next_is_env = true;
            out.push(a.clone());
        } else if let Some(v) = a.strip_prefix("--env=") {
            out.push(format!("--env={}", redact_kv(v)));
        } else if let Some(v) = a
            .strip_prefix("-e")
            .filter(|v| !v.is_empty() && !a.starts_with("--"))
        {
            let v = v.strip_prefix('=').unwrap_or(v);
            out.push(format!("-e{}", redact_kv(v)));
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// Append this invocation to the log. Failures are ignored: logging must never change
/// what the caller observes.
pub fn record(argv: &[String]) {
    record_raw_for_tests(argv);
    let home = crate::home::home();
    if std::fs::create_dir_all(&home).is_err() {
        return;
    }
    let mut env = serde_json::Map::new();
    for k in LOGGED_ENV {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.to_string(), serde_json::Value::String(v));
        }
    }
    let line = serde_json::json!({
        "argv": redact(argv),
        "env": env,
        "pid": std::process::id(),
        "ts": crate::registry::now_secs(),
    });
    append_line(&home.join("calls.jsonl"), &line);
}

/// Appends one JSON line to a 0600 log; a log that cannot be written is skipped (the call
/// itself must not fail for it).
fn append_line(path: &std::path::Path, line: &serde_json::Value) {
    let Ok(mut s) = serde_json::to_string(line) else {
        return;
    };
    s.push('\n');
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
    {
        let _ = f.write_all(s.as_bytes());
    }
}

/// TEST-ONLY: the unredacted line for `SMOLVM_SIM_RAW_CALL_LOG` (see the module doc).
fn record_raw_for_tests(argv: &[String]) {
    let Some(path) = std::env::var_os("SMOLVM_SIM_RAW_CALL_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    let env: serde_json::Map<String, serde_json::Value> = std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                serde_json::Value::String(v.to_string_lossy().into_owned()),
            )
        })
        .collect();
    let line = serde_json::json!({ "argv": argv, "env": env, "pid": std::process::id() });
    append_line(std::path::Path::new(&path), &line);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn redacts_sensitive_env_only() {
        let got = redact(&v(&[
            "smolvm",
            "machine",
            "create",
            "-e",
            "API_TOKEN=abc",
            "--env",
            "MODE=x",
            "--env=DB_PASSWORD=p",
            "-eMY_KEY=k",
            "--",
            "sh",
            "-e",
            "SECRET=keep-guest-argv",
        ]));
        assert_eq!(
            got,
            v(&[
                "smolvm",
                "machine",
                "create",
                "-e",
                "API_TOKEN=<redacted>",
                "--env",
                "MODE=x",
                "--env=DB_PASSWORD=<redacted>",
                "-eMY_KEY=<redacted>",
                "--",
                "sh",
                "-e",
                "SECRET=keep-guest-argv",
            ])
        );
    }
}
