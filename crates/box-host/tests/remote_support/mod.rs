//! Harness of the remote-host tests (issue 24): a second Linux "machine" on this one, that
//! `box` reaches only through OpenSSH, with nothing listening anywhere.
//!
//! * The remote is a persistent network + mount + PID namespace ([`Namespace`]): its PID 1
//!   is a small reaper, it outlives every ssh connection (the simulator's machines and their
//!   published ports live there), and killing it takes every remote process with it.
//! * It reaches the internet through its own slirp4netns (as smolvm-sim networks its
//!   guests), so a remote `box new` pulls and installs from the real registries.
//! * Inside it, the laptop's test directory (the World's BOX_HOME, backups, TMPDIR, box.env
//!   and passphrase file), `/tmp` and `/root` are empty tmpfs: whatever the remote sees, it
//!   got over ssh. Only the remote's own directory and the simulator binary's are brought
//!   back, wherever the checkout is (under `/tmp` or `/root` too).
//! * `ssh -F <cfg> boxremote` runs `sshd -i` inside the namespace as the ProxyCommand
//!   (host key, authorized key and known_hosts generated here), so the connection is real
//!   OpenSSH end to end and no port is ever opened.
//! * The remote's smolvm is a script (`BOX_REMOTE_SMOLVM`) that runs smolvm-sim with its own
//!   simulator home and unredacted call log under the remote's directory.
//!
//! It composes [`save_load_support::World`] (the laptop side: box, its state, backups and
//! the local simulator) and adds the env a remote `box` needs ([`Remote::remote_env`]).
//! The scans ([`ProcSampler`], [`Remote::file_surfaces`]) read what the remote saw: its
//! process table (argv and environment of every process, guests included), every file of
//! its directory and tmpfs, the simulator's raw call log and sshd's log.
#![allow(dead_code)]

#[path = "../save_load_support/mod.rs"]
pub mod save_load_support;
// Also save_load_support's (private there): the scans need its call-log helpers.
#[allow(clippy::duplicate_mod)]
#[path = "../sim_support/mod.rs"]
pub mod sim_support;

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use save_load_support::{Run, World, serial};

/// The ssh_config alias of the remote (what `BOX_HOST` names).
pub const ALIAS: &str = "boxremote";

/// PID 1 of the remote: reaps whatever is reparented to it (the simulator's detached
/// machine supervisors, the remains of dropped sessions), so a dead process never lingers
/// as a zombie that `kill(pid, 0)` still finds.
const REAPER: &str = "import os, time\nwhile True:\n    try:\n        os.wait()\n    except ChildProcessError:\n        time.sleep(0.2)\n";

/// What the remote needs from this host, beyond the World's prerequisites.
pub fn prerequisites() -> bool {
    let mut missing = sim_support::missing_root_and_commands(&[
        "unshare",
        "nsenter",
        "slirp4netns",
        "ssh",
        "ssh-keygen",
        "ip",
        "ss",
        "curl",
        "script",
    ]);
    if !Path::new("/usr/sbin/sshd").is_file() {
        missing.push("/usr/sbin/sshd (apt-get install openssh-server; scripts/setup.sh does, without starting it)".into());
    }
    if !Path::new("/usr/bin/python3").is_file() {
        missing.push("/usr/bin/python3 (the remote namespace's PID 1)".into());
    }
    sim_support::require("remote-host tests", &missing) && save_load_support::prerequisites()
}

/// `prctl(PR_SET_PDEATHSIG, SIGKILL)` in a child before exec: if the test dies without
/// running Drop (abort, SIGKILL), what it started dies too.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The remote's namespaces, held by `unshare --fork` and its PID 1 (the reaper).
pub struct Namespace {
    holder: Child,
    /// PID 1 of the namespace, as this host sees it (what `nsenter -t` names).
    pub pid: i32,
}

impl Namespace {
    fn create() -> Self {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "private",
            "--",
            "/usr/bin/python3",
            "-c",
            REAPER,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let mut holder = cmd.spawn().expect("spawn unshare");
        match Self::wait_for_init(holder.id()) {
            Some(pid) => Self { holder, pid },
            None => {
                let _ = holder.kill();
                let _ = holder.wait();
                panic!("the remote namespace did not come up");
            }
        }
    }

