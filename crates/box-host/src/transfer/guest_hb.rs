//! The `hb` verbs a save or a load runs in the guest, as root, each logged to the
//! transcript. Long verbs take the pending-signal flag so a HUP/INT/TERM cuts them short;
//! cleanup calls never do (they must finish).

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::lifecycle::guest::{self, HB_PATH};
use crate::lifecycle::transcript::Transcript;
use crate::smolvm::{ExecOpts, Output, Smolvm};

/// Deadlines of the transfer's guest calls.
pub mod timeouts {
    use std::time::Duration;
    /// quiesce stops Hermes (10 s), waits for Executor's port and checkpoints SQLite.
    pub const QUIESCE: Duration = Duration::from_secs(300);
    pub const SHORT: Duration = Duration::from_secs(120);
    /// export and import walk all of /data.
    pub const BULK: Duration = Duration::from_secs(6 * 3600);
    /// resume and up wait for Executor to answer.
    pub const RESUME: Duration = Duration::from_secs(300);
}

/// One guest in one transfer: the machine, the transcript and the signal flag.
pub struct Guest<'a> {
    pub smolvm: &'a Smolvm,
    pub machine: &'a str,
    pub transcript: &'a mut Transcript,
    pub cancel: Option<&'a AtomicUsize>,
}

impl Guest<'_> {
    /// Runs `argv` in the guest; `cancellable` lets a pending signal end it.
    pub fn exec(&mut self, argv: &[&str], timeout: Duration, cancellable: bool) -> Result<Output> {
        self.transcript.line(&format!("$ {}", argv.join(" ")));
        let out = self.smolvm.exec(
            self.machine,
            argv,
            ExecOpts {
                timeout: Some(timeout),
                cancel: if cancellable { self.cancel } else { None },
                ..ExecOpts::default()
            },
        );
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                self.transcript.line(&format!("failed: {e}"));
                return Err(e.into());
            }
        };
        self.transcript.block("stdout", &out.stdout);
        self.transcript.block("stderr", &out.stderr);
        self.transcript.line(&format!("-> {}", guest::status(&out)));
        Ok(out)
    }

    /// Like [`Guest::exec`], but a non-zero status is an error naming the command.
    pub fn exec_ok(
        &mut self,
        what: &str,
        argv: &[&str],
        timeout: Duration,
        cancellable: bool,
    ) -> Result<Output> {
        let out = self.exec(argv, timeout, cancellable)?;
        if !out.success() {
            bail!(
                "{what} in box '{}' failed ({}){}",
                self.machine,
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            );
        }
        Ok(out)
    }

    /// `hb <args>`, which must succeed.
    pub fn hb(&mut self, args: &[&str], timeout: Duration, cancellable: bool) -> Result<Output> {
        let mut argv = vec![HB_PATH];
        argv.extend_from_slice(args);
        self.exec_ok(
            &format!("`hb {}`", args.join(" ")),
            &argv,
            timeout,
            cancellable,
        )
    }

    /// `hb write-manifest` with this `box`'s version, the version of the smolvm that runs
    /// the box and the box's network policy (names only): the manifest a backup carries
    /// names what made it, and `box load` makes the restored box with that policy.
    pub fn write_manifest(
        &mut self,
        policy: Option<&crate::lifecycle::containment::Containment>,
    ) -> Result<Output> {
        let smolvm = self.smolvm.version()?.to_string();
        let entries = policy
            .map(crate::lifecycle::containment::carried::manifest_entries)
            .unwrap_or_default();
        let mut args = vec![
            "write-manifest",
            "--box-version",
            crate::version::LONG,
            "--smolvm-version",
            &smolvm,
        ];
        for e in &entries {
            args.extend(["--policy", e.as_str()]);
        }
        self.hb(&args, timeouts::SHORT, true)
    }
}
