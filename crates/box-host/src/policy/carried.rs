//! A policy that goes from one box to the next: `box save` seals it into the backup's host
//! facts (names, ranges and credential bindings as `NAME@HOST`, never a value or where one
//! is kept; the same words go into the runtime manifest, for older boxes and for people),
//! `box load` makes the restored box with the backup's sealed policy, `box clone` with its
//! source's registry row, and the user's flags go on top.
//!
//! A backup is data from outside this process: its words are checked as box.env's are, and
//! it cannot send a key anywhere the user did not. A binding it names is taken only for
//! hosts box.env's CREDENTIALS already give that variable to; any other is left out and
//! said, with the flag that binds it. Policy words that only the guest wrote (a backup
//! made before box sealed its facts) are never taken unless the user asks.

use anyhow::{Context as _, Result, bail};
use box_proto::manifest::RuntimeManifest;
use box_proto::{BoxEnv, BoxName};

use super::words::{check_cidr, check_host, parse_mode};
use super::{Containment, Credential, Mode, Overrides, parse_credential};

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
/// made before box recorded policies. Bindings are as recorded (see `trusted`).
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

/// The user's own words on a carried policy: `box load`'s and `box clone`'s flags.
#[derive(Debug, Clone, Default)]
pub struct CarryFlags {
    /// The policy flags `box new` takes, on top.
    pub overrides: Overrides,
    /// Whether any of them was given (said in the policy line).
    pub flagged: bool,
    /// Variables whose binding the new box goes without (`--no-credential NAME`).
    pub no_credentials: Vec<String>,
    /// `--policy-from-backup`: a backup made before box sealed its policy gives the policy
    /// words of its runtime manifest (written inside the box) instead of box.env's.
    pub policy_from_backup: bool,
    /// `--accept-open-lan`: a box recorded with its LAN closed may be made on a smolvm that
    /// cannot close it.
    pub accept_open_lan: bool,
}

/// Where a restored box's policy may come from: what the backup holds of it.
#[derive(Debug, Clone, Copy)]
pub enum Recorded<'a> {
    /// Sealed by box into the backup (`None`: the saved box kept no policy).
    Sealed(Option<&'a Containment>),
    /// Not sealed: a backup made before box sealed its facts, whose only policy words are
    /// in the runtime manifest, which the guest wrote (`None`: no manifest). `why`: what
    /// was found instead of sealed facts, when something was.
    Unsealed {
        manifest: Option<&'a RuntimeManifest>,
        why: Option<&'a str>,
    },
}

/// The policy a new box is made with, and what to tell the user of it.
#[derive(Debug, Clone)]
pub struct Carried {
    pub policy: Containment,
    /// Warnings: bindings left out, words that could not be read.
    pub said: Vec<String>,
    /// `network policy: …`: which policy it is.
    pub line: String,
    /// The box it comes from had its LAN closed and the user did not accept an open one:
    /// a smolvm that cannot close it must refuse.
    pub lan_required: bool,
}

/// The hosts box.env's CREDENTIALS give `var` to (a shorthand counts where the user wrote
/// it there; a shorthand alone never vouches for anything).
fn hosts_for<'a>(env_bindings: &'a [Credential], var: &str) -> Vec<&'a str> {
    env_bindings
        .iter()
        .filter(|c| c.var == var)
        .flat_map(|c| c.hosts.iter().map(String::as_str))
        .collect()
}

/// The bindings of a carried policy this user's configuration stands behind: each host
/// already receives that variable through box.env's CREDENTIALS. Those take box.env's
/// source for the variable (its file, when it names one). The others come back as
/// messages, each with the flag that binds it.
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

