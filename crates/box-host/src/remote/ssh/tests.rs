//! The connection against a real sshd (`sshd -i` as the ProxyCommand; nothing listens).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::test_host::{TestHost, test_host};
use super::*;
use crate::remote::quote::quote;

fn session(h: &TestHost) -> Arc<Session> {
    let target = SshTarget::new(&h.host, &h.ssh_command, Some(&h.state())).unwrap();
    Arc::new(Session::new(target))
}

fn sh(s: &Session, script: &str, args: &[&str], timeout: Duration) -> Result<Output, SmolvmError> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    s.shell(script, &args, timeout)
}

fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

fn wait_until(what: impl Fn() -> bool, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    what()
}

/// The master's pid, from `ssh -O check` ("Master running (pid=N)").
fn master_pid(s: &Session) -> Option<i32> {
    let out = s.control(&["-O", "check"]).ok()?;
    let at = out.stderr.find("pid=")?;
    out.stderr[at + 4..]
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

#[test]
fn one_master_is_shared_and_the_last_user_closes_it() {
    let Some(h) = test_host() else { return };
    let a = session(&h);
    let b = session(&h);
    let out = sh(&a, "echo hello from $(id -u)", &[], Duration::from_secs(30)).unwrap();
    assert_eq!(out.stdout, "hello from 0\n");
    assert_eq!(out.code, Some(0));
    let first = master_pid(&a).expect("a master runs after the first call");
    sh(&b, "true", &[], Duration::from_secs(30)).unwrap();
    assert_eq!(
        master_pid(&b),
        Some(first),
        "the second user reuses the master"
    );
    drop(a);
    assert_eq!(master_pid(&b), Some(first), "another user still holds it");
    let probe = session(&h);
    drop(b);
    assert!(!probe.master_alive(), "the last user closed the master");
    assert!(wait_until(
        || gone(&first.to_string()),
        Duration::from_secs(5)
    ));
}

#[test]
fn a_dead_master_is_opened_again() {
    let Some(h) = test_host() else { return };
    let s = session(&h);
    sh(&s, "true", &[], Duration::from_secs(30)).unwrap();
    let first = master_pid(&s).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(wait_until(|| !s.master_alive(), Duration::from_secs(5)));
    let out = sh(&s, "echo again", &[], Duration::from_secs(30)).unwrap();
    assert_eq!(out.stdout, "again\n");
    let second = master_pid(&s).unwrap();
    assert_ne!(first, second);
}

#[test]
fn hostile_arguments_arrive_unchanged_and_nothing_runs() {
    let Some(h) = test_host() else { return };
    let s = session(&h);
    let marker = h.dir.path().join("pwned");
    let hostile = [
        "two words",
        "it's",
        "$(touch PWNED)",
        "`touch PWNED`",
        "a; touch PWNED",
        "line\nbreak",
        "*",
        "$HOME",
        "\\",
        "",
        "-n",
    ];
    let hostile: Vec<String> = hostile
        .iter()
        .map(|w| w.replace("PWNED", &marker.to_string_lossy()))
        .collect();
    let refs: Vec<&str> = hostile.iter().map(String::as_str).collect();
    let out = sh(
        &s,
        &format!("cd {} && printf '%s\\0' \"$@\"", quote("/")),
        &refs,
        Duration::from_secs(30),
    )
    .unwrap();
    let got: Vec<&str> = out.stdout.split('\0').collect();
    assert_eq!(got[..got.len() - 1], refs[..]);
    assert!(!marker.exists());
}

/// ssh exits 255 when the connection fails, and so may a guest command: the trailer
/// tells them apart.
#[test]
fn a_calls_own_255_is_its_own_and_a_lost_connection_is_said() {
    let Some(h) = test_host() else { return };
    let s = session(&h);
    let out = sh(
        &s,
        "echo 'Error: mine' >&2; exit 255",
        &[],
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(out.code, Some(255));
    assert_eq!(out.stderr, "Error: mine\n");
    // The connection dies mid-call: the master is killed while the call sleeps.
    sh(&s, "true", &[], Duration::from_secs(30)).unwrap();
    let master = master_pid(&s).unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(master),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let err = sh(&s, "sleep 20; exit 255", &[], Duration::from_secs(30)).unwrap_err();
    killer.join().unwrap();
    assert!(matches!(err, SmolvmError::ConnectionLost { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(
            "lost the connection to ssh://boxtest during `sh -c … on ssh://boxtest` (ssh said: "
        ),
        "{text}"
    );
}

/// The runner's deadline kills the local ssh; the remote call and its children must not
/// outlive it.
#[test]
fn a_deadline_leaves_nothing_running_on_the_remote() {
    let Some(h) = test_host() else { return };
    let s = session(&h);
    let pids = h.dir.path().join("pids");
    let err = sh(
        &s,
        r#"sleep 300 & echo $$ $! > "$1"; wait"#,
        &[&pids.to_string_lossy()],
        Duration::from_secs(3),
    )
    .unwrap_err();
    assert!(matches!(err, SmolvmError::Timeout { .. }), "{err:?}");
    let text = std::fs::read_to_string(&pids).unwrap();
    for pid in text.split_whitespace() {
        assert!(
            wait_until(|| gone(pid), Duration::from_secs(6)),
            "remote process {pid} still runs"
        );
    }
}

#[test]
fn an_unknown_or_changed_host_key_is_told_apart_with_the_fix() {
    let Some(h) = test_host() else { return };
    h.forget_host_key();
    let err = sh(&session(&h), "true", &[], Duration::from_secs(30)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SmolvmError::Connect { .. }), "{err:?}");
    assert!(
        text.starts_with("cannot connect to ssh://boxtest: the host key of ssh://boxtest is unknown: run `ssh -F "),
        "{text}"
    );
    assert!(text.contains(" boxtest` once to check it"), "{text}");
    h.change_host_key();
    let text = sh(&session(&h), "true", &[], Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert!(
        text.starts_with("cannot connect to ssh://boxtest: the host key of ssh://boxtest has changed: run `ssh -F "),
        "{text}"
    );
}

#[test]
fn a_missing_ssh_is_named() {
    let Some(h) = test_host() else { return };
    let target = SshTarget::new(&h.host, "/nonexistent/ssh -F x", Some(&h.state())).unwrap();
    let s = Session::new(target);
    let err = sh(&s, "true", &[], Duration::from_secs(5)).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("ssh not found ('/nonexistent/ssh')"),
        "{err}"
    );
}

#[test]
fn forwards_bind_loopback_only_and_end_with_their_guard() {
    use std::io::{Read, Write};
    let Some(h) = test_host() else { return };
    let s = session(&h);
    // The "remote" is this machine: a server on its loopback plays the published port.
    let server = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let remote_port = server.local_addr().unwrap().port();
    let serve = std::thread::spawn(move || {
        let (mut c, _) = server.accept().unwrap();
        c.write_all(b"executor\n").unwrap();
    });
    let fwd = s.forward_local(remote_port).unwrap();
    let local = fwd.local_port();
    assert_ne!(local, remote_port);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", local)).unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got).unwrap();
    assert_eq!(got, "executor\n");
    serve.join().unwrap();
    // Only 127.0.0.1 listens on that port.
    let listening = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_hex = format!(":{local:04X} ");
    for line in listening.lines().filter(|l| l.contains(&port_hex)) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(3) == Some(&"0A") && fields[1].ends_with(&port_hex[..5]) {
            assert!(
                fields[1].starts_with("0100007F"),
                "listens on {}",
                fields[1]
            );
        }
    }
    drop(fwd);
    assert!(
        wait_until(
            || std::net::TcpStream::connect(("127.0.0.1", local)).is_err(),
            Duration::from_secs(5)
        ),
        "the forward outlived its guard"
    );
}

#[test]
fn socket_paths_stay_short_and_private() {
    let host = RemoteHost::parse("ssh://u@h").unwrap();
    let deep = std::path::PathBuf::from(format!("/tmp/{}", "d".repeat(120)));
    let t = SshTarget::new(&host, "ssh", Some(&deep)).unwrap();
    assert!(
        t.control_path()
            .to_string_lossy()
            .starts_with("/tmp/box-ssh-"),
        "{}",
        t.control_path().display()
    );
    assert!(t.control_path().to_string_lossy().len() <= MAX_SOCKET_PATH);
    let near = SshTarget::new(&host, "ssh", Some(std::path::Path::new("/s"))).unwrap();
    assert!(near.control_path().starts_with("/s/ssh/"));
    // Another ssh command (another -F config) is another connection.
    let other = SshTarget::new(&host, "ssh -F ./cfg", Some(std::path::Path::new("/s"))).unwrap();
    assert_ne!(near.control_path(), other.control_path());
    assert!(SshTarget::new(&host, "ssh 'open", None).is_err());
}

/// box's options precede the user's words: ssh keeps the first value of each `-o` option,
/// so `BOX_SSH_COMMAND=ssh -o BatchMode=no` cannot make ssh prompt.
#[test]
fn box_options_win_over_the_users_ssh_command() {
    let host = RemoteHost::parse("ssh://u@h:2222").unwrap();
    let t = SshTarget::new(
        &host,
        "ssh -o BatchMode=no -o ConnectTimeout=99 -F ./cfg",
        Some(std::path::Path::new("/s")),
    )
    .unwrap();
    let cmd = t.command(&["-T"], Some("echo 'x'"));
    assert_eq!(cmd.get_program(), "ssh");
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let pos = |w: &str| args.iter().position(|a| a == w).unwrap();
    assert!(pos("BatchMode=yes") < pos("BatchMode=no"), "{args:?}");
    assert!(
        pos("ConnectTimeout=30") < pos("ConnectTimeout=99"),
        "{args:?}"
    );
    assert_eq!(
        args[args.len() - 4..],
        ["./cfg", "u@h", "--", "echo 'x'"],
        "{args:?}"
    );
    assert!(pos("2222") < pos("u@h"));
    // The child environment is ssh's allowlist, never box's own.
    let envs: Vec<String> = cmd
        .get_envs()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert!(
        envs.iter()
            .all(|k| crate::child_env::allowed(ChildKind::Ssh, k)),
        "{envs:?}"
    );
}

/// ssh's letter flags win over box's `-o` options (`-A` after `-o ForwardAgent=no` forwards
/// the agent), so a `BOX_SSH_COMMAND` with one, or with the `-o` word, is refused before
/// any ssh runs, naming the word.
#[test]
fn forwarding_in_the_users_ssh_command_is_refused_before_ssh_runs() {
    let host = RemoteHost::parse("ssh://u@h").unwrap();
    for (command, word) in [
        ("ssh -A -F ./cfg", "-A"),
        ("ssh -X", "-X"),
        ("ssh -Y", "-Y"),
        ("ssh -S /tmp/mine", "-S"),
        ("ssh -M", "-M"),
        ("ssh -o ForwardAgent=yes", "-o ForwardAgent"),
        ("ssh -o ControlPath=/tmp/mine", "-o ControlPath"),
    ] {
        let err = SshTarget::new(&host, command, None).unwrap_err();
        assert!(matches!(err, SmolvmError::Connect { .. }), "{err:?}");
        assert!(
            err.to_string().starts_with(&format!(
                "cannot connect to ssh://u@h: BOX_SSH_COMMAND may not set {word}: "
            )),
            "{command}: {err}"
        );
    }
}

/// A `LocalForward` or `RemoteForward` in the user's ssh config opens no listener: a call
/// (a mux client) would have the master open its config's forwards, for as long as the
/// master lives. (The "remote" is this machine, so a remote forward would listen here.)
#[test]
fn forwards_in_the_users_config_open_no_listener() {
    let Some(h) = test_host() else { return };
    let (local, remote) = (free_local_port().unwrap(), free_local_port().unwrap());
    let cfg = h.dir.path().join("ssh_config");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "  LocalForward 127.0.0.1:{local} 127.0.0.1:9\n  RemoteForward 127.0.0.1:{remote} 127.0.0.1:9\n"
    ));
    std::fs::write(&cfg, text).unwrap();
    let listening = |port: u16| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    let s = session(&h);
    let out = sh(&s, "sleep 1; echo done", &[], Duration::from_secs(30)).unwrap();
    assert_eq!(out.stdout, "done\n");
    for port in [local, remote] {
        assert!(!listening(port), "port {port} of the user's config listens");
    }
    let fwd = s.forward_local(9).unwrap();
    assert!(listening(fwd.local_port()), "box's own forward still opens");
}

