//! The `box` command line: every verb, its arguments and the help that teaches it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::passphrase_precedence;

const AFTER_HELP: &str = "\
Examples:
  box new alpha                 create and provision a box
  box enter alpha               attach its tmux session as 'agent'
  box exec alpha -- make test   run one command in it (stdio and exit code passed through)
  box logs alpha executor -f    follow a service's log
  box save alpha                encrypted, verified backup into ~/.local/share/hermes-box/backups
  box load alpha-20261129-120000.tar.zst.gpg beta
  box clone alpha beta          branch alpha's /data into a new box
  box doctor                    check the host and every box
  box --host ssh://me@big new x a box on a remote Linux host (smolvm there, over ssh)

Environment:
  BOX_CONFIG           config file (box.env) when --config is not given
  BOX_HOME             state directory (registry, locks, logs)
  BACKUP_DIR           where backups go, absolute (default: ~/.local/share/hermes-box/backups)
  BOX_PASSPHRASE_FILE  backup passphrase from the first line of a file
  BOX_PASSPHRASE       backup passphrase (prefer the file, a command or the prompt)
  BOX_PASSPHRASE_COMMAND  backup passphrase: the first line a command prints (no shell)
  BOX_KEEP_ON_FAILURE  1: keep the VM of a failed load for inspection
  BOX_BROWSER          the program that opens Executor's web UI (box open)
  BOX_HB_BINARY        the guest helper to copy into new boxes (default: beside box)
  BOX_PROVISION_DIR    the provision/ directory to copy into new boxes
  SMOLVM               the smolvm binary to drive (default: smolvm)
  BOX_HOST             where new boxes go: ssh://[user@]host[:port] (default: here)
  BOX_REMOTE_SMOLVM    smolvm on the remote host (default: smolvm)
  BOX_SSH_COMMAND      the ssh command, as GIT_SSH_COMMAND (e.g. ssh -F ./ssh_config)
  BOX_SMOLVM_TIMEOUT   cap, in seconds, on every smolvm call's deadline
  BOX_LOG              log filter, e.g. box_host=debug
  BOX_NO_PROGRESS      set: no progress display (as --progress=none) unless --progress says";

