//! smolvm's command line, as clap derives it, so usage errors read exactly like clap's.
//!
//! The derive structs describe the v1.0.4 surface. Flags that only exist in the 1.9.2
//! personality are added at runtime by [`command`], and read back from the raw matches by
//! [`ShExtras`]: a 1.0.4 personality then rejects them with clap's own "unexpected argument".

use clap::{Arg, ArgAction, ArgMatches, Args, CommandFactory, Parser, Subcommand};

use crate::personality::Personality;

const ABOUT: &str = "smolvm-sim: a simulator of the smolvm CLI, for tests and demos.

Machines are real Linux guests built from namespaces (mount, PID, UTS, network), not microVMs.
The guest root filesystem is a pristine image (debian:12, debian:13, built from the Debian
archive and cached; ubuntu:24.04/26.04 boot debian:13 as a stand-in, said at create) read-only
under a per-machine overlay. SMOLVM_SIM_HOST_USERLAND=1 at create is the fast-test shortcut:
the root is then the HOST's userland under per-machine overlays. Writes inside a guest never
touch the host.";

const AFTER_HELP: &str = "Environment:
  SMOLVM_SIM_HOME     state root (default $XDG_DATA_HOME/smolvm-sim or ~/.local/share/smolvm-sim)
  SMOLVM_SIM_VERSION  personality: 1.33.0 (default), 1.17.0, 1.9.3, 1.9.2 or 1.0.4
  SMOLVM_SIM_IMAGES   image cache (default /var/cache/smolvm-sim/images)
  SMOLVM_SIM_IMAGE_MAP  stand-ins, FROM=TO[,...] (default ubuntu:24.04=debian:13,ubuntu:26.04=debian:13)
  SMOLVM_SIM_HOST_USERLAND  1 at create: guest root = host userland (fast-test shortcut)
  SMOLVM_SIM_FAIL     fault injection, comma list of VERB:MODE[@TEXT], e.g.
                        start:once, start:always, create:after, delete:always, stop:always,
                        exec:hang@hb quiesce, cp:truncate, state:unreachable@mybox
                      VERB is create|start|stop|delete|ls|status|exec|cp|update|data-dir|state.
                      MODE: once | N (first N calls fail) | always | after (act, then fail) |
                        hang (block until killed) | slow (sleep SMOLVM_SIM_SLOW_SECS, default 3) |
                        truncate (cp download writes half the file, exits 0) |
                        datadir (delete: the data dir cannot be removed) |
                        unreachable | failed (state: reported state of running | stopped machines).
                      @TEXT limits the fault to calls whose arguments contain TEXT
                        (for state: machines whose name contains TEXT).
  Every call is logged as one JSON line to $SMOLVM_SIM_HOME/calls.jsonl.";

#[derive(Parser, Debug)]
#[command(name = "smolvm", bin_name = "smolvm", version, about = ABOUT, after_long_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: TopCmd,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum TopCmd {
    /// Manage machines
    #[command(visible_alias = "vm", subcommand)]
    Machine(MachineCmd),
    /// Package a machine into a portable .smolmachine
    #[command(subcommand)]
    Pack(PackCmd),
    /// Internal: the machine supervisor (started by `machine start`)
    #[command(name = "_boot-vm", hide = true)]
    BootVm(BootVmArgs),
    /// Internal: kills an exec'd command when its `machine exec` client dies
    #[command(name = "_exec-watch", hide = true)]
    ExecWatch(ExecWatchArgs),
}

#[derive(Args, Debug)]
pub struct ExecWatchArgs {
    #[arg(long)]
    pub pid: i32,
    #[arg(long)]
    pub start_time: u64,
}

#[derive(Args, Debug)]
pub struct BootVmArgs {
    #[arg(long)]
    pub name: String,
}

