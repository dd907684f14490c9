//! The smolvm driver: the only code in box that spawns smolvm.
//!
//! Each method is one smolvm invocation of docs/smolvm.md, with the machine always
//! named by `--name` and guest argv always after `--`. Existence is decided only by
//! `machine ls --json`, never by an exit status. Nothing secret is ever put on smolvm's argv:
//! the Executor token only travels from the guest to us on stdout.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::json::{Machine, parse_machine_list};
use super::pack_layers;
use super::version::SmolvmVersion;
use crate::child_env::ChildKind;
use crate::process::error::SmolvmError;
use crate::process::runner::{self, CallOpts, Feed, Io, LineSink, Output, Sink};
use crate::remote::RemoteHost;
use crate::remote::ssh::{Forward, RemoteCall, Session, SshTarget};
use crate::remote::{copy, wrapper};

/// Deadlines per kind of call. Generous: they exist so that a hung smolvm never hangs box.
pub mod timeouts {
    use std::time::Duration;
    pub const QUERY: Duration = Duration::from_secs(30);
    /// From 1.9 a create may probe a registry for a pack artifact (for a reference naming a
    /// registry other than Docker Hub: smolvm a5df5001 `src/data/pack_ref.rs` L272-279).
    pub const CREATE: Duration = Duration::from_secs(120);
    /// The first start pulls the image.
    pub const START: Duration = Duration::from_secs(600);
    pub const STOP: Duration = Duration::from_secs(90);
    pub const DELETE: Duration = Duration::from_secs(90);
    pub const EXEC: Duration = Duration::from_secs(60);
    pub const COPY: Duration = Duration::from_secs(600);
    /// Provisioning installs the agents from the network.
    pub const PROVISION: Duration = Duration::from_secs(45 * 60);
    /// `pack create --from-vm` re-pulls the image and writes the whole machine.
    pub const PACK: Duration = Duration::from_secs(30 * 60);
    /// `machine create --from` extracts a pack (hundreds of MiB).
    pub const CREATE_FROM: Duration = Duration::from_secs(10 * 60);
}

/// The pack cache cap box gives smolvm for `create --from`: 16 GiB, as hermes-box does,
/// because 1.0.4 evicts a freshly extracted pack larger than the cap (default 5 GiB) right
/// after extracting it (docs/smolvm.md, `create --from`; smolvm-pack extract.rs@v1.0.4
/// L455-500).
pub const PACK_CACHE_MAX_BYTES: u64 = 16 * 1024 * 1024 * 1024;

/// `machine create --from`: a machine from a packed base. The pack's workload and env are
/// its defaults; `--cpus`/`--mem` only win when they differ from smolvm's defaults (4,
/// 8192), so box sets them again with `update` when that matters (see [`Smolvm::update_resources`]).
#[derive(Debug, Clone)]
pub struct CreateFromSpec {
    pub name: String,
    pub pack: std::path::PathBuf,
    pub ports: Vec<(u16, u16)>,
    pub cpus: u8,
    pub mem_mib: u32,
    /// Persisted `-e K=V`, after the pack's own env. Never secrets.
    pub env: Vec<(String, String)>,
    /// `--label K=V` (smolvm 1.8+; empty before: the flag does not exist there).
    pub labels: Vec<(String, String)>,
    /// Egress policy and credential bindings, rendered by `lifecycle::containment` (names
    /// and hosts only, never a value).
    pub policy: Vec<String>,
}

/// What `machine create` is asked for.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub name: String,
    pub image: String,
    /// `(host, guest)` published on host loopback.
    pub ports: Vec<(u16, u16)>,
    pub cpus: u8,
    pub mem_mib: u32,
    /// Persisted `-e K=V`: applied to the workload and every exec. Never secrets.
    pub env: Vec<(String, String)>,
    /// The persistent workload, after `--`.
    pub workload: Vec<String>,
    /// `--label K=V` (smolvm 1.8+; empty before: the flag does not exist there).
    pub labels: Vec<(String, String)>,
    /// Egress policy and credential bindings, rendered by `lifecycle::containment` (names
    /// and hosts only, never a value).
    pub policy: Vec<String>,
}

/// One egress denial smolvm recorded (`egress-events --json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct EgressDenial {
    pub timestamp: String,
    /// `connect`, `sendto` or `resolve`.
    pub operation: String,
    /// `ip:port`, or the name a `resolve` asked for.
    pub dest: String,
}

/// Options of one `machine exec`.
#[derive(Default)]
pub struct ExecOpts<'a> {
    pub env: Vec<(String, String)>,
    /// Default: [`timeouts::EXEC`].
    pub timeout: Option<Duration>,
    /// `--stream`, with every line handed to the callback as it arrives.
    pub on_line: Option<LineSink<'a>>,
    /// A pending-signal flag that cuts the call short (see `runner::CallOpts`).
    pub cancel: Option<&'a AtomicUsize>,
}

/// How an attached `machine exec` ([`Smolvm::exec_attached`]) joins box's own stdio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// `-it`: a pty in the guest, for a person at a terminal.
    Terminal,
    /// `-i`: stdin forwarded, output as raw bytes (pipes, files, scripts).
    Stdin,
    /// `--stream`: no stdin; output forwarded as it arrives, escaped where it reaches a
    /// terminal (guest bytes for a person to read: [`runner::Passed::EscapedOnTerminals`]).
    OutputOnly,
}