    /// The host pid of unshare's child once it is PID 1 of a new PID namespace and runs the
    /// reaper (within 10 s).
    fn wait_for_init(unshare_pid: u32) -> Option<i32> {
        let children = format!("/proc/{unshare_pid}/task/{unshare_pid}/children");
        let own_pidns = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let pid = std::fs::read_to_string(&children).ok().and_then(|s| {
                s.split_whitespace()
                    .next()
                    .and_then(|p| p.parse::<i32>().ok())
            });
            if let Some(pid) = pid {
                let in_new_ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                    .is_ok_and(|ns| ns != own_pidns);
                let reaper_runs = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim().starts_with("python3"));
                if in_new_ns && reaper_runs {
                    return Some(pid);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// `nsenter` into all three namespaces: a command that runs on the remote (as root,
    /// not through ssh: the test's own look at the remote machine).
    pub fn enter(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("-t")
            .arg(self.pid.to_string())
            .args(["-n", "-m", "-p", "--"])
            .arg(program)
            .stdin(Stdio::null());
        cmd
    }

    /// `sh -c script` on the remote; must succeed; stdout.
    pub fn sh(&self, script: &str) -> String {
        let out = self
            .enter("sh")
            .args(["-c", script])
            .output()
            .expect("nsenter");
        assert!(
            out.status.success(),
            "on the remote: {script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A path as the remote's mount namespace resolves it, readable from this host.
    pub fn path(&self, remote_path: &str) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root/{}",
            self.pid,
            remote_path.trim_start_matches('/')
        ))
    }

    /// Every process of the remote (its PID namespace and the guests' nested ones).
    pub fn processes(&self) -> Vec<RemoteProcess> {
        let proc = self.path("/proc");
        let Ok(rd) = std::fs::read_dir(&proc) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let read = |f: &str| {
                std::fs::read(e.path().join(f))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default()
            };
            let args = read("cmdline");
            if args.is_empty() {
                continue; // a kernel thread or a process that just exited
            }
            out.push(RemoteProcess {
                pid,
                args: args.trim_end().to_string(),
                environ: read("environ"),
            });
        }
        out
    }

