//! Helpers for hb's integration tests: a temp data root, the real `hb` binary, the real
//! Executor/Codex/Claude from the CI tool prefix, a workload that is stopped on drop, and
//! secret scanning.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where scripts/setup.sh installs executor 1.5.9, codex and claude for these tests.
pub const TOOL_PREFIX: &str = "/opt/hermes-box-ci";

pub fn hb_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_hb"))
}

/// A tool from the CI prefix or PATH. Missing: fail under CI=true (saying why), otherwise
/// `None` so the test can print why it skips.
pub fn require_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let candidates = std::iter::once(PathBuf::from(TOOL_PREFIX).join("bin").join(name))
        .chain(std::env::split_paths(&path).map(|d| d.join(name)));
    for c in candidates {
        if c.is_file() {
            return Some(c);
        }
    }
    let why = format!(
        "{name} is not installed (run `bash scripts/setup.sh`, which puts it in {TOOL_PREFIX}/bin)"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    {
        // Written past libtest's capture (eprintln! of a passing test is hidden).
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
    }
    None
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

pub fn current_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::effective())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "root".into())
}

/// One box's worth of state in a temp dir.
pub struct Box_ {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub extra_env: Vec<(String, String)>,
    /// Everything any hb command printed (scanned for the token at the end).
    pub transcript: std::cell::RefCell<String>,
}

impl Box_ {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("hb-test-")
            .tempdir()
            .expect("tempdir");
        Self {
            dir,
            port: free_port(),
            extra_env: Vec::new(),
            transcript: Default::default(),
        }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }
    pub fn home(&self) -> PathBuf {
        self.data().join("home/agent")
    }
    pub fn hb_config(&self) -> PathBuf {
        self.home().join(".config/hermes-box")
    }
    pub fn config_file(&self) -> PathBuf {
        self.dir.path().join("hermes-box.env")
    }

    /// PATH with the CI tool prefix first.
    pub fn path_env(&self) -> String {
        format!(
            "{TOOL_PREFIX}/bin:{}",
            std::env::var("PATH").unwrap_or_default()
        )
    }

    pub fn hb(&self, args: &[&str]) -> Command {
        let mut c = Command::new(hb_bin());
        c.args(args)
            .env("HB_DATA", self.data())
            .env("HB_CONFIG", self.config_file())
            .env("HB_AGENT_USER", current_user())
            .env("HB_PROFILE", "/dev/null")
            .env("EXECUTOR_PORT", self.port.to_string())
            .env("PATH", self.path_env())
            // hb keeps its tools' answers in root's /var/cache on a guest; not the host's.
            .env(
                "HB_TOOL_VERSIONS_CACHE",
                self.dir.path().join("tool-versions"),
            )
            .env_remove("HB_WEB_PORT")
            .stdin(Stdio::null());
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        c
    }

    /// Runs hb to completion and records what it printed.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.hb(args).output().expect("run hb");
        let mut t = self.transcript.borrow_mut();
        t.push_str(&String::from_utf8_lossy(&out.stdout));
        t.push_str(&String::from_utf8_lossy(&out.stderr));
        out
    }

    /// Runs hb and asserts success.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "hb {args:?} failed ({:?}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `hb wire-mcp` with the wiring switched off (`WIRE_EXECUTOR_MCP=0`); asserts success
    /// and returns stdout.
    pub fn unwire(&self) -> String {
        let out = self
            .hb(&["wire-mcp"])
            .env("WIRE_EXECUTOR_MCP", "0")
            .output()
            .expect("run hb wire-mcp");
        assert!(out.status.success(), "hb wire-mcp (disabled): {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// stdout then stderr of a finished tool run, added to the transcript (scanned for the
    /// token at the end).
    pub fn record(&self, out: &Output) -> String {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.transcript.borrow_mut().push_str(&text);
        text
    }

    pub fn init(&self) {
        self.ok(&["init"]);
    }

    pub fn token(&self) -> Option<String> {
        std::fs::read_to_string(self.hb_config().join("executor-token"))
            .ok()
            .map(|t| t.trim().to_string())
    }
}

/// `hb workload` running in the background; SIGTERM (then SIGKILL) on drop.
pub struct Workload {
    pub child: Child,
    pub stderr_path: PathBuf,
}

impl Workload {
    pub fn start(b: &Box_, web_port: Option<u16>) -> Workload {
        let stderr_path = b.dir.path().join("workload.stderr");
        let err = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut cmd = b.hb(&["workload"]);
        if let Some(p) = web_port {
            cmd.env("HB_WEB_PORT", p.to_string());
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn hb workload");
        Workload { child, stderr_path }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        );
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if self.terminate(Duration::from_secs(15)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(300),
    )
    .is_ok()
}

/// Every process's argv (NUL-joined as spaces) that contains `needle`.
pub fn procs_with(needle: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let text = String::from_utf8_lossy(&raw).replace('\0', " ");
            if text.contains(needle) {
                out.push((pid, text));
            }
        }
    }
    out
}

/// Every regular file under `dir` whose content contains `needle`.
pub fn files_with(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file()
                && std::fs::read(&p)
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p)
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777
}

/// Every member an export wrote into `out` (its index, then its parts in order,
/// decompressed and read as tar): name (as in the archive, `./…`) → data. What a restore
/// gets, before any restore logic.
pub fn archived(out: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    use box_proto::archive::parts::{INDEX_FILE, PartIndex};
    use std::io::Read as _;
    let text = std::fs::read_to_string(out.join(INDEX_FILE)).expect("the part index");
    let index = PartIndex::parse(&text).expect("a part index that parses");
    let mut compressed = Vec::new();
    for part in &index.parts {
        compressed.extend(std::fs::read(out.join(&part.name)).expect("a part"));
    }
    let plain = zstd::decode_all(compressed.as_slice()).expect("zstd");
    let mut members = std::collections::BTreeMap::new();
    let mut archive = tar::Archive::new(plain.as_slice());
    for entry in archive.entries().expect("tar") {
        let mut entry = entry.expect("a tar member");
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).expect("member data");
        members.insert(name, data);
    }
    members
}