/// A handle on the smolvm binary named by `SMOLVM` (default `smolvm`), or on
/// `BOX_REMOTE_SMOLVM` on a remote host.
#[derive(Debug)]
pub struct Smolvm {
    /// The binary: a local path or name, or on the remote host the name its shell finds.
    bin: OsString,
    /// A cap on every deadline (`BOX_SMOLVM_TIMEOUT`, seconds), for tests and slow hosts'
    /// opposite: impatient operators.
    cap: Option<Duration>,
    version: OnceLock<Result<SmolvmVersion, SmolvmError>>,
    transport: Transport,
}

/// Where smolvm runs.
#[derive(Debug)]
enum Transport {
    Local,
    /// On a remote host, through the remote wrapper over the host's shared connection.
    Ssh(Arc<Session>),
    /// The remote host's settings cannot be used (an unreadable `BOX_SSH_COMMAND`): every
    /// call says why.
    Broken(SmolvmError),
}

/// How box reaches a TCP port smolvm published on its host's loopback.
#[derive(Debug)]
pub enum PortReach {
    /// smolvm runs here: the port itself.
    Local(u16),
    /// smolvm runs on a remote host: a laptop loopback port forwarded over the
    /// connection (`ssh -O forward`), cancelled when this is dropped.
    Forwarded(Forward),
}

impl PortReach {
    /// The port on this machine's 127.0.0.1 that reaches the published port.
    pub fn local_port(&self) -> u16 {
        match self {
            PortReach::Local(p) => *p,
            PortReach::Forwarded(f) => f.local_port(),
        }
    }
}

