//! The `agent` account: who Executor runs as and who owns the home.
//!
//! Resolved with getpwnam. `HB_AGENT_USER` names another account instead: tests that run
//! as root on a machine without an `agent` user set `HB_AGENT_USER=root`.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use nix::unistd::{Gid, Uid, User};

#[derive(Debug, Clone)]
pub struct Agent {
    pub name: String,
    pub uid: Uid,
    pub gid: Gid,
}

impl Agent {
    pub fn resolve() -> Result<Agent> {
        let name = std::env::var("HB_AGENT_USER")
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| box_proto::layout::AGENT_USER.to_string());
        let user =
            User::from_name(&name).with_context(|| format!("cannot look up user {name:?}"))?;
        let Some(user) = user else {
            bail!(
                "user {name:?} does not exist; provisioning creates it (box repair), or set HB_AGENT_USER"
            );
        };
        Ok(Agent {
            name,
            uid: user.uid,
            gid: user.gid,
        })
    }

    /// The owner to give files `hb` writes in the agent's home: the agent when we run as
    /// root (provisioning, the workload), nobody else's business otherwise.
    pub fn owner_if_root(&self) -> Option<(Uid, Gid)> {
        if Uid::effective().is_root() && !self.uid.is_root() {
            Some((self.uid, self.gid))
        } else {
            None
        }
    }

    /// Whether `hb` runs as root and must switch to the agent to start its processes.
    pub fn must_switch(&self) -> bool {
        Uid::effective().is_root() && Uid::effective() != self.uid
    }
}

/// The login profile provisioning installs, which every login shell sources: the tool
/// PATH, the agent's durable config locations, the host's proxies and CA certificates, the
/// placeholders of bound API keys (`HB_PROFILE` overrides it for tests).
pub fn login_profile() -> std::path::PathBuf {
    std::env::var_os("HB_PROFILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/profile.d/hermes-box.sh".into())
}

/// Gives `path` (not what it points to) to `owner`, if one is set.
pub fn chown_nofollow(path: &Path, owner: Option<(Uid, Gid)>) -> Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(path, Some(uid.as_raw()), Some(gid.as_raw()))
            .with_context(|| format!("cannot give {} to uid {uid}", path.display()))?;
    }
    Ok(())
}
