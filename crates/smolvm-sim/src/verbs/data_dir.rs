//! `machine data-dir`: print the machine's host data directory.

use crate::cli::DataDirCmd;
use crate::context::Ctx;
use crate::output::VerbResult;

pub fn run(ctx: &Ctx, c: DataDirCmd) -> VerbResult {
    super::require(&c.name)?;
    ctx.fault_point("data-dir", &c.name)?;
    println!("{}", crate::registry::data_dir(&c.name).display());
    Ok(0)
}
