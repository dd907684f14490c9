//! `box load`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::LoadArgs) -> Result<ExitCode> {
    super::not_done("load", 6)
}
