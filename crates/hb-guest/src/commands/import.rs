//! `hb import`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::ImportArgs) -> Result<ExitCode> {
    super::not_done("import", 7)
}
