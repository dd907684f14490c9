//! Doctor's line about the base `box new` and `box load` would start from.

use super::{Check, Status};
use crate::base::key::BaseKey;
use crate::base::store::{self, Store};
use crate::context::Context;
use crate::lifecycle::test_guest_env;

/// `box doctor`'s line about the base new/load would use: missing (a hint), fresh, or
/// older than BASE_MAX_AGE_DAYS (a warning: its `latest` tools have moved on).
pub fn check(ctx: &Context) -> Check {
    let env = &ctx.config.env;
    let found = BaseKey::current(env, &test_guest_env::from_env())
        .and_then(|k| Store::new(&ctx.state).find(&k));
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
                store::size(b.size_bytes)
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
