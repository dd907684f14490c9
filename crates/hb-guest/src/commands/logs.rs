//! `hb logs`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::LogsArgs) -> Result<ExitCode> {
    super::not_done("logs", 4)
}
