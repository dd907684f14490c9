//! Deferred HUP/INT/TERM for `box new` (docs/design.md, "new"): while box
//! creates a machine, a signal must not leave a machine nobody knows about. So the handlers
//! only record the signal; box checks between steps, rolls back what it created, and then
//! exits with 128+signal. Long guest work (provisioning) is cut short when a signal is
//! pending, through the runner's `cancel` flag; `machine create` is never cut short.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, Result};
use signal_hook::SigId;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The installed handlers. Dropping this restores the default actions.
#[derive(Debug)]
pub struct DeferredSignals {
    pending: Arc<AtomicUsize>,
    ids: Vec<SigId>,
}

impl DeferredSignals {
    /// Installs handlers that record HUP, INT and TERM instead of dying.
    pub fn install() -> Result<Self> {
        let pending = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        for sig in [SIGHUP, SIGINT, SIGTERM] {
            let id = signal_hook::flag::register_usize(sig, Arc::clone(&pending), sig as usize)
                .with_context(|| format!("cannot install a handler for signal {sig}"))?;
            ids.push(id);
        }
        Ok(Self { pending, ids })
    }

    /// The signal that arrived, if any (the last one wins).
    pub fn pending(&self) -> Option<usize> {
        match self.pending.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }

    /// For the runner: a call given this flag is killed as soon as a signal is pending.
    pub fn flag(&self) -> &AtomicUsize {
        &self.pending
    }

    /// The exit status a shell expects after this signal: 128 + its number.
    pub fn exit_status(signal: usize) -> u8 {
        u8::try_from(128 + signal).unwrap_or(1)
    }

    pub fn name(signal: usize) -> &'static str {
        match signal as i32 {
            SIGHUP => "SIGHUP",
            SIGINT => "SIGINT",
            SIGTERM => "SIGTERM",
            _ => "a signal",
        }
    }
}

impl Drop for DeferredSignals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
