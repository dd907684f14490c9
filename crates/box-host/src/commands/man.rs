//! `box man`: the man page in roff, generated from the clap definition.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::CommandFactory;

use crate::cli::Cli;

pub fn run() -> Result<ExitCode> {
    let mut out = Vec::new();
    render(&mut out)?;
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the man page")?;
    Ok(ExitCode::SUCCESS)
}

/// Renders `box(1)` followed by one section per subcommand.
pub fn render(out: &mut Vec<u8>) -> Result<()> {
    let cmd = Cli::command();
    clap_mangen::Man::new(cmd.clone())
        .render(out)
        .context("cannot render the man page")?;
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() {
            continue;
        }
        let name = format!("box-{}", sub.get_name());
        let sub = sub.clone().name(name);
        clap_mangen::Man::new(sub)
            .render(out)
            .context("cannot render the man page")?;
    }
    Ok(())
}
