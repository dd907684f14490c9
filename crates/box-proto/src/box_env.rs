//! `box.env`: the configuration both sides read.
//!
//! The host reads it to create boxes; a rendered copy of the effective values is installed
//! root-owned in every guest at `/etc/hermes-box.env`, where `hb` and provisioning read it.
//! The format is the seed's dotenv form: `KEY=value` lines, `#` comments, optional
//! `export ` prefix, optional single or double quotes around the value. Every key is typed:
//! a bad value is an error naming the file, the line and the key, never a silent default.
//! The file box writes into a guest is read as written ([`BoxEnv::parse`]: no expansion,
//! every key known); a user's file is read as the original tool's `source` read it
//! ([`BoxEnv::parse_user_file`], [`shell`]), its unused keys named for a warning.

pub mod shell;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

/// Where a value came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    File { path: PathBuf, line: usize },
    Env,
    Default,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Env => f.write_str("environment"),
            Origin::Default => f.write_str("built-in default"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {key}: {problem}")]
pub struct ConfigError {
    pub origin: Origin,
    pub key: String,
    pub problem: String,
}

/// The typed, validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxEnv {
    /// OCI image for new boxes.
    pub base_image: String,
    pub install_hermes: bool,
    pub install_executor: bool,
    /// Executor's port inside the guest (it listens on 127.0.0.1 only).
    pub executor_port: u16,
    pub wire_executor_mcp: bool,
    /// Publish Executor's web UI on a host loopback port.
    pub expose_executor_web: bool,
    /// Host port range for the web UI, inclusive.
    pub web_port_lo: u16,
    pub web_port_hi: u16,
    pub cpus: u8,
    pub mem_mib: u32,
    /// `BACKUP_DIR`: where `box save` writes backups. `None` (unset or empty): the user's
    /// data directory (`box` resolves it). A relative path is taken from the directory of
    /// the box.env that sets it, never from where `box` runs (box-host's `config`); a host
    /// path, so never written into a box.
    pub backup_dir: Option<PathBuf>,
    /// `BACKUP_MIRROR`: a second directory (a mounted NAS, a synced folder) each save also
    /// copies its chain into once it is verified. Absolute; a host path, never in a box.
    pub backup_mirror: Option<PathBuf>,
    pub node_major: u32,
    pub claude_code_version: String,
    pub codex_version: String,
    pub executor_version: String,
    pub hermes_install_args: String,
    /// `HERMES_SERVICES`: the Hermes processes (`gateway`, `cron`) a new box's workload
    /// supervises from its first `hb init`. Only a seed: from then on the box's own set
    /// (`hb service enable|disable`, kept in /data) decides.
    pub hermes_services: Vec<crate::hermes_service::HermesService>,
    /// `GUEST_CA_CERTS`: PEM files on the host whose certificates every box trusts (a
    /// TLS-inspecting network's CA). `:`-separated, like PATH; empty for none.
    pub guest_ca_certs: Vec<PathBuf>,
    /// `PROPAGATE_PROXY`: hand the host's HTTP(S)_PROXY, NO_PROXY and ALL_PROXY to boxes.
    pub propagate_proxy: bool,
    /// `BASE_MAX_AGE_DAYS`: a base older than this is stale (`box doctor` says so, `box
    /// base build --refresh` rebuilds it): tools set to `latest` age.
    pub base_max_age_days: u32,
    /// `box open`'s UI gateway stops after this many seconds without a request.
    pub open_idle_timeout_secs: u32,
    /// A browser session of the gateway ends after this many seconds without a request.
    pub open_session_idle_timeout_secs: u32,
    /// ... and this many seconds after sign-in, whichever comes first.
    pub open_session_max_age_secs: u32,
    /// `BACKUP_CHAIN_MAX`: `box save` writes an incremental backup on the newest one until
    /// a chain has this many links, then a full one (1: every save is full).
    pub backup_chain_max: u32,
    /// `BACKUP_CHAIN_MAX_AGE_DAYS`: a chain whose full backup is older than this many days
    /// is closed: the next `box save` starts a new one (a restore never walks a week of
    /// links, and a prune can drop the old chain whole).
    pub backup_chain_max_age_days: u32,
    /// `BACKUP_BLOCK_FILES_ABOVE`: a regular file this size or larger is archived in blocks,
    /// so a link of a chain holds only its changed blocks (box_proto::archive::blocks); 0:
    /// never. Bytes, or with a binary suffix (`64M`, `1G`).
    pub backup_block_files_above: u64,
    /// `BOX_HOST`: where new boxes live: empty for this machine, or `ssh://user@host[:port]`
    /// (smolvm on a remote Linux host, driven over OpenSSH). Existing boxes remember theirs.
    pub host: String,
    /// `BOX_REMOTE_SMOLVM`: smolvm on the remote host (non-interactive shells often lack it
    /// on PATH).
    pub remote_smolvm: String,
    /// `BOX_SSH_COMMAND`: the ssh command, split on spaces (`ssh -F ./cfg`), as
    /// `GIT_SSH_COMMAND` is for git.
    pub ssh_command: String,
    /// `EGRESS`: `open` (the internet, never the LAN) or `allowlist` (only the shipped
    /// `agents` names plus `EGRESS_ALLOW_HOSTS`/`EGRESS_ALLOW_CIDRS`). Checked by
    /// box's containment module, which says what each word means.
    pub egress: String,
    /// `EGRESS_ALLOW_HOSTS`: extra names (`example.com`, `*.example.com`) for `allowlist`.
    pub egress_allow_hosts: Vec<String>,
    /// `EGRESS_ALLOW_CIDRS`: extra address ranges for `allowlist`.
    pub egress_allow_cidrs: Vec<String>,
    /// `EGRESS_ALLOW_PRIVATE`: private ranges (CIDRs) a box may reach although the LAN is
    /// closed.
    pub egress_allow_private: Vec<String>,
    /// `EGRESS_REQUIRE`: refuse to create a box whose LAN smolvm cannot close.
    pub egress_require: bool,
    /// `CREDENTIALS`: API keys bound to hosts (`NAME@HOST[,HOST]`, `NAME=@FILE@HOST`, or a
    /// shorthand such as `anthropic`); the guest gets a placeholder.
    pub credentials: Vec<String>,
    /// `REMOTE_PROXY_HOSTS`: the remote hosts (`ssh://…`, as `BOX_HOST` names them) whose
    /// boxes get this machine's proxies too; a box on any other remote host gets none (the
    /// proxy's credentials stay here).
    pub remote_proxy_hosts: Vec<String>,
}

