//! Guest images: which root filesystem a machine boots (a pristine image built from the
//! Debian archive, or, opted into for fast tests, the host's own userland), the stand-ins
//! for images that cannot be built here, and the cache the images live in.

pub mod cache;
pub mod refs;

use crate::output::{SimError, config};

/// SMOLVM_SIM_HOST_USERLAND=1 at create: the machine's root is the host's userland (the
/// fast-test shortcut), not its image. Anything but unset, empty, 0 or 1 is refused.
pub fn host_userland_from_env() -> Result<bool, SimError> {
    match std::env::var("SMOLVM_SIM_HOST_USERLAND") {
        Err(_) => Ok(false),
        Ok(v) => match v.trim() {
            "" | "0" => Ok(false),
            "1" => Ok(true),
            other => Err(config(
                "create machine",
                format!("SMOLVM_SIM_HOST_USERLAND must be 1 or 0 (got {other:?})"),
            )),
        },
    }
}

/// What a `create --image IMAGE` boots, read now (SMOLVM_SIM_IMAGE_MAP) and recorded, with
/// the stand-in note smolvm-sim prints at every create that maps an image.
pub fn resolve_at_create(image: &str) -> Result<refs::Resolved, SimError> {
    let map = std::env::var("SMOLVM_SIM_IMAGE_MAP").ok();
    let resolved = refs::resolve(image, map.as_deref().filter(|m| !m.trim().is_empty()))
        .map_err(|e| config("create machine", e))?;
    if let refs::Resolved::StandIn {
        requested,
        stand_in,
    } = &resolved
    {
        eprintln!(
            "smolvm-sim: note: {requested} cannot be built here (no archive for it); this machine \
             boots the {stand_in} image instead. SMOLVM_SIM_IMAGE_MAP (e.g. \
             {requested}=debian:12) chooses the stand-in."
        );
    }
    Ok(resolved)
}
