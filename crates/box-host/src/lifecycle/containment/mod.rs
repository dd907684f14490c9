//! A box's containment (DESIGN.md "containment"): where it may connect, and which API keys
//! it may use without holding them. The box.env keys and `box new` flags become one
//! [`Containment`], kept in the box's registry row (no value, ever), and this module is the
//! only place that turns it into smolvm's own flags:
//!
//! * the LAN is closed: `--block-private` (smolvm 1.33), with `EGRESS_ALLOW_PRIVATE` ranges
//!   re-opened by `--allow-private`; cloud metadata is closed by smolvm whatever we say;
//! * `EGRESS=allowlist`: `--allow-host` for the shipped [`AGENTS`] names, the user's names and
//!   every credential host, `--allow-cidr` for `EGRESS_ALLOW_CIDRS`. smolvm's DNS filter
//!   answers any other name NXDOMAIN, so a denied name looks like a DNS failure in the box;
//! * credentials: `--credential NAME=VAR@HOST` (smolvm 1.18+): the guest gets a placeholder in
//!   VAR; the value goes only into the environment of each `machine start` ([`values`]).

pub mod carried;

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

use anyhow::{Result, bail};
use box_proto::BoxEnv;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use crate::smolvm::SmolvmVersion;

/// What the box itself needs to reach under `EGRESS=allowlist`, each with why. smolvm's
/// `--allow-host` admits a name and its subdomains.
pub const AGENTS: &[(&str, &str)] = &[
    (
        "anthropic.com",
        "Claude Code's API and sign-in (api., console., statsig.)",
    ),
    ("claude.ai", "Claude Code's subscription sign-in"),
    ("claude.com", "Claude Code's sign-in pages"),
    ("openai.com", "Codex's API and sign-in (api., auth.)"),
    ("chatgpt.com", "Codex's ChatGPT sign-in and backend"),
    ("openrouter.ai", "Hermes's default model provider"),
    ("nousresearch.com", "Hermes's installer and Nous portal"),
    (
        "npmjs.org",
        "the npm registry (Claude Code, Codex, Executor)",
    ),
    (
        "nodesource.com",
        "Node.js where the distribution's is too old",
    ),
    (
        "integrations.sh",
        "Executor's catalog of integrations (integrations.sh/api.json, fetched at start)",
    ),
    ("pypi.org", "PyPI, for Hermes"),
    ("pythonhosted.org", "PyPI's files"),
    ("astral.sh", "uv, which Hermes's installer uses"),
    ("github.com", "git, and Hermes's sources"),
    ("githubusercontent.com", "files from GitHub"),
    ("ubuntu.com", "the Ubuntu archive (apt)"),
    ("debian.org", "the Debian archive (apt)"),
];

/// Credential shorthands for the agents box installs: the variable each agent reads and the
/// API host it sends it to.
pub const SHORTHANDS: &[(&str, &str, &str)] = &[
    ("anthropic", "ANTHROPIC_API_KEY", "api.anthropic.com"),
    ("openai", "OPENAI_API_KEY", "api.openai.com"),
    ("openrouter", "OPENROUTER_API_KEY", "openrouter.ai"),
];

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
    /// smolvm's binding name: the variable, lowercased.
    fn binding(&self) -> String {
        self.var.to_ascii_lowercase()
    }

    /// As the user wrote it (for `box egress` and messages).
    pub fn spec(&self) -> String {
        match &self.source {
            Source::Env => format!("{}@{}", self.var, self.hosts.join(",")),
            Source::File(p) => format!("{}=@{}@{}", self.var, p.display(), self.hosts.join(",")),
        }
    }
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

impl crate::cli::PolicyArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            egress: self.egress.clone(),
            allow_hosts: self.allow_host.clone(),
            allow_cidrs: self.allow_cidr.clone(),
            allow_private: self.allow_private.clone(),
            deny_hosts: self.deny_host.clone(),
            credentials: self.credential.clone(),
        }
    }

    /// Whether the user gave any of the flags.
    pub fn any(&self) -> bool {
        self.egress.is_some()
            || !self.allow_host.is_empty()
            || !self.allow_cidr.is_empty()
            || !self.allow_private.is_empty()
            || !self.deny_host.is_empty()
            || !self.credential.is_empty()
    }
}

