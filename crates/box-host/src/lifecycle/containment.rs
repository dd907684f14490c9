//! What smolvm makes of a box's policy ([`crate::policy::Containment`]): its create flags,
//! the values of the bound API keys handed to each `machine start`, and the check that a
//! binding took. The policy itself is plain data on the ground floor; this is the only room
//! that turns it into smolvm's own words:
//!
//! * the LAN is closed: `--block-private` (smolvm 1.33), with `EGRESS_ALLOW_PRIVATE` ranges
//!   re-opened by `--allow-private`; cloud metadata is closed by smolvm whatever we say;
//! * `EGRESS=allowlist`: `--allow-host` for the shipped agents' names, the user's names and
//!   every credential host, `--allow-cidr` for `EGRESS_ALLOW_CIDRS`. smolvm's DNS filter
//!   answers any other name NXDOMAIN, so a denied name looks like a DNS failure in the box;
//! * credentials: `--credential NAME=VAR@HOST` (smolvm 1.18+): the guest gets a placeholder in
//!   VAR; the value goes only into the environment of each `machine start` ([`values`]).

use std::os::unix::fs::MetadataExt as _;

use anyhow::{Result, bail};
use secrecy::SecretString;

use crate::policy::carried::Carried;
use crate::policy::{Containment, Credential, LanDemand, Mode, Source};
use crate::smolvm::SmolvmVersion;

/// smolvm's name for a binding: the variable, lowercased.
fn smolvm_binding(c: &Credential) -> String {
    c.var.to_ascii_lowercase()
}

/// smolvm's create flags for this policy on smolvm `v` (`from_base`: `create --from`),
/// and what the user must be told. Refuses what `v` cannot do and must not be dropped:
/// credentials, an allow list, and (as `lan` demands) the closed LAN.
pub fn create_args(
    c: &mut Containment,
    v: SmolvmVersion,
    from_base: bool,
    lan: LanDemand,
) -> Result<(Vec<String>, Vec<String>)> {
    let mut args = Vec::new();
    let mut notes = Vec::new();
    if v.has_block_private() {
        args.push("--block-private".to_string());
        for r in &c.allow_private {
            args.extend(["--allow-private".to_string(), r.clone()]);
        }
        c.lan_closed = true;
    } else if lan == LanDemand::Required {
        bail!(
            "smolvm {v} cannot close the LAN to a box (--block-private needs smolvm 1.33 or \
             newer) and EGRESS_REQUIRE=1: upgrade smolvm, or set EGRESS_REQUIRE=0 to go on \
             with the LAN reachable"
        );
    } else if lan == LanDemand::Recorded {
        bail!(
            "the box this one comes from had its LAN closed, and smolvm {v} cannot close it \
             (--block-private needs smolvm 1.33 or newer): upgrade smolvm, or pass \
             --accept-open-lan to make this box with the LAN reachable"
        );
    } else {
        notes.push(format!(
            "smolvm {v} cannot close the LAN (--block-private needs 1.33 or newer): this box \
             can reach your local network; EGRESS_REQUIRE=1 refuses instead"
        ));
        c.lan_closed = false;
    }
    if c.mode == Mode::Allowlist {
        if !v.enforces_allow_lists() {
            bail!(
                "EGRESS=allowlist needs smolvm 1.9 or newer (this is {v}: its allow lists are \
                 not enforced on every backend); upgrade smolvm or use EGRESS=open"
            );
        }
        for h in c.allow_hosts() {
            let (flag, entry) = smolvm_entry(&h, v);
            args.extend([flag.to_string(), entry]);
        }
        for r in &c.cidrs {
            args.extend(["--allow-cidr".to_string(), r.clone()]);
        }
    }
    if !c.credentials.is_empty() {
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
        for b in &c.credentials {
            args.extend([
                "--credential".to_string(),
                format!("{}={}@{}", smolvm_binding(b), b.var, b.hosts.join(",")),
            ]);
        }
    }
    Ok((args, notes))
}

/// How smolvm `v` takes (and stores) allow-list entry `h`: its flag and the entry. `*.x` is
/// a pattern where smolvm has them; older releases have only exact-or-subdomain entries,
/// so the parent itself is admitted too.
fn smolvm_entry(h: &str, v: SmolvmVersion) -> (&'static str, String) {
    match h.strip_prefix("*.") {
        Some(_) if v.has_host_patterns() => ("--allow-host-pattern", h.to_string()),
        Some(parent) => ("--allow-host", parent.to_string()),
        None => ("--allow-host", h.to_string()),
    }
}

