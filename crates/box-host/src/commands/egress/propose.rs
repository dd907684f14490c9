//! `box egress NAME --propose [--since SPAN] [--json]` and `--learn`: the allow list smolvm's
//! denials propose for a box ([`crate::policy::proposal`]), with the command that applies it.
//! smolvm records denials only, so a proposal is what the box was refused: under an allow
//! list, the names outside it; under an open box, only what the closed LAN refused.

use std::process::ExitCode;

use anyhow::{Result, bail};
use chrono::{DateTime, SecondsFormat, Utc};

use super::Context;
use crate::lifecycle::{boxes, containment};
use crate::policy::Mode;
use crate::policy::proposal::{self, Denied, Proposal, Tally};
use crate::state::BoxRecord;

/// How many of smolvm's newest denials are read.
const READ_LIMIT: usize = 5000;
/// How many refused names each entry shows (all of them in `--json`).
const NAMES_SHOWN: usize = 5;

pub fn run(ctx: &Context, record: &BoxRecord, args: &crate::cli::EgressArgs) -> Result<ExitCode> {
    let since = match &args.since {
        Some(span) => Some(Utc::now() - proposal::parse_since(span).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let smolvm = boxes::smolvm(ctx, record)?;
    let version = smolvm.version()?;
    if !version.has_egress_events() {
        bail!(
            "smolvm {version} keeps no record of what it refused (machine egress-events needs \
             1.8.1): there is nothing to propose from; upgrade smolvm"
        );
    }
    let mut events = smolvm.egress_events_up_to(&record.machine, Some(READ_LIMIT))?;
    events.retain(|e| !containment::is_own_probe(e));
    let allowlist = record
        .containment
        .as_ref()
        .filter(|c| c.mode == Mode::Allowlist);
    let allowed = allowlist.map(|c| c.allow_hosts()).unwrap_or_default();
    let p = proposal::propose(
        events.iter().map(|e| Denied {
            timestamp: &e.timestamp,
            operation: &e.operation,
            dest: &e.dest,
        }),
        &allowed,
        since,
    );
    let command = allow_command(record.name.as_str(), &p);
    if args.json {
        let mut v = p.json();
        if let Some(o) = v.as_object_mut() {
            o.insert("name".into(), record.name.as_str().into());
            o.insert("since".into(), since.map(time).into());
            o.insert("denials_read".into(), events.len().into());
            o.insert("allowlist".into(), allowlist.is_some().into());
            o.insert("command".into(), command.clone().into());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    for line in lines(
        record.name.as_str(),
        &p,
        LinesOf {
            read: events.len(),
            since,
            allowlist: allowlist.is_some(),
            learn: args.learn,
            command: command.as_deref(),
        },
    ) {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// What the text says around a proposal.
struct LinesOf<'a> {
    read: usize,
    since: Option<DateTime<Utc>>,
    allowlist: bool,
    learn: bool,
    command: Option<&'a str>,
}

/// `box egress NAME --allow-host E …` for every proposed entry (`*.x` quoted for the
/// shell); `None` when nothing is proposed.
fn allow_command(name: &str, p: &Proposal) -> Option<String> {
    let entries = p.entries();
    if entries.is_empty() {
        return None;
    }
    let flags: Vec<String> = entries
        .iter()
        .map(|e| {
            if e.starts_with('*') {
                format!("--allow-host '{e}'")
            } else {
                format!("--allow-host {e}")
            }
        })
        .collect();
    Some(format!("box egress {name} {}", flags.join(" ")))
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn counted(t: &Tally) -> String {
    let times = match (t.first, t.last) {
        (Some(f), Some(l)) if f == l => format!(", at {}", time(f)),
        (Some(f), Some(l)) => format!(", first {}, last {}", time(f), time(l)),
        _ => String::new(),
    };
    format!(
        "{} denial{}{times}",
        t.denials,
        if t.denials == 1 { "" } else { "s" }
    )
}

fn lines(name: &str, p: &Proposal, of: LinesOf<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let window = of
        .since
        .map(|s| format!(" since {}", time(s)))
        .unwrap_or_default();
    out.push(format!(
        "{name}: what smolvm refused{window} (from its {} newest denials, {READ_LIMIT} at \
         most; a refused name shows in the box as a DNS failure)",
        of.read
    ));
    if of.learn {
        out.push(
            "  learned from denials: smolvm records what it refuses, never what it lets \
             through, so these are the names the box tried outside its list"
                .to_string(),
        );
    }
    if !of.allowlist {
        out.push(format!(
            "  '{name}' has no allow list: smolvm refuses it no name, so no name is proposed. \
             To learn one, make a box that has one: box clone {name} {name}-learn --egress learn"
        ));
    }
    if p.hosts.is_empty() {
        out.push("names: none refused".to_string());
    } else {
        out.push("names, as allow-list entries (most refused first):".to_string());
        let width = p.hosts.iter().map(|h| h.entry.len()).max().unwrap_or(0);
        for h in &p.hosts {
            let names = if h.names.len() == 1 && h.names[0] == h.entry {
                String::new()
            } else {
                let shown: Vec<&str> = h
                    .names
                    .iter()
                    .take(NAMES_SHOWN)
                    .map(String::as_str)
                    .collect();
                let more = h.names.len().saturating_sub(NAMES_SHOWN);
                format!(
                    "; {} name{}: {}{}",
                    h.names.len(),
                    if h.names.len() == 1 { "" } else { "s" },
                    shown.join(" "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            };
            out.push(format!(
                "  {:<width$}  {}{names}",
                h.entry,
                counted(&h.tally)
            ));
        }
    }
    if let Some(command) = of.command {
        out.push(format!(
            "to allow them (the box itself changes: stopped, or add --restart):\n  {command}"
        ));
    }
    if !p.addresses.is_empty() {
        out.push(
            "addresses connected to without an allowed name (an allow list takes names: a \
             public range goes in EGRESS_ALLOW_CIDRS or --allow-cidr, a private one in \
             EGRESS_ALLOW_PRIVATE or --allow-private, at box new, load or clone):"
                .to_string(),
        );
        for a in &p.addresses {
            let at = match a.port {
                Some(port) if a.ip.is_ipv6() => format!("[{}]:{port}", a.ip),
                Some(port) => format!("{}:{port}", a.ip),
                None => a.ip.to_string(),
            };
            out.push(format!(
                "  {at}  {}{}",
                counted(&a.tally),
                if a.private {
                    " (private: the closed LAN)"
                } else {
                    ""
                }
            ));
        }
    }
    let l = &p.left_out;
    let mut left = Vec::new();
    for (n, what) in [
        (l.already_allowed, "on the list now"),
        (l.outside_since, "before --since"),
        (
            l.special_use,
            "never on the internet (.local, reverse lookups)",
        ),
        (l.unreadable, "not a host name box can allow"),
        (l.beyond_limit, "past the names box keeps"),
    ] {
        if n > 0 {
            left.push(format!("{n} {what}"));
        }
    }
    if !left.is_empty() {
        out.push(format!("left out: {}", left.join("; ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposal_of(denials: &[(&str, &str)]) -> Proposal {
        proposal::propose(
            denials.iter().map(|(operation, dest)| Denied {
                timestamp: "2026-12-08T10:00:00Z",
                operation,
                dest,
            }),
            &[],
            None,
        )
    }

    #[test]
    fn the_command_allows_every_entry_with_wildcards_quoted_for_the_shell() {
        let p = proposal_of(&[
            ("resolve", "a.example.org"),
            ("resolve", "b.example.org"),
            ("resolve", "other.net"),
            ("connect", "203.0.113.7:443"),
        ]);
        let command = allow_command("alpha", &p);
        assert_eq!(
            command.as_deref(),
            Some("box egress alpha --allow-host '*.example.org' --allow-host other.net")
        );
        assert_eq!(allow_command("alpha", &proposal_of(&[])), None);
        let text = lines(
            "alpha",
            &p,
            LinesOf {
                read: 4,
                since: None,
                allowlist: true,
                learn: true,
                command: command.as_deref(),
            },
        )
        .join("\n");
        for want in [
            "learned from denials",
            "*.example.org  2 denials, at 2026-12-08T10:00:00Z; 2 names: a.example.org b.example.org",
            "other.net      1 denial, at 2026-12-08T10:00:00Z\n",
            "  box egress alpha --allow-host '*.example.org' --allow-host other.net",
            "203.0.113.7:443  1 denial",
            "EGRESS_ALLOW_CIDRS",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(!text.contains("has no allow list"), "{text}");
    }

    #[test]
    fn an_open_box_is_told_how_to_learn_a_list() {
        let p = proposal_of(&[("connect", "10.1.2.3:22")]);
        let text = lines(
            "alpha",
            &p,
            LinesOf {
                read: 1,
                since: None,
                allowlist: false,
                learn: false,
                command: None,
            },
        )
        .join("\n");
        for want in [
            "'alpha' has no allow list",
            "box clone alpha alpha-learn --egress learn",
            "names: none refused",
            "10.1.2.3:22  1 denial, at 2026-12-08T10:00:00Z (private: the closed LAN)",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(!text.contains("to allow them"), "{text}");
    }
}
