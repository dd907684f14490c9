//! `hb workload`: see [`crate::workload`].

use std::process::ExitCode;

use anyhow::Result;

use crate::context::Context;

pub fn run(ctx: &Context) -> Result<ExitCode> {
    crate::workload::run(ctx)
}
