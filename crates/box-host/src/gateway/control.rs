//! The control channel between `box` and a running gateway: a unix socket in the 0700
//! gateways dir, one request line and one reply line per connection.
//!
//! This is how a fresh sign-in nonce reaches `box open` without any secret in an argv or
//! environment: the gateway makes the nonce and hands it back over the socket.
//!
//! Requests: `sign-in` → `nonce <hex>` (for `--print-url`); `sign-in-page` → `page <path>`
//! (a sign-in page for the opener, see [`super::sign_in_file`]); `status` → the
//! [`GatewayInfo`] JSON; `sign-out` → `ok <sessions ended>`; `stop` → `ok`.
//! A malformed request gets `error <why>`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::record::{self, GatewayInfo};
use crate::state::StateDir;

/// Longest request or reply line read.
pub const MAX_LINE: usize = 4096;

/// What a gateway was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    SignIn,
    SignInPage,
    Status,
    SignOut,
    Stop,
}

impl Request {
    pub fn parse(line: &str) -> Option<Self> {
        match line.trim_end_matches(['\n', '\r']) {
            "sign-in" => Some(Self::SignIn),
            "sign-in-page" => Some(Self::SignInPage),
            "status" => Some(Self::Status),
            "sign-out" => Some(Self::SignOut),
            "stop" => Some(Self::Stop),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::SignIn => "sign-in",
            Self::SignInPage => "sign-in-page",
            Self::Status => "status",
            Self::SignOut => "sign-out",
            Self::Stop => "stop",
        }
    }
}

/// Sends one request to `name`'s gateway and returns the reply line. `Ok(None)` when no
/// gateway listens (no socket, or a stale one nobody accepts on).
pub fn ask(state: &StateDir, name: &str, req: Request) -> Result<Option<String>> {
    let path = record::socket_path(state, name);
    let mut stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot reach the gateway at {}", path.display()));
        }
    };
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    stream
        .write_all(format!("{}\n", req.as_str()).as_bytes())
        .with_context(|| format!("cannot talk to the gateway at {}", path.display()))?;
    let mut line = String::new();
    BufReader::new(stream.take_limited())
        .read_line(&mut line)
        .with_context(|| format!("no answer from the gateway at {}", path.display()))?;
    if line.is_empty() {
        bail!("the gateway at {} closed without answering", path.display());
    }
    Ok(Some(line.trim_end().to_string()))
}

/// The running gateway of `name`, if any answers.
pub fn status(state: &StateDir, name: &str) -> Result<Option<GatewayInfo>> {
    match ask(state, name, Request::Status)? {
        None => Ok(None),
        Some(line) => Ok(Some(serde_json::from_str(&line).with_context(|| {
            format!("the gateway of '{name}' answered status with something else")
        })?)),
    }
}

/// A fresh one-time nonce from `name`'s running gateway.
pub fn sign_in_nonce(state: &StateDir, name: &str) -> Result<String> {
    match ask(state, name, Request::SignIn)? {
        None => bail!(
            "the gateway of '{name}' stopped before it could sign you in; run box open {name} again"
        ),
        Some(line) => match line.strip_prefix("nonce ") {
            Some(n) if n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Ok(n.to_string())
            }
            _ => bail!("the gateway of '{name}' did not hand out a sign-in nonce"),
        },
    }
}

/// A fresh sign-in page from `name`'s running gateway: its path, for the opener.
pub fn sign_in_page(state: &StateDir, name: &str) -> Result<PathBuf> {
    match ask(state, name, Request::SignInPage)? {
        None => bail!(
            "the gateway of '{name}' stopped before it could sign you in; run box open {name} again"
        ),
        Some(line) => match line.strip_prefix("page ") {
            Some(p) if p.starts_with('/') => Ok(PathBuf::from(p)),
            _ => bail!("the gateway of '{name}' did not hand out a sign-in page"),
        },
    }
}

/// Ends every browser session of `name`'s gateway; `None` when no gateway runs, else how
/// many sessions ended.
pub fn sign_out(state: &StateDir, name: &str) -> Result<Option<usize>> {
    match ask(state, name, Request::SignOut)? {
        None => Ok(None),
        Some(line) => match line.strip_prefix("ok ").and_then(|n| n.parse().ok()) {
            Some(n) => Ok(Some(n)),
            None => bail!("the gateway of '{name}' did not confirm the sign-out"),
        },
    }
}

/// Bounds a reply read to [`MAX_LINE`] bytes.
trait TakeLimited: Sized {
    fn take_limited(self) -> std::io::Take<Self>;
}

impl TakeLimited for UnixStream {
    fn take_limited(self) -> std::io::Take<Self> {
        std::io::Read::take(self, MAX_LINE as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_exactly() {
        assert_eq!(Request::parse("sign-in\n"), Some(Request::SignIn));
        assert_eq!(Request::parse("sign-in-page\n"), Some(Request::SignInPage));
        assert_eq!(Request::parse("status\r\n"), Some(Request::Status));
        assert_eq!(Request::parse("stop"), Some(Request::Stop));
        assert_eq!(Request::parse("sign-out\n"), Some(Request::SignOut));
        for bad in ["", "\n", "STOP", "stop now", "sign-in\0", "status\nstop"] {
            assert_eq!(Request::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn no_socket_means_no_gateway() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().to_path_buf());
        assert_eq!(status(&state, "alpha").unwrap(), None);
        assert!(sign_in_nonce(&state, "alpha").is_err());
    }
}
