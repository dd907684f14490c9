//! `box`: isolated smolvm VMs for coding agents, with encrypted, verified backups.

use std::process::ExitCode;

use clap::Parser;

use box_host::cli::{Cli, Command};
use box_host::{commands, config, state, ui};

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "box_host=info,box_proto=info,warn",
        (false, 2) => "box_host=debug,box_proto=debug,info",
        _ => "trace",
    };
    let filter = std::env::var("BOX_LOG")
        .ok()
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| default.to_string());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Verbs that need neither configuration nor state.
    match &cli.command {
        Command::Completions(args) => return commands::completions::run(args),
        Command::Man => return commands::man::run(),
        Command::Passphrase(cmd) => return commands::passphrase::run(cmd),
        _ => {}
    }
    let config = config::load(cli.config.as_deref())?;
    if let (Some(file), false) = (&config.source, config.unused.is_empty()) {
        let keys: Vec<String> = config
            .unused
            .iter()
            .map(|u| format!("{} (line {})", u.key, u.line))
            .collect();
        box_host::ui::warn(format!(
            "{}: box does not read {}; ignored (the box.env box ships lists every key it reads)",
            file.display(),
            keys.join(", ")
        ));
    }
    let host = box_host::remote::selected(cli.host.as_deref(), &config.env.host)?;
    let ctx = commands::Context {
        config,
        host,
        state: state::StateDir::resolve()?,
        verbose: cli.verbose,
        quiet: cli.quiet,
    };
    match &cli.command {
        Command::New(a) => commands::new::run(&ctx, a),
        Command::Enter(a) => commands::enter::run(&ctx, a),
        Command::Exec(a) => commands::exec::run(&ctx, a),
        Command::Logs(a) => commands::logs::run(&ctx, a),
        Command::Ls(a) => commands::ls::run(&ctx, a),
        Command::Open(a) => commands::open::run(&ctx, a),
        Command::Doctor(a) => commands::doctor::run(&ctx, a),
        Command::Repair(a) => commands::repair::run(&ctx, a),
        Command::Stop(a) => commands::stop::run(&ctx, a),
        Command::Start(a) => commands::start::run(&ctx, a),
        Command::Egress(a) => commands::egress::run(&ctx, a),
        Command::Save(a) => commands::save::run(&ctx, a),
        Command::Load(a) => commands::load::run(&ctx, a),
        Command::Clone(a) => commands::clone::run(&ctx, a),
        Command::Backups(a) => commands::backups::run(&ctx, a),
        Command::Extract(a) => commands::extract::run(&ctx, a),
        Command::Drill(a) => commands::drill::run(&ctx, a),
        Command::Rm(a) => commands::rm::run(&ctx, a),
        Command::Base(a) => commands::base::run(&ctx, a),
        Command::Gateway(a) => box_host::gateway::spawn::run_process(&ctx, &a.name),
        Command::Completions(_) | Command::Man | Command::Passphrase(_) => {
            unreachable!("handled above")
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    ui::set_quiet(cli.quiet);
    ui::progress::configure(
        cli.progress,
        cli.quiet,
        &format!("box {}", cli.command.verb()),
    );
    init_logging(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            ui::error(format!("{e:#}"));
            // A failure that a HUP/INT/TERM caused (a loop noticed the signal and gave up)
            // exits as the signal would have: 128 + its number.
            match box_host::backup::cleanup::signalled() {
                Some(sig) => ExitCode::from(128u8.wrapping_add(sig as u8)),
                None => ExitCode::FAILURE,
            }
        }
    }
}
