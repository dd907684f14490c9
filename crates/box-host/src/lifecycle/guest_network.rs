//! What a box needs from the host's network set-up (Lima's `propagateProxyEnv` and
//! `caCerts`): the host's proxy variables (`PROPAGATE_PROXY`) and extra CA certificates
//! (`GUEST_CA_CERTS`).
//!
//! Both reach the guest as files copied in with `machine cp` (only paths on smolvm's argv,
//! never a value, and never `create -e`, which smolvm records and shows):
//! `/etc/hermes-box/proxy.env` (root-only on arrival; provisioning lets the agent read it)
//! and `/etc/hermes-box/ca-certs.pem`. Provisioning trusts the certificates before any
//! download and exports both for apt, curl, git, npm and pip; the login profile does the
//! same for the agent's shells. They live on the guest's disk, so stop/start keeps them;
//! `box repair` and `box load` put them in again from the host's current values.
//!
//! A box on a remote host gets this machine's proxies only when `REMOTE_PROXY_HOSTS` names
//! that host: a laptop's proxy (and the password in its URL) belongs to the laptop's
//! network, and the remote's operator, its root and every guest there could read it. Any
//! other remote box gets none, and loses any it had at its next repair or load.
//!
//! A proxy on the host's loopback is refused: smolvm's guest network does not reach the
//! host's 127.0.0.1 (the 1.x NAT gives the guest 100.96.0.1, a smoltcp stack, not the host's
//! loopback; newer smolvm blocks host loopback unless `--allow-host-loopback`, which box
//! does not pass) and neither does the simulator (slirp4netns `--disable-host-loopback`).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use box_proto::{BoxEnv, proxy};
use secrecy::{ExposeSecret as _, SecretString};

use crate::remote::RemoteHost;

/// Where the proxies go in the guest.
pub const GUEST_PROXY_ENV: &str = "/etc/hermes-box/proxy.env";
/// Where the extra CA certificates go in the guest (provisioning installs them in the
/// trust store from here).
pub const GUEST_CA_CERTS: &str = "/etc/hermes-box/ca-certs.pem";

/// A PEM bundle bigger than this is not a CA list (the whole Debian bundle is ~220 KiB).
const MAX_CA_BYTES: u64 = 8 * 1024 * 1024;

/// One propagated proxy variable. The value may hold credentials: it is only ever written
/// to the guest's file; everything shown uses [`ProxyVar::shown`].
pub struct ProxyVar {
    /// Upper-case name (`HTTPS_PROXY`); the guest gets both cases.
    pub name: &'static str,
    value: SecretString,
}

impl ProxyVar {
    /// `NAME=value` with any userinfo replaced by `***`.
    pub fn shown(&self) -> String {
        let v = self.value.expose_secret();
        if proxy::is_url_var(self.name) {
            format!("{}={}", self.name, proxy::redact(v))
        } else {
            format!("{}={v}", self.name)
        }
    }
}

impl std::fmt::Debug for ProxyVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// The host's proxy settings and extra CA certificates, checked.
#[derive(Debug, Default)]
pub struct GuestNetwork {
    /// `PROPAGATE_PROXY=0`, or a remote host `REMOTE_PROXY_HOSTS` does not name: the guest
    /// gets no proxies (and loses any it had).
    pub propagate: bool,
    /// The remote host proxies are withheld from (`REMOTE_PROXY_HOSTS` does not name it).
    withheld_from: Option<String>,
    pub proxies: Vec<ProxyVar>,
    /// The GUEST_CA_CERTS files, in order, with their certificate counts.
    pub ca_files: Vec<(PathBuf, usize)>,
    ca_pem: String,
}

impl GuestNetwork {
    /// Reads `GUEST_CA_CERTS` and, with `PROPAGATE_PROXY=1`, the proxy variables `lookup`
    /// gives (the host's environment), for a box on `box_host` (`None`: this machine);
    /// none for a remote host `REMOTE_PROXY_HOSTS` does not name. Errors name the key and
    /// say what to change.
    pub fn from_host(
        env: &BoxEnv,
        box_host: Option<&RemoteHost>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let withheld_from = match box_host {
            Some(h) if env.propagate_proxy && !proxies_named_for(env, h)? => Some(h.to_string()),
            _ => None,
        };
        let mut out = Self {
            propagate: env.propagate_proxy && withheld_from.is_none(),
            withheld_from,
            ..Self::default()
        };
        for path in &env.guest_ca_certs {
            let (pem, count) = read_pem(path)?;
            out.ca_pem.push_str(&pem);
            if !out.ca_pem.ends_with('\n') {
                out.ca_pem.push('\n');
            }
            out.ca_files.push((path.clone(), count));
        }
        if out.propagate {
            for name in proxy::NAMES {
                if let Some(var) = proxy_var(name, &lookup)? {
                    out.proxies.push(var);
                }
            }
        }
        Ok(out)
    }

