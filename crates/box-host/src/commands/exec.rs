//! `box exec <name> [--root] -- CMD…`: one command in the box as `agent` (or root), in the
//! account's login environment (as `box enter` gives it; it starts in ~/workspace), with
//! box's stdin, stdout and stderr in its place and its exit code as box's. The command's
//! output is its own: nothing the login files print comes with it. A pty only when both
//! stdin and stdout are terminals, so pipes and files get the command's raw bytes: the way
//! to script a box and to use it from CI. No lock, as `box enter`: a long command must not
//! block saves.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Result, bail};

use super::Context;
use crate::lifecycle::boxes;
use crate::smolvm::Smolvm;
use crate::smolvm::driver::Attach;
use crate::state::BoxRecord;

/// Runs `runuser -l` with the command's stdin, stdout and stderr set aside on fds 5, 3
/// and 4, and /dev/null in their place, so the account's login shell reads its login files
/// (/etc/profile and /etc/profile.d/hermes-box.sh: PATH, proxies, the API keys'
/// placeholders; the account's .bash_profile, .bashrc, .profile) without anything they
/// print reaching the command's output, or anything they read taking its input.
/// `HERMES_BOX_EXEC` tells the agent's .bash_profile that this login runs one command: it
/// skips the MCP wiring refresh a person's login makes. `$1` is [`COMMAND`].
const QUIET_LOGIN: &str = r#"command=$1; shift
exec 3>&1 4>&2 5<&0 </dev/null >/dev/null 2>&1
HERMES_BOX_EXEC=1 exec runuser -l -w HERMES_BOX_EXEC -c "$command" -- "$@""#;

/// What the login shell runs once its login files did: the command's own streams back,
/// then the command, its words as `"$@"`, never re-parsed by a shell (`box` is `$0`).
const COMMAND: &str = r#"unset HERMES_BOX_EXEC
exec <&5 >&3 2>&4 3>&- 4>&- 5<&-
exec "$@""#;

pub fn run(ctx: &Context, args: &crate::cli::ExecArgs) -> Result<ExitCode> {
    let (record, smolvm) = running(ctx, &args.name)?;
    let user = if args.root { "root" } else { "agent" };
    // `--` before the account: runuser would otherwise take the command's own options
    // (`ls -q`) as its own.
    let mut argv = vec!["sh", "-c", QUIET_LOGIN, "box", COMMAND, user, "box"];
    argv.extend(args.command.iter().map(String::as_str));
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let (attach, env) = if terminal {
        (
            Attach::Terminal,
            vec![("TERM".to_string(), terminal_type())],
        )
    } else {
        (Attach::Stdin, Vec::new())
    };
    let code = smolvm.exec_attached(&record.machine, attach, &env, &argv)?;
    Ok(exit_code(code))
}

/// A registered box whose machine is running, and smolvm where it lives. A stopped box is
/// an error, not started behind a script's back.
pub(super) fn running(ctx: &Context, raw: &str) -> Result<(BoxRecord, Smolvm)> {
    let record = boxes::registered(ctx, raw)?;
    let smolvm = boxes::smolvm(ctx, &record)?;
    let machine = boxes::machine(&smolvm, &record)?;
    if !machine.state.is_running() {
        let name = &record.name;
        bail!(
            "box '{name}' is {}; start it with: box start {name}",
            machine.state
        );
    }
    Ok((record, smolvm))
}

/// The user's `TERM` for the guest's pty when it is a plain word, else a safe default.
pub(super) fn terminal_type() -> String {
    std::env::var("TERM")
        .ok()
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or_else(|| "xterm-256color".into())
}

/// The guest's exit status as box's: 0-255 as they are (a signal already came back as
/// 128+n); anything else, which no process can exit with, as a failure.
pub(super) fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