/// The `machine update` flags that turn the allow list smolvm `v` has for a box made with
/// `old` into the one `new` asks for: `--remove-allow-host` for each entry that goes (as
/// smolvm stored it), `--allow-host`/`--allow-host-pattern` for each that comes. Empty:
/// nothing to change in smolvm (a name already admitted).
pub fn update_args(old: &Containment, new: &Containment, v: SmolvmVersion) -> Vec<String> {
    let (before, after) = (old.allow_hosts(), new.allow_hosts());
    let mut args = Vec::new();
    for gone in before.iter().filter(|h| !after.contains(h)) {
        args.extend(["--remove-allow-host".to_string(), smolvm_entry(gone, v).1]);
    }
    for came in after.iter().filter(|h| !before.contains(h)) {
        let (flag, entry) = smolvm_entry(came, v);
        args.extend([flag.to_string(), entry]);
    }
    args
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

/// Takes out of a carried policy (`box load`, `box clone`) every binding whose key box
/// cannot read now (its variable unset, its file unreadable): the new box is made without
/// it, and each is said. A box made anew (`box new`) refuses instead.
pub fn drop_unreadable(c: &mut Containment) -> Vec<String> {
    let mut said = Vec::new();
    c.credentials
        .retain(|b| match values(std::slice::from_ref(b)) {
            Ok(_) => true,
            Err(e) => {
                said.push(format!(
                    "{e:#}; the new box is made without the {} binding (box new/clone/load \
                 --credential {} adds it once the key is there)",
                    b.var,
                    b.spec()
                ));
                false
            }
        });
    said
}

/// A carried policy (`box load`, `box clone`) as the new box gets it: the bindings whose key
/// box cannot read now taken out ([`drop_unreadable`]), everything to say said.
pub fn settle(mut carried: Carried) -> Carried {
    let unreadable = drop_unreadable(&mut carried.policy);
    carried.said.extend(unreadable);
    for w in std::mem::take(&mut carried.said) {
        crate::ui::warn(w);
    }
    crate::ui::say(&carried.line);
    carried
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
    let asked: Vec<&str> = credentials.iter().map(|c| c.var.as_str()).collect();
    argv.extend_from_slice(&asked);
    let out = smolvm.exec(machine, &argv, crate::smolvm::ExecOpts::default())?;
    let unbound = box_proto::guest_output::unbound_credentials(&out.stdout, &asked);
    if !out.success() || !unbound.is_empty() {
        bail!(
            "smolvm did not bind {} in '{machine}' (no placeholder in the box): the installed \
             smolvm ignored --credential; upgrade smolvm (1.22.2 or newer for a box made from a \
             base)",
            if unbound.named.is_empty() {
                "the API keys".to_string()
            } else {
                unbound.named.join(", ")
            }
        );
    }
    Ok(())
}

/// Private addresses a box whose LAN is closed must not reach, one per closed range; the
/// probe tries the first that `allow_private` does not reopen and the allow list does not
/// name (addresses nothing should answer at: it is smolvm's refusal that is looked for).
const CLOSED_PROBES: &[&str] = &[
    "10.255.255.254",
    "172.31.255.254",
    "192.168.255.254",
    "100.127.255.254",
];

/// How long box waits for smolvm's record of the probes' refusal.
const PROBE_RECORD_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// After the first start: smolvm enforces the policy the box was made with. From inside
/// the guest, a connection to a private address (when the LAN must be closed) and a lookup
/// of a name outside the allow list (under `allowlist`); then smolvm's own record of what
/// it refused (`machine egress-events`, which nothing in the guest can write) must show
/// each. A box made from a base, restored or cloned is checked as a new one is: a smolvm
/// that dropped a flag (as 1.18.2 dropped `--credential` for packs) makes no box.
pub fn check_enforced(
    smolvm: &crate::smolvm::Smolvm,
    machine: &str,
    c: &Containment,
) -> Result<()> {
    let lan = c
        .lan_closed
        .then(|| {
            CLOSED_PROBES.iter().copied().find(|ip| {
                let covered = |ranges: &[String]| ranges.iter().any(|r| cidr_covers(r, ip));
                !covered(&c.allow_private) && !covered(&c.cidrs)
            })
        })
        .flatten();
    let nonce = {
        let mut b = [0u8; 8];
        rand::Rng::fill(&mut rand::rng(), &mut b[..]);
        hex::encode(b)
    };
    let port = 40_000 + u16::from_le_bytes([nonce.as_bytes()[0], nonce.as_bytes()[1]]) % 20_000;
    let name = format!("box-probe-{nonce}.invalid");
    let denied_name = (c.mode == Mode::Allowlist).then_some(name.as_str());
    if lan.is_none() && denied_name.is_none() {
        return Ok(());
    }
    // bash's /dev/tcp and getent: in every image box supports, before anything is
    // provisioned; both at once, each cut short (smolvm refuses at the first packet or
    // question: a silent drop must not cost the user seconds). Failures are the point;
    // what counts is smolvm's record.
    let mut script = String::new();
    if let Some(ip) = lan {
        script.push_str(&format!(
            "timeout 0.5 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' >/dev/null 2>&1 & "
        ));
    }
    if let Some(n) = denied_name {
        script.push_str(&format!("timeout 0.5 getent ahosts {n} >/dev/null 2>&1 & "));
    }
    script.push_str("wait; exit 0");
    let probe = smolvm.exec(
        machine,
        &["/bin/sh", "-c", &script],
        crate::smolvm::ExecOpts::default(),
    )?;
    if !probe.success() {
        bail!(
            "cannot check that smolvm enforces the network policy of '{machine}' (the probe \
             in the box failed: {})",
            crate::lifecycle::guest::status(&probe)
        );
    }
    let connect_dest = lan.map(|ip| format!("{ip}:{port}"));
    let started = std::time::Instant::now();
    loop {
        let events = smolvm.egress_events(machine)?;
        let refused_lan = connect_dest.as_ref().is_none_or(|dest| {
            events
                .iter()
                .any(|e| e.operation == "connect" && e.dest.ends_with(dest.as_str()))
        });
        let refused_name = denied_name.is_none_or(|n| {
            events
                .iter()
                .any(|e| e.operation == "resolve" && e.dest.trim_end_matches('.') == n)
        });
        if refused_lan && refused_name {
            return Ok(());
        }
        if started.elapsed() > PROBE_RECORD_WAIT {
            let mut missing = Vec::new();
            if !refused_lan {
                missing.push(format!(
                    "its LAN is not closed (a connection to {} was not refused)",
                    connect_dest.unwrap_or_default()
                ));
            }
            if !refused_name {
                missing.push(format!(
                    "its allow list is not applied (the name {name} was not refused)"
                ));
            }
            bail!(
                "smolvm does not enforce the network policy box made '{machine}' with: {}; \
                 box does not report a box it cannot contain (upgrade smolvm, or report this \
                 with `box doctor`)",
                missing.join("; ")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Whether smolvm's denial `d` was one of [`check_enforced`]'s own probes (not what the
/// box's software tried: `box egress` and `box doctor` leave them out).
pub fn is_own_probe(d: &crate::smolvm::driver::EgressDenial) -> bool {
    match d.operation.as_str() {
        "resolve" => d
            .dest
            .trim_end_matches('.')
            .strip_prefix("box-probe-")
            .and_then(|rest| rest.strip_suffix(".invalid"))
            .is_some_and(|nonce| nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit())),
        "connect" => {
            let dest = d.dest.strip_prefix("to ").unwrap_or(&d.dest);
            dest.rsplit_once(':')
                .is_some_and(|(ip, _)| CLOSED_PROBES.contains(&ip))
        }
        _ => false,
    }
}

/// Whether CIDR `range` (or a single address) holds `ip`.
fn cidr_covers(range: &str, ip: &str) -> bool {
    let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    let (net, bits) = range.split_once('/').unwrap_or((range, ""));
    let Ok(net) = net.parse::<std::net::IpAddr>() else {
        return false;
    };
    let (net, ip, width) = match (net, ip) {
        (std::net::IpAddr::V4(n), std::net::IpAddr::V4(i)) => {
            (u128::from(u32::from(n)), u128::from(u32::from(i)), 32)
        }
        (std::net::IpAddr::V6(n), std::net::IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    let bits: u32 = if bits.is_empty() {
        width
    } else {
        match bits.parse() {
            Ok(b) if b <= width => b,
            _ => return false,
        }
    };
    if bits == 0 {
        return true;
    }
    let shift = width - bits;
    (net >> shift) == (ip >> shift)
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
    use crate::policy::tests::env;
    use crate::policy::{Overrides, parse_credential};
    use box_proto::BoxEnv;
    use secrecy::ExposeSecret as _;

    #[test]
    fn the_default_closes_the_lan_and_nothing_else() {
        let mut c = Containment::from_config(&BoxEnv::default(), &Overrides::default()).unwrap();
        let (args, notes) = create_args(
            &mut c,
            SmolvmVersion::new(1, 33, 0),
            false,
            LanDemand::WhereSmolvmCan,
        )
        .unwrap();
        assert_eq!(args, vec!["--block-private"]);
        assert!(notes.is_empty() && c.lan_closed);
        // Too old: said, and refused only with EGRESS_REQUIRE=1.
        let mut c = Containment::from_config(&BoxEnv::default(), &Overrides::default()).unwrap();
        let (args, notes) = create_args(
            &mut c,
            SmolvmVersion::new(1, 17, 0),
            false,
            LanDemand::WhereSmolvmCan,
        )
        .unwrap();
        assert!(args.is_empty() && !c.lan_closed);
        assert!(notes[0].contains("needs 1.33"), "{notes:?}");
        let err = create_args(
            &mut c,
            SmolvmVersion::new(1, 17, 0),
            false,
            LanDemand::Required,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("EGRESS_REQUIRE=1"), "{err}");
        // A box recorded LAN-closed (a backup's, a clone's source) names the flag instead.
        let err = create_args(
            &mut c,
            SmolvmVersion::new(1, 32, 0),
            false,
            LanDemand::Recorded,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("needs smolvm 1.33") && err.contains("--accept-open-lan"),
            "{err}"
        );
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
        let (args, _) = create_args(
            &mut c,
            SmolvmVersion::new(1, 33, 0),
            false,
            LanDemand::WhereSmolvmCan,
        )
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
    fn a_changed_list_is_the_update_that_takes_the_old_one_there() {
        let e = env(&[
            ("EGRESS", "allowlist"),
            ("EGRESS_ALLOW_HOSTS", "old.example *.gone.example"),
            ("CREDENTIALS", "KEY2@api.other.test"),
        ]);
        let old = Containment::from_config(&e, &Overrides::default()).unwrap();
        let mut new = old.clone();
        new.apply(&Overrides {
            allow_hosts: vec!["*.example.org".into(), "other.net".into()],
            deny_hosts: vec!["old.example".into(), "*.gone.example".into()],
            ..Overrides::default()
        })
        .unwrap();
        let v = SmolvmVersion::new(1, 33, 0);
        assert_eq!(
            update_args(&old, &new, v).join(" "),
            "--remove-allow-host old.example --remove-allow-host *.gone.example \
             --allow-host-pattern *.example.org --allow-host other.net"
        );
        // A name the list admits already changes nothing in smolvm.
        let mut same = old.clone();
        same.apply(&Overrides {
            allow_hosts: vec!["api.anthropic.com".into(), "api.other.test".into()],
            ..Overrides::default()
        })
        .unwrap();
        assert!(update_args(&old, &same, v).is_empty());
    }

    #[test]
    fn the_probes_own_denials_are_told_from_the_boxs() {
        let d = |operation: &str, dest: &str| crate::smolvm::driver::EgressDenial {
            timestamp: String::new(),
            operation: operation.into(),
            dest: dest.into(),
        };
        assert!(is_own_probe(&d(
            "resolve",
            "box-probe-0123456789abcdef.invalid"
        )));
        assert!(is_own_probe(&d("connect", "to 10.255.255.254:41234")));
        assert!(!is_own_probe(&d("resolve", "box-probe-x.invalid")));
        assert!(!is_own_probe(&d("resolve", "evil.example")));
        assert!(!is_own_probe(&d("connect", "to 10.0.0.5:443")));
    }

    #[test]
    fn ranges_cover_their_addresses() {
        assert!(cidr_covers("10.0.0.0/8", "10.255.255.254"));
        assert!(!cidr_covers("10.0.0.0/9", "10.255.255.254"));
        assert!(cidr_covers("10.255.255.254", "10.255.255.254"));
        assert!(cidr_covers("0.0.0.0/0", "192.168.255.254"));
        assert!(!cidr_covers("192.168.1.0/24", "192.168.255.254"));
        assert!(!cidr_covers("fd00::/8", "10.255.255.254"));
        assert!(!cidr_covers("10.0.0.0/40", "10.255.255.254"));
    }

    #[test]
    fn versions_that_lack_a_feature_are_refused_with_the_version_needed() {
        let e = env(&[("CREDENTIALS", "anthropic")]);
        let mut c = Containment::from_config(&e, &Overrides::default()).unwrap();
        let err = create_args(
            &mut c,
            SmolvmVersion::new(1, 17, 0),
            false,
            LanDemand::WhereSmolvmCan,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("need smolvm 1.18 or newer"), "{err}");
        let err = create_args(
            &mut c,
            SmolvmVersion::new(1, 22, 1),
            true,
            LanDemand::WhereSmolvmCan,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("1.22.2"), "{err}");
        assert!(
            create_args(
                &mut c,
                SmolvmVersion::new(1, 22, 2),
                true,
                LanDemand::WhereSmolvmCan
            )
            .is_ok()
        );
        let mut a =
            Containment::from_config(&env(&[("EGRESS", "allowlist")]), &Overrides::default())
                .unwrap();
        let err = create_args(
            &mut a,
            SmolvmVersion::new(1, 0, 4),
            false,
            LanDemand::WhereSmolvmCan,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("EGRESS=allowlist needs smolvm 1.9"), "{err}");
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
