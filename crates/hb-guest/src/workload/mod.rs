//! `hb workload`: the box's long-running process (smolvm's workload, PID 1 of its
//! container). A small init: reaps every child, supervises Executor and the enabled Hermes
//! services as the agent, bridges the published web port to Executor, honours the durable
//! pause marker. SIGTERM/SIGINT stop them gracefully (SIGTERM, then SIGKILL after 10 s)
//! and then exit 0.
//!
//! Environment: `HB_WEB_PORT` is the guest port the host publishes for the web UI (set at
//! create time with `smolvm machine create -e HB_WEB_PORT=<port>`); when it is set,
//! differs from `EXECUTOR_PORT` and `EXPOSE_EXECUTOR_WEB=1`, the bridge listens on
//! `0.0.0.0:<HB_WEB_PORT>`.

pub mod backoff;
pub mod bridge;
pub mod hermes;
pub mod logfile;
pub mod reaper;
pub mod supervisor;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::context::Context;
use crate::paths::Paths;
use crate::workload_state::WorkloadState;
use hermes::{Conditions, HermesSupervisor};
use logfile::{MAX_LOG_BYTES, RotatingLog};
use supervisor::Supervisor;

/// How often the workload looks at its children and the pause marker. Every save waits on
/// it twice (quiesce: the pause seen; resume: Executor started), and a load and a new once:
/// at 200 ms that was up to 0.4 s of a save for nothing. A look is a stat and a waitpid.
const TICK: Duration = Duration::from_millis(50);

pub fn run(ctx: &Context) -> Result<ExitCode> {
    // Everything Executor and we create is private: Executor 1.5.9 writes server.json
    // (which holds the token) 0644 under the default umask.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    reaper::become_subreaper();

    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, term.clone()).context("cannot install signal handlers")?;
    }

    let paths = Paths::new(&ctx.data);
    std::fs::create_dir_all(paths.logs())
        .with_context(|| format!("cannot create {}", paths.logs().display()))?;
    let owner = crate::account::Agent::resolve()
        .ok()
        .and_then(|a| a.owner_if_root());
    let log = RotatingLog::shared(paths.log("workload"), MAX_LOG_BYTES, owner);
    let exec_log = RotatingLog::shared(paths.log("executor"), MAX_LOG_BYTES, owner);
    let say = |text: &str| {
        eprintln!("hb workload: {text}");
        if let Ok(mut l) = log.lock() {
            l.line(text);
        }
    };

    // The workload must not die over a bad config: that would end the VM. Use defaults
    // and say why.
    let config = match crate::config::load(ctx) {
        Ok(c) => c,
        Err(e) => {
            say(&format!("bad configuration, using defaults: {e:#}"));
            box_proto::BoxEnv::default()
        }
    };
    let port = config.executor_port;
    let web_port = match crate::config::web_port() {
        Ok(p) => p.filter(|p| config.expose_executor_web && *p != port),
        Err(e) => {
            say(&format!("{e:#}; the web bridge stays off"));
            None
        }
    };
    say(&format!(
        "started (pid {}, data {}, executor port {port}, web bridge {})",
        std::process::id(),
        paths.data.display(),
        web_port.map_or("off".into(), |p| format!("0.0.0.0:{p}"))
    ));

    let bridge_active = Arc::new(AtomicBool::new(false));
    let bridge_stop = Arc::new(AtomicBool::new(false));
    let bridge = web_port.map(|wp| {
        bridge::Bridge {
            listen: SocketAddr::from(([0, 0, 0, 0], wp)),
            target: SocketAddr::from(([127, 0, 0, 1], port)),
            active: bridge_active.clone(),
            stop: bridge_stop.clone(),
        }
        .spawn(log.clone())
    });

    let mut sup = Supervisor::new(
        paths.clone(),
        port,
        config.install_executor,
        log.clone(),
        exec_log,
    );
    let mut hermes = HermesSupervisor::new(paths.clone(), log.clone(), owner);
    let boot = crate::workload_state::boot_id();
    let mut last_state: Option<WorkloadState> = None;
    let mut shutdown_deadline: Option<std::time::Instant> = None;
    loop {
        let exits = reaper::reap();
        sup.on_exits(&exits);
        hermes.on_exits(&exits);
        let shutting_down = term.load(Ordering::Relaxed);
        if shutting_down && shutdown_deadline.is_none() {
            say("signal received: stopping children");
            shutdown_deadline =
                Some(std::time::Instant::now() + supervisor::STOP_GRACE + Duration::from_secs(2));
        }
        let paused = paths.quiesced_marker().exists();
        sup.tick(paused, shutting_down);
        hermes.tick(Conditions {
            paused: paused && crate::pause::stops_hermes(&paths),
            shutting_down,
        });
        bridge_active.store(
            !paused && !shutting_down && sup.is_running(),
            Ordering::Relaxed,
        );

        let current = WorkloadState {
            boot_id: boot.clone(),
            workload_pid: std::process::id(),
            port,
            web_port,
            token_source: sup.token_source.map(|s| s.key().to_string()),
            executor: sup.run_info(),
            note: sup.note.clone(),
            services: hermes.runs(),
        };
        if last_state.as_ref() != Some(&current) && paths.hb_config().is_dir() {
            // Resolved on each write: the agent may appear after the workload started.
            let owner = crate::account::Agent::resolve()
                .ok()
                .and_then(|a| a.owner_if_root());
            if let Err(e) = current.write(&paths, owner) {
                say(&format!("cannot write the workload state: {e:#}"));
            }
            last_state = Some(current);
        }

        if shutting_down
            && ((sup.is_down() && hermes.is_down())
                || shutdown_deadline.is_some_and(|d| std::time::Instant::now() >= d))
        {
            break;
        }
        std::thread::sleep(TICK);
    }
    bridge_stop.store(true, Ordering::Relaxed);
    if let Some(b) = bridge {
        let _ = b.join();
    }
    let _ = std::fs::remove_file(paths.workload_state());
    say("stopped");
    Ok(ExitCode::SUCCESS)
}