impl Default for BoxEnv {
    fn default() -> Self {
        Self {
            base_image: "ubuntu:24.04".into(),
            install_hermes: true,
            install_executor: true,
            executor_port: 4788,
            wire_executor_mcp: true,
            expose_executor_web: true,
            web_port_lo: 4790,
            web_port_hi: 4999,
            cpus: 4,
            mem_mib: 8192,
            backup_dir: None,
            backup_mirror: None,
            node_major: 22,
            claude_code_version: "latest".into(),
            codex_version: "latest".into(),
            executor_version: "latest".into(),
            hermes_install_args: "--skip-browser --skip-computer-use".into(),
            hermes_services: Vec::new(),
            guest_ca_certs: Vec::new(),
            propagate_proxy: true,
            base_max_age_days: 7,
            open_idle_timeout_secs: 3600,
            open_session_idle_timeout_secs: 12 * 3600,
            open_session_max_age_secs: 7 * 86400,
            backup_chain_max: 24,
            backup_chain_max_age_days: 7,
            backup_block_files_above: crate::archive::blocks::DEFAULT_THRESHOLD,
            host: String::new(),
            remote_smolvm: "smolvm".into(),
            ssh_command: "ssh".into(),
            egress: "open".into(),
            egress_allow_hosts: Vec::new(),
            egress_allow_cidrs: Vec::new(),
            egress_allow_private: Vec::new(),
            egress_require: false,
            credentials: Vec::new(),
            remote_proxy_hosts: Vec::new(),
        }
    }
}

/// Every key, in the order `render` writes them.
pub const KEYS: &[&str] = &[
    "BASE_IMAGE",
    "INSTALL_HERMES",
    "INSTALL_EXECUTOR",
    "EXECUTOR_PORT",
    "WIRE_EXECUTOR_MCP",
    "EXPOSE_EXECUTOR_WEB",
    "EXECUTOR_PORT_LO",
    "EXECUTOR_PORT_HI",
    "BOX_CPUS",
    "BOX_MEM_MIB",
    "BACKUP_DIR",
    "BACKUP_MIRROR",
    "NODE_MAJOR",
    "CLAUDE_CODE_VERSION",
    "CODEX_VERSION",
    "EXECUTOR_VERSION",
    "HERMES_INSTALL_ARGS",
    "HERMES_SERVICES",
    "GUEST_CA_CERTS",
    "PROPAGATE_PROXY",
    "BASE_MAX_AGE_DAYS",
    "OPEN_IDLE_TIMEOUT",
    "OPEN_SESSION_IDLE_TIMEOUT",
    "OPEN_SESSION_MAX_AGE",
    "BACKUP_CHAIN_MAX",
    "BACKUP_CHAIN_MAX_AGE_DAYS",
    "BACKUP_BLOCK_FILES_ABOVE",
    "BOX_HOST",
    "BOX_REMOTE_SMOLVM",
    "BOX_SSH_COMMAND",
    "EGRESS",
    "EGRESS_ALLOW_HOSTS",
    "EGRESS_ALLOW_CIDRS",
    "EGRESS_ALLOW_PRIVATE",
    "EGRESS_REQUIRE",
    "CREDENTIALS",
    "REMOTE_PROXY_HOSTS",
];

/// Keys only `box` on the laptop reads, never written into a box. The egress keys are
/// smolvm's business on the host: a guest never needs them, and cannot change them.
pub const HOST_ONLY_KEYS: &[&str] = &[
    "BACKUP_DIR", // a path on the laptop
    "BACKUP_MIRROR",
    "BOX_HOST",
    "BOX_REMOTE_SMOLVM",
    "BOX_SSH_COMMAND",
    "EGRESS",
    "EGRESS_ALLOW_HOSTS",
    "EGRESS_ALLOW_CIDRS",
    "EGRESS_ALLOW_PRIVATE",
    "EGRESS_REQUIRE",
    "CREDENTIALS",
    "REMOTE_PROXY_HOSTS",
];

/// A list of words separated by spaces or commas (`a.com, *.b.com`); each word's own
/// syntax is checked where it is used.
fn parse_words(v: &str) -> Result<Vec<String>, String> {
    let v = parse_text(v)?;
    Ok(v.split([' ', ',', '\t'])
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect())
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("'{v}' is not a boolean (use 1 or 0)")),
    }
}

fn parse_port(v: &str) -> Result<u16, String> {
    match v.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        Ok(p) => Err(format!("port {p} is outside 1-65535")),
        Err(_) => Err(format!("'{v}' is not a port number (1-65535)")),
    }
}