/// Isolated smolvm VMs for coding agents, with encrypted, verified backups.
#[derive(Debug, Parser)]
#[command(
    name = "box",
    version = crate::version::LONG,
    about = "Isolated smolvm VMs for coding agents (Claude Code, Codex, Hermes, Executor), with encrypted, verified backups",
    after_long_help = AFTER_HELP,
    propagate_version = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// More detail on stderr (-v info, -vv debug, -vvv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors and results; no progress
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Progress of long work (save, load, clone, extract, base build) on stderr: auto is a
    /// bar on a terminal, else a plain line every 10 s; json is one object a line
    #[arg(
        long,
        global = true,
        value_name = "FORM",
        value_enum,
        conflicts_with = "quiet"
    )]
    pub progress: Option<crate::ui::progress::Choice>,

    /// Config file in box.env form (default: $BOX_CONFIG, then the user config dir); read as
    /// a shell would source it ($VAR expanded, nothing run), unused keys named and ignored
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Where new boxes go: ssh://[user@]host[:port], or `local` (default: $BOX_HOST, else
    /// this machine). Existing boxes remember their host; other verbs need no --host
    // clap's help text, not rustdoc's: its brackets and angle brackets are literal.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, global = true, value_name = "HOST")]
    pub host: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create and provision a new box
    #[command(
        after_long_help = "Examples:\n  box new alpha\n  box new bot --hermes-gateway\n\n\
        Creates the smolvm machine, installs the agents and Executor, wires MCP and runs doctor.\n\
        On failure or Ctrl-C, only what this run created is removed; the transcript is kept.\n\
        With a base for this configuration (box base build) it starts from the base and only\n\
        does what is per box; --fresh provisions from scratch.\n\n\
        --hermes-gateway (or HERMES_SERVICES=gateway,cron in box.env) has the box keep Hermes's\n\
        messaging gateway (and/or its cron ticker) running: started at boot, restarted when it\n\
        exits, logged (box logs <box> hermes-gateway). That only seeds the box's own set, kept in\n\
        its /data: change it inside with hb service enable|disable hermes-gateway|hermes-cron."
    )]
    New(NewArgs),

    /// Attach the box's tmux session as 'agent' (starts the box if stopped)
    #[command(
        visible_alias = "shell",
        after_long_help = "Example:\n  box enter alpha"
    )]
    Enter(NameArg),

    /// Run a command in a running box as 'agent' (or root), its stdio and exit code as box's
    #[command(
        after_long_help = "Examples:\n  box exec alpha -- git -C workspace/proj status\n  \
        box exec alpha -- sh -c 'cd workspace && make test'\n  \
        tar c proj | box exec alpha -- tar x -C workspace\n  \
        box exec alpha --root -- apt-get install -y ripgrep\n\n\
        The command runs in the account's login environment, as box enter has it (PATH, the\n\
        box's proxy and CA settings; agent starts in ~/workspace); its words are passed as they\n\
        are, never re-read by a shell. stdin, stdout and stderr are box's own, and box exits\n\
        with the command's exit code (smolvm's own failures also exit 1, with its message on\n\
        stderr). A terminal (a pty) only when stdin and stdout both are one, so pipes get raw\n\
        bytes. The box must be running (box start NAME)."
    )]
    Exec(ExecArgs),

    /// Show a service's log (executor, workload, provision, hermes-gateway, hermes-cron); -f follows it
    #[command(
        after_long_help = "Examples:\n  box logs alpha executor\n  box logs alpha executor -f -n 50\n  box logs alpha provision -n 1000\n  box logs alpha hermes-gateway -f\n\n\
        The logs live in the box under /data/logs (hb logs reads them there). -f keeps printing\n\
        as the log grows, across rotations, until Ctrl-C. The box must be running."
    )]
    Logs(LogsArgs),

    /// List boxes with their state and Executor web port
    #[command(
        after_long_help = "Examples:\n  box ls\n  box ls --all      include smolvm machines box does not manage\n  box ls --json"
    )]
    Ls(LsArgs),

    /// Open the box's Executor web UI in a browser, signed in through box's loopback gateway
    #[command(
        after_long_help = "Examples:\n  box open alpha\n  box open alpha --print-url    headless host: print the sign-in URL instead\n  box open --sign-out alpha     sign every browser out, keep the gateway\n  box open --stop alpha\n\n\
        box starts (or reuses) a gateway for the box on 127.0.0.1 that adds Executor's token to\n\
        every request; the token never reaches the browser, a URL or the terminal. It serves\n\
        the UI at the box's own host name, http://box-<name>.localhost:<port> (not at\n\
        127.0.0.1), so the UI's cookies are apart from every other local web app's and box's.\n\
        Browsers resolve *.localhost to this machine themselves; other tools may not, and\n\
        need not: only a browser opens it. The opener is handed a private sign-in page (a\n\
        file only you can read) that leads the browser to a one-time sign-in URL, which works\n\
        once, within a minute, for a session cookie.\n\
        A session ends after OPEN_SESSION_IDLE_TIMEOUT seconds without a request (default 12 h)\n\
        or OPEN_SESSION_MAX_AGE seconds after sign-in (default 7 days), whichever comes first,\n\
        and on --sign-out or --stop; then run box open again.\n\
        The gateway stops with the box (box stop, box rm), after OPEN_IDLE_TIMEOUT seconds\n\
        without use (box.env, default 3600), or on box open --stop.\n\
        The opener is $BOX_BROWSER, else `open` (macOS) or `xdg-open`/`gio open` (Linux)."
    )]
    Open(OpenArgs),

    /// Check the host, the registry and each box (guest health and MCP handshake)
    #[command(
        after_long_help = "Examples:\n  box doctor\n  box doctor alpha --json\n  box doctor --fix   drop stale rows, remove machines a killed run left unrecorded, restart a stopped Executor"
    )]
    Doctor(DoctorArgs),

    /// Re-run provisioning, refresh hb and the MCP wiring; never touches /data contents
    #[command(
        visible_alias = "provision",
        after_long_help = "Example:\n  box repair alpha"
    )]
    Repair(NameArg),

    /// Stop a box (services first, gracefully)
    #[command(after_long_help = "Example:\n  box stop alpha")]
    Stop(NameArg),

    /// Start a stopped box and wait until it is healthy
    #[command(after_long_help = "Example:\n  box start alpha")]
    Start(NameArg),

    /// Show where a box may connect, its API key bindings, and what smolvm refused it;
    /// propose and change its allow list
    #[command(
        after_long_help = "Examples:\n  box egress alpha\n  box egress alpha --json\n  \
        box egress alpha --propose --since 1h\n  \
        box egress alpha --allow-host pypi.example.com --restart\n\n\
        A name outside the box's allow list does not resolve inside the box: curl says\n\
        \"Could not resolve host\", npm ENOTFOUND. The denials listed here are smolvm's record\n\
        (machine egress-events). Set the policy at box new (--egress, --allow-host,\n\
        --credential) or in box.env (EGRESS, EGRESS_ALLOW_HOSTS, CREDENTIALS); box load and\n\
        box clone keep it, with the same flags on top.\n\
        --propose groups the names smolvm refused as allow-list entries (*.example.com for\n\
        several subdomains of one domain, never broader), with counts and the command that\n\
        allows them; --learn does so for a box made with box new --egress learn.\n\
        --allow-host/--deny-host change the list of the box itself (/data and the name stay)\n\
        where smolvm can (machine update on a stopped machine, smolvm 1.33 or newer): stop the\n\
        box first, or add --restart. Box's record is changed with smolvm's, so box save and\n\
        box clone carry the new list. An older smolvm gets the commands that make the box\n\
        again with the change and its /data."
    )]
    Egress(EgressArgs),

    /// Save /data of a box into an encrypted, verified backup (never overwrites)
    #[command(after_long_help = concat!(
        "Examples:\n  box save alpha\n  box save alpha --full\n  box save alpha --check   then check the chain it extended\n  box save alpha ~/safe/alpha.tar.zst.gpg\n\n\
        Default output: <backup dir>/<name>-<YYYYmmdd-HHMMSS>.tar.zst.gpg; the backup dir is\n\
        BACKUP_DIR, by default ~/.local/share/hermes-box/backups (macOS: ~/Library/Application\n\
        Support/hermes-box/backups), the same from any directory. A box's chain goes on where\n\
        its newest backup is (its record remembers), even after BACKUP_DIR changed.\n\
        After a first save, a save writes only what changed since the newest backup beside it\n\
        (an incremental backup, one link of a chain; BACKUP_CHAIN_MAX links, default 24, or\n\
        BACKUP_CHAIN_MAX_AGE_DAYS, default 7, then a full one). box load and box extract of any link restore its whole chain; --full\n\
        starts a new chain, in the backup dir; an explicit output file is always a full backup.\n\
        A file of BACKUP_BLOCK_FILES_ABOVE or more (default 64M; 0: never), a Hermes state.db or\n\
        a long log, is saved as NAME.box-blocks/ of 1 MiB blocks, so a link holds only the\n\
        blocks that changed; box load and box extract put it back together, and after a stock\n\
        restore `cat NAME.box-blocks/b* > NAME` does (README, \"Restoring without box\").\n\
        --check (for a timer: one command): after the save, the chain it extended is checked as\n\
        box backups check checks it without --read-data (each older file hashed against the\n\
        record its save kept, each link's parent there); the new file itself was just decrypted\n\
        and validated. When the chain is not sound the command fails with exit status 3 and says\n\
        why; the new backup stays.\n",
        "Passphrase", passphrase_precedence!()
    ))]
    Save(SaveArgs),

    /// Restore a backup into a fresh box (validated before anything is created)
    #[command(after_long_help = concat!(
        "Examples:\n  box load alpha-20261129-120000.tar.zst.gpg\n  box load ~/safe/alpha.tar.zst.gpg beta --keep-on-failure\n\n\
        A file name without a directory that is not in the current directory is looked for in\n\
        the backup dir (as box backups lists it). The default box name is 'restored'. Seed\n\
        backups (.tar.gz.gpg) load too.\n",
        "Passphrase", passphrase_precedence!()
    ))]
    Load(LoadArgs),

    /// Branch a box: a new box whose /data is the source's at this moment
    #[command(
        after_long_help = "Examples:\n  box clone alpha beta\n  box clone alpha experiment --keep-on-failure\n\n\
        Try something risky in a copy: the new box gets the source's /data as it is now (the\n\
        workspace, the agents' logins and history), paused the way box save pauses it, so\n\
        databases are consistent. The source is paused only while its data is copied.\n\
        The new box has its own VM, Executor token and web port, and starts from a base when\n\
        there is one (box base build). Nothing is encrypted and no passphrase is asked: the\n\
        data goes from box to box through the host, one part at a time, and no backup file is\n\
        written. To keep a copy, box save either box. The new box keeps the source's network\n\
        policy; --egress, --allow-host, --deny-host, --allow-private, --credential go on top."
    )]
    Clone(CloneArgs),

    /// Decrypt and validate a backup into a directory on the host
    #[command(after_long_help = concat!(
        "Examples:\n  box extract alpha-20261129-120000.tar.zst.gpg\n  box extract ~/safe/alpha.tar.zst.gpg /tmp/alpha-data\n\n\
        A file name without a directory is looked for in the backup dir too, as box load does.\n\
        Default directory: <file name>-extracted in the current directory. An existing\n\
        directory is never overwritten.\n",
        "Passphrase", passphrase_precedence!()
    ))]
    Extract(ExtractArgs),

    /// Restore drill: load a backup into a throwaway box, check it, compare, remove it
    #[command(after_long_help = DRILL_HELP)]
    Drill(DrillArgs),

    /// List backups by chain, or prune them without breaking a chain a kept one needs
    #[command(
        args_conflicts_with_subcommands = true,
        after_long_help = concat!("Examples:\n  box backups\n  box backups alpha --json\n  box backups prune --keep-last 5 --dry-run\n  box backups prune alpha --keep-last 3 --keep-daily 7\n  box backups check alpha --read-data\n\n\
        Backups in the backup dir (and wherever a box's saves went), per box, grouped by\n\
        chain (a full backup and the incremental ones built on it): kind, size, age. Which\n\
        backup builds on which is written inside them, so the passphrase is asked.\n\
        prune keeps the newest N backups, the newest of each of the last D days that have one,\n\
        and every backup those need to restore; it removes only whole files nothing kept needs.\n\
        check says whether each backup still restores (box backups check --help).\n",
        "Passphrase", passphrase_precedence!()
    ))]
    Backups(BackupsArgs),

    /// Delete a box and its VM (asks for the exact name unless --force)
    #[command(after_long_help = concat!(
        "Examples:\n  box rm alpha\n  box rm alpha --force\n\nShows the newest backup of the box first and checks its chain as box load\n\
        would (the passphrase is needed for that); a newest backup that would not restore (a\n\
        link of its chain missing) is refused unless --force (which never prompts).\n",
        "Passphrase", passphrase_precedence!()
    ))]
    Rm(RmArgs),

    /// Provisioned bases that make new and load fast (build, list, remove)
    #[command(
        subcommand,
        after_long_help = "Examples:\n  box base build              provision once, pack into the state dir\n  box base build --refresh    rebuild even if the base is fresh\n  box base ls --json\n  box base rm 3f2a9c01d4e5b6a7\n\n\
        A base is keyed by BASE_IMAGE, the guest architecture, provision/, hb, the tool versions\n\
        and the other box.env keys provisioning reads. It never holds a token, agent\n\
        configuration or proxy settings. Older than BASE_MAX_AGE_DAYS: stale."
    )]
    Base(BaseCmd),

    /// Keep the backup passphrase in the OS keychain (store, forget, status)
    #[command(subcommand, after_long_help = PASSPHRASE_HELP)]
    Passphrase(PassphraseCmd),

    /// Print a shell completion script
    #[command(
        after_long_help = "Examples:\n  box completions bash > ~/.local/share/bash-completion/completions/box\n  box completions zsh > ~/.zfunc/_box\n  box completions fish > ~/.config/fish/completions/box.fish"
    )]
    Completions(CompletionsArgs),

    /// Print the man page (roff)
    #[command(after_long_help = "Example:\n  box man | man -l -")]
    Man,

    /// Internal: run a box's UI gateway (started by box open)
    #[command(name = "__gateway", hide = true)]
    Gateway(NameArg),
}

