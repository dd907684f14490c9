//! `machine status`: text or JSON; the two modes word "not found" differently.

use crate::cli::StatusCmd;
use crate::context::Ctx;
use crate::output::{self, VerbResult, config};
use crate::registry;

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
            println!("{}", output::status_line(&label, st.as_str(), r.live_pid()));
        }
        None if c.name.is_some() => return Err(output::not_found(&label)),
        None => println!("{}", output::status_line(&label, "not running", None)),
    }
    Ok(0)
}
