//! One OpenSSH connection per remote host, shared by every box process that uses it.
//!
//! * The master is opened explicitly (`ControlMaster=yes`, `-f -N`) under an exclusive lock
//!   on `<sock>.open`, so two box processes never race to create it; calls run as mux
//!   clients (`ControlMaster=no`), and a call whose master died meanwhile still gets through
//!   (ssh then connects on its own); the next call re-opens the master.
//! * Closing: each box process holds a shared `flock` on `<sock>.users` while it uses the
//!   host (the `box open` gateway and its forward for as long as they live). When a
//!   process is done it tries to turn that into an exclusive lock without waiting; only the
//!   last user gets it, and it runs `ssh -O exit`.
//! * Options box insists on: `BatchMode=yes` (no prompt can hang box), `ForwardAgent=no`,
//!   `ForwardX11=no`, `ExitOnForwardFailure=yes`, `ClearAllForwardings=yes` on the master
//!   and on every call (a `LocalForward` or `RemoteForward` in the user's config must not
//!   open a listener box did not ask for: a call, as a mux client, would ask the master to
//!   open its config's forwards), and `GatewayPorts=no` on the master; the control commands
//!   read no config at all. Everything else comes from the user's own `~/.ssh/config`
//!   (ProxyJump, keys, known hosts) or `BOX_SSH_COMMAND` (`ssh -F ./cfg`), which may not
//!   turn forwarding on or touch the control socket ([`super::ssh_command`]).

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use super::RemoteHost;
use super::quote::split_words;
use super::wrapper::{self, Trailer};
use crate::child_env::{self, ChildKind};
use crate::process::SmolvmError;
use crate::process::runner::{self, CallOpts, Feed, Io, Output, Program, Stream};

/// On every call: the forwards of the user's config stay closed. Not on the control
/// commands, where it would clear the very `-L` of `-O forward`/`-O cancel`.
const CALL_CLEARS_FORWARDS: &str = "ClearAllForwardings=yes";
/// sun_path holds 108 bytes, and ssh binds `<ControlPath>.<16 random chars>` first.
const MAX_SOCKET_PATH: usize = 90;
/// How long opening the master (or a control command) may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(45);
const CONTROL_DEADLINE: Duration = Duration::from_secs(15);

/// How to reach one host: the ssh command's words, the destination, the control socket.
#[derive(Debug, Clone)]
pub struct SshTarget {
    host: RemoteHost,
    words: Vec<String>,
    control_path: PathBuf,
}

impl SshTarget {
    /// `ssh_command` is `BOX_SSH_COMMAND` (split like git splits `GIT_SSH_COMMAND`);
    /// `state_root` is box's state directory, where the control sockets live under `ssh/`
    /// (else, or when that path is too long for a socket, `/tmp/box-ssh-<uid>/`).
    pub fn new(
        host: &RemoteHost,
        ssh_command: &str,
        state_root: Option<&Path>,
    ) -> Result<Self, SmolvmError> {
        let words = split_words(ssh_command).map_err(|problem| SmolvmError::Connect {
            host: host.to_string(),
            problem: format!("BOX_SSH_COMMAND cannot be read: {problem}"),
        })?;
        super::ssh_command::check(&words).map_err(|problem| SmolvmError::Connect {
            host: host.to_string(),
            problem,
        })?;
        let name = format!("{}.sock", socket_hash(host, &words));
        let control_path = state_root
            .map(|root| root.join("ssh").join(&name))
            .filter(|p| socket_path_ok(p))
            .unwrap_or_else(|| short_socket_dir().join(&name));
        Ok(Self {
            host: host.clone(),
            words,
            control_path,
        })
    }

    pub fn host(&self) -> &RemoteHost {
        &self.host
    }

    pub fn control_path(&self) -> &Path {
        &self.control_path
    }