impl Command {
    /// The verb as the user typed it, for progress lines (`box save: …`).
    pub fn verb(&self) -> &'static str {
        match self {
            Command::New(_) => "new",
            Command::Enter(_) => "enter",
            Command::Exec(_) => "exec",
            Command::Logs(_) => "logs",
            Command::Ls(_) => "ls",
            Command::Open(_) => "open",
            Command::Doctor(_) => "doctor",
            Command::Repair(_) => "repair",
            Command::Stop(_) => "stop",
            Command::Start(_) => "start",
            Command::Save(_) => "save",
            Command::Load(_) => "load",
            Command::Clone(_) => "clone",
            Command::Extract(_) => "extract",
            Command::Drill(_) => "drill",
            Command::Backups(BackupsArgs {
                cmd: Some(BackupsCmd::Check(_)),
                ..
            }) => "backups check",
            Command::Backups(BackupsArgs {
                cmd: Some(BackupsCmd::Copy(_)),
                ..
            }) => "backups copy",
            Command::Backups(_) => "backups",
            Command::Egress(_) => "egress",
            Command::Rm(_) => "rm",
            Command::Base(BaseCmd::Build(_)) => "base build",
            Command::Base(_) => "base",
            Command::Passphrase(PassphraseCmd::Store) => "passphrase store",
            Command::Passphrase(PassphraseCmd::Forget) => "passphrase forget",
            Command::Passphrase(PassphraseCmd::Status) => "passphrase status",
            Command::Completions(_) => "completions",
            Command::Man => "man",
            Command::Gateway(_) => "gateway",
        }
    }
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Box name: lowercase letters, digits and '-', 1-63 characters
    pub name: String,
    /// Provision from scratch even when a base exists
    #[arg(long)]
    pub fresh: bool,
    /// Keep Hermes's messaging gateway running in the box (adds gateway to box.env's
    /// HERMES_SERVICES for this box)
    #[arg(long)]
    pub hermes_gateway: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Where a new box may connect and which API keys it may use, on top of box.env (`new`) or