fn cap_from_env() -> Option<Duration> {
    std::env::var("BOX_SMOLVM_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .map(Duration::from_secs_f64)
}

impl Smolvm {
    /// The binary from `SMOLVM`, else `smolvm` on PATH. box never substitutes anything else.
    pub fn from_env() -> Self {
        let bin = std::env::var_os("SMOLVM")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| OsString::from("smolvm"));
        Self::with_binary(bin, cap_from_env())
    }

    /// smolvm for a box on `host`: this machine's ([`Self::from_env`]) for `None`, else
    /// `BOX_REMOTE_SMOLVM` on that host over ssh.
    pub fn for_host(host: Option<&crate::remote::RemoteHost>, env: &box_proto::BoxEnv) -> Self {
        match host {
            None => Self::from_env(),
            Some(h) => {
                let state = crate::state::StateDir::resolve().ok();
                let transport =
                    match SshTarget::new(h, &env.ssh_command, state.as_ref().map(|s| s.root())) {
                        Ok(target) => Transport::Ssh(Arc::new(Session::new(target))),
                        Err(e) => Transport::Broken(e),
                    };
                Self {
                    bin: OsString::from(&env.remote_smolvm),
                    cap: cap_from_env(),
                    version: OnceLock::new(),
                    transport,
                }
            }
        }
    }

    /// smolvm `bin` on the host of `session` (tests; `for_host` builds the session itself).
    pub fn over_ssh(session: Arc<Session>, bin: &str, cap: Option<Duration>) -> Self {
        Self {
            bin: OsString::from(bin),
            cap,
            version: OnceLock::new(),
            transport: Transport::Ssh(session),
        }
    }

    /// The remote host smolvm runs on; `None` for this machine.
    pub fn host(&self) -> Option<&RemoteHost> {
        match &self.transport {
            Transport::Ssh(s) => Some(s.target().host()),
            Transport::Local | Transport::Broken(_) => None,
        }
    }

    /// The shared connection to the remote host, if smolvm runs on one.
    pub fn session(&self) -> Option<&Arc<Session>> {
        match &self.transport {
            Transport::Ssh(s) => Some(s),
            Transport::Local | Transport::Broken(_) => None,
        }
    }

    /// A loopback port on this machine that reaches `port` published on smolvm's host
    /// loopback: the port itself here, a forward (`127.0.0.1:L` → the remote's
    /// `127.0.0.1:port`) for a remote host. Nothing listens on any other address.
    pub fn reach_port(&self, port: u16) -> Result<PortReach, SmolvmError> {
        match &self.transport {
            Transport::Local => Ok(PortReach::Local(port)),
            Transport::Ssh(s) => s.forward_local(port).map(PortReach::Forwarded),
            Transport::Broken(e) => Err(e.clone()),
        }
    }

    /// `sh -c SCRIPT box ARGS…` on the host smolvm runs on (this machine or the remote),
    /// every argument quoted: what the base store and doctor need of that host's files.
    pub fn host_shell(
        &self,
        script: &str,
        args: &[String],
        timeout: Duration,
    ) -> Result<Output, SmolvmError> {
        match &self.transport {
            Transport::Local => {
                let mut a = vec![
                    OsString::from("-c"),
                    OsString::from(script),
                    OsString::from("box"),
                ];
                a.extend(args.iter().map(OsString::from));
                runner::run(
                    &OsString::from("/bin/sh"),
                    &a,
                    "sh -c …",
                    CallOpts::with_timeout(self.deadline(timeout)),
                )
            }
            Transport::Ssh(s) => s.shell(script, args, self.deadline(timeout)),
            Transport::Broken(e) => Err(e.clone()),
        }
    }

    /// Whether `path` exists on the host smolvm runs on.
    pub fn host_path_exists(&self, path: &Path) -> Result<bool, SmolvmError> {
        if let Transport::Local = self.transport {
            return Ok(path.exists());
        }
        let out = self.host_shell(
            r#"[ -e "$1" ]"#,
            &[path.to_string_lossy().into_owned()],
            timeouts::QUERY,
        )?;
        Ok(out.success())
    }

    /// Whether a `--from` machine's data dir (`data_dir`) still has its pack's extracted
    /// layers, on the host smolvm runs on (the rule: `pack_layers`).
    pub fn layers_present(&self, data: &Path) -> Result<bool, SmolvmError> {
        if let Transport::Local = self.transport {
            return Ok(pack_layers::layers_present(data));
        }
        let out = self.host_shell(
            pack_layers::LAYERS_PRESENT_SH,
            &[data.to_string_lossy().into_owned()],
            timeouts::QUERY,
        )?;
        Ok(out.success())
    }

    /// Runs one smolvm call where smolvm lives.
    fn run(&self, a: &[OsString], call: &str, opts: CallOpts<'_>) -> Result<Output, SmolvmError> {
        match &self.transport {
            Transport::Local => runner::run(&self.bin, a, call, opts),
            Transport::Ssh(s) => {
                let inner = if opts.env.is_empty() {
                    wrapper::PLAIN.to_string()
                } else {
                    wrapper::plain_with_env(&opts.env)
                };
                s.call(
                    RemoteCall {
                        smolvm: &self.bin.to_string_lossy(),
                        inner_script: &inner,
                        args: &strings(a),
                        stdin: wrapper::Stdin::Watch,
                        call,
                    },
                    opts,
                    Io::default(),
                )
                .map(|(mut out, _)| {
                    // The wrapper's shell reports a signal death as 128+n. smolvm's own calls
                    // never exit above 128 by themselves, so that is smolvm killed, which a
                    // local call reports as no code. exec's status is the guest's.
                    let is_exec = a.get(1).is_some_and(|v| v == "exec");
                    if !is_exec && out.code.is_some_and(|c| c > 128) {
                        out.code = None;
                    }
                    out
                })
            }
            Transport::Broken(e) => Err(e.clone()),
        }
    }

    pub fn with_binary(bin: impl Into<OsString>, cap: Option<Duration>) -> Self {
        Self {
            bin: bin.into(),
            cap,
            version: OnceLock::new(),
            transport: Transport::Local,
        }
    }

    pub fn binary(&self) -> &OsStr {
        &self.bin
    }

    fn deadline(&self, wanted: Duration) -> Duration {
        match self.cap {
            Some(cap) if cap < wanted => cap,
            _ => wanted,
        }
    }

    fn call_name(&self, args: &[OsString]) -> String {
        let mut s = String::from("smolvm");
        for a in args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        if let Some(h) = self.host() {
            s.push_str(" on ");
            s.push_str(&h.to_string());
        }
        s
    }

    /// Runs a call and insists on smolvm's success.
    fn checked(&self, args: Vec<OsString>, timeout: Duration) -> Result<Output, SmolvmError> {
        let call = self.call_name(&args);
        let out = self.run(&args, &call, CallOpts::with_timeout(self.deadline(timeout)))?;
        check(&call, out)
    }

    /// `smolvm --version`, asked once per process.
    pub fn version(&self) -> Result<SmolvmVersion, SmolvmError> {
        let call = self.call_name(&args(["--version"]));
        let got = self.version.get_or_init(|| {
            let out = self.checked(args(["--version"]), timeouts::QUERY);
            match out {
                Ok(out) => SmolvmVersion::parse(&out.stdout)
                    .map_err(|problem| SmolvmError::BadOutput { call, problem }),
                // Not there, or not reachable: said as such.
                Err(
                    e @ (SmolvmError::Missing { .. }
                    | SmolvmError::RemoteMissing { .. }
                    | SmolvmError::SshMissing { .. }
                    | SmolvmError::Connect { .. }
                    | SmolvmError::ConnectionLost { .. }),
                ) => Err(e),
                Err(e) => Err(SmolvmError::BadOutput {
                    call,
                    problem: e.to_string(),
                }),
            }
        });
        got.clone()
    }

    /// `machine ls --json`: every machine, sorted by name. box learns states only here and
    /// never calls `machine status`, which created a machine's disks at the default size
    /// before the first start until smolvm #1194/#1197 (2026-09-07).
    pub fn list(&self) -> Result<Vec<Machine>, SmolvmError> {
        let a = args(["machine", "ls", "--json"]);
        let call = self.call_name(&a);
        let out = self.checked(a, timeouts::QUERY)?;
        parse_machine_list(&out.stdout).map_err(|problem| SmolvmError::BadOutput { call, problem })
    }

    /// The machine named `name`, if `ls --json` lists it.
    pub fn find(&self, name: &str) -> Result<Option<Machine>, SmolvmError> {
        Ok(self.list()?.into_iter().find(|m| m.name == name))
    }

    /// `machine create`. Only writes smolvm's record; nothing boots. Returns smolvm's
    /// notes from stderr, for the user: smolvm 1.9 notes machine flags written after `--`,
    /// and the simulator notes the stand-in it boots for an image it cannot build
    /// (`ubuntu:24.04` → `debian:13`), which a user must not miss.
    pub fn create(&self, spec: &CreateSpec) -> Result<Vec<String>, SmolvmError> {
        let mut a = args([
            "machine",
            "create",
            "--name",
            &spec.name,
            "--image",
            &spec.image,
            "--net",
        ]);
        push_machine_flags(&mut a, &spec.ports, spec.cpus, spec.mem_mib, &spec.env);
        push_labels(&mut a, &spec.labels);
        a.extend(spec.policy.iter().map(OsString::from));
        a.push("--".into());
        a.extend(spec.workload.iter().map(OsString::from));
        let out = self.checked(a, timeouts::CREATE)?;
        Ok(notes(&out.stderr))
    }

    /// `machine create --name N --from PACK --net …`, with the pack cache cap raised (never
    /// lowered below what the caller's environment already asks for).
    pub fn create_from(&self, spec: &CreateFromSpec) -> Result<(), SmolvmError> {
        let mut a = vec![
            OsString::from("machine"),
            "create".into(),
            "--name".into(),
            spec.name.clone().into(),
            "--from".into(),
            spec.pack.as_os_str().to_owned(),
            "--net".into(),
        ];
        push_machine_flags(&mut a, &spec.ports, spec.cpus, spec.mem_mib, &spec.env);
        push_labels(&mut a, &spec.labels);
        a.extend(spec.policy.iter().map(OsString::from));
        let call = self.call_name(&a);
        let cap = std::env::var("SMOLVM_PACK_CACHE_MAX_BYTES")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(PACK_CACHE_MAX_BYTES, |v| v.max(PACK_CACHE_MAX_BYTES));
        let out = self.run(
            &a,
            &call,
            CallOpts {
                env: vec![("SMOLVM_PACK_CACHE_MAX_BYTES".into(), cap.to_string())],
                ..CallOpts::with_timeout(self.deadline(timeouts::CREATE_FROM))
            },
        )?;
        check(&call, out).map(drop)
    }

    /// `machine data-dir --name N`: the machine's host data directory.
    pub fn data_dir(&self, name: &str) -> Result<std::path::PathBuf, SmolvmError> {
        let a = args(["machine", "data-dir", "--name", name]);
        let call = self.call_name(&a);
        let out = self.checked(a, timeouts::QUERY)?;
        let path = out.stdout.trim();
        if path.is_empty() || !path.starts_with('/') {
            return Err(SmolvmError::BadOutput {
                call,
                problem: format!("expected an absolute path, got {path:?}"),
            });
        }
        Ok(std::path::PathBuf::from(path))
    }

    /// `pack create --from-vm N -o OUT --entrypoint E --cpus C --mem M`: writes `OUT` (a
    /// stub) and `OUT.smolmachine`. The machine must be stopped. Output lines go to
    /// `on_line` (progress).
    pub fn pack_from_vm(
        &self,
        name: &str,
        out: &Path,
        entrypoint: &str,
        cpus: u8,
        mem_mib: u32,
        on_line: Option<LineSink<'_>>,
    ) -> Result<(), SmolvmError> {
        let a = vec![
            OsString::from("pack"),
            "create".into(),
            "--from-vm".into(),
            name.into(),
            "-o".into(),
            out.as_os_str().to_owned(),
            "--entrypoint".into(),
            entrypoint.into(),
            "--cpus".into(),
            cpus.to_string().into(),
            "--mem".into(),
            mem_mib.to_string().into(),
        ];
        let call = self.call_name(&a);
        let res = self.run(
            &a,
            &call,
            CallOpts {
                on_line,
                ..CallOpts::with_timeout(self.deadline(timeouts::PACK))
            },
        )?;
        check(&call, res).map(drop)
    }

    /// `machine update --name N --cpus C --mem M` (stopped machines only).
    pub fn update_resources(&self, name: &str, cpus: u8, mem_mib: u32) -> Result<(), SmolvmError> {
        let cpus = cpus.to_string();
        let mem = mem_mib.to_string();
        self.checked(
            args([
                "machine", "update", "--name", name, "--cpus", &cpus, "--mem", &mem,
            ]),
            timeouts::QUERY,
        )
        .map(drop)
    }

    /// 1.0.x NIC workaround (`machine update --name N --net`), before the first start.
    pub fn update_net(&self, name: &str) -> Result<(), SmolvmError> {
        self.checked(
            args(["machine", "update", "--name", name, "--net"]),
            timeouts::QUERY,
        )
        .map(drop)
    }

    /// `machine start` (idempotent in smolvm: a running machine is fine).
    pub fn start(&self, name: &str) -> Result<(), SmolvmError> {
        self.start_cancellable(name, None)
    }

    /// `machine start`, cut short when `cancel` becomes non-zero (a pending signal during
    /// `box new`: the first start pulls an image and may take minutes; the rollback that
    /// follows deletes the machine with `-f`, which also stops a half-started one).
    pub fn start_cancellable(
        &self,
        name: &str,
        cancel: Option<&AtomicUsize>,
    ) -> Result<(), SmolvmError> {
        self.start_with_keys(name, cancel, &[])
    }

    /// `machine start` with API keys bound to the machine (`--credential`) in the
    /// environment of this one call, which is where smolvm reads them: never argv, never a
    /// file. On a remote host they travel over the connection's stdin into that call's
    /// environment alone (`remote::keys`).
    pub fn start_with_keys(
        &self,
        name: &str,
        cancel: Option<&AtomicUsize>,
        keys: &[(String, secrecy::SecretString)],
    ) -> Result<(), SmolvmError> {
        use secrecy::ExposeSecret as _;
        let a = args(["machine", "start", "--name", name]);
        let call = self.call_name(&a);
        if let (Transport::Ssh(s), false) = (&self.transport, keys.is_empty()) {
            let (out, _) = s.call(
                RemoteCall {
                    smolvm: &self.bin.to_string_lossy(),
                    inner_script: crate::remote::keys::START_WITH_KEYS,
                    args: &strings(&a),
                    stdin: wrapper::Stdin::Pass,
                    call: &call,
                },
                CallOpts {
                    timeout: self.deadline(timeouts::START),
                    on_line: None,
                    cancel,
                    env: Vec::new(),
                },
                Io {
                    stdin: Feed::Secret(crate::remote::keys::stdin_lines(keys)),
                    ..Io::default()
                },
            )?;
            if out.code == Some(125) {
                return Err(SmolvmError::Failed {
                    call,
                    message: "the remote side did not take the API keys box sent over the \
                              connection (cut short?); retry"
                        .to_string(),
                });
            }
            return check(&call, out).map(drop);
        }
        let opts = CallOpts {
            timeout: self.deadline(timeouts::START),
            on_line: None,
            cancel,
            env: keys
                .iter()
                .map(|(k, v)| (k.clone(), v.expose_secret().to_string()))
                .collect(),
        };
        let out = match (&self.transport, keys.is_empty()) {
            (Transport::Local, false) => {
                runner::run_as(&self.bin, &a, &call, opts, ChildKind::SmolvmHoldingKeys)?
            }
            _ => self.run(&a, &call, opts)?,
        };
        check(&call, out).map(drop)
    }

    /// `machine update --name N` with allow-list flags (`lifecycle::containment::
    /// update_args`), on a stopped machine.
    pub fn update_allow_list(&self, name: &str, flags: &[String]) -> Result<(), SmolvmError> {
        let mut a = args(["machine", "update", "--name", name]);
        a.extend(flags.iter().map(OsString::from));
        self.checked(a, timeouts::QUERY).map(drop)
    }

    /// `machine egress-events --name N --json`: the newest denials smolvm recorded (its
    /// default, 200), oldest first.
    pub fn egress_events(&self, name: &str) -> Result<Vec<EgressDenial>, SmolvmError> {
        self.egress_events_up_to(name, None)
    }

    /// [`Self::egress_events`], the newest `limit` of them (`--limit`, in the same release).
    pub fn egress_events_up_to(
        &self,
        name: &str,
        limit: Option<usize>,
    ) -> Result<Vec<EgressDenial>, SmolvmError> {
        let mut a = args(["machine", "egress-events", "--name", name, "--json"]);
        if let Some(n) = limit {
            a.extend([OsString::from("--limit"), OsString::from(n.to_string())]);
        }
        let call = self.call_name(&a);
        let out = self.checked(a, timeouts::QUERY)?;
        serde_json::from_str(out.stdout.trim()).map_err(|e| SmolvmError::BadOutput {
            call,
            problem: format!("expected a JSON list of denials: {e}"),
        })
    }

    /// `machine stop` (idempotent in smolvm: a stopped machine is fine).
    pub fn stop(&self, name: &str) -> Result<(), SmolvmError> {
        self.checked(args(["machine", "stop", "--name", name]), timeouts::STOP)
            .map(drop)
    }

    /// `machine delete --name N -f` (always `-f`: without it smolvm prompts and, with no
    /// stdin, cancels and exits 0 without deleting). Callers verify absence with `find`.
    pub fn delete(&self, name: &str) -> Result<(), SmolvmError> {
        self.checked(
            args(["machine", "delete", "--name", name, "-f"]),
            timeouts::DELETE,
        )
        .map(drop)
    }

    /// `machine exec --name N [--stream] [-e K=V]… -- argv…`. `Ok` carries the guest
    /// command's exit status, whatever it is; `Err` means smolvm itself failed (or the
    /// deadline/a signal ended the call).
    pub fn exec(
        &self,
        name: &str,
        argv: &[&str],
        opts: ExecOpts<'_>,
    ) -> Result<Output, SmolvmError> {
        let mut a = args(["machine", "exec", "--name", name]);
        let stream = opts.on_line.is_some();
        if stream {
            a.push("--stream".into());
        }
        for (k, v) in &opts.env {
            a.push("-e".into());
            a.push(format!("{k}={v}").into());
        }
        a.push("--".into());
        a.extend(argv.iter().map(OsString::from));
        let call = self.call_name(&a);
        let out = self.run(
            &a,
            &call,
            CallOpts {
                timeout: self.deadline(opts.timeout.unwrap_or(timeouts::EXEC)),
                on_line: opts.on_line,
                cancel: opts.cancel,
                env: Vec::new(),
            },
        )?;
        if let Some(message) = out.smolvm_error() {
            return Err(SmolvmError::Failed {
                call,
                message: message.to_string(),
            });
        }
        Ok(out)
    }

    /// `machine exec -it --name N [-e K=V]… -- argv…` on the user's terminal; the guest's
    /// exit code comes back.
    pub fn exec_interactive(
        &self,
        name: &str,
        env: &[(String, String)],
        argv: &[&str],
    ) -> Result<i32, SmolvmError> {
        self.exec_attached(name, Attach::Terminal, env, argv)
    }

    /// `machine exec` with box's own stdin, stdout and stderr in the guest command's place
    /// (`box exec`, `box logs`); no deadline, the guest's exit code comes back.
    pub fn exec_attached(
        &self,
        name: &str,
        attach: Attach,
        env: &[(String, String)],
        argv: &[&str],
    ) -> Result<i32, SmolvmError> {
        let mode = match attach {
            Attach::Terminal => "-it",
            Attach::Stdin => "-i",
            Attach::OutputOnly => "--stream",
        };
        let mut a = args(["machine", "exec", mode, "--name", name]);
        for (k, v) in env {
            a.push("-e".into());
            a.push(format!("{k}={v}").into());
        }
        a.push("--".into());
        a.extend(argv.iter().map(OsString::from));
        let call = self.call_name(&a);
        let passed = match attach {
            Attach::Terminal | Attach::Stdin => runner::Passed::AsIs,
            Attach::OutputOnly => runner::Passed::EscapedOnTerminals,
        };
        match &self.transport {
            Transport::Local => runner::run_interactive(&self.bin, &a, &call, passed),
            Transport::Ssh(s) => {
                s.interactive(&self.bin.to_string_lossy(), &strings(&a), &call, passed)
            }
            Transport::Broken(e) => Err(e.clone()),
        }
    }

    /// `machine cp LOCAL N:/guest/path` (single files only).
    pub fn copy_in(&self, local: &Path, name: &str, guest: &str) -> Result<(), SmolvmError> {
        self.copy_in_cancellable(local, name, guest, None)
    }

    /// [`Self::copy_in`], cut short when `cancel` becomes non-zero.
    pub fn copy_in_cancellable(
        &self,
        local: &Path,
        name: &str,
        guest: &str,
        cancel: Option<&AtomicUsize>,
    ) -> Result<(), SmolvmError> {
        if let Transport::Ssh(s) = &self.transport {
            return self.stream_in(s, local, name, guest, cancel);
        }
        self.cp(
            local.as_os_str().to_owned(),
            format!("{name}:{guest}").into(),
            cancel,
        )
    }

    /// `machine cp N:/guest/path LOCAL`.
    pub fn copy_out(&self, name: &str, guest: &str, local: &Path) -> Result<(), SmolvmError> {
        self.copy_out_cancellable(name, guest, local, None)
    }

    /// [`Self::copy_out`], cut short when `cancel` becomes non-zero (save copies parts out
    /// while the export still runs; a signal must end both promptly).
    pub fn copy_out_cancellable(
        &self,
        name: &str,
        guest: &str,
        local: &Path,
        cancel: Option<&AtomicUsize>,
    ) -> Result<(), SmolvmError> {
        if let Transport::Ssh(s) = &self.transport {
            return self.stream_out(s, name, guest, local, cancel);
        }
        self.cp(
            format!("{name}:{guest}").into(),
            local.as_os_str().to_owned(),
            cancel,
        )
    }

    /// `copy_in` to a remote host: the file streams over the connection into a private
    /// remote temp dir (exactly its size, checked there), then `machine cp` (see
    /// `remote::copy`). The laptop makes no extra copy.
    fn stream_in(
        &self,
        session: &Session,
        local: &Path,
        name: &str,
        guest: &str,
        cancel: Option<&AtomicUsize>,
    ) -> Result<(), SmolvmError> {
        let dest = format!("{name}:{guest}");
        let call = self.call_name(&Self::cp_args(local.into(), dest.clone().into()));
        let transfer = transfer_error(&call);
        let file = std::fs::File::open(local)
            .map_err(|e| transfer(format!("cannot read {}: {e}", local.display())))?;
        let size = file
            .metadata()
            .map_err(|e| transfer(format!("cannot read {}: {e}", local.display())))?
            .len();
        let (out, _) = session.call(
            RemoteCall {
                smolvm: &self.bin.to_string_lossy(),
                inner_script: &copy::copy_in_script(),
                args: &[size.to_string(), dest],
                stdin: wrapper::Stdin::Pass,
                call: &call,
            },
            self.copy_opts(cancel),
            Io {
                stdin: Feed::File(file, size),
                stdout: Sink::Capture,
                ..Io::default()
            },
        )?;
        if let Some(problem) = copy_problem(&out) {
            return Err(transfer(problem));
        }
        check(&call, out).map(drop)
    }

    /// `copy_out` from a remote host: `machine cp` into a private remote temp dir, then the
    /// bytes stream back into `local`, their count checked against the size the remote
    /// announced. On any failure `local` is removed: no caller sees a truncated part.
    fn stream_out(
        &self,
        session: &Session,
        name: &str,
        guest: &str,
        local: &Path,
        cancel: Option<&AtomicUsize>,
    ) -> Result<(), SmolvmError> {
        let src = format!("{name}:{guest}");
        let call = self.call_name(&Self::cp_args(src.clone().into(), local.into()));
        let transfer = transfer_error(&call);
        let file = std::fs::File::create(local)
            .map_err(|e| transfer(format!("cannot write {}: {e}", local.display())))?;
        let result = session
            .call(
                RemoteCall {
                    smolvm: &self.bin.to_string_lossy(),
                    inner_script: &copy::copy_out_script(),
                    args: &[src],
                    stdin: wrapper::Stdin::Watch,
                    call: &call,
                },
                self.copy_opts(cancel),
                Io {
                    stdin: Feed::Null,
                    stdout: Sink::File(file),
                    ..Io::default()
                },
            )
            .and_then(|(mut out, written)| {
                if let Some(problem) = copy_problem(&out) {
                    return Err(transfer(problem));
                }
                if !out.success() {
                    return check(&call, out).map(drop);
                }
                let announced = copy::take_size(&mut out.stderr);
                match (announced, written) {
                    (Some(n), Some(Ok(got))) if n == got => Ok(()),
                    (Some(n), Some(Ok(got))) => Err(transfer(format!(
                        "the stream ended after {got} of {n} bytes"
                    ))),
                    (_, Some(Err(e))) => {
                        Err(transfer(format!("cannot write {}: {e}", local.display())))
                    }
                    _ => Err(transfer(
                        "the remote host did not say the part's size".into(),
                    )),
                }
            });
        if result.is_err() {
            let _ = std::fs::remove_file(local);
        }
        result
    }

    /// A copy's options: the copy deadline, cut short by `cancel`.
    fn copy_opts<'a>(&self, cancel: Option<&'a AtomicUsize>) -> CallOpts<'a> {
        CallOpts {
            cancel,
            ..CallOpts::with_timeout(self.deadline(timeouts::COPY))
        }
    }

    /// smolvm's arguments of `machine cp FROM TO`.
    fn cp_args(from: OsString, to: OsString) -> Vec<OsString> {
        vec![OsString::from("machine"), "cp".into(), from, to]
    }

    /// `machine cp FROM TO`, either direction, with the copy deadline.
    fn cp(
        &self,
        from: OsString,
        to: OsString,
        cancel: Option<&AtomicUsize>,
    ) -> Result<(), SmolvmError> {
        let a = Self::cp_args(from, to);
        let call = self.call_name(&a);
        let out = self.run(&a, &call, self.copy_opts(cancel))?;
        check(&call, out).map(drop)
    }
}

