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

use std::path::{Path, PathBuf};

use crate::context::Context;
use crate::doctor::{Check, Status};

/// Whether the machine whose smolvm data dir is `data` still has the layers `create --from`
/// extracted: its private copy (`<data>/pack/.smolvm-extracted`, which 1.0.4's cache
/// eviction can remove right after create), or, on smolvm >= 1.3 on Linux, the
/// node-shared copy its `<data>/.pack-shared` pointer names (complete when it holds the
/// marker; `<data>/pack` then holds none). smolvm v1.9.3 `src/agent/manager.rs`
/// `SHARED_PACK_POINTER`, `read_shared_pack_pointer`.
pub fn layers_present(data: &Path) -> bool {
    const MARKER: &str = ".smolvm-extracted";
    if data.join("pack").join(MARKER).exists() {
        return true;
    }
    std::fs::read_to_string(data.join(".pack-shared"))
        .map(|p| PathBuf::from(p.trim()).join(MARKER).exists())
        .unwrap_or(false)
}

/// `box doctor`'s line about the base new/load would use: missing (a hint), fresh, or
/// older than BASE_MAX_AGE_DAYS (a warning: its `latest` tools have moved on).
pub fn doctor_check(ctx: &Context) -> Check {
    let env = &ctx.config.env;
    let found = key::BaseKey::current(env, &crate::lifecycle::test_guest_env::from_env())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_the_private_copy_or_the_shared_one_the_pointer_names() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("vm");
        std::fs::create_dir_all(data.join("pack")).unwrap();
        assert!(!layers_present(&data), "1.0.4 evicted: no marker");
        std::fs::write(data.join("pack/.smolvm-extracted"), "").unwrap();
        assert!(layers_present(&data));
        std::fs::remove_file(data.join("pack/.smolvm-extracted")).unwrap();
        let shared = d.path().join("_shared/0badc0de");
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(data.join(".pack-shared"), shared.to_str().unwrap()).unwrap();
        assert!(
            !layers_present(&data),
            "a shared copy without its marker is incomplete"
        );
        std::fs::write(shared.join(".smolvm-extracted"), "").unwrap();
        assert!(layers_present(&data));
    }
}