/// of the policy the box carries over (`load`: the backup's; `clone`: the source's).
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Egress: open (the internet, not the LAN), allowlist (the agents' names plus
    /// --allow-host/--allow-cidr), or learn (an allowlist box whose refusals box egress
    /// --learn proposes as entries); default EGRESS in box.env (load: the backup's policy;
    /// clone: the source's)
    #[arg(long, value_name = "open|allowlist|learn")]
    pub egress: Option<String>,
    /// A name (or *.domain) the box may reach under --egress allowlist (repeatable; adds to
    /// EGRESS_ALLOW_HOSTS, or to the list carried over)
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// An address range the box may reach under --egress allowlist (repeatable)
    #[arg(long, value_name = "CIDR")]
    pub allow_cidr: Vec<String>,
    /// A private range the box may reach although the LAN is closed (repeatable; adds to
    /// EGRESS_ALLOW_PRIVATE, or to the ranges carried over)
    #[arg(long, value_name = "CIDR")]
    pub allow_private: Vec<String>,
    /// An API key the box may use without holding it: NAME@HOST[,HOST] (the key from $NAME
    /// when box starts the box), NAME=@FILE@HOST (a file only you can read), or anthropic,
    /// openai, openrouter (repeatable; adds to CREDENTIALS or the bindings carried over,
    /// replacing one of the same NAME)
    // clap's help text, not rustdoc's: its brackets and angle brackets are literal.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "BINDING")]
    pub credential: Vec<String>,
    /// Take a name off the box's own list (box.env's EGRESS_ALLOW_HOSTS, or the list
    /// carried over; repeatable)
    #[arg(long, value_name = "HOST")]
    pub deny_host: Vec<String>,
}