/// The copy scripts' own failure (`box-copy: …`, exit 75), if that is what happened.
fn copy_problem(out: &Output) -> Option<String> {
    if out.code != Some(copy::SHORT_STREAM) {
        return None;
    }
    out.stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(copy::PREFIX))
        .map(str::to_string)
}

/// Arguments as the remote shell gets them (box's argv is UTF-8: names, paths it made).
fn strings(a: &[OsString]) -> Vec<String> {
    a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
}

/// A streamed copy's own failure (short stream, unwritable file), named by its call.
fn transfer_error(call: &str) -> impl Fn(String) -> SmolvmError + '_ {
    move |problem| SmolvmError::Transfer {
        call: call.to_string(),
        problem,
    }
}

fn args<const N: usize>(items: [&str; N]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

/// The `note: …` lines of a call's stderr (smolvm's own, or `smolvm-sim: note: …`).
fn notes(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("smolvm-sim: ").or(Some(l)))
        .filter(|l| l.starts_with("note: "))
        .map(str::to_string)
        .collect()
}

/// smolvm succeeded, or the error names the call and smolvm's own message.
fn check(call: &str, out: Output) -> Result<Output, SmolvmError> {
    if out.success() {
        return Ok(out);
    }
    if let Some(message) = out.smolvm_error() {
        return Err(SmolvmError::Failed {
            call: call.to_string(),
            message: message.to_string(),
        });
    }
    Err(SmolvmError::Unexpected {
        call: call.to_string(),
        code: out
            .code
            .map_or_else(|| "a signal".to_string(), |c| format!("status {c}")),
        stderr: out.stderr,
    })
}