    /// The certificates handed to the guest, in total.
    pub fn ca_count(&self) -> usize {
        self.ca_files.iter().map(|(_, n)| n).sum()
    }

    /// One line for the user and `box doctor`: what is in effect, credentials hidden.
    pub fn summary(&self) -> String {
        let proxies = if let Some(host) = &self.withheld_from {
            format!(
                "proxies: none for {host} (this machine's go to a remote host only when REMOTE_PROXY_HOSTS names it)"
            )
        } else if !self.propagate {
            "proxies: off (PROPAGATE_PROXY=0)".to_string()
        } else if self.proxies.is_empty() {
            "proxies: none set on the host".to_string()
        } else {
            let shown: Vec<String> = self.proxies.iter().map(ProxyVar::shown).collect();
            format!("proxies: {}", shown.join(" "))
        };
        let ca = if self.ca_files.is_empty() {
            "extra CA certificates: none (GUEST_CA_CERTS unset)".to_string()
        } else {
            let files: Vec<String> = self
                .ca_files
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect();
            format!(
                "extra CA certificates: {} from GUEST_CA_CERTS ({})",
                self.ca_count(),
                files.join(", ")
            )
        };
        format!("{proxies}; {ca}")
    }

    /// The guest's proxy.env: `KEY='value'` lines in both cases, quoted so that the
    /// login profile can source it (values never hold `'` or control characters).
    fn proxy_env_text(&self) -> SecretString {
        let mut text = String::from("# written by box (PROPAGATE_PROXY); do not edit\n");
        for v in &self.proxies {
            let value = v.value.expose_secret();
            for name in [v.name.to_string(), v.name.to_ascii_lowercase()] {
                text.push_str(&format!("{name}='{value}'\n"));
            }
        }
        SecretString::from(text)
    }

    /// Puts the settings into the guest (or takes them out): runs before provisioning.
    /// With PROPAGATE_PROXY=1 and no proxy on the host, a box's existing proxies are kept,
    /// so a `box repair` from a shell without them does not cut the box off.
    pub fn install(&self, setup: &mut super::setup::Setup<'_>) -> Result<()> {
        setup.exec_ok(
            "network settings dir",
            &[
                "sh",
                "-c",
                "mkdir -p /etc/hermes-box && chmod 0755 /etc/hermes-box",
            ],
            crate::smolvm::timeouts::EXEC,
        )?;
        if !self.propagate {
            setup.exec_ok(
                "remove proxies",
                &["rm", "-f", GUEST_PROXY_ENV],
                crate::smolvm::timeouts::EXEC,
            )?;
        } else if !self.proxies.is_empty() {
            let text = self.proxy_env_text();
            copy_private(setup, "proxy", text.expose_secret(), GUEST_PROXY_ENV)?;
        }
        if self.ca_pem.is_empty() {
            setup.exec_ok(
                "remove extra CA certificates",
                &["rm", "-f", GUEST_CA_CERTS],
                crate::smolvm::timeouts::EXEC,
            )?;
        } else {
            copy_private(setup, "ca", &self.ca_pem, GUEST_CA_CERTS)?;
            setup.exec_ok(
                "extra CA certificates mode",
                &["chmod", "0644", GUEST_CA_CERTS],
                crate::smolvm::timeouts::EXEC,
            )?;
        }
        Ok(())
    }
}