impl PolicyArgs {
    pub fn overrides(&self) -> crate::policy::Overrides {
        crate::policy::Overrides {
            egress: self.egress.clone(),
            allow_hosts: self.allow_host.clone(),
            allow_cidrs: self.allow_cidr.clone(),
            allow_private: self.allow_private.clone(),
            deny_hosts: self.deny_host.clone(),
            credentials: self.credential.clone(),
        }
    }

    /// Whether the user gave any of the flags.
    pub fn any(&self) -> bool {
        self.egress.is_some()
            || !self.allow_host.is_empty()
            || !self.allow_cidr.is_empty()
            || !self.allow_private.is_empty()
            || !self.deny_host.is_empty()
            || !self.credential.is_empty()
    }
}

#[derive(Debug, Subcommand)]
pub enum BaseCmd {
    /// Build the base for the current configuration (shows progress)
    Build(BaseBuildArgs),
    /// List bases: key, age, size, tool versions
    Ls(BaseLsArgs),
    /// Remove a base by its key digest (or every base with --all)
    Rm(BaseRmArgs),
}

#[derive(Debug, Args)]
pub struct BaseBuildArgs {
    /// Rebuild even when a fresh base exists (tools set to `latest` move on)
    #[arg(long)]
    pub refresh: bool,
}

#[derive(Debug, Args)]
pub struct BaseLsArgs {
    /// JSON output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BaseRmArgs {
    /// The base's key digest, as `box base ls` shows it
    #[arg(required_unless_present = "all")]
    pub digest: Option<String>,
    /// Remove every base
    #[arg(long, conflicts_with = "digest")]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct NameArg {
    /// Box name: lowercase letters, digits and '-', 1-63 characters
    pub name: String,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Box name
    pub name: String,
    /// Run as root instead of 'agent'
    #[arg(long)]
    pub root: bool,
    /// The command and its arguments (after `--`, so its own options stay its own)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Box name
    pub name: String,
    /// Service: executor, workload, provision, hermes-gateway or hermes-cron
    pub service: String,
    /// Keep printing as the log grows (until Ctrl-C)
    #[arg(short, long)]
    pub follow: bool,
    /// Lines of the end of the log to show first
    #[arg(short = 'n', long, default_value_t = 200, value_name = "N")]
    pub lines: usize,
}

#[derive(Debug, Args)]
pub struct EgressArgs {
    /// Box name: lowercase letters, digits and '-', 1-63 characters
    pub name: String,
    /// JSON output
    #[arg(long)]
    pub json: bool,
    /// Add a name (or *.domain) to the box's allow list (repeatable; the box must be
    /// stopped, or --restart given)
    #[arg(long, value_name = "HOST", conflicts_with_all = ["propose", "learn"])]
    pub allow_host: Vec<String>,
    /// Take a name off the box's own allow list (repeatable; as --allow-host)
    #[arg(long, value_name = "HOST", conflicts_with_all = ["propose", "learn"])]
    pub deny_host: Vec<String>,
    /// With --allow-host/--deny-host on a running box: stop it, change the list, start it
    #[arg(long)]
    pub restart: bool,
    /// The names smolvm refused the box, grouped as allow-list entries, with counts, first
    /// and last seen, and the command that allows them
    #[arg(long, conflicts_with = "learn")]
    pub propose: bool,
    /// --propose for a box made with --egress learn, after you worked in it
    #[arg(long)]
    pub learn: bool,
    /// With --propose/--learn: only what was refused in this last span (30m, 1h, 2d)
    #[arg(long, value_name = "SPAN")]
    pub since: Option<String>,
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    /// Box name: lowercase letters, digits and '-', 1-63 characters
    pub name: String,
    /// Print the one-time sign-in URL instead of opening a browser. The URL is a
    /// credential for about a minute (until first used): paste it only into your own browser
    #[arg(long, conflicts_with_all = ["stop", "sign_out"])]
    pub print_url: bool,
    /// End every browser session of the box's gateway (a cookie that leaked, a shared
    /// browser): the gateway keeps running, the next box open signs in again
    #[arg(long, conflicts_with = "stop")]
    pub sign_out: bool,
    /// Stop the box's gateway (signs every browser out)
    #[arg(long)]
    pub stop: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Also list smolvm machines that box does not manage
    #[arg(long)]
    pub all: bool,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Check one box only
    pub name: Option<String>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
    /// Fix what is safe to fix, and say what was done
    #[arg(long)]
    pub fix: bool,
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// Box name
    pub name: String,
    /// Output file (default: <backup dir>/<name>-<timestamp>.tar.zst.gpg)
    // clap's help text, not rustdoc's: its brackets and angle brackets are literal.
    #[allow(rustdoc::invalid_html_tags)]
    pub out: Option<PathBuf>,
    /// A full backup that starts a new chain, even when the newest one could be built on
    #[arg(long)]
    pub full: bool,
    /// After the save, check the chain it extended as `box backups check` does without
    /// --read-data (the new file was just verified byte by byte); fail if it is not sound
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Backup file (.tar.zst.gpg, or a seed .tar.gz.gpg)
    pub file: PathBuf,
    /// Name of the new box
    #[arg(default_value = "restored")]
    pub name: String,
    /// Where the rest of an incremental backup's chain is (default: beside FILE)
    #[arg(long, value_name = "DIR")]
    pub chain_dir: Option<PathBuf>,
    /// For a backup made before box sealed its policy into backups: take the policy words
    /// of its runtime manifest (written inside the box, where its agent could change them;
    /// bindings still only to hosts your CREDENTIALS name) instead of box.env's
    #[arg(long)]
    pub policy_from_backup: bool,
    #[command(flatten)]
    pub making: MakeBoxArgs,
}

