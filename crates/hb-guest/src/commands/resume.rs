//! `hb resume`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context) -> Result<ExitCode> {
    super::not_done("resume", 4)
}
