//! The driver over ssh: the same calls, texts and errors as locally, with smolvm (a
//! stand-in script) on the "remote" side of a real sshd.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::remote::ssh::test_host::{TestHost, test_host};
use crate::smolvm::Stream;

/// A stand-in smolvm installed on the remote (this machine), driven over ssh.
fn remote_fake(h: &TestHost, script: &str) -> Smolvm {
    let dir = h.dir.path().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let _ = crate::smolvm::fake_smolvm(&dir, script);
    let target = SshTarget::new(&h.host, &h.ssh_command, Some(&h.state())).unwrap();
    Smolvm::over_ssh(
        Arc::new(Session::new(target)),
        &dir.join("smolvm").to_string_lossy(),
        None,
    )
}

#[test]
fn calls_read_smolvms_texts_and_errors_as_locally() {
    let Some(h) = test_host() else { return };
    let s = remote_fake(
        &h,
        r#"case "$*" in
  "--version") echo 'smolvm 1.9.2';;
  "machine ls --json") echo '[{"name":"alpha","state":"running"}]';;
  "machine start --name gone") echo "Starting machine 'gone'..." >&2; echo 'Error: vm not found: gone' >&2; exit 1;;
  "machine stop --name crash") printf 'thread main panicked' >&2; exit 101;;
  *) exit 9;;
esac"#,
    );
    assert_eq!(s.version().unwrap(), SmolvmVersion::new(1, 9, 2));
    assert_eq!(s.find("alpha").unwrap().unwrap().state.as_str(), "running");
    let err = s.start("gone").unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert_eq!(
        err.to_string(),
        "`smolvm machine start --name gone on ssh://boxtest` failed: vm not found: gone"
    );
    // A last line with no newline is still smolvm's, not glued to the trailer.
    assert_eq!(
        s.stop("crash").unwrap_err().to_string(),
        "`smolvm machine stop --name crash on ssh://boxtest` exited with status 101: thread main panicked"
    );
}

#[test]
fn a_guests_255_is_the_guests_and_lines_never_show_the_trailer() {
    let Some(h) = test_host() else { return };
    let s = remote_fake(
        &h,
        r#"shift 5; echo "guest ran: $*"; echo 'warn: guest stderr' >&2; exit 255"#,
    );
    let mut lines = Vec::new();
    let mut cb = |_: Stream, l: &str| lines.push(l.to_string());
    let out = s
        .exec(
            "alpha",
            &["sh", "-c", "it's $(not) run"],
            ExecOpts {
                on_line: Some(&mut cb),
                ..ExecOpts::default()
            },
        )
        .unwrap();
    assert_eq!(out.code, Some(255));
    assert_eq!(out.stdout, "guest ran: -- sh -c it's $(not) run\n");
    assert_eq!(out.stderr, "warn: guest stderr\n");
    lines.sort();
    assert_eq!(
        lines,
        ["guest ran: -- sh -c it's $(not) run", "warn: guest stderr"]
    );
}

#[test]
fn a_missing_remote_smolvm_says_box_remote_smolvm() {
    let Some(h) = test_host() else { return };
    let target = SshTarget::new(&h.host, &h.ssh_command, Some(&h.state())).unwrap();
    let s = Smolvm::over_ssh(Arc::new(Session::new(target)), "/nonexistent/smolvm", None);
    let err = s.version().unwrap_err();
    assert!(matches!(err, SmolvmError::RemoteMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("set BOX_REMOTE_SMOLVM"), "{err}");
}

#[test]
fn the_pack_cache_cap_reaches_remote_smolvm_on_its_command_line_only() {
    let Some(h) = test_host() else { return };
    let log = h.dir.path().join("seen");
    let s = remote_fake(
        &h,
        &format!(
            "echo \"cap=$SMOLVM_PACK_CACHE_MAX_BYTES lang=${{LANG-unset}} pp=${{BOX_PASSPHRASE-unset}}\" > {}",
            log.display()
        ),
    );
    s.create_from(&CreateFromSpec {
        name: "beta".into(),
        pack: "/remote/bases/k.smolmachine".into(),
        ports: vec![],
        cpus: 2,
        mem_mib: 2048,
        env: vec![],
        labels: vec![],
        policy: Vec::new(),
    })
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "cap=17179869184 lang=unset pp=unset\n"
    );
}