    /// A command to the running master (`-O check|exit|forward|cancel`, `extra`). It only
    /// talks to the control socket, so it reads no ssh config (`-F /dev/null`) and none of
    /// `BOX_SSH_COMMAND`'s words: with `-O forward` ssh would send the `LocalForward` and
    /// `RemoteForward` of the user's config along with box's `-L`, and
    /// `ClearAllForwardings` would clear box's `-L` with them.
    pub(crate) fn control_command(&self, extra: &[&str]) -> Command {
        let mut cmd = self.ssh_on_the_socket();
        cmd.args(["-F", "/dev/null", "-o", "BatchMode=yes"])
            .args(extra)
            .arg(self.host.destination());
        cmd
    }

    /// The ssh program in its child environment, with box's control socket.
    fn ssh_on_the_socket(&self) -> Command {
        let mut cmd = Command::new(&self.words[0]);
        child_env::apply(&mut cmd, ChildKind::Ssh);
        let mut path_opt = OsString::from("ControlPath=");
        // ssh expands `%` tokens in ControlPath.
        path_opt.push(self.control_path.to_string_lossy().replace('%', "%%"));
        cmd.arg("-o").arg(path_opt);
        cmd
    }

    /// How a user runs the same ssh by hand (for fixes in messages).
    pub fn by_hand(&self) -> String {
        let mut w = self.words.clone();
        if let Some(p) = self.host.port {
            w.push("-p".into());
            w.push(p.to_string());
        }
        w.push(self.host.destination());
        w.join(" ")
    }

    pub(crate) fn program(&self) -> Program {
        Program::Ssh(self.words.first().cloned().unwrap_or_default())
    }

    /// ssh with box's options, `extra` before the destination and `remote` after `--`,
    /// in the ssh child environment. box's options come first: for each `-o` option ssh
    /// keeps the first value it reads, so neither `BOX_SSH_COMMAND`'s `-o` words nor
    /// `~/.ssh/config` can turn on agent forwarding or prompts, or move the control socket
    /// (ssh's letter flags would win: [`super::ssh_command`] refuses them beforehand).
    pub(crate) fn command(&self, extra: &[&str], remote: Option<&str>) -> Command {
        let mut cmd = self.ssh_on_the_socket();
        for o in [
            "BatchMode=yes",
            "ForwardAgent=no",
            "ForwardX11=no",
            "ExitOnForwardFailure=yes",
            "ConnectTimeout=30",
            "ServerAliveInterval=15",
            "ServerAliveCountMax=4",
            // A `RemoteCommand` in the user's config would refuse box's command.
            "RemoteCommand=none",
        ] {
            cmd.arg("-o").arg(o);
        }
        cmd.args(extra);
        if let Some(p) = self.host.port {
            cmd.arg("-p").arg(p.to_string());
        }
        cmd.args(&self.words[1..]);
        cmd.arg(self.host.destination());
        if let Some(r) = remote {
            cmd.arg("--").arg(r);
        }
        cmd
    }
}