/// Whether `REMOTE_PROXY_HOSTS` names `host` (user, host and port all equal).
fn proxies_named_for(env: &BoxEnv, host: &RemoteHost) -> Result<bool> {
    for entry in &env.remote_proxy_hosts {
        let named =
            RemoteHost::parse(entry).with_context(|| format!("REMOTE_PROXY_HOSTS: {entry}"))?;
        if &named == host {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Reads one proxy variable in either case. Lower case wins when both are set (curl's
/// rule for `http_proxy`); a loopback proxy or a value box could not quote is refused.
fn proxy_var(
    name: &'static str,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Option<ProxyVar>> {
    let lower = name.to_ascii_lowercase();
    let (from, value) = match (lookup(&lower), lookup(name)) {
        (Some(v), _) if !v.trim().is_empty() => (lower, v),
        (_, Some(v)) if !v.trim().is_empty() => (name.to_string(), v),
        _ => return Ok(None),
    };
    let value = value.trim().to_string();
    let shown = if proxy::is_url_var(name) {
        proxy::redact(&value)
    } else {
        value.clone()
    };
    if value.chars().any(|c| c.is_control() || c == '\'') {
        bail!(
            "{from} ({shown:?}) holds a quote or control character box cannot hand to a box; fix it, or set PROPAGATE_PROXY=0 in box.env"
        );
    }
    if proxy::is_url_var(name) {
        let Some(host) = proxy::host(&value) else {
            bail!(
                "{from}={shown} names no proxy host; fix it, or set PROPAGATE_PROXY=0 in box.env"
            );
        };
        if proxy::is_loopback_host(&host) {
            bail!(
                "{from}={shown} is on this host's loopback, which a box cannot reach (smolvm's guest network does not lead to the host's 127.0.0.1). Make the proxy listen on an address of this host the guest can reach and point {from} there, or set PROPAGATE_PROXY=0 in box.env"
            );
        }
    }
    Ok(Some(ProxyVar {
        name,
        value: SecretString::from(value),
    }))
}

/// One GUEST_CA_CERTS file: readable, of sane size, holding at least one PEM certificate.
fn read_pem(path: &Path) -> Result<(String, usize)> {
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "GUEST_CA_CERTS: cannot read {} (give PEM files that exist, ':'-separated)",
            path.display()
        )
    })?;
    if !meta.is_file() || meta.len() > MAX_CA_BYTES {
        bail!(
            "GUEST_CA_CERTS: {} is not a PEM file of at most {} MiB",
            path.display(),
            MAX_CA_BYTES >> 20
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "GUEST_CA_CERTS: {} is not a text (PEM) file",
            path.display()
        )
    })?;
    let count = text.matches("-----BEGIN CERTIFICATE-----").count();
    if count == 0 || count != text.matches("-----END CERTIFICATE-----").count() {
        bail!(
            "GUEST_CA_CERTS: {} holds no complete PEM certificate (-----BEGIN CERTIFICATE----- … -----END CERTIFICATE-----)",
            path.display()
        );
    }
    if text.contains("PRIVATE KEY-----") {
        bail!(
            "GUEST_CA_CERTS: {} holds a private key; give only the CA certificates",
            path.display()
        );
    }
    Ok((text, count))
}

