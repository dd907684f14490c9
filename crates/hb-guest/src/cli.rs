//! The `hb` command line.

use std::path::PathBuf;

use box_proto::archive::part_hash::PartHashAlgo;
use clap::{Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Examples:
  hb status                 Executor, pause, wiring, disk and memory at a glance
  hb doctor                 every check with a one-line fix; exit 1 on any failure
  hb down                   pause Executor durably (survives a restart)
  hb up                     resume it
  hb logs executor -f       follow Executor's log
  hb service enable hermes-gateway   keep Hermes's messaging gateway running

Environment:
  HB_DATA     durable data root (default /data); tests point it elsewhere
  HB_CONFIG   configuration (default /etc/hermes-box.env)
  HB_AGENT_USER  account that owns the home and runs Executor (default agent)
  HB_WEB_PORT    guest port the host publishes for Executor's web UI (hb workload)";

/// Guest helper of hermes-box-lite: supervises Executor, wires the agents to it, checks health.
#[derive(Debug, Parser)]
#[command(
    name = "hb",
    version = crate::version::LONG,
    about = "hermes-box-lite guest helper: supervises Executor, wires Claude Code, Codex and Hermes to it, checks health",
    after_long_help = AFTER_HELP,
    propagate_version = true
)]
pub struct Cli {
    /// Durable data root
    #[arg(
        long,
        global = true,
        env = "HB_DATA",
        default_value = "/data",
        value_name = "DIR"
    )]
    pub data: PathBuf,

    /// Configuration file (box.env form)
    #[arg(
        long,
        global = true,
        env = "HB_CONFIG",
        default_value = "/etc/hermes-box.env",
        value_name = "FILE"
    )]
    pub config: PathBuf,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Executor state, pause, wiring, disk and memory (the default verb)
    #[command(after_long_help = "Examples:\n  hb status\n  hb status --json")]
    Status(JsonArg),

    /// Check tools, layout, Executor, the MCP handshake and the wiring
    #[command(after_long_help = "Examples:\n  hb doctor\n  hb doctor --json")]
    Doctor(JsonArg),

    /// Print every tool's version
    #[command(after_long_help = "Example:\n  hb versions")]
    Versions,

    /// Pause Executor durably: it stays down across restarts until `hb up`
    #[command(visible_alias = "pause", after_long_help = "Example:\n  hb down")]
    Down,

    /// Resume Executor (clears a durable pause) and wait until it answers
    #[command(after_long_help = "Example:\n  hb up")]
    Up,

    /// Point Claude Code, Codex and Hermes at Executor's MCP endpoint with its token
    #[command(
        after_long_help = "Example:\n  hb wire-mcp\n\nThe token stays out of argv and, where the client allows, out of its config."
    )]
    WireMcp,

    /// Show a service's log (executor, workload, provision, hermes-gateway, hermes-cron)
    #[command(
        after_long_help = "Examples:\n  hb logs executor\n  hb logs executor -f -n 50\n  hb logs hermes-gateway"
    )]
    Logs(LogsArgs),

    /// Keep Hermes's gateway or cron scheduler running under the workload, or stop it
    #[command(after_long_help = SERVICE_HELP)]
    Service(ServiceArgs),

    /// Pause every writer and checkpoint SQLite, for a consistent backup
    #[command(hide = true)]
    Quiesce,

    /// Undo what `quiesce` did (and only that)
    #[command(hide = true)]
    Resume,

    /// Create the durable layout under the data root with the right owners and modes
    #[command(hide = true)]
    Init(InitArgs),

    /// Write the runtime manifest (tool versions) atomically, mode 0600
    #[command(hide = true)]
    WriteManifest(WriteManifestArgs),

    /// Archive the data root into tar+zstd parts with an index of their sizes and hashes
    #[command(hide = true)]
    Export(ExportArgs),

    /// Restore the data root from parts, staged and swapped with rollback
    #[command(hide = true)]
    Import(ImportArgs),

    /// Make the snapshot the last chain-mode export recorded current, naming its backup
    #[command(hide = true)]
    CommitSnapshot(CommitSnapshotArgs),

    /// The box's long-running process: reaps children, supervises Executor, bridges the web port
    #[command(hide = true)]
    Workload,

    /// Print Executor's bearer token to stdout (for `box open`; never logged)
    #[command(hide = true)]
    Token,
}

