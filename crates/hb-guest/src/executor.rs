//! Executor: finding it, its version, how it is started, whether its port answers.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use box_proto::mcp::BearerToken;

use crate::account::Agent;
use crate::paths::Paths;

/// Where provisioning installs the npm tools (`npm --prefix /opt/hermes-box`).
pub const TOOL_BIN_DIR: &str = "/opt/hermes-box/bin";

/// Looks a tool up on PATH, then in the provisioned tool dir.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(std::iter::once(PathBuf::from(TOOL_BIN_DIR)))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A `major.minor.patch` version.
pub type Version = (u32, u32, u32);

/// The first version that keeps its own token in `server-control/auth.json`.
pub const AUTH_JSON_SINCE: Version = (1, 5, 12);

pub fn parse_version(text: &str) -> Option<Version> {
    let t = text
        .trim()
        .trim_start_matches("executor")
        .trim()
        .trim_start_matches('v');
    let mut it = t
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// Executor's version, read from the npm package beside the launcher (no process: the
/// workload reaps every child as PID 1 and must not race a `--version` run).
pub fn installed_version(bin: &Path) -> Option<Version> {
    let real = std::fs::canonicalize(bin).ok()?;
    for dir in real.ancestors().skip(1).take(4) {
        let pkg = dir.join("package.json");
        if let Ok(text) = std::fs::read_to_string(&pkg) {
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            if v.get("name").and_then(|n| n.as_str()) == Some("executor") {
                return v
                    .get("version")
                    .and_then(|n| n.as_str())
                    .and_then(parse_version);
            }
        }
    }
    None
}

/// Whether this Executor reads its own token from auth.json (otherwise `hb` supplies one).
pub fn reads_auth_json(version: Option<Version>) -> bool {
    version.is_some_and(|v| v >= AUTH_JSON_SINCE)
}

/// `executor daemon run --foreground` as the agent, with a clean environment.
///
/// `token` is `Some` only for Executor 1.5.9, where `--auth-token=` is the only way to set
/// one (documented in README and `hb doctor`, which `box doctor` repeats): its
/// `EXECUTOR_AUTH_TOKEN` is only what its CLI sends as a client, the server ignores it
/// (checked against 1.5.9: with it set and no flag, `/api` answers without a token), and it
/// reads no token file. From 1.5.12 Executor keeps its own token in `auth.json` and gets
/// none from hb. The combined `--auth-token=<t>` form keeps a
/// token starting with `-` from being read as a flag.
pub fn daemon_command(
    bin: &Path,
    paths: &Paths,
    port: u16,
    agent: &Agent,
    token: Option<&BearerToken>,
) -> Command {
    use std::os::unix::process::CommandExt;
    let data_dir = paths.executor_data();
    let mut cmd = Command::new(bin);
    cmd.args(["daemon", "run", "--foreground", "--port"])
        .arg(port.to_string())
        .args(["--hostname", "127.0.0.1"]);
    if let Some(t) = token {
        cmd.arg(format!("--auth-token={}", t.expose()));
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let path = format!("{TOOL_BIN_DIR}:{path}");
    cmd.env_clear()
        .env("PATH", path)
        .env("HOME", paths.home())
        .env("USER", &agent.name)
        .env("LOGNAME", &agent.name)
        .env("LANG", "C.UTF-8")
        .env("EXECUTOR_DATA_DIR", &data_dir)
        .env("EXECUTOR_SCOPE_DIR", &data_dir)
        .env("DO_NOT_TRACK", "1")
        .env("EXECUTOR_DISABLE_UPDATE_CHECK", "1")
        .env("EXECUTOR_DISABLE_INTEGRATIONS_FETCH", "1")
        .current_dir(&data_dir)
        // Its own process group, so a stop reaches the node launcher and the inner binary.
        .process_group(0);
    // The host's proxies and extra CA certificates (box.env PROPAGATE_PROXY,
    // GUEST_CA_CERTS), as the agent's login shells have them.
    cmd.envs(crate::netenv::vars());
    if agent.must_switch() {
        cmd.uid(agent.uid.as_raw()).gid(agent.gid.as_raw());
    }
    cmd
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

/// Waits until the port is open (`want_open`) or closed; false on timeout.
pub fn wait_port(port: u16, want_open: bool, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        if port_open(port) == want_open {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("executor v1.5.9\n"), Some((1, 5, 9)));
        assert_eq!(parse_version("1.5.12"), Some((1, 5, 12)));
        assert_eq!(parse_version("1.5.9-linux-x64"), Some((1, 5, 9)));
        assert_eq!(parse_version("garbage"), None);
        assert!(!reads_auth_json(Some((1, 5, 9))));
        assert!(reads_auth_json(Some((1, 5, 12))));
        assert!(reads_auth_json(Some((2, 0, 0))));
        assert!(!reads_auth_json(None));
    }
}
