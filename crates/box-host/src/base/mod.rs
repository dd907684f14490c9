//! Bases: a provisioned box with no user state, packed once with smolvm's
//! `pack create --from-vm`, so `box new` and `box load` start from it with
//! `machine create --from` instead of provisioning from the network (issue 15).
//!
//! - [`key`]: what provisioning depends on, and its digest (the base's name).
//! - [`store`]: the packs and their metadata under `<state dir>/bases`.
//! - [`guest_prep`]: the guest-side scripts: what a base may hold, and the 1.0.4
//!   ownership repair at a new box's first boot.
//! - [`build`]: `box base build`.

pub mod build;
pub mod guest_prep;
pub mod key;
pub mod store;