#[derive(Subcommand, Debug)]
pub enum MachineCmd {
    /// Run a command in a running machine
    Exec(ExecCmd),
    /// Create a new machine (writes the record only; nothing boots)
    Create(CreateCmd),
    /// Start a machine and its workload
    Start(StartCmd),
    /// Stop a running machine
    Stop(StopCmd),
    /// Delete a machine
    #[command(visible_alias = "rm")]
    Delete(DeleteCmd),
    /// Show machine status
    Status(StatusCmd),
    /// List machines
    #[command(visible_alias = "list")]
    Ls(LsCmd),
    /// Update a stopped machine's configuration
    Update(UpdateCmd),
    /// Open a root shell in a running machine (exec -it -- /bin/sh)
    #[command(visible_alias = "sh")]
    Shell(ShellCmd),
    /// Copy a single file between the host and a running machine
    Cp(CpCmd),
    /// Print the machine's host data directory
    #[command(name = "data-dir")]
    DataDir(DataDirCmd),
}

#[derive(Args, Debug)]
pub struct ExecCmd {
    /// Command and arguments to run in the guest
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Machine name
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Working directory in the guest
    #[arg(short = 'w', long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Environment variable (repeatable)
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Secret from a host environment variable
    #[arg(long = "secret-env", value_name = "GUEST_VAR=HOST_VAR")]
    pub secret_env: Vec<String>,
    /// Secret from a host file
    #[arg(long = "secret-file", value_name = "GUEST_VAR=PATH")]
    pub secret_file: Vec<String>,
    /// Kill the command after this long (exit 124), e.g. 30s, 5m
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<std::time::Duration>,
    /// Keep stdin open
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Allocate a pseudo-TTY
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Stream output as it arrives
    #[arg(long)]
    pub stream: bool,
}

