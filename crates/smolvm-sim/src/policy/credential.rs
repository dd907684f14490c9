//! Credential bindings as smolvm records them (`machine create --credential
//! NAME=ENV_VAR@HOST[,HOST...]`, smolvm 1.18+): the binding, its create-time rules, the
//! placeholder the guest holds, and the variables the guest's processes get. Sources:
//! smolvm's `docs/credential-substitution.md` (18095d76), `docs/credentials/SKILL.md`
//! (f7b2b064, the measured refusal texts), `smolvm-protocol` 1.33.0 `src/credentials.rs`
//! (rules, guest paths and trust variables). What the host does with a value lives in
//! `credentials/`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::addresses::host_matches;

/// Every placeholder starts with it; the interceptor refuses it anywhere it does not
/// substitute.
pub const PLACEHOLDER_PREFIX: &str = "SMOL_PLACEHOLDER_";
pub const GUEST_CA_DIR: &str = "/run/smol/credentials";
pub const GUEST_CA: &str = "/run/smol/credentials/ca.pem";
pub const GUEST_CA_BUNDLE: &str = "/run/smolvm/ca-bundle.pem";

/// The trust variables every workload and exec of a credentialed machine gets.
pub const GUEST_TRUST_ENV: [(&str, &str); 6] = [
    ("SSL_CERT_FILE", GUEST_CA_BUNDLE),
    ("CURL_CA_BUNDLE", GUEST_CA_BUNDLE),
    ("REQUESTS_CA_BUNDLE", GUEST_CA_BUNDLE),
    ("GIT_SSL_CAINFO", GUEST_CA_BUNDLE),
    ("NODE_EXTRA_CA_CERTS", GUEST_CA),
    ("DENO_CERT", GUEST_CA),
];

/// Methods a binding allows (smolvm's `DEFAULT_METHODS`; the CLI form cannot narrow them).
pub const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// One `--credential`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub env: String,
    pub hosts: Vec<String>,
}

impl Binding {
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.iter().any(|p| match p.strip_prefix("*.") {
            Some(parent) => host.len() > parent.len() + 1 && host.ends_with(&format!(".{parent}")),
            None => *p == host,
        })
    }
}

/// `NAME=ENV_VAR@HOST[,HOST...]`.
pub fn parse(spec: &str) -> Result<Binding, String> {
    let bad = || format!("invalid credential '{spec}': expected NAME=ENV_VAR@HOST[,HOST...]");
    let (name, rest) = spec.split_once('=').ok_or_else(bad)?;
    let (env, hosts) = rest.split_once('@').ok_or_else(bad)?;
    Ok(Binding {
        name: name.to_string(),
        env: env.to_string(),
        hosts: hosts.split(',').map(str::to_string).collect(),
    })
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
}

fn valid_env(n: &str) -> bool {
    let mut b = n.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn valid_exact_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.parse::<std::net::IpAddr>().is_err()
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        })
}

fn valid_host(h: &str) -> bool {
    match h.strip_prefix("*.") {
        Some(parent) => valid_exact_host(parent) && parent.contains('.'),
        None => valid_exact_host(h),
    }
}

/// Whether the machine's allow-host entries reach credential host `host`.
fn covered(host: &str, allow: &[String]) -> bool {
    match host.strip_prefix("*.") {
        Some(parent) => allow.iter().any(|e| {
            let subtree = e
                .strip_prefix("*.")
                .or_else(|| (!e.starts_with('=')).then_some(e.as_str()));
            subtree.is_some_and(|s| host_matches(parent, s))
        }),
        None => allow.iter().any(|e| host_matches(host, e)),
    }
}