/// The `-p`, `--cpus`, `--mem` and `-e` flags `create` and `create --from` share.
fn push_machine_flags(
    a: &mut Vec<OsString>,
    ports: &[(u16, u16)],
    cpus: u8,
    mem_mib: u32,
    env: &[(String, String)],
) {
    for (host, guest) in ports {
        a.push("-p".into());
        a.push(format!("{host}:{guest}").into());
    }
    a.push("--cpus".into());
    a.push(cpus.to_string().into());
    a.push("--mem".into());
    a.push(mem_mib.to_string().into());
    for (k, v) in env {
        a.push("-e".into());
        a.push(format!("{k}={v}").into());
    }
}

fn push_labels(a: &mut Vec<OsString>, labels: &[(String, String)]) {
    for (k, v) in labels {
        a.push("--label".into());
        a.push(format!("{k}={v}").into());
    }
}

#[cfg(test)]
mod remote_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake smolvm that plays back a canned answer: the test's only purpose is the
    /// driver's reading of real smolvm texts.
    fn fake(dir: &Path, script: &str) -> Smolvm {
        crate::smolvm::fake_smolvm(dir, script)
    }

    #[test]
    fn lists_and_finds_by_exact_name() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(
            tmp.path(),
            r#"[ "$*" = "machine ls --json" ] || exit 9
cat <<'J'
[
  {
    "name": "alpha-2",
    "state": "running"
  },
  {
    "name": "alpha",
    "state": "stopped",
    "unknown_key": {"x": [1, 2]}
  }
]
J"#,
        );
        let all = s.list().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(s.find("alpha").unwrap().unwrap().state.as_str(), "stopped");
        assert!(s.find("alph").unwrap().is_none());
    }

    #[test]
    fn malformed_listing_is_an_error_not_an_empty_list() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(tmp.path(), "echo 'No machines found'");
        let err = s.find("alpha").unwrap_err().to_string();
        assert!(
            err.starts_with("`smolvm machine ls --json` printed output box cannot read"),
            "{err}"
        );
    }

    #[test]
    fn smolvms_error_line_becomes_the_message() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(
            tmp.path(),
            "echo \"Starting machine 'a'...\" >&2; echo 'Error: vm not found: a' >&2; exit 1",
        );
        let err = s.start("a").unwrap_err();
        assert!(err.is_not_found());
        assert_eq!(
            err.to_string(),
            "`smolvm machine start --name a` failed: vm not found: a"
        );
    }

    #[test]
    fn a_crash_without_error_line_is_reported_with_stderr() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(tmp.path(), "echo 'thread main panicked' >&2; exit 101");
        let err = s.stop("a").unwrap_err();
        assert!(!err.is_not_found());
        assert_eq!(
            err.to_string(),
            "`smolvm machine stop --name a` exited with status 101: thread main panicked"
        );
    }

    #[test]
    fn exec_tells_guest_failure_from_smolvm_failure() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(
            tmp.path(),
            r#"case "$*" in
  *"-- false") echo 'error: guest says no' >&2; exit 1;;
  *"-- missing") echo "Error: agent operation failed: connect: machine 'a' is not running. Use 'smolvm machine start --name a' first." >&2; exit 1;;
  *) echo "$*";;
