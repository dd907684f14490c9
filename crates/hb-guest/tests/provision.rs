//! provision/provision.sh: well-formed (bash -n, shellcheck, every step named and
//! defined, no silent `set -e`), and run for real — twice, to prove idempotence — as root
//! in a throwaway overlay of this machine's root filesystem (a private mount namespace;
//! nothing reaches the host). The smolvm simulator will take this role once it can run
//! provisioning; until then this is the same script on the same Debian 12 userland.
//!
//! The overlay run installs missing apt packages from the Debian mirror and uses the npm
//! tools scripts/setup.sh put in /opt/hermes-box-ci (HB_TOOL_PREFIX), so it needs no npm
//! download. It needs root and mount namespaces: without them it fails under CI=true and
//! skips otherwise. HB_SKIP_PROVISION_TEST=1 skips it (e.g. offline).
//!
//! The Hermes step (which the overlay run leaves out) runs alone on the host, into a temp
//! prefix, through its PyPI fallback from the wheels scripts/setup.sh keeps (no network).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn provision_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../provision")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(provision_dir().join(name)).unwrap()
}

#[test]
fn scripts_are_well_formed() {
    for f in ["provision.sh", "agent-bash-profile.sh"] {
        let st = Command::new("bash")
            .arg("-n")
            .arg(provision_dir().join(f))
            .status()
            .unwrap();
        assert!(st.success(), "bash -n {f}");
    }
    let st = Command::new("sh")
        .arg("-n")
        .arg(provision_dir().join("profile.sh"))
        .status()
        .unwrap();
    assert!(st.success(), "sh -n profile.sh");
    match Command::new("shellcheck")
        .arg("-x")
        .args([
            "provision.sh",
            "agent-bash-profile.sh",
            "profile.sh",
            "lib/choices.sh",
        ])
        .current_dir(provision_dir())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "shellcheck:\n{}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("shellcheck is not installed (scripts/setup.sh installs it)")
        }
        Err(_) => eprintln!("SKIPPED: shellcheck is not installed"),
    }

    let script = read("provision.sh");
    // No silent exits: errors are handled by the step runner, not `set -e`.
    assert!(
        !script.lines().any(|l| l.trim_start().starts_with("set -e")),
        "set -e in provision.sh"
    );
    let steps: Vec<(&str, &str)> = script
        .lines()
        .filter_map(|l| l.strip_prefix("step "))
        .map(|l| {
            let mut it = l.split_whitespace();
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect();
    assert!(steps.len() >= 10, "{steps:?}");
    for (name, func) in &steps {
        assert!(
            script.contains(&format!("\n{func}() {{")),
            "step {name}: function {func} is not defined"
        );
    }
    for needed in [
        "apt-packages",
        "agent-user",
        "nodejs",
        "npm-tools",
        "hermes",
        "hb-binary",
        "hb-init",
        "login-environment",
        "verify",
    ] {
        assert!(steps.iter().any(|(n, _)| *n == needed), "no step {needed}");
    }

    let profile = read("profile.sh");
    for var in [
        "CLAUDE_CONFIG_DIR=/data/home/agent/.claude",
        "CODEX_HOME=/data/home/agent/.codex",
        "HERMES_HOME=/data/home/agent/.hermes",
        "XDG_CONFIG_HOME=/data/home/agent/.config",
        "/opt/hermes-box/bin",
    ] {
        assert!(profile.contains(var), "profile.sh lacks {var}");
    }
}

/// Runs `snippet` with provision/lib/choices.sh sourced; returns (success, stdout).
fn choices(snippet: &str, stdin: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new("bash")
        .args(["-c", &format!(". lib/choices.sh; {snippet}")])
        .current_dir(provision_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Where Node >= 20 comes from: Debian 13's own nodejs; NodeSource for Ubuntu 24.04 and
/// Debian 12 (their archives have 18). Decided from the archive's candidate, or from the
/// release before apt lists exist. (NodeSource is not reachable from CI: the choice is
/// tested here, not the download.)
#[test]
fn node_comes_from_the_archive_only_where_it_has_node_20() {
    for (id, version, candidate, want) in [
        ("debian", "13", "20.19.2+dfsg-1+deb13u3", "distro"),
        ("debian", "12", "18.19.0+dfsg-6~deb12u2", "nodesource"),
        ("ubuntu", "24.04", "18.19.1+dfsg-6ubuntu5", "nodesource"),
        ("ubuntu", "26.04", "22.14.0+dfsg-1ubuntu1", "distro"),
        ("debian", "13", "1:20.1.0-1", "distro"),
        ("debian", "12", "", "nodesource"),
        ("ubuntu", "24.04", "", "nodesource"),
        ("debian", "13", "", "distro"),
        ("alpine", "3.20", "", "nodesource"),
    ] {
        let (ok, out) = choices(&format!("node_plan {id} {version} '{candidate}'"), "");
        assert!(ok);
        assert_eq!(out.trim(), want, "{id} {version} candidate {candidate:?}");
    }
}

/// The wording of an untrusted certificate in each downloader provisioning uses, which
/// makes a failed step name GUEST_CA_CERTS; other failures do not.
#[test]
fn certificate_failures_are_recognised_in_every_tool() {
    for text in [
        "npm ERR! code SELF_SIGNED_CERT_IN_CHAIN",
        "npm error request to https://registry.npmjs.org/x failed, reason: self-signed certificate in certificate chain",
        "curl: (60) SSL certificate problem: self-signed certificate in certificate chain",
        "curl: (60) SSL certificate problem: unable to get local issuer certificate",
        "WARNING: Retrying ... SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed'))",
        "fatal: unable to access 'https://github.com/x/': server certificate verification failed. CAfile: none CRLfile: none",
        "Err:1 https://deb.example stable InRelease\n  Certificate verification failed: The certificate is NOT trusted.",
        "npm ERR! code UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
    ] {
        let (ok, _) = choices("is_certificate_failure", text);
        assert!(ok, "not recognised: {text}");
    }
    for text in [
        "npm ERR! code E404",
        "curl: (6) Could not resolve host: deb.nodesource.com",
        "E: Unable to locate package nodejs",
        "",
    ] {
        let (ok, _) = choices("is_certificate_failure", text);
        assert!(!ok, "wrongly recognised: {text}");
    }
}

#[test]
fn proxy_urls_are_printed_without_credentials() {
    for (url, want) in [
        (
            "http://user:hunter2@proxy.corp:3128",
            "http://***@proxy.corp:3128",
        ),
        ("http://u:p@ss@proxy:3128/x", "http://***@proxy:3128/x"),
        ("proxy.corp:3128", "proxy.corp:3128"),
        ("http://proxy:3128/a@b", "http://proxy:3128/a@b"),
    ] {
        let (ok, out) = choices(&format!("redact_proxy '{url}'"), "");
        assert!(ok);
        assert_eq!(out, want, "{url}");
    }
}

/// Can we make a private mount namespace with an overlay here?
fn overlay_usable() -> Result<(), String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err("needs root".into());
    }
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"])
        .output()
        .map_err(|e| format!("unshare: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "unshare -m failed: {}",
            String::from_utf8_lossy(&probe.stderr)
        ));
    }
    Ok(())
}

