//! `machine exec` and `machine shell`: run a command inside a running machine.
//!
//! This process stays in the host namespaces and relays I/O. It joins the guest's PID
//! namespace for its children only (setns on the pid ns affects children), and the child
//! joins the guest's UTS, network and mount namespaces (the last one also switches its root to
//! the guest root) before exec, so it sees the workload's processes and files. Never
//! auto-starts a stopped machine.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cli::{ExecCmd, ShellCmd};
use crate::context::Ctx;
use crate::faults::Action;
use crate::machine::disconnect;
use crate::machine::namespaces::{self, GuestNs};
use crate::machine::supervisor::{self, guest_env};
use crate::output::{SimError, VerbResult, agent};
use crate::registry::Record;

enum Io {
    Buffered,
    Stream,
    Interactive,
    Tty,
    Detach,
}

pub fn shell(ctx: &Ctx, c: ShellCmd) -> VerbResult {
    let name = c.name.unwrap_or_else(|| "default".to_string());
    let r = super::require_running(ctx, &name)?;
    ctx.fault_point("exec", &name)?;
    let argv = vec!["/bin/sh".to_string()];
    let secrets = supervisor::resolve_secrets(&r.secret_env, &r.secret_file)
        .map_err(|e| agent("resolve secrets", e))?;
    let env = guest_env(&r.guest_base_env(), &secrets);
    let fresh = fresh_container(ctx, &r);
    run_in_guest(
        &r,
        &argv,
        env,
        r.workdir.clone(),
        None,
        Io::Tty,
        fresh,
        false,
    )
}

pub fn run(ctx: &Ctx, c: ExecCmd) -> VerbResult {
    let name = c.name.clone().unwrap_or_else(|| "default".to_string());
    let r = super::require_running(ctx, &name)?;
    let fault = ctx.fault_point("exec", &name)?;
    let io = if ctx.extras.detach {
        Io::Detach
    } else if c.tty {
        Io::Tty
    } else if c.interactive {
        Io::Interactive
    } else if c.stream {
        Io::Stream
    } else {
        Io::Buffered
    };
    // Record env, the record's secrets, then this call's secrets and -e (later wins).
    let mut extra = supervisor::resolve_secrets(&r.secret_env, &r.secret_file)
        .map_err(|e| agent("resolve secrets", e))?;
    extra.extend(
        supervisor::resolve_secrets(&c.secret_env, &c.secret_file)
            .map_err(|e| agent("resolve secrets", e))?,
    );
    extra.extend(super::parse_env(&c.env));
    let env = guest_env(&r.guest_base_env(), &extra);
    let workdir = c.workdir.clone().or_else(|| r.workdir.clone());
    let fresh = fresh_container(ctx, &r);
    let held = fault == Some(Action::Held);
    let code = run_in_guest(&r, &c.command, env, workdir, c.timeout, io, fresh, held)?;
    if fault == Some(Action::After) {
        return Err(crate::context::fault_error("exec", &name));
    }
    Ok(code)
}

/// smolvm 1.0.4 without a running workload runs each exec in a fresh container whose PID 1
/// is the command: whatever the command left in the background dies with it. (With a
/// workload, and from 1.4 on always, exec joins a long-lived container and they survive.)
fn fresh_container(ctx: &Ctx, r: &Record) -> bool {
    !ctx.personality.is_head() && !r.workload_alive()
}

/// Kill every process of the exec's session (it called setsid), as a container teardown would.
fn kill_session(sid: i32) {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    let mut killed = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        // Fields after ")": state ppid pgrp session ...
        let session = rest
            .split_whitespace()
            .nth(3)
            .and_then(|v| v.parse::<i32>().ok());
        if session == Some(sid) {
            // SAFETY: kill(2) on a process of the session we created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed.push(pid);
        }
    }
    let t0 = std::time::Instant::now();
    while killed
        .iter()
        .any(|p| crate::registry::proc_start_time(*p).is_some())
        && t0.elapsed() < Duration::from_secs(2)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    st.code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// A pty master from the guest's own devpts instance, and the slave's number.
