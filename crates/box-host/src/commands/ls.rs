//! `box ls`: the registry joined with smolvm's `machine ls --json`. No lock: it must work
//! while another box is being created or deleted, and it only reads.

use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;

use super::Context;
use crate::gateway;
use crate::smolvm::{Machine, Smolvm};
use crate::state::Registry;
use crate::ui;

#[derive(Debug, Serialize)]
struct Row {
    name: String,
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
    let smolvm = Smolvm::from_env();
    let machines: Option<Vec<Machine>> = match smolvm.list() {
        Ok(m) => Some(m),
        Err(e) => {
            ui::warn(format!("cannot read machine states: {e}"));
            None
        }
    };
    let state_of = |machine: &str| match &machines {
        None => "unknown".to_string(),
        Some(list) => list
            .iter()
            .find(|m| m.name == machine)
            .map_or_else(|| "missing".to_string(), |m| m.state.to_string()),
    };
    let mut rows: Vec<Row> = listing
        .records
        .iter()
        .map(|r| Row {
            name: r.name.to_string(),
            state: state_of(&r.machine),
            managed: true,
            incomplete: r.incomplete,
            web_port: r.web_port,
            url: r.web_port.map(|p| format!("http://127.0.0.1:{p}")),
            gateway: gateway::running(&ctx.state, r.name.as_str()).map(|g| g.url()),
        })
        .collect();
    if args.all
        && let Some(list) = &machines
    {
        for m in list {
            if !listing.records.iter().any(|r| r.machine == m.name) {
                rows.push(Row {
                    name: m.name.clone(),
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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if rows.is_empty() {
        println!("No hermes-box-lite boxes yet. Create one: box new <name>");
    } else {
        print!("{}", table(&rows));
    }
    Ok(if machines.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn table(rows: &[Row]) -> String {
    let mut out = format!("{:<24} {:<12} {}\n", "BOX", "STATE", "EXECUTOR WEB");
    for r in rows {
        let name = if !r.managed {
            format!("{} (unmanaged)", r.name)
        } else if r.incomplete {
            format!("{} (incomplete)", r.name)
        } else {
            r.name.clone()
        };
        let web = r.url.clone().unwrap_or_else(|| "—".to_string());
        let gateway = r
            .gateway
            .as_ref()
            .map(|g| format!("  (box open gateway: {g})"))
            .unwrap_or_default();
        out.push_str(&format!("{name:<24} {:<12} {web}{gateway}\n", r.state));
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
                state: "running".into(),
                managed: true,
                incomplete: false,
                web_port: Some(4790),
                url: Some("http://127.0.0.1:4790".into()),
                gateway: Some("http://127.0.0.1:39999".into()),
            },
            Row {
                name: "other".into(),
                state: "stopped".into(),
                managed: false,
                incomplete: false,
                web_port: None,
                url: None,
                gateway: None,
            },
            Row {
                name: "half".into(),
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
}