fn valid_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && !l.starts_with('-')
        && !l.ends_with('-')
        && l.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// A lowercase DNS name with at least two labels, optionally `*.` in front.
fn check_host(h: &str, key: &str) -> Result<String> {
    let h = h.trim_end_matches('.').to_ascii_lowercase();
    let name = h.strip_prefix("*.").unwrap_or(&h);
    if name.contains('.')
        && name.split('.').all(valid_label)
        && name.parse::<std::net::IpAddr>().is_err()
    {
        return Ok(h);
    }
    bail!(
        "{key}: '{h}' is not a host name (give names like api.example.com or *.example.com; \
         addresses go in EGRESS_ALLOW_CIDRS)"
    )
}

fn check_cidr(c: &str, key: &str) -> Result<String> {
    let (addr, prefix) = c.split_once('/').unwrap_or((c, ""));
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| anyhow::anyhow!("{key}: '{c}' is not an address or CIDR (like 10.0.0.0/8)"))?;
    let width = if ip.is_ipv4() { 32 } else { 128 };
    if !prefix.is_empty() && prefix.parse::<u32>().map_or(true, |p| p > width) {
        bail!("{key}: '{c}' has a bad prefix length (0-{width})");
    }
    Ok(c.to_string())
}

fn parse_mode(word: &str, key: &str) -> Result<Mode> {
    match word {
        "open" => Ok(Mode::Open),
        "allowlist" => Ok(Mode::Allowlist),
        other => bail!("{key}: '{other}' is neither open nor allowlist"),
    }
}

/// Every word through `check`, each named with `key` when it fails.
fn checked(
    words: &[String],
    check: fn(&str, &str) -> Result<String>,
    key: &str,
) -> Result<Vec<String>> {
    words.iter().map(|w| check(w, key)).collect()
}

/// Whether the allow-list entry `entry` admits `host` (smolvm's exact-or-subdomain match;
/// `*.x` only subdomains).
fn covers(entry: &str, host: &str) -> bool {
    let name = host.strip_prefix("*.").unwrap_or(host);
    match entry.strip_prefix("*.") {
        Some(parent) => name.ends_with(&format!(".{parent}")),
        None => name == entry || name.ends_with(&format!(".{entry}")),
    }
}

