//! A box's policy as plain data: where it may connect, and which API keys it may use
//! without holding them. The box.env keys (`EGRESS`, `EGRESS_ALLOW_HOSTS`,
//! `EGRESS_ALLOW_CIDRS`, `EGRESS_ALLOW_PRIVATE`, `CREDENTIALS`) and the policy flags of `box
//! new`, `load` and `clone` become one [`Containment`], kept in the box's registry row (no
//! key's value, ever), carried to a restored or cloned box ([`carried`]) and shown by `box
//! egress`.
//!
//! This is the ground floor: it imports nothing of box-host. What smolvm makes of a policy
//! (its create flags, the key values handed to each `machine start`, the check that a
//! binding took) lives in `lifecycle::containment`, the one room that knows smolvm's side
//! (docs/containment.md).

pub mod carried;
pub mod lists;
pub mod proposal;
mod suffixes;
mod words;

use std::path::PathBuf;

use anyhow::{Result, bail};
use box_proto::BoxEnv;
use serde::{Deserialize, Serialize};

use lists::AGENTS;
pub use words::parse_credential;
use words::{check_cidr, check_host, checked, covers, parse_mode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Open,
    Allowlist,
}

/// Where a credential's value comes from when box starts the machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The variable of the same name in the environment box runs in.
    Env,
    /// A file only its owner may read.
    File(PathBuf),
}

/// One API key bound to hosts. Never holds the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    /// The variable the agent reads (and, with [`Source::Env`], the one box reads).
    pub var: String,
    pub hosts: Vec<String>,
    pub source: Source,
}

impl Credential {
    /// As the user wrote it (for `box egress` and messages).
    pub fn spec(&self) -> String {
        match &self.source {
            Source::Env => format!("{}@{}", self.var, self.hosts.join(",")),
            Source::File(p) => format!("{}=@{}@{}", self.var, p.display(), self.hosts.join(",")),
        }
    }
}

/// How firmly a new box's LAN must be closed, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LanDemand {
    /// Closed where smolvm can; said where it cannot.
    WhereSmolvmCan,
    /// `EGRESS_REQUIRE=1`: refused where smolvm cannot close it.
    Required,
    /// The box it comes from (a backup's, a clone's source) had its LAN closed: refused
    /// where smolvm cannot close it, unless the user accepts an open LAN.
    Recorded,
}

/// A box's policy, as its registry row keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Containment {
    pub mode: Mode,
    /// Extra names under `allowlist` (the [`AGENTS`] names are always added).
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub cidrs: Vec<String>,
    /// Private ranges re-opened although the LAN is closed.
    #[serde(default)]
    pub allow_private: Vec<String>,
    #[serde(default)]
    pub credentials: Vec<Credential>,
    /// Whether smolvm closed the LAN when the machine was made (false: too old).
    #[serde(default)]
    pub lan_closed: bool,
}

/// The containment flags of `box new`, `load` and `clone`, on top of the policy the box starts
/// from (box.env's; a backup's; the clone's source's).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub egress: Option<String>,
    pub allow_hosts: Vec<String>,
    pub allow_cidrs: Vec<String>,
    pub allow_private: Vec<String>,
    /// Names taken off the list (the carried policy's or box.env's own; never an agents
    /// name).
    pub deny_hosts: Vec<String>,
    pub credentials: Vec<String>,
}

impl Containment {
    /// From box.env with `box new`'s flags on top, every word checked.
    pub fn from_config(env: &BoxEnv, o: &Overrides) -> Result<Self> {
        let mut c = Self::from_env(env)?;
        c.apply(o)?;
        Ok(c)
    }

    /// The network a base is built with: the internet, whatever the boxes' own lists say
    /// (provisioning installs from it), never the LAN but for the ranges
    /// `EGRESS_ALLOW_PRIVATE` reopens (a proxy there), and no API keys.
    pub fn for_base_build(env: &BoxEnv) -> Result<Self> {
        Ok(Self {
            mode: Mode::Open,
            hosts: Vec::new(),
            cidrs: Vec::new(),
            allow_private: checked(
                &env.egress_allow_private,
                check_cidr,
                "EGRESS_ALLOW_PRIVATE",
            )?,
            credentials: Vec::new(),
            lan_closed: false,
        })
    }

