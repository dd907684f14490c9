//! `smolvm-sim`: smolvm's command line in front of real namespaced Linux guests.
//! See README.md for the environment variables and what differs from real smolvm.

mod calllog;
mod cli;
mod context;
mod credentials;
mod egress;
mod faults;
mod home;
mod image;
mod machine;
mod output;
mod pack;
mod personality;
mod policy;
mod progress;
mod registry;
mod verbs;

use std::io::Write;

use clap::FromArgMatches;

use crate::cli::{Cli, MachineCmd, ShExtras, TopCmd};
use crate::context::Ctx;
use crate::faults::Faults;
use crate::output::VerbResult;
use crate::personality::Personality;

fn main() {
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let boot = argv
        .get(1)
        .is_some_and(|a| a == "_boot-vm" || a == "_exec-watch");
    if !boot {
        calllog::record(&argv);
    }
    let personality = match Personality::from_env() {
        Ok(p) => p,
        Err(e) => finish(Err(output::config("personality", e))),
    };
    let matches = cli::command(personality).get_matches_from(&argv);
    let ctx = Ctx {
        personality,
        faults: Faults::from_env(argv.get(1..).unwrap_or_default()),
        extras: ShExtras::from_matches(&matches, personality),
    };
    if let Some((name, limit, json)) = cli::egress_events(&matches) {
        finish(verbs::egress_events::run(&name, limit, json));
    }
    if let Some((pause, name)) = cli::pause_or_resume(&matches) {
        finish(verbs::pause::run(&ctx, &name, pause));
    }
    let parsed = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let res = match parsed.command {
        TopCmd::BootVm(a) => machine::supervisor::boot(&a.name, personality),
        TopCmd::ExecWatch(a) => machine::disconnect::run_watcher(a.pid, a.start_time),
        TopCmd::Machine(m) => dispatch(&ctx, m),
        TopCmd::Pack(cli::PackCmd::Create(c)) => verbs::pack::run(&ctx, c),
    };
    finish(res)
}

fn dispatch(ctx: &Ctx, m: MachineCmd) -> VerbResult {
    match m {
        MachineCmd::Create(c) => verbs::create::run(ctx, c),
        MachineCmd::Start(c) => verbs::start::run(ctx, c),
        MachineCmd::Stop(c) => verbs::stop::run(ctx, c),
        MachineCmd::Delete(c) => verbs::delete::run(ctx, c),
        MachineCmd::Ls(c) => verbs::ls::run(ctx, c),
        MachineCmd::Status(c) => verbs::status::run(ctx, c),
        MachineCmd::Exec(c) => verbs::exec::run(ctx, c),
        MachineCmd::Shell(c) => verbs::exec::shell(ctx, c),
        MachineCmd::Cp(c) => verbs::cp::run(ctx, c),
        MachineCmd::Update(c) => verbs::update::run(ctx, c),
        MachineCmd::DataDir(c) => verbs::data_dir::run(ctx, c),
    }
}

fn finish(res: VerbResult) -> ! {
    let code = match res {
        Ok(code) => code,
        Err(e) => {
            let _ = std::io::stdout().flush();
            eprintln!("Error: {e}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(code)
}
