//! Doctor's wing: what `box doctor` checks of a host, each finding a [`Check`] that says
//! what to do. It reads and judges; it never changes the host (the verb's `--fix` does that).
//!
//! - [`host_checks`]: this machine: smolvm and its version, the seed VM's memory, the LAN
//!   floor, whether a VM can boot ([`kvm`]) or the CPU on macOS, a browser [`opener`];
//! - [`remote_checks`]: the same of a remote host, from facts one ssh script reads there;
//! - [`base_check`]: the base new and load would start from, missing, fresh or stale;
//! - [`listeners`]: a box's published port listens on loopback only.
//!
//! `commands/doctor.rs` (the verb) stands on it; so do `box new` (the seed VM warning before
//! a create) and `box open` (the opener, `BOX_BROWSER` or the platform's). It stands on what it
//! asks: the smolvm driver (and through it a remote host) and the base store. It must not
//! know the verbs, and nothing it stands on may know it: a check is a line of a report,
//! never something the engine decides by.

pub mod base_check;
pub mod host_checks;
pub mod kvm;
pub mod listeners;
pub mod opener;
pub mod remote_checks;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
}

/// One line of the doctor's report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// `host`, `registry` or `box <name>`.
    pub scope: String,
    pub name: String,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(scope: &str, name: &str, status: Status, detail: impl Into<String>) -> Self {
        Self {
            scope: scope.to_string(),
            name: name.to_string(),
            status,
            detail: detail.into(),
        }
    }
}
