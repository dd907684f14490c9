//! `box open`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::NameArg) -> Result<ExitCode> {
    super::not_done("open", 5)
}
