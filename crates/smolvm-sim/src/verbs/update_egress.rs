//! `machine update --allow-host H --allow-host-pattern P --remove-allow-host H [--net]`: one
//! add/remove amendment to a stopped machine's allow list, as smolvm's `EgressUpdate` and
//! `VmRecord::updated_egress` apply it (src/config.rs at 090d4512, shared there by `machine
//! update` and the API's egress endpoint; read, not copied):
//!
//! * removals first: each must name an entry as it was added (a bare host, or a pattern in
//!   its `=host`/`*.host` form or as written); one that is not there is an error naming it;
//! * bare hosts are stored bare (the name and its subdomains), patterns encoded; nothing is
//!   stored twice;
//! * removing the last entry of a restricted machine would open egress to every host, so it
//!   is refused unless `--net` says so;
//! * the credential bindings must stay reachable under the new list (`replace_egress`).
//!
//! The machine being stopped is checked by the verb before this runs. Only the personality
//! that models that code has the flags (`Personality::updates_allow_lists`).

use crate::policy::addresses::encode_pattern;
use crate::policy::credential::{self, Binding};

/// The egress flags of one `machine update`.
#[derive(Debug, Default)]
pub struct Amendment {
    pub allow_hosts: Vec<String>,
    pub allow_host_patterns: Vec<String>,
    pub remove_allow_hosts: Vec<String>,
    /// `--net`: a removal may empty the list (egress to every host).
    pub allow_all: bool,
}

impl Amendment {
    pub fn is_empty(&self) -> bool {
        self.allow_hosts.is_empty()
            && self.allow_host_patterns.is_empty()
            && self.remove_allow_hosts.is_empty()
    }
}

/// A machine's allow lists after an amendment, and the lines `update` prints for it.
#[derive(Debug, PartialEq, Eq)]
pub struct Amended {
    /// `None`: no allow-host list (no DNS filter).
    pub hosts: Option<Vec<String>>,
    pub changes: Vec<String>,
}

/// `a` applied to machine `machine`'s lists (`hosts`, `cidrs`) with its `bindings`; the
/// error is smolvm's text.
pub fn amend(
    machine: &str,
    hosts: Option<&[String]>,
    cidrs: &[String],
    bindings: &[Binding],
    a: &Amendment,
) -> Result<Amended, String> {
    let mut list: Vec<String> = hosts.map(<[String]>::to_vec).unwrap_or_default();
    let was_restricted = !list.is_empty() || !cidrs.is_empty();
    let mut changes = Vec::new();
    for host in &a.remove_allow_hosts {
        let host = host.trim();
        let strict = encode_pattern(host).ok();
        let before = list.len();
        list.retain(|stored| stored != host && Some(stored) != strict.as_ref());
        if list.len() == before {
            return Err(format!(
                "'{host}' is not in machine '{machine}''s allowed hosts"
            ));
        }
        changes.push(format!("  removed allowed host: {host}"));
    }
    for host in &a.allow_hosts {
        let host = host.trim();
        // Checked as a pattern would be; kept bare for its name-and-subdomains meaning.
        encode_pattern(host)?;
        if !list.iter().any(|stored| stored == host) {
            list.push(host.to_string());
            changes.push(format!("  allowed host: {host}"));
        }
    }
    for pattern in &a.allow_host_patterns {
        let encoded = encode_pattern(pattern.trim())?;
        if !list.contains(&encoded) {
            changes.push(format!("  allowed host pattern: {encoded}"));
            list.push(encoded);
        }
    }
    if was_restricted && list.is_empty() && cidrs.is_empty() && !a.allow_all {
        return Err(
            "removing the last allowed host or CIDR would allow egress to every host; \
                    say so explicitly (--net on the CLI, allowAll on the API), or turn \
                    networking off instead"
                .to_string(),
        );
    }
    let hosts = (!list.is_empty()).then_some(list);
    credential::validate(bindings, hosts.as_deref())?;
    Ok(Amended { hosts, changes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn hosts(v: &[&str]) -> Option<Vec<String>> {
        Some(strings(v))
    }

    #[test]
    fn adds_merge_without_duplicates_and_patterns_are_stored_encoded() {
        let a = Amendment {
            allow_hosts: strings(&["example.org", "anthropic.com"]),
            allow_host_patterns: strings(&["*.example.net", "*.example.net"]),
            ..Default::default()
        };
        let got = amend("m", hosts(&["anthropic.com"]).as_deref(), &[], &[], &a).unwrap();
        assert_eq!(
            got.hosts,
            hosts(&["anthropic.com", "example.org", "*.example.net"])
        );
        assert_eq!(got.changes.len(), 2, "{:?}", got.changes);
        // A bad name is smolvm's refusal, and nothing is changed.
        let bad = Amendment {
            allow_hosts: strings(&["bad host"]),
            ..Default::default()
        };
        let err = amend("m", hosts(&["a.com"]).as_deref(), &[], &[], &bad).unwrap_err();
        assert!(err.contains("invalid host pattern"), "{err}");
    }

    #[test]
    fn removing_what_is_not_there_names_it() {
        let a = Amendment {
            remove_allow_hosts: strings(&["other.example"]),
            ..Default::default()
        };
        let err = amend("box1", hosts(&["a.com", "b.com"]).as_deref(), &[], &[], &a).unwrap_err();
        assert_eq!(
            err,
            "'other.example' is not in machine 'box1''s allowed hosts"
        );
        // A pattern is removed as it was written.
        let a = Amendment {
            remove_allow_hosts: strings(&["*.b.com"]),
            ..Default::default()
        };
        let got = amend("m", hosts(&["a.com", "*.b.com"]).as_deref(), &[], &[], &a).unwrap();
        assert_eq!(got.hosts, hosts(&["a.com"]));
    }

    #[test]
    fn the_last_entry_goes_only_when_everything_is_allowed_on_purpose() {
        let last = Amendment {
            remove_allow_hosts: strings(&["a.com"]),
            ..Default::default()
        };
        let err = amend("m", hosts(&["a.com"]).as_deref(), &[], &[], &last).unwrap_err();
        assert!(err.contains("would allow egress to every host"), "{err}");
        // A CIDR left keeps the machine restricted.
        let got = amend(
            "m",
            hosts(&["a.com"]).as_deref(),
            &strings(&["203.0.113.0/24"]),
            &[],
            &last,
        )
        .unwrap();
        assert_eq!(got.hosts, None);
        let open = Amendment {
            allow_all: true,
            ..last
        };
        let got = amend("m", hosts(&["a.com"]).as_deref(), &[], &[], &open).unwrap();
        assert_eq!(got.hosts, None);
    }

    #[test]
    fn a_credential_host_must_stay_reachable() {
        let b = credential::parse("k=KEY@api.a.com").unwrap();
        let a = Amendment {
            remove_allow_hosts: strings(&["a.com"]),
            ..Default::default()
        };
        let err = amend(
            "m",
            hosts(&["a.com", "b.com"]).as_deref(),
            &[],
            std::slice::from_ref(&b),
            &a,
        )
        .unwrap_err();
        assert!(err.contains("is not reachable"), "{err}");
        // Another entry that covers it is enough.
        let a = Amendment {
            allow_hosts: strings(&["api.a.com"]),
            remove_allow_hosts: strings(&["a.com"]),
            ..Default::default()
        };
        let got = amend("m", hosts(&["a.com", "b.com"]).as_deref(), &[], &[b], &a).unwrap();
        assert_eq!(got.hosts, hosts(&["b.com", "api.a.com"]));
    }
}