fn parse_in<T: TryFrom<u64>>(v: &str, lo: u64, hi: u64, what: &str) -> Result<T, String> {
    let n: u64 = v
        .parse()
        .map_err(|_| format!("'{v}' is not a whole number ({what})"))?;
    if !(lo..=hi).contains(&n) {
        return Err(format!("{n} is outside {lo}-{hi} ({what})"));
    }
    T::try_from(n).map_err(|_| format!("{n} is too large"))
}

/// A size in bytes, or with a binary suffix (`K`, `M`, `G`, `T`, optionally followed by
/// `iB`): 0 (never), or at least one block of the blocks format.
fn parse_threshold(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let unit_at = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(unit_at);
    let shift = match unit.strip_suffix("iB").unwrap_or(unit) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(format!(
                "'{}' is not a size (bytes, or 64M, 1G)",
                v.escape_debug()
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{}' is not a size (bytes, or 64M, 1G)", v.escape_debug()))?;
    let bytes = n
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("'{}' is too large", v.escape_debug()))?;
    let least = crate::archive::blocks::DEFAULT_BLOCK_SIZE;
    if bytes != 0 && bytes < least {
        return Err(format!(
            "{bytes} bytes is smaller than one block ({least}); 0 turns blocks off"
        ));
    }
    Ok(bytes)
}

fn parse_word(v: &str) -> Result<String, String> {
    let v = representable(v)?;
    if v.is_empty() {
        Err("must not be empty".into())
    } else if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Err(format!("'{}' must be one word", v.escape_debug()))
    } else {
        Ok(v.to_string())
    }
}

fn parse_text(v: &str) -> Result<String, String> {
    let v = representable(v)?;
    if v.chars().any(char::is_control) {
        Err("contains a control character".into())
    } else {
        Ok(v.to_string())
    }
}

/// `a.pem:/etc/b.pem`: absolute paths (a relative one would depend on where box runs),
/// empty parts ignored; the files themselves are checked where they are read, on the host.
fn parse_path_list(v: &str) -> Result<Vec<PathBuf>, String> {
    let v = parse_text(v)?;
    let mut out = Vec::new();
    for part in v.split(':').map(str::trim).filter(|p| !p.is_empty()) {
        if !part.starts_with('/') {
            return Err(format!(
                "'{}' is not an absolute path (give each PEM file as /full/path, ':'-separated)",
                part.escape_debug()
            ));
        }
        out.push(PathBuf::from(part));
    }
    Ok(out)
}

/// `ssh://a ssh://me@b:2222`: remote hosts, space- or comma-separated; each is read in
/// full (user, host, port) where it is used, on the host.
fn parse_host_list(v: &str) -> Result<Vec<String>, String> {
    let v = parse_text(v)?;
    let mut out = Vec::new();
    for part in v.split([' ', '\t', ',']).filter(|p| !p.is_empty()) {
        if !part.starts_with("ssh://") {
            return Err(format!(
                "'{}' is not a remote host (write each as ssh://[user@]host[:port], as BOX_HOST names it)",
                part.escape_debug()
            ));
        }
        out.push(part.to_string());
    }
    Ok(out)
}

