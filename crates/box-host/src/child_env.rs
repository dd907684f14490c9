//! The environment of every process `box` starts, built from an allowlist in this one place.
//!
//! A child never inherits box's whole environment: the user's shell may hold the backup
//! passphrase (`BOX_PASSPHRASE`), cloud keys, agent tokens, and a real smolvm keeps its
//! environment in `/proc/<pid>/environ` for as long as the VMM runs. Each kind of child gets
//! what it needs to work and nothing else; `BOX_PASSPHRASE*` is refused whatever a list says.
//!
//! Proxy variables go to no child: their URLs may hold credentials, which stay out of
//! every environment box hands on. smolvm pulls images inside its own VM and takes a proxy
//! as `machine start --proxy` (docs/smolvm.md, "What the guest is"), not from its
//! environment; an opener's browser keeps whatever proxy settings the desktop gives it.

use std::ffi::OsString;
use std::process::Command;

/// Which child is being started; each has its own allowlist on top of `COMMON`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildKind {
    /// `smolvm` (or the simulator): its own knobs, where it keeps its data.
    Smolvm,
    /// The one `machine start` that holds API keys in its environment: smolvm's knobs but
    /// not its logging's (`RUST_LOG` at debug or trace could make it log the requests it
    /// puts the keys into; the machine process keeps that environment for its life).
    SmolvmHoldingKeys,
    /// `xdg-open`, `open`, `gio open`, `BOX_BROWSER`: the desktop session.
    Opener,
    /// `box __gateway`: box itself, which reads box.env keys from the environment and runs
    /// smolvm to read Executor's token (over ssh for a box on a remote host, so it gets
    /// what ssh needs too).
    Gateway,
    /// `ssh` (the remote transport): what OpenSSH needs to find the user's config, keys and
    /// agent. Not even the locale: Debian's own `ssh_config` has `SendEnv LANG LC_*`, and
    /// smolvm on a remote host gets only what the remote account gives it, nothing of box's.
    Ssh,
    /// `BOX_PASSPHRASE_COMMAND`: the user's password manager, which may need its agent, its
    /// store or the desktop's keyring to answer (and never gets `BOX_PASSPHRASE*` itself).
    PassphraseCommand,
}

/// What every child gets: where it runs, who for, in which language.
const COMMON: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_DIRS",
];

/// smolvm's own variables beyond `SMOLVM*`: logging, registry credentials' location, the
/// CA store a TLS-inspecting network needs.
const SMOLVM_EXTRA: &[&str] = &[
    "RUST_LOG",
    "RUST_BACKTRACE",
    "DOCKER_CONFIG",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// smolvm's logging knobs, which a start holding API keys never gets.
const LOGGING: &[&str] = &["RUST_LOG"];

/// What an opener needs to reach the user's desktop and browser.
const DESKTOP: &[&str] = &[
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_SESSION_TYPE",
    "XDG_CURRENT_DESKTOP",
    "XDG_SESSION_DESKTOP",
    "DESKTOP_SESSION",
    "BROWSER",
    // xdg-open's desktop detection reads these.
    "KDE_FULL_SESSION",
    "KDE_SESSION_VERSION",
    "GNOME_DESKTOP_SESSION_ID",
    "MATE_DESKTOP_SESSION_ID",
    "__CF_USER_TEXT_ENCODING",
];

/// Everything ssh gets. `SHELL` runs a `ProxyCommand`; `TERM` goes in `ssh -t`'s pty
/// request; `SSH_AUTH_SOCK` is the agent (keys stay there, never forwarded:
/// `ForwardAgent=no`); `KRB5CCNAME` is GSSAPI's ticket cache. No proxy variables: OpenSSH
/// reads none (a `ProxyCommand` or `ProxyJump` in the user's config says how to get out).
const SSH: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "SSH_AUTH_SOCK",
    "KRB5CCNAME",
];

/// What common password managers need beyond `COMMON`: gpg and its pinentry (`pass`), the
/// session bus (`secret-tool`), the ssh agent (age/ssh-key based stores), a display for a
/// graphical pinentry. Anything else a command needs, a wrapper script sets.
const PASSWORD_MANAGER: &[&str] = &[
    "GNUPGHOME",
    "GPG_TTY",
    "PASSWORD_STORE_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "SSH_AUTH_SOCK",
    "DISPLAY",
    "WAYLAND_DISPLAY",
];

/// box's own variables the gateway process reads (the box.env keys come on top).
const BOX_OWN: &[&str] = &["BOX_HOME", "BOX_CONFIG", "BOX_LOG", "BOX_SMOLVM_TIMEOUT"];