/// Writes `text` to a 0600 temp file in the state dir, copies it to `guest` root-only
/// (0600 before the rename, so no moment with looser modes), and removes the temp file.
fn copy_private(
    setup: &mut super::setup::Setup<'_>,
    what: &str,
    text: &str,
    guest: &str,
) -> Result<()> {
    let local = setup.state.root().join(format!(
        ".box-{what}-{}-{}",
        setup.machine,
        std::process::id()
    ));
    let staged = format!("{guest}.new");
    let copied = (|| -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&local)
            .with_context(|| format!("cannot write {}", local.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", local.display()))?;
        drop(f);
        Ok(setup
            .smolvm
            .copy_in_cancellable(&local, setup.machine, &staged, setup.cancel)?)
    })();
    let _ = std::fs::remove_file(&local);
    copied?;
    setup.exec_ok(
        &format!("install {guest}"),
        &[
            "sh",
            "-c",
            &format!("chown root:root {staged} && chmod 0600 {staged} && mv -f {staged} {guest}"),
        ],
        crate::smolvm::timeouts::EXEC,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn host(vars: &[(&str, &str)], env: &BoxEnv) -> Result<GuestNetwork> {
        on(None, vars, env)
    }

    /// The settings for a box on `box_host` (`None`: this machine).
    fn on(box_host: Option<&str>, vars: &[(&str, &str)], env: &BoxEnv) -> Result<GuestNetwork> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let box_host = box_host.map(|h| RemoteHost::parse(h).unwrap());
        GuestNetwork::from_host(env, box_host.as_ref(), |k| map.get(k).cloned())
    }

    #[test]
    fn proxies_both_cases_lower_wins_credentials_hidden() {
        let env = BoxEnv::default();
        let n = host(
            &[
                ("HTTPS_PROXY", "http://upper:3128"),
                ("https_proxy", "http://user:hunter2@proxy.corp:3128"),
                ("NO_PROXY", "localhost,.corp"),
                ("http_proxy", "http://proxy.corp:3128"),
            ],
            &env,
        )
        .unwrap();
        let summary = n.summary();
        assert!(!summary.contains("hunter2"), "{summary}");
        assert!(!format!("{n:?}").contains("hunter2"));
        assert!(
            summary.contains("HTTPS_PROXY=http://***@proxy.corp:3128"),
            "{summary}"
        );
        assert!(summary.contains("NO_PROXY=localhost,.corp"), "{summary}");
        let text = n.proxy_env_text();
        let text = text.expose_secret();
        assert!(text.contains("HTTPS_PROXY='http://user:hunter2@proxy.corp:3128'\n"));
        assert!(text.contains("https_proxy='http://user:hunter2@proxy.corp:3128'\n"));
        assert!(text.contains("no_proxy='localhost,.corp'\n"));
        assert!(!text.contains("ALL_PROXY"));
    }

    #[test]
    fn loopback_and_unquotable_proxies_are_refused_without_the_password() {
        let env = BoxEnv::default();
        for url in [
            "http://u:hunter2@127.0.0.1:3128",
            "http://u:hunter2@localhost:3128",
            "http://u:hunter2@[::1]:3128",
        ] {
            let err = host(&[("HTTP_PROXY", url)], &env).unwrap_err().to_string();
            assert!(
                err.contains("loopback") && err.contains("PROPAGATE_PROXY=0"),
                "{err}"
            );
            assert!(!err.contains("hunter2"), "{err}");
        }
        let err = host(&[("all_proxy", "http://u:pa'ss@h:1")], &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("all_proxy") && !err.contains("pa'ss"), "{err}");
        let err = host(&[("HTTP_PROXY", "http://u:x@:3128")], &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no proxy host"), "{err}");
    }

    /// A remote box gets this machine's proxies only on a host REMOTE_PROXY_HOSTS names.
    #[test]
    fn proxies_go_to_a_remote_host_only_when_named() {
        let vars = [("HTTPS_PROXY", "http://u:hunter2@proxy.corp:3128")];
        let env = BoxEnv::default();
        let n = on(Some("ssh://me@dc"), &vars, &env).unwrap();
        assert!(n.proxies.is_empty() && !n.propagate);
        assert!(
            n.summary()
                .contains("proxies: none for ssh://me@dc (this machine's go to a remote host only when REMOTE_PROXY_HOSTS names it)"),
            "{}",
            n.summary()
        );
        // Not even read: a loopback proxy (refused for a box that would get it) is no error.
        assert!(
            on(
                Some("ssh://me@dc"),
                &[("HTTP_PROXY", "http://127.0.0.1:1")],
                &env
            )
            .is_ok()
        );
        let env = BoxEnv {
            remote_proxy_hosts: vec!["ssh://other".into(), "ssh://me@ws:2222".into()],
            ..BoxEnv::default()
        };
        let named = on(Some("ssh://me@ws:2222"), &vars, &env).unwrap();
        assert_eq!(named.proxies.len(), 1);
        assert!(named.proxy_env_text().expose_secret().contains("hunter2"));
        // Another user or port is another host.
        for other in ["ssh://ws:2222", "ssh://me@ws", "ssh://me@dc"] {
            assert!(
                on(Some(other), &vars, &env).unwrap().proxies.is_empty(),
                "{other}"
            );
        }
        assert_eq!(
            host(&vars, &env).unwrap().proxies.len(),
            1,
            "this machine's boxes"
        );
        let env = BoxEnv {
            remote_proxy_hosts: vec!["ssh://a;b".into()],
            ..BoxEnv::default()
        };
        let err = format!("{:#}", on(Some("ssh://me@dc"), &vars, &env).unwrap_err());
        assert!(err.starts_with("REMOTE_PROXY_HOSTS: ssh://a;b: "), "{err}");
    }

    #[test]
    fn propagate_off_ignores_the_host() {
        let env = BoxEnv {
            propagate_proxy: false,
            ..BoxEnv::default()
        };
        let n = host(&[("HTTP_PROXY", "http://127.0.0.1:1")], &env).unwrap();
        assert!(n.proxies.is_empty());
        assert!(n.summary().contains("PROPAGATE_PROXY=0"));
    }

    #[test]
    fn ca_files_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let good = tmp.path().join("ca.pem");
        std::fs::write(
            &good,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----",
        )
        .unwrap();
        let env = BoxEnv {
            guest_ca_certs: vec![good.clone(), good.clone()],
            ..BoxEnv::default()
        };
        let n = host(&[], &env).unwrap();
        assert_eq!(n.ca_count(), 4);
        assert!(n.ca_pem.matches("-----END CERTIFICATE-----\n").count() == 4);
        assert!(
            n.summary().contains("4 from GUEST_CA_CERTS"),
            "{}",
            n.summary()
        );

        let cases = [
            ("missing.pem", None, "cannot read"),
            ("empty.pem", Some(""), "no complete PEM"),
            (
                "truncated.pem",
                Some("-----BEGIN CERTIFICATE-----\nMII"),
                "no complete PEM",
            ),
            (
                "key.pem",
                Some(
                    "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\n",
                ),
                "private key",
            ),
        ];
        for (name, body, want) in cases {
            let p = tmp.path().join(name);
            if let Some(b) = body {
                std::fs::write(&p, b).unwrap();
            }
            let env = BoxEnv {
                guest_ca_certs: vec![p],
                ..BoxEnv::default()
            };
            let err = host(&[], &env).unwrap_err().to_string();
            assert!(
                err.contains("GUEST_CA_CERTS") && err.contains(want),
                "{name}: {err}"
            );
        }
    }
}