/// A stand-in whose `machine cp A B` copies with `NAME:` stripped, logging its arguments.
fn cp_fake(h: &TestHost) -> Smolvm {
    remote_fake(
        h,
        r#"[ "$1 $2" = "machine cp" ] || exit 9
case "$3$4" in *boom*) echo 'Error: agent operation failed: read file: boom' >&2; exit 1;; esac
cp "${3#*:}" "${4#*:}""#,
    )
}

#[test]
fn parts_stream_both_ways_through_private_temp_dirs_that_go() {
    let Some(h) = test_host() else { return };
    let s = cp_fake(&h);
    let local = h.dir.path().join("part.gpg");
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &payload).unwrap();
    let guest = h.dir.path().join("guest-side");
    s.copy_in(&local, "alpha", &guest.to_string_lossy())
        .unwrap();
    assert_eq!(std::fs::read(&guest).unwrap(), payload);
    let back = h.dir.path().join("back.gpg");
    s.copy_out("alpha", &guest.to_string_lossy(), &back)
        .unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), payload);
    // smolvm's own failure is smolvm's message, and nothing half-written stays.
    let lost = h.dir.path().join("lost.gpg");
    let err = s.copy_out("alpha", "/boom", &lost).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("failed: agent operation failed: read file: boom"),
        "{err}"
    );
    assert!(!lost.exists());
    // The remote side's temp dirs are gone.
    let left: Vec<_> = std::fs::read_dir(h.remote_tmp())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_cut_stream_is_an_error_never_a_short_part() {
    let Some(h) = test_host() else { return };
    let s = cp_fake(&h);
    let session = Arc::clone(s.session().unwrap());
    let guest = h.dir.path().join("guest-side");
    // Claims 10 bytes, sends 4: what a dropped connection looks like to the remote.
    let local = h.dir.path().join("short");
    std::fs::write(&local, b"four").unwrap();
    let (out, _) = session
        .call(
            RemoteCall {
                smolvm: &s.bin.to_string_lossy(),
                inner_script: &copy::copy_in_script(),
                args: &["10".into(), format!("alpha:{}", guest.display())],
                stdin: wrapper::Stdin::Pass,
                call: "t",
            },
            CallOpts::with_timeout(Duration::from_secs(30)),
            Io {
                stdin: Feed::File(std::fs::File::open(&local).unwrap(), 10),
                stdout: Sink::Capture,
                ..Io::default()
            },
        )
        .unwrap();
    assert_eq!(
        copy_problem(&out).as_deref(),
        Some("the stream ended after 4 of 10 bytes")
    );
    assert!(!guest.exists(), "a truncated part was copied in");
    assert_eq!(std::fs::read_dir(h.remote_tmp()).unwrap().count(), 0);
}

#[test]
fn host_files_are_asked_on_the_remote() {
    let Some(h) = test_host() else { return };
    let s = cp_fake(&h);
    let data = h.dir.path().join("vmdata");
    std::fs::create_dir_all(data.join("pack")).unwrap();
    assert!(s.host_path_exists(&data).unwrap());
    assert!(!s.host_path_exists(&data.join("nope")).unwrap());
    assert!(!s.layers_present(&data).unwrap());
    let shared = h.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join(".smolvm-extracted"), "").unwrap();
    std::fs::write(data.join(".pack-shared"), format!("{}\n", shared.display())).unwrap();
    assert!(s.layers_present(&data).unwrap());
}

#[test]
fn interactive_exec_returns_the_guests_code_and_says_a_lost_connection() {
    let Some(h) = test_host() else { return };
    let started = h.dir.path().join("started");
    let s = remote_fake(
        &h,
        &format!(
            r#"case "$*" in
  *"-- seven") exit 7;;
  *"-- own255") exit 255;;
  *"-- hang") touch {}; sleep 20;;
  *) exit 9;;