    /// Kills the namespace's PID 1: the kernel kills every process of the remote with it.
    /// Idempotent.
    fn kill(&mut self) {
        if self.holder.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: kill(2) on the PID 1 this harness created (its holder is still our child,
        // so the number cannot have been reused while it waits for it).
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One process of the remote as its `/proc` shows it (pids as the remote numbers them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RemoteProcess {
    pub pid: u32,
    pub args: String,
    pub environ: String,
}

/// The remote's slirp4netns: outbound NAT for its network namespace (10.0.2.100, gateway
/// 10.0.2.2, DNS 10.0.2.3), no host loopback, no port forwarded to it.
struct Slirp {
    child: Child,
    /// slirp4netns exits when this closes (--exit-fd): with the test, whatever happens.
    _exit_w: OwnedFd,
}

impl Slirp {
    fn start(ns_pid: i32) -> Self {
        let (exit_r, exit_w) = std::io::pipe().expect("pipe");
        let (mut ready_r, ready_w) = std::io::pipe().expect("pipe");
        let (er, rw) = (OwnedFd::from(exit_r), OwnedFd::from(ready_w));
        let (er_raw, rw_raw) = (er.as_raw_fd(), rw.as_raw_fd());
        let mut cmd = Command::new("slirp4netns");
        cmd.args([
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",
            "--exit-fd",
            "3",
            "--ready-fd",
            "4",
        ])
        .arg(ns_pid.to_string())
        .arg("tap0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (dup2, prctl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Through fds above 4 first: a source already at 3 or 4 would keep its
                // close-on-exec flag (dup2 onto itself) or be overwritten by the other.
                let e = libc::fcntl(er_raw, libc::F_DUPFD, 10);
                let r = libc::fcntl(rw_raw, libc::F_DUPFD, 10);
                if e < 0 || r < 0 || libc::dup2(e, 3) < 0 || libc::dup2(r, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(e);
                libc::close(r);
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn slirp4netns");
        drop(er);
        drop(rw);
        let mut b = [0u8; 1];
        if ready_r.read(&mut b).ok() != Some(1) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("slirp4netns for the remote exited before it was ready");
        }
        Self {
            child,
            _exit_w: OwnedFd::from(exit_w),
        }
    }
}

impl Slirp {
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Slirp {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The remote host: namespaces, network, sshd, smolvm, and the laptop's World.
pub struct Remote {
    /// Fields drop in order: the remote first (Drop below), then the laptop.
    pub ns: Namespace,
    slirp: Slirp,
    /// The remote's own directory (sshd config and keys, its smolvm, the simulator's home,
    /// logs): on this host's disk so the scans can read it, outside the World's directory.
    pub dir: tempfile::TempDir,
    pub world: World,
    /// The smolvm-sim binary the remote's smolvm runs (this checkout's).
    sim_bin: PathBuf,
}

impl Remote {
    /// A fresh remote and a fresh laptop World, ready for `box` with [`Self::remote_env`]
    /// (already in the World's `extra_env`: every `world.run` goes to the remote unless a
    /// call overrides `BOX_HOST`).
    pub fn new() -> Self {
        Self::with(World::new(), sim_support::sibling("smolvm-sim"))
    }

    /// A remote for a checkout elsewhere: the World made in `target_tmp` (its
    /// `target/tmp`), the remote's smolvm running `sim_bin`.
    pub fn new_in(target_tmp: &Path, sim_bin: PathBuf) -> Self {
        Self::with(World::new_in(target_tmp), sim_bin)
    }

    fn with(world: World, sim_bin: PathBuf) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("box-remote-")
            .tempdir_in(world.dir.path().parent().expect("the World's parent dir"))
            .expect("remote dir");
        // Each part tears itself down if a later step fails (their own Drop).
        let ns = Namespace::create();
        let slirp = Slirp::start(ns.pid);
        let mut remote = Self {
            ns,
            slirp,
            dir,
            world,
            sim_bin,
        };
        remote.hide_the_laptop();
        remote.write_ssh_files();
        remote.write_remote_smolvm();
        let env = remote.remote_env();
        remote.world.extra_env.extend(env);
        remote
    }

    pub fn ssh_dir(&self) -> PathBuf {
        self.dir.path().join("ssh")
    }
    pub fn ssh_config(&self) -> PathBuf {
        self.ssh_dir().join("ssh_config")
    }
    pub fn sshd_config(&self) -> PathBuf {
        self.ssh_dir().join("sshd_config")
    }
    pub fn known_hosts(&self) -> PathBuf {
        self.ssh_dir().join("known_hosts")
    }
    /// sshd's own log (`-E`, LogLevel DEBUG1): every session's commands and environment.
    pub fn sshd_log(&self) -> PathBuf {
        self.dir.path().join("sshd.log")
    }
    /// `BOX_REMOTE_SMOLVM`.
    pub fn smolvm(&self) -> PathBuf {
        self.dir.path().join("bin").join("smolvm")
    }
    /// The remote simulator's home (its machines, call logs).
    pub fn sim_home(&self) -> PathBuf {
        self.dir.path().join("sim")
    }
    /// Sourced by the remote smolvm at every call: the test's fault injection
    /// (`SMOLVM_SIM_FAIL` …), which no environment of box's could carry over ssh.
    fn sim_env_file(&self) -> PathBuf {
        self.dir.path().join("sim.env")
    }

    /// Sets (replaces) the simulator environment of every later remote smolvm call.
    pub fn set_remote_sim_env(&self, vars: &[(&str, &str)]) {
        let text: String = vars
            .iter()
            .map(|(k, v)| format!("export {k}='{}'\n", v.replace('\'', "'\\''")))
            .collect();
        std::fs::write(self.sim_env_file(), text).expect("sim.env");
    }

    pub fn raw_call_log(&self) -> PathBuf {
        sim_support::raw_call_log(&self.sim_home())
    }

    /// What a `box` invocation needs to drive this remote.
    pub fn remote_env(&self) -> Vec<(String, String)> {
        vec![
            ("BOX_HOST".into(), format!("ssh://root@{ALIAS}")),
            (
                "BOX_SSH_COMMAND".into(),
                format!("ssh -F {}", self.ssh_config().display()),
            ),
            (
                "BOX_REMOTE_SMOLVM".into(),
                self.smolvm().display().to_string(),
            ),
        ]
    }

    /// The other secrets of a user's shell, set the way users set them (box's environment)
    /// and added to the laptop's scans: a proxy whose URL holds a password (which
    /// `PROPAGATE_PROXY`, on by default, hands to boxes on this machine) and model API keys
    /// (bound to no box). Returns their values for the remote's scans.
    pub fn use_user_secrets_env(&mut self) -> UserSecrets {
        let s = UserSecrets {
            proxy_password: format!("pw-{}", save_load_support::random_word()),
            anthropic_key: format!("sk-ant-test-{}", save_load_support::random_word()),
            openai_key: format!("sk-test-{}", save_load_support::random_word()),
        };
        let env = [
            ("HTTPS_PROXY", s.proxy_url()),
            ("ANTHROPIC_API_KEY", s.anthropic_key.clone()),
            ("OPENAI_API_KEY", s.openai_key.clone()),
        ];
        for (k, v) in env {
            self.world.extra_env.push((k.into(), v));
        }
        self.world.secrets.borrow_mut().extend(s.all());
        s
    }

    /// The passphrase as users set it: `BOX_PASSPHRASE` in box's environment, no file.
    pub fn use_passphrase_env(&mut self) {
        let pp = self.world.passphrase.clone();
        self.world.extra_env.push(("BOX_PASSPHRASE".into(), pp));
        self.world
            .extra_env
            .push(("BOX_PASSPHRASE_FILE".into(), String::new()));
    }

    /// What the remote sees of this machine's `/tmp` and `/root` (the checkout may be
    /// there): its own directory and the simulator binary's, nothing else.
    pub fn brought_back(&self) -> Vec<PathBuf> {
        vec![
            self.dir.path().to_path_buf(),
            self.sim_bin
                .parent()
                .expect("the simulator's dir")
                .to_path_buf(),
        ]
    }

    /// Empty tmpfs over the laptop's test directory, `/tmp` and `/root` in the remote's
    /// mount namespace, with what the remote needs brought back (its own directory and the
    /// simulator binary's, which live under `/tmp` or `/root` when the checkout does);
    /// loopback up, sshd's privilege-separation dir, and slirp's DNS forwarder as the
    /// remote's resolver.
    fn hide_the_laptop(&self) {
        let resolv = self.dir.path().join("resolv.conf");
        std::fs::write(&resolv, "nameserver 10.0.2.3\n").expect("resolv.conf");
        let keep = self.brought_back();
        let world = self.world.dir.path();
        // A mount point for the kept directories while /tmp and /root are covered: one the
        // remote does not need and that holds none of them.
        let stash = ["/mnt", "/media", "/srv", "/opt"]
            .into_iter()
            .map(Path::new)
            .find(|s| s.is_dir() && !keep.iter().any(|k| k.starts_with(s)) && !world.starts_with(s))
            .expect("a free stash mount point (/mnt, /media, /srv or /opt)");
        let q = |p: &Path| format!("'{}'", p.display());
        // Each kept directory bound onto the stash, then moved back over the new tmpfs.
        let (mut aside, mut back) = (String::new(), String::new());
        for (i, k) in keep.iter().enumerate() {
            let (s, k) = (q(stash), q(k));
            aside.push_str(&format!("mkdir {s}/{i}\nmount --bind {k} {s}/{i}\n"));
            back.push_str(&format!("mkdir -p {k}\nmount --move {s}/{i} {k}\n"));
        }
        let script = format!(
            "set -e\nip link set lo up\n\
             mount -t tmpfs -o mode=0700 box-remote-stash {stash}\n{aside}\
             mount -t tmpfs -o mode=0700 laptop-hidden {world}\n\
             mount -t tmpfs -o mode=1777 remote-tmp /tmp\n\
             mount -t tmpfs -o mode=0700 remote-root /root\n{back}\
             umount {stash}\nmkdir -p -m 0755 /run/sshd\nmount --bind {resolv} /etc/resolv.conf\n",
            stash = q(stash),
            world = q(world),
            resolv = q(&resolv),
        );
        self.ns.sh(&script);
    }

    fn write_ssh_files(&self) {
        let d = self.ssh_dir();
        std::fs::create_dir_all(&d).expect("ssh dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        for key in ["host_ed25519", "client_ed25519"] {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", key, "-f"])
                .arg(d.join(key))
                .stdin(Stdio::null())
                .status()
                .expect("ssh-keygen");
            assert!(st.success(), "ssh-keygen {key}");
        }
        std::fs::copy(d.join("client_ed25519.pub"), d.join("authorized_keys"))
            .expect("authorized_keys");
        let host_pub = std::fs::read_to_string(d.join("host_ed25519.pub")).expect("host key");
        std::fs::write(self.known_hosts(), format!("{ALIAS} {}", host_pub)).expect("known_hosts");
        std::fs::write(
            self.sshd_config(),
            format!(
                "HostKey {d}/host_ed25519
AuthorizedKeysFile {d}/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile none
LogLevel DEBUG1
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
Subsystem sftp internal-sftp
",
                d = d.display()
            ),
        )
        .expect("sshd_config");
        std::fs::write(
            self.ssh_config(),
            format!(
                "Host {ALIAS}
  User root
  HostKeyAlias {ALIAS}
  IdentityFile {d}/client_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile {kh}
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  UpdateHostKeys no
  BatchMode yes
  LogLevel ERROR
  ProxyCommand {proxy}
",
                d = d.display(),
                kh = self.known_hosts().display(),
                proxy = self.proxy_command(),
            ),
        )
        .expect("ssh_config");
    }

    /// `sshd -i` inside the remote's namespaces on the client's stdin/stdout: a real
    /// OpenSSH server per connection, and no socket listening anywhere.
    pub fn proxy_command(&self) -> String {
        format!(
            "nsenter -t {pid} -n -m -p /usr/sbin/sshd -i -f {cfg} -E {log}",
            pid = self.ns.pid,
            cfg = self.sshd_config().display(),
            log = self.sshd_log().display(),
        )
    }

    /// The remote's smolvm: smolvm-sim with the remote's own home and raw call log, the
    /// same named fast-test shortcut (guests on the host userland) as the World's.
    fn write_remote_smolvm(&self) {
        let bin = self.smolvm();
        std::fs::create_dir_all(bin.parent().expect("bin dir")).expect("bin dir");
        std::fs::create_dir_all(self.sim_home()).expect("sim home");
        let script = format!(
            "#!/bin/sh\n\
             export SMOLVM_SIM_HOME='{home}'\n\
             export SMOLVM_SIM_RAW_CALL_LOG='{raw}'\n\
             export SMOLVM_SIM_HOST_USERLAND=1\n\
             [ -f '{extra}' ] && . '{extra}'\n\
             exec '{sim}' \"$@\"\n",
            extra = self.sim_env_file().display(),
            home = self.sim_home().display(),
            raw = self.raw_call_log().display(),
            sim = self.sim_bin.display(),
        );
        // Written by a child (`install`), never through a descriptor of this process: a
        // test thread forking meanwhile would hold it open and exec would fail (ETXTBSY).
        let source = self.dir.path().join("smolvm.sh");
        std::fs::write(&source, script).expect("smolvm script");
        let st = Command::new("install")
            .args(["-m", "755"])
            .arg(&source)
            .arg(&bin)
            .status()
            .expect("install");
        assert!(st.success(), "install the remote smolvm");
    }

    /// `ssh -F cfg boxremote args…` as a user would type it (BatchMode from the config).
    pub fn ssh(&self, remote_args: &[&str]) -> Output {
        Command::new("ssh")
            .arg("-F")
            .arg(self.ssh_config())
            .arg(ALIAS)
            .args(remote_args)
            .stdin(Stdio::null())
            .output()
            .expect("ssh")
    }

    /// The remote smolvm, run on the remote by the test itself (not through box).
    pub fn sim(&self, args: &[&str]) -> Output {
        self.ns
            .enter(self.smolvm())
            .args(args)
            .output()
            .expect("remote smolvm")
    }

    /// Runs a shell script as root in a remote guest; must succeed; stdout.
    pub fn guest_sh(&self, machine: &str, script: &str) -> String {
        let out = self.sim(&[
            "machine", "exec", "--name", machine, "--", "sh", "-c", script,
        ]);
        assert!(
            out.status.success(),
            "remote guest script in {machine} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Machines of the remote's smolvm, `(name, state)`.
    pub fn machines(&self) -> Vec<(String, String)> {
        sim_support::parse_machines(&self.sim(&["machine", "ls", "--json"]).stdout)
    }

    /// Every smolvm call that reached the remote, as argv without the binary.
    pub fn calls(&self) -> Vec<Vec<String>> {
        sim_support::logged_calls(&self.sim_home())
    }

    /// Drops every ssh connection to the remote mid-run, as a network cut would: kills each
    /// `sshd -i` on the remote (what the ProxyCommand runs) and every ssh client on this
    /// host that uses this remote's config (ControlMaster included). Returns how many
    /// processes it killed.
    pub fn drop_connection(&self) -> usize {
        let mut killed = 0;
        for p in self.ns.processes() {
            if p.args.starts_with("/usr/sbin/sshd -i") || p.args.starts_with("sshd: ") {
                killed += kill_remote_pid(&self.ns, p.pid);
            }
        }
        killed + self.kill_ssh_clients()
    }

    /// Kills every ssh client on this host that uses this remote's config (a
    /// ControlMaster included); returns how many.
    fn kill_ssh_clients(&self) -> usize {
        let cfg = self.ssh_config().display().to_string();
        let mut killed = 0;
        for pid in host_pids() {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "ssh" && cmdline(pid).contains(&cfg) {
                // SAFETY: kill(2) on an ssh client of this test's remote (comm and config
                // checked just above).
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
                killed += 1;
            }
        }
        killed
    }

    /// Puts a host key that is not the remote's into the known hosts, as after a
    /// reinstall or an attack; returns the known hosts as they were, to put back.
    pub fn trust_a_wrong_host_key(&self) -> String {
        let other = self.dir.path().join("other_host_key");
        if !other.exists() {
            let st = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&other)
                .status()
                .expect("ssh-keygen");
            assert!(st.success());
        }
        let good = std::fs::read_to_string(self.known_hosts()).expect("known_hosts");
        let pubkey = std::fs::read_to_string(other.with_extension("pub")).expect("the key");
        std::fs::write(self.known_hosts(), format!("{ALIAS} {pubkey}")).expect("known_hosts");
        good
    }

    /// Pids on this host of what this remote runs here: the namespace's holder and PID 1,
    /// its slirp4netns, the ProxyCommands (nsenter, sshd) and the ssh clients using its
    /// config.
    pub fn host_pids_of_ours(&self) -> Vec<u32> {
        let mut pids = vec![
            self.ns.holder.id(),
            self.ns.pid as u32,
            self.slirp.child.id(),
        ];
        let cfg = self.ssh_config().display().to_string();
        let sshd_cfg = self.sshd_config().display().to_string();
        for pid in host_pids() {
            let args = cmdline(pid);
            if args.contains(&cfg) || args.contains(&sshd_cfg) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Kills every smolvm call running on the remote (not the machines' supervisors nor the
    /// simulator's exec watchers: its internals, which a real smolvm has not), as an
    /// OOM kill or an operator would. Returns how many it killed.
    pub fn kill_remote_smolvm(&self) -> usize {
        let sim = self.sim_bin.display().to_string();
        let script = self.smolvm().display().to_string();
        let mut killed = 0;
        for p in self.ns.processes() {
            let is_call = (p.args.starts_with(&sim)
                || p.args.starts_with(&format!("/bin/sh {script}")))
                && !p.args.contains("_boot-vm")
                && !p.args.contains("_exec-watch");
            if is_call {
                killed += kill_remote_pid(&self.ns, p.pid);
            }
        }
        killed
    }

    /// The remote's box temp dirs (`box-part.*` under its /tmp, or anywhere under /tmp and
    /// /root with `box` in the name): what a save or load must never leave behind. The way
    /// to what the harness brought back (a checkout under /tmp or /root) is not one.
    pub fn box_temps(&self) -> Vec<String> {
        let mut left = Vec::new();
        let harness = self.brought_back();
        for d in ["/tmp", "/root"] {
            let Ok(rd) = std::fs::read_dir(self.ns.path(d)) else {
                continue;
            };
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                let on_the_way = Path::new(d).join(&n);
                if harness.iter().any(|k| k.starts_with(&on_the_way)) {
                    continue;
                }
                if n.contains("box") || n.starts_with("hb-") {
                    left.push(format!("{d}/{n}"));
                }
            }
        }
        left
    }

    /// Every regular file the remote holds that a leak could land in, as `(what, path)`:
    /// its directory (sshd's log, the simulator's home with its raw call log, machine
    /// records and the guests' disks), and its private tmpfs (`/tmp`, `/root`).
    pub fn file_surfaces(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        walk_files(self.dir.path(), &[], &mut out);
        // What the harness brought back under them is walked once, above, as itself.
        let brought_back: Vec<PathBuf> = self
            .brought_back()
            .iter()
            .map(|k| self.ns.path(&k.to_string_lossy()))
            .collect();
        for d in ["/tmp", "/root"] {
            walk_files(&self.ns.path(d), &brought_back, &mut out);
        }
        out
    }

    /// Files of the remote holding any of `secrets` (each as `#i in path`): its directory,
    /// sshd's log, its raw call log — which must exist and have recorded calls, or the
    /// scan would prove nothing.
    pub fn files_holding(&self, secrets: &[String]) -> Vec<String> {
        self.files_holding_where(secrets, |_| true)
    }

    /// [`Self::files_holding`] but for the guests' own storage (the simulator's `vms/`):
    /// what a guest holds by right (Executor's token) must show nowhere else there.
    pub fn files_outside_guests_holding(&self, secrets: &[String]) -> Vec<String> {
        let guests = self.sim_home().join("vms");
        self.files_holding_where(secrets, |p| !p.starts_with(&guests))
    }

    fn files_holding_where(&self, secrets: &[String], keep: impl Fn(&Path) -> bool) -> Vec<String> {
        let raw = std::fs::read_to_string(self.raw_call_log()).unwrap_or_default();
        assert!(
            raw.lines().count() > 0,
            "the remote simulator recorded no call in its raw log: the scan would see nothing"
        );
        let log = std::fs::read_to_string(self.sshd_log()).unwrap_or_default();
        assert!(
            log.contains("Accepted publickey"),
            "sshd's log recorded no session: the scan would see nothing"
        );
        let mut found = Vec::new();
        for path in self.file_surfaces().into_iter().filter(|p| keep(p)) {
            for (i, s) in secrets.iter().enumerate() {
                if !s.is_empty() && file_contains(&path, s.as_bytes()) {
                    found.push(format!("secret #{i} in {}", path.display()));
                }
            }
        }
        found
    }

    /// No `secret` in any file of the remote (see [`Self::files_holding`]).
    pub fn assert_files_free_of(&self, secrets: &[String]) {
        let found = self.files_holding(secrets);
        assert!(
            found.is_empty(),
            "secrets reached the remote's files: {found:#?}"
        );
    }

    /// TCP listeners of this host's network namespace as `ss -ltnpH` lists them.
    pub fn host_listeners() -> BTreeSet<String> {
        let out = Command::new("ss").args(["-ltnpH"]).output().expect("ss");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    /// Starts sampling the remote's process table (argv and environment) until
    /// [`ProcSampler::finish`].
    pub fn sample_processes(&self) -> ProcSampler {
        // Only the remote's /proc is read (through its PID 1's root).
        let proc = PathBuf::from(format!("/proc/{}/root/proc", self.ns.pid));
        ProcSampler::start(move || read_procs(&proc, |_| true))
    }

    /// Starts sampling the laptop's ssh clients of this remote (box's children: its
    /// ControlMaster and each call), argv and environment: what OpenSSH could send on.
    pub fn sample_laptop_ssh(&self) -> ProcSampler {
        let cfg = self.ssh_config().display().to_string();
        ProcSampler::start(move || {
            read_procs(Path::new("/proc"), |args| {
                args.starts_with("ssh ") && args.contains(cfg.as_str())
            })
        })
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // The remote's machines first, as `box rm` would (the simulator's own cleanup),
        // then the namespace: its PID 1's death kills whatever is left.
        // No injected fault may hang the cleanup; each call has a deadline.
        let _ = std::fs::remove_file(self.sim_env_file());
        let listed = output_within(
            self.ns
                .enter(self.smolvm())
                .args(["machine", "ls", "--json"]),
            30,
        );
        let machines = listed
            .map(|o| sim_support::parse_machines(&o.stdout))
            .unwrap_or_default();
        for (m, _) in machines {
            let _ = output_within(
                self.ns
                    .enter(self.smolvm())
                    .args(["machine", "delete", "--name", &m, "-f"]),
                60,
            );
        }
        self.ns.kill();
        self.slirp.stop();
        // ssh clients (a ControlMaster box left behind) lose their peer with the namespace;
        // any still here are this remote's and go too.
        self.kill_ssh_clients();
    }
}

/// What [`Remote::use_user_secrets_env`] put in box's environment.
pub struct UserSecrets {
    pub proxy_password: String,
    pub anthropic_key: String,
    pub openai_key: String,
}

impl UserSecrets {
    /// `HTTPS_PROXY`: a name that never resolves (nothing goes through it), not loopback
    /// (which box refuses).
    pub fn proxy_url(&self) -> String {
        format!("http://boxuser:{}@proxy.invalid:3128", self.proxy_password)
    }

    pub fn all(&self) -> Vec<String> {
        vec![
            self.proxy_password.clone(),
            self.anthropic_key.clone(),
            self.openai_key.clone(),
        ]
    }
}

/// Runs `cmd` (stdin closed, output captured) for at most `secs`; killed and `None` after.
pub fn output_within(cmd: &mut Command, secs: u64) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let start = Instant::now();
    while child.try_wait().ok()?.is_none() {
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().ok()
}

/// Kills a remote process by its remote pid (through the remote's /proc: the number is
/// the remote's). Returns 1 if a signal was sent.
fn kill_remote_pid(ns: &Namespace, pid: u32) -> usize {
    let st = ns
        .enter("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
    usize::from(st.is_ok_and(|s| s.success()))
}

/// The argv of this host's process `pid`, joined with spaces ("" once it is gone).
fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn host_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Regular files under `dir` (symlinks not followed), recursively, but for the trees in
/// `skip`.
fn walk_files(dir: &Path, skip: &[PathBuf], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if !skip.contains(&p) {
                walk_files(&p, skip, out);
            }
        } else if m.is_file() {
            out.push(p);
        }
    }
}

/// Whether `path` contains `needle`, read in chunks (guest disks can be large).
pub fn file_contains(path: &Path, needle: &[u8]) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        carry.extend_from_slice(&buf[..n]);
        if carry.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        let keep = needle.len().saturating_sub(1).min(carry.len());
        carry.drain(..carry.len() - keep);
    }
}

/// One process as a sampler saw it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sampled {
    pub args: String,
    pub environ: String,
    /// Inside a guest (a PID namespace below the remote's own): the guest's trust domain.
    pub in_guest: bool,
}

/// The processes of `seen` outside every guest: the remote host's own (sshd, box's calls,
/// smolvm), where nothing of a guest's may show.
pub fn outside_guests(seen: &[Sampled]) -> Vec<Sampled> {
    seen.iter().filter(|p| !p.in_guest).cloned().collect()
}

/// Samples the remote's process table every 20 ms in a thread: each distinct
/// (args, environment) seen, guests' processes included.
pub struct ProcSampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<Sampled>>>,
    rounds: Arc<Mutex<usize>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProcSampler {
    fn start(read: impl Fn() -> Vec<Sampled> + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let rounds = Arc::new(Mutex::new(0));
        let thread = {
            let (stop, seen, rounds) = (stop.clone(), seen.clone(), rounds.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    for p in read() {
                        seen.lock().unwrap_or_else(|e| e.into_inner()).insert(p);
                    }
                    *rounds.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Self {
            stop,
            seen,
            rounds,
            thread: Some(thread),
        }
    }

    /// Stops sampling; every distinct process seen and the number of rounds.
    pub fn finish(mut self) -> (Vec<Sampled>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let rounds = *self.rounds.lock().unwrap_or_else(|e| e.into_inner());
        (seen.into_iter().collect(), rounds)
    }
}

impl Drop for ProcSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Each process under `proc` whose argv `keep` accepts; one in another PID namespace than
/// `proc`'s PID 1 is in a guest.
fn read_procs(proc: &Path, keep: impl Fn(&str) -> bool) -> Vec<Sampled> {
    let Ok(rd) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let own_pidns = std::fs::read_link(proc.join("1/ns/pid")).ok();
    let mut out = Vec::new();
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let read = |f: &str| {
            std::fs::read(e.path().join(f))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default()
        };
        let args = read("cmdline");
        let args = args.trim_end();
        if !args.is_empty() && keep(args) {
            let pidns = std::fs::read_link(e.path().join("ns/pid")).ok();
            out.push(Sampled {
                args: args.to_string(),
                environ: read("environ"),
                in_guest: own_pidns.is_some() && pidns.is_some() && pidns != own_pidns,
            });
        }
    }
    out
}

/// Sampled remote processes holding any of `secrets` in argv or environment (argv shown
/// with the secret masked); the sample must have seen remote smolvm calls, or it proves
/// nothing.
pub fn processes_holding(seen: &[Sampled], rounds: usize, secrets: &[String]) -> Vec<String> {
    assert!(rounds > 0, "the process sampler never ran");
    assert!(
        seen.iter().any(|p| p.args.contains("smolvm")),
        "the sampler saw no smolvm call ({} processes): it proves nothing",
        seen.len()
    );
    let mut found = Vec::new();
    for Sampled {
        args, environ: env, ..
    } in seen
    {
        for (i, s) in secrets.iter().enumerate() {
            if s.is_empty() {
                continue;
            }
            let masked = args.replace(s.as_str(), "<SECRET>");
            if args.contains(s.as_str()) {
                found.push(format!("secret #{i} in the argv of {masked}"));
            }
            if env.contains(s.as_str()) {
                found.push(format!("secret #{i} in the environment of {masked}"));
            }
        }
    }
    found
}

/// No `secret` in any sampled remote process (see [`processes_holding`]).
pub fn assert_processes_free_of(seen: &[Sampled], rounds: usize, secrets: &[String]) {
    let found = processes_holding(seen, rounds, secrets);
    assert!(
        found.is_empty(),
        "secrets reached remote processes: {found:#?}"
    );
}