/// Whether variable `name` may reach a child of `kind`.
pub fn allowed(kind: ChildKind, name: &str) -> bool {
    if name.starts_with("BOX_PASSPHRASE") {
        return false;
    }
    if kind == ChildKind::Ssh {
        return SSH.contains(&name);
    }
    let smolvm_own = name == "SMOLVM" || name.starts_with("SMOLVM_");
    COMMON.contains(&name)
        || name.starts_with("LC_")
        || match kind {
            ChildKind::Smolvm => smolvm_own || SMOLVM_EXTRA.contains(&name),
            ChildKind::SmolvmHoldingKeys => {
                (smolvm_own || SMOLVM_EXTRA.contains(&name)) && !LOGGING.contains(&name)
            }
            ChildKind::Opener => DESKTOP.contains(&name),
            ChildKind::Ssh => false,
            ChildKind::PassphraseCommand => PASSWORD_MANAGER.contains(&name),
            ChildKind::Gateway => {
                // The gateway of a box on a remote host runs ssh (its token read, its forward).
                SSH.contains(&name)
                    || smolvm_own
                    || SMOLVM_EXTRA.contains(&name)
                    || BOX_OWN.contains(&name)
                    || box_proto::box_env::KEYS.contains(&name)
            }
        }
}

/// The allowed subset of `vars` (box's environment) for a child of `kind`.
pub fn filtered(
    kind: ChildKind,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter()
        .filter(|(k, _)| k.to_str().is_some_and(|k| allowed(kind, k)))
        .collect()
}

/// Replaces `cmd`'s environment with the allowed part of box's own. Call it before adding
/// the child's own variables (`cmd.env(…)` afterwards still works).
pub fn apply(cmd: &mut Command, kind: ChildKind) -> &mut Command {
    cmd.env_clear().envs(filtered(kind, std::env::vars_os()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(kind: ChildKind, env: &[(OsString, OsString)]) -> Vec<String> {
        filtered(kind, env.to_vec())
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn no_child_ever_gets_the_passphrase() {
        let env = vars(&[
            ("BOX_PASSPHRASE", "s"),
            ("BOX_PASSPHRASE_FILE", "/p"),
            ("BOX_PASSPHRASE_X", "s"),
            ("PATH", "/bin"),
        ]);
        for kind in [
            ChildKind::Smolvm,
            ChildKind::Opener,
            ChildKind::Gateway,
            ChildKind::Ssh,
            ChildKind::PassphraseCommand,
        ] {
            assert_eq!(names(kind, &env), ["PATH"], "{kind:?}");
        }
    }

    #[test]
    fn each_child_gets_what_it_needs_and_nothing_unknown_nor_proxy_credentials() {
        let env = vars(&[
            ("HOME", "/h"),
            ("LC_ALL", "C.UTF-8"),
            ("SMOLVM", "/bin/smolvm"),
            ("SMOLVM_DATA_DIR", "/d"),
            ("https_proxy", "http://u:p@proxy:3128"),
            ("DISPLAY", ":0"),
            ("BOX_HOME", "/s"),
            ("OPEN_IDLE_TIMEOUT", "2"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("ANTHROPIC_API_KEY", "x"),
            ("SSH_AUTH_SOCK", "/agent"),
        ]);
        // ssh: its agent and home, never the locale (Debian's `SendEnv LANG LC_*` would
        // carry it to the remote), smolvm's knobs, proxies or anything unknown.
        let mut ssh_env = env.clone();
        ssh_env.extend(vars(&[("TERM", "xterm"), ("LANG", "de_DE.UTF-8")]));
        assert_eq!(
            names(ChildKind::Ssh, &ssh_env),
            ["HOME", "SSH_AUTH_SOCK", "TERM"]
        );
        assert_eq!(
            names(ChildKind::Smolvm, &env),
            ["HOME", "LC_ALL", "SMOLVM", "SMOLVM_DATA_DIR"]
        );
        assert_eq!(
            names(ChildKind::Opener, &env),
            ["HOME", "LC_ALL", "DISPLAY"]
        );
        // A password manager: its agents and display, never an API key or smolvm's knobs.
        assert_eq!(
            names(ChildKind::PassphraseCommand, &env),
            ["HOME", "LC_ALL", "DISPLAY", "SSH_AUTH_SOCK"]
        );
        // smolvm's logging reaches smolvm, but not the start that holds API keys.
        let mut logged = env.clone();
        logged.extend(vars(&[("RUST_LOG", "trace"), ("RUST_BACKTRACE", "1")]));
        assert!(names(ChildKind::Smolvm, &logged).contains(&"RUST_LOG".to_string()));
        assert_eq!(
            names(ChildKind::SmolvmHoldingKeys, &logged),
            [
                "HOME",
                "LC_ALL",
                "SMOLVM",
                "SMOLVM_DATA_DIR",
                "RUST_BACKTRACE"
            ]
        );
        assert_eq!(
            names(ChildKind::Gateway, &env),
            [
                "HOME",
                "LC_ALL",
                "SMOLVM",
                "SMOLVM_DATA_DIR",
                "BOX_HOME",
                "OPEN_IDLE_TIMEOUT",
                "SSH_AUTH_SOCK"
            ]
        );
    }
}
