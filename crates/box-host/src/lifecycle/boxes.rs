//! Looking up a managed box and its machine, shared by the verbs that act on one box.

use anyhow::{Result, bail};
use box_proto::BoxName;

use crate::commands::Context;
use crate::smolvm::{Machine, Smolvm};
use crate::state::{BoxRecord, LockGuard, LockKey, Registry, locks};

/// A registered box. box only acts on boxes it manages: a same-named smolvm machine that
/// box did not create is never touched.
pub fn registered(ctx: &Context, raw: &str) -> Result<BoxRecord> {
    let name = BoxName::parse(raw)?;
    match Registry::new(&ctx.state).get(&name)? {
        Some(r) => Ok(r),
        None => bail!("no box named '{name}' (see box ls; create one with: box new {name})"),
    }
}

/// The per-box lock for `operation` (e.g. `box stop alpha`).
pub fn lock(ctx: &Context, record: &BoxRecord, operation: &str) -> Result<LockGuard> {
    Ok(locks::try_acquire(
        &ctx.state,
        LockKey::Box(record.name.clone()),
        operation,
    )?)
}

/// The box's machine as smolvm lists it; an error when smolvm does not have it.
pub fn machine(smolvm: &Smolvm, record: &BoxRecord) -> Result<Machine> {
    match smolvm.find(&record.machine)? {
        Some(m) => Ok(m),
        None => bail!(
            "smolvm machine '{}' of box '{}' is missing; restore it with `box load <backup> {}` after `box rm {} --force`, or see box doctor",
            record.machine,
            record.name,
            record.name,
            record.name
        ),
    }
}
