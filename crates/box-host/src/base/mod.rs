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
