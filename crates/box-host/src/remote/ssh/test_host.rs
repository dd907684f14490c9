//! A remote host for unit tests: this machine's own `sshd` in inetd mode (`sshd -i`) as
//! the `ProxyCommand`, so nothing listens anywhere. Keys, config and known_hosts live in a
//! temp dir; `BOX_SSH_COMMAND` is `ssh -F <dir>/ssh_config`. The remote account's
//! `XDG_DATA_HOME` and `TMPDIR` point into the temp dir too (`remote-data`, `remote-tmp`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::remote::RemoteHost;

pub(crate) struct TestHost {
    pub dir: tempfile::TempDir,
    pub host: RemoteHost,
    pub ssh_command: String,
}

impl TestHost {
    /// The remote account's TMPDIR.
    pub fn remote_tmp(&self) -> PathBuf {
        self.dir.path().join("remote-tmp")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Empties known_hosts.
    pub fn forget_host_key(&self) {
        std::fs::write(self.dir.path().join("known_hosts"), "").unwrap();
    }

    /// Replaces known_hosts with a key that is not the host's.
    pub fn change_host_key(&self) {
        let other = self.dir.path().join("other");
        keygen(&other);
        let line = std::fs::read_to_string(other.with_extension("pub")).unwrap();
        std::fs::write(
            self.dir.path().join("known_hosts"),
            format!("boxtest {line}"),
        )
        .unwrap();
    }
}

const SSHD: &str = "/usr/sbin/sshd";

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-f")
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success(), "ssh-keygen");
}

/// What the sshd-backed tests need that this machine lacks (empty: nothing).
fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    if !nix::unistd::getuid().is_root() {
        missing.push("root (sshd -i logs in as root)".to_string());
    }
    if !Path::new(SSHD).exists() {
        missing.push(format!(
            "{SSHD} (apt-get install openssh-server; scripts/setup.sh does)"
        ));
    }
    missing
}

/// `None` where there is no sshd or we are not root: under `CI=true` the test fails (the
/// transport would go untested), elsewhere it prints a visible `SKIPPED:` line and passes,
/// as the end-to-end suites do.
pub(crate) fn test_host() -> Option<TestHost> {
    let missing = missing();
    if !missing.is_empty() {
        let why = format!("ssh transport tests need: {}", missing.join(", "));
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        // Written past libtest's capture (eprintln! of a passing test is hidden).
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
        return None;
    }
    // sshd's privilege separation directory.
    let _ = std::fs::create_dir_all("/run/sshd");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    keygen(&d.join("hostkey"));
    keygen(&d.join("id"));
    let sshd_config = d.join("sshd_config");
    std::fs::write(
        &sshd_config,
        format!(
            "HostKey {d}/hostkey\nAuthorizedKeysFile {d}/id.pub\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
             PidFile none\nAllowTcpForwarding local\nLogLevel ERROR\n\
             SetEnv XDG_DATA_HOME={d}/remote-data TMPDIR={d}/remote-tmp\n",
            d = d.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all(d.join("remote-tmp")).unwrap();
    let hostkey = std::fs::read_to_string(d.join("hostkey.pub")).unwrap();
    std::fs::write(d.join("known_hosts"), format!("boxtest {hostkey}")).unwrap();
    std::fs::write(
        d.join("ssh_config"),
        format!(
            "Host boxtest\n  User root\n  IdentityFile {d}/id\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  \
             ProxyCommand {SSHD} -i -f {d}/sshd_config\n",
            d = d.display()
        ),
    )
    .unwrap();
    let ssh_command = format!("ssh -F {}/ssh_config", d.display());
    Some(TestHost {
        host: RemoteHost::parse("ssh://boxtest").unwrap(),
        ssh_command,
        dir,
    })
}