/// A short, stable name for the (host, ssh command) pair: different `-F` configs may reach
/// different machines under the same alias.
fn socket_hash(host: &RemoteHost, words: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(host.to_string().as_bytes());
    for w in words {
        h.update([0u8]);
        h.update(w.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

fn socket_path_ok(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s.len() <= MAX_SOCKET_PATH && !s.contains(|c: char| c.is_whitespace() || c == '"')
}

/// `/tmp/box-ssh-<uid>`, for state directories too deep for a socket path.
fn short_socket_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/box-ssh-{}", nix::unistd::getuid()))
}

/// Creates the socket directory, private, and refuses one somebody else made.
fn ensure_socket_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(format!("cannot create {}: {e}", dir.display()));
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(format!(
            "{} is not a directory of this user; remove it",
            dir.display()
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    Ok(())
}

fn lock_file(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// One call through the remote wrapper: `sh -c INNER_SCRIPT box-call SMOLVM ARGS…` on
/// the remote host.
pub(crate) struct RemoteCall<'a> {
    pub smolvm: &'a str,
    pub inner_script: &'a str,
    pub args: &'a [String],
    pub stdin: wrapper::Stdin,
    /// The call's human name, for errors.
    pub call: &'a str,
}

/// One box process's use of a host's connection. Dropping the last one closes it.
#[derive(Debug)]
pub struct Session {
    target: SshTarget,
    /// This process's shared lock on `<sock>.users`, taken on first use.
    users: Mutex<Option<Flock<File>>>,
}

impl Session {
    pub fn new(target: SshTarget) -> Self {
        Self {
            target,
            users: Mutex::new(None),
        }
    }

    pub fn target(&self) -> &SshTarget {
        &self.target
    }

    fn host_name(&self) -> String {
        self.target.host.to_string()
    }

    fn connect_error(&self, problem: String) -> SmolvmError {
        SmolvmError::Connect {
            host: self.host_name(),
            problem,
        }
    }

    /// Takes this process's share of the connection and opens the master if none runs.
    pub fn ensure_open(&self) -> Result<(), SmolvmError> {
        let sock = &self.target.control_path;
        let dir = sock.parent().unwrap_or(Path::new("/"));
        {
            let mut users = self
                .users
                .lock()
                .map_err(|_| self.connect_error("a lock was poisoned".into()))?;
            if users.is_none() {
                ensure_socket_dir(dir).map_err(|p| self.connect_error(p))?;
                let file =
                    lock_file(&with_suffix(sock, ".users")).map_err(|p| self.connect_error(p))?;
                // Waits only while the last user of a previous connection runs `-O exit`.
                let lock = Flock::lock(file, FlockArg::LockShared).map_err(|(_, e)| {
                    self.connect_error(format!("cannot lock the connection's users file: {e}"))
                })?;
                *users = Some(lock);
            }
        }
        if self.master_alive() {
            return Ok(());
        }
        let opener = lock_file(&with_suffix(sock, ".open")).map_err(|p| self.connect_error(p))?;
        let _opening = Flock::lock(opener, FlockArg::LockExclusive).map_err(|(_, e)| {
            self.connect_error(format!("cannot lock the connection opener: {e}"))
        })?;
        if self.master_alive() {
            return Ok(());
        }
        self.open_master()
    }

    /// `ssh -O check`: a master answers on the control socket.
    pub fn master_alive(&self) -> bool {
        self.control(&["-O", "check"])
            .is_ok_and(|out| out.success())
    }

    fn control(&self, extra: &[&str]) -> Result<Output, SmolvmError> {
        let cmd = self.target.control_command(extra);
        let call = format!("ssh {}", extra.join(" "));
        runner::run_command(
            cmd,
            &self.target.program(),
            &call,
            CallOpts::with_timeout(CONTROL_DEADLINE),
            Io::default(),
        )
        .map(|(out, _)| out)
    }

    fn open_master(&self) -> Result<(), SmolvmError> {
        // A socket file left by a master that died would make the new master give up
        // multiplexing and linger as a plain connection.
        let _ = std::fs::remove_file(&self.target.control_path);
        let cmd = self.target.command(
            &[
                "-o",
                "ControlMaster=yes",
                "-o",
                "ControlPersist=yes",
                "-o",
                "ClearAllForwardings=yes",
                "-o",
                "GatewayPorts=no",
                "-f",
                "-N",
            ],
            None,
        );
        let (out, _) = runner::run_command(
            cmd,
            &self.target.program(),
            &format!("ssh {}", self.target.host),
            CallOpts::with_timeout(CONNECT_DEADLINE),
            Io::default(),
        )
        .map_err(|e| match e {
            SmolvmError::Timeout { after, .. } => self.connect_error(format!(
                "no answer within {}s (is the host up? try `{}`)",
                after.as_secs(),
                self.target.by_hand()
            )),
            other => other,
        })?;
        if out.success() && self.master_alive() {
            tracing::debug!(host = %self.target.host, "ssh master opened");
            return Ok(());
        }
        Err(self.connect_error(explain_connect_failure(&out.stderr, &self.target)))
    }

    /// One call on the remote host through the wrapper. `args` follow smolvm (`$1`) as the
    /// inner script's arguments. The trailer is taken off stderr and its status becomes the
    /// output's; with no trailer the connection is what failed.
    pub(crate) fn call(
        &self,
        rc: RemoteCall<'_>,
        opts: CallOpts<'_>,
        io: Io,
    ) -> Result<(Output, Option<std::io::Result<u64>>), SmolvmError> {
        let RemoteCall {
            smolvm,
            inner_script,
            args,
            stdin,
            call,
        } = rc;
        self.ensure_open()?;
        let nonce = wrapper::nonce();
        let remote = wrapper::command(&nonce, stdin, smolvm, inner_script, args);
        let cmd = self.target.command(
            &["-T", "-o", "ControlMaster=no", "-o", CALL_CLEARS_FORWARDS],
            Some(&remote),
        );
        let mut io = match io.stdin {
            // The wrapper must see EOF only when box is gone.
            Feed::Null => Io {
                stdin: Feed::Hold,
                ..io
            },
            _ => io,
        };
        io.done_marker = Some(wrapper::marker(&nonce));
        let CallOpts {
            timeout,
            mut on_line,
            cancel,
            env: _,
        } = opts;
        let mut filtered = |stream: Stream, line: &str| {
            if let Some(cb) = on_line.as_mut() {
                match wrapper::line_before_trailer(line, &nonce) {
                    Some("") => {}
                    Some(before) => cb(stream, before),
                    None => cb(stream, line),
                }
            }
        };
        let (mut out, written) = runner::run_command(
            cmd,
            &self.target.program(),
            call,
            CallOpts {
                timeout,
                on_line: Some(&mut filtered),
                cancel,
                env: Vec::new(),
            },
            io,
        )?;
        match wrapper::strip_trailer(&mut out.stderr, &nonce) {
            Some(Trailer::Exit(code)) => {
                out.code = Some(code);
                Ok((out, written))
            }
            Some(Trailer::Missing) => Err(SmolvmError::RemoteMissing {
                host: self.host_name(),
                bin: smolvm.to_string(),
            }),
            None => Err(SmolvmError::ConnectionLost {
                host: self.host_name(),
                call: call.to_string(),
                ssh_said: ssh_said(&out),
            }),
        }
    }

    /// An interactive call (`ssh -t` when box has a terminal). No wrapper: the remote pty
    /// hangs the session up when the connection goes. A 255 with no master left is the
    /// connection's, not the guest's.
    pub(crate) fn interactive(
        &self,
        smolvm: &str,
        args: &[String],
        call: &str,
        passed: runner::Passed,
    ) -> Result<i32, SmolvmError> {
        use std::io::IsTerminal;
        self.ensure_open()?;
        let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let mut words = vec![smolvm.to_string()];
        words.extend(args.iter().cloned());
        let remote = format!(
            "sh -c {} box {}",
            super::quote::quote(
                r#"b=$1; shift; case $b in '~/'*) b="$HOME/${b#??}";; esac; exec "$b" "$@""#
            ),
            super::quote::command_line(&words)
        );
        let cmd = self.target.command(
            &[
                if tty { "-t" } else { "-T" },
                "-o",
                "ControlMaster=no",
                "-o",
                CALL_CLEARS_FORWARDS,
            ],
            Some(&remote),
        );
        let code = runner::run_interactive_command(cmd, &self.target.program(), call, passed)?;
        if code == 255 && !self.master_alive() {
            return Err(SmolvmError::ConnectionLost {
                host: self.host_name(),
                call: call.to_string(),
                ssh_said: "the session ended with 255 and the connection is gone".into(),
            });
        }
        Ok(code)
    }

    /// A plain shell command on the remote host (not through smolvm): `sh -c SCRIPT box
    /// ARGS…`, every argument quoted. For doctor and the base store.
    pub fn shell(
        &self,
        script: &str,
        args: &[String],
        timeout: Duration,
    ) -> Result<Output, SmolvmError> {
        let call = format!("sh -c … on {}", self.target.host);
        // The wrapper's `$1` is `sh` itself: the script runs as `sh -c SCRIPT box ARGS`.
        let mut inner_args = vec!["-c".to_string(), script.to_string(), "box".to_string()];
        inner_args.extend(args.iter().cloned());
        self.call(
            RemoteCall {
                smolvm: "sh",
                inner_script: wrapper::PLAIN,
                args: &inner_args,
                stdin: wrapper::Stdin::Watch,
                call: &call,
            },
            CallOpts::with_timeout(timeout),
            Io::default(),
        )
        .map(|(out, _)| out)
    }

    /// `ssh -O forward -L 127.0.0.1:L:127.0.0.1:R` on the master, with a free local port
    /// (tried again when another process takes it first).
    pub fn forward_local(self: &Arc<Self>, remote_port: u16) -> Result<Forward, SmolvmError> {
        self.ensure_open()?;
        let mut last = String::new();
        for _ in 0..8 {
            let local = free_local_port()
                .map_err(|e| self.connect_error(format!("cannot find a free local port: {e}")))?;
            let spec = format!("127.0.0.1:{local}:127.0.0.1:{remote_port}");
            let out = self.control(&["-O", "forward", "-L", &spec])?;
            if out.success() {
                return Ok(Forward {
                    session: Arc::clone(self),
                    spec,
                    local,
                });
            }
            last = ssh_said(&out);
        }
        Err(self.connect_error(format!(
            "cannot forward a local port to 127.0.0.1:{remote_port} there (ssh said: {last})"
        )))
    }

    /// Closes the master if this process was its last user.
    fn release(&self) {
        let Ok(mut users) = self.users.lock() else {
            return;
        };
        let Some(lock) = users.take() else {
            return;
        };
        if lock.relock(FlockArg::LockExclusiveNonblock).is_ok() {
            match self.control(&["-O", "exit"]) {
                Ok(_) => tracing::debug!(host = %self.target.host, "ssh master closed"),
                Err(e) => tracing::debug!(host = %self.target.host, "ssh -O exit: {e}"),
            }
        }
        drop(lock);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.release();
    }
}

/// A local loopback port forwarded to the remote's loopback; cancelled on drop. It keeps
/// its session (and so the connection) alive.
#[derive(Debug)]
pub struct Forward {
    session: Arc<Session>,
    spec: String,
    local: u16,
}

impl Forward {
    pub fn local_port(&self) -> u16 {
        self.local
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.session.control(&["-O", "cancel", "-L", &self.spec]);
    }
}

fn free_local_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(l.local_addr()?.port())
}

/// The last few lines ssh printed, for a message.
fn ssh_said(out: &Output) -> String {
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return match out.code {
            Some(c) => format!("nothing, exit status {c}"),
            None => "nothing; it was killed".into(),
        };
    }
    lines[lines.len().saturating_sub(3)..].join(" | ")
}

/// What went wrong opening the connection, with what to do about it.
pub(crate) fn explain_connect_failure(stderr: &str, target: &SshTarget) -> String {
    let said = ssh_said(&Output {
        code: None,
        stdout: String::new(),
        stderr: stderr.to_string(),
        elapsed: Duration::ZERO,
    });
    let host = &target.host;
    if stderr.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || (stderr.contains("Host key for") && stderr.contains("has changed"))
    {
        return format!(
            "the host key of {host} has changed: run `{}` once to check it (ssh said: {said})",
            target.by_hand()
        );
    }
    if stderr.contains("host key is known for") {
        return format!(
            "the host key of {host} is unknown: run `{}` once to check it (ssh said: {said})",
            target.by_hand()
        );
    }
    if stderr.contains("Host key verification failed") {
        return format!(
            "the host key of {host} could not be verified: run `{}` once to check it (ssh said: {said})",
            target.by_hand()
        );
    }
    if stderr.contains("Permission denied") {
        return format!(
            "the login was refused (ssh said: {said}); box runs ssh with BatchMode=yes, so the key must be in ssh-agent or named in ~/.ssh/config without a passphrase prompt"
        );
    }
    format!("ssh said: {said}")
}

#[cfg(test)]
pub(crate) mod test_host;

#[cfg(test)]
mod tests;