#[derive(Debug, Args)]
pub struct CloneArgs {
    /// The box to copy (it must be running)
    pub source: String,
    /// Name of the new box
    pub name: String,
    #[command(flatten)]
    pub making: MakeBoxArgs,
}

/// How `load` and `clone` make their new box.
#[derive(Debug, Args)]
pub struct MakeBoxArgs {
    /// Keep the new VM if the restore or clone fails, for inspection
    #[arg(long, env = "BOX_KEEP_ON_FAILURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub keep_on_failure: bool,
    /// Provision from scratch even when a base exists
    #[arg(long)]
    pub fresh: bool,
    /// Make the new box without this API key binding of the box it comes from
    /// (repeatable; the variable's name, e.g. OPENAI_API_KEY)
    #[arg(long, value_name = "NAME")]
    pub no_credential: Vec<String>,
    /// Make the new box even where the installed smolvm cannot close its LAN, although the
    /// box it comes from had its LAN closed (without: refused, naming the smolvm needed)
    #[arg(long)]
    pub accept_open_lan: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

impl MakeBoxArgs {
    /// The user's words on the policy the new box carries over.
    pub fn carry_flags(&self, policy_from_backup: bool) -> crate::policy::carried::CarryFlags {
        crate::policy::carried::CarryFlags {
            overrides: self.policy.overrides(),
            flagged: self.policy.any() || !self.no_credential.is_empty(),
            no_credentials: self.no_credential.clone(),
            policy_from_backup,
            accept_open_lan: self.accept_open_lan,
        }
    }
}

#[derive(Debug, Args)]
pub struct BackupsArgs {
    /// Only this box's backups
    pub name: Option<String>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub cmd: Option<BackupsCmd>,
}

#[derive(Debug, Subcommand)]
pub enum BackupsCmd {
    /// Remove old backups, never one a kept backup needs
    Prune(PruneArgs),
    /// Check that backups still restore: files there, links whole, bytes as saved
    #[command(after_long_help = CHECK_HELP)]
    Check(CheckArgs),
    /// Copy a box's newest backup with every file it needs (or all) to another directory
    #[command(after_long_help = COPY_HELP)]
    Copy(CopyArgs),
}

const COPY_HELP: &str = "Examples:\n  box backups copy alpha /media/usb/box-backups\n  \
    box backups copy /mnt/nas/backups            the one box that has backups\n  \
    box backups copy --all ~/Sync/box-backups    every backup of every box\n\n\
    An incremental backup restores only with every link before it, so a copy of the newest\n\
    file alone is no backup: this copies the newest backup's whole chain (with --all, every\n\
    backup file of the box, or of every box). A file already there with the same SHA-256 is\n\
    skipped; another file of the same name is never overwritten (it is named, and the copy\n\
    goes on with the rest, exit 1). Each copy is written beside its final name without one,\n\
    flushed, read back from the disk and compared before it gets its name, so a copy box\n\
    reports is a copy that reads back. box load DEST/FILE restores from there.\n\
    Passphrase (to find which files a backup stands on; --all needs none): the usual sources,\n\
    as for box load.";

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// `[BOX] DEST`: the box (optional when only one box has backups, or with --all) and the
    /// directory to copy to (made if missing)
    #[arg(value_name = "[BOX] DEST", num_args = 1..=2, required = true)]
    pub args: Vec<String>,
    /// Every backup file (of the box, or of every box), not only the newest chain
    #[arg(long)]
    pub all: bool,
}

