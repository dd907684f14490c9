//! Harness of the save/load tests: the real `box`, the smolvm simulator with real
//! namespaced guests, the real `hb` and the real provisioning script inside them (npm tools
//! from scripts/setup.sh's prefix, so no network), real Executor 1.5.9. Each test gets its
//! own BOX_HOME, SMOLVM_SIM_HOME, backup dir, TMPDIR and port range; every machine is
//! deleted when the world is dropped.
#![allow(dead_code)]

pub mod hermes_db;
#[path = "../sim_support/mod.rs"]
mod sim_support;

use std::cell::RefCell;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use box_host::state::{LockKey, StateDir, locks};
use box_proto::BoxName;
pub use sim_support::{Run, box_bin, sibling};

/// The tests share two cores and host ports: one world at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The fault tests' run (`faults_*.rs`): heavy under `BOX_HEAVY_FAULTS=1`, and the seed of
/// its random choices (`FAULTS_SEED`, else a fresh one), printed so a run can be replayed.
pub fn fault_run(test: &str) -> (bool, u64) {
    let heavy = std::env::var("BOX_HEAVY_FAULTS").is_ok_and(|v| v == "1");
    let seed: u64 = std::env::var("FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{test}: FAULTS_SEED={seed} (heavy: {heavy})");
    (heavy, seed)
}

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Root, the guest tools, and the host tools the tests compare with; see
/// [`sim_support::prerequisites`].
pub fn prerequisites() -> bool {
    sim_support::prerequisites("save/load tests", &["gpg", "tar", "sqlite3", "git"])
}

fn free_port_range() -> u16 {
    // Below the kernel's ephemeral range: a port there can be taken by any outgoing
    // connection (ssh, the registries, other tests) between box's choice and the machine's
    // start, and the start then fails with "Address already in use".
    let ephemeral_lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let top = ephemeral_lo.saturating_sub(41).max(10_041);
    for _ in 0..200 {
        let base = 10_000 + rand::random::<u16>() % (top - 10_000);
        if (base..=base + 40).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return base;
        }
    }
    panic!("no free port range below the ephemeral ports")
}

