//! `box ls`: the registry joined with smolvm's `machine ls --json`. No lock: it must work
//! while another box is being created or deleted, and it only reads.

use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;

use super::Context;
use crate::gateway;
use crate::lifecycle::boxes;
use crate::remote::RemoteHost;
use crate::smolvm::{Machine, Smolvm};
use crate::state::Registry;
use crate::ui;

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    /// `local`, or the `ssh://…` host the box lives on.
    host: String,
    /// smolvm's state, `missing` when smolvm has no such machine, `unknown` when smolvm
    /// could not be asked.
    state: String,
    managed: bool,
    /// The run that created it never finished (see `BoxRecord::incomplete`).
    incomplete: bool,
    web_port: Option<u16>,
    url: Option<String>,
    /// The running `box open` gateway's URL (sign in with `box open`).
    gateway: Option<String>,
}

pub fn run(ctx: &Context, args: &crate::cli::LsArgs) -> Result<ExitCode> {
    let listing = Registry::new(&ctx.state).list()?;
    for bad in &listing.corrupt {
        ui::warn(format!(
            "skipping unreadable registry record {}: {}",
            bad.path.display(),
            bad.problem
        ));
    }
    // Every host a box lives on (this machine always: `--all` shows its other machines),
    // asked once each; a host that cannot be reached leaves its boxes `unknown`.
    let hosts = boxes::hosts(&listing.records, ctx.host.as_ref(), &mut |e| {
        ui::warn(format!("{e:#}"))
    });
    let mut all_answered = true;
    let machines: Vec<(Option<RemoteHost>, Option<Vec<Machine>>)> = hosts
        .into_iter()
        .map(|host| {
            let listed = match Smolvm::for_host(host.as_ref(), &ctx.config.env).list() {
                Ok(m) => Some(m),
                Err(e) => {
                    all_answered = false;
                    ui::warn(format!(
                        "cannot read machine states on {}: {e}",
                        shown(&host)
                    ));
                    None
                }
            };
            (host, listed)
        })
        .collect();
    let listed_on = |host: &Option<RemoteHost>| {
        machines
            .iter()
            .find(|(h, _)| h == host)
            .and_then(|(_, m)| m.as_ref())
    };
    let mut rows: Vec<Row> = listing
        .records
        .iter()
        .map(|r| {
            let host = r.remote_host().ok().flatten();
            let state = match listed_on(&host) {
                None => "unknown".to_string(),
                Some(list) => list
                    .iter()
                    .find(|m| m.name == r.machine)
                    .map_or_else(|| "missing".to_string(), |m| m.state.to_string()),
            };
            Row {
                name: r.name.to_string(),
                host: shown(&host),
                state,
                managed: true,
                incomplete: r.incomplete,
                web_port: r.web_port,
                // A remote box's port is on the remote's loopback: `box open` reaches it.
                url: r
                    .web_port
                    .filter(|_| host.is_none())
                    .map(|p| format!("http://127.0.0.1:{p}")),
                gateway: gateway::running(&ctx.state, r.name.as_str()).map(|g| g.url()),
            }
        })
        .collect();
    if args.all {
        for (host, list) in &machines {
            let Some(list) = list else { continue };
            for m in list {
                if !boxes::is_managed(&listing.records, host, &m.name) {
                    rows.push(Row {
                        name: m.name.clone(),
                        host: shown(host),
                        state: m.state.to_string(),
                        managed: false,
                        incomplete: false,
                        web_port: None,
                        url: None,
                        gateway: None,
                    });
                }
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if rows.is_empty() {
        println!("No hermes-box-lite boxes yet. Create one: box new <name>");
    } else {
        print!("{}", table(&rows));
    }
    Ok(if all_answered {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn shown(host: &Option<RemoteHost>) -> String {
    host.as_ref()
        .map_or_else(|| "local".to_string(), ToString::to_string)
}

/// The table; a HOST column only once some box lives elsewhere than this machine.
fn table(rows: &[Row]) -> String {
    let remote = rows.iter().any(|r| r.host != "local");
    let host_col = |h: &str| {
        if remote {
            format!("{h:<28} ")
        } else {
            String::new()
        }
    };
    let mut out = format!(
        "{:<24} {}{:<12} {}\n",
        "BOX",
        host_col("HOST"),
        "STATE",
        "EXECUTOR WEB"
    );
    for r in rows {
        let name = if !r.managed {
            format!("{} (unmanaged)", r.name)
        } else if r.incomplete {
            format!("{} (incomplete)", r.name)
        } else {
            r.name.clone()
        };
        let web = match (&r.url, r.web_port) {
            (Some(url), _) => url.clone(),
            (None, Some(_)) => format!("box open {}", r.name),
            (None, None) => "—".to_string(),
        };
        let gateway = r
            .gateway
            .as_ref()
            .map(|g| format!("  (box open gateway: {g})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{name:<24} {}{:<12} {web}{gateway}\n",
            host_col(&r.host),
            r.state
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_marks_unmanaged_machines_and_missing_ports() {
        let rows = vec![
            Row {
                name: "alpha".into(),
                host: "local".into(),
                state: "running".into(),
                managed: true,
                incomplete: false,
                web_port: Some(4790),
                url: Some("http://127.0.0.1:4790".into()),
                gateway: Some("http://127.0.0.1:39999".into()),
            },
            Row {
                name: "other".into(),
                host: "local".into(),
                state: "stopped".into(),
                managed: false,
                incomplete: false,
                web_port: None,
                url: None,
                gateway: None,
            },
            Row {
                name: "half".into(),
                host: "local".into(),
                state: "stopped".into(),
                managed: true,
                incomplete: true,
                web_port: None,
                url: None,
                gateway: None,
            },
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["BOX", "STATE", "EXECUTOR", "WEB"]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "alpha",
                "running",
                "http://127.0.0.1:4790",
                "(box",
                "open",
                "gateway:",
                "http://127.0.0.1:39999)"
            ]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["other", "(unmanaged)", "stopped", "—"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["half", "(incomplete)", "stopped", "—"]
        );
    }

    #[test]
    fn a_host_column_appears_once_a_box_lives_elsewhere() {
        let row = |name: &str, host: &str, port: Option<u16>| Row {
            name: name.into(),
            host: host.into(),
            state: "running".into(),
            managed: true,
            incomplete: false,
            web_port: port,
            url: port
                .filter(|_| host == "local")
                .map(|p| format!("http://127.0.0.1:{p}")),
            gateway: None,
        };
        let t = table(&[
            row("alpha", "local", Some(4790)),
            row("big", "ssh://agent@ws:2222", Some(4791)),
        ]);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["BOX", "HOST", "STATE", "EXECUTOR", "WEB"]);
        assert_eq!(
            lines[1],
            ["alpha", "local", "running", "http://127.0.0.1:4790"]
        );
        // The remote's port is on the remote's loopback: the table says how to reach it.
        assert_eq!(
            lines[2],
            [
                "big",
                "ssh://agent@ws:2222",
                "running",
                "box",
                "open",
                "big"
            ]
        );
    }
}