fn guest_pty(init_pid: i32) -> Result<(OwnedFd, u32), SimError> {
    let p = format!("/proc/{init_pid}/root/dev/pts/ptmx");
    let c = std::ffi::CString::new(p).unwrap_or_default();
    // SAFETY: open/ioctl on a path and fd we own.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(agent(
                "exec",
                format!("open pty: {}", std::io::Error::last_os_error()),
            ));
        }
        let m = OwnedFd::from_raw_fd(fd);
        let mut unlock: libc::c_int = 0;
        let mut n: libc::c_uint = 0;
        if libc::ioctl(fd, libc::TIOCSPTLCK, &mut unlock) != 0
            || libc::ioctl(fd, libc::TIOCGPTN, &mut n) != 0
        {
            return Err(agent(
                "exec",
                format!("pty: {}", std::io::Error::last_os_error()),
            ));
        }
        Ok((m, n))
    }
}

// `held` (the exec:held fault) is the eighth; a struct would churn every call site.
#[allow(clippy::too_many_arguments)]
fn run_in_guest(
    r: &Record,
    argv: &[String],
    env: Vec<(String, String)>,
    workdir: Option<String>,
    timeout: Option<Duration>,
    io: Io,
    fresh_container: bool,
    held: bool,
) -> VerbResult {
    let init_pid = r
        .init_pid
        .ok_or_else(|| crate::output::not_running(&r.name))?;
    let ns = GuestNs::open(init_pid).map_err(|_| crate::output::not_running(&r.name))?;
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| agent("exec", "empty command"))?;
    let pty = match io {
        Io::Tty => Some(guest_pty(init_pid)?),
        _ => None,
    };
    // Children of this process are born in the guest's PID namespace. (Threads cannot be
    // created while that is in effect, so it is undone right after the spawn.)
    let own_pidns =
        std::fs::File::open("/proc/self/ns/pid").map_err(|e| agent("exec", e.to_string()))?;
    namespaces::setns(ns.pid.as_raw_fd(), libc::CLONE_NEWPID)
        .map_err(|e| agent("exec", format!("join pid namespace: {e}")))?;
    let cwd =
        std::ffi::CString::new(workdir.unwrap_or_else(|| "/".to_string())).unwrap_or_default();
    let cwd_display = cwd.to_string_lossy().into_owned();
    let joins = ns.raw_after_fork();
    let slave_path = pty
        .as_ref()
        .map(|(_, n)| std::ffi::CString::new(format!("/dev/pts/{n}")).unwrap_or_default());
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)));
    match io {
        Io::Buffered => cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        Io::Stream => cmd
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit()),
        Io::Interactive => cmd
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit()),
        Io::Tty | Io::Detach => cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    };
    // SAFETY: between fork and exec only syscalls (setns, chdir, setsid, open, ioctl, dup2).
    unsafe {
        cmd.pre_exec(move || {
            for (fd, t) in joins {
                if libc::setns(fd, t) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::chdir(cwd.as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::umask(namespaces::GUEST_UMASK);
            libc::setsid();
            if held {
                // The `exec:held` fault: killed with this client (crate::faults::hold_started).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            }
            if let Some(p) = &slave_path {
                let s = libc::open(p.as_ptr(), libc::O_RDWR);
                if s < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::ioctl(s, libc::TIOCSCTTY, 0);
                for t in 0..3 {
                    libc::dup2(s, t);
                }
                if s > 2 {
                    libc::close(s);
                }
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    let _ = namespaces::setns(own_pidns.as_raw_fd(), libc::CLONE_NEWPID);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "exec failed: {prog}: executable file not found in $PATH or cwd {cwd_display} missing"
            );
            return Ok(127);
        }
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            eprintln!("exec failed: {prog}: permission denied");
            return Ok(126);
        }
        Err(e) => return Err(agent("exec", format!("{prog}: {e}"))),
    };
    let pid = child.id() as i32;
    if let Io::Detach = io {
        println!("{}", namespaces::guest_pid(pid).unwrap_or(pid));
        return Ok(0);
    }
    // From here until the command ends, this process dying kills the command (smolvm's
    // agent does on a client disconnect).
    let watch = disconnect::watch(pid);
    if watch.is_err() {
        // SAFETY: kill the command we just started; without a watcher it must not run.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = child.wait();
    }
    let watch = watch?;
    if held {
        crate::faults::hold_started(pid);
    }
    let timed_out = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    if let Some(t) = timeout {
        let (to, dn) = (timed_out.clone(), done.clone());
        std::thread::spawn(move || {
            std::thread::sleep(t);
            if !dn.load(Ordering::SeqCst) {
                to.store(true, Ordering::SeqCst);
                // SAFETY: kill the child's process group (it called setsid).
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        });
    }
    let status = match io {
        Io::Buffered => {
            let out = drain(child.stdout.take());
            let err = drain(child.stderr.take());
            let st = child.wait();
            if fresh_container {
                kill_session(pid);
            }
            let out = out.finish();
            let err = err.finish();
            let _ = std::io::stdout().write_all(&out);
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().write_all(&err);
            st
        }
        Io::Tty => {
            let m = pty.as_ref().map(|(m, _)| m.as_raw_fd()).unwrap_or(-1);
            relay_pty(m, &mut child)
        }
        _ => child.wait(),
    };
    done.store(true, Ordering::SeqCst);
    watch.release();
    if fresh_container {
        kill_session(pid);
    }
    let st = status.map_err(|e| agent("exec", e.to_string()))?;
    if timed_out.load(Ordering::SeqCst) {
        return Ok(124);
    }
    Ok(exit_code(st))
}

/// Reads a pipe on a thread; `finish` waits a short grace for EOF after the command exited
/// (a backgrounded grandchild may keep the pipe open) and returns what was read.
struct Drain {
    buf: Arc<std::sync::Mutex<Vec<u8>>>,
    eof: Arc<AtomicBool>,
}

fn drain<R: Read + Send + 'static>(src: Option<R>) -> Drain {
    let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
    let eof = Arc::new(AtomicBool::new(false));
    let (b, e) = (buf.clone(), eof.clone());
    std::thread::spawn(move || {
        if let Some(mut s) = src {
            let mut chunk = [0u8; 65536];
            loop {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Ok(mut g) = b.lock() {
                            g.extend_from_slice(&chunk[..n]);
                        }
                    }
                }
            }
        }
        e.store(true, Ordering::SeqCst);
    });
    Drain { buf, eof }
}

