//! The gateway process itself: listen on `127.0.0.1:<free port>` (held on ::1 too, see
//! `super::loopback`) for the box's host name and on the control socket, answer
//! requests, and stop when told to, when the box goes away, or when idle.
//!
//! One current-thread tokio runtime: a person's browser is the only client, and it keeps
//! the resident size small. Blocking work (reading the token through smolvm, asking
//! smolvm whether the box runs) goes to tokio's blocking pool.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

use super::clock::Moment;
use super::control::{MAX_LINE, Request};
use super::proxy::{self, Shared};
use super::record::{self, GatewayInfo};
use super::session::Lifetimes;
use super::{BoxProbe, host_name, loopback, sign_in_file};
use crate::state::{StateDir, registry};

/// What a gateway serves, and for how long.
#[derive(Debug, Clone)]
pub struct Options {
    pub state: StateDir,
    pub box_name: String,
    /// The box's published Executor port on 127.0.0.1.
    pub upstream_port: u16,
    pub idle_timeout: Duration,
    /// How long a signed-in browser stays signed in.
    pub sessions: Lifetimes,
}

/// Runs a gateway to the end on a fresh runtime; returns why it stopped.
pub fn run(opts: Options, probe: Arc<dyn BoxProbe>) -> Result<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the gateway's runtime")?;
    rt.block_on(serve(opts, probe))
}

/// Serves until the gateway must stop; returns why. The control socket and info file are
/// created once the gateway listens, and removed on the way out.
pub async fn serve(opts: Options, probe: Arc<dyn BoxProbe>) -> Result<String> {
    let name = opts.box_name.clone();
    let dir = record::dir(&opts.state);
    StateDir::ensure_private_dir(&dir)?;
    let reader = Arc::clone(&probe);
    let token = tokio::task::spawn_blocking(move || reader.token())
        .await
        .context("the token reader failed")??;
    let loopback = loopback::bind().await?;
    let (listener, port) = (&loopback.listener, loopback.port);
    let host = host_name::for_box(&name);
    let sock = record::socket_path(&opts.state, &name);
    // The caller holds the start lock and found no gateway answering: a socket file left
    // here belongs to a dead gateway.
    let _ = std::fs::remove_file(&sock);
    let control = UnixListener::bind(&sock)
        .with_context(|| format!("cannot listen on {}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", sock.display()))?;
    let info = GatewayInfo {
        box_name: name.clone(),
        pid: std::process::id(),
        host: host.clone(),
        port,
        upstream_port: opts.upstream_port,
        started: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    };
    sign_in_file::remove_stale(&opts.state, &name);
    let info_path = record::info_path(&opts.state, &name);
    registry::write_atomically(&info_path, serde_json::to_string_pretty(&info)?.as_bytes())?;
    let shared = Arc::new(Shared::new(
        name.clone(),
        format!("{host}:{port}"),
        opts.upstream_port,
        token,
        probe,
        opts.sessions,
    ));
    tracing::info!(
        "gateway of '{name}' listening on 127.0.0.1:{port} for {}, forwarding to 127.0.0.1:{}",
        info.url(),
        opts.upstream_port
    );
    let mut stopped = shared.shutdown.subscribe();
    let control_task = tokio::spawn(control_loop(
        control,
        opts.state.clone(),
        Arc::clone(&shared),
        info.clone(),
    ));
    let watch_task = tokio::spawn(watch_lifetime(Arc::clone(&shared), opts.idle_timeout));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        let service = service_fn(move |req| proxy::handle(Arc::clone(&shared), req));
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .with_upgrades();
                        if let Err(e) = conn.await {
                            tracing::debug!("browser connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stopped.changed() => break,
        }
    }
    control_task.abort();
    watch_task.abort();
    // Sign-in pages not yet used go now: they lead nowhere once the gateway is gone.
    *shared.nonces.lock().unwrap_or_else(|e| e.into_inner()) = Default::default();
    // Only remove what is still ours (a later gateway may have replaced it).
    if std::fs::read_to_string(&info_path)
        .ok()
        .and_then(|t| serde_json::from_str::<GatewayInfo>(&t).ok())
        .is_some_and(|i| i.pid == info.pid)
    {
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_file(&info_path);
    }
    let reason = stopped
        .borrow()
        .clone()
        .unwrap_or_else(|| "stopped".to_string());
    tracing::info!("gateway of '{name}' stopped: {reason}");
    Ok(reason)
}

/// Idle timeout and "the box is gone" (`box rm`, or its registry row removed otherwise).
/// `box stop` and `box rm` also stop the gateway directly; this is the backstop.
async fn watch_lifetime(shared: Arc<Shared>, idle_timeout: Duration) {
    let tick = (idle_timeout / 4).clamp(Duration::from_millis(200), Duration::from_secs(2));
    loop {
        tokio::time::sleep(tick).await;
        // Unused sign-in pages must not outlive their minute; an expired session's streams
        // end now, not at their next request.
        let now = Moment::now();
        shared
            .nonces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expire(now);
        let ended = shared
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expire(now);
        if ended > 0 {
            tracing::info!(
                "{ended} browser session(s) of '{}' expired",
                shared.box_name
            );
        }
        if let Some(idle) = shared.activity.idle_for()
            && idle >= idle_timeout
        {
            shared.stop(format!("idle for {}s", idle_timeout.as_secs()));
            return;
        }
        let probe = Arc::clone(&shared.probe);
        if let Ok(false) = tokio::task::spawn_blocking(move || probe.registered()).await {
            shared.stop(format!("box '{}' was removed", shared.box_name));
            return;
        }
    }
}

/// A fresh nonce written into a sign-in page tied to it: the reply `page <path>`.
fn sign_in_page(state: &StateDir, shared: &Shared, info: &GatewayInfo) -> String {
    let mut nonces = shared.nonces.lock().unwrap_or_else(|e| e.into_inner());
    let nonce = nonces.issue(Moment::now());
    let url = super::sign_in_url(info, &nonce);
    match sign_in_file::write(state, &shared.box_name, &url) {
        Ok(path) => {
            nonces.attach_page(&nonce, path.clone());
            format!("page {}", path.display())
        }
        Err(e) => {
            tracing::warn!("{e:#}");
            "error cannot write the sign-in page (see the gateway log)".to_string()
        }
    }
}

async fn control_loop(
    listener: UnixListener,
    state: StateDir,
    shared: Arc<Shared>,
    info: GatewayInfo,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = Arc::clone(&shared);
        let info = info.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = BufReader::new(read.take(MAX_LINE as u64));
            let read = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line));
            let reply = match read.await {
                Ok(Ok(_)) => match Request::parse(&line) {
                    Some(Request::SignIn) => {
                        // A sign-in on its way counts as use: the gateway must not idle out
                        // between handing out the URL and the browser arriving.
                        shared.activity.touch();
                        let nonce = shared
                            .nonces
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .issue(Moment::now());
                        format!("nonce {nonce}")
                    }
                    Some(Request::SignInPage) => {
                        shared.activity.touch();
                        sign_in_page(&state, &shared, &info)
                    }
                    Some(Request::SignOut) => {
                        let n = shared
                            .sessions
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .end_all();
                        tracing::info!("signed out {n} browser session(s) on request");
                        format!("ok {n}")
                    }
                    Some(Request::Status) => {
                        serde_json::to_string(&info).unwrap_or_else(|e| format!("error {e}"))
                    }
                    Some(Request::Stop) => {
                        shared.stop("stopped on request (box open --stop, box stop or box rm)");
                        "ok".to_string()
                    }
                    None => "error unknown request".to_string(),
                },
                _ => return,
            };
            let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
        });
    }
}
