//! `box ls`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::LsArgs) -> Result<ExitCode> {
    super::not_done("ls", 5)
}