/// The user's flags on a carried (or box.env's) policy: `--no-credential` drops a
/// binding, the policy flags go on top.
fn finish(
    mut c: Containment,
    mut said: Vec<String>,
    origin: &str,
    flags: &CarryFlags,
    recorded_closed: bool,
) -> Result<Carried> {
    for var in &flags.no_credentials {
        if flags
            .overrides
            .credentials
            .iter()
            .filter_map(|spec| parse_credential(spec).ok())
            .any(|b| b.var == *var)
        {
            bail!("--no-credential {var} and --credential {var}: give one of them");
        }
        let before = c.credentials.len();
        c.credentials.retain(|b| b.var != *var);
        if c.credentials.len() == before {
            said.push(format!(
                "--no-credential {var}: the new box would not bind {var} anyway"
            ));
        }
    }
    c.apply(&flags.overrides).context("the policy flags")?;
    // smolvm says whether it closed the LAN of the box it makes.
    c.lan_closed = false;
    Ok(Carried {
        policy: c,
        said,
        line: policy_line(origin, flags.flagged),
        lan_required: recorded_closed && !flags.accept_open_lan,
    })
}

/// The policy of the box `box load` makes from a backup holding `recorded`, with the
/// user's `flags` on top.
///
/// Only a policy box sealed into the backup is taken as it is (its bindings filtered by
/// `trusted`: a backup cannot send a key anywhere your CREDENTIALS do not). A backup
/// made before box sealed its policy gets box.env's, and says so: its policy words were
/// written inside the box, where its agent could change them; `--policy-from-backup`
/// takes them anyway, filtered the same way.
pub fn for_load(env: &BoxEnv, recorded: Recorded<'_>, flags: &CarryFlags) -> Result<Carried> {
    let mut said = Vec::new();
    let box_env = || Containment::from_config(env, &Overrides::default());
    let (c, origin, closed) = match recorded {
        Recorded::Sealed(Some(sealed)) => {
            let mut c = sealed.clone();
            said.extend(trusted(env, &mut c)?);
            (
                c,
                "the backup's (sealed by box when it was saved)".to_string(),
                sealed.lan_closed,
            )
        }
        Recorded::Sealed(None) => (
            box_env()?,
            "box.env's (the saved box kept none)".to_string(),
            false,
        ),
        Recorded::Unsealed { manifest, why } => {
            if let Some(why) = why {
                said.push(format!("this backup's first bytes are not box's: {why}"));
            }
            let words = if flags.policy_from_backup {
                match manifest.map(from_manifest).transpose() {
                    Ok(words) => words.flatten(),
                    Err(e) => bail!(
                        "--policy-from-backup: the policy words in this backup's runtime \
                         manifest are unreadable ({e:#})"
                    ),
                }
            } else {
                None
            };
            match words {
                Some(mut c) => {
                    said.extend(trusted(env, &mut c)?);
                    (
                        c,
                        "the backup's runtime manifest (--policy-from-backup; written inside \
                         the box)"
                            .to_string(),
                        false,
                    )
                }
                None if flags.policy_from_backup => bail!(
                    "--policy-from-backup: this backup records no policy; leave the flag out \
                     to take box.env's"
                ),
                None => (
                    box_env()?,
                    "box.env's: this backup was made before box sealed its policy into \
                     backups (the policy words in it were written inside the box, where its \
                     agent can change them); --policy-from-backup takes them"
                        .to_string(),
                    false,
                ),
            }
        }
    };
    finish(c, said, &origin, flags, closed)
}

