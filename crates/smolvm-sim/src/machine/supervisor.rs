//! The machine supervisor (`smolvm-sim _boot-vm --name N`, started detached by `start`).
//!
//! It clones the guest's PID 1 into fresh mount/PID/UTS/network namespaces, starts
//! slirp4netns for that network namespace, tells `start` the outcome through fd 3, and then
//! waits. SIGTERM (from `stop`) makes it kill the guest's PID 1 — which takes every process of
//! the machine with it, and with the last process its mount and network namespaces — and
//! slirp4netns, then exit. If the supervisor itself dies, PDEATHSIG kills the guest's PID 1 and
//! slirp4netns exits on its closed --exit-fd, so nothing outlives it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::machine::{namespaces, network, rootfs};
use crate::output::{SimError, VerbResult, agent, config};
use crate::personality::Personality;
use crate::registry::{self, Record};

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment of the workload and of every exec: the image-like defaults, then the
/// record's env, then `extra` (later keys win).
pub fn guest_env(
    record_env: &[(String, String)],
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), "/root".into()),
    ];
    for (k, v) in record_env.iter().chain(extra) {
        out.retain(|(ok, _)| ok != k);
        out.push((k.clone(), v.clone()));
    }
    out
}

/// `--secret-env GUEST=HOSTVAR` / `--secret-file GUEST=/path` references, resolved now (at
/// each start and each exec, as smolvm does) from this process's environment and files.
/// Unresolvable references fail like smolvm's secret resolution.
pub fn resolve_secrets(
    env_refs: &[String],
    file_refs: &[String],
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for s in env_refs {
        let (g, h) = s
            .split_once('=')
            .ok_or_else(|| format!("invalid secret '{s}': expected GUEST_VAR=HOST_VAR"))?;
        let v = std::env::var(h)
            .map_err(|_| format!("secret '{g}': host environment variable '{h}' is not set"))?;
        out.push((g.to_string(), v));
    }
    for s in file_refs {
        let (g, p) = s
            .split_once('=')
            .ok_or_else(|| format!("invalid secret '{s}': expected GUEST_VAR=PATH"))?;
        let v = std::fs::read_to_string(p).map_err(|e| format!("secret '{g}': {p}: {e}"))?;
        out.push((g.to_string(), v.trim_end_matches('\n').to_string()));
    }
    Ok(out)
}

/// What `start` learns from a successful boot.
pub struct Launched {
    pub pid: i32,
    /// Host PID of the workload (0: none).
    pub workload_pid: i32,
    pub init_pid: i32,
    pub slirp_pid: Option<i32>,
}

/// Start the supervisor for `r` and wait for it to report.
pub fn launch(r: &Record) -> Result<Launched, SimError> {
    let data = registry::data_dir(&r.name);
    std::fs::create_dir_all(&data)
        .map_err(|e| agent("create agent manager", format!("{}: {e}", data.display())))?;
    let _ = std::fs::write(data.join("name"), &r.name);
    let console = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.join("agent-console.log"))
        .map_err(|e| agent("create agent manager", e.to_string()))?;
    let console2 = console
        .try_clone()
        .map_err(|e| agent("create agent manager", e.to_string()))?;
    let (rd, wr) = namespaces::pipe().map_err(|e| agent("start", e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| agent("start", e.to_string()))?;
    let wfd = wr.as_raw_fd();
    let mut cmd = Command::new(exe);
    cmd.arg("_boot-vm")
        .arg("--name")
        .arg(&r.name)
        .env("SMOLVM_SIM_HOME", crate::home::home())
        .stdin(Stdio::null())
        .stdout(console)
        .stderr(console2);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            libc::umask(super::namespaces::GUEST_UMASK);
            if libc::dup2(wfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| agent("start", format!("spawn supervisor: {e}")))?;
    drop(wr);
    let line = read_line(File::from(rd));
    if let Some(rest) = line.strip_prefix("ok ") {
        let nums: Vec<i32> = rest
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        if nums.len() == 4 {
            return Ok(Launched {
                pid: nums[0],
                workload_pid: nums[3],
                init_pid: nums[1],
                slirp_pid: (nums[2] > 0).then_some(nums[2]),
            });
        }
    }
    let _ = child.wait();
    Err(parse_err(&line).unwrap_or_else(|| {
        agent(
            "start",
            format!(
                "machine supervisor exited without reporting (see {})",
                data.join("agent-console.log").display()
            ),
        )
    }))
}