impl BoxEnv {
    /// Sets one key from its string form.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "BASE_IMAGE" => self.base_image = parse_word(value)?,
            "INSTALL_HERMES" => self.install_hermes = parse_bool(value)?,
            "INSTALL_EXECUTOR" => self.install_executor = parse_bool(value)?,
            "EXECUTOR_PORT" => self.executor_port = parse_port(value)?,
            "WIRE_EXECUTOR_MCP" => self.wire_executor_mcp = parse_bool(value)?,
            "EXPOSE_EXECUTOR_WEB" => self.expose_executor_web = parse_bool(value)?,
            "EXECUTOR_PORT_LO" => self.web_port_lo = parse_port(value)?,
            "EXECUTOR_PORT_HI" => self.web_port_hi = parse_port(value)?,
            "BOX_CPUS" => self.cpus = parse_in(value, 1, 255, "CPUs")?,
            "BOX_MEM_MIB" => self.mem_mib = parse_in(value, 256, 4 * 1024 * 1024, "MiB")?,
            "BACKUP_DIR" => {
                let v = parse_text(value)?;
                self.backup_dir = (!v.is_empty()).then(|| PathBuf::from(v));
            }
            "BACKUP_MIRROR" => {
                let v = parse_text(value)?;
                if !v.is_empty() && !v.starts_with('/') {
                    return Err(format!(
                        "'{}' is not an absolute path (a mirror is one place, wherever box runs)",
                        v.escape_debug()
                    ));
                }
                self.backup_mirror = (!v.is_empty()).then(|| PathBuf::from(v));
            }
            "NODE_MAJOR" => self.node_major = parse_in(value, 20, 99, "Node.js major version")?,
            "CLAUDE_CODE_VERSION" => self.claude_code_version = parse_word(value)?,
            "CODEX_VERSION" => self.codex_version = parse_word(value)?,
            "EXECUTOR_VERSION" => self.executor_version = parse_word(value)?,
            "HERMES_INSTALL_ARGS" => self.hermes_install_args = parse_text(value)?,
            "HERMES_SERVICES" => {
                self.hermes_services =
                    crate::hermes_service::HermesService::parse_list(&parse_text(value)?)?
            }
            "GUEST_CA_CERTS" => self.guest_ca_certs = parse_path_list(value)?,
            "PROPAGATE_PROXY" => self.propagate_proxy = parse_bool(value)?,
            "BASE_MAX_AGE_DAYS" => self.base_max_age_days = parse_in(value, 1, 3650, "days")?,
            "OPEN_IDLE_TIMEOUT" => {
                self.open_idle_timeout_secs = parse_in(value, 1, 7 * 86400, "seconds")?
            }
            "OPEN_SESSION_IDLE_TIMEOUT" => {
                self.open_session_idle_timeout_secs = parse_in(value, 1, 30 * 86400, "seconds")?
            }
            "OPEN_SESSION_MAX_AGE" => {
                self.open_session_max_age_secs = parse_in(value, 1, 365 * 86400, "seconds")?
            }
            "BACKUP_CHAIN_MAX" => self.backup_chain_max = parse_in(value, 1, 1000, "links")?,
            "BACKUP_CHAIN_MAX_AGE_DAYS" => {
                self.backup_chain_max_age_days = parse_in(value, 1, 3650, "days")?
            }
            "BACKUP_BLOCK_FILES_ABOVE" => self.backup_block_files_above = parse_threshold(value)?,
            "BOX_HOST" => self.host = parse_text(value)?.trim().to_string(),
            "BOX_REMOTE_SMOLVM" => self.remote_smolvm = parse_word(value)?,
            "BOX_SSH_COMMAND" => {
                let v = parse_text(value)?;
                if v.trim().is_empty() {
                    return Err("must not be empty (the default is ssh)".into());
                }
                self.ssh_command = v;
            }
            "EGRESS" => {
                let v = parse_word(value)?.to_ascii_lowercase();
                if v != "open" && v != "allowlist" {
                    return Err(format!("'{v}' is neither open nor allowlist"));
                }
                self.egress = v;
            }
            "EGRESS_ALLOW_HOSTS" => self.egress_allow_hosts = parse_words(value)?,
            "EGRESS_ALLOW_CIDRS" => self.egress_allow_cidrs = parse_words(value)?,
            "EGRESS_ALLOW_PRIVATE" => self.egress_allow_private = parse_words(value)?,
            "EGRESS_REQUIRE" => self.egress_require = parse_bool(value)?,
            // Space-separated only: a binding's hosts are comma-separated.
            "CREDENTIALS" => {
                self.credentials = parse_text(value)?
                    .split_whitespace()
                    .map(str::to_string)
                    .collect()
            }
            "REMOTE_PROXY_HOSTS" => self.remote_proxy_hosts = parse_host_list(value)?,
            _ => {
                return Err(format!("unknown key (known keys: {})", KEYS.join(", ")));
            }
        }
        Ok(())
    }

    /// The string form of one key, as `render` writes it.
    pub fn get(&self, key: &str) -> Option<String> {
        let b = |v: bool| if v { "1" } else { "0" }.to_string();
        Some(match key {
            "BASE_IMAGE" => self.base_image.clone(),
            "INSTALL_HERMES" => b(self.install_hermes),
            "INSTALL_EXECUTOR" => b(self.install_executor),
            "EXECUTOR_PORT" => self.executor_port.to_string(),
            "WIRE_EXECUTOR_MCP" => b(self.wire_executor_mcp),
            "EXPOSE_EXECUTOR_WEB" => b(self.expose_executor_web),
            "EXECUTOR_PORT_LO" => self.web_port_lo.to_string(),
            "EXECUTOR_PORT_HI" => self.web_port_hi.to_string(),
            "BOX_CPUS" => self.cpus.to_string(),
            "BOX_MEM_MIB" => self.mem_mib.to_string(),
            "BACKUP_DIR" => self
                .backup_dir
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            "BACKUP_MIRROR" => self
                .backup_mirror
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            "NODE_MAJOR" => self.node_major.to_string(),
            "CLAUDE_CODE_VERSION" => self.claude_code_version.clone(),
            "CODEX_VERSION" => self.codex_version.clone(),
            "EXECUTOR_VERSION" => self.executor_version.clone(),
            "HERMES_INSTALL_ARGS" => self.hermes_install_args.clone(),
            "HERMES_SERVICES" => {
                crate::hermes_service::HermesService::render_list(&self.hermes_services)
            }
            "GUEST_CA_CERTS" => self
                .guest_ca_certs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(":"),
            "PROPAGATE_PROXY" => b(self.propagate_proxy),
            "BASE_MAX_AGE_DAYS" => self.base_max_age_days.to_string(),
            "OPEN_IDLE_TIMEOUT" => self.open_idle_timeout_secs.to_string(),
            "OPEN_SESSION_IDLE_TIMEOUT" => self.open_session_idle_timeout_secs.to_string(),
            "OPEN_SESSION_MAX_AGE" => self.open_session_max_age_secs.to_string(),
            "BACKUP_CHAIN_MAX" => self.backup_chain_max.to_string(),
            "BACKUP_CHAIN_MAX_AGE_DAYS" => self.backup_chain_max_age_days.to_string(),
            "BACKUP_BLOCK_FILES_ABOVE" => self.backup_block_files_above.to_string(),
            "BOX_HOST" => self.host.clone(),
            "BOX_REMOTE_SMOLVM" => self.remote_smolvm.clone(),
            "BOX_SSH_COMMAND" => self.ssh_command.clone(),
            "EGRESS" => self.egress.clone(),
            "EGRESS_ALLOW_HOSTS" => self.egress_allow_hosts.join(" "),
            "EGRESS_ALLOW_CIDRS" => self.egress_allow_cidrs.join(" "),
            "EGRESS_ALLOW_PRIVATE" => self.egress_allow_private.join(" "),
            "EGRESS_REQUIRE" => b(self.egress_require),
            "CREDENTIALS" => self.credentials.join(" "),
            "REMOTE_PROXY_HOSTS" => self.remote_proxy_hosts.join(" "),
            _ => return None,
        })
    }

    /// Parses a box.env file's text on top of the defaults.
    pub fn parse(text: &str, path: &std::path::Path) -> Result<Self, ConfigError> {
        let mut env = Self::default();
        env.apply_file(text, path)?;
        env.check_ranges(&Origin::File {
            path: path.to_path_buf(),
            line: 0,
        })?;
        Ok(env)
    }

    /// Applies the `KEY=value` lines of a file box wrote (the guest's `/etc/hermes-box.env`):
    /// every key known, values taken as written.
    pub fn apply_file(&mut self, text: &str, path: &std::path::Path) -> Result<(), ConfigError> {
        let mut seen = SeenKeys::default();
        for assignment in assignments(text, path) {
            let (origin, key, raw) = assignment?;
            let value = unquote(raw.trim()).map_err(|problem| ConfigError {
                origin: origin.clone(),
                key: key.to_string(),
                problem,
            })?;
            seen.once(&origin, key)?;
            self.set(key, &value).map_err(|problem| ConfigError {
                origin,
                key: key.to_string(),
                problem,
            })?;
        }
        Ok(())
    }

    /// A user's box.env (`--config`, `BOX_CONFIG`, the user config dir), read as the
    /// original tool's `source` read it ([`shell`]): quoting and `$NAME` expansion from the
    /// file's earlier lines and then `environment`, a comment after a quoted value, an empty
    /// value leaving a key that needs one at its default (`CODEX_VERSION=""` meant "latest").
    /// A key box does not read is returned for a warning, not refused, unless it is one
    /// letter or two away from a key box reads: a typo of `EGRESS` must not leave a box open.
    pub fn parse_user_file(
        text: &str,
        path: &std::path::Path,
        environment: impl Fn(&str) -> Option<String>,
    ) -> Result<(Self, Vec<UnusedKey>), ConfigError> {
        let mut env = Self::default();
        let mut assigned: HashMap<String, String> = HashMap::new();
        let mut unused = Vec::new();
        let mut seen = SeenKeys::default();
        for assignment in assignments(text, path) {
            let (origin, key, raw) = assignment?;
            let error = |problem: String| ConfigError {
                origin: origin.clone(),
                key: key.to_string(),
                problem,
            };
            if !is_shell_name(key) {
                return Err(error("not a variable name (letters, digits and _)".into()));
            }
            let lookup = |name: &str| assigned.get(name).cloned().or_else(|| environment(name));
            let value = shell::value(raw.trim_start(), &lookup).map_err(&error)?;
            if KEYS.contains(&key) {
                seen.once(&origin, key)?;
                match env.set(key, &value) {
                    Err(_) if value.is_empty() => {}
                    result => result.map_err(&error)?,
                }
            } else if let Some(near) = near_key(key) {
                return Err(error(format!("unknown key; did you mean {near}?")));
            } else if let Origin::File { line, .. } = origin {
                unused.push(UnusedKey {
                    line,
                    key: key.to_string(),
                });
            }
            assigned.insert(key.to_string(), value);
        }
        env.check_ranges(&Origin::File {
            path: path.to_path_buf(),
            line: 0,
        })?;
        Ok((env, unused))
    }

    /// Environment variables of the same names override the file, as in the seed.
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        for key in KEYS {
            if let Some(value) = lookup(key) {
                self.set(key, &value).map_err(|problem| ConfigError {
                    origin: Origin::Env,
                    key: key.to_string(),
                    problem,
                })?;
            }
        }
        self.check_ranges(&Origin::Env)
    }

    /// Cross-key rules: the web port range must not be empty; Hermes services need Hermes.
    pub fn check_ranges(&self, origin: &Origin) -> Result<(), ConfigError> {
        if !self.hermes_services.is_empty() && !self.install_hermes {
            return Err(ConfigError {
                origin: origin.clone(),
                key: "HERMES_SERVICES".into(),
                problem: format!(
                    "{} needs Hermes in the box, and INSTALL_HERMES=0 leaves it out (set INSTALL_HERMES=1 or empty HERMES_SERVICES)",
                    crate::hermes_service::HermesService::render_list(&self.hermes_services)
                ),
            });
        }
        if self.web_port_lo > self.web_port_hi {
            return Err(ConfigError {
                origin: origin.clone(),
                key: "EXECUTOR_PORT_LO".into(),
                problem: format!(
                    "the web port range {}-{} is empty (EXECUTOR_PORT_LO must not exceed EXECUTOR_PORT_HI)",
                    self.web_port_lo, self.web_port_hi
                ),
            });
        }
        Ok(())
    }

    /// Renders every key a box reads in dotenv form (the guest's `/etc/hermes-box.env`);
    /// `parse` reads it back to an equal value but for [`HOST_ONLY_KEYS`], which stay at
    /// their defaults: where the box's host is and how to reach it is the laptop's business,
    /// and an `hb` of an older base refuses keys it does not know.
    pub fn render(&self) -> String {
        let mut out = String::from("# hermes-box-lite effective configuration (written by box)\n");
        for key in KEYS.iter().filter(|k| !HOST_ONLY_KEYS.contains(k)) {
            let value = self.get(key).unwrap_or_default();
            out.push_str(&format!("{key}={}\n", quote(&value)));
        }
        out
    }

    /// The web port range as an inclusive Rust range.
    pub fn web_ports(&self) -> std::ops::RangeInclusive<u16> {
        self.web_port_lo..=self.web_port_hi
    }
}