/// The policy of `box clone`'s new box: the source's, from its registry row (box.env's for
/// a source made before box recorded policies), with the user's `flags` on top.
pub fn for_clone(
    env: &BoxEnv,
    source: &BoxName,
    recorded: Option<&Containment>,
    flags: &CarryFlags,
) -> Result<Carried> {
    let (c, origin, closed) = match recorded {
        Some(c) => (
            c.clone(),
            format!("the source's ('{source}')"),
            c.lan_closed,
        ),
        None => (
            Containment::from_config(env, &Overrides::default())?,
            format!("box.env's ('{source}' records none)"),
            false,
        ),
    };
    finish(c, Vec::new(), &origin, flags, closed)
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

    /// A manifest an agent wrote to escape: the LAN reopened, egress open, and the three
    /// API keys bound to their own hosts (a shorthand's host each).
    fn hostile_manifest() -> RuntimeManifest {
        let mut m = RuntimeManifest::new();
        m.set("egress", "open");
        m.set("egress_allow_private", "10.0.0.0/8");
        m.set(
            "credentials",
            "OPENAI_API_KEY@api.openai.com ANTHROPIC_API_KEY@api.anthropic.com \
             OPENROUTER_API_KEY@openrouter.ai",
        );
        m
    }

    fn unsealed(m: &RuntimeManifest) -> Recorded<'_> {
        Recorded::Unsealed {
            manifest: Some(m),
            why: None,
        }
    }

    #[test]
    fn an_unsealed_backup_gives_box_envs_policy_whatever_its_manifest_says() {
        let e = env(&[
            ("EGRESS", "allowlist"),
            ("EGRESS_ALLOW_HOSTS", "mine.example"),
        ]);
        let m = hostile_manifest();
        let got = for_load(&e, unsealed(&m), &CarryFlags::default()).unwrap();
        assert_eq!(
            got.policy,
            Containment::from_config(&e, &Overrides::default()).unwrap()
        );
        assert!(
            got.line
                .contains("box.env's: this backup was made before box sealed")
        );
        assert!(got.line.contains("--policy-from-backup"), "{}", got.line);
        assert!(!got.lan_required);
    }

    #[test]
    fn policy_from_backup_takes_the_words_but_never_a_binding_through_a_shorthand() {
        let m = hostile_manifest();
        let flags = CarryFlags {
            policy_from_backup: true,
            ..Default::default()
        };
        // box.env binds nothing: the shorthands' hosts vouch for nothing.
        let got = for_load(&BoxEnv::default(), unsealed(&m), &flags).unwrap();
        assert_eq!(got.policy.mode, Mode::Open);
        assert_eq!(got.policy.allow_private, ["10.0.0.0/8"]);
        assert!(got.policy.credentials.is_empty(), "{:?}", got.policy);
        let said = got.said.join("\n");
        for var in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY"] {
            assert!(said.contains(&format!("binds {var} to")), "{var}: {said}");
        }
        assert!(got.line.contains("--policy-from-backup"), "{}", got.line);
        // box.env binding one of them to that host vouches for that one only.
        let e = env(&[("CREDENTIALS", "openai")]);
        let got = for_load(&e, unsealed(&m), &flags).unwrap();
        let vars: Vec<&str> = got
            .policy
            .credentials
            .iter()
            .map(|b| b.var.as_str())
            .collect();
        assert_eq!(vars, ["OPENAI_API_KEY"]);
        // Nothing to take, or words that do not read: refused, never half of them.
        let err = for_load(&e, unsealed(&RuntimeManifest::new()), &flags).unwrap_err();
        assert!(format!("{err:#}").contains("records no policy"), "{err:#}");
        let mut bad = m.clone();
        bad.set("egress_allow_cidrs", "not-a-range");
        let err = for_load(&e, unsealed(&bad), &flags).unwrap_err();
        assert!(format!("{err:#}").contains("unreadable"), "{err:#}");
    }

    #[test]
    fn a_sealed_policy_is_taken_with_only_the_bindings_box_env_stands_behind() {
        let mut sealed = Containment::from_config(
            &env(&[
                ("EGRESS", "allowlist"),
                ("EGRESS_ALLOW_HOSTS", "saved.example"),
                ("EGRESS_ALLOW_CIDRS", "203.0.113.0/24"),
                ("CREDENTIALS", "anthropic KEY2@api.other.test"),
            ]),
            &Overrides::default(),
        )
        .unwrap();
        sealed.lan_closed = true;
        // box.env says open and binds only ANTHROPIC_API_KEY, from a file.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k");
        let e = env(&[(
            "CREDENTIALS",
            &format!("ANTHROPIC_API_KEY=@{}@api.anthropic.com", file.display()),
        )]);
        let got = for_load(&e, Recorded::Sealed(Some(&sealed)), &CarryFlags::default()).unwrap();
        assert_eq!(got.policy.mode, Mode::Allowlist);
        assert_eq!(got.policy.hosts, ["saved.example"]);
        assert_eq!(got.policy.cidrs, ["203.0.113.0/24"]);
        assert_eq!(got.policy.credentials.len(), 1);
        assert_eq!(got.policy.credentials[0].source, Source::File(file));
        assert!(got.said.join(" ").contains("binds KEY2 to api.other.test"));
        assert!(got.lan_required, "the saved box had its LAN closed");
        assert_eq!(
            got.line,
            "network policy: the backup's (sealed by box when it was saved)"
        );
        // --no-credential drops a binding; --accept-open-lan lifts the LAN requirement.
        let flags = CarryFlags {
            no_credentials: vec!["ANTHROPIC_API_KEY".into()],
            accept_open_lan: true,
            ..Default::default()
        };
        let got = for_load(&e, Recorded::Sealed(Some(&sealed)), &flags).unwrap();
        assert!(got.policy.credentials.is_empty() && !got.lan_required);
        // A sealed "no policy": box.env's.
        let got = for_load(&e, Recorded::Sealed(None), &CarryFlags::default()).unwrap();
        assert_eq!(got.policy.mode, Mode::Open);
        assert!(got.line.contains("the saved box kept none"), "{}", got.line);
        // Flags go on top; --no-credential and --credential of one variable conflict.
        let flags = CarryFlags {
            overrides: Overrides {
                deny_hosts: vec!["saved.example".into()],
                allow_private: vec!["192.168.1.5/32".into()],
                ..Default::default()
            },
            flagged: true,
            ..Default::default()
        };
        let got = for_load(&e, Recorded::Sealed(Some(&sealed)), &flags).unwrap();
        assert!(got.policy.hosts.is_empty() && got.policy.allow_private == ["192.168.1.5/32"]);
        assert!(got.line.ends_with("with your flags on top"), "{}", got.line);
        let flags = CarryFlags {
            overrides: Overrides {
                credentials: vec!["anthropic".into()],
                ..Default::default()
            },
            no_credentials: vec!["ANTHROPIC_API_KEY".into()],
            ..Default::default()
        };
        assert!(for_load(&e, Recorded::Sealed(Some(&sealed)), &flags).is_err());
    }

    #[test]
    fn clone_takes_the_sources_policy_and_flags_change_it() {
        let mut src = Containment::from_config(
            &env(&[
                ("EGRESS", "allowlist"),
                ("EGRESS_ALLOW_HOSTS", "a.example b.example"),
                ("CREDENTIALS", "openai"),
            ]),
            &Overrides::default(),
        )
        .unwrap();
        src.lan_closed = true;
        let name = BoxName::parse("alpha").unwrap();
        let flags = CarryFlags {
            overrides: Overrides {
                allow_hosts: vec!["c.example".into()],
                deny_hosts: vec!["a.example".into()],
                ..Default::default()
            },
            flagged: true,
            ..Default::default()
        };
        let got = for_clone(&BoxEnv::default(), &name, Some(&src), &flags).unwrap();
        assert_eq!(got.policy.hosts, ["b.example", "c.example"]);
        // The source's row is the host's own: its binding stays whatever box.env says.
        assert_eq!(got.policy.credentials.len(), 1);
        assert!(got.lan_required);
        assert_eq!(
            got.line,
            "network policy: the source's ('alpha'), with your flags on top"
        );
        for (deny, want) in [
            ("npmjs.org", "on the shipped agents list"),
            ("registry.npmjs.org", "on the shipped agents list"),
            ("z.example", "not on this box's own list"),
        ] {
            let flags = CarryFlags {
                overrides: Overrides {
                    deny_hosts: vec![deny.into()],
                    ..Default::default()
                },
                ..Default::default()
            };
            let err = for_clone(&BoxEnv::default(), &name, Some(&src), &flags).unwrap_err();
            assert!(format!("{err:#}").contains(want), "{deny}: {err:#}");
        }
    }
}
