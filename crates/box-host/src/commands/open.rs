//! `box open <name>`: hand the authenticated Executor URL to a browser.
//!
//! The token is read inside the guest, put into the URL and passed as the only argument of
//! the opener; it is never printed or logged, and our own messages show the URL without it.
//! (The opener's argv is visible to local users via /proc, as it was in the seed; the
//! token is only valid against a loopback port.)

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Result, bail};

use super::Context;
use crate::lifecycle::{boxes, guest, readiness};
use crate::smolvm::Smolvm;
use crate::ui;

pub fn run(ctx: &Context, args: &crate::cli::NameArg) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    let _lock = boxes::lock(ctx, &record, &format!("box open {}", record.name))?;
    let Some(port) = record.web_port else {
        bail!(
            "'{}' has no exposed Executor host port; set EXPOSE_EXECUTOR_WEB=1 in box.env and recreate the box (box save, box rm, box load)",
            record.name
        );
    };
    let opener = find_opener()?;
    let smolvm = Smolvm::from_env();
    let machine = boxes::machine(&smolvm, &record)?;
    if !machine.state.is_running() {
        bail!(
            "box '{}' is not running; run `box start {}` before opening Executor",
            record.name,
            record.name
        );
    }
    if readiness::wait_until_ready(&smolvm, &record, true)? == readiness::Readiness::ExecutorPaused
    {
        bail!(
            "Executor in '{}' is paused (hb down); resume it first: box enter {}, then hb up",
            record.name,
            record.name
        );
    }
    let token = guest::read_token(&smolvm, &record.machine)?;
    ui::say(format!(
        "Opening authenticated Executor UI at http://127.0.0.1:{port}"
    ));
    let url = format!("http://127.0.0.1:{port}/?_token={}", token.expose());
    let status = Command::new(&opener.0)
        .args(&opener.1)
        .arg(&url)
        .stdin(Stdio::null())
        .status();
    drop(url);
    match status {
        Ok(s) if s.success() => Ok(ExitCode::SUCCESS),
        Ok(s) => bail!(
            "the browser opener {} failed ({s}); set BOX_BROWSER to a graphical opener",
            opener.0.display()
        ),
        Err(e) => bail!(
            "could not launch {} ({e}); set BOX_BROWSER to a graphical opener",
            opener.0.display()
        ),
    }
}

/// The opener: `BOX_BROWSER` (must be on PATH or a path), else `open` on macOS,
/// `xdg-open` then `gio open` on Linux. Returns the program and its leading arguments.
pub fn find_opener() -> Result<(PathBuf, Vec<String>)> {
    if let Some(b) = std::env::var_os("BOX_BROWSER").filter(|v| !v.is_empty()) {
        let b = PathBuf::from(b);
        return match which(&b) {
            Some(p) => Ok((p, vec![])),
            None => bail!("BOX_BROWSER={} is not an executable on PATH", b.display()),
        };
    }
    let candidates: &[(&str, &[&str])] = if cfg!(target_os = "macos") {
        &[("open", &[])]
    } else {
        &[("xdg-open", &[]), ("gio", &["open"])]
    };
    for (prog, lead) in candidates {
        if let Some(p) = which(Path::new(prog)) {
            return Ok((p, lead.iter().map(|s| s.to_string()).collect()));
        }
    }
    bail!("could not find a browser opener (xdg-open, gio); set BOX_BROWSER to a graphical opener")
}

/// Resolves a program name on PATH (or checks a path) to an executable file.
pub fn which(prog: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.components().count() > 1 {
        return ok(prog).then(|| prog.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(prog))
            .find(|p| ok(p))
    })
}