const RUNNER: &str = r#"
set -eu
R=$1; HB=$2; PROV=$3
mount -t tmpfs tmpfs "$R"
mkdir "$R/upper" "$R/work" "$R/merged"
mount -t overlay overlay -o "lowerdir=/,upperdir=$R/upper,workdir=$R/work" "$R/merged"
M=$R/merged
for d in proc sys dev; do mount --rbind "/$d" "$M/$d"; done
mount -t tmpfs tmpfs "$M/tmp"
install -D -m 0755 "$HB" "$M/usr/local/bin/hb"
mkdir -p "$M/opt/hermes-box/provision"
cp -r "$PROV"/. "$M/opt/hermes-box/provision/"
printf 'INSTALL_HERMES=0\nINSTALL_EXECUTOR=1\n' > "$M/etc/hermes-box.env"
in_box() { chroot "$M" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HB_TOOL_PREFIX=/opt/hermes-box-ci "$@"; }
for i in 1 2; do
  echo "=== run $i"
  in_box /bin/bash /opt/hermes-box/provision/provision.sh
done
echo "=== login"
in_box runuser -l agent -c 'echo "env: $CLAUDE_CONFIG_DIR $CODEX_HOME $HERMES_HOME $XDG_CONFIG_HOME"; id -un; sudo -n true && echo sudo-ok'
echo "=== broken hb"
rm "$M/usr/local/bin/hb"
if in_box /bin/bash /opt/hermes-box/provision/provision.sh; then echo "unexpected success"; else echo "failed as expected"; fi
"#;

