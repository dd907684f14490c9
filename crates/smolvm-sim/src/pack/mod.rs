//! Packed machines: what `pack create --from-vm` writes and `machine create --from` reads.
//!
//! smolvm's `.smolmachine` is zstd-compressed assets (runtime libraries, agent rootfs, the
//! image's layers, the machine's container-overlay upper dir as one more layer) followed by a
//! manifest and a footer (`crates/smolvm-pack`, v1.0.4 `src/cli/pack.rs` ~L465-720). The
//! simulator's has that layout (`format`): zstd level 3 over a tar of the machine's
//! persistent guest directory (its overlay upper layers; the shared image cache plays the
//! part of the image's layers, so the pack names the image instead of carrying it), the
//! manifest, a footer with a CRC32. What a caller can observe is the same: the files the
//! source machine wrote come back in every machine made from the pack, the manifest's
//! workload, env, cpus and mem become defaults, a `create --from` costs one decoding pass
//! over the pack, and the per-version quirks below hold.
//!
//! Extraction goes into `<data dir>/pack` with a `.smolvm-extracted` marker, as smolvm's
//! `machine_layers_cache_dir`; an image machine boots it read-only as a lower layer
//! (`boot_layer`), and its start needs it (smolvm boots the machine from those layers). Only
//! a host-userland machine (the fast-test shortcut) has its guest directory seeded from it.
//!
//! Quirks, by personality:
//! - 1.0.4: extraction runs on the host as the user, so every file the pack held as root
//!   comes back owned by the host's uid/gid (`SMOLVM_SIM_HOST_UID`/`SMOLVM_SIM_HOST_GID`,
//!   default 501:20, a macOS user: the simulator runs as root, which would hide the quirk)
//!   (docs/smolvm.md, `create --from`; extract.rs@v1.0.4 L107 "Only file mode
//!   is restored, not ... uid/gid").
//! - 1.0.4: after a cache-miss extraction the pack cache is capped by evicting whole
//!   directories under the *parent* of the extraction dir, oldest first, until the total
//!   disk usage is under `SMOLVM_PACK_CACHE_MAX_BYTES` (default 5 GiB). For `create --from`
//!   the parent is the machine's data dir, so a pack bigger than the cap evicts itself right
//!   after extraction: `.smolvm-extracted` is gone and the machine cannot start
//!   (extract.rs@v1.0.4 L455-500, L596-603).
//! - 1.9: ownership is kept (root extraction chowns, extract.rs@v1.9.3 `set_owner`) and the
//!   eviction protects the directory just extracted (`evict_cache_to_size_protecting`).

pub mod format;
pub mod shared;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::output::{SimError, agent};
use crate::personality::Personality;
use crate::registry::Record;

/// The marker smolvm writes when an extraction completed.
pub const EXTRACTED_MARKER: &str = ".smolvm-extracted";
/// Directories of the guest dir that are overlayfs work dirs, never state.
const WORK_DIRS: [&str; 2] = ["work", "image-work"];

/// The pack manifest (smolvm's `PackManifest`, the fields a machine takes defaults from).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Manifest {
    pub format: String,
    /// `vm://NAME` for a from-VM pack.
    pub source: String,
    pub image: Option<String>,
    /// The simulator's buildable image behind `image` (or its stand-in).
    pub sim_image: Option<String>,
    pub host_userland: bool,
    pub platform: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub workdir: Option<String>,
    pub cpus: u8,
    pub mem: u32,
    pub network: bool,
}

/// `OUT` → `OUT.smolmachine` (smolvm's sidecar name).
pub fn sidecar_for(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".smolmachine");
    PathBuf::from(s)
}

pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("linux/{arch}")
}

