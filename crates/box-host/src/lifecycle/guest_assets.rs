//! What box copies into a guest: the `hb` binary matching the guest's architecture and the
//! `provision/` directory.
//!
//! `hb`: `BOX_HB_BINARY` wins; else beside the running `box`, the release layout's
//! `hb-<arch>-linux`, then a plain `hb` (a development build in the same target dir), which
//! is only right when the guest's architecture is the host's and the host is Linux.
//! `provision/`: `BOX_PROVISION_DIR`; else `provision/` beside `box`, then
//! `../share/hermes-box/provision`, then the checkout this `box` was built from.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// Guest architectures box ships `hb` for, in `uname -m` spelling normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestArch {
    X86_64,
    Aarch64,
}

impl GuestArch {
    /// Reads `uname -m` output. Anything else is refused: a wrong binary would only fail
    /// later with a confusing "exec format error".
    pub fn from_uname(text: &str) -> Result<Self> {
        match text.trim() {
            "x86_64" | "amd64" => Ok(Self::X86_64),
            "aarch64" | "arm64" => Ok(Self::Aarch64),
            other => bail!(
                "the guest reports architecture {:?}; box has an hb binary only for x86_64 and aarch64",
                other.chars().take(40).collect::<String>()
            ),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        }
    }

    /// The architecture `box` itself was built for.
    pub fn host() -> Option<Self> {
        match std::env::consts::ARCH {
            "x86_64" => Some(Self::X86_64),
            "aarch64" => Some(Self::Aarch64),
            _ => None,
        }
    }
}

fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The `hb` to copy into a guest of architecture `arch`.
pub fn hb_binary(arch: GuestArch) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("BOX_HB_BINARY").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!("BOX_HB_BINARY names {}, which is not a file", p.display());
        }
        return Ok(p);
    }
    let dir = exe_dir().context("cannot find the directory of the running box binary")?;
    find_hb_in(&dir, arch, GuestArch::host(), cfg!(target_os = "linux"))
}

fn find_hb_in(
    dir: &Path,
    arch: GuestArch,
    host: Option<GuestArch>,
    host_is_linux: bool,
) -> Result<PathBuf> {
    let release = dir.join(format!("hb-{}-linux", arch.as_str()));
    if release.is_file() {
        return Ok(release);
    }
    let dev = dir.join("hb");
    if dev.is_file() && host_is_linux && host == Some(arch) {
        return Ok(dev);
    }
    bail!(
        "no hb binary for a {} guest: expected {} (or set BOX_HB_BINARY to a static Linux {} hb)",
        arch.as_str(),
        release.display(),
        arch.as_str()
    )
}

/// Checked before a machine is created, so a missing asset fails fast instead of after
/// create and start: the provisioning files exist, and some `hb` does (which one fits is
/// known only once the guest reports its architecture).
pub fn preflight() -> Result<()> {
    provision_dir()?;
    if std::env::var_os("BOX_HB_BINARY").is_some_and(|v| !v.is_empty()) {
        return hb_binary(GuestArch::X86_64).map(drop);
    }
    let dir = exe_dir().context("cannot find the directory of the running box binary")?;
    let any = [GuestArch::X86_64, GuestArch::Aarch64]
        .into_iter()
        .any(|a| find_hb_in(&dir, a, GuestArch::host(), cfg!(target_os = "linux")).is_ok());
    if !any {
        bail!(
            "no hb binary beside {} (expected hb-x86_64-linux or hb-aarch64-linux); set BOX_HB_BINARY",
            dir.display()
        );
    }
    Ok(())
}

/// The provisioning directory (must hold `provision.sh`).
pub fn provision_dir() -> Result<PathBuf> {
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("BOX_PROVISION_DIR").filter(|v| !v.is_empty()) {
        candidates.push(PathBuf::from(p));
    } else {
        if let Some(dir) = exe_dir() {
            candidates.push(dir.join("provision"));
            candidates.push(dir.join("../share/hermes-box/provision"));
        }
        // A development build (cargo run, just install) uses the checkout it came from.
        #[cfg(not(box_release))]
        candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../provision"));
    }
    for c in candidates {
        if c.join("provision.sh").is_file() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    bail!(
        "cannot find the provision/ directory (looked in: {}); set BOX_PROVISION_DIR",
        tried.join(", ")
    )
}

/// Every regular file under `dir`, as (absolute path, path relative to `dir`), sorted.
/// smolvm's `cp` copies single files, so the directory goes over one file at a time.
pub fn files_under(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in
            std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))?
        {
            let entry = entry.with_context(|| format!("cannot list {}", d.display()))?;
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path
                    .strip_prefix(dir)
                    .ok()
                    .and_then(Path::to_str)
                    .with_context(|| format!("{} has a name box cannot copy", path.display()))?
                    .to_string();
                if rel.contains(':') {
                    // smolvm's cp splits on the first ':'; such a name cannot be copied.
                    bail!(
                        "{}: file names with ':' cannot be copied into a box",
                        path.display()
                    );
                }
                out.push((path, rel));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_spellings() {
        assert_eq!(
            GuestArch::from_uname("x86_64\n").unwrap(),
            GuestArch::X86_64
        );
        assert_eq!(
            GuestArch::from_uname("aarch64").unwrap(),
            GuestArch::Aarch64
        );
        assert_eq!(GuestArch::from_uname("arm64").unwrap(), GuestArch::Aarch64);
        let err = GuestArch::from_uname("riscv64\n").unwrap_err().to_string();
        assert!(err.contains("\"riscv64\""), "{err}");
    }

    #[test]
    fn release_binary_first_then_dev_build_only_for_the_host_arch() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("hb"), b"dev").unwrap();
        let x = GuestArch::X86_64;
        let a = GuestArch::Aarch64;
        assert_eq!(find_hb_in(d, x, Some(x), true).unwrap(), d.join("hb"));
        // A dev build for another architecture, or from a macOS host, is never used.
        assert!(find_hb_in(d, a, Some(x), true).is_err());
        assert!(find_hb_in(d, x, Some(x), false).is_err());
        std::fs::write(d.join("hb-aarch64-linux"), b"rel").unwrap();
        assert_eq!(
            find_hb_in(d, a, Some(x), false).unwrap(),
            d.join("hb-aarch64-linux")
        );
    }

    #[test]
    fn lists_files_recursively_with_relative_names() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("lib")).unwrap();
        std::fs::write(tmp.path().join("provision.sh"), b"x").unwrap();
        std::fs::write(tmp.path().join("lib/a.sh"), b"y").unwrap();
        let rels: Vec<String> = files_under(tmp.path())
            .unwrap()
            .into_iter()
            .map(|f| f.1)
            .collect();
        assert_eq!(rels, ["lib/a.sh", "provision.sh"]);
    }
}
