//! `box egress <name>`: the policy in force for a box (what it may reach, whether its LAN is
//! closed, which API keys it may use) and what smolvm refused it lately (`machine
//! egress-events`). A name outside an allow list does not resolve inside the box: tools
//! report it as a DNS failure ("Could not resolve host"), which is why this verb exists.
//!
//! `--propose`/`--learn` turn those refusals into allow-list entries (`propose.rs`);
//! `--allow-host`/`--deny-host` change the list of the box itself where smolvm can
//! (`change.rs`). Where it cannot (a smolvm older than the `machine update --allow-host` of
//! its newer code, or a box without an allow list), box checks the change against the box's
//! policy and gives the exact commands that make the box again with it and its /data: `box
//! clone` with the same flags (`box load` of a save keeps the name).

mod change;
mod propose;

use std::process::ExitCode;

use anyhow::{Result, bail};
use box_proto::BoxName;

use super::Context;
use crate::lifecycle::boxes;
use crate::policy::{Containment, Overrides};
use crate::smolvm::driver::EgressDenial;
use crate::state::{BoxRecord, Registry};
use crate::ui;

/// How many denials are shown.
const SHOWN: usize = 20;

pub fn run(ctx: &Context, args: &crate::cli::EgressArgs) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    if !args.allow_host.is_empty() || !args.deny_host.is_empty() {
        return change::run(ctx, &record, args);
    }
    if args.restart {
        bail!("--restart goes with --allow-host or --deny-host");
    }
    if args.propose || args.learn {
        return propose::run(ctx, &record, args);
    }
    if args.since.is_some() {
        bail!("--since goes with --propose or --learn");
    }
    let smolvm = boxes::smolvm(ctx, &record)?;
    let report = Report::read(&smolvm, &record)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}:", record.name);
    for line in report.policy_lines() {
        println!("  {line}");
    }
    for line in report.denial_lines(SHOWN) {
        println!("  {line}");
    }
    if record.containment.is_none() {
        ui::warn(format!(
            "'{}' has no recorded policy; a box made by this box version closes the LAN",
            record.name
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A box's policy and smolvm's record of what it refused (`box egress`, `box doctor`).
pub struct Report {
    name: BoxName,
    containment: Option<Containment>,
    /// Oldest first; `None`: this smolvm keeps no record.
    denials: Option<Vec<EgressDenial>>,
    version: crate::smolvm::SmolvmVersion,
}

impl Report {
    pub fn read(smolvm: &crate::smolvm::Smolvm, record: &BoxRecord) -> Result<Self> {
        let version = smolvm.version()?;
        let denials = if version.has_egress_events() {
            let mut events = smolvm.egress_events(&record.machine)?;
            // What box's own check refused when the box was made is not the box's doing.
            events.retain(|e| !crate::lifecycle::containment::is_own_probe(e));
            Some(events)
        } else {
            None
        };
        Ok(Self {
            name: record.name.clone(),
            containment: record.containment.clone(),
            denials,
            version,
        })
    }

    /// The policy and the newest `SHOWN` denials.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name.as_str(),
            "containment": self.containment,
            "denials": self.denials.as_ref().map(|d| {
                d.iter().skip(d.len().saturating_sub(SHOWN)).map(|e| serde_json::json!({
                    "timestamp": e.timestamp, "operation": e.operation, "dest": e.dest,
                })).collect::<Vec<_>>()
            }),
            "denials_total": self.denials.as_ref().map(Vec::len),
        })
    }

    pub fn policy_lines(&self) -> Vec<String> {
        match &self.containment {
            Some(c) => c.describe(),
            None => vec![
                "made before box managed egress: the internet and the LAN are reachable, no API \
                 keys are bound"
                    .to_string(),
            ],
        }
    }

    /// What smolvm refused, the newest `shown` last.
    pub fn denial_lines(&self, shown: usize) -> Vec<String> {
        match &self.denials {
            None => vec![format!(
                "denials: smolvm {} does not record them (machine egress-events needs 1.8.1)",
                self.version
            )],
            Some(d) if d.is_empty() => vec!["denials: none recorded".to_string()],
            Some(d) => {
                let mut out = vec![format!(
                    "denials (newest {} of {}; a denied name shows in the box as a DNS failure, \
                     \"Could not resolve host\"):",
                    d.len().min(shown),
                    d.len()
                )];
                // Every field is what the box's software asked for, as smolvm recorded it:
                // shown escaped, never obeyed by the terminal.
                let quoted = crate::ui::terminal_text::quoted;
                out.extend(d.iter().skip(d.len().saturating_sub(shown)).map(|e| {
                    format!(
                        "  {}  {:<8} {}",
                        quoted(&e.timestamp),
                        quoted(&e.operation),
                        quoted(&e.dest)
                    )
                }));
                out
            }
        }
    }
}

