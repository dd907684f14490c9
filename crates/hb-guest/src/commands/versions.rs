//! `hb versions`: every tool's version, as the runtime manifest records it.

use std::process::ExitCode;

use anyhow::Result;

use crate::context::Context;

pub fn run(_ctx: &Context) -> Result<ExitCode> {
    for (key, v) in crate::tools::versions() {
        println!(
            "{:<10}{}",
            format!("{key}:"),
            v.as_deref().unwrap_or("missing")
        );
    }
    println!("{:<10}{}", "hb:", crate::version::LONG);
    Ok(ExitCode::SUCCESS)
}
