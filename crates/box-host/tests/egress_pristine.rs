//! Containment on the user's path (issue 33): the shipped box.env with the two lines this
//! network and this feature need (`GUEST_CA_CERTS`: the network inspects TLS;
//! `EGRESS=allowlist`), a pristine guest image (`ubuntu:24.04`, the simulator's Debian 13
//! stand-in) provisioned from the real network through the allow list, and
//! `box new --credential ANTHROPIC_API_KEY@api.anthropic.com` with the key in the shell.
//!
//! A test HTTPS server in a network namespace this test makes plays `api.anthropic.com`
//! (the simulator's resolver answers that name with its address, `SMOLVM_SIM_DNS_HOSTS`);
//! smolvm's side trusts its CA through `SSL_CERT_FILE`, as a host behind such a server
//! would. One box serves every check, then one clone:
//!
//! * provisioning under the allow list leaves no denial behind (the shipped agents list
//!   covers apt, npm, PyPI and what Executor fetches at start);
//! * curl from the agent's login shell (`box exec`) and one real Claude Code call
//!   (`claude -p`) reach the server, which sees the real key; the agent saw the answer;
//! * a name outside the list does not resolve and shows in `box egress` and `box doctor`;
//!   a host on a private address is unreachable;
//! * the key is nowhere in the guest (files, `/proc/*/environ`), in box's output, logs and
//!   state, in a `box save`'s decrypted plaintext (whose manifest records the policy), on
//!   any argv of this machine while the box runs, nor in any environment but that of
//!   smolvm's `machine start` (the simulator's unredacted call log);
//! * `box clone alpha beta --allow-private <host>/32`: the clone keeps alpha's policy with
//!   the flag on top, has placeholders of its own that work, reaches the private host, and
//!   holds no key in its /data.
//!
//! Heavier (`BOX_TEST_HEAVY=1`, a few minutes more): `box base build` and a scan of the
//! base, `box load` of the backup from that base (the backup's policy, said; the key works;
//! none in the restored guest).
//!
//! Needs root, slirp4netns, mmdebstrap (or the image cache setup.sh fills), the host's CA
//! bundle and the network (provisioning). Every probe goes only to the namespaces this test
//! makes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "sim_support/mod.rs"]
mod sim_support;
#[path = "../../smolvm-sim/tests/contract_egress/testnet.rs"]
mod testnet;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use sim_support::{Run, box_bin, detach, sibling};
use testnet::{Https, Netns, pair};

const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const KEY: &str = "sk-ant-pristine-e41b8a07d2";
/// A token bound to the npm registry, whose traffic provisioning needs (issue 39).
const NPM_TOKEN: &str = "npm_pristine_1c9f04b7e2a6";
const PASSPHRASE: &str = "egress-pristine-pp-5d20";

fn prerequisites() -> bool {
    let mut missing =
        sim_support::missing_root_and_commands(&["slirp4netns", "mmdebstrap", "gpg", "zstd"]);
    if !Path::new(CA_BUNDLE).is_file() {
        missing.push(format!("{CA_BUNDLE} (the host's CA bundle)"));
    }
    sim_support::require("pristine egress test", &missing)
}

fn heavy() -> bool {
    if std::env::var("BOX_TEST_HEAVY").is_ok_and(|v| v == "1") {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: heavy pristine egress variant (set BOX_TEST_HEAVY=1 to run it)"
    );
    false
}

/// One user's machine: BOX_HOME, simulator home, box.env, backups, and the environment
/// their shell has (the key, and what stands in for the public network).
struct User {
    dir: tempfile::TempDir,
    config: PathBuf,
    shell: Vec<(String, String)>,
    /// Everything box printed, for the key scan.
    transcript: String,
}

