//! The tools a box provides and their versions, as the runtime manifest records them.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::executor::find_tool;

/// (manifest key, command, version args)
pub const TOOLS: &[(&str, &str, &[&str])] = &[
    ("node", "node", &["--version"]),
    ("claude", "claude", &["--version"]),
    ("codex", "codex", &["--version"]),
    ("hermes", "hermes", &["--version"]),
    ("executor", "executor", &["--version"]),
];

/// Other tools provisioning installs and doctor expects.
pub const BASE_TOOLS: &[&str] = &["tmux", "git", "curl", "jq", "nvim", "sudo"];

/// Runs `bin args` with a timeout and returns the first non-empty line of its output.
/// Tool output is not trusted: control characters are dropped and the line is cut short.
pub fn first_line(bin: &Path, args: &[&str], timeout: Duration) -> Option<String> {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.by_ref().take(64 * 1024).read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let text = reader.join().ok()?;
    text.lines()
        .map(|l| {
            l.chars()
                .filter(|c| !c.is_control())
                .take(120)
                .collect::<String>()
        })
        .map(|l| l.trim().to_string())
        .find(|l| !l.is_empty())
}

/// Every tool's version: `Some(line)` when installed and answering, `None` when missing.
/// The tools are asked at once: each `--version` starts a runtime (node, python, a 400 MB
/// binary) and one after another took ~2 s of every `box new`.
pub fn versions() -> Vec<(&'static str, Option<String>)> {
    let asked: Vec<_> = TOOLS
        .iter()
        .map(|(key, cmd, args)| {
            let bin = find_tool(cmd);
            let present = bin.is_some();
            let answer = std::thread::spawn(move || {
                bin.map(|bin| {
                    first_line(&bin, args, Duration::from_secs(15))
                        .unwrap_or_else(|| "installed".into())
                })
            });
            (*key, present, answer)
        })
        .collect();
    asked
        .into_iter()
        .map(|(key, present, answer)| {
            let fallback = present.then(|| "installed".to_string());
            (key, answer.join().unwrap_or(fallback))
        })
        .collect()
}