esac"#,
            started.display()
        ),
    );
    assert_eq!(s.exec_interactive("alpha", &[], &["seven"]).unwrap(), 7);
    assert_eq!(s.exec_interactive("alpha", &[], &["own255"]).unwrap(), 255);
    let session = Arc::clone(s.session().unwrap());
    let master = session
        .target()
        .command(&["-O", "check"], None)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&master.stderr).into_owned();
    let pid: i32 = text
        .split("pid=")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    // Killed once the guest command runs.
    let killer = std::thread::spawn(move || {
        let end = std::time::Instant::now() + Duration::from_secs(15);
        while !started.exists() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let err = s.exec_interactive("alpha", &[], &["hang"]).unwrap_err();
    killer.join().unwrap();
    assert!(matches!(err, SmolvmError::ConnectionLost { .. }), "{err:?}");
}

/// smolvm's own calls never exit above 128 by themselves: there it was killed by a signal,
/// as a local call's `None` says. exec's status stays the guest's (the shell cannot tell a
/// guest's 137 from smolvm's death).
#[test]
fn a_remote_smolvm_killed_by_a_signal_is_said_as_locally() {
    let Some(h) = test_host() else { return };
    let s = remote_fake(
        &h,
        r#"case "$*" in *exec*) exit 137;; *) kill -9 $$;; esac"#,
    );
    let err = s.stop("alpha").unwrap_err().to_string();
    assert!(
        err.starts_with("`smolvm machine stop --name alpha on ssh://boxtest` exited with a signal"),
        "{err}"
    );
    let out = s.exec("alpha", &["true"], ExecOpts::default()).unwrap();
    assert_eq!(out.code, Some(137));
}

/// Every regular file under `dir` that holds `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => found.extend(files_holding(&p, needle)),
            Ok(t)
                if t.is_file()
                    && std::fs::read(&p)
                        .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) =>
            {
                found.push(p);
            }
            _ => {}
        }
    }
    found
}

/// The processes of this machine whose `file` (`cmdline`, `environ`) holds `needle`, as
/// their command lines.
fn processes_holding(file: &str, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = e.path();
        if let Ok(b) = std::fs::read(p.join(file))
            && b.windows(needle.len()).any(|w| w == needle)
        {
            let cmd = std::fs::read(p.join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    found
}

/// A bound API key for a remote `machine start` (issue 33): it travels on the connection's
/// stdin into the environment of that one smolvm call there. smolvm sees it; while the start
/// runs no argv on the machine holds it (local ssh, sshd, the remote shells), no process
/// but smolvm's own has it in its environment, no file box or the remote account keeps does;
/// the next call's environment has none. A start without keys takes the plain path.
#[test]
fn api_keys_reach_remote_smolvm_start_through_its_stdin_only() {
    let Some(h) = test_host() else { return };
    const KEY: &str = "sk-ant-remote-7c1d93e2";
    let seen = h.dir.path().join("seen");
    let s = remote_fake(
        &h,
        &format!(
            r#"case "$1 $2" in
  "machine start")
    printf '%s %s\n' "$(printf %s "$ANTHROPIC_API_KEY" | sha256sum | cut -c1-16)" "${{OTHER_KEY-unset}}" >> {seen}
    sleep 2;;
  "machine stop") echo "stop sees ${{ANTHROPIC_API_KEY-no key}}" >> {seen};;
  *) exit 9;;
esac"#,
            seen = seen.display()
        ),
    );
    let keys = vec![
        (
            "ANTHROPIC_API_KEY".to_string(),
            secrecy::SecretString::from(KEY),
        ),
        (
            "OTHER_KEY".to_string(),
            secrecy::SecretString::from("k2 $x"),
        ),
    ];
    let watcher = std::thread::spawn(|| {
        let mut argv = Vec::new();
        let mut environ = Vec::new();
        for _ in 0..15 {
            argv.extend(processes_holding("cmdline", KEY.as_bytes()));
            environ.extend(processes_holding("environ", KEY.as_bytes()));
            std::thread::sleep(Duration::from_millis(100));
        }
        (argv, environ)
    });
    s.start_with_keys("alpha", None, &keys).unwrap();
    let (argv, environ) = watcher.join().unwrap();
    assert!(argv.is_empty(), "the key is on an argv: {argv:?}");
    assert!(
        !environ.is_empty()
            && environ
                .iter()
                .all(|c| c.contains("/bin/smolvm machine start")
                    || ["sleep ", "sha256sum", "cut "]
                        .iter()
                        .any(|p| c.starts_with(p))),
        "the key is in the environment of {environ:?}"
    );
    s.stop("alpha").unwrap();
    s.start_with_keys("alpha", None, &[]).unwrap();
    use sha2::Digest as _;
    let hash = hex::encode(sha2::Sha256::digest(KEY));
    let empty = hex::encode(sha2::Sha256::digest(""));
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        format!(
            "{} k2 $x\nstop sees no key\n{} unset\n",
            &hash[..16],
            &empty[..16]
        )
    );
    let files = files_holding(h.dir.path(), KEY.as_bytes());
    assert!(files.is_empty(), "the key is in {files:?}");
}