impl User {
    fn new(extra: &str, shell: Vec<(String, String)>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("egress-pristine-")
            .tempdir()
            .unwrap();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../box.env");
        let keys: Vec<&str> = extra
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .chain(["BACKUP_DIR"])
            .collect();
        let mut text: String = std::fs::read_to_string(&shipped)
            .unwrap()
            .lines()
            .filter(|l| !keys.iter().any(|k| l.starts_with(&format!("{k}="))))
            .map(|l| format!("{l}\n"))
            .collect();
        text.push_str(extra);
        text.push_str(&format!(
            "BACKUP_DIR={}\n",
            dir.path().join("backups").display()
        ));
        let config = dir.path().join("box.env");
        std::fs::write(&config, text).unwrap();
        std::fs::write(dir.path().join("passphrase"), format!("{PASSPHRASE}\n")).unwrap();
        std::fs::create_dir_all(dir.path().join("sim")).unwrap();
        Self {
            dir,
            config,
            shell,
            transcript: String::new(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("box-home")
    }

    fn sim_home(&self) -> PathBuf {
        self.dir.path().join("sim")
    }

    fn env(&self, cmd: &mut Command) {
        cmd.env("BOX_HOME", self.home())
            .env("BOX_CONFIG", &self.config)
            .env("BOX_PASSPHRASE_FILE", self.dir.path().join("passphrase"))
            .env("SMOLVM", sibling("smolvm-sim"))
            .env("SMOLVM_SIM_HOME", self.sim_home())
            // Observation only: the simulator's record of each call's argv and environment.
            .env(
                "SMOLVM_SIM_RAW_CALL_LOG",
                sim_support::raw_call_log(&self.sim_home()),
            )
            .env("NO_COLOR", "1")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("SSL_CERT_FILE");
        sim_support::users_path(cmd);
        for (k, v) in &self.shell {
            cmd.env(k, v);
        }
    }

    /// `box args…`, timed (printed), its output kept for the scan.
    fn run(&mut self, args: &[&str]) -> Run {
        let mut cmd = Command::new(box_bin());
        cmd.args(args).stdin(Stdio::null());
        self.env(&mut cmd);
        detach(&mut cmd);
        let t = Instant::now();
        let run = Run::from(&cmd.output().unwrap());
        eprintln!(
            "egress-pristine: box {}: {:.1} s",
            args.join(" "),
            t.elapsed().as_secs_f64()
        );
        self.transcript
            .push_str(&format!("$ box {}\n{run}\n", args.join(" ")));
        run
    }

    /// `box exec NAME -- sh -c SCRIPT` (the agent, in its login environment), stdout.
    fn agent(&mut self, name: &str, script: &str) -> Run {
        self.run(&["exec", name, "--", "sh", "-c", script])
    }

    /// [`Self::agent`] as root.
    fn root(&mut self, name: &str, script: &str) -> Run {
        self.run(&["exec", name, "--root", "--", "sh", "-c", script])
    }

    fn sim(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(sibling("smolvm-sim"));
        cmd.args(args).stdin(Stdio::null());
        self.env(&mut cmd);
        cmd.output().unwrap()
    }

    fn backups(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir.path().join("backups"))
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.to_string_lossy().ends_with(".tar.zst.gpg"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A backup's plaintext (tar), as stock gpg and zstd give it.
    fn plaintext(&self, backup: &Path) -> Vec<u8> {
        self.stock(backup, "| zstd -dc")
    }

    /// What stock gpg alone decrypts a backup to (zstd's frames, box's sealed facts first).
    fn decrypted(&self, backup: &Path) -> Vec<u8> {
        self.stock(backup, "")
    }

    /// `gpg -d BACKUP` then `then`, with the user's passphrase file.
    fn stock(&self, backup: &Path, then: &str) -> Vec<u8> {
        let gnupg = self.dir.path().join("gnupg");
        std::fs::create_dir_all(&gnupg).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&gnupg, std::fs::Permissions::from_mode(0o700)).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                r#"gpg --batch --quiet --pinentry-mode loopback --passphrase-file "$1" -d "$2" {then}"#
            ))
            .arg("sh")
            .arg(self.dir.path().join("passphrase"))
            .arg(backup)
            .env("GNUPGHOME", &gnupg)
            .output()
            .unwrap();
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "decrypting {}: {}",
            backup.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}

impl Drop for User {
    fn drop(&mut self) {
        // A failed assertion must not leave namespaced guests running.
        for (name, _) in sim_support::parse_machines(&self.sim(&["machine", "ls", "--json"]).stdout)
        {
            let _ = self.sim(&["machine", "delete", "-f", "--name", &name]);
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The command lines of this machine's processes that hold `needle` in `file`
/// (`cmdline`, `environ`).
fn processes_holding(file: &str, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(b) = std::fs::read(e.path().join(file))
            && contains(&b, needle)
        {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push(String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    found
}

/// The key is in no file or process environment of the guest `name`. The pattern is put
/// together inside the guest, so the key rides on no argv.
fn assert_key_not_in_guest(u: &mut User, name: &str) {
    let (head, tail) = KEY.split_at(7);
    let found = u.root(
        name,
        &format!(
            "grep -rlsF \"$(printf %s {head} {tail})\" /proc/[0-9]*/environ /etc /data /root /tmp \
             /run /home /opt /var/log 2>/dev/null; true"
        ),
    );
    assert!(found.ok(), "{found}");
    assert_eq!(found.stdout.trim(), "", "the key is in guest '{name}'");
}

/// The shell's `SMOLVM_SIM_DNS_HOSTS` (what stands in for the public DNS), for the next start.
fn set_dns(u: &mut User, hosts: &str) {
    u.shell.retain(|(k, _)| k != "SMOLVM_SIM_DNS_HOSTS");
    u.shell.push(("SMOLVM_SIM_DNS_HOSTS".into(), hosts.into()));
}

/// `box egress NAME --json`'s policy.
fn egress_json(u: &mut User, name: &str) -> serde_json::Value {
    let out = u.run(&["egress", name, "--json"]);
    assert!(out.ok(), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    v["containment"].clone()
}

/// The placeholder the agent's login shell in `name` has for the key.
fn placeholder(u: &mut User, name: &str) -> String {
    let p = u.agent(name, "printf %s \"$ANTHROPIC_API_KEY\"");
    assert!(
        p.stdout.starts_with("SMOL_PLACEHOLDER_ANTHROPIC_API_KEY_"),
        "{name}: {p}"
    );
    p.stdout
}

/// curl from the agent's login shell to the bound host: the server's answer.
fn call_api(u: &mut User, name: &str) -> Run {
    u.agent(
        name,
        "curl -sS --max-time 20 https://api.anthropic.com/v1/messages -H \"x-api-key: $ANTHROPIC_API_KEY\" -d '{}'",
    )
}

#[test]
fn an_allowlisted_pristine_box_uses_a_key_it_never_holds() {
    if !prerequisites() {
        return;
    }
    let total = Instant::now();
    let work = tempfile::Builder::new()
        .prefix("egress-pristine-net-")
        .tempdir()
        .unwrap();
    let api = Netns::new(pair("198.18"));
    let https = Https::start(&api, "api.anthropic.com", work.path());
    // Plays the npm registry once the box is provisioned (from the real one).
    let npm_dir = work.path().join("npm");
    std::fs::create_dir_all(&npm_dir).unwrap();
    let npm = Netns::new(pair("198.19"));
    let npm_https = Https::start(&npm, "registry.npmjs.org", &npm_dir);
    let lan = Netns::new(pair("172.29"));
    lan.hello(8080);
    // smolvm's upstream trust: the host's roots and the test servers' CAs.
    let roots = work.path().join("roots.pem");
    let mut bundle = std::fs::read(CA_BUNDLE).unwrap();
    bundle.extend(std::fs::read(&https.ca).unwrap());
    bundle.extend(std::fs::read(&npm_https.ca).unwrap());
    std::fs::write(&roots, bundle).unwrap();
    let dns_hosts = format!("api.anthropic.com={0},elsewhere.example={0}", api.addr);
    let mut u = User::new(
        &format!("GUEST_CA_CERTS={CA_BUNDLE}\nEGRESS=allowlist\n"),
        vec![
            ("ANTHROPIC_API_KEY".into(), KEY.into()),
            ("NPM_TOKEN".into(), NPM_TOKEN.into()),
            ("SMOLVM_SIM_DNS_HOSTS".into(), dns_hosts.clone()),
            ("SSL_CERT_FILE".into(), roots.display().to_string()),
        ],
    );

    // NPM_TOKEN bound to the registry provisioning installs from: smolvm's interceptor
    // shows the box that host with the box's own CA, which every environment of the box
    // must trust beside GUEST_CA_CERTS (the nodejs step failed on it).
    let bindings = [
        "--credential",
        "ANTHROPIC_API_KEY@api.anthropic.com",
        "--credential",
        "NPM_TOKEN@registry.npmjs.org",
    ];
    let mut args = vec!["new", "alpha"];
    args.extend(bindings);
    let new = u.run(&args);
    assert!(new.ok(), "{new}");
    for want in [
        "ubuntu:24.04 cannot be built here",
        "No base for this configuration: provisioning from the network",
        "egress: allowlist: anthropic.com",
        "LAN: closed",
        "credential: ANTHROPIC_API_KEY for api.anthropic.com",
    ] {
        assert!(new.all().contains(want), "{want}: {new}");
    }
    let log: String = std::fs::read_dir(u.home().join("logs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    for want in [
        "installing: ca-certificates curl",
        "npm install @anthropic-ai/claude-code@latest",
        "placeholders for ANTHROPIC_API_KEY NPM_TOKEN in the login environment",
    ] {
        assert!(log.contains(want), "provisioning did not {want:?}");
    }
    // Provisioning and the start of Executor ran into nothing the list leaves out.
    let egress = u.run(&["egress", "alpha"]);
    assert!(
        egress.ok() && egress.stdout.contains("denials: none recorded"),
        "{egress}"
    );

    // curl, then Claude Code itself, from the agent's login environment.
    let call = call_api(&mut u, "alpha");
    assert_eq!(call.stdout, "{\"ok\":true}", "{call}");
    let claude = u.agent(
        "alpha",
        "cd && CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 120 claude -p 'Say hello.' </dev/null",
    );
    assert!(
        claude.ok() && claude.stdout.contains(testnet::REPLY),
        "{claude}"
    );
    let seen = https.seen();
    let key_header = format!("x-api-key: {KEY}");
    let with_key: Vec<&str> = seen
        .split("\n---\n")
        .filter(|r| r.contains(&key_header))
        .collect();
    assert!(
        with_key
            .iter()
            .any(|r| r.starts_with("POST /v1/messages HTTP"))
            && with_key
                .iter()
                .any(|r| r.starts_with("POST /v1/messages?beta=true") && r.contains("claude-cli/")),
        "the server did not see the key from curl and from claude: {seen}"
    );
    assert!(!seen.contains("SMOL_PLACEHOLDER_"), "{seen}");

    // A name outside the list: a DNS failure in the box, a denial in egress and doctor.
    let other = u.agent("alpha", "curl -sS --max-time 10 https://elsewhere.example/");
    assert_eq!(other.code, Some(6), "{other}");
    assert!(other.stderr.contains("Could not resolve host"), "{other}");
    let egress = u.run(&["egress", "alpha"]);
    assert!(
        egress.stdout.contains("resolve  elsewhere.example"),
        "{egress}"
    );
    let doctor = u.run(&["doctor", "alpha", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&doctor.stdout).unwrap();
    let mine = &report["egress"][0];
    assert_eq!(mine["name"], "alpha", "{doctor}");
    assert_eq!(mine["containment"]["mode"], "allowlist");
    assert!(
        mine["denials"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["dest"] == "elsewhere.example"),
        "{doctor}"
    );
    // The LAN is closed.
    let lan_try = format!(
        "timeout 5 bash -c 'read -r l </dev/tcp/{}/8080 && echo \"$l\"' 2>/dev/null || echo refused",
        lan.addr
    );
    assert_eq!(u.agent("alpha", &lan_try).stdout.trim(), "refused");

    // The agent's HTTPS to the registry carries the token (the registry played by the test
    // server from here on: alpha started again with the name mapped to it, then back).
    set_dns(
        &mut u,
        &format!("{dns_hosts},registry.npmjs.org={}", npm.addr),
    );
    assert!(u.run(&["stop", "alpha"]).ok());
    assert!(u.run(&["start", "alpha"]).ok());
    let whoami = u.agent(
        "alpha",
        "curl -sS --max-time 20 https://registry.npmjs.org/-/whoami -H \"authorization: Bearer $NPM_TOKEN\"",
    );
    assert_eq!(whoami.stdout, "{\"ok\":true}", "{whoami}");
    assert!(
        npm_https
            .seen()
            .contains(&format!("authorization: Bearer {NPM_TOKEN}")),
        "the registry did not see the token: {}",
        npm_https.seen()
    );
    set_dns(&mut u, &dns_hosts);
    assert!(u.run(&["stop", "alpha"]).ok());
    assert!(u.run(&["start", "alpha"]).ok());

    // The key: nowhere in the guest; on no argv of this machine, and in no environment but
    // smolvm's machine (the simulator's supervisor of alpha).
    assert_key_not_in_guest(&mut u, "alpha");
    let argv = processes_holding("cmdline", KEY);
    assert!(argv.is_empty(), "the key is on an argv: {argv:?}");
    let environ = processes_holding("environ", KEY);
    assert!(
        environ
            .iter()
            .all(|c| c.contains("smolvm-sim") && c.contains("alpha")),
        "the key is in the environment of {environ:?}"
    );
    sim_support::assert_only_in_start_env(&sim_support::raw_call_log(&u.sim_home()), KEY);

    // A save while the agent rewrites its runtime manifest as fast as it can (the LAN
    // reopened, egress open, the user's other keys bound): the decrypted plaintext holds
    // no key, and box's sealed facts (stock zstd skips them) the policy it made alpha with.
    let original = placeholder(&mut u, "alpha");
    let hostile = "m=/data/home/agent/.config/hermes-box/runtime-manifest; \
        while :; do printf 'egress=open\\negress_allow_private=10.0.0.0/8 172.16.0.0/12 192.168.0.0/16\\ncredentials=OPENAI_API_KEY@api.openai.com ANTHROPIC_API_KEY@api.anthropic.com\\n' > $m.t && mv -f $m.t $m; done";
    let started = u.agent(
        "alpha",
        &format!(
            "setsid -f sh -c '{}' </dev/null >/dev/null 2>&1",
            hostile.replace('\'', "'\\''")
        ),
    );
    assert!(started.ok(), "{started}");
    let alpha_policy = egress_json(&mut u, "alpha");
    let save = u.run(&["save", "alpha"]);
    assert!(save.ok(), "{save}");
    let looping = u.agent(
        "alpha",
        "pgrep -u agent -f runtime-manifest.t >/dev/null && echo yes",
    );
    assert_eq!(
        looping.stdout.trim(),
        "yes",
        "the agent's loop did not run: {looping}"
    );
    let _ = u.root("alpha", "pkill -u agent -f runtime-manifest; true");
    let backup = u.backups().pop().unwrap();
    let plain = u.plaintext(&backup);
    assert!(!contains(&plain, KEY), "the key is in the backup");
    assert!(
        !contains(&plain, NPM_TOKEN),
        "the npm token is in the backup"
    );
    let sealed = u.decrypted(&backup);
    assert!(!contains(&sealed, KEY), "the key is in the backup");
    let facts = &sealed[..sealed.len().min(16 << 10)];
    for want in [
        "\negress=allowlist\n",
        "\ncredentials=ANTHROPIC_API_KEY@api.anthropic.com NPM_TOKEN@registry.npmjs.org\n",
        "\nlan_closed=yes\n",
    ] {
        assert!(contains(facts, want), "the sealed facts lack {want:?}");
    }
    assert!(
        contains(&plain, "egress=open\n"),
        "the agent's manifest is not what the archive holds: this test would prove nothing"
    );

    // Loaded with the user's OpenAI key in the shell and no CREDENTIALS in box.env: the
    // sealed policy, the bindings only as the user gives them again, the LAN closed, no
    // binding alpha did not have, the key working with a placeholder of its own.
    u.shell
        .push(("OPENAI_API_KEY".into(), "sk-openai-not-for-any-box".into()));
    let mut args = vec!["load", backup.to_str().unwrap(), "gamma"];
    args.extend(bindings);
    let load = u.run(&args);
    assert!(load.ok(), "{load}");
    assert!(
        load.stdout.contains(
            "network policy: the backup's (sealed by box when it was saved), with your flags on top"
        ),
        "{load}"
    );
    assert!(
        load.all().contains(
            "the backup binds ANTHROPIC_API_KEY to api.anthropic.com, which your CREDENTIALS do not"
        ),
        "{load}"
    );
    assert_eq!(egress_json(&mut u, "gamma"), alpha_policy);
    assert_eq!(u.agent("gamma", &lan_try).stdout.trim(), "refused");
    let unbound = u.agent("gamma", "printf %s \"${OPENAI_API_KEY:-none}\"");
    assert_eq!(
        unbound.stdout, "none",
        "gamma has a binding alpha did not: {unbound}"
    );
    assert_eq!(call_api(&mut u, "gamma").stdout, "{\"ok\":true}");
    assert_ne!(placeholder(&mut u, "gamma"), original);
    assert_key_not_in_guest(&mut u, "gamma");
    assert!(u.run(&["rm", "gamma", "--force"]).ok());
    u.shell.retain(|(k, _)| k != "OPENAI_API_KEY");

    // A clone keeps the policy, the flag on top; its own placeholder works; the private
    // host it names is reachable; no key in its /data.
    let private = format!("{}/32", lan.addr);
    let clone = u.run(&["clone", "alpha", "beta", "--allow-private", &private]);
    assert!(clone.ok(), "{clone}");
    assert!(
        clone
            .stdout
            .contains("network policy: the source's ('alpha'), with your flags on top"),
        "{clone}"
    );
    let own = placeholder(&mut u, "beta");
    assert_ne!(own, original, "the clone has the source's placeholder");
    assert_eq!(call_api(&mut u, "beta").stdout, "{\"ok\":true}");
    assert_eq!(u.agent("beta", &lan_try).stdout.trim(), "hello");
    assert_eq!(u.agent("alpha", &lan_try).stdout.trim(), "refused");
    let egress = u.run(&["egress", "beta"]);
    assert!(
        egress.stdout.contains("egress: allowlist")
            && egress
                .stdout
                .contains(&format!("LAN: closed but for {private}"))
            && egress.stdout.contains("credential: ANTHROPIC_API_KEY"),
        "{egress}"
    );
    assert_key_not_in_guest(&mut u, "beta");
    // The source's placeholder is nobody's in the clone: smolvm refuses it.
    let foreign = u.agent(
        "beta",
        &format!(
            "curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' https://api.anthropic.com/v1/messages -H 'x-api-key: {original}' -d '{{}}'"
        ),
    );
    assert_eq!(foreign.stdout, "403", "{foreign}");

    if heavy() {
        heavy_part(&mut u, &backup, &bindings, &alpha_policy, &lan_try);
    }

    // clone (and the heavy variant's load) passed the key to smolvm again: still only in
    // machine start's environment. Nothing box printed, logged or kept holds it.
    sim_support::assert_only_in_start_env(&sim_support::raw_call_log(&u.sim_home()), KEY);
    let surfaces = sim_support::secret_surfaces(&u.home(), &u.sim_home())
        .into_iter()
        .filter(|(p, _)| !p.ends_with(sim_support::RAW_CALL_LOG))
        .collect::<Vec<_>>();
    sim_support::assert_no_secrets(&surfaces, &[KEY.to_string()]);
    assert!(!u.transcript.contains(KEY), "box printed the key");
    for name in ["alpha", "beta", "gamma"] {
        let _ = u.run(&["rm", name, "--force"]);
    }
    eprintln!(
        "egress-pristine total: {:.1} s",
        total.elapsed().as_secs_f64()
    );
}

/// `box base build` (no key in the base), `box load` of the backup from it (the backup's
/// policy, said; the key works; none in the restored guest).
fn heavy_part(
    u: &mut User,
    backup: &Path,
    bindings: &[&str],
    alpha_policy: &serde_json::Value,
    lan_try: &str,
) {
    let build = u.run(&["base", "build"]);
    assert!(build.ok(), "{build}");
    let bases = u.home().join("bases");
    let mut packs = 0;
    for e in std::fs::read_dir(&bases).unwrap().flatten() {
        let raw = std::fs::read(e.path()).unwrap();
        assert!(!contains(&raw, KEY), "the key is in {}", e.path().display());
        if e.path().extension().is_none_or(|x| x != "smolmachine") {
            continue;
        }
        // The pack is a zstd'd tar: scanned unpacked too, and it must unpack (an empty
        // output would hold no key either).
        let decoded = Command::new("zstd")
            .args(["-dcq"])
            .arg(e.path())
            .output()
            .unwrap();
        assert!(
            decoded.status.success() && !decoded.stdout.is_empty(),
            "{} did not unpack",
            e.path().display()
        );
        assert!(
            !contains(&decoded.stdout, KEY),
            "the key is in the unpacked {}",
            e.path().display()
        );
        packs += 1;
    }
    assert!(packs > 0, "no base pack in {}", bases.display());
    let shown = backup.display().to_string();
    let mut args = vec!["load", shown.as_str(), "gamma"];
    args.extend(bindings);
    let load = u.run(&args);
    assert!(load.ok(), "{load}");
    assert!(
        load.stdout.contains("Using base")
            && load
                .stdout
                .contains("network policy: the backup's (sealed by box when it was saved)"),
        "{load}"
    );
    // A box from a base has the policy it had, its LAN closed too.
    assert_eq!(&egress_json(u, "gamma"), alpha_policy);
    assert_eq!(u.agent("gamma", lan_try).stdout.trim(), "refused");
    assert_eq!(call_api(u, "gamma").stdout, "{\"ok\":true}");
    assert_key_not_in_guest(u, "gamma");
}
