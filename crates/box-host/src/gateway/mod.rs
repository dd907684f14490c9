//! `box open`'s UI gateway: a trust boundary between the browser and Executor.
//!
//! The gateway is a background `box __gateway <name>` process owned by the user, listening
//! on `127.0.0.1:<free port>` and answering only at the box's own host name,
//! `http://box-<name>.localhost:<port>`, so the UI's cookies are not shared with every
//! other local web app. It reads Executor's long-lived token from the guest through the
//! smolvm driver (as every other verb does; nothing secret in its argv or environment),
//! and adds `Authorization: Bearer <token>` to every request it forwards to the box's
//! published Executor port. The browser only ever holds a one-time sign-in nonce (from the
//! sign-in page the opener is pointed at) and then a session cookie valid against this gateway alone.
//! This works on every Executor: 1.5.9 reads no token from a URL at all.
//!
//! - `host_name`: the box's name under `.localhost`, a cookie jar of its own;
//! - `loopback`: the port, on 127.0.0.1 and held on ::1, where browsers try first;
//! - `nonce`, `session`: the one-time sign-in and the cookie it is traded for, both
//!   drawn from `random`;
//! - `clock`: their lifetimes count the time the machine sleeps;
//! - [`sign_in_file`]: the 0600 page the opener gets instead of a URL with a nonce;
//! - `guard`: Host (the box's name only; DNS rebinding), site and Origin checks;
//! - [`proxy`]: forwarding, streaming, upgrades; `headers`: what is rewritten on the way;
//! - `upstream_cookies`: only the cookies Executor set go back to it;
//! - [`serve`]: the process's listeners and lifetime (idle timeout, box gone);
//! - [`control`], [`record`]: how `box` finds, asks and stops a running gateway;
//! - [`spawn`]: starting one, detached.

mod activity;
mod clock;
pub mod control;
mod guard;
mod headers;
mod host_name;
mod loopback;
mod nonce;
mod pages;
pub mod proxy;
mod random;
pub mod record;
pub mod serve;
mod session;
pub mod sign_in_file;
pub mod spawn;
mod upstream_cookies;

use std::time::{Duration, Instant};

use anyhow::Result;
use box_proto::mcp::BearerToken;

use crate::state::StateDir;
pub use record::GatewayInfo;
pub use session::Lifetimes;

/// What the gateway needs to know about its box, so it can be tested without a VM.
/// Every method may block (they run on the blocking pool).
pub trait BoxProbe: Send + Sync + 'static {
    /// Executor's current token, read from the guest.
    fn token(&self) -> Result<BearerToken>;
    /// Whether the box's VM is running.
    fn running(&self) -> Result<bool>;
    /// Whether the box is still registered (`box rm` removes the row).
    fn registered(&self) -> bool;
}

/// The sign-in URL for `nonce` (inside a sign-in page, or printed by `--print-url`).
pub fn sign_in_url(info: &GatewayInfo, nonce: &str) -> String {
    format!("{}{}?nonce={nonce}", info.url(), proxy::SIGN_IN_PATH)
}

/// The running gateway of `name`, if one answers; a broken one counts as none.
pub fn running(state: &StateDir, name: &str) -> Option<GatewayInfo> {
    match control::status(state, name) {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!("gateway of '{name}' does not answer properly: {e:#}");
            None
        }
    }
}

/// The running gateway of `name` for `box open` to hand out. One started by an older box
/// serves at 127.0.0.1, where every local web app shares its cookies, and would refuse
/// the browser at the box's host name: it is stopped, and `None` returned.
pub fn reusable(state: &StateDir, name: &str) -> Result<Option<GatewayInfo>> {
    match running(state, name) {
        Some(info) if !info.has_host_name() => {
            crate::ui::say(format!(
                "Replacing the gateway of '{name}' that an older box started (it served the UI at {}; the UI now has a host name of its own)",
                info.url()
            ));
            stop(state, name)?;
            Ok(None)
        }
        current => Ok(current),
    }
}

/// Stops `name`'s gateway, if one runs, and waits until it has exited. Returns what ran.
pub fn stop(state: &StateDir, name: &str) -> Result<Option<GatewayInfo>> {
    let Some(info) = running(state, name) else {
        return Ok(None);
    };
    control::ask(state, name, control::Request::Stop)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_alive(info.pid) || record::info_path(state, name).exists() {
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the gateway of '{name}' (pid {}) did not stop within 10s; see {}",
                info.pid,
                record::log_path(state, name).display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Some(info))
}

/// Stops `name`'s gateway for `box stop`/`box rm`: says so when one ran, warns (and goes on)
/// when it would not stop.
pub fn stop_with_box(state: &StateDir, name: &str) {
    match stop(state, name) {
        Ok(Some(info)) => crate::ui::say(format!(
            "Stopped the box open gateway of '{name}' ({})",
            info.url()
        )),
        Ok(None) => {}
        Err(e) => crate::ui::warn(format!("{e:#}")),
    }
}

/// Whether `pid` is a live process (a zombie waiting for its parent is not).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None).is_err() {
        return false;
    }
    // Linux: field 3 of /proc/<pid>/stat is the state; `Z` is a zombie.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z"),
        Err(_) => true,
    }
}