/// A call that leaves a daemon holding its output (as a VMM might) still ends: ssh would
/// wait for that daemon, the runner stops at the trailer.
#[test]
fn a_daemon_holding_the_output_does_not_hold_the_call() {
    let Some(h) = test_host() else { return };
    let s = session(&h);
    let start = Instant::now();
    let out = sh(&s, "sleep 12 & echo done", &[], Duration::from_secs(30)).unwrap();
    assert_eq!(out.stdout, "done\n");
    assert_eq!(out.code, Some(0));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
}

/// Without root (here: this test binary run again as `nobody`), the sshd-backed tests fail
/// under `CI=true`, where a silent pass would leave the transport untested, and elsewhere
/// pass with a visible `SKIPPED:` line.
#[test]
fn without_root_the_sshd_tests_fail_under_ci_and_say_skipped_elsewhere() {
    let exe = std::env::current_exe().unwrap();
    let run = |ci: Option<&str>| {
        let mut cmd = if nix::unistd::getuid().is_root() {
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(&exe);
            c
        } else {
            std::process::Command::new(&exe)
        };
        cmd.args([
            "--exact",
            "remote::ssh::tests::a_dead_master_is_opened_again",
            "--test-threads=1",
        ])
        .env_remove("CI");
        if let Some(v) = ci {
            cmd.env("CI", v);
        }
        cmd.output().unwrap()
    };
    let in_ci = run(Some("true"));
    let said = String::from_utf8_lossy(&in_ci.stdout).into_owned()
        + &String::from_utf8_lossy(&in_ci.stderr);
    assert!(!in_ci.status.success(), "passed under CI=true: {said}");
    assert!(
        said.contains("ssh transport tests need: root"),
        "the failure does not say what is missing: {said}"
    );
    assert!(said.contains("1 failed"), "{said}");
    let here = run(None);
    let stderr = String::from_utf8_lossy(&here.stderr);
    assert!(here.status.success(), "{here:?}");
    assert!(
        stderr.contains("SKIPPED: ssh transport tests need: root"),
        "no visible SKIPPED line: {stderr}"
    );
    assert!(
        String::from_utf8_lossy(&here.stdout).contains("1 passed"),
        "the filter ran no test: {here:?}"
    );
}
