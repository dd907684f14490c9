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

use crate::commands::Context;
use crate::lifecycle::host_checks::{Check, Status};

/// `box doctor`'s line about the base new/load would use: missing (a hint), fresh, or
/// older than BASE_MAX_AGE_DAYS (a warning: its `latest` tools have moved on).
pub fn doctor_check(ctx: &Context) -> Check {
    let env = &ctx.config.env;
    let found = key::BaseKey::current(env, &crate::commands::new::test_guest_env())
        .and_then(|k| store::Store::new(&ctx.state).find(&k));
    match found {
        Ok(Some(b)) if b.is_stale(env.base_max_age_days) => Check::new(
            "host",
            "base",
            Status::Warn,
            format!(
                "base {} is {} old, past BASE_MAX_AGE_DAYS={}: refresh it with `box base build --refresh`",
                b.digest,
                store::human_age(b.age()),
                env.base_max_age_days
            ),
        ),
        Ok(Some(b)) => Check::new(
            "host",
            "base",
            Status::Ok,
            format!(
                "base {} built {} ago ({}): new and load start from it",
                b.digest,
                store::human_age(b.age()),
                crate::commands::base::size(b.size_bytes)
            ),
        ),
        Ok(None) => Check::new(
            "host",
            "base",
            Status::Ok,
            "no base for this configuration: new and load provision from the network (`box base build` makes one)",
        ),
        Err(e) => Check::new(
            "host",
            "base",
            Status::Warn,
            format!("cannot look for a base: {e:#}"),
        ),
    }
}