/// What made the box, as the host knows it: `box save` and `box load` pass both, so every
/// backup names the `box` and smolvm that wrote it (hb names itself). Left out (provisioning
/// runs it alone), the values already in the manifest stay.
#[derive(Debug, Args, Default)]
pub struct WriteManifestArgs {
    /// The host's `box --version`
    #[arg(long, value_name = "VERSION")]
    pub box_version: Option<String>,
    /// The version of smolvm that runs this box
    #[arg(long, value_name = "VERSION")]
    pub smolvm_version: Option<String>,
    /// The box's network policy as `box` keeps it, one of the manifest's policy keys
    /// (egress, egress_allow_hosts, egress_allow_cidrs, egress_allow_private, credentials)
    /// per flag; repeatable
    #[arg(long, value_name = "KEY=VALUE")]
    pub policy: Vec<String>,
}

const SERVICE_HELP: &str = "\
Examples:
  hb service list
  hb service enable hermes-gateway
  hb service disable hermes-cron

Services:
  hermes-gateway  `hermes gateway run`: Hermes's messaging gateway (Telegram, Discord,
                  Slack…; set them up with `hermes gateway setup`). It runs cron jobs too.
  hermes-cron     `hermes cron tick` once a minute: cron jobs without a gateway.

An enabled service runs as the agent with its login environment, from boot on (after
provisioning), and is started again when it exits (after 1 s, then up to 30 s apart). Its
output goes to /data/logs/<service>.log (`hb logs <service>`; `box logs <box> <service>`
on the host). `hb down` stops it with Executor and `hb up` brings it back; a save
(`box save`) leaves it running.

