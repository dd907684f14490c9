//! `box rm`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::RmArgs) -> Result<ExitCode> {
    super::not_done("rm", 5)
}