const CHECK_HELP: &str = concat!(
    "Examples:\n  box backups check alpha\n  box backups check --all --json\n  \
    box backups check alpha --read-data      decrypt and validate every byte, as box load would\n\n\
    Without --read-data (fast: metadata and one hash per file): every backup's file is there,\n\
    each link's parent is there (found by digest, as a restore finds it), and each file's\n\
    SHA-256 and size are those its save recorded. box keeps that record for the chain a box's\n\
    last save extended; a file it has no record of (an older chain, a backup made elsewhere)\n\
    is said so, and its place in its chain is read from its sealed facts, which needs the\n\
    passphrase. With --read-data: every file decrypted and its OpenPGP integrity check (MDC)\n\
    verified, every chain validated link by link as box load validates it.\n\n\
    Each backup is reported sound, damaged (which file, and what: a cut or changed byte range,\n\
    a failed integrity check, the validator's rule) or incomplete (which link is missing, and\n\
    every backup it takes down). The backup directory is only read, never written.\n\
    Exit status: 0 everything checked is sound, 3 something is damaged or incomplete,\n\
    1 the check itself failed, 2 usage.\n",
    "Passphrase, only when needed",
    passphrase_precedence!()
);

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The box whose backups to check
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub name: Option<String>,
    /// Check the backups of every box
    #[arg(long)]
    pub all: bool,
    /// Decrypt every file and validate every chain as box load would (slow: reads all)
    #[arg(long)]
    pub read_data: bool,
    /// Machine-readable report on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Only this box's backups
    pub name: Option<String>,
    /// Keep the newest N backups (and what they need)
    #[arg(long, value_name = "N")]
    pub keep_last: usize,
    /// Also keep the newest backup of each of the last D days that have one
    #[arg(long, value_name = "D", default_value_t = 0)]
    pub keep_daily: usize,
    /// Say what would be removed; remove nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct ExtractArgs {
    /// Backup file
    pub file: PathBuf,
    /// Target directory (must not exist)
    pub dir: Option<PathBuf>,
    /// Where the rest of an incremental backup's chain is (default: beside FILE)
    #[arg(long, value_name = "DIR")]
    pub chain_dir: Option<PathBuf>,
}

const DRILL_HELP: &str = concat!(
    "Examples:\n  box drill alpha                     the newest backup of alpha\n  \
    box drill alpha alpha-20261129-120000.tar.zst.gpg\n  \
    box drill alpha --json              for a timer: exit 0 only when it passed\n  \
    box drill alpha --keep              keep the throwaway box to look inside\n\n\
    An integrity check is not a restore: this one restores. The backup (and every link of its\n\
    chain) is decrypted and validated as box load validates it, before anything is made; a\n\
    backup that does not restore fails here, naming the file, and no box is made. The chain is\n\
    then unpacked into a private dir under the state dir (it needs the data's size in host\n\
    disk; removed right after) and listed: names, kinds, modes, sizes, a SHA-256 of each file\n\
    and symlink target. Then a throwaway box drill-<name>-<stamp> is made and restored exactly\n\
    as box load makes one (the policy sealed in the backup, from a base when there is one),\n\
    hb doctor runs in it, and its /data is listed inside it and compared with the backup's.\n\
    When the source box runs, its /data is listed too: a source that changed since the save is\n\
    said, and not counted as damage. Not compared: what a backup leaves out, the logs,\n\
    hermes-box's config dir (box rewrites them in every box it restores), Executor's record\n\
    of its running server (server-control/, daemon-*.json) and the -wal/-shm files of a live\n\
    SQLite database (the database itself is compared).\n\n\
    The throwaway box is removed whatever happens, Ctrl-C included; --keep keeps it (as an\n\
    ordinary box) and says its name. Until it is removed it is registered, shown by box ls as\n\
    drill-<name>-<stamp> (incomplete); a drill killed outright (SIGKILL, power loss) leaves it\n\
    so, and box doctor --fix (or box rm drill-<name>-<stamp> --force) removes it. Names\n\
    starting with drill- are kept for these boxes: box new, load and clone refuse them.\n\
    For a timer (cron): BOX_PASSPHRASE_FILE or BOX_PASSPHRASE_COMMAND, so nothing prompts.\n\
    Exit status: 0 passed, 1 a difference, a failed hb doctor, or a backup that does\n\
    not restore, 2 usage, 128+n interrupted by signal n.\n",
    "Passphrase",
    passphrase_precedence!()
);

#[derive(Debug, Args)]
pub struct DrillArgs {
    /// The box whose backup to drill
    pub name: String,
    /// A backup of it (a path, or a file name as box backups lists it; default: its newest)
    pub backup: Option<PathBuf>,
    /// Keep the throwaway box afterwards, and say its name
    #[arg(long)]
    pub keep: bool,
    /// Machine-readable report on stdout
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Box name
    pub name: String,
    /// Delete without asking for the name
    #[arg(short, long)]
    pub force: bool,
}