/// smolvm's create-time rules (`CredentialPolicy::validate`), with its texts.
pub fn validate(bindings: &[Binding], allow_hosts: Option<&[String]>) -> Result<(), String> {
    let mut names = Vec::new();
    let mut envs = Vec::new();
    for b in bindings {
        let (name, env) = (&b.name, &b.env);
        if !valid_name(name) {
            return Err(format!(
                "credential name {name:?} is not a valid binding name"
            ));
        }
        if !valid_env(env) {
            return Err(format!(
                "credential environment variable {env:?} is not a valid name"
            ));
        }
        if names.contains(name) {
            return Err(format!("credential {name:?} is declared twice"));
        }
        if envs.contains(env) {
            return Err(format!(
                "environment variable {env:?} is bound to more than one credential"
            ));
        }
        names.push(name.clone());
        envs.push(env.clone());
        if b.hosts.iter().all(|h| h.is_empty()) {
            return Err(format!(
                "credential {name:?} lists no allowed_hosts; a credential is never sent anywhere by default"
            ));
        }
        for host in &b.hosts {
            if !valid_host(host) {
                return Err(format!(
                    "credential {name:?} host {host:?} must be a lowercase DNS name, optionally \
                     `*.` plus a name with at least two labels (no scheme, port or IP)"
                ));
            }
            if allow_hosts.is_some_and(|a| !covered(host, a)) {
                return Err(format!(
                    "credential {name:?} host {host:?} is not reachable under the machine's network allow_hosts"
                ));
            }
        }
    }
    Ok(())
}

/// A fresh placeholder for binding `name`: `SMOL_PLACEHOLDER_<NAME>_<32 hex>`, as observed
/// (`SMOL_PLACEHOLDER_DEMO_E0226293E472287B661DFAB687C5DE0C`).
pub fn mint(name: &str) -> String {
    let mut rnd = [0u8; 16];
    rand::Rng::fill(&mut rand::rng(), &mut rnd[..]);
    let upper: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{PLACEHOLDER_PREFIX}{upper}_{}", hex::encode_upper(rnd))
}

/// Placeholders for every binding, by binding name.
pub fn mint_all(bindings: &[Binding]) -> BTreeMap<String, String> {
    bindings
        .iter()
        .map(|b| (b.name.clone(), mint(&b.name)))
        .collect()
}

/// What a credentialed machine's workload and execs get on top of the record's env: each
/// binding's variable holding its placeholder, and the trust variables.
pub fn guest_env(
    bindings: &[Binding],
    placeholders: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    if bindings.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = bindings
        .iter()
        .filter_map(|b| Some((b.env.clone(), placeholders.get(&b.name)?.clone())))
        .collect();
    out.extend(
        GUEST_TRUST_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(spec: &str) -> Binding {
        parse(spec).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn bindings_parse_and_validate_with_smolvms_rules() {
        let ok = b("anthropic=ANTHROPIC_API_KEY@api.anthropic.com");
        assert_eq!(ok.hosts, vec!["api.anthropic.com"]);
        assert!(validate(std::slice::from_ref(&ok), None).is_ok());
        assert!(parse("nope").is_err() && parse("a=B").is_err());
        for (spec, want) in [
            ("a=K@10.0.0.1", "must be a lowercase DNS name"),
            ("a=K@API.x.com", "must be a lowercase DNS name"),
            ("a=K@*.com", "must be a lowercase DNS name"),
            ("a=K@x.com:443", "must be a lowercase DNS name"),
            ("a b=K@x.com", "not a valid binding name"),
            ("a=1K@x.com", "not a valid name"),
            ("a=K@", "lists no allowed_hosts"),
        ] {
            let err = validate(&[b(spec)], None).unwrap_err();
            assert!(err.contains(want), "{spec}: {err}");
        }
        let twice = validate(&[ok.clone(), ok.clone()], None).unwrap_err();
        assert!(twice.contains("declared twice"), "{twice}");
        let allow = vec!["github.com".to_string()];
        let outside = validate(std::slice::from_ref(&ok), Some(&allow)).unwrap_err();
        assert!(outside.contains("not reachable under the machine's network allow_hosts"));
        let allow = vec!["anthropic.com".to_string()];
        assert!(validate(&[ok], Some(&allow)).is_ok());
    }

    #[test]
    fn placeholders_are_fresh_and_shaped_like_smolvms() {
        let p = mint("anthropic_api-key");
        assert!(p.starts_with("SMOL_PLACEHOLDER_ANTHROPIC_API_KEY_"), "{p}");
        assert_eq!(p.len(), "SMOL_PLACEHOLDER_ANTHROPIC_API_KEY_".len() + 32);
        assert_ne!(p, mint("anthropic_api-key"));
    }

    #[test]
    fn hosts_match_exactly_or_by_wildcard() {
        let w = b("a=K@*.example.com,api.test.org");
        assert!(w.allows_host("x.example.com") && w.allows_host("API.test.org."));
        assert!(!w.allows_host("example.com") && !w.allows_host("test.org"));
    }
}