/// A key a user's box.env sets that box does not read (one of the original tool's, say):
/// named in a warning, otherwise ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusedKey {
    pub line: usize,
    pub key: String,
}

/// The `KEY=value` lines of a file, comments and blank lines skipped, an `export ` prefix
/// dropped: where each is, its key and the raw text after `=`.
fn assignments<'t>(
    text: &'t str,
    path: &std::path::Path,
) -> impl Iterator<Item = Result<(Origin, &'t str, &'t str), ConfigError>> {
    let path = path.to_path_buf();
    text.lines().enumerate().filter_map(move |(index, raw)| {
        let origin = Origin::File {
            path: path.clone(),
            line: index + 1,
        };
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            return None;
        }
        let body = trimmed.strip_prefix("export ").unwrap_or(trimmed);
        Some(match body.split_once('=') {
            Some((key, value)) => Ok((origin, key.trim(), value)),
            None => Err(ConfigError {
                origin,
                key: body.chars().take(40).collect(),
                problem: "expected KEY=value".into(),
            }),
        })
    })
}

/// The keys a file has set so far: a key box reads is set once.
#[derive(Default)]
struct SeenKeys(Vec<(String, usize)>);

impl SeenKeys {
    fn once(&mut self, origin: &Origin, key: &str) -> Result<(), ConfigError> {
        let line = match origin {
            Origin::File { line, .. } => *line,
            _ => 0,
        };
        if let Some((_, first)) = self.0.iter().find(|(k, _)| k == key) {
            return Err(ConfigError {
                origin: origin.clone(),
                key: key.to_string(),
                problem: format!("set twice (first on line {first})"),
            });
        }
        self.0.push((key.to_string(), line));
        Ok(())
    }
}