pub fn random_word() -> String {
    let mut b = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One isolated installation: state dir, simulator home, config, backups.
pub struct World {
    pub dir: tempfile::TempDir,
    pub passphrase: String,
    /// Everything box printed, scanned for secrets at the end.
    pub transcript: RefCell<String>,
    /// Tokens seen during the test, never to appear in output.
    pub secrets: RefCell<Vec<String>>,
    pub extra_env: Vec<(String, String)>,
}

impl World {
    pub fn new() -> Self {
        Self::new_in(
            &std::env::var_os("CARGO_TARGET_TMPDIR")
                .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from),
        )
    }

    /// A world whose directory is made in `parent` (a checkout's `target/tmp` elsewhere).
    pub fn new_in(parent: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("box-saveload-")
            .tempdir_in(parent)
            .unwrap();
        let w = World {
            dir,
            passphrase: format!("pp-{}", random_word()),
            transcript: RefCell::new(String::new()),
            secrets: RefCell::new(Vec::new()),
            extra_env: Vec::new(),
        };
        for d in [w.home(), w.sim_home(), w.backups(), w.tmp()] {
            std::fs::create_dir_all(d).unwrap();
        }
        let lo = free_port_range();
        std::fs::write(
            w.config(),
            format!(
                "BASE_IMAGE=debian:12\nINSTALL_HERMES=0\nINSTALL_EXECUTOR=1\nWIRE_EXECUTOR_MCP=1\n\
                 NODE_MAJOR=20\nCLAUDE_CODE_VERSION=2.1.197\nCODEX_VERSION=0.171.0\nEXECUTOR_VERSION=1.5.9\n\
                 EXPOSE_EXECUTOR_WEB=1\nEXECUTOR_PORT_LO={lo}\nEXECUTOR_PORT_HI={}\n\
                 BACKUP_DIR={}\nBOX_CPUS=1\nBOX_MEM_MIB=512\n",
                lo + 40,
                w.backups().display()
            ),
        )
        .unwrap();
        let pf = w.passphrase_file();
        std::fs::write(&pf, format!("{}\n", w.passphrase)).unwrap();
        std::fs::set_permissions(&pf, std::fs::Permissions::from_mode(0o600)).unwrap();
        w
    }

    /// A world with one fresh box, `box new name` (which must succeed).
    pub fn with_box(name: &str) -> Self {
        let w = Self::new();
        let new = w.run(&["new", name], &[]);
        assert!(new.ok(), "box new {name}: {}", new.all());
        w
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub fn sim_home(&self) -> PathBuf {
        self.dir.path().join("sim")
    }
    pub fn backups(&self) -> PathBuf {
        self.dir.path().join("backups")
    }
    /// TMPDIR of every box run: must stay empty.
    pub fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }
    /// `XDG_DATA_HOME` of every box run.
    pub fn data_home(&self) -> PathBuf {
        self.dir.path().join("data")
    }
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("box.env")
    }
    pub fn passphrase_file(&self) -> PathBuf {
        self.dir.path().join("passphrase")
    }
    pub fn state(&self) -> StateDir {
        StateDir::at(self.home())
    }

    pub fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(box_bin());
        cmd.args(args)
            .stdin(Stdio::null())
            .env("BOX_HOME", self.home())
            .env("BOX_CONFIG", self.config())
            .env("BOX_PASSPHRASE_FILE", self.passphrase_file())
            .env("SMOLVM", sibling("smolvm-sim"))
            .env("SMOLVM_SIM_HOME", self.sim_home())
            // Fast-test shortcut, named: guests run on this host's userland, not a pristine
            // image (the first-run test is the one that takes the user's path).
            .env("SMOLVM_SIM_HOST_USERLAND", "1")
            .env(
                "SMOLVM_SIM_RAW_CALL_LOG",
                sim_support::raw_call_log(&self.sim_home()),
            )
            .env("TMPDIR", self.tmp())
            // The user's data dir (backups when BACKUP_DIR is unset): never the real one.
            .env("XDG_DATA_HOME", self.data_home())
            .env("BOX_TEST_GUEST_ENV", sim_support::guest_env())
            .env("NO_COLOR", "1")
            .env("BOX_NO_PROGRESS", "1")
            .env_remove("BOX_PASSPHRASE")
            .env_remove("SMOLVM_SIM_FAIL")
            .env_remove("SMOLVM_SIM_VERSION")
            .env_remove("BOX_SMOLVM_TIMEOUT")
            .env_remove("BOX_SKIP_PROVISION")
            .env_remove("BOX_KEEP_ON_FAILURE")
            .env_remove("BOX_PART_SIZE")
            .env_remove("BOX_STREAM_PARTS")
            .env_remove("BOX_HB_BINARY")
            .env_remove("BOX_PROVISION_DIR");
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        sim_support::detach(&mut cmd);
        cmd
    }

    /// What `box ARGS` printed, kept in the world's transcript; for runs made elsewhere
    /// (in another namespace) as well as [`World::run`]'s.
    pub fn record(&self, args: &[&str], out: &Output) -> Run {
        let run = Run::from(out);
        self.transcript.borrow_mut().push_str(&format!(
            "$ box {}\n{}{}[exit {:?}]\n",
            args.join(" "),
            run.stdout,
            run.stderr,
            run.code
        ));
        run
    }

    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let out = self.command(args, env).output().unwrap();
        self.record(args, &out)
    }

    /// [`World::run`] from the directory `cwd`, as a user who `cd`s first.
    pub fn run_in(&self, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        let out = self.command(args, env).current_dir(cwd).output().unwrap();
        self.record(args, &out)
    }

    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        self.command(args, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits for a spawned box (at most `secs`), records its output.
    pub fn finish(&self, args: &[&str], mut child: Child, secs: u64) -> Run {
        let start = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() > Duration::from_secs(secs) {
                let _ = child.kill();
                panic!("box {} did not finish within {secs}s", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        self.record(args, &out)
    }

    /// The simulator directly (guest commands from the test itself).
    pub fn sim(&self, args: &[&str]) -> Output {
        Command::new(sibling("smolvm-sim"))
            .args(args)
            .env("SMOLVM_SIM_HOME", self.sim_home())
            .env(
                "SMOLVM_SIM_RAW_CALL_LOG",
                sim_support::raw_call_log(&self.sim_home()),
            )
            .env_remove("SMOLVM_SIM_FAIL")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs a shell script as root in the guest; must succeed; returns stdout.
    pub fn sh(&self, machine: &str, script: &str) -> String {
        let out = self.sim(&[
            "machine", "exec", "--name", machine, "--", "sh", "-c", script,
        ]);
        assert!(
            out.status.success(),
            "guest script in {machine} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Like [`World::sh`], whatever the status.
    pub fn sh_any(&self, machine: &str, script: &str) -> (bool, String) {
        let out = self.sim(&[
            "machine", "exec", "--name", machine, "--", "sh", "-c", script,
        ]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Machines the simulator lists.
    pub fn machines(&self) -> Vec<(String, String)> {
        sim_support::parse_machines(&self.sim(&["machine", "ls", "--json"]).stdout)
    }

    /// Every smolvm call box made, as argv without the binary.
    pub fn calls(&self) -> Vec<Vec<String>> {
        sim_support::logged_calls(&self.sim_home())
    }

    pub fn calls_since(&self, n: usize) -> Vec<String> {
        self.calls()
            .into_iter()
            .skip(n)
            .map(|c| c.join(" "))
            .collect()
    }

    /// Waits until a smolvm call whose argv contains `needle` shows up after call `from`.
    pub fn wait_for_call(&self, from: usize, needle: &str, secs: u64) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            if self.calls_since(from).iter().any(|c| c.contains(needle)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn lock_free(&self, name: &str) -> bool {
        locks::try_acquire(
            &self.state(),
            LockKey::Box(BoxName::parse(name).unwrap()),
            "test probe",
        )
        .is_ok()
    }

    pub fn registered(&self, name: &str) -> bool {
        box_host::state::Registry::new(&self.state())
            .get(&BoxName::parse(name).unwrap())
            .unwrap()
            .is_some()
    }

    /// Executor's token in `machine` (kept as a secret to scan for).
    pub fn token(&self, machine: &str) -> String {
        self.token_in(&|a| self.sim(a), machine)
    }

    /// [`World::token`] through another smolvm (a remote host's): the guest's own secret,
    /// which may live there but no log or call line may carry.
    pub fn token_in(&self, sim: &dyn Fn(&[&str]) -> Output, machine: &str) -> String {
        let out = sim_support::guest_hb(sim, machine, &["token"]);
        assert!(out.status.success(), "hb token in {machine}");
        let t = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(t.len() >= 16, "implausible token");
        self.secrets.borrow_mut().push(t.clone());
        t
    }

    /// No plaintext anywhere: nothing [`World::host_leftovers`] finds, no guest scratch in
    /// each of `machines`.
    pub fn assert_no_plaintext(&self, machines: &[&str]) {
        let left = self.host_leftovers();
        assert!(left.is_empty(), "left on the host: {left:?}");
        for m in machines {
            let left = self.guest_plaintext_left(m);
            assert!(left.is_empty(), "guest plaintext left in {m}: {left:?}");
        }
    }

    /// The newest transcript box wrote of `box <verb> <name>` (`logs/<name>-<verb>-*.log`).
    pub fn transcript(&self, name: &str, verb: &str) -> String {
        let prefix = format!("{name}-{verb}-");
        let mut runs: Vec<PathBuf> = std::fs::read_dir(self.home().join("logs"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with(&prefix))
            })
            .collect();
        runs.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        let newest = runs
            .last()
            .unwrap_or_else(|| panic!("no transcript of box {verb} {name}"));
        std::fs::read_to_string(newest).unwrap()
    }

    /// What a save, load, clone or base build may leave on the host, each named with where
    /// it is: entries of box's scratch dir and of TMPDIR, unpublished temporaries beside the
    /// backups, a base build's staging files.
    pub fn host_leftovers(&self) -> Vec<String> {
        let entries = |dir: &Path| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|r| {
                    r.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let hidden = |dir: &Path| entries(dir).into_iter().filter(|n| n.starts_with('.'));
        let mut left = Vec::new();
        left.extend(
            entries(&self.home().join("tmp"))
                .into_iter()
                .map(|n| format!("{n} in box's scratch dir")),
        );
        left.extend(
            entries(&self.tmp())
                .into_iter()
                .map(|n| format!("{n} in TMPDIR")),
        );
        left.extend(hidden(&self.backups()).map(|n| format!("{n} beside the backups")));
        left.extend(hidden(&self.home().join("bases")).map(|n| format!("{n} in the base store")));
        left
    }

    /// Plaintext a save or load may leave in a guest: the transfer's scratch under /root,
    /// `hb import`'s stage and rollback dirs in /data, and tar, gzip or zstd data anywhere
    /// in /tmp (found by content: a stray part has no fixed name). /var/tmp is the host's
    /// in the simulator, so it is not the guest's to check.
    pub fn guest_plaintext_left(&self, machine: &str) -> Vec<String> {
        const SCRIPT: &str = r#"
ls -d /root/hb-* 2>/dev/null
find /data -maxdepth 2 -name '.hb-restore-*' 2>/dev/null
find /tmp -xdev -type f -size +0 2>/dev/null | while IFS= read -r f; do
  case $(head -c 4 "$f" | od -An -tx1 | tr -d ' \n') in
    28b52ffd | 1f8b*) echo "$f"; continue ;;
  esac
  [ "$(tail -c +258 "$f" | head -c 5)" = ustar ] && echo "$f"
done
true"#;
        let (ok, out) = self.sh_any(machine, SCRIPT);
        assert!(ok, "cannot look for plaintext in {machine}");
        out.lines().map(str::to_string).collect()
    }

    /// [`World::assert_no_plaintext`] sees each kind of leftover: plants one of each in
    /// `machine`, checks every one is reported, removes them.
    pub fn assert_plaintext_check_sees_leftovers(&self, machine: &str) {
        let planted = [
            "/root/hb-load-0-0",
            "/data/.hb-restore-stage-0",
            "/data/.hb-restore-rollback-0",
            "/tmp/stray.zst",
            "/tmp/x/stray.gz",
            "/tmp/stray-tar",
        ];
        self.sh(
            machine,
            r"mkdir -p /root/hb-load-0-0 /data/.hb-restore-stage-0 /data/.hb-restore-rollback-0 /tmp/x
echo data | zstd -q >/tmp/stray.zst
echo data | gzip >/tmp/x/stray.gz
tar -cf /tmp/stray-tar -C /etc hostname",
        );
        let mut seen = self.guest_plaintext_left(machine);
        seen.sort();
        let mut want = planted.map(String::from).to_vec();
        want.sort();
        assert_eq!(seen, want, "the plaintext check missed a leftover");
        self.sh(machine, &format!("rm -rf {}", planted.join(" ")));
        assert!(self.guest_plaintext_left(machine).is_empty());
    }

    /// The box's Executor runs and nothing of a quiesce is left.
    pub fn assert_running_unpaused(&self, machine: &str) {
        if let Some(why) = self.not_running_unpaused(machine) {
            panic!("{why}");
        }
    }

    /// Why the box's Executor does not run, or what of a quiesce is left; None when all is
    /// well.
    pub fn not_running_unpaused(&self, machine: &str) -> Option<String> {
        let (ok, status) = self.sh_any(machine, "/usr/local/bin/hb status");
        if !ok || !status.contains("executor: running") {
            return Some(format!("{machine} not running:\n{status}"));
        }
        let (_, left) = self.sh_any(
            machine,
            "ls /data/home/agent/.config/hermes-box/quiesced /data/home/agent/.config/hermes-box/quiesce-record.json 2>/dev/null; true",
        );
        (!left.trim().is_empty()).then(|| format!("{machine} still quiesced: {left}"))
    }

    /// Published backups in the backup dir.
    /// `box save alpha` with 1 MiB parts, which must succeed and say `words` (e.g. "(full:
    /// starts a chain)"); returns the one file it published. Waits past the second after it:
    /// backups are named by the second, and the next save must not share one.
    pub fn save_alpha(&self, words: &str) -> PathBuf {
        self.save_alpha_saying(words).0
    }

    /// [`World::save_alpha`], with what the save printed.
    pub fn save_alpha_saying(&self, words: &str) -> (PathBuf, Run) {
        let before = self.backups_published();
        let r = self.run(&["save", "alpha"], &[("BOX_PART_SIZE", "1048576")]);
        assert!(r.ok(), "box save: {}", r.all());
        assert!(r.stdout.contains(words), "{words:?} in {}", r.all());
        let new: Vec<_> = self
            .backups_published()
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        assert_eq!(new.len(), 1, "{new:?}");
        std::thread::sleep(std::time::Duration::from_millis(1100));
        (new[0].clone(), r)
    }

    pub fn backups_published(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.backups())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect();
        v.sort();
        v
    }

    /// The passphrase and every token seen: never in what box printed, anywhere in its
    /// state dir (rows, logs, scratch), nor in what the simulator recorded (machine
    /// records, the redacted and the unredacted call log: argv and env as `ps` shows them).
    pub fn scan_secrets(&self) {
        let mut secrets = self.secrets.borrow().clone();
        secrets.push(self.passphrase.clone());
        let mut surfaces = sim_support::secret_surfaces(&self.home(), &self.sim_home());
        surfaces.push(("box output".into(), self.transcript.borrow().clone()));
        sim_support::assert_no_secrets(&surfaces, &secrets);
    }

    /// `gpg --symmetric` of `plain` with the world's passphrase on fd 3 (never argv).
    pub fn gpg_encrypt(&self, plain: &Path, out: &Path) {
        let (r, mut w) = std::io::pipe().unwrap();
        w.write_all(self.passphrase.as_bytes()).unwrap();
        drop(w);
        let gnupg = self.dir.path().join("gnupg");
        std::fs::create_dir_all(&gnupg).unwrap();
        std::fs::set_permissions(&gnupg, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut cmd = Command::new("gpg");
        cmd.args([
            "--batch",
            "--yes",
            "--quiet",
            "--pinentry-mode",
            "loopback",
            "--passphrase-fd",
            "3",
            "--symmetric",
            "--cipher-algo",
            "AES256",
            "-o",
        ])
        .arg(out)
        .arg(plain)
        .env("GNUPGHOME", &gnupg);
        let fd = std::os::fd::OwnedFd::from(r);
        use std::os::fd::AsRawFd;
        let raw = fd.as_raw_fd();
        unsafe {
            cmd.pre_exec(move || {
                if raw == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let st = cmd.status().unwrap();
        drop(fd);
        assert!(st.success(), "gpg --symmetric");
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for (m, _) in self.machines() {
            let _ = self.sim(&["machine", "delete", "--name", &m, "-f"]);
        }
    }
}

/// `find` listing of a tree in the guest: path, type, mode, owner, size, link target and
/// SHA-256 of each file — what a restore must reproduce exactly.
pub fn tree_listing(w: &World, machine: &str, root: &str) -> String {
    w.sh(
        machine,
        &format!(
            "cd {root} && find . -printf '%p %y %m %u:%g %s %l\\n' | sort && \
             find . -print0 | sort -z | xargs -0 -r stat -c 'mtime %n %Y' && \
             find . -type f -print0 | sort -z | xargs -0 -r sha256sum"
        ),
    )
}

/// A transcript's line of where the seconds of each step went (ui/timings.rs).
pub fn step_line(transcript: &str) -> &str {
    transcript
        .lines()
        .find(|l| l.contains("where the seconds went: "))
        .expect("the step line")
}

/// From the transcript of a load or clone that imported while the parts arrived
/// (transfer::parts_follow's summary line): how many parts went in, and the most `holder`
/// held at once. The step line names the overlapped `step` and no import of its own.
pub fn followed(transcript: &str, step: &str, holder: &str) -> (usize, usize) {
    let seconds = step_line(transcript);
    assert!(
        seconds.contains(&format!("; {step} ")) && !seconds.contains("; import "),
        "{seconds}"
    );
    let said = transcript
        .lines()
        .find_map(|l| l.split(&format!("{step}: ")).nth(1))
        .expect("the overlapped step's line");
    let held = said
        .split(&format!("{holder} held at most "))
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{holder} held at most N part(s): {said}"));
    let parts = said.split(' ').next().unwrap().parse().unwrap();
    (parts, held)
}