/// The manifest of a from-VM pack: the record's workload, env and workdir; cpus and mem from
/// the pack command (smolvm: `resolve_pack_config`, CLI > Smolfile > defaults 4/8192, never
/// the source record); entrypoint: `--entrypoint`, else the record's, else `/bin/sh`.
pub fn manifest_for(r: &Record, entrypoint: Option<&str>, cpus: u8, mem: u32) -> Manifest {
    let entrypoint = match entrypoint {
        Some(e) => vec![e.to_string()],
        None if !r.entrypoint.is_empty() => r.entrypoint.clone(),
        None => vec!["/bin/sh".to_string()],
    };
    Manifest {
        format: format::FORMAT.to_string(),
        source: format!("vm://{}", r.name),
        image: r.image.clone(),
        sim_image: r.sim_image.clone(),
        host_userland: r.host_userland,
        platform: platform(),
        entrypoint,
        cmd: r.cmd.clone(),
        env: r.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: r.workdir.clone(),
        cpus,
        mem,
        network: r.network,
    }
}

fn tar_error(op: &str, out: &std::process::Output) -> SimError {
    let why = String::from_utf8_lossy(&out.stderr);
    // GNU tar ends with "Exiting with failure status due to previous errors": the line
    // worth showing is the first error.
    let last = why
        .lines()
        .find(|l| !l.trim().is_empty() && !l.contains("Exiting with failure status"))
        .unwrap_or("tar failed without a message");
    agent(op, last.trim().to_string())
}

/// Write `sidecar` (temp file + rename, so a reader never sees half a pack) from the
/// machine's guest dir, overlayfs work dirs left out.
pub fn write(manifest: &Manifest, guest: &Path, sidecar: &Path) -> Result<u64, SimError> {
    let dir = sidecar.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let staging = tempdir_in(dir).map_err(|e| agent("create temp directory", e))?;
    let cleanup = Cleanup(staging.clone());
    let tmp = staging.join("pack.smolmachine");
    let mut args: Vec<OsString> = [
        "--numeric-owner",
        "--sparse",
        "--xattrs",
        "--xattrs-include=trusted.*",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    for w in WORK_DIRS {
        args.push(format!("--exclude=guest/{w}").into());
    }
    let parent = guest.parent().unwrap_or(Path::new("/"));
    args.push("--directory".into());
    args.push(parent.as_os_str().to_owned());
    args.push("guest".into());
    let size = format::write(manifest, &args, &tmp)?;
    fs::rename(&tmp, sidecar)
        .map_err(|e| agent("pack binary", format!("{}: {e}", sidecar.display())))?;
    drop(cleanup);
    Ok(size)
}

/// The manifest of a `.smolmachine`, read without extracting anything.
pub fn read_manifest(sidecar: &Path) -> Result<Manifest, SimError> {
    format::read_manifest(sidecar)
}

/// Extract into `dir` (removed first, smolvm's "clear packed layers cache"), then write the
/// marker. A failed extraction removes the partial directory (extract.rs: "Clean up the
/// partial directory so the next attempt starts fresh").
pub fn extract(sidecar: &Path, dir: &Path) -> Result<(), SimError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(agent("clear packed layers cache", e.to_string())),
    }
    fs::create_dir_all(dir).map_err(|e| agent("extract sidecar", e.to_string()))?;
    let args = [
        "--numeric-owner",
        "--same-owner",
        "--same-permissions",
        "--xattrs",
        "--xattrs-include=trusted.*",
    ];
    if let Err(e) = format::extract(sidecar, dir, &args) {
        let _ = fs::remove_dir_all(dir);
        return Err(e);
    }
    fs::write(dir.join(EXTRACTED_MARKER), b"")
        .map_err(|e| agent("extract sidecar", e.to_string()))?;
    Ok(())
}

/// The pack layer an image machine made `--from` a pack boots read-only, between its image
/// and its own upper dir: the shared copy its pointer names (1.9), else its private
/// extraction in `<data>/pack` while that is complete (1.0.4, or 1.9 with
/// `SMOLVM_DISABLE_SHARED_EXTRACT`). smolvm mounts the extracted layers as the container
/// overlay's lowerdirs with the machine's persistent upper on its storage disk (v1.0.4
/// `crates/smolvm-agent/src/storage.rs` `prepare_for_run_persistent` L2296-2310,
/// `get_packed_lowerdirs` L1973, `OverlaySetup` L1625 `upper`), so nothing of the pack is
/// in the machine's own upper: a chown copies a file up, a rename of a directory that came
/// from the pack fails with EXDEV (the guest kernel has no redirect_dir, `machine::rootfs`).
pub fn boot_layer(data: &Path) -> Option<PathBuf> {
    let private = data.join("pack");
    let root = shared::read_pointer(data)
        .or_else(|| private.join(EXTRACTED_MARKER).exists().then_some(private))?;
    Some(root.join("guest").join("image-upper")).filter(|d| d.is_dir())
}