#[test]
fn provisioning_runs_twice_in_an_overlay_and_changes_nothing_the_second_time() {
    if std::env::var("HB_SKIP_PROVISION_TEST").is_ok_and(|v| v == "1") {
        {
            // Written past libtest's capture (eprintln! of a passing test is hidden).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: HB_SKIP_PROVISION_TEST=1");
        }
        return;
    }
    if let Err(why) = overlay_usable() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the provisioning test needs root and mount namespaces: {why}");
        }
        {
            // Written past libtest's capture (eprintln! of a passing test is hidden).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
        }
        return;
    }
    if common::require_tool("executor").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "bash", "-c", RUNNER, "runner"])
        .arg(dir.path())
        .arg(common::hb_bin())
        .arg(provision_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "runner failed:\n{stdout}\n{stderr}");
    let (first, rest) = stdout.split_once("=== run 2").expect("two runs");
    let (second, rest) = rest.split_once("=== login").expect("login");
    let (login, broken) = rest.split_once("=== broken hb").expect("broken");

    assert!(
        first.contains("==> provisioning complete; changed:"),
        "{first}"
    );
    assert!(
        first.contains("created user agent") || first.contains("agent ("),
        "{first}"
    );
    for step in [
        "config",
        "system",
        "apt-packages",
        "agent-user",
        "nodejs",
        "npm-tools",
        "hb-init",
        "verify",
    ] {
        assert!(
            second.contains(&format!("==> step: {step}\n")),
            "no progress line for {step}:\n{second}"
        );
    }
    assert!(
        second.contains("==> provisioning: already provisioned, nothing changed"),
        "the second run changed something:\n{second}"
    );
    assert!(
        login.contains("env: /data/home/agent/.claude /data/home/agent/.codex /data/home/agent/.hermes /data/home/agent/.config"),
        "{login}"
    );
    assert!(login.contains("agent\nsudo-ok"), "{login}");
    assert!(broken.contains("failed as expected"), "{broken}");
    assert!(
        stderr.contains("==> failed: hb-binary"),
        "the failing step must be named:\n{stderr}"
    );
}

/// provision.sh's config and Hermes steps alone, on this host as it is, into `prefix`,
/// with `config` as the box's box.env and the official installer fetched from
/// `installer_url`; stdout and stderr together, which must say it succeeded.
fn run_hermes_step(
    home: &Path,
    config: &Path,
    data: &Path,
    prefix: &Path,
    installer_url: &str,
    extra_env: &[(&str, &str)],
) -> String {
    let out = Command::new("bash")
        .arg(provision_dir().join("provision.sh"))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("HB_CONFIG", config)
        .env("HB_DATA", data)
        .env("HB_TOOL_PREFIX", prefix)
        .env("PROVISION_STEPS", "config hermes")
        .env("HERMES_INSTALLER_URL", installer_url)
        .envs(extra_env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "provision.sh failed:\n{text}");
    text
}

/// The wheels scripts/setup.sh downloads for the pinned hermes-agent[mcp].
const HERMES_WHEELS: &str = "/opt/hermes-box-ci/hermes-wheels";

