//! `hb status`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::JsonArg) -> Result<ExitCode> {
    super::not_done("status", 4)
}
