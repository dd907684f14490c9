//! One box being set up: the machine, its state dir and transcript, and the guest command
//! that must succeed. Below both `provisioning` (what to install) and `guest_network`
//! (proxies and CA certificates), which each add their steps to it.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use anyhow::{Result, bail};
use box_proto::BoxEnv;

use super::guest;
use super::transcript::Transcript;
use crate::smolvm::{ExecOpts, Smolvm};
use crate::state::StateDir;

/// One box being set up, with its transcript.
pub struct Setup<'a> {
    pub smolvm: &'a Smolvm,
    pub state: &'a StateDir,
    pub env: &'a BoxEnv,
    pub machine: &'a str,
    pub transcript: &'a mut Transcript,
    /// A pending-signal flag that cuts long guest work short.
    pub cancel: Option<&'a AtomicUsize>,
}

impl Setup<'_> {
    /// Runs a guest command that must succeed; returns its stdout. Output goes to the
    /// transcript.
    pub fn exec_ok(&mut self, what: &str, argv: &[&str], timeout: Duration) -> Result<String> {
        let out = self.smolvm.exec(
            self.machine,
            argv,
            ExecOpts {
                timeout: Some(timeout),
                cancel: self.cancel,
                ..ExecOpts::default()
            },
        )?;
        self.transcript.block(what, &out.stdout);
        self.transcript
            .block(&format!("{what} (stderr)"), &out.stderr);
        if !out.success() {
            bail!(
                "{what} in box '{}' failed ({}){}",
                self.machine,
                guest::status(&out),
                guest::last_lines(&out.stderr, &out.stdout)
            );
        }
        Ok(out.stdout)
    }
}