impl Drain {
    fn finish(self) -> Vec<u8> {
        let t0 = std::time::Instant::now();
        while !self.eof.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_millis(300) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.buf.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

/// Copy host stdin → pty master and master → host stdout until the command exits and the
/// guest side has no more output.
fn relay_pty(
    master: RawFd,
    child: &mut std::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    use nix::sys::termios;
    let stdin = std::io::stdin();
    let saved = termios::tcgetattr(&stdin).ok();
    if let Some(t) = &saved {
        let mut raw = t.clone();
        termios::cfmakeraw(&mut raw);
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &raw);
        // SAFETY: copy the window size between two tty fds we hold.
        unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            if libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) == 0 {
                libc::ioctl(master, libc::TIOCSWINSZ, &ws);
            }
        }
    }
    let mut stdin_open = true;
    let mut exited = None;
    let mut last_size: (u16, u16) = (0, 0);
    let mut buf = [0u8; 8192];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: master,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if stdin_open { 0 } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll/read/write on fds we hold, with buffers we own.
        unsafe {
            let pr = libc::poll(fds.as_mut_ptr(), 2, 100);
            if saved.is_some() {
                // Follow the host terminal's size (cheap poll instead of a SIGWINCH handler).
                let mut ws: libc::winsize = std::mem::zeroed();
                if libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) == 0
                    && (ws.ws_row, ws.ws_col) != last_size
                {
                    last_size = (ws.ws_row, ws.ws_col);
                    libc::ioctl(master, libc::TIOCSWINSZ, &ws);
                }
            }
            if pr == 0 {
                if let Ok(Some(st)) = child.try_wait() {
                    exited = Some(st);
                    break;
                }
                continue;
            }
            if pr < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            if fds[0].revents != 0 {
                let n = libc::read(master, buf.as_mut_ptr().cast(), buf.len());
                if n <= 0 {
                    break;
                }
                let mut out = std::io::stdout();
                let _ = out.write_all(&buf[..n as usize]);
                let _ = out.flush();
            }
            if stdin_open && fds[1].revents != 0 {
                let n = libc::read(0, buf.as_mut_ptr().cast(), buf.len());
                if n <= 0 {
                    stdin_open = false;
                    // End of input: send the terminal's EOF character.
                    let eof = [4u8];
                    libc::write(master, eof.as_ptr().cast(), 1);
                } else {
                    libc::write(master, buf.as_ptr().cast(), n as usize);
                }
            }
        }
    }
    if let Some(t) = &saved {
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, t);
    }
    match exited {
        Some(st) => Ok(st),
        None => child.wait(),
    }
}
