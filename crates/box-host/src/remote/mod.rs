//! Remote hosts: boxes whose smolvm runs on another Linux machine, driven over OpenSSH.
//!
//! A host is named `ssh://[user@]host[:port]` (`BOX_HOST`, `box --host`), as Docker and
//! Podman name remote engines. The host part may be an alias of the user's own
//! `~/.ssh/config` (ProxyJump, keys and known hosts apply). The string is kept verbatim in
//! each box's registry row, so every verb goes to the box's own host.
//!
//! The transport, piece by piece:
//! * [`ssh`]: one ControlMaster per (host, ssh command), shared by box processes and
//!   closed by the last one; the ssh argv and its allowlisted environment; port forwards.
//! * [`wrapper`]: the inline sh that runs each call in its own process group on the
//!   remote, kills it when box goes away, and ends with an exit trailer (a call's own 255
//!   is told from a dropped connection).
//! * [`ssh_command`]: what `BOX_SSH_COMMAND` may add (no forwarding, box's own socket).
//! * [`quote`]: every word single-quoted for the remote shell.
//! * [`copy`]: parts stream over the connection through a private remote temp dir, their
//!   byte count checked; encryption stays on the laptop.
//! * [`keys`]: API keys for one `machine start`, over the connection's stdin.
//!
//! It stands on the process runner ([`crate::process`]) and knows nothing of the smolvm
//! driver above it, which picks this transport for a box on a remote host: every driver
//! method works over ssh with the same deadlines, cancel flags, line callbacks and error
//! texts. What `box doctor` says of a remote host is [`crate::doctor::remote_checks`].

pub mod copy;
pub mod keys;
pub mod quote;
pub mod ssh;
pub mod ssh_command;
pub mod wrapper;

use std::fmt;

use anyhow::{Result, bail};

/// A remote host box drives smolvm on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteHost {
    pub user: Option<String>,
    /// A host name, an address or an ssh_config alias.
    pub host: String,
    pub port: Option<u16>,
}

impl RemoteHost {
    /// Parses `ssh://[user@]host[:port]`. Anything ssh could read as an option, or the
    /// remote shell as syntax, is refused: the parts reach ssh's argv.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        let Some(rest) = text.strip_prefix("ssh://") else {
            bail!(
                "'{}' is not a remote host: write ssh://[user@]host[:port] (or leave BOX_HOST empty for this machine)",
                text.escape_debug()
            );
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let (host, port) = split_port(hostport)?;
        let word_ok = |w: &str| {
            !w.is_empty()
                && !w.starts_with('-')
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        };
        if let Some(u) = user
            && !word_ok(u)
        {
            bail!(
                "the user '{}' in '{}' is not a user name (letters, digits, '.', '_', '-')",
                u.escape_debug(),
                text.escape_debug()
            );
        }
        let host_ok = word_ok(host) || is_bracketed_ipv6(host);
        if !host_ok {
            bail!(
                "the host '{}' in '{}' is not a host name, address or ssh_config alias",
                host.escape_debug(),
                text.escape_debug()
            );
        }
        Ok(Self {
            user: user.map(str::to_string),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        })
    }

    /// What ssh is given as its destination: `user@host` or `host` (the port goes as `-p`).
    pub fn destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

fn is_bracketed_ipv6(h: &str) -> bool {
    h.len() > 2
        && h.starts_with('[')
        && h.ends_with(']')
        && h[1..h.len() - 1]
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
}

fn split_port(hostport: &str) -> Result<(&str, Option<u16>)> {
    // `[::1]:2222` or `host:2222`; a bare IPv6 address without brackets has no port.
    let split_at = if hostport.starts_with('[') {
        hostport.find("]:").map(|i| i + 1)
    } else if hostport.matches(':').count() == 1 {
        hostport.find(':')
    } else {
        None
    };
    match split_at {
        None => Ok((hostport, None)),
        Some(i) => {
            let port = &hostport[i + 1..];
            match port.parse::<u16>() {
                Ok(p) if p > 0 => Ok((&hostport[..i], Some(p))),
                _ => bail!("'{}' is not a port (1-65535)", port.escape_debug()),
            }
        }
    }
}

impl fmt::Display for RemoteHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ssh://")?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            write!(f, "{}", self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// The host new boxes go to: `box --host`, else `BOX_HOST`; `None` for this machine.
pub fn selected(cli_host: Option<&str>, config_host: &str) -> Result<Option<RemoteHost>> {
    let text = cli_host.unwrap_or(config_host).trim();
    if text.is_empty() || text == "local" {
        return Ok(None);
    }
    RemoteHost::parse(text).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_write() {
        let h = RemoteHost::parse("ssh://agent@big.example:2222").unwrap();
        assert_eq!(h.user.as_deref(), Some("agent"));
        assert_eq!(h.host, "big.example");
        assert_eq!(h.port, Some(2222));
        assert_eq!(h.destination(), "agent@big.example");
        assert_eq!(h.to_string(), "ssh://agent@big.example:2222");
        let alias = RemoteHost::parse("ssh://workstation").unwrap();
        assert_eq!(alias.destination(), "workstation");
        assert_eq!(alias.port, None);
        let v6 = RemoteHost::parse("ssh://root@[fd00::1]:22").unwrap();
        assert_eq!(v6.host, "fd00::1");
        assert_eq!(v6.to_string(), "ssh://root@[fd00::1]:22");
    }

    #[test]
    fn refuses_what_ssh_or_a_shell_would_read_as_something_else() {
        for bad in [
            "big.example",
            "ssh://-oProxyCommand=touch${IFS}x",
            "ssh://a;b",
            "ssh://user@",
            "ssh://u$(id)@h",
            "ssh://h:0",
            "ssh://h:99999",
            "ssh://h:22x",
            "ssh://-l@h",
        ] {
            assert!(RemoteHost::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn empty_or_local_is_this_machine() {
        assert_eq!(selected(None, "").unwrap(), None);
        assert_eq!(selected(Some("local"), "ssh://h").unwrap(), None);
        assert_eq!(
            selected(None, "ssh://h").unwrap().map(|h| h.to_string()),
            Some("ssh://h".into())
        );
    }
}
