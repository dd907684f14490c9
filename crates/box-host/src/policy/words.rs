//! The checkers: every word of a policy (box.env's, a flag's, a backup's) is read here,
//! and a bad one is named with the key it came from.

use std::path::PathBuf;

use anyhow::{Result, bail};

use super::lists::SHORTHANDS;
use super::{Credential, Mode, Source};

pub(super) fn valid_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && !l.starts_with('-')
        && !l.ends_with('-')
        && l.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// A lowercase DNS name with at least two labels, optionally `*.` in front.
pub(super) fn check_host(h: &str, key: &str) -> Result<String> {
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

pub(super) fn check_cidr(c: &str, key: &str) -> Result<String> {
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

/// `open`, `allowlist`, or `learn`: an allowlist box (the agents' names and the user's)
/// made to learn from, whose refusals `box egress --learn` turns into a list.
pub(super) fn parse_mode(word: &str, key: &str) -> Result<Mode> {
    match word {
        "open" => Ok(Mode::Open),
        "allowlist" | "learn" => Ok(Mode::Allowlist),
        other => bail!(
            "{key}: '{other}' is neither open nor allowlist (nor learn: an allowlist box whose \
             refusals box egress --learn proposes)"
        ),
    }
}

/// Every word through `check`, each named with `key` when it fails.
pub(super) fn checked(
    words: &[String],
    check: fn(&str, &str) -> Result<String>,
    key: &str,
) -> Result<Vec<String>> {
    words.iter().map(|w| check(w, key)).collect()
}

/// Whether the allow-list entry `entry` admits `host` (smolvm's exact-or-subdomain match;
/// `*.x` only subdomains).
pub(super) fn covers(entry: &str, host: &str) -> bool {
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
