//! Talking to `hb` inside a box, and the host side of the health check.
//!
//! Every `hb` verb runs as root through `machine exec --name N -- /usr/local/bin/hb <verb>`;
//! hb drops to `agent` itself where a verb needs it. The Executor token comes back on hb's
//! stdout only, straight into a `BearerToken`, and is never printed, logged or put on argv.

use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use box_proto::guest_output;
use box_proto::mcp::{self, BearerToken, Healthy, ProbeOptions};
use zeroize::Zeroize;

use crate::smolvm::{ExecOpts, Output, Smolvm};
use crate::ui::terminal_text;

/// Where box installs hb in the guest; the workload launcher waits for it.
pub const HB_PATH: &str = "/usr/local/bin/hb";
/// Where the provisioning files go.
pub const PROVISION_DIR: &str = "/opt/hermes-box/provision";
/// The effective configuration in the guest (root, 0644).
pub const GUEST_CONFIG: &str = "/etc/hermes-box.env";
/// Executor's token file, relative to the data root, for an `hb` without a token verb.
const TOKEN_FILE: &str = "/data/home/agent/.executor/server-control/auth.json";

/// The persistent workload given to `machine create`: smolvm fixes it at create time, when
/// hb is not in the image yet, so a tiny shell waits for box to install hb, then becomes it.
pub fn launcher() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("while [ ! -x {HB_PATH} ]; do sleep 1; done; exec {HB_PATH} workload"),
    ]
}

/// Runs `hb <args>` as root in the guest and returns its output, whatever its status.
pub fn hb(smolvm: &Smolvm, machine: &str, args: &[&str], timeout: Duration) -> Result<Output> {
    hb_cancellable(smolvm, machine, args, timeout, None)
}

/// [`hb`], cut short when a signal is pending (see `runner::CallOpts::cancel`).
pub fn hb_cancellable(
    smolvm: &Smolvm,
    machine: &str,
    args: &[&str],
    timeout: Duration,
    cancel: Option<&AtomicUsize>,
) -> Result<Output> {
    let mut argv = vec![HB_PATH];
    argv.extend_from_slice(args);
    Ok(smolvm.exec(
        machine,
        &argv,
        ExecOpts {
            timeout: Some(timeout),
            cancel,
            ..ExecOpts::default()
        },
    )?)
}

/// Like [`hb`], but a non-zero status is an error quoting hb's last words.
pub fn hb_ok(smolvm: &Smolvm, machine: &str, args: &[&str], timeout: Duration) -> Result<Output> {
    let out = hb(smolvm, machine, args, timeout)?;
    if !out.success() {
        bail!(
            "`hb {}` in box '{machine}' failed ({}){}",
            args.join(" "),
            status(&out),
            last_lines(&out.stderr, &out.stdout)
        );
    }
    Ok(out)
}

pub fn status(out: &Output) -> String {
    out.code.map_or_else(
        || "killed by a signal".into(),
        |c| format!("exit status {c}"),
    )
}

/// The last few non-empty lines of stderr (else stdout), for an error message: guest
/// output, quoted so that nothing in it acts on the terminal the error is shown on.
pub fn last_lines(stderr: &str, stdout: &str) -> String {
    let quoted = |lines: &[&str]| {
        let lines: Vec<String> = lines.iter().map(|l| terminal_text::quoted(l)).collect();
        format!(": {}", lines.join(" | "))
    };
    // hb doctor marks failed checks with ✗: those say more than the last lines.
    let failed: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.trim_start().starts_with('✗'))
        .collect();
    if !failed.is_empty() {
        return quoted(&failed);
    }
    let src = if stderr.trim().is_empty() {
        stdout
    } else {
        stderr
    };
    let lines: Vec<&str> = src.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    quoted(&lines[lines.len().saturating_sub(3)..])
}

/// Reads Executor's token inside the guest: `hb token` where hb has it, else the token file
/// Executor writes (`{"token": "…"}`). The value only ever lives in the returned secret.
pub fn read_token(smolvm: &Smolvm, machine: &str) -> Result<BearerToken> {
    let mut out = hb(smolvm, machine, &["token"], Duration::from_secs(20))?;
    let token = if out.success() {
        guest_output::token(&out.stdout)
    } else {
        out.stdout.zeroize();
        let mut file = smolvm.exec(
            machine,
            &["cat", TOKEN_FILE],
            ExecOpts {
                timeout: Some(Duration::from_secs(20)),
                ..ExecOpts::default()
            },
        )?;
        let token = if file.success() {
            guest_output::token_from_auth_json(&file.stdout)
        } else {
            None
        };
        file.stdout.zeroize();
        token
    };
    out.stdout.zeroize();
    match token {
        Some(t) => Ok(t),
        None => bail!(
            "cannot read Executor's token in box '{machine}' (is Executor installed and started? try: box doctor {machine})"
        ),
    }
}

/// The full MCP handshake from the host through the published port, retried (Executor may
/// still be starting) up to `tries` times, one second apart.
pub fn host_handshake(
    port: u16,
    token: &BearerToken,
    tries: u32,
    cancel: Option<&AtomicUsize>,
) -> Result<Healthy> {
    let url = mcp::executor_url(port);
    let opts = ProbeOptions::default();
    let mut last = None;
    for attempt in 0..tries.max(1) {
        let started = Instant::now();
        match mcp::probe(&url, Some(token), &opts) {
            Ok(h) => {
                tracing::debug!(
                    port,
                    elapsed_ms = h.elapsed.as_secs_f64() * 1000.0,
                    "MCP handshake finished"
                );
                return Ok(h);
            }
            Err(e) => last = Some(e),
        }
        if let Some(signal) = cancel.map(|c| c.load(std::sync::atomic::Ordering::SeqCst))
            && signal != 0
        {
            return Err(crate::smolvm::SmolvmError::Interrupted {
                call: format!("MCP handshake through port {port}"),
                signal,
            }
            .into());
        }
        if attempt + 1 < tries {
            std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
        }
    }
    match last {
        Some(e) => bail!("Executor MCP through http://127.0.0.1:{port} is not healthy: {e}"),
        None => bail!("Executor MCP through http://127.0.0.1:{port} was not probed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_waits_for_hb_then_becomes_it() {
        let l = launcher();
        assert_eq!(l[0], "/bin/sh");
        assert_eq!(
            l[2],
            "while [ ! -x /usr/local/bin/hb ]; do sleep 1; done; exec /usr/local/bin/hb workload"
        );
    }

    #[test]
    fn last_lines_prefers_stderr() {
        assert_eq!(last_lines("a\n\nb\nc\nd\n", "x"), ": b | c | d");
        assert_eq!(last_lines(" \n", "x\n"), ": x");
        assert_eq!(last_lines("", ""), "");
        assert_eq!(
            last_lines("", "✓ a\n✗ b: no\n   fix: x\n✓ c\n"),
            ": ✗ b: no"
        );
    }

    #[test]
    fn last_lines_quote_what_would_act_on_a_terminal() {
        // A clipboard write, a title, a line rewritten by CR, in what the guest printed.
        let stderr = "step 1\n\x1b]52;c;Y3VybCBldmls\x07failed\rall good\n\x1b]0;ok\x07done\n";
        assert_eq!(
            last_lines(stderr, ""),
            ": step 1 | \\x1b]52;c;Y3VybCBldmls\\x07failed\\x0dall good | \\x1b]0;ok\\x07done"
        );
        assert_eq!(
            last_lines("", "✗ net: \u{202e}kc\n"),
            ": ✗ net: \\u{202e}kc"
        );
    }
}