const PASSPHRASE_HELP: &str = concat!(
    "Examples:\n  box passphrase store     keep it in the keychain (asked twice, or read from a variable)\n  \
    box passphrase status    which source box would use now; whether the keychain has it\n  \
    box passphrase forget    deletes the keychain's entry\n\n\
    The keychain is the macOS Keychain, or the Secret Service (GNOME Keyring, KWallet) of the\n\
    desktop session on Linux; the entry is service hermes-box, account backup-passphrase.\n\
    An SSH session or a headless server has none: box then says so in one line and asks on\n\
    the terminal. For cron, use BOX_PASSPHRASE_FILE or BOX_PASSPHRASE_COMMAND.\n",
    "Passphrase",
    passphrase_precedence!()
);

#[derive(Debug, Subcommand)]
pub enum PassphraseCmd {
    /// Store the backup passphrase in the OS keychain (asks twice)
    Store,
    /// Delete the keychain's entry
    Forget,
    /// Say which source box would read the passphrase from, and whether the keychain has it
    Status,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// Shell to generate completions for
    pub shell: clap_complete::Shell,
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
    fn parses_every_verb_with_its_real_arguments() {
        let ok: &[&[&str]] = &[
            &["box", "new", "alpha"],
            &["box", "enter", "alpha"],
            &["box", "shell", "alpha"],
            &["box", "ls"],
            &["box", "ls", "--all", "--json"],
            &["box", "open", "alpha"],
            &["box", "open", "alpha", "--print-url"],
            &["box", "open", "--stop", "alpha"],
            &["box", "doctor"],
            &["box", "doctor", "alpha", "--json", "--fix"],
            &["box", "repair", "alpha"],
            &["box", "stop", "alpha"],
            &["box", "start", "alpha"],
            &["box", "save", "alpha"],
            &["box", "save", "alpha", "/tmp/x.tar.zst.gpg"],
            &["box", "save", "alpha", "--full"],
            &["box", "load", "f.gpg"],
            &["box", "load", "f.gpg", "beta", "--keep-on-failure"],
            &["box", "clone", "alpha", "beta"],
            &[
                "box",
                "clone",
                "alpha",
                "beta",
                "--fresh",
                "--keep-on-failure",
            ],
            &["box", "backups"],
            &["box", "backups", "alpha", "--json"],
            &["box", "backups", "prune", "--keep-last", "3", "--dry-run"],
            &[
                "box",
                "backups",
                "prune",
                "alpha",
                "--keep-last",
                "1",
                "--keep-daily",
                "7",
            ],
            &["box", "extract", "f.gpg"],
            &["box", "extract", "f.gpg", "/tmp/d"],
            &["box", "drill", "alpha"],
            &[
                "box",
                "drill",
                "alpha",
                "alpha-20261129-120000.tar.zst.gpg",
                "--keep",
                "--json",
            ],
            &["box", "rm", "alpha"],
            &["box", "rm", "alpha", "--force"],
            &["box", "exec", "alpha", "--", "ls", "-la"],
            &["box", "exec", "alpha", "--root", "--", "id", "-u"],
            &["box", "exec", "alpha", "git", "--version"],
            &["box", "logs", "alpha", "executor"],
            &["box", "logs", "alpha", "executor", "-f", "-n", "5"],
            &["box", "completions", "zsh"],
            &["box", "man"],
            &["box", "-vv", "--config", "/x/box.env", "ls"],
            &["box", "ls", "-q"],
            &["box", "save", "alpha", "--progress", "json"],
            &["box", "--progress=plain", "load", "f.gpg"],
            &["box", "extract", "f.gpg", "--progress=none"],
        ];
        for argv in ok {
            Cli::try_parse_from(*argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        }
        let bad: &[&[&str]] = &[
            &["box", "new"],
            &["box", "clone", "alpha"],
            &["box", "ls", "--bogus"],
            &["box", "completions", "cmd"],
            &["box", "-v", "-q", "ls"],
            &["box", "open", "alpha", "--print-url", "--stop"],
            &["box", "save", "alpha", "--progress", "bogus"],
            &["box", "save", "alpha", "-q", "--progress", "json"],
            &["box", "exec", "alpha"],
            &["box", "exec", "alpha", "--"],
            &["box", "logs", "alpha"],
            &["box", "logs", "alpha", "executor", "-n", "many"],
        ];
        for argv in bad {
            assert!(Cli::try_parse_from(*argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn exec_keeps_the_commands_own_options() {
        let cli =
            Cli::try_parse_from(["box", "exec", "alpha", "--", "ls", "--root", "-q"]).unwrap();
        match cli.command {
            Command::Exec(args) => {
                assert!(!args.root);
                assert!(!cli.quiet);
                assert_eq!(args.command, ["ls", "--root", "-q"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn load_defaults_to_restored() {
        let cli = Cli::try_parse_from(["box", "load", "f.gpg"]).unwrap();
        match cli.command {
            Command::Load(args) => assert_eq!(args.name, "restored"),
            other => panic!("{other:?}"),
        }
    }
}