/// provision.sh's Hermes step alone (PROVISION_STEPS), on this host as it is, through its
/// PyPI fallback: the official installer is made unreachable (HERMES_INSTALLER_URL) and pip
/// installs from setup.sh's local wheels (PIP_NO_INDEX, PIP_FIND_LINKS), so nothing is
/// downloaded. Everything lands in a temp prefix; a second run changes nothing.
#[test]
fn hermes_step_installs_from_pypi_when_the_installer_is_unreachable() {
    let have_wheels = std::fs::read_dir(HERMES_WHEELS).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("hermes_agent-"))
    });
    if !have_wheels {
        let why =
            format!("no hermes-agent wheels in {HERMES_WHEELS} (run `bash scripts/setup.sh`)");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        {
            // Written past libtest's capture (eprintln! of a passing test is hidden).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let config = dir.path().join("hermes-box.env");
    std::fs::write(&config, "INSTALL_HERMES=1\n").unwrap();
    // Debian's python3 (no pyenv shim, no hermes already on PATH); any HTTPS from Hermes's
    // own update check goes to a closed port instead of PyPI.
    let closed = format!("http://127.0.0.1:{}", common::free_port());
    let unreachable = format!("file://{}/no-installer.sh", dir.path().display());
    let run = || {
        run_hermes_step(
            &home,
            &config,
            &dir.path().join("data"),
            &prefix,
            &unreachable,
            &[
                ("PIP_NO_INDEX", "1"),
                ("PIP_FIND_LINKS", HERMES_WHEELS),
                ("PIP_NO_CACHE_DIR", "1"),
            ],
        )
    };

    let first = run();
    assert!(first.contains("==> step: hermes\n"), "{first}");
    assert!(
        !first.contains("==> step: apt-packages"),
        "PROVISION_STEPS ignored:\n{first}"
    );
    assert!(
        first.contains("official installer unreachable; using PyPI hermes-agent"),
        "{first}"
    );
    assert!(
        first.contains("==> provisioning complete; changed: hermes"),
        "{first}"
    );
    let hermes_bin = prefix.join("bin/hermes");
    let version = Command::new(&hermes_bin)
        .arg("--version")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("HERMES_HOME", home.join(".hermes"))
        .env("HTTPS_PROXY", &closed)
        .env("https_proxy", &closed)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(version.status.success(), "{text}");
    assert!(text.starts_with("Hermes Agent v"), "{text}");
    assert!(
        first.contains(&format!(
            "hermes-agent {} from PyPI",
            text["Hermes Agent v".len()..]
                .split_whitespace()
                .next()
                .unwrap()
        )),
        "{first}\n{text}"
    );
    // With its MCP client: the wiring hb writes is useless to a Hermes without it.
    let mcp = Command::new(prefix.join("hermes-venv/bin/python"))
        .args(["-c", "import mcp"])
        .status()
        .unwrap();
    assert!(
        mcp.success(),
        "hermes-agent installed without its mcp extra"
    );

    let second = run();
    assert!(second.contains("hermes present"), "{second}");
    assert!(
        second.contains("==> provisioning: already provisioned, nothing changed"),
        "{second}"
    );
}

/// The official installer gets the original recipe's headless flags (no browser, no
/// computer-use driver) whether the box's config is the shipped box.env or missing, then
/// provision.sh's own protected flags. The "installer" is a script served from a file://
/// URL that records its arguments: the real one needs the network.
#[test]
fn hermes_installer_gets_the_recipe_flags_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let installer = dir.path().join("install.sh");
    let args_file = dir.path().join("args");
    std::fs::write(
        &installer,
        format!("printf '%s\\n' \"$*\" > '{}'\n", args_file.display()),
    )
    .unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../box.env");
    for config in [shipped, dir.path().join("no-such-box.env")] {
        let _ = std::fs::remove_file(&args_file);
        let prefix = dir.path().join("prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let text = run_hermes_step(
            dir.path(),
            &config,
            &dir.path().join("data"),
            &prefix,
            &format!("file://{}", installer.display()),
            &[],
        );
        assert!(
            text.contains("hermes from the official installer"),
            "{}:\n{text}",
            config.display()
        );
        let args = std::fs::read_to_string(&args_file).unwrap();
        assert_eq!(
            args.trim(),
            "--skip-browser --skip-computer-use --skip-setup --non-interactive",
            "with {}",
            config.display()
        );
    }
}
