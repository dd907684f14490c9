//! `hb export`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::ExportArgs) -> Result<ExitCode> {
    super::not_done("export", 7)
}