/// A shell variable name, as `source` would assign it.
fn is_shell_name(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The key box reads that `key` is one or two edits away from, if any.
fn near_key(key: &str) -> Option<&'static str> {
    KEYS.iter()
        .copied()
        .find(|known| edit_distance(&key.to_ascii_uppercase(), known) <= 2)
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(x != y);
            current[j + 1] = substitute.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

fn unquote(v: &str) -> Result<String, String> {
    for q in ['"', '\''] {
        if let Some(rest) = v.strip_prefix(q) {
            return match rest.strip_suffix(q) {
                Some(inner) if !inner.contains(q) => Ok(inner.to_string()),
                _ => Err(format!("unbalanced {q} quote")),
            };
        }
    }
    if v.contains(['"', '\'']) {
        return Err("quotes are only allowed around the whole value".into());
    }
    // A trailing comment after an unquoted value, as a shell would read it.
    Ok(match v.find(" #") {
        Some(at) => v[..at].trim_end().to_string(),
        None => v.to_string(),
    })
}

/// The dotenv form of a value that `unquote` reads back unchanged. The format has no
/// escapes: a value with a `'` is written in double quotes (it used to lose the `'`), one
/// with surrounding whitespace is quoted (the reader trims), and `set` refuses values with
/// both kinds of quote, which no quoting can carry.
fn quote(v: &str) -> String {
    let plain =
        !v.is_empty() && v.trim() == v && !v.contains([' ', '#', '"', '\'', '$', '\\', '`']);
    if plain {
        v.to_string()
    } else if v.contains('\'') {
        format!("\"{v}\"")
    } else {
        format!("'{v}'")
    }
}

/// Refuses a value `quote` could not write back (both kinds of quote in one value).
fn representable(v: &str) -> Result<&str, String> {
    if v.contains('\'') && v.contains('"') {
        Err("must not hold both ' and \" (box.env has no escapes)".into())
    } else {
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<BoxEnv, ConfigError> {
        BoxEnv::parse(text, Path::new("/etc/box.env"))
    }

    #[test]
    fn defaults_round_trip_through_render() {
        let d = BoxEnv::default();
        assert_eq!(parse(&d.render()).unwrap(), d);
    }

    #[test]
    fn render_keeps_quotes_and_surrounding_spaces() {
        // fuzz/regressions/box_env/single-quote-inside-double-quotes: `'` used to vanish.
        for text in [
            "HERMES_INSTALL_ARGS=\"'\"\n",
            "HERMES_INSTALL_ARGS=\"--name 'it'\"\n",
            "HERMES_INSTALL_ARGS='--name \"x\"'\n",
            "HERMES_INSTALL_ARGS=\"it's\"\n",
            "HERMES_INSTALL_ARGS=' b '\n",
            "HERMES_INSTALL_ARGS=\"a\u{a0}\"\n",
        ] {
            let env = parse(text).unwrap();
            assert_eq!(parse(&env.render()).unwrap(), env, "{text:?}");
        }
        let mut env = BoxEnv::default();
        let err = env
            .apply_env(|k| (k == "HERMES_INSTALL_ARGS").then(|| "a'b\"c".into()))
            .unwrap_err();
        assert!(err.to_string().contains("both"), "{err}");
    }

    #[test]
    fn block_threshold_takes_bytes_or_a_binary_suffix() {
        assert_eq!(BoxEnv::default().backup_block_files_above, 64 << 20);
        for (text, bytes) in [
            ("0", 0),
            ("1048576", 1 << 20),
            ("64M", 64 << 20),
            ("1GiB", 1 << 30),
        ] {
            let env = parse(&format!("BACKUP_BLOCK_FILES_ABOVE={text}\n")).unwrap();
            assert_eq!(env.backup_block_files_above, bytes, "{text}");
            assert_eq!(parse(&env.render()).unwrap(), env, "{text}");
        }
        for (text, why) in [
            ("4K", "smaller than one block"),
            ("64 MB", "not a size"),
            ("-1", "not a size"),
            ("99999999T", "too large"),
        ] {
            let err = parse(&format!("BACKUP_BLOCK_FILES_ABOVE={text}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("BACKUP_BLOCK_FILES_ABOVE") && err.contains(why),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn network_keys() {
        let env =
            parse("GUEST_CA_CERTS=/etc/ssl/a.pem: /opt/b c.pem\nPROPAGATE_PROXY=0\n").unwrap();
        assert_eq!(
            env.guest_ca_certs,
            [
                PathBuf::from("/etc/ssl/a.pem"),
                PathBuf::from("/opt/b c.pem")
            ]
        );
        assert!(!env.propagate_proxy);
        assert_eq!(parse(&env.render()).unwrap(), env);
        let d = BoxEnv::default();
        assert!(d.guest_ca_certs.is_empty() && d.propagate_proxy);
        assert!(
            parse("GUEST_CA_CERTS=\n")
                .unwrap()
                .guest_ca_certs
                .is_empty()
        );
        let err = parse("GUEST_CA_CERTS=certs/ca.pem\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("GUEST_CA_CERTS") && err.contains("absolute"),
            "{err}"
        );
        let err = parse("PROPAGATE_PROXY=maybe\n").unwrap_err().to_string();
        assert!(err.contains("PROPAGATE_PROXY"), "{err}");
        let env = parse("REMOTE_PROXY_HOSTS=ssh://me@ws, ssh://dc:2222\n").unwrap();
        assert_eq!(env.remote_proxy_hosts, ["ssh://me@ws", "ssh://dc:2222"]);
        assert!(BoxEnv::default().remote_proxy_hosts.is_empty());
        // The laptop's business: never written into a box.
        assert!(!env.render().contains("REMOTE_PROXY_HOSTS"));
        let err = parse("REMOTE_PROXY_HOSTS=bighost\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("REMOTE_PROXY_HOSTS") && err.contains("ssh://"),
            "{err}"
        );
    }

    #[test]
    fn hermes_services_are_a_set_of_known_words_that_reaches_the_box() {
        use crate::hermes_service::HermesService::{Cron, Gateway};
        assert!(BoxEnv::default().hermes_services.is_empty());
        let env = parse("HERMES_SERVICES=cron gateway,cron\n").unwrap();
        assert_eq!(env.hermes_services, [Gateway, Cron]);
        // A guest key: rendered into /etc/hermes-box.env, read back the same.
        assert!(env.render().contains("HERMES_SERVICES=gateway,cron\n"));
        assert_eq!(parse(&env.render()).unwrap(), env);
        assert!(
            parse("HERMES_SERVICES=\n")
                .unwrap()
                .hermes_services
                .is_empty()
        );
        // Nothing to run without Hermes: refused before any box is made.
        let err = parse("INSTALL_HERMES=0\nHERMES_SERVICES=cron\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HERMES_SERVICES") && err.contains("INSTALL_HERMES=0"),
            "{err}"
        );
        assert!(parse("INSTALL_HERMES=0\nHERMES_SERVICES=\n").is_ok());
        let err = parse("HERMES_SERVICES=gateway,dashboard\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HERMES_SERVICES") && err.contains("'dashboard'"),
            "{err}"
        );
    }

    #[test]
    fn reads_the_seed_form() {
        let env = parse(
            "# comment\n\nBASE_IMAGE=ubuntu:26.04\nexport INSTALL_HERMES=0\nEXECUTOR_PORT=\"4789\"\nHERMES_INSTALL_ARGS='--skip-browser --no-skills'\nBOX_CPUS=2 # two\n",
        )
        .unwrap();
        assert_eq!(env.base_image, "ubuntu:26.04");
        assert!(!env.install_hermes);
        assert_eq!(env.executor_port, 4789);
        assert_eq!(env.hermes_install_args, "--skip-browser --no-skills");
        assert_eq!(env.cpus, 2);
    }

    /// box.env as shipped and a config without the key give a box the same Hermes
    /// installer flags: the original recipe's headless pair.
    #[test]
    fn shipped_box_env_and_the_default_agree_on_hermes_flags() {
        let shipped = include_str!("../../../box.env");
        let env = parse(shipped).unwrap();
        // Read as users' files are (`box --config box.env`), it says the same and nothing
        // is unused.
        let (as_user_file, unused) =
            BoxEnv::parse_user_file(shipped, std::path::Path::new("box.env"), |_| None).unwrap();
        assert_eq!(as_user_file, env);
        assert!(unused.is_empty(), "{unused:?}");
        assert_eq!(
            env.hermes_install_args,
            "--skip-browser --skip-computer-use"
        );
        assert_eq!(
            BoxEnv::default().hermes_install_args,
            env.hermes_install_args
        );
    }

    /// A box.env written for the original tool (sourced by bash): its own keys, quoted
    /// values with comments after them, empty values meaning "the default", `$VAR`.
    #[test]
    fn a_user_file_reads_as_the_original_sourced_it() {
        let text = "# sourced by ./box\nBASE_IMAGE=\"ubuntu:24.04\"\nBOX_CPUS=\"4\"\nBOX_OVERLAY_GIB=\"64\"\n\
            BOX_STORAGE_GIB=\"\"\nCLAUDE_CODE_CHANNEL=\"\"   # stable, latest, or a version\n\
            \x20                         # a comment line under it\nCODEX_VERSION=\"\"   # empty = latest\n\
            HERMES_INSTALL_ARGS=\"--skip-browser\"   # headless\nHERMES_API_PORT=\"8642\"\n\
            NODE_MAJOR=${NODE:-20}\nBACKUP_DIR=$HOME/box-backups\nEXECUTOR_PORT=4788   # inside\n";
        let env_var = |name: &str| (name == "HOME").then(|| "/home/u".to_string());
        let (env, unused) =
            BoxEnv::parse_user_file(text, std::path::Path::new("/u/box.env"), env_var).unwrap();
        assert_eq!(env.base_image, "ubuntu:24.04");
        assert_eq!(env.codex_version, BoxEnv::default().codex_version);
        assert_eq!(env.hermes_install_args, "--skip-browser");
        assert_eq!(env.node_major, 20);
        assert_eq!(env.backup_dir, Some(PathBuf::from("/home/u/box-backups")));
        let named: Vec<(usize, &str)> = unused.iter().map(|u| (u.line, u.key.as_str())).collect();
        assert_eq!(
            named,
            [
                (4, "BOX_OVERLAY_GIB"),
                (5, "BOX_STORAGE_GIB"),
                (6, "CLAUDE_CODE_CHANNEL"),
                (10, "HERMES_API_PORT")
            ]
        );
        // An earlier line's value, even of a key box does not read, expands later ones.
        let (env, _) = BoxEnv::parse_user_file(
            "MY_IMAGE=ubuntu:26.04\nBASE_IMAGE=$MY_IMAGE\n",
            std::path::Path::new("/u/box.env"),
            |_| None,
        )
        .unwrap();
        assert_eq!(env.base_image, "ubuntu:26.04");
    }

    #[test]
    fn a_user_file_still_refuses_typos_secrets_and_commands() {
        let path = std::path::Path::new("/u/box.env");
        for (text, words) in [
            (
                "EGRES=allowlist\n",
                "/u/box.env:1: EGRES: unknown key; did you mean EGRESS?",
            ),
            ("egress=allowlist\n", "did you mean EGRESS?"),
            ("BOX_CPU=2\n", "did you mean BOX_CPUS?"),
            (
                "HERMES_INSTALL_ARGS=\"--key $OPENAI_API_KEY\"\n",
                "looks like a secret",
            ),
            ("BASE_IMAGE=$(curl x)\n", "is not run"),
            ("BOX_CPUS=2\nBOX_CPUS=3\n", "set twice"),
            ("BOX-CPUS=2\n", "not a variable name"),
            ("BOX_CPUS=two\n", "/u/box.env:1: BOX_CPUS"),
            ("BASE_IMAGE=a b\n", "must be quoted"),
        ] {
            let err = BoxEnv::parse_user_file(text, path, |_| Some("sk-x".into()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(words), "{text:?}: {err}");
            assert!(!err.contains("sk-x"), "{err}");
        }
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            ("A=1\n", "/etc/box.env:1: A: unknown key"),
            (
                "\nINSTALL_HERMES=maybe\n",
                "/etc/box.env:2: INSTALL_HERMES: 'maybe' is not a boolean",
            ),
            (
                "EXECUTOR_PORT=70000\n",
                "/etc/box.env:1: EXECUTOR_PORT: port 70000 is outside 1-65535",
            ),
            ("EXECUTOR_PORT=0\n", "port 0 is outside"),
            (
                "EXECUTOR_PORT_LO=5000\nEXECUTOR_PORT_HI=4000\n",
                "EXECUTOR_PORT_LO: the web port range 5000-4000 is empty",
            ),
            ("BOX_CPUS=0\n", "BOX_CPUS: 0 is outside 1-255"),
            ("BASE_IMAGE=\n", "BASE_IMAGE: must not be empty"),
            ("BASE_IMAGE='x\n", "unbalanced"),
            ("just words\n", "expected KEY=value"),
            (
                "BOX_CPUS=1\nBOX_CPUS=2\n",
                ":2: BOX_CPUS: set twice (first on line 1)",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn environment_overrides_the_file_and_is_validated() {
        let mut env = parse("EXECUTOR_PORT=4000\n").unwrap();
        env.apply_env(|k| (k == "EXECUTOR_PORT").then(|| "4001".into()))
            .unwrap();
        assert_eq!(env.executor_port, 4001);
        let err = env
            .apply_env(|k| (k == "WIRE_EXECUTOR_MCP").then(|| "nah".into()))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "environment: WIRE_EXECUTOR_MCP: 'nah' is not a boolean (use 1 or 0)"
        );
    }

    /// Unset or empty: the user's data directory (box resolves it); a path is kept as
    /// written (box resolves a relative one beside the file); never written into a box.
    #[test]
    fn backup_dir_is_optional_and_stays_on_the_host() {
        assert_eq!(BoxEnv::default().backup_dir, None);
        assert_eq!(parse("BACKUP_DIR=\n").unwrap().backup_dir, None);
        let env = parse("BACKUP_DIR='my backups'\n").unwrap();
        assert_eq!(env.backup_dir, Some(PathBuf::from("my backups")));
        assert!(!env.render().contains("BACKUP_DIR"), "{}", env.render());
        let env = parse("BACKUP_MIRROR=/mnt/nas/box\n").unwrap();
        assert_eq!(env.backup_mirror, Some(PathBuf::from("/mnt/nas/box")));
        assert!(!env.render().contains("BACKUP_MIRROR"), "{}", env.render());
        let err = parse("BACKUP_MIRROR=nas\n").unwrap_err().to_string();
        assert!(
            err.contains("BACKUP_MIRROR: 'nas' is not an absolute path"),
            "{err}"
        );
        let err = parse("BACKUP_DIR=a\u{7}b\n").unwrap_err().to_string();
        assert!(err.contains("BACKUP_DIR: contains a control"), "{err}");
    }

    #[test]
    fn the_host_keys_never_reach_a_box() {
        let mut env = BoxEnv::default();
        env.set("BOX_HOST", "ssh://me@big").unwrap();
        env.set("BOX_SSH_COMMAND", "ssh -F /home/me/cfg").unwrap();
        let text = env.render();
        assert!(
            !text.contains("BOX_HOST") && !text.contains("/home/me/cfg"),
            "{text}"
        );
        let back = BoxEnv::parse(&text, std::path::Path::new("x")).unwrap();
        assert_eq!(back, BoxEnv::default());
    }
}