#[derive(Args, Debug)]
pub struct CreateCmd {
    /// Machine name (default: vm-<id>)
    // clap's help text, not rustdoc's: its brackets and angle brackets are literal.
    #[allow(rustdoc::invalid_html_tags)]
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// OCI image (recorded only: the simulator's root is the host userland)
    #[arg(short = 'I', long, value_name = "IMAGE", value_parser = parse_image)]
    pub image: Option<String>,
    /// Number of vCPUs
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub cpus: u8,
    /// Memory in MiB
    #[arg(long, default_value_t = 8192, value_name = "MiB")]
    pub mem: u32,
    /// Storage disk size in GiB
    #[arg(long, value_name = "GiB")]
    pub storage: Option<u64>,
    /// Overlay disk size in GiB
    #[arg(long, value_name = "GiB")]
    pub overlay: Option<u64>,
    /// Volume mount (recorded only)
    #[arg(short = 'v', long = "volume", value_name = "HOST:GUEST[:ro]")]
    pub volume: Vec<String>,
    /// Publish a guest port on host 127.0.0.1
    #[arg(short = 'p', long = "port", value_parser = parse_port, value_name = "HOST:GUEST")]
    pub port: Vec<(u16, u16)>,
    /// Outbound networking
    #[arg(long)]
    pub net: bool,
    /// Network backend
    #[arg(long = "net-backend", value_parser = ["tsi", "virtio-net"])]
    pub net_backend: Option<String>,
    /// Allow egress to specific CIDR range (can be used multiple times, implies --net)
    #[arg(long = "allow-cidr", value_name = "CIDR")]
    pub allow_cidr: Vec<String>,
    /// Allow egress to specific hostname (exact or subdomain; learned from DNS answers; implies --net)
    #[arg(long = "allow-host", value_name = "HOSTNAME")]
    pub allow_host: Vec<String>,
    /// Only allow outbound traffic to localhost (implies --net; not enforced)
    #[arg(long)]
    pub outbound_localhost_only: bool,
    /// GPU (recorded only)
    #[arg(long)]
    pub gpu: bool,
    /// GPU VRAM in MiB (recorded only)
    #[arg(long = "gpu-vram", value_name = "MiB")]
    pub gpu_vram_mib: Option<u32>,
    /// Init command run on the first start (repeatable)
    #[arg(long = "init", value_name = "COMMAND")]
    pub init: Vec<String>,
    /// Environment variable for init, the workload and every exec
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Default working directory
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    pub workdir: Option<String>,
    /// Forward the SSH agent (recorded only)
    #[arg(long)]
    pub ssh_agent: bool,
    /// Secret from a host environment variable
    #[arg(long = "secret-env", value_name = "GUEST_VAR=HOST_VAR")]
    pub secret_env: Vec<String>,
    /// Secret from a host file
    #[arg(long = "secret-file", value_name = "GUEST_VAR=PATH")]
    pub secret_file: Vec<String>,
    /// Smolfile (not supported by the simulator)
    #[arg(long = "smolfile", visible_short_alias = 's', value_name = "PATH")]
    pub smolfile: Option<std::path::PathBuf>,
    /// Create from a packed .smolmachine artifact (its manifest gives the defaults)
    #[arg(long, value_name = "PATH", conflicts_with_all = ["image", "smolfile"])]
    pub from: Option<std::path::PathBuf>,
    /// Persistent workload command, launched on every start (needs `--`)
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum PackCmd {
    /// Create a packed artifact from a stopped machine (--from-vm)
    Create(PackCreateCmd),
}

#[derive(Args, Debug)]
pub struct PackCreateCmd {
    /// Container image to pack (not simulated: use --from-vm)
    #[arg(value_name = "IMAGE", required_unless_present_any = ["from_vm", "smolfile"], conflicts_with = "from_vm")]
    pub image: Option<String>,
    /// Pack a stopped machine's state
    #[arg(long = "from-vm", value_name = "VM_NAME")]
    pub from_vm: Option<String>,
    /// Output file path for the packed binary (the payload is OUTPUT.smolmachine)
    #[arg(short = 'o', long, value_name = "PATH")]
    pub output: std::path::PathBuf,
    /// Smolfile (not supported by the simulator)
    #[arg(short = 's', long = "smolfile", value_name = "PATH")]
    pub smolfile: Option<std::path::PathBuf>,
    /// Default number of vCPUs for the packed VM
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub cpus: u8,
    /// Default memory in MiB for the packed VM
    #[arg(long, default_value_t = 8192, value_name = "MiB")]
    pub mem: u32,
    /// Override the image entrypoint
    #[arg(long, value_name = "CMD")]
    pub entrypoint: Option<String>,
}

#[derive(Args, Debug)]
pub struct StartCmd {
    /// Machine name
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// Forkable (accepted, ignored)
    #[arg(long)]
    pub forkable: bool,
    /// HTTP proxy (accepted, ignored)
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// No-proxy list (accepted, ignored)
    #[arg(long = "no-proxy", value_name = "LIST")]
    pub no_proxy: Option<String>,
}

#[derive(Args, Debug)]
pub struct StopCmd {
    /// Machine name
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Args, Debug)]
pub struct DeleteCmd {
    /// Machine name
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: String,
    /// Do not ask for confirmation
    #[arg(short, long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct StatusCmd {
    /// Machine name
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Option<String>,
    /// JSON output
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LsCmd {
    /// Show details
    #[arg(short, long)]
    pub verbose: bool,
    /// JSON output
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct UpdateCmd {
    /// Machine name
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: String,
    #[arg(short = 'v', long = "volume", value_name = "HOST:GUEST[:ro]")]
    pub volume: Vec<String>,
    #[arg(long, value_name = "HOST:GUEST")]
    pub remove_volume: Vec<String>,
    #[arg(short = 'p', long = "port", value_parser = parse_port, value_name = "HOST:GUEST")]
    pub port: Vec<(u16, u16)>,
    #[arg(long, value_parser = parse_port, value_name = "HOST:GUEST")]
    pub remove_port: Vec<(u16, u16)>,
    #[arg(long, value_name = "N")]
    pub cpus: Option<u8>,
    #[arg(long, value_name = "MiB")]
    pub mem: Option<u32>,
    #[arg(long)]
    pub net: bool,
    #[arg(long, conflicts_with = "net")]
    pub no_net: bool,
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    #[arg(long, value_name = "KEY")]
    pub remove_env: Vec<String>,
    #[arg(short = 'w', long, value_name = "DIR")]
    pub workdir: Option<String>,
    #[arg(long)]
    pub gpu: bool,
    #[arg(long, conflicts_with = "gpu")]
    pub no_gpu: bool,
    #[arg(long, value_name = "GiB")]
    pub storage: Option<u64>,
    #[arg(long, value_name = "GiB")]
    pub overlay: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ShellCmd {
    /// Machine name
    #[arg(long, short = 'n', value_name = "NAME")]
    pub name: Option<String>,
}

#[derive(Args, Debug)]
pub struct CpCmd {
    /// Source: a local path or MACHINE:/guest/path
    #[arg(value_name = "SRC")]
    pub src: String,
    /// Destination: a local path or MACHINE:/guest/path
    #[arg(value_name = "DST")]
    pub dst: String,
}

#[derive(Args, Debug)]
pub struct DataDirCmd {
    /// Machine name
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: String,
}

/// Flags only the 1.9.2 personality has, read from the raw matches.
#[derive(Debug, Default)]
pub struct ShExtras {
    pub labels: Vec<String>,
    pub detach: bool,
    pub cp_mode: Option<String>,
    pub cp_uid: Option<u32>,
    pub cp_gid: Option<u32>,
    pub cascade: bool,
    /// `create --block-private` (1.33).
    pub block_private: bool,
    /// `create --allow-private CIDR` (1.33).
    pub allow_private: Vec<String>,
    /// `create --credential NAME=ENV@HOST[,HOST]` (1.33 here; smolvm has it from 1.18).
    pub credentials: Vec<String>,
    /// `create --allow-host-pattern P` (1.33), and `update --allow-host-pattern P`.
    pub allow_host_patterns: Vec<String>,
    /// `update --allow-host H` (create's is a derive field: every version has it).
    pub update_allow_hosts: Vec<String>,
    /// `update --remove-allow-host H`.
    pub remove_allow_hosts: Vec<String>,
}

/// The clap command for a personality.
pub fn command(p: Personality) -> clap::Command {
    let cmd = Cli::command().version(p.version());
    if p.is_head() {
        cmd.mut_subcommand("machine", |m| {
            m.mut_subcommand("create", |c| {
                c.arg(
                    Arg::new("label")
                        .long("label")
                        .value_name("KEY=VALUE")
                        .action(ArgAction::Append)
                        .help("Label (repeatable)"),
                )
            })
            .mut_subcommand("exec", |c| {
                c.arg(
                    Arg::new("detach")
                        .short('d')
                        .long("detach")
                        .action(ArgAction::SetTrue)
                        .conflicts_with_all(["interactive", "tty", "stream"])
                        .help("Run in the background and print the guest PID"),
                )
            })
            .mut_subcommand("cp", |c| {
                c.arg(
                    Arg::new("mode")
                        .long("mode")
                        .value_name("OCTAL")
                        .help("File mode (upload)"),
                )
                .arg(
                    Arg::new("uid")
                        .long("uid")
                        .value_name("UID")
                        .value_parser(clap::value_parser!(u32))
                        .help("Owner uid (upload)"),
                )
                .arg(
                    Arg::new("gid")
                        .long("gid")
                        .value_name("GID")
                        .value_parser(clap::value_parser!(u32))
                        .help("Owner gid (upload)"),
                )
            })
            .mut_subcommand("delete", |c| {
                c.arg(
                    Arg::new("cascade")
                        .long("cascade")
                        .action(ArgAction::SetTrue)
                        .help("Delete clones first"),
                )
            })
        })
        .mut_subcommand("machine", |m| {
            m.subcommand(
                clap::Command::new("egress-events")
                    .about("Show the machine's egress denials (1.8.1+)")
                    .arg(Arg::new("name").short('n').long("name").value_name("NAME"))
                    .arg(
                        Arg::new("limit")
                            .long("limit")
                            .value_parser(clap::value_parser!(usize))
                            .default_value("200")
                            .help("Maximum number of events to show (newest kept)"),
                    )
                    .arg(
                        Arg::new("json")
                            .long("json")
                            .action(ArgAction::SetTrue)
                            .help("Output in JSON format"),
                    ),
            )
        })
        .mut_subcommand("machine", |m| {
            if !p.is_current() {
                return m;
            }
            let repeat = |id: &'static str, value: &'static str, help: &'static str| {
                Arg::new(id)
                    .long(id)
                    .value_name(value)
                    .action(ArgAction::Append)
                    .help(help)
            };
            let m = m.mut_subcommand("create", |c| {
                c.arg(
                    Arg::new("block-private")
                        .long("block-private")
                        .action(ArgAction::SetTrue)
                        .help(
                            "Block private, internal and link-local destinations (implies --net)",
                        ),
                )
                .arg(repeat(
                    "allow-private",
                    "CIDR",
                    "Re-open a private range under --block-private (implies it)",
                ))
                .arg(repeat(
                    "credential",
                    "NAME=ENV_VAR@HOST[,HOST...]",
                    "Bind a credential the workload may use without ever seeing it (implies --net)",
                ))
                .arg(repeat(
                    "allow-host-pattern",
                    "PATTERN",
                    "Opt-in egress pattern: exact hostname or `*.domain` subdomains only",
                ))
            });
            let m = if !p.updates_allow_lists() {
                m
            } else {
                m.mut_subcommand("update", |c| {
                    c.arg(repeat(
                    "allow-host",
                    "HOSTNAME",
                    "Allow egress to a hostname and its subdomains (stopped machine; repeatable)",
                ))
                .arg(repeat(
                    "allow-host-pattern",
                    "PATTERN",
                    "Allow an exact hostname or `*.domain` subdomains only (repeatable)",
                ))
                .arg(repeat(
                    "remove-allow-host",
                    "HOSTNAME",
                    "Remove an allowed hostname or pattern, as it was added (repeatable)",
                ))
                })
            };
            m.subcommand(name_only(
                "pause",
                "Save a running machine's execution and stop it (1.18+)",
            ))
            .subcommand(name_only(
                "resume",
                "Boot a paused machine again (1.18+; the simulator cannot restore RAM)",
            ))
        })
    } else {
        cmd
    }
}

/// A verb that takes only `-n/--name` (pause, resume).
fn name_only(verb: &'static str, about: &'static str) -> clap::Command {
    clap::Command::new(verb).about(about).arg(
        Arg::new("name")
            .short('n')
            .long("name")
            .value_name("NAME")
            .required(true),
    )
}

/// `machine egress-events [--name N] [--limit N] [--json]` (added at runtime for 1.9+).
pub fn egress_events(m: &ArgMatches) -> Option<(String, usize, bool)> {
    let (verb, c) = m.subcommand_matches("machine")?.subcommand()?;
    if verb != "egress-events" {
        return None;
    }
    Some((
        c.get_one::<String>("name")
            .cloned()
            .unwrap_or_else(|| "default".to_string()),
        c.get_one::<usize>("limit").copied().unwrap_or(200),
        c.get_flag("json"),
    ))
}

/// `machine pause|resume --name N`, the verbs only the current personality has (they are
/// added at runtime, so the derive structs never see them).
pub fn pause_or_resume(m: &ArgMatches) -> Option<(bool, String)> {
    let mm = m.subcommand_matches("machine")?;
    let (verb, c) = mm.subcommand()?;
    let pause = match verb {
        "pause" => true,
        "resume" => false,
        _ => return None,
    };
    Some((pause, c.get_one::<String>("name")?.clone()))
}

impl ShExtras {
    pub fn from_matches(m: &ArgMatches, p: Personality) -> Self {
        let mut x = ShExtras::default();
        if !p.is_head() {
            return x;
        }
        let Some(mm) = m.subcommand_matches("machine") else {
            return x;
        };
        if let Some(c) = mm.subcommand_matches("create") {
            x.labels = many(c, "label");
            x.allow_private = many(c, "allow-private");
            x.credentials = many(c, "credential");
            x.allow_host_patterns = many(c, "allow-host-pattern");
            x.block_private = c.try_get_one::<bool>("block-private").ok().flatten() == Some(&true);
        }
        if let Some(c) = mm.subcommand_matches("update") {
            x.update_allow_hosts = many(c, "allow-host");
            x.allow_host_patterns = many(c, "allow-host-pattern");
            x.remove_allow_hosts = many(c, "remove-allow-host");
        }
        if let Some(c) = mm.subcommand_matches("exec") {
            x.detach = c.get_flag("detach");
        }
        if let Some(c) = mm.subcommand_matches("cp") {
            x.cp_mode = c.get_one::<String>("mode").cloned();
            x.cp_uid = c.get_one::<u32>("uid").copied();
            x.cp_gid = c.get_one::<u32>("gid").copied();
        }
        if let Some(c) = mm.subcommand_matches("delete") {
            x.cascade = c.get_flag("cascade");
        }
        x
    }
}

/// Every value of a repeatable flag added at runtime (none when this personality lacks it).
fn many(c: &ArgMatches, id: &str) -> Vec<String> {
    c.try_get_many::<String>(id)
        .ok()
        .flatten()
        .map(|v| v.cloned().collect())
        .unwrap_or_default()
}

fn parse_image(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("image reference must not be empty".to_string());
    }
    Ok(s.to_string())
}

/// `HOST:GUEST` or `PORT`, with smolvm's messages.
pub fn parse_port(spec: &str) -> Result<(u16, u16), String> {
    if let Some((h, g)) = spec.split_once(':') {
        let host: u16 = h.parse().map_err(|_| format!("invalid host port: {h}"))?;
        if host == 0 {
            return Err("host port 0 is not valid for VM port forwarding".to_string());
        }
        let guest: u16 = g.parse().map_err(|_| format!("invalid guest port: {g}"))?;
        if guest == 0 {
            return Err("guest port 0 is not valid for VM port forwarding".to_string());
        }
        Ok((host, guest))
    } else {
        let port: u16 = spec.parse().map_err(|_| format!("invalid port: {spec}"))?;
        if port == 0 {
            return Err("port 0 is not valid for VM port forwarding".to_string());
        }
        Ok((port, port))
    }
}

/// humantime-style durations: `30s`, `5m`, `1h`, `500ms`, `1m30s`; zero is rejected.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("value was empty".to_string());
    }
    let mut total = std::time::Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err("expected number at 0".to_string());
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| "number is too large".to_string())?;
        rest = rest[digits..].trim_start();
        let ulen = rest.chars().take_while(|c| c.is_ascii_alphabetic()).count();
        if ulen == 0 {
            return Err("time unit needed, for example 1sec or 1ms".to_string());
        }
        let unit = &rest[..ulen];
        rest = rest[ulen..].trim_start();
        let d = match unit {
            "ms" | "msec" | "millis" => std::time::Duration::from_millis(n),
            "s" | "sec" | "secs" | "second" | "seconds" => std::time::Duration::from_secs(n),
            "m" | "min" | "mins" | "minute" | "minutes" => std::time::Duration::from_secs(n * 60),
            "h" | "hr" | "hrs" | "hour" | "hours" => std::time::Duration::from_secs(n * 3600),
            "d" | "day" | "days" => std::time::Duration::from_secs(n * 86400),
            other => {
                return Err(format!(
                    "unknown time unit {other:?}, supported units: ns, us, ms, sec, min, hours, days, weeks, months, years (and few variations)"
                ));
            }
        };
        total += d;
    }
    if total.is_zero() {
        return Err("timeout must be greater than 0 (e.g., 5sec, 30s)".to_string());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_like_humantime() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn ports_like_smolvm() {
        assert_eq!(parse_port("8080:80"), Ok((8080, 80)));
        assert_eq!(parse_port("22"), Ok((22, 22)));
        assert_eq!(
            parse_port("0:1"),
            Err("host port 0 is not valid for VM port forwarding".into())
        );
        assert_eq!(parse_port("x:1"), Err("invalid host port: x".into()));
    }

    #[test]
    fn clap_surface_is_consistent() {
        command(Personality::V104).debug_assert();
        command(Personality::V192).debug_assert();
    }
}
