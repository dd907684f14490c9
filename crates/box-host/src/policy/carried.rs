//! A policy that goes from one box to the next: `box save` records it in the runtime
//! manifest (box-proto's `POLICY_KEYS`: names, ranges and credential bindings as
//! `NAME@HOST`, never a value or where one is kept), `box load` makes the restored box with
//! the backup's, `box clone` with its source's, and the user's flags go on top.
//!
//! A backup is data from outside this process: its words are checked as box.env's are, and
//! it cannot send a key anywhere the user did not. A binding it names is taken only for
//! hosts box.env's CREDENTIALS or a shorthand already give that variable to; any other is
//! left out and said, with the flag that binds it.

use anyhow::{Context as _, Result, bail};
use box_proto::manifest::RuntimeManifest;
use box_proto::{BoxEnv, BoxName};

use super::words::{check_cidr, check_host, parse_mode};
use super::{Containment, Credential, Mode, Overrides, SHORTHANDS, parse_credential};

/// The manifest entries of a policy (`hb write-manifest --policy KEY=VALUE` each).
pub fn manifest_entries(c: &Containment) -> Vec<String> {
    let words = |v: &[String]| v.join(" ");
    let bindings: Vec<String> = c
        .credentials
        .iter()
        .map(|b| format!("{}@{}", b.var, b.hosts.join(",")))
        .collect();
    vec![
        format!(
            "egress={}",
            match c.mode {
                Mode::Open => "open",
                Mode::Allowlist => "allowlist",
            }
        ),
        format!("egress_allow_hosts={}", words(&c.hosts)),
        format!("egress_allow_cidrs={}", words(&c.cidrs)),
        format!("egress_allow_private={}", words(&c.allow_private)),
        format!("credentials={}", bindings.join(" ")),
    ]
}

/// What a backup's manifest recorded, every word checked; `None` for a backup of a box
/// made before box recorded policies. Bindings are as recorded (see [`trusted`]).
pub fn from_manifest(m: &RuntimeManifest) -> Result<Option<Containment>> {
    let Some(mode) = m.get("egress") else {
        return Ok(None);
    };
    let words = |key: &str| -> Vec<String> {
        m.get(key)
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let list = |key: &str, check: fn(&str, &str) -> Result<String>| -> Result<Vec<String>> {
        words(key).iter().map(|w| check(w, key)).collect()
    };
    let mut credentials: Vec<Credential> = Vec::new();
    for spec in words("credentials") {
        // NAME@HOST only: a backup never says where a value is read from.
        if spec.contains('=') {
            bail!("credentials: '{spec}' is not a NAME@HOST binding");
        }
        let c = parse_credential(&spec)?;
        if credentials.iter().any(|d| d.var == c.var) {
            bail!("credentials: {} is bound twice", c.var);
        }
        credentials.push(c);
    }
    let c = Containment {
        mode: parse_mode(mode, "egress")?,
        hosts: list("egress_allow_hosts", check_host)?,
        cidrs: list("egress_allow_cidrs", check_cidr)?,
        allow_private: list("egress_allow_private", check_cidr)?,
        credentials,
        lan_closed: false,
    };
    if c.mode == Mode::Open && (!c.hosts.is_empty() || !c.cidrs.is_empty()) {
        bail!("egress=open with an allow list");
    }
    Ok(Some(c))
}

/// The hosts box.env and the shorthands give `var` to.
fn hosts_for<'a>(env_bindings: &'a [Credential], var: &str) -> Vec<&'a str> {
    env_bindings
        .iter()
        .filter(|c| c.var == var)
        .flat_map(|c| c.hosts.iter().map(String::as_str))
        .chain(
            SHORTHANDS
                .iter()
                .filter(|(_, v, _)| *v == var)
                .map(|(_, _, h)| *h),
        )
        .collect()
}

/// The bindings of a carried policy this user's configuration stands behind: each host
/// already receives that variable through box.env's CREDENTIALS or a shorthand. Those take
/// box.env's source for the variable (its file, when it names one). The others come back
/// as messages, each with the flag that binds it.
fn trusted(env: &BoxEnv, carried: &mut Containment) -> Result<Vec<String>> {
    let mut env_bindings = Vec::new();
    for spec in &env.credentials {
        env_bindings.push(parse_credential(spec)?);
    }
    let mut left_out = Vec::new();
    carried.credentials.retain_mut(|c| {
        let known = hosts_for(&env_bindings, &c.var);
        if c.hosts.iter().all(|h| known.contains(&h.as_str())) {
            if let Some(own) = env_bindings.iter().find(|e| e.var == c.var) {
                c.source = own.source.clone();
            }
            return true;
        }
        left_out.push(format!(
            "the backup binds {} to {}, which your CREDENTIALS do not: box hands a key only \
             to hosts you named, so the restored box goes without it; add --credential {} to \
             bind it",
            c.var,
            c.hosts.join(","),
            c.spec()
        ));
        false
    });
    Ok(left_out)
}

