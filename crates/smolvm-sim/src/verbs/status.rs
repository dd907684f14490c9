//! `machine status`: text or JSON; the two modes word "not found" differently.

use crate::Ctx;
use crate::cli::StatusCmd;
use crate::output::{self, VerbResult, config};
use crate::registry::{self, State};

pub fn run(ctx: &Ctx, c: StatusCmd) -> VerbResult {
    let label = c.name.clone().unwrap_or_else(|| "default".to_string());
    let rec = registry::load(&label)?;
    ctx.fault_point("status", &label)?;
    if c.json {
        let Some(r) = rec else {
            return Err(config(
                "machine status",
                format!("machine '{label}' not found"),
            ));
        };
        println!("{}", super::ls::pretty(&super::ls::status_json(ctx, &r)));
        return Ok(0);
    }
    match rec {
        Some(r) => {
            let st = r.live_state(&ctx.faults);
            if st == State::Running {
                println!(
                    "Machine '{label}': running{}",
                    output::pid_suffix(r.live_pid())
                );
            } else {
                println!("Machine '{label}': {}", st.as_str());
            }
        }
        None if c.name.is_some() => return Err(output::not_found(&label)),
        None => println!("Machine '{label}': not running"),
    }
    Ok(0)
}
