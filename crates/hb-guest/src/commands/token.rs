//! `hb token` (hidden): prints Executor's current bearer token to stdout, for `box open`
//! to build the web UI URL. It never logs it; stdout is the only place it goes.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::context::Context;
use crate::paths::Paths;
use crate::workload_state::WorkloadState;

pub fn run(ctx: &Context) -> Result<ExitCode> {
    let paths = Paths::new(&ctx.data);
    let preferred = WorkloadState::read_live(&paths).and_then(|s| s.token_source());
    let Some((token, _)) = crate::token::current(&paths, preferred)? else {
        bail!("Executor's token is not available yet; start Executor (`hb up`) and retry");
    };
    println!("{}", token.expose());
    Ok(ExitCode::SUCCESS)
}