/// The policy of the box `box load` makes from a backup whose manifest is `manifest`,
/// with the user's `flags` on top; what the user must be warned of; the line that says
/// which policy it is.
pub fn for_load(
    env: &BoxEnv,
    manifest: Option<&RuntimeManifest>,
    flags: &Overrides,
    flagged: bool,
) -> Result<(Containment, Vec<String>, String)> {
    let mut said = Vec::new();
    let recorded = match manifest.map(from_manifest).transpose() {
        Ok(r) => r.flatten(),
        Err(e) => {
            said.push(format!(
                "the network policy recorded in this backup is unreadable ({e:#}); using \
                 box.env's instead"
            ));
            None
        }
    };
    let (mut c, origin) = match recorded {
        Some(mut c) => {
            said.extend(trusted(env, &mut c)?);
            (c, "the backup's (as it was saved)")
        }
        None => (
            Containment::from_config(env, &Overrides::default())?,
            "box.env's (the backup records none)",
        ),
    };
    c.apply(flags).context("the policy flags")?;
    Ok((c, said, policy_line(origin, flagged)))
}

/// The policy of `box clone`'s new box: the source's (box.env's for a source made before
/// box recorded policies), the user's `flags` on top, and the line that says which.
pub fn for_clone(
    env: &BoxEnv,
    source: &BoxName,
    recorded: Option<&Containment>,
    flags: &Overrides,
    flagged: bool,
) -> Result<(Containment, String)> {
    let (mut c, origin) = match recorded {
        Some(c) => (c.clone(), format!("the source's ('{source}')")),
        None => (
            Containment::from_config(env, &Overrides::default())?,
            format!("box.env's ('{source}' records none)"),
        ),
    };
    c.apply(flags).context("the policy flags")?;
    Ok((c, policy_line(&origin, flagged)))
}

