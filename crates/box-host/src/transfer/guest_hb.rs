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
        self.record(&out);
        Ok(out)
    }

    /// A finished guest command's output and status, into the transcript.
    pub fn record(&mut self, out: &Output) {
        self.transcript.block("stdout", &out.stdout);
        self.transcript.block("stderr", &out.stderr);
        self.transcript.line(&format!("-> {}", guest::status(out)));
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
        policy: Option<&crate::policy::Containment>,
    ) -> Result<Output> {
        let smolvm = self.smolvm.version()?.to_string();
        let entries = policy
            .map(crate::policy::carried::manifest_entries)
            .unwrap_or_default();
        let versions = [
            "write-manifest",
            "--box-version",
            crate::version::LONG,
            "--smolvm-version",
            &smolvm,
        ];
        let mut args = versions.to_vec();
        for e in &entries {
            args.extend(["--policy", e.as_str()]);
        }
        if !entries.is_empty() {
            let mut argv = vec![HB_PATH];
            argv.extend_from_slice(&args);
            let out = self.exec(&argv, timeouts::SHORT, true)?;
            // An hb from before policies were recorded (a box made by an older box; `box
            // repair` brings its hb up to date): the manifest goes without the policy.
            if out.code == Some(2) && out.stderr.contains("'--policy'") {
                crate::ui::warn(format!(
                    "the hb in '{}' is older than box: this manifest records no network policy \
                     (a load of its backup takes box.env's); box repair updates hb",
                    self.machine
                ));
            } else if out.success() {
                return Ok(out);
            } else {
                bail!(
                    "`hb write-manifest` in box '{}' failed ({}){}",
                    self.machine,
                    guest::status(&out),
                    guest::last_lines(&out.stderr, &out.stdout)
                );
            }
        }
        self.hb(&versions, timeouts::SHORT, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Containment, Overrides};

    /// A box whose hb predates `--policy` (clap refuses it, exit 2) still saves: the
    /// manifest is written without the policy, and said. A newer hb gets the policy.
    #[test]
    fn an_older_hb_writes_the_manifest_without_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls");
        let smolvm = crate::smolvm::fake_smolvm(
            dir.path(),
            &format!(
                r#"echo "$*" >> {log}
case "$*" in
  --version) echo 'smolvm 1.33.0';;
  *--policy*) [ -e {old} ] || exit 0
    printf "error: unexpected argument '--policy' found\n\nUsage: hb write-manifest [OPTIONS]\n" >&2; exit 2;;
  *) exit 0;;
esac"#,
                log = log.display(),
                old = dir.path().join("old").display()
            ),
        );
        let state = crate::state::StateDir::at(dir.path().join("state"));
        let mut transcript = Transcript::create(&state, "alpha", "save").unwrap();
        let policy =
            Containment::from_config(&box_proto::BoxEnv::default(), &Overrides::default()).unwrap();
        let mut guest = Guest {
            smolvm: &smolvm,
            machine: "alpha",
            transcript: &mut transcript,
            cancel: None,
        };
        guest.write_manifest(Some(&policy)).unwrap();
        std::fs::write(dir.path().join("old"), "").unwrap();
        guest.write_manifest(Some(&policy)).unwrap();
        let calls: Vec<String> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter(|l| l.contains("write-manifest"))
            .map(String::from)
            .collect();
        assert_eq!(calls.len(), 3, "{calls:#?}");
        assert!(calls[0].contains("--policy egress=open") && calls[1].contains("--policy"));
        assert!(
            !calls[2].contains("--policy") && calls[2].contains("--smolvm-version 1.33.0"),
            "{calls:#?}"
        );
    }
}