/// The host user a 1.0.4 extraction re-owns root's files to.
pub fn host_owner() -> (u32, u32) {
    let read = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(d)
    };
    (
        read("SMOLVM_SIM_HOST_UID", 501),
        read("SMOLVM_SIM_HOST_GID", 20),
    )
}

/// 1.0.4: every root-owned file in `dir` becomes the host user's (lchown: a symlink's
/// target is not touched). The kernel drops setuid/setgid on a chown, as on the real host
/// where the bits were never restored.
pub fn reown_root_files(dir: &Path, owner: (u32, u32)) -> Result<(), SimError> {
    let out = Command::new("find")
        .arg(dir)
        .args([
            "(", "-uid", "0", "-o", "-gid", "0", ")", "-exec", "chown", "-h",
        ])
        .arg(format!("{}:{}", owner.0, owner.1))
        .args(["{}", "+"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| agent("extract sidecar", format!("cannot run find: {e}")))?;
    if !out.status.success() {
        return Err(tar_error("extract sidecar", &out));
    }
    Ok(())
}

/// Disk usage (allocated blocks) of a tree, as smolvm's `dir_disk_usage`.
pub fn disk_usage(dir: &Path) -> u64 {
    let out = Command::new("du")
        .args(["-s", "-B1", "--"])
        .arg(dir)
        .stdin(Stdio::null())
        .output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// `SMOLVM_PACK_CACHE_MAX_BYTES` (bytes, > 0), else 5 GiB.
pub fn cache_max_bytes() -> u64 {
    std::env::var("SMOLVM_PACK_CACHE_MAX_BYTES")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(5 * 1024 * 1024 * 1024)
}

/// The cap after a cache-miss extraction into `dir`: 1.0.4 may evict `dir` itself (the bug
/// box must check for); 1.9 protects it. Returns whether `dir` was evicted.
pub fn cap_cache(dir: &Path, p: Personality) -> bool {
    if p.is_head() {
        return false;
    }
    if disk_usage(dir) <= cache_max_bytes() {
        return false;
    }
    fs::remove_dir_all(dir).is_ok()
}

/// Copy the extracted guest tree into the machine's own guest dir (its persistent upper
/// layers), keeping owners, modes and xattrs.
pub fn seed_guest(extracted: &Path, guest: &Path) -> Result<(), SimError> {
    let src = extracted.join("guest");
    if !src.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(guest).map_err(|e| agent("extract sidecar", e.to_string()))?;
    let out = Command::new("cp")
        .args(["-a", "--reflink=auto", "--"])
        .arg(format!("{}/.", src.display()))
        .arg(guest)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| agent("extract sidecar", format!("cannot run cp: {e}")))?;
    if !out.status.success() {
        return Err(tar_error("extract sidecar", &out));
    }
    Ok(())
}

struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn tempdir_in(dir: &Path) -> Result<PathBuf, String> {
    for i in 0..100u32 {
        let p = dir.join(format!(".smolvm-pack-{}-{i}", std::process::id()));
        match fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!("{}: no free temp name", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_name_appends_the_extension() {
        assert_eq!(
            sidecar_for(Path::new("/x/base")),
            PathBuf::from("/x/base.smolmachine")
        );
    }

    #[test]
    fn a_file_that_is_not_a_pack_is_refused_on_read() {
        let tmp = std::env::temp_dir().join(format!("sim-pack-test-{}", std::process::id()));
        fs::write(&tmp, b"hello").unwrap();
        let e = read_manifest(&tmp).unwrap_err().to_string();
        assert!(
            e.starts_with("agent operation failed: read .smolmachine:"),
            "{e}"
        );
        let _ = fs::remove_file(&tmp);
    }
}
