//! Looking up a managed box and its machine, shared by the verbs that act on one box.

use anyhow::{Result, anyhow, bail};
use box_proto::BoxName;

use crate::context::Context;
use crate::remote::RemoteHost;
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

/// The refusal of a `new`, `load` or `clone` onto the name of `record`, a box already
/// there: `taken` for a box in use; for one a run never finished (killed?) or kept after a
/// failure, what to remove before running the same command again.
pub fn name_taken(record: &BoxRecord, taken: String) -> anyhow::Error {
    if !record.incomplete {
        return anyhow!(taken);
    }
    let name = &record.name;
    let why = match &record.kept_after_failure {
        Some(what) => format!("kept on purpose after a failure ({what})"),
        None => "left incomplete by a run that never finished (killed?)".to_string(),
    };
    anyhow!(
        "box '{name}' already exists, {why}; to run this again, remove it first with: box rm {name} --force"
    )
}

/// What a smolvm machine box made under this state dir (its labels say so) but no row
/// names is, and the way out: a `box new`, `load`, `clone` or `base build` killed between
/// its `machine create` and its registry row (a base builder has none).
pub fn unrecorded(machine: &str) -> String {
    format!(
        "smolvm machine '{machine}' was made by box here (its labels carry this state dir's id) \
         but no box records it: a box command was killed before it recorded or removed it; \
         `box doctor --fix` removes it"
    )
}

/// smolvm where `record`'s box lives: this machine's, or its remote host's over ssh.
pub fn smolvm(ctx: &Context, record: &BoxRecord) -> Result<Smolvm> {
    Ok(Smolvm::for_host(
        record.remote_host()?.as_ref(),
        &ctx.config.env,
    ))
}

/// Every host the boxes of `records` live on, each once: this machine first (always),
/// then each remote host, then `also` (the host the user selected) if it is not one of
/// them. A row whose host cannot be read goes to `unreadable`.
pub fn hosts(
    records: &[BoxRecord],
    also: Option<&RemoteHost>,
    unreadable: &mut dyn FnMut(anyhow::Error),
) -> Vec<Option<RemoteHost>> {
    let mut hosts: Vec<Option<RemoteHost>> = vec![None];
    for r in records {
        match r.remote_host() {
            Ok(h) if !hosts.contains(&h) => hosts.push(h),
            Ok(_) => {}
            Err(e) => unreadable(e),
        }
    }
    if let Some(h) = also.cloned().map(Some)
        && !hosts.contains(&h)
    {
        hosts.push(h);
    }
    hosts
}

/// Whether smolvm machine `machine` on `host` is one of `records`' boxes.
pub fn is_managed(records: &[BoxRecord], host: &Option<RemoteHost>, machine: &str) -> bool {
    records
        .iter()
        .any(|r| r.machine == machine && r.remote_host().ok().flatten() == *host)
}

/// The per-box lock for `operation` (e.g. `box stop alpha`).
pub fn lock(ctx: &Context, record: &BoxRecord, operation: &str) -> Result<LockGuard> {
    Ok(locks::try_acquire(
        &ctx.state,
        LockKey::Box(record.name.clone()),
        operation,
    )?)
}

/// The box's machine as smolvm lists it; an error when smolvm does not have it, when the
/// machine of that name is not the one box created (labels, see [`owned`]), or when it is
/// paused (smolvm 1.18+ refuses plain start and stop then, and box never resumes what
/// someone else paused).
pub fn machine(smolvm: &Smolvm, record: &BoxRecord) -> Result<Machine> {
    match smolvm.find(&record.machine)? {
        Some(m) if !owned(&m, record) => bail!(
            "smolvm machine '{}' is not the one box created for '{}' (its labels do not carry \
             this state dir's id): box leaves it alone; see box doctor",
            m.name,
            record.name
        ),
        Some(m) if m.state.is_paused() => bail!(
            "smolvm machine '{0}' of box '{1}' is {2}: smolvm saved its execution and refuses \
             plain start and stop. Resume it with: smolvm machine resume --name {0} (or remove \
             the box with: box rm {1} --force)",
            m.name,
            record.name,
            m.state
        ),
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

/// Whether `m` is the machine box created for `record`: where box labelled it, its labels
/// must still say so (name *and* label); rows from before labels go by name alone.
pub fn owned(m: &Machine, record: &BoxRecord) -> bool {
    crate::smolvm::labels::is_ours(
        m.labels.as_ref(),
        record.name.as_str(),
        record.machine_label.as_deref(),
    )
}
