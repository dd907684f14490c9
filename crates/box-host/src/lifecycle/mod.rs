//! Shared pieces of the box lifecycle verbs (new, enter, ls, open, doctor, repair, stop, start, rm).

pub mod boxes;
pub mod cleanup;
pub mod guest;
pub mod guest_assets;
pub mod host_checks;
pub mod ports;
pub mod progress;
pub mod provisioning;
pub mod readiness;
pub mod signals;