fn policy_line(origin: &str, flagged: bool) -> String {
    format!(
        "network policy: {origin}{}",
        if flagged {
            ", with your flags on top"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Source;
    use crate::policy::tests::env;

    fn manifest_of(c: &Containment) -> RuntimeManifest {
        let mut m = RuntimeManifest::new();
        for entry in manifest_entries(c) {
            let (k, v) = entry.split_once('=').unwrap();
            m.set(k, v);
        }
        m
    }

    #[test]
    fn a_policy_survives_the_manifest_without_any_file_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        let e = env(&[
            ("EGRESS", "allowlist"),
            ("EGRESS_ALLOW_HOSTS", "example.com *.internal.example"),
            ("EGRESS_ALLOW_CIDRS", "203.0.113.0/24"),
            ("EGRESS_ALLOW_PRIVATE", "10.1.2.3/32"),
        ]);
        let spec = format!("KEY2=@{}@api.other.test,api2.other.test", file.display());
        let c = Containment::from_config(
            &e,
            &Overrides {
                credentials: vec!["anthropic".into(), spec],
                ..Default::default()
            },
        )
        .unwrap();
        let m = manifest_of(&c);
        assert!(!m.render().contains(&dir.path().display().to_string()));
        assert!(
            m.render().contains(
                "credentials=ANTHROPIC_API_KEY@api.anthropic.com KEY2@api.other.test,api2.other.test"
            ),
            "{}",
            m.render()
        );
        let back = from_manifest(&m).unwrap().unwrap();
        assert_eq!(back.mode, Mode::Allowlist);
        assert_eq!(back.hosts, c.hosts);
        assert_eq!(back.cidrs, c.cidrs);
        assert_eq!(back.allow_private, c.allow_private);
        assert_eq!(back.credentials.len(), 2);
        assert!(back.credentials.iter().all(|b| b.source == Source::Env));
        assert_eq!(from_manifest(&RuntimeManifest::new()).unwrap(), None);
    }

    #[test]
    fn a_hostile_manifest_is_refused_word_by_word() {
        for (key, value, want) in [
            ("egress", "everything", "neither open nor allowlist"),
            ("egress_allow_hosts", "10.0.0.1", "is not a host name"),
            ("egress_allow_private", "10.0.0.0/99", "bad prefix length"),
            (
                "credentials",
                "K=@/root/.ssh/id_rsa@evil.test",
                "not a NAME@HOST",
            ),
            ("credentials", "K@a.test K@b.test", "bound twice"),
        ] {
            let mut m = RuntimeManifest::new();
            m.set("egress", "allowlist");
            m.set(key, value);
            let err = from_manifest(&m).unwrap_err().to_string();
            assert!(err.contains(want), "{key}={value}: {err}");
        }
    }

    #[test]
    fn load_takes_the_backups_policy_and_only_bindings_the_user_stands_behind() {
        let mut m = RuntimeManifest::new();
        m.set("egress", "allowlist");
        m.set("egress_allow_hosts", "saved.example");
        m.set(
            "credentials",
            "ANTHROPIC_API_KEY@api.anthropic.com ANTHROPIC_API_KEY2@evil.test OPENAI_API_KEY@evil.test",
        );
        // box.env says open, binds nothing: the backup's mode and names win; only the
        // shorthand's host is trusted.
        let (c, said, line) =
            for_load(&BoxEnv::default(), Some(&m), &Overrides::default(), false).unwrap();
        assert_eq!(line, "network policy: the backup's (as it was saved)");
        assert_eq!(c.mode, Mode::Allowlist);
        assert_eq!(c.hosts, ["saved.example"]);
        let vars: Vec<&str> = c.credentials.iter().map(|b| b.var.as_str()).collect();
        assert_eq!(vars, ["ANTHROPIC_API_KEY"]);
        let text = said.join("\n");
        for want in [
            "binds ANTHROPIC_API_KEY2 to evil.test",
            "--credential OPENAI_API_KEY@evil.test",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        // box.env binding a variable to a host vouches for it, and its file is the source.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k");
        let e = env(&[(
            "CREDENTIALS",
            &format!("ANTHROPIC_API_KEY2=@{}@evil.test", file.display()),
        )]);
        let (c, _, _) = for_load(&e, Some(&m), &Overrides::default(), false).unwrap();
        let b = c
            .credentials
            .iter()
            .find(|b| b.var == "ANTHROPIC_API_KEY2")
            .unwrap();
        assert_eq!(b.source, Source::File(file));
        // Flags go on top; a backup without a policy gives box.env's.
        let flags = Overrides {
            deny_hosts: vec!["saved.example".into()],
            allow_private: vec!["192.168.1.5/32".into()],
            ..Default::default()
        };
        let (c, _, line) = for_load(&BoxEnv::default(), Some(&m), &flags, true).unwrap();
        assert!(c.hosts.is_empty() && c.allow_private == ["192.168.1.5/32"]);
        assert!(line.ends_with("with your flags on top"), "{line}");
        let (c, said, line) =
            for_load(&BoxEnv::default(), None, &Overrides::default(), false).unwrap();
        assert_eq!(c.mode, Mode::Open);
        assert!(said.is_empty());
        assert!(
            line.contains("box.env's (the backup records none)"),
            "{line}"
        );
        // An unreadable record is said and box.env's taken, never half of it.
        let mut bad = m.clone();
        bad.set("egress_allow_cidrs", "not-a-range");
        let (c, said, _) =
            for_load(&BoxEnv::default(), Some(&bad), &Overrides::default(), false).unwrap();
        assert_eq!(c.mode, Mode::Open);
        assert!(said[0].contains("unreadable"), "{said:?}");
    }

    #[test]
    fn clone_takes_the_sources_policy_and_flags_change_it() {
        let src = Containment::from_config(
            &env(&[
                ("EGRESS", "allowlist"),
                ("EGRESS_ALLOW_HOSTS", "a.example b.example"),
            ]),
            &Overrides::default(),
        )
        .unwrap();
        let name = BoxName::parse("alpha").unwrap();
        let flags = Overrides {
            allow_hosts: vec!["c.example".into()],
            deny_hosts: vec!["a.example".into()],
            ..Default::default()
        };
        let (c, line) = for_clone(&BoxEnv::default(), &name, Some(&src), &flags, true).unwrap();
        assert_eq!(c.hosts, ["b.example", "c.example"]);
        assert_eq!(
            line,
            "network policy: the source's ('alpha'), with your flags on top"
        );
        for (deny, want) in [
            ("npmjs.org", "on the shipped agents list"),
            ("registry.npmjs.org", "on the shipped agents list"),
            ("z.example", "not on this box's own list"),
        ] {
            let flags = Overrides {
                deny_hosts: vec![deny.into()],
                ..Default::default()
            };
            let err = for_clone(&BoxEnv::default(), &name, Some(&src), &flags, true).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{deny}: {err:#}");
        }
    }
}
