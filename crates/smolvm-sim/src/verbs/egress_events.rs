//! `machine egress-events [--name N] [--limit N] [--json]` (smolvm 1.8.1+, PR #937): the
//! denials recorded in the machine's `egress-denials.log`, oldest first, the newest `limit`
//! of them. Empty for a machine without a policy or without denials; a machine that does
//! not exist has none either (smolvm reads the log by name and does not look the machine up).

use crate::egress::audit;
use crate::output::VerbResult;
use crate::registry;

pub fn run(name: &str, limit: usize, json: bool) -> VerbResult {
    let events = audit::read(&registry::data_dir(name).join(audit::LOG), limit);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&events).unwrap_or_default()
        );
        return Ok(0);
    }
    if events.is_empty() {
        println!("No egress denials recorded for '{name}'.");
        return Ok(0);
    }
    println!("{:<30} {:<9} DESTINATION", "TIMESTAMP", "OP");
    for e in &events {
        println!("{:<30} {:<9} {}", e.timestamp, e.operation, e.dest);
    }
    Ok(0)
}
