//! `box logs <name> <service> [-f] [-n N]`: a service's log from the host, through `hb logs`
//! in the guest (it knows where each log lives and follows it across rotations). Output
//! arrives as it is written; Ctrl-C ends a `-f`. hb's exit code is box's.

use std::process::ExitCode;

use anyhow::Result;

use super::Context;
use super::exec::{exit_code, running};
use crate::lifecycle::guest::HB_PATH;
use crate::smolvm::driver::Attach;

pub fn run(ctx: &Context, args: &crate::cli::LogsArgs) -> Result<ExitCode> {
    let (record, smolvm) = running(ctx, &args.name)?;
    let lines = args.lines.to_string();
    let mut argv = vec![HB_PATH, "logs", args.service.as_str(), "-n", &lines];
    if args.follow {
        argv.push("-f");
    }
    let code = smolvm.exec_attached(&record.machine, Attach::OutputOnly, &[], &argv)?;
    Ok(exit_code(code))
}