/// Why a changed list cannot be applied to `record`'s machine (`why`), and the commands
/// that make the box again with it. The change is checked first (an agents name, a name not
/// on the list): a command that would fail is never suggested.
fn refusal(
    ctx: &Context,
    record: &BoxRecord,
    allow: &[String],
    deny: &[String],
    why: &str,
) -> Result<String> {
    let current = record.containment.clone().map_or_else(
        || Containment::from_config(&ctx.config.env, &Overrides::default()),
        Ok,
    )?;
    let beside = free_name(ctx, &record.name)?;
    change_commands(current, &record.name, &beside, allow, deny, why)
}

/// [`refusal`]'s text for a box `name` whose policy is `current`, `beside` a free name.
fn change_commands(
    mut current: Containment,
    name: &BoxName,
    beside: &str,
    allow: &[String],
    deny: &[String],
    why: &str,
) -> Result<String> {
    // An open box reaches every name already: a list means making it an allowlist box.
    let open = current.mode == crate::policy::Mode::Open;
    current.apply(&Overrides {
        egress: open.then(|| "allowlist".to_string()),
        allow_hosts: allow.to_vec(),
        deny_hosts: deny.to_vec(),
        ..Overrides::default()
    })?;
    let mut words: Vec<String> = Vec::new();
    if open {
        words.push("--egress allowlist".into());
    }
    words.extend(allow.iter().map(|h| format!("--allow-host {h}")));
    words.extend(deny.iter().map(|h| format!("--deny-host {h}")));
    let flags = words.join(" ");
    let now = if open {
        format!(
            " ('{name}' is open now: it reaches every name but the LAN; these commands make it \
             an allowlist box, the agents' names plus yours)"
        )
    } else {
        String::new()
    };
    Ok(format!(
        "{why}, so '{name}' keeps its policy. Make the box again with the change and its \
         /data{now}:\n  \
         box clone {name} {beside} {flags}\n  \
         box rm {name}\n\
         or, to keep the name:\n  \
         box save {name}\n  \
         box rm {name}\n  \
         box load <the backup box save wrote> {name} {flags}"
    ))
}

/// `<name>-2`, `-3`, ...: the first that is a valid name no box has.
fn free_name(ctx: &Context, name: &BoxName) -> Result<String> {
    let registry = Registry::new(&ctx.state);
    for n in 2..100 {
        let stem: String = name.as_str().chars().take(60).collect();
        if let Ok(candidate) = BoxName::parse(&format!("{stem}-{n}"))
            && registry.get(&candidate)?.is_none()
        {
            return Ok(candidate.to_string());
        }
    }
    Ok("<new-name>".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Mode;

    fn policy(mode: Mode, hosts: &[&str]) -> Containment {
        Containment {
            mode,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            cidrs: Vec::new(),
            allow_private: Vec::new(),
            credentials: Vec::new(),
            lan_closed: true,
        }
    }

    #[test]
    fn a_change_is_answered_with_commands_that_would_work() {
        let name = BoxName::parse("alpha").unwrap();
        let allow = vec!["pypi.example.com".to_string()];
        let deny = vec!["old.example".to_string()];
        let why = "smolvm 1.17.0 cannot change the list of an existing machine";
        let text = change_commands(
            policy(Mode::Allowlist, &["old.example"]),
            &name,
            "alpha-2",
            &allow,
            &deny,
            why,
        )
        .unwrap();
        assert!(
            text.starts_with(&format!("{why}, so 'alpha' keeps its policy")),
            "{text}"
        );
        for want in [
            "box clone alpha alpha-2 --allow-host pypi.example.com --deny-host old.example\n",
            "box load <the backup box save wrote> alpha --allow-host pypi.example.com --deny-host old.example",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(!text.contains("is open now"), "{text}");
        // An open box becomes an allowlist box, and says so.
        let text =
            change_commands(policy(Mode::Open, &[]), &name, "alpha-2", &allow, &[], why).unwrap();
        assert!(
            text.contains(
                "box clone alpha alpha-2 --egress allowlist --allow-host pypi.example.com"
            ) && text.contains("'alpha' is open now"),
            "{text}"
        );
        // A change that would fail is refused, with no command.
        let err = change_commands(
            policy(Mode::Allowlist, &[]),
            &name,
            "alpha-2",
            &[],
            &deny,
            why,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("not on this box's own list"), "{err}");
    }
}