fn valid_var(v: &str) -> bool {
    let mut b = v.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// `anthropic`, `NAME@HOST[,HOST]` or `NAME=@FILE@HOST[,HOST]`.
pub fn parse_credential(spec: &str) -> Result<Credential> {
    const KEY: &str = "CREDENTIALS";
    if let Some((_, var, host)) = SHORTHANDS.iter().find(|(w, ..)| *w == spec) {
        return Ok(Credential {
            var: var.to_string(),
            hosts: vec![host.to_string()],
            source: Source::Env,
        });
    }
    let bad = || {
        anyhow::anyhow!(
            "{KEY}: '{spec}' is not a binding: write NAME@HOST (the key from $NAME), \
             NAME=@FILE@HOST (the key from a file only you can read), or one of {}",
            SHORTHANDS
                .iter()
                .map(|s| s.0)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let (head, hosts) = spec.rsplit_once('@').ok_or_else(bad)?;
    let (var, source) = match head.split_once("=@") {
        Some((var, file)) if file.starts_with('/') => (var, Source::File(PathBuf::from(file))),
        Some(_) => bail!("{KEY}: '{spec}': the file must be an absolute path"),
        None => (head, Source::Env),
    };
    if !valid_var(var) {
        bail!("{KEY}: '{var}' is not an environment variable name");
    }
    let hosts = hosts
        .split(',')
        .map(|h| check_host(h, KEY))
        .collect::<Result<Vec<_>>>()?;
    if hosts.is_empty() {
        return Err(bad());
    }
    Ok(Credential {
        var: var.to_string(),
        hosts,
        source,
    })
}

impl Containment {
    /// From box.env with `box new`'s flags on top, every word checked.
    pub fn from_config(env: &BoxEnv, o: &Overrides) -> Result<Self> {
        let mut c = Self::from_env(env)?;
        c.apply(o)?;
        Ok(c)
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

    /// smolvm's create flags for this policy on smolvm `v` (`from_base`: `create --from`),
    /// and what the user must be told. Refuses what `v` cannot do and must not be dropped:
    /// credentials, an allow list, and (with `require_lan`) the closed LAN.
    pub fn create_args(
        &mut self,
        v: SmolvmVersion,
        from_base: bool,
        require_lan: bool,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let mut args = Vec::new();
        let mut notes = Vec::new();
        if v.has_block_private() {
            args.push("--block-private".to_string());
            for c in &self.allow_private {
                args.extend(["--allow-private".to_string(), c.clone()]);
            }
            self.lan_closed = true;
        } else if require_lan {
            bail!(
                "smolvm {v} cannot close the LAN to a box (--block-private needs smolvm 1.33 or \
                 newer) and EGRESS_REQUIRE=1: upgrade smolvm, or set EGRESS_REQUIRE=0 to go on \
                 with the LAN reachable"
            );
        } else {
            notes.push(format!(
                "smolvm {v} cannot close the LAN (--block-private needs 1.33 or newer): this box \
                 can reach your local network; EGRESS_REQUIRE=1 refuses instead"
            ));
            self.lan_closed = false;
        }
        if self.mode == Mode::Allowlist {
            if !v.enforces_allow_lists() {
                bail!(
                    "EGRESS=allowlist needs smolvm 1.9 or newer (this is {v}: its allow lists are \
                     not enforced on every backend); upgrade smolvm or use EGRESS=open"
                );
            }
            for h in self.allow_hosts() {
                match h.strip_prefix("*.") {
                    Some(_) if v.has_host_patterns() => {
                        args.extend(["--allow-host-pattern".to_string(), h.clone()])
                    }
                    // Older releases have only exact-or-subdomain entries: the parent itself
                    // is admitted too.
                    Some(parent) => args.extend(["--allow-host".to_string(), parent.to_string()]),
                    None => args.extend(["--allow-host".to_string(), h.clone()]),
                }
            }
            for c in &self.cidrs {
                args.extend(["--allow-cidr".to_string(), c.clone()]);
            }
        }
        if !self.credentials.is_empty() {
            if !v.has_credentials() {
                bail!(
                    "API keys bound to hosts (CREDENTIALS, --credential) need smolvm 1.18 or newer; \
                     this is {v}: upgrade smolvm"
                );
            }
            if from_base && !v.honours_credentials_from_packs() {
                bail!(
                    "a box made from a base needs smolvm 1.22.2 or newer to bind API keys (1.18.x \
                     silently ignored --credential on a machine created from a pack); this is \
                     {v}: upgrade smolvm, or run box new --fresh"
                );
            }
            for c in &self.credentials {
                args.extend([
                    "--credential".to_string(),
                    format!("{}={}@{}", c.binding(), c.var, c.hosts.join(",")),
                ]);
            }
        }
        Ok((args, notes))
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

/// The values of `credentials`, for the environment of one `machine start`. A variable that
/// is not set is `Err` with what to do (the caller decides whether that stops it).
pub fn values(credentials: &[Credential]) -> Result<Vec<(String, SecretString)>> {
    let mut out = Vec::new();
    for c in credentials {
        let value = match &c.source {
            Source::Env => std::env::var(&c.var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{} is not set in this shell: box hands it to smolvm for {} when it starts \
                     the box; export it, or bind it to a file with {}=@/path/to/file@{}",
                        c.var,
                        c.hosts.join(","),
                        c.var,
                        c.hosts.join(",")
                    )
                })?,
            Source::File(p) => read_key_file(p, &c.var)?,
        };
        if value.chars().any(char::is_control) {
            bail!(
                "{}: the key has a control character (a stray newline inside?): smolvm would \
                 refuse it",
                c.var
            );
        }
        out.push((c.var.clone(), SecretString::from(value)));
    }
    Ok(out)
}

/// `machine start` of a box, with the values of its bound API keys in that call's
/// environment. A key box cannot read is said, and the box starts anyway: smolvm then
/// answers requests that need it `502 smolvm credentials: credential unavailable`.
pub fn start_box(
    smolvm: &crate::smolvm::Smolvm,
    record: &crate::state::BoxRecord,
    cancel: Option<&std::sync::atomic::AtomicUsize>,
) -> Result<()> {
    let credentials = record
        .containment
        .as_ref()
        .map(|c| c.credentials.as_slice())
        .unwrap_or_default();
    let keys = match values(credentials) {
        Ok(k) => k,
        Err(e) => {
            crate::ui::warn(format!(
                "{e:#}; starting '{}' without its API keys: requests that need them get 502 \
                 from smolvm until box starts it again with them",
                record.name
            ));
            Vec::new()
        }
    };
    smolvm.start_with_keys(&record.machine, cancel, &keys)?;
    Ok(())
}

/// After the first start: every binding took (smolvm put a placeholder in its variable).
/// smolvm 1.18.2 silently ignored `--credential` on a machine made from a pack.
pub fn check_bound(
    smolvm: &crate::smolvm::Smolvm,
    machine: &str,
    credentials: &[Credential],
) -> Result<()> {
    if credentials.is_empty() {
        return Ok(());
    }
    let mut argv = vec![
        "/bin/sh",
        "-c",
        r#"for v; do case $(printenv "$v") in SMOL_PLACEHOLDER_*) ;; *) echo "$v";; esac; done"#,
        "sh",
    ];
    argv.extend(credentials.iter().map(|c| c.var.as_str()));
    let out = smolvm.exec(machine, &argv, crate::smolvm::ExecOpts::default())?;
    let unbound: Vec<&str> = out.stdout.split_whitespace().collect();
    if !out.success() || !unbound.is_empty() {
        bail!(
            "smolvm did not bind {} in '{machine}' (no placeholder in the box): the installed \
             smolvm ignored --credential; upgrade smolvm (1.22.2 or newer for a box made from a \
             base)",
            if unbound.is_empty() {
                "the API keys".to_string()
            } else {
                unbound.join(", ")
            }
        );
    }
    Ok(())
}

fn read_key_file(p: &std::path::Path, var: &str) -> Result<String> {
    let md = std::fs::metadata(p)
        .map_err(|e| anyhow::anyhow!("{var}: cannot read {}: {e}", p.display()))?;
    if md.mode() & 0o077 != 0 {
        bail!(
            "{var}: {} can be read by others (mode {:o}): run chmod 600 {} first",
            p.display(),
            md.mode() & 0o777,
            p.display()
        );
    }
    let text = std::fs::read_to_string(p)
        .map_err(|e| anyhow::anyhow!("{var}: cannot read {}: {e}", p.display()))?;
    let v = text.trim_end_matches(['\n', '\r']).to_string();
    if v.is_empty() {
        bail!("{var}: {} is empty", p.display());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret as _;

    /// A BoxEnv with `lines` set, as box.env would give them.
    pub(super) fn env(lines: &[(&str, &str)]) -> BoxEnv {
        let mut e = BoxEnv::default();
        for (k, v) in lines {
            e.set(k, v).unwrap_or_else(|err| panic!("{k}: {err}"));
        }
        e
    }

    #[test]
    fn the_default_closes_the_lan_and_nothing_else() {
        let mut c = Containment::from_config(&BoxEnv::default(), &Overrides::default()).unwrap();
        let (args, notes) = c
            .create_args(SmolvmVersion::new(1, 33, 0), false, false)
            .unwrap();
        assert_eq!(args, vec!["--block-private"]);
        assert!(notes.is_empty() && c.lan_closed);
        // Too old: said, and refused only with EGRESS_REQUIRE=1.
        let mut c = Containment::from_config(&BoxEnv::default(), &Overrides::default()).unwrap();
        let (args, notes) = c
            .create_args(SmolvmVersion::new(1, 17, 0), false, false)
            .unwrap();
        assert!(args.is_empty() && !c.lan_closed);
        assert!(notes[0].contains("needs 1.33"), "{notes:?}");
        let err = c
            .create_args(SmolvmVersion::new(1, 17, 0), false, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("EGRESS_REQUIRE=1"), "{err}");
    }

    #[test]
    fn an_allowlist_carries_the_agents_names_the_users_and_the_credential_hosts() {
        let e = env(&[
            ("EGRESS", "allowlist"),
            ("EGRESS_ALLOW_HOSTS", "example.com, *.internal.example"),
            ("EGRESS_ALLOW_CIDRS", "203.0.113.0/24"),
            ("EGRESS_ALLOW_PRIVATE", "10.1.2.3/32"),
            ("CREDENTIALS", "anthropic KEY2@api.other.test"),
        ]);
        let mut c = Containment::from_config(&e, &Overrides::default()).unwrap();
        let (args, _) = c
            .create_args(SmolvmVersion::new(1, 33, 0), false, false)
            .unwrap();
        let line = args.join(" ");
        for want in [
            "--block-private --allow-private 10.1.2.3/32",
            "--allow-host anthropic.com",
            "--allow-host npmjs.org",
            "--allow-host example.com",
            "--allow-host-pattern *.internal.example",
            "--allow-host api.other.test",
            "--allow-cidr 203.0.113.0/24",
            "--credential anthropic_api_key=ANTHROPIC_API_KEY@api.anthropic.com",
            "--credential key2=KEY2@api.other.test",
        ] {
            assert!(line.contains(want), "{want}: {line}");
        }
        // api.anthropic.com is under anthropic.com already: not added twice.
        assert!(!line.contains("--allow-host api.anthropic.com"), "{line}");
    }

    #[test]
    fn versions_that_lack_a_feature_are_refused_with_the_version_needed() {
        let e = env(&[("CREDENTIALS", "anthropic")]);
        let mut c = Containment::from_config(&e, &Overrides::default()).unwrap();
        let err = c
            .create_args(SmolvmVersion::new(1, 17, 0), false, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("need smolvm 1.18 or newer"), "{err}");
        let err = c
            .create_args(SmolvmVersion::new(1, 22, 1), true, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1.22.2"), "{err}");
        assert!(
            c.create_args(SmolvmVersion::new(1, 22, 2), true, false)
                .is_ok()
        );
        let mut a =
            Containment::from_config(&env(&[("EGRESS", "allowlist")]), &Overrides::default())
                .unwrap();
        let err = a
            .create_args(SmolvmVersion::new(1, 0, 4), false, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("EGRESS=allowlist needs smolvm 1.9"), "{err}");
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

    #[test]
    fn values_come_from_the_environment_or_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-from-file\n").unwrap();
        let spec = format!("BOXTEST_FILE_KEY=@{}@api.x.test", file.display());
        let c = parse_credential(&spec).unwrap();
        assert_eq!(c.spec(), spec);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = values(std::slice::from_ref(&c)).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let got = values(&[c]).unwrap();
        assert_eq!(got[0].0, "BOXTEST_FILE_KEY");
        assert_eq!(got[0].1.expose_secret(), "sk-from-file");
        let missing = parse_credential("BOXTEST_SURELY_UNSET_VAR@api.x.test").unwrap();
        let err = values(&[missing]).unwrap_err().to_string();
        assert!(err.contains("is not set in this shell"), "{err}");
    }
}