esac"#,
        );
        let out = s.exec("a", &["false"], ExecOpts::default()).unwrap();
        assert_eq!(out.code, Some(1));
        let err = s.exec("a", &["missing"], ExecOpts::default()).unwrap_err();
        assert!(err.to_string().contains("is not running"), "{err}");
        let out = s
            .exec(
                "a",
                &["hb", "doctor"],
                ExecOpts {
                    env: vec![("TERM".into(), "xterm".into())],
                    ..ExecOpts::default()
                },
            )
            .unwrap();
        assert_eq!(
            out.stdout,
            "machine exec --name a -e TERM=xterm -- hb doctor\n"
        );
    }

    #[test]
    fn version_is_read_once_and_parsed() {
        let tmp = tempfile::tempdir().unwrap();
        let count = tmp.path().join("count");
        let s = fake(
            tmp.path(),
            &format!("echo x >> {}; echo 'smolvm 1.0.4'", count.display()),
        );
        assert_eq!(s.version().unwrap(), SmolvmVersion::new(1, 0, 4));
        assert_eq!(s.version().unwrap(), SmolvmVersion::new(1, 0, 4));
        assert_eq!(std::fs::read_to_string(&count).unwrap(), "x\n");
        let bad = fake(tmp.path(), "echo 'smolvm banana'");
        assert!(bad.version().unwrap_err().to_string().contains("banana"));
        let missing = Smolvm::with_binary("/nonexistent/smolvm", None);
        assert!(matches!(
            missing.version(),
            Err(SmolvmError::Missing { .. })
        ));
    }

    #[test]
    fn the_cap_bounds_a_hung_call() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = fake(tmp.path(), "sleep 30");
        s.cap = Some(Duration::from_millis(200));
        let err = s.list().unwrap_err();
        assert!(matches!(err, SmolvmError::Timeout { .. }), "{err}");
        assert!(
            err.to_string().contains("smolvm machine ls --json"),
            "{err}"
        );
    }

    #[test]
    fn create_from_raises_the_pack_cache_cap_and_names_the_pack() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("argv");
        let s = fake(
            tmp.path(),
            &format!(
                "echo \"cap=$SMOLVM_PACK_CACHE_MAX_BYTES\" > {l}; for a in \"$@\"; do echo \"$a\"; done >> {l}",
                l = log.display()
            ),
        );
        s.create_from(&CreateFromSpec {
            name: "beta".into(),
            pack: "/s/bases/k.smolmachine".into(),
            ports: vec![(4791, 4791)],
            cpus: 2,
            mem_mib: 2048,
            env: vec![("HB_WEB_PORT".into(), "4791".into())],
            labels: vec![("hermes-box".into(), "beta".into())],
            policy: Vec::new(),
        })
        .unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "cap=17179869184",
                "machine",
                "create",
                "--name",
                "beta",
                "--from",
                "/s/bases/k.smolmachine",
                "--net",
                "-p",
                "4791:4791",
                "--cpus",
                "2",
                "--mem",
                "2048",
                "-e",
                "HB_WEB_PORT=4791",
                "--label",
                "hermes-box=beta"
            ]
        );
    }

    #[test]
    fn create_hands_back_smolvms_notes() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(
            tmp.path(),
            "echo 'smolvm-sim: note: ubuntu:24.04 cannot be built here; this machine boots the debian:13 image instead.' >&2; \
             echo ' WARN unrelated' >&2; echo 'Created machine: alpha'",
        );
        let notes = s
            .create(&CreateSpec {
                name: "alpha".into(),
                image: "ubuntu:24.04".into(),
                ports: vec![],
                cpus: 2,
                mem_mib: 2048,
                env: vec![],
                workload: vec!["true".into()],
                labels: vec![],
                policy: Vec::new(),
            })
            .unwrap();
        assert_eq!(
            notes,
            [
                "note: ubuntu:24.04 cannot be built here; this machine boots the debian:13 image instead."
            ]
        );
    }

    #[test]
    fn pack_refusal_of_a_running_machine_is_smolvms_text() {
        let tmp = tempfile::tempdir().unwrap();
        let s = fake(
            tmp.path(),
            "echo \"Error: agent operation failed: pack from VM: VM 'b' is running. Stop it first with: smolvm machine stop --name b\" >&2; exit 1",
        );
        let err = s
            .pack_from_vm("b", Path::new("/tmp/o"), "/x", 2, 2048, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is running. Stop it first"), "{err}");
    }

    /// Always `--net`: the image is pulled from a registry, which smolvm 1.7.3-1.17 refuses
    /// to do without network (PR #807), and the guest needs it for provisioning.
    #[test]
    fn create_passes_the_flags_in_smolvms_spelling() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("argv");
        let s = fake(
            tmp.path(),
            &format!("for a in \"$@\"; do echo \"$a\"; done > {}", log.display()),
        );
        s.create(&CreateSpec {
            name: "alpha".into(),
            image: "ubuntu:24.04".into(),
            ports: vec![(4790, 4790)],
            cpus: 2,
            mem_mib: 2048,
            env: vec![("HB_WEB_PORT".into(), "4790".into())],
            workload: vec!["/bin/sh".into(), "-c".into(), "exec x".into()],
            labels: vec![
                ("hermes-box".into(), "alpha".into()),
                ("hermes-box-id".into(), "0f".into()),
            ],
            policy: vec![
                "--block-private".into(),
                "--credential".into(),
                "k=K@api.a.test".into(),
            ],
        })
        .unwrap();
        let argv = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            argv.lines().collect::<Vec<_>>(),
            [
                "machine",
                "create",
                "--name",
                "alpha",
                "--image",
                "ubuntu:24.04",
                "--net",
                "-p",
                "4790:4790",
                "--cpus",
                "2",
                "--mem",
                "2048",
                "-e",
                "HB_WEB_PORT=4790",
                "--label",
                "hermes-box=alpha",
                "--label",
                "hermes-box-id=0f",
                "--block-private",
                "--credential",
                "k=K@api.a.test",
                "--",
                "/bin/sh",
                "-c",
                "exec x"
            ]
        );
    }
}
