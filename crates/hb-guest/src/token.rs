//! Executor's bearer token: where it lives and which copy is current.
//!
//! Executor ≥ 1.5.12 mints its own token into `server-control/auth.json` (0600) and reuses
//! it forever. Executor 1.5.9 — what the npm registry here serves — has no token file and
//! runs open on loopback unless given `--auth-token=<t>`; so for it `hb` mints a token,
//! keeps it in a 0600 file and passes it on argv (the only way 1.5.9 accepts one; visible
//! in `ps` inside the box; `hb doctor` says so).

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use box_proto::mcp::BearerToken;
use nix::unistd::{Gid, Uid};
use rand::RngCore;

use crate::fsutil::{read_optional, write_private};
use crate::paths::Paths;

/// Where the current token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Executor's own `server-control/auth.json` (≥ 1.5.12).
    AuthJson,
    /// Minted by `hb` and handed to Executor as `--auth-token=` (1.5.9).
    Minted,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::AuthJson => "Executor's server-control/auth.json (Executor >= 1.5.12)",
            Source::Minted => {
                "minted by hb and passed as --auth-token= (Executor 1.5.9 accepts a token no other way; it is visible in `ps` inside the box)"
            }
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            Source::AuthJson => "auth-json",
            Source::Minted => "minted",
        }
    }
}

/// Characters a token may hold: base64url (Executor) and hex (ours). Anything else could
/// break the env files and the header helper, so it is refused rather than quoted.
pub fn check_charset(token: &BearerToken) -> Result<()> {
    if token.expose().bytes().all(|b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+' | b'/' | b'=')
    }) {
        Ok(())
    } else {
        bail!(
            "Executor's token holds characters outside base64url; refusing to write it into shell and dotenv files"
        )
    }
}

fn read_auth_json(path: &Path) -> Result<Option<BearerToken>> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let token = v
        .get("token")
        .and_then(|t| t.as_str())
        .and_then(BearerToken::new)
        .with_context(|| format!("{} has no \"token\" string", path.display()))?;
    Ok(Some(token))
}

fn read_minted(path: &Path) -> Result<Option<BearerToken>> {
    Ok(read_optional(path)?.and_then(|t| BearerToken::new(&t)))
}

/// The token clients must use now, if there is one.
///
/// `preferred` is what the workload recorded for the running Executor; without it,
/// auth.json wins when present (a newer Executor made it), else the minted file.
pub fn current(paths: &Paths, preferred: Option<Source>) -> Result<Option<(BearerToken, Source)>> {
    let auth = || read_auth_json(&paths.executor_auth_json());
    let minted = || read_minted(&paths.minted_token());
    let found = match preferred {
        Some(Source::AuthJson) => auth()?.map(|t| (t, Source::AuthJson)),
        Some(Source::Minted) => minted()?.map(|t| (t, Source::Minted)),
        None => match auth()? {
            Some(t) => Some((t, Source::AuthJson)),
            None => minted()?.map(|t| (t, Source::Minted)),
        },
    };
    if let Some((t, _)) = &found {
        check_charset(t)?;
    }
    Ok(found)
}

/// The minted token, creating it (32 random bytes, hex, 0600) on first use.
pub fn ensure_minted(paths: &Paths, owner: Option<(Uid, Gid)>) -> Result<BearerToken> {
    if let Some(t) = read_minted(&paths.minted_token())? {
        check_charset(&t)?;
        return Ok(t);
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let text = hex::encode(bytes);
    write_private(
        &paths.minted_token(),
        format!("{text}\n").as_bytes(),
        0o600,
        owner,
    )
    .context("cannot store the Executor token")?;
    BearerToken::new(&text).context("minted an empty token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_token_is_stable_private_and_preferred_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path());
        std::fs::create_dir_all(paths.hb_config()).unwrap();
        let t1 = ensure_minted(&paths, None).unwrap();
        let t2 = ensure_minted(&paths, None).unwrap();
        assert_eq!(t1, t2);
        assert_eq!(t1.expose().len(), 64);
        assert_eq!(crate::fsutil::mode_of(&paths.minted_token()), Some(0o600));
        let (cur, src) = current(&paths, None).unwrap().unwrap();
        assert_eq!((cur, src), (t1.clone(), Source::Minted));

        std::fs::create_dir_all(paths.executor_auth_json().parent().unwrap()).unwrap();
        std::fs::write(
            paths.executor_auth_json(),
            "{\n  \"token\": \"-abc_DEF\"\n}\n",
        )
        .unwrap();
        let (cur, src) = current(&paths, None).unwrap().unwrap();
        assert_eq!((cur.expose(), src), ("-abc_DEF", Source::AuthJson));
        let (cur, _) = current(&paths, Some(Source::Minted)).unwrap().unwrap();
        assert_eq!(cur, t1);

        std::fs::write(paths.executor_auth_json(), "{\"token\": \"a'b\"}").unwrap();
        assert!(current(&paths, None).is_err());
        std::fs::write(paths.executor_auth_json(), "not json").unwrap();
        let err = current(&paths, None).unwrap_err().to_string();
        assert!(err.contains("auth.json is not JSON"), "{err}");
    }
}
