//! `box save`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::SaveArgs) -> Result<ExitCode> {
    super::not_done("save", 6)
}