    /// box.env's policy alone.
    fn from_env(env: &BoxEnv) -> Result<Self> {
        let mode = parse_mode(&env.egress, "EGRESS")?;
        let mut credentials: Vec<Credential> = Vec::new();
        for spec in &env.credentials {
            let c = parse_credential(spec)?;
            if credentials.iter().any(|d| d.var == c.var) {
                bail!("CREDENTIALS: {} is bound twice", c.var);
            }
            credentials.push(c);
        }
        let c = Self {
            mode,
            hosts: checked(&env.egress_allow_hosts, check_host, "EGRESS_ALLOW_HOSTS")?,
            cidrs: checked(&env.egress_allow_cidrs, check_cidr, "EGRESS_ALLOW_CIDRS")?,
            allow_private: checked(
                &env.egress_allow_private,
                check_cidr,
                "EGRESS_ALLOW_PRIVATE",
            )?,
            credentials,
            lan_closed: false,
        };
        Ok(c)
    }

    /// The user's flags on top of a policy (box.env's, a backup's, a clone's source's):
    /// `--egress` sets the mode, the lists add, `--deny-host` takes a name off, and a
    /// `--credential` for a variable already bound replaces that binding.
    pub fn apply(&mut self, o: &Overrides) -> Result<()> {
        if let Some(mode) = &o.egress {
            self.mode = parse_mode(mode, "--egress")?;
        }
        for h in checked(&o.allow_hosts, check_host, "--allow-host")? {
            if !self.hosts.contains(&h) {
                self.hosts.push(h);
            }
        }
        for c in checked(&o.allow_cidrs, check_cidr, "--allow-cidr")? {
            if !self.cidrs.contains(&c) {
                self.cidrs.push(c);
            }
        }
        for c in checked(&o.allow_private, check_cidr, "--allow-private")? {
            if !self.allow_private.contains(&c) {
                self.allow_private.push(c);
            }
        }
        for h in checked(&o.deny_hosts, check_host, "--deny-host")? {
            self.deny(&h)?;
        }
        let mut flagged: Vec<String> = Vec::new();
        for spec in &o.credentials {
            let c = parse_credential(spec)?;
            if flagged.contains(&c.var) {
                bail!("--credential: {} is bound twice", c.var);
            }
            flagged.push(c.var.clone());
            self.credentials.retain(|d| d.var != c.var);
            self.credentials.push(c);
        }
        if self.mode == Mode::Open && (!self.hosts.is_empty() || !self.cidrs.is_empty()) {
            bail!(
                "EGRESS_ALLOW_HOSTS/EGRESS_ALLOW_CIDRS only apply with EGRESS=allowlist (this \
                 box would be open to the whole internet): set EGRESS=allowlist, or drop them"
            );
        }
        Ok(())
    }

    /// Takes a name the user added off the allow list.
    fn deny(&mut self, host: &str) -> Result<()> {
        if let Some(c) = self
            .credentials
            .iter()
            .find(|c| c.hosts.iter().any(|h| h == host))
        {
            bail!(
                "--deny-host {host}: {host} receives {} (a credential binding), which keeps it \
                 reachable; make the box without that binding instead",
                c.var
            );
        }
        if self.hosts.iter().any(|h| h == host) {
            self.hosts.retain(|h| h != host);
            return Ok(());
        }
        if let Some((name, why)) = AGENTS.iter().find(|(n, _)| covers(n, host)) {
            bail!(
                "--deny-host {host}: {name} is on the shipped agents list ({why}), which every \
                 box under EGRESS=allowlist keeps; use a host outside the list"
            );
        }
        bail!(
            "--deny-host {host}: not on this box's own list ({}); nothing to take off",
            if self.hosts.is_empty() {
                "it has none".to_string()
            } else {
                self.hosts.join(" ")
            }
        )
    }

