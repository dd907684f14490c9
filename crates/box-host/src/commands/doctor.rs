//! `box doctor`.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;

pub fn run(_ctx: &Context, _args: &crate::cli::DoctorArgs) -> Result<ExitCode> {
    super::not_done("doctor", 5)
}
