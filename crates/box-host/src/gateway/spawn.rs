//! Starting a gateway: `box` re-executes itself as `box -v __gateway <name>`, in a session
//! of its own (no terminal, survives the `box open` that started it), output appended to
//! `<state>/logs/gateway-<name>.log`. Its argv holds only the box name (and `--config`
//! when one was given); its environment is the gateway allowlist of [`crate::child_env`]
//! (box's and smolvm's own variables, never the backup passphrase). The process then reads
//! the token itself, through the smolvm driver.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use box_proto::BoxName;
use box_proto::mcp::BearerToken;

use super::record::{self, GatewayInfo};
use super::{BoxProbe, control, serve};
use crate::child_env::{self, ChildKind};
use crate::context::Context;
use crate::lifecycle::guest;
use crate::smolvm::Smolvm;
use crate::state::{BoxRecord, Registry, StateDir};

/// The hidden verb the gateway process runs under.
pub const VERB: &str = "__gateway";
/// How long a new gateway may take to read the token and listen.
const READY_WAIT: Duration = Duration::from_secs(60);

/// The real box behind a gateway: its token and state come from smolvm and the registry.
struct VmProbe {
    smolvm: Smolvm,
    machine: String,
    state: StateDir,
    name: BoxName,
}

impl BoxProbe for VmProbe {
    fn token(&self) -> Result<BearerToken> {
        guest::read_token(&self.smolvm, &self.machine)
    }

    fn running(&self) -> Result<bool> {
        Ok(self
            .smolvm
            .find(&self.machine)?
            .is_some_and(|m| m.state.is_running()))
    }

    fn registered(&self) -> bool {
        // Only a definite "no such row" counts; an unreadable one is not a removal.
        !matches!(Registry::new(&self.state).get(&self.name), Ok(None))
    }
}

/// Starts `record`'s gateway in the background and waits until it answers. The caller
/// holds the gateway's start lock.
pub fn start(ctx: &Context, record: &BoxRecord) -> Result<GatewayInfo> {
    let name = record.name.as_str();
    let logs = ctx.state.logs_dir();
    StateDir::ensure_private_dir(&logs)?;
    let log_path = record::log_path(&ctx.state, name);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .with_context(|| format!("cannot open the gateway log {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the box binary to run the gateway")?;
    let mut cmd = Command::new(exe);
    child_env::apply(&mut cmd, ChildKind::Gateway);
    cmd.arg("-v");
    if let Some(config) = &ctx.config.source {
        cmd.arg("--config").arg(config);
    }
    cmd.args([VERB, name])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cannot share the gateway log")?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the gateway process")?;
    let started = Instant::now();
    loop {
        if let Some(info) = control::status(&ctx.state, name)?
            && info.pid == child.id()
        {
            return Ok(info);
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the gateway of '{name}' exited ({status}){}; its log: {}",
                log_tail(&log_path),
                log_path.display()
            );
        }
        if started.elapsed() > READY_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the gateway of '{name}' did not start within {}s; its log: {}",
                READY_WAIT.as_secs(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last line of the gateway log, for an error message.
fn log_tail(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_string)
        })
        .map(|l| format!(": {l}"))
        .unwrap_or_default()
}

/// The hidden verb: be `name`'s gateway until it stops.
pub fn run_process(ctx: &Context, name: &str) -> Result<std::process::ExitCode> {
    let name = BoxName::parse(name)?;
    let Some(record) = Registry::new(&ctx.state).get(&name)? else {
        bail!("no box named '{name}'");
    };
    let Some(web_port) = record.web_port else {
        bail!("'{name}' has no exposed Executor host port");
    };
    let smolvm = crate::lifecycle::boxes::smolvm(ctx, &record)?;
    // A remote box's port is on the remote's loopback: the gateway's upstream is a forward
    // of it over the ssh connection, held as long as this process runs.
    let upstream = smolvm.reach_port(web_port)?;
    let upstream_port = upstream.local_port();
    let probe = Arc::new(VmProbe {
        smolvm,
        machine: record.machine.clone(),
        state: ctx.state.clone(),
        name: name.clone(),
    });
    let opts = serve::Options {
        state: ctx.state.clone(),
        box_name: name.to_string(),
        upstream_port,
        idle_timeout: Duration::from_secs(u64::from(ctx.config.env.open_idle_timeout_secs)),
        sessions: super::Lifetimes {
            idle: Duration::from_secs(u64::from(ctx.config.env.open_session_idle_timeout_secs)),
            max_age: Duration::from_secs(u64::from(ctx.config.env.open_session_max_age_secs)),
        },
    };
    serve::run(opts, probe)?;
    Ok(std::process::ExitCode::SUCCESS)
}