The enabled set is kept in /data/home/agent/.config/hermes-box/hermes-services, so it
travels with `box save`/`load`/`clone`. box.env's HERMES_SERVICES (and `box new
--hermes-gateway`) only seed it when a box is made; from then on this verb changes it.
Never enable the gateway in two boxes that share one messaging account (a clone): two
gateways polling one bot conflict.";

#[derive(Debug, Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    pub action: ServiceAction,
}

#[derive(Debug, Subcommand)]
pub enum ServiceAction {
    /// Each Hermes service: enabled or not, running or why not
    List(JsonArg),
    /// Run the service from now on and at every boot (waits until it has started)
    Enable(ServiceName),
    /// Stop the service and no longer start it (waits until it has stopped)
    Disable(ServiceName),
}

#[derive(Debug, Args)]
pub struct ServiceName {
    /// hermes-gateway or hermes-cron (or gateway, cron)
    #[arg(value_parser = parse_service, value_name = "SERVICE")]
    pub service: box_proto::HermesService,
}

fn parse_service(name: &str) -> Result<box_proto::HermesService, String> {
    box_proto::HermesService::parse(name)
        .ok_or_else(|| format!("'{name}' is not hermes-gateway or hermes-cron"))
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Service: executor, workload, provision, hermes-gateway or hermes-cron
    pub service: String,
    /// Keep printing as the log grows
    #[arg(short, long)]
    pub follow: bool,
    /// Lines to show
    #[arg(short = 'n', long, default_value_t = 200)]
    pub lines: usize,
}

#[derive(Debug, Args, Default)]
pub struct InitArgs {
    /// Pause Executor durably as the layout is made (a box about to be restored into:
    /// its Executor must not start on the empty layout; `hb up` clears it)
    #[arg(long)]
    pub paused: bool,
    /// A new box: enable the Hermes services the configuration's HERMES_SERVICES names,
    /// unless the box has its own set already
    #[arg(long)]
    pub seed_services: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Tree to archive (default: the data root)
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Directory to write the parts and the index into (created 0700, must not exist)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Part size in bytes
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES")]
    pub part_size: u64,
    /// Announce each finished part on stdout (`part-ready <name> <bytes> <hash>`) and keep
    /// at most N announced parts in --out: a new part starts only once the reader removed
    /// one (box save copies them out while the export goes on)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub stream_parts: Option<u16>,
    /// What the index and the announcements hash each part with: sha256, or xxh3-128
    /// (`xxh3-128:<hex>`; six times faster, and enough for a check of the copy — box
    /// asks for it). The whole stream's hash, when listed, is always SHA-256
    #[arg(long, value_name = "ALGO", default_value = "sha256", value_parser = parse_part_hash)]
    pub part_hash: PartHashAlgo,
    /// Chain mode (GNU tar's listed-incremental format): a dumpdir for every directory,
    /// and a snapshot of every file recorded for the next save (committed by
    /// `hb commit-snapshot` once box has published the backup)
    #[arg(long)]
    pub listed_incremental: bool,
    /// With --listed-incremental: the SHA-256 of the newest backup; when this box's
    /// snapshot is of it, only what changed since goes into the archive
    #[arg(long, value_name = "SHA256", requires = "listed_incremental")]
    pub parent: Option<String>,
    /// With --parent: a chain this long is closed (the export is a full one)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 24,
        requires = "listed_incremental"
    )]
    pub chain_max: u32,
    /// Keep each regular file of this many bytes or more (a database of the box's
    /// software: its page image, read in one transaction) as a directory NAME.box-blocks
    /// of 1 MiB blocks and an index, so a link of a chain holds only the changed blocks
    /// (`cat NAME.box-blocks/b* > NAME` after a stock restore). 0: never
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub block_files_above: u64,
}

#[derive(Debug, Args)]
pub struct CommitSnapshotArgs {
    /// SHA-256 of the backup file the last export went into
    #[arg(long, value_name = "SHA256")]
    pub digest: String,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Tree to restore into (default: the data root)
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Directory holding the parts and their index; repeated for a chain of incremental
    /// backups, oldest (the full one) first: applied in order, swapped in once
    #[arg(long, value_name = "DIR", required = true)]
    pub from: Vec<PathBuf>,
    /// The tree is another live box's (box clone): drop its Executor token after the
    /// swap, so this box's Executor mints one of its own when it starts
    #[arg(long)]
    pub forget_executor_token: bool,
    /// The parts arrive while the import runs (box load copies them in): take each once
    /// its marker `part-NNNNNN.ready` is whole, say `part-taken <name>` on stdout and
    /// remove it; a dir ends with its index and `end.ready`
    #[arg(long)]
    pub follow: bool,
}

fn parse_part_hash(name: &str) -> Result<PartHashAlgo, String> {
    PartHashAlgo::parse(name).ok_or_else(|| format!("'{name}' is not sha256 or xxh3-128"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_every_verb() {
        let ok: &[&[&str]] = &[
            &["hb"],
            &["hb", "status", "--json"],
            &["hb", "doctor", "--json"],
            &["hb", "versions"],
            &["hb", "down"],
            &["hb", "pause"],
            &["hb", "up"],
            &["hb", "wire-mcp"],
            &["hb", "logs", "executor", "-f", "-n", "5"],
            &["hb", "quiesce"],
            &["hb", "resume"],
            &["hb", "init"],
            &["hb", "init", "--seed-services"],
            &["hb", "service", "list", "--json"],
            &["hb", "service", "enable", "hermes-gateway"],
            &["hb", "service", "disable", "cron"],
            &["hb", "write-manifest"],
            &[
                "hb",
                "write-manifest",
                "--box-version",
                "0.1.0 (abc)",
                "--smolvm-version",
                "1.9.2",
            ],
            &[
                "hb",
                "export",
                "--out",
                "/d/x",
                "--part-size",
                "1024",
                "--root",
                "/tmp/r",
            ],
            &["hb", "export", "--out", "/d/x", "--stream-parts", "2"],
            &[
                "hb",
                "export",
                "--out",
                "/d/x",
                "--stream-parts",
                "2",
                "--part-hash",
                "xxh3-128",
            ],
            &[
                "hb",
                "export",
                "--out",
                "/d/x",
                "--listed-incremental",
                "--parent",
                "ab",
                "--chain-max",
                "3",
            ],
            &["hb", "commit-snapshot", "--digest", "ab"],
            &["hb", "import", "--from", "/d/x"],
            &["hb", "import", "--from", "/d/x", "--forget-executor-token"],
            &["hb", "import", "--from", "/d/a", "--from", "/d/b"],
            &[
                "hb", "import", "--follow", "--from", "/d/a", "--from", "/d/b",
            ],
            &["hb", "workload"],
            &["hb", "token"],
            &["hb", "--data", "/tmp/d", "init"],
        ];
        for argv in ok {
            Cli::try_parse_from(*argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        }
        for argv in [
            &["hb", "logs"][..],
            &["hb", "export"],
            &["hb", "bogus"],
            &["hb", "export", "--out", "/d/x", "--stream-parts", "0"],
            &["hb", "export", "--out", "/d/x", "--part-hash", "md5"],
            &["hb", "export", "--out", "/d/x", "--parent", "ab"],
            &["hb", "service", "enable", "hermes-dashboard"],
            &["hb", "service", "enable"],
            &["hb", "service"],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn internal_verbs_are_hidden_from_help() {
        let help = Cli::command().render_help().to_string();
        let listed: Vec<&str> = help
            .lines()
            .filter_map(|l| l.strip_prefix("  "))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        for visible in [
            "status", "doctor", "versions", "down", "up", "wire-mcp", "logs", "service",
        ] {
            assert!(
                listed.contains(&visible),
                "{visible} missing from {listed:?}"
            );
        }
        for hidden in [
            "quiesce",
            "resume",
            "init",
            "write-manifest",
            "export",
            "import",
            "commit-snapshot",
            "workload",
            "token",
        ] {
            assert!(!listed.contains(&hidden), "{hidden} shown");
        }
    }
}
