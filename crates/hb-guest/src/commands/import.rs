//! `hb import`: parts → checked → validated → staged → owners, modes, pause marker →
//! swapped into the data root with rollback.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use crate::archive::import::import;

pub fn run(ctx: &Context, args: &crate::cli::ImportArgs) -> Result<ExitCode> {
    let root = args.root.clone().unwrap_or_else(|| ctx.data.clone());
    let summary = import(&root, &args.from)?;
    println!(
        "Imported {} members ({} files) into {}",
        summary.members,
        summary.files,
        root.display()
    );
    Ok(ExitCode::SUCCESS)
}