/// One line from a pipe (up to the newline or EOF), without waiting for the writer to close:
/// processes started later may have inherited the write end.
fn read_line(mut f: File) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while let Ok(1) = f.read(&mut b) {
        if b[0] == b'\n' {
            break;
        }
        out.push(b[0]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_err(line: &str) -> Option<SimError> {
    let rest = line.strip_prefix("err ")?;
    let mut it = rest.splitn(3, '\t');
    let kind = it.next()?;
    let op = it.next()?;
    let reason = it.next().unwrap_or("");
    Some(match kind {
        "config" => config(op, reason),
        _ => agent(op, reason),
    })
}

fn err_line(kind: &str, op: &str, reason: &str) -> String {
    format!("err {kind}\t{op}\t{}\n", reason.replace('\n', " "))
}

/// Stop a machine: SIGTERM the supervisor, escalate to SIGKILL, and wait until the guest's
/// PID 1 and slirp4netns are gone (with them every process, mount and network namespace).
pub fn kill_machine(r: &Record) {
    let alive = || registry::pid_alive(r.pid, r.pid_start_time);
    if let Some(pid) = r.pid.filter(|_| alive()) {
        // SAFETY: plain kill(2) on a PID whose start time we verified.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        if !wait_until(Duration::from_secs(5), || !alive()) && alive() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            wait_until(Duration::from_secs(3), || !alive());
        }
    }
    if let Some(ip) = r.init_pid {
        wait_until(Duration::from_secs(3), || {
            registry::proc_start_time(ip).is_none()
        });
    }
    if let Some(sp) = r.slirp_pid {
        let is_slirp = || {
            std::fs::read_to_string(format!("/proc/{sp}/comm"))
                .is_ok_and(|c| c.trim() == "slirp4netns")
                && registry::proc_start_time(sp).is_some()
        };
        if !wait_until(Duration::from_secs(2), || !is_slirp()) && is_slirp() {
            // SAFETY: kill(2) on the slirp4netns we started (comm checked).
            unsafe { libc::kill(sp, libc::SIGKILL) };
            wait_until(Duration::from_secs(2), || !is_slirp());
        }
    }
    let _ = std::fs::remove_file(registry::data_dir(&r.name).join("slirp.sock"));
}

fn wait_until(max: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() >= max {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `_boot-vm` entry point.
pub fn boot(name: &str, p: Personality) -> VerbResult {
    // SAFETY: fd 3 was set up by `launch` for us; we own it from here on.
    let mut report = unsafe { File::from_raw_fd(3) };
    // The `start` that launched us; it holds the registry lock until we report.
    // SAFETY: getppid has no preconditions.
    let starter = unsafe { libc::getppid() };
    // Nothing the supervisor starts may inherit the report pipe.
    // SAFETY: fcntl on our own fd.
    unsafe { libc::fcntl(3, libc::F_SETFD, libc::FD_CLOEXEC) };
    let r = match registry::load(name) {
        Ok(Some(r)) => r,
        Ok(None) => {
            let _ = report.write_all(format!("err vm\tnot found\t{name}\n").as_bytes());
            return Ok(1);
        }
        Err(e) => {
            let _ = report.write_all(err_line("agent", "start", &e.to_string()).as_bytes());
            return Ok(1);
        }
    };
    match start_guest(&r, p) {
        Ok((init_pid, slirp, room)) => {
            // The workload is the guest PID 1's only child right after boot.
            let workload = if r.entrypoint.is_empty() && r.cmd.is_empty() {
                0
            } else {
                std::fs::read_to_string(format!("/proc/{init_pid}/task/{init_pid}/children"))
                    .ok()
                    .and_then(|c| c.split_whitespace().next().and_then(|w| w.parse().ok()))
                    .unwrap_or(0)
            };
            let sp = slirp.as_ref().map_or(0, |s| s.child.id() as i32);
            // From here a `stop` may arrive at any time: queue it for `supervise`.
            let set = block_stop_signals();
            // The network room's threads inherit the blocked signals.
            if let Some(room) = room {
                room.spawn();
            }
            // Record the running machine ourselves (`start` holds the registry lock and waits
            // for us), so it is not orphaned if `start` dies before it saves.
            // SAFETY: getppid has no preconditions.
            if unsafe { libc::getppid() } != starter {
                // `start` died (killed by its caller) before we could report: the registry
                // lock is gone and a `delete` may already be running. Do not resurrect the
                // record; take the half-booted machine down instead.
                eprintln!("smolvm-sim: '{name}': start went away during boot; shutting down");
                // SAFETY: kill/waitpid on our own child.
                unsafe {
                    libc::kill(init_pid, libc::SIGKILL);
                    libc::waitpid(init_pid, std::ptr::null_mut(), 0);
                }
                if let Some(mut s) = slirp {
                    let _ = s.child.kill();
                    let _ = s.child.wait();
                }
                return Ok(1);
            }
            let me = std::process::id() as i32;
            let mut rec = registry::load(name)
                .ok()
                .flatten()
                .unwrap_or_else(|| r.clone());
            rec.state = registry::State::Running;
            rec.pid = Some(me);
            rec.pid_start_time = registry::proc_start_time(me);
            rec.init_pid = Some(init_pid);
            rec.slirp_pid = (sp > 0).then_some(sp);
            rec.workload_pid = (workload > 0).then_some(workload);
            rec.workload_start_time = rec.workload_pid.and_then(registry::proc_start_time);
            if !rec.init.is_empty() || rec.image.is_some() {
                rec.init_completed = true;
            }
            if let Err(e) = registry::save(&rec) {
                eprintln!("smolvm-sim: recording '{name}' as running: {e}");
            }
            let _ = report.write_all(format!("ok {me} {init_pid} {sp} {workload}\n").as_bytes());
            drop(report);
            network::ipv6_loopback_relays(&r.ports);
            supervise(&set, init_pid, slirp);
            Ok(0)
        }
        Err((kind, op, reason)) => {
            eprintln!("smolvm-sim: boot of '{name}' failed: {op}: {reason}");
            let _ = report.write_all(err_line(kind, op, &reason).as_bytes());
            Ok(1)
        }
    }
}

type BootErr = (&'static str, &'static str, String);
type Booted = (i32, Option<network::Slirp>, Option<crate::egress::Room>);

fn start_guest(r: &Record, p: Personality) -> Result<Booted, BootErr> {
    let data = registry::data_dir(&r.name);
    rootfs::prepare(&data).map_err(|e| ("agent", "start", e))?;
    let (go_r, go_w) = namespaces::pipe().map_err(|e| ("agent", "start", e.to_string()))?;
    let (rep_r, rep_w) = namespaces::pipe().map_err(|e| ("agent", "start", e.to_string()))?;
    let parent = std::process::id() as i32;
    // SAFETY: the supervisor is single-threaded here.
    let pid = unsafe { namespaces::clone_into_new_namespaces() }
        .map_err(|e| ("agent", "start", format!("create namespaces: {e}")))?;
    if pid == 0 {
        drop(go_w);
        drop(rep_r);
        guest_init(r, p, &data, parent, go_r, rep_w);
    }
    drop(go_r);
    drop(rep_w);
    let kill_guest = |pid: i32| {
        // SAFETY: kill/waitpid on our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    };
    let mut slirp = None;
    let mut room = None;
    if r.network || !r.ports.is_empty() {
        if r.has_policy() {
            match crate::egress::Room::new(r, &data) {
                Ok(made) => room = Some(made),
                Err(e) => {
                    kill_guest(pid);
                    return Err((
                        "agent",
                        "configure virtio-net",
                        format!("failed to start the egress policy: {e}"),
                    ));
                }
            }
        }
        let s = match network::start(pid, &data, room.as_ref()) {
            Ok(s) => s,
            Err(e) => {
                kill_guest(pid);
                return Err((
                    "agent",
                    "configure virtio-net",
                    format!("failed to start virtio network runtime: {e}"),
                ));
            }
        };
        for (h, g) in &r.ports {
            if let Err(e) = network::add_hostfwd(&s.sock, "127.0.0.1", *h, *g) {
                eprintln!("smolvm-sim: hostfwd 127.0.0.1:{h} -> {g}: {e}");
                kill_guest(pid);
                drop(s);
                return Err((
                    "agent",
                    "configure virtio-net",
                    "failed to start virtio network runtime: Address already in use (os error 98)"
                        .to_string(),
                ));
            }
        }
        if let Some(room) = room.as_mut()
            && let Err(e) = room.open_dns(pid)
        {
            kill_guest(pid);
            drop(s);
            return Err((
                "agent",
                "configure virtio-net",
                format!("failed to start the egress policy: {e}"),
            ));
        }
        slirp = Some(s);
    }
    let mut gw = File::from(go_w);
    let _ = gw.write_all(b"g");
    drop(gw);
    let line = read_line(File::from(rep_r));
    if line == "ok" {
        return Ok((pid, slirp, room));
    }
    kill_guest(pid);
    if let Some(mut s) = slirp {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    Err(match parse_err(&line) {
        Some(SimError::Config { reason, .. }) => ("config", "start machine", reason),
        Some(SimError::Agent { op, reason }) if op == "init" => ("agent", "init", reason),
        Some(SimError::Agent { op, reason }) if op == "resolve secrets" => {
            ("agent", "resolve secrets", reason)
        }
        Some(SimError::Agent { reason, .. }) => ("agent", "start background CMD", reason),
        _ => (
            "agent",
            "start",
            "guest init exited during boot".to_string(),
        ),
    })
}

/// Block the signals the supervisor waits for (before any thread exists, so every thread
/// inherits the mask and only `supervise` receives them).
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: building and installing a signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Wait for SIGTERM/SIGINT/SIGHUP or the guest's death, then tear everything down.
fn supervise(set: &libc::sigset_t, init_pid: i32, slirp: Option<network::Slirp>) {
    // SAFETY: wait syscalls on our own children.
    unsafe {
        let ts = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        let mut reaped = false;
        loop {
            let sig = libc::sigtimedwait(set, std::ptr::null_mut(), &ts);
            if sig == libc::SIGTERM || sig == libc::SIGINT || sig == libc::SIGHUP {
                break;
            }
            let mut st = 0;
            let w = libc::waitpid(init_pid, &mut st, libc::WNOHANG);
            if w == init_pid
                || (w < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
            {
                reaped = true;
                break;
            }
        }
        // Never signal a PID we have already reaped: it may belong to someone else now.
        if !reaped {
            libc::kill(init_pid, libc::SIGKILL);
            libc::waitpid(init_pid, std::ptr::null_mut(), 0);
        }
    }
    if let Some(mut s) = slirp {
        let _ = s.child.kill();
        let _ = s.child.wait();
        let _ = std::fs::remove_file(&s.sock);
    }
}

/// The guest's PID 1 is a fork of the supervisor, whose environment is `machine start`'s
/// (credential values included, as smolvm's VMM has them on the host). A VM's PID 1 holds
/// none of it: blank the inherited environment block, which the guest could otherwise read
/// at `/proc/1/environ`. Called once its last reader (secret resolution) is done.
fn scrub_inherited_environ() {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return;
    };
    // Fields 50 and 51 of stat (env_start, env_end); `rest` starts at field 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (Some(Ok(start)), Some(Ok(end))) = (
        f.get(47).map(|v| v.parse::<usize>()),
        f.get(48).map(|v| v.parse::<usize>()),
    ) else {
        return;
    };
    if start == 0 || end <= start {
        return;
    }
    // SAFETY: [env_start, env_end) is this process's own environment block on its stack,
    // mapped writable; nothing reads the environment after this point.
    unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
}

/// The guest's PID 1: build the root, set the hostname, bring up lo, wait for the network,
/// run first-boot init commands and the workload, then reap orphans forever.
fn guest_init(
    r: &Record,
    p: Personality,
    data: &Path,
    parent: i32,
    go_r: OwnedFd,
    rep_w: OwnedFd,
) -> ! {
    // SAFETY: prctl is a plain syscall. (The parent is invisible from a new PID namespace,
    // so the tiny "supervisor died before prctl" window cannot be checked; the supervisor's
    // own teardown covers it.)
    let _ = parent;
    // SAFETY: as above; fd 3 is the supervisor's report pipe, not ours to keep.
    unsafe {
        libc::close(3);
        libc::prctl(
            libc::PR_SET_NAME,
            c"smolvm-agent".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    let mut rep = File::from(rep_w);
    let fail = |rep: &mut File, kind: &str, op: &str, reason: String| -> ! {
        let _ = rep.write_all(err_line(kind, op, &reason).as_bytes());
        // SAFETY: terminating the guest's PID 1 after reporting.
        unsafe { libc::_exit(1) }
    };
    let net = match (r.network || !r.ports.is_empty(), r.has_policy()) {
        (false, _) => rootfs::GuestNet::None,
        (true, false) => rootfs::GuestNet::Nat,
        (true, true) => rootfs::GuestNet::Filtered,
    };
    // Read on the host side of the pivot; installed in the guest after it.
    let ca_pem = if r.credentials.is_empty() {
        None
    } else {
        match std::fs::read_to_string(crate::credentials::ca::dir(data).join("ca.pem")) {
            Ok(pem) => Some(pem),
            Err(e) => fail(
                &mut rep,
                "agent",
                "start",
                format!("credential CA of '{}': {e}", r.name),
            ),
        }
    };
    let root = if r.host_userland {
        rootfs::GuestRoot::HostUserland
    } else {
        match &r.sim_image {
            Some(image) => rootfs::GuestRoot::Image {
                lower: crate::image::cache::rootfs(image),
                // A machine made from a pack boots the pack's layer read-only.
                pack_layer: crate::pack::boot_layer(data),
                tmp_tmpfs: p.is_head(),
            },
            None => fail(
                &mut rep,
                "config",
                "start machine",
                "no image root to boot (the image was never pulled)".to_string(),
            ),
        }
    };
    if let Err(e) = rootfs::assemble_and_pivot(data, &root, net) {
        fail(
            &mut rep,
            "config",
            "start machine",
            format!("guest root filesystem: {e}"),
        );
    }
    if let Some(pem) = &ca_pem
        && let Err(e) = rootfs::install_credential_ca(pem)
    {
        fail(&mut rep, "agent", "start", format!("credential CA: {e}"));
    }
    if let Err(e) = namespaces::set_hostname(&p.hostname(&r.name)) {
        fail(
            &mut rep,
            "config",
            "start machine",
            format!("sethostname: {e}"),
        );
    }
    if let Err(e) = namespaces::loopback_up() {
        fail(
            &mut rep,
            "config",
            "start machine",
            format!("loopback up: {e}"),
        );
    }
    let mut b = [0u8; 1];
    if File::from(go_r).read(&mut b).ok() != Some(1) {
        // SAFETY: the supervisor went away; nothing to report to.
        unsafe { libc::_exit(1) }
    }
    let secrets = match resolve_secrets(&r.secret_env, &r.secret_file) {
        Ok(s) => s,
        Err(e) => fail(&mut rep, "agent", "resolve secrets", e),
    };
    let env = guest_env(&r.guest_base_env(), &secrets);
    scrub_inherited_environ();
    let cwd = r.workdir.clone().unwrap_or_else(|| "/".to_string());
    if !r.init_completed {
        for (i, c) in r.init.iter().enumerate() {
            let out = Command::new("/bin/sh")
                .arg("-c")
                .arg(c)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .current_dir(&cwd)
                .stdin(Stdio::null())
                .output();
            match out {
                Ok(o) if o.status.success() => {}
                Ok(o) => fail(
                    &mut rep,
                    "agent",
                    "init",
                    format!(
                        "init[{i}] failed (exit {}): {}",
                        o.status.code().unwrap_or(-1),
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                ),
                Err(e) => fail(&mut rep, "agent", "init", format!("init[{i}] failed: {e}")),
            }
        }
    }
    let mut argv = r.entrypoint.clone();
    argv.extend(r.cmd.iter().cloned());
    if let Some((prog, args)) = argv.split_first() {
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&cwd)
            .stdin(Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        if let Err(e) = cmd.spawn() {
            fail(
                &mut rep,
                "agent",
                "start background CMD",
                format!("failed to start workload {prog:?}: {e}"),
            );
        }
    }
    let _ = rep.write_all(b"ok\n");
    drop(rep);
    // Reap every orphan promptly: wait for SIGCHLD (blocked, so it queues) between rounds.
    // SAFETY: signal-mask and wait syscalls; PID 1 of the guest inherits every orphan.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let ts = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        loop {
            while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
            libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
        }
    }
}
