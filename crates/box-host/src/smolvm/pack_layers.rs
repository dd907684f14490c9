//! Where smolvm keeps the layers of a machine created `--from` a pack, in the machine's data
//! dir (`machine data-dir`): the same rule read here, and as a shell line on a remote host.

use std::path::{Path, PathBuf};

/// Whether the machine whose smolvm data dir is `data` still has the layers `create --from`
/// extracted: its private copy (`<data>/pack/.smolvm-extracted`, which 1.0.4's cache
/// eviction can remove right after create), or, on smolvm >= 1.3 on Linux, the
/// node-shared copy its `<data>/.pack-shared` pointer names (complete when it holds the
/// marker; `<data>/pack` then holds none). smolvm v1.9.3 `src/agent/manager.rs`
/// `SHARED_PACK_POINTER`, `read_shared_pack_pointer`.
pub(super) fn layers_present(data: &Path) -> bool {
    const MARKER: &str = ".smolvm-extracted";
    if data.join("pack").join(MARKER).exists() {
        return true;
    }
    std::fs::read_to_string(data.join(".pack-shared"))
        .map(|p| PathBuf::from(p.trim()).join(MARKER).exists())
        .unwrap_or(false)
}

/// [`layers_present`] as a shell line for the host smolvm runs on: `$1` is the data dir,
/// exit 0 when the layers are there.
pub(super) const LAYERS_PRESENT_SH: &str = r#"[ -e "$1/pack/.smolvm-extracted" ] && exit 0; p=$(cat "$1/.pack-shared" 2>/dev/null) || exit 1; p=$(printf %s "$p" | tr -d '\n'); [ -e "$p/.smolvm-extracted" ]"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// Both renderings of the rule on one data dir: the shell line a remote host runs must
    /// answer as the local check does.
    fn present(data: &Path) -> bool {
        let local = layers_present(data);
        let sh = std::process::Command::new("sh")
            .args(["-c", LAYERS_PRESENT_SH, "sh"])
            .arg(data)
            .status()
            .expect("run sh")
            .success();
        assert_eq!(local, sh, "the shell line disagrees on {}", data.display());
        local
    }

    #[test]
    fn layers_are_the_private_copy_or_the_shared_one_the_pointer_names() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("vm");
        std::fs::create_dir_all(data.join("pack")).unwrap();
        assert!(!present(&data), "1.0.4 evicted: no marker");
        std::fs::write(data.join("pack/.smolvm-extracted"), "").unwrap();
        assert!(present(&data));
        std::fs::remove_file(data.join("pack/.smolvm-extracted")).unwrap();
        let shared = d.path().join("_shared/0badc0de");
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(data.join(".pack-shared"), format!("{}\n", shared.display())).unwrap();
        assert!(
            !present(&data),
            "a shared copy without its marker is incomplete"
        );
        std::fs::write(shared.join(".smolvm-extracted"), "").unwrap();
        assert!(present(&data));
        std::fs::write(data.join(".pack-shared"), "/nowhere\n").unwrap();
        assert!(!present(&data), "a pointer to nothing");
    }
}
