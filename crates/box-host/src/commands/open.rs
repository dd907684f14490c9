//! `box open <name>`: the box's Executor web UI, signed in through box's UI gateway.
//!
//! Under the gateway's start lock: reuse the running gateway, or check the box (running,
//! Executor not paused, healthy) and start one (see `crate::gateway`). The UI is served at
//! the box's own host name, `http://box-<name>.localhost:<port>`, which browsers resolve
//! to loopback themselves (other tools may not: only a browser needs it). Then ask the gateway
//! over its control socket for a sign-in page (0600, in a 0700 dir; it leads the browser
//! to a one-time sign-in URL) and hand the opener only that page's `file://` URL: an argv
//! is readable by every user of the host, the page is not. Executor's token stays inside
//! the gateway: it is in no argv, URL, output or log. `--print-url` prints the sign-in URL
//! instead (a credential until used, for a minute); `--sign-out` ends every browser session
//! (the gateway keeps running); `--stop` stops the gateway.

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Result, bail};
use box_proto::BoxName;

use super::Context;
use crate::child_env::{self, ChildKind};
use crate::cli::OpenArgs;
use crate::doctor::opener::find_opener;
use crate::gateway::{self, GatewayInfo, control, record, sign_in_file, spawn};
use crate::lifecycle::{boxes, readiness};
use crate::state::BoxRecord;
use crate::ui;

/// How long to wait for another `box open` that is starting the same gateway.
const START_LOCK_WAIT: Duration = Duration::from_secs(120);

pub fn run(ctx: &Context, args: &OpenArgs) -> Result<ExitCode> {
    if args.stop {
        let name = BoxName::parse(&args.name)?;
        match gateway::stop(&ctx.state, name.as_str())? {
            Some(info) => ui::say(format!(
                "Stopped the gateway of '{name}' ({}); its browser sessions are signed out",
                info.url()
            )),
            None => ui::say(format!("No gateway is running for '{name}'")),
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.sign_out {
        let name = BoxName::parse(&args.name)?;
        match control::sign_out(&ctx.state, name.as_str())? {
            Some(n) => ui::say(format!(
                "Signed out {n} browser session(s) of '{name}'; run box open {name} to sign in again"
            )),
            None => ui::say(format!(
                "No gateway is running for '{name}', so no browser is signed in"
            )),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let record = boxes::registered(ctx, &args.name)?;
    if record.web_port.is_none() {
        bail!(
            "'{}' has no exposed Executor host port; set EXPOSE_EXECUTOR_WEB=1 in box.env and recreate the box (box save, box rm, box load)",
            record.name
        );
    }
    // Find the opener first: without one (and without --print-url) nothing is started.
    let opener = if args.print_url {
        None
    } else {
        Some(find_opener()?)
    };
    let info = ensure_gateway(ctx, &record)?;
    let Some(opener) = opener else {
        let nonce = control::sign_in_nonce(&ctx.state, record.name.as_str())?;
        ui::say(format!(
            "Sign-in URL for '{}' (works once, within a minute; it is a credential until then):",
            record.name
        ));
        println!("{}", gateway::sign_in_url(&info, &nonce));
        return Ok(ExitCode::SUCCESS);
    };
    let page = control::sign_in_page(&ctx.state, record.name.as_str())?;
    ui::say(format!(
        "Opening Executor UI of '{}' at {} (signed in through box's gateway)",
        record.name,
        info.url()
    ));
    // A confined browser (Ubuntu's snap Firefox) cannot read files under hidden dirs.
    ui::say(format!(
        "If the browser cannot open the sign-in page, run box open {} --print-url and paste the URL",
        record.name
    ));
    let mut cmd = Command::new(&opener.0);
    child_env::apply(&mut cmd, ChildKind::Opener);
    let status = cmd
        .args(&opener.1)
        .arg(sign_in_file::file_url(&page))
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(ExitCode::SUCCESS),
        Ok(s) => bail!(
            "the browser opener {} failed ({s}); set BOX_BROWSER to a graphical opener, or use box open {} --print-url",
            opener.0.display(),
            record.name
        ),
        Err(e) => bail!(
            "could not launch {} ({e}); set BOX_BROWSER to a graphical opener, or use box open {} --print-url",
            opener.0.display(),
            record.name
        ),
    }
}

/// The box's running gateway, started if there is none. Two `box open` at once queue on
/// the start lock, and the second finds the first one's gateway.
fn ensure_gateway(ctx: &Context, record: &BoxRecord) -> Result<GatewayInfo> {
    let name = record.name.as_str();
    let _start = record::start_lock(&ctx.state, name, START_LOCK_WAIT)?;
    if let Some(info) = gateway::reusable(&ctx.state, name)? {
        tracing::info!("reusing the gateway of '{name}' (pid {})", info.pid);
        return Ok(info);
    }
    let _lock = boxes::lock(ctx, record, &format!("box open {name}"))?;
    let smolvm = boxes::smolvm(ctx, record)?;
    let machine = boxes::machine(&smolvm, record)?;
    if !machine.state.is_running() {
        bail!("box '{name}' is not running; run `box start {name}` before opening Executor");
    }
    if readiness::wait_until_ready(&smolvm, record, true)? == readiness::Readiness::ExecutorPaused {
        bail!(
            "Executor in '{name}' is paused (hb down); resume it first: box enter {name}, then hb up"
        );
    }
    let info = spawn::start(ctx, record)?;
    tracing::info!("started the gateway of '{name}' (pid {})", info.pid);
    Ok(info)
}
