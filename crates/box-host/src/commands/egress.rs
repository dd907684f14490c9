//! `box egress <name>`: the policy in force for a box (what it may reach, whether its LAN is
//! closed, which API keys it may use) and what smolvm refused it lately (`machine
//! egress-events`). A name outside an allow list does not resolve inside the box: tools
//! report it as a DNS failure ("Could not resolve host"), which is why this verb exists.
//!
//! `--allow-host`/`--deny-host` would change the list. smolvm applies an allow list only when
//! it creates a machine: `machine update` has no egress flags (smol-machines/smolvm#1299,
//! #1304 open), and the live replace in smolvm-network 1.33.0 has no CLI verb anyone found.
//! So box refuses them and says how to get the change: save, edit box.env, load.

use std::process::ExitCode;

use anyhow::{Result, bail};

use super::Context;
use crate::lifecycle::boxes;
use crate::ui;

/// How many denials are shown.
const SHOWN: usize = 20;

pub fn run(ctx: &Context, args: &crate::cli::EgressArgs) -> Result<ExitCode> {
    let record = boxes::registered(ctx, &args.name)?;
    if !args.allow_host.is_empty() || !args.deny_host.is_empty() {
        bail!(
            "smolvm cannot change the allow list of an existing machine (machine update has no \
             egress flags; smol-machines/smolvm#1299): '{}' keeps its policy. To change it: \
             box save {0}, set EGRESS_ALLOW_HOSTS in box.env, then box load the backup into a \
             new box",
            record.name
        );
    }
    let smolvm = boxes::smolvm(ctx, &record)?;
    let version = smolvm.version()?;
    let denials = if version.has_egress_events() {
        Some(smolvm.egress_events(&record.machine)?)
    } else {
        None
    };
    if args.json {
        let value = serde_json::json!({
            "name": record.name.as_str(),
            "containment": record.containment,
            "denials": denials.as_ref().map(|d| d.iter().map(|e| serde_json::json!({
                "timestamp": e.timestamp, "operation": e.operation, "dest": e.dest,
            })).collect::<Vec<_>>()),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}:", record.name);
    match &record.containment {
        Some(c) => {
            for line in c.describe() {
                println!("  {line}");
            }
        }
        None => println!(
            "  made before box managed egress: the internet and the LAN are reachable, no API \
             keys are bound"
        ),
    }
    match denials {
        None => println!(
            "  denials: smolvm {version} does not record them (machine egress-events needs 1.8.1)"
        ),
        Some(d) if d.is_empty() => println!("  denials: none recorded"),
        Some(d) => {
            println!(
                "  denials (newest {} of {}; a denied name shows in the box as a DNS failure, \
                 \"Could not resolve host\"):",
                d.len().min(SHOWN),
                d.len()
            );
            for e in d.iter().skip(d.len().saturating_sub(SHOWN)) {
                println!("    {}  {:<8} {}", e.timestamp, e.operation, e.dest);
            }
        }
    }
    if record.containment.is_none() {
        ui::warn(format!(
            "'{}' has no recorded policy; a box made by this box version closes the LAN",
            record.name
        ));
    }
    Ok(ExitCode::SUCCESS)
}
