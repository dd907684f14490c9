//! `box extract`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::ExtractArgs) -> Result<ExitCode> {
    super::not_done("extract", 7)
}