    /// The allow-host list smolvm gets under `allowlist`: the agents' names, the user's,
    /// and every credential host not already covered.
    pub fn allow_hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = AGENTS.iter().map(|(h, _)| h.to_string()).collect();
        let covered =
            |out: &[String], h: &str| out.iter().any(|e| !e.starts_with("*.") && covers(e, h));
        for h in self
            .hosts
            .iter()
            .chain(self.credentials.iter().flat_map(|c| &c.hosts))
        {
            if !covered(&out, h) {
                out.push(h.clone());
            }
        }
        out
    }

    /// Lines for `box egress` and messages.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![match self.mode {
            Mode::Open => "egress: open (the internet; not the LAN)".to_string(),
            Mode::Allowlist => format!(
                "egress: allowlist: {}{}",
                self.allow_hosts().join(" "),
                if self.cidrs.is_empty() {
                    String::new()
                } else {
                    format!("; ranges {}", self.cidrs.join(" "))
                }
            ),
        }];
        out.push(if self.lan_closed {
            if self.allow_private.is_empty() {
                "LAN: closed (private ranges and cloud metadata unreachable)".to_string()
            } else {
                format!(
                    "LAN: closed but for {} (cloud metadata unreachable)",
                    self.allow_private.join(" ")
                )
            }
        } else {
            "LAN: reachable (this smolvm could not close it)".to_string()
        });
        for c in &self.credentials {
            out.push(format!(
                "credential: {} for {} (the box holds a placeholder; the key comes from {})",
                c.var,
                c.hosts.join(","),
                match &c.source {
                    Source::Env => format!("${} when box starts it", c.var),
                    Source::File(p) => format!("{} when box starts it", p.display()),
                }
            ));
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A BoxEnv with `lines` set, as box.env would give them.
    pub(crate) fn env(lines: &[(&str, &str)]) -> BoxEnv {
        let mut e = BoxEnv::default();
        for (k, v) in lines {
            e.set(k, v).unwrap_or_else(|err| panic!("{k}: {err}"));
        }
        e
    }

    #[test]
    fn a_base_is_built_with_the_internet_and_only_the_lan_ranges_reopened() {
        let e = env(&[
            ("EGRESS", "allowlist"),
            ("EGRESS_ALLOW_HOSTS", "mine.example"),
            ("EGRESS_ALLOW_PRIVATE", "10.1.2.3/32"),
            ("CREDENTIALS", "anthropic"),
        ]);
        let c = Containment::for_base_build(&e).unwrap();
        assert_eq!(c.mode, Mode::Open);
        assert!(c.hosts.is_empty() && c.credentials.is_empty());
        assert_eq!(c.allow_private, ["10.1.2.3/32"]);
    }

    #[test]
    fn bad_words_are_named_with_their_key() {
        for (k, v, want) in [
            (
                "EGRESS_ALLOW_HOSTS",
                "10.0.0.1",
                "EGRESS_ALLOW_HOSTS: '10.0.0.1' is not a host name",
            ),
            ("EGRESS_ALLOW_HOSTS", "localhost", "is not a host name"),
            ("EGRESS_ALLOW_PRIVATE", "10.0.0.0/40", "bad prefix length"),
            ("CREDENTIALS", "nokey", "is not a binding"),
            (
                "CREDENTIALS",
                "1X@a.com",
                "is not an environment variable name",
            ),
            ("CREDENTIALS", "K=@rel/file@a.com", "absolute path"),
        ] {
            let mut e = env(&[(k, v)]);
            if k == "EGRESS_ALLOW_HOSTS" {
                e.set("EGRESS", "allowlist").unwrap();
            }
            let err = Containment::from_config(&e, &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{k}={v}: {err}");
        }
        let err = Containment::from_config(
            &env(&[("EGRESS_ALLOW_HOSTS", "a.com")]),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("only apply with EGRESS=allowlist"), "{err}");
    }
}
