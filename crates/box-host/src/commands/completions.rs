//! `box completions <shell>`: completion scripts generated from the clap definition.

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};

pub fn run(args: &CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "box", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
