//! smolvm ≥ 1.3 on Linux: the node-shared, content-addressed pack store. `machine create
//! --from` extracts a pack ONCE into `<vms>/_shared/<crc32>/` (keyed by the footer's CRC32)
//! and gives the machine only a pointer, `<data dir>/.pack-shared`, naming that copy; every
//! later machine from the same pack is a warm hit that extracts nothing. The machine boots
//! with the shared copy's layers as read-only lower layers, so nothing of the pack is copied
//! per machine (smolvm: an idmapped bind mount of the shared copy).
//!
//! Sources (v1.9.3): `src/cli/machine.rs` `run_from_smolmachine` ~L3493-3515 (shared when
//! `shared_extract_enabled()`, i.e. Linux and no `SMOLVM_DISABLE_SHARED_EXTRACT`, else the
//! private `<data dir>/pack` extraction); `src/artifact_cache.rs`
//! `materialize_shared_pack_lease` (creates `<data dir>/pack`, publishes the pointer);
//! `crates/smolvm-pack/src/extract.rs` `extract_sidecar_shared` (flock + `.smolvm-extracted`
//! marker inside the shared copy, no LRU cap) and `ensure_shared_artifact_sha256` (one
//! SHA-256 pass over the pack at the first extraction, `<copy>.artifact-sha256`; later
//! creates compare the pack's path, length and mtime, `<copy>.artifact-source.json`, and
//! hash again only when those changed; a different pack with the same CRC32 is refused);
//! `src/agent/manager.rs` `SHARED_PACK_POINTER = ".pack-shared"` (beside `pack/`, in the
//! data dir). A machine's `<data dir>/pack` therefore holds no `.smolvm-extracted` on 1.9.

use std::fs;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::output::{SimError, agent};

use super::{EXTRACTED_MARKER, format};

/// smolvm's pointer file name, in the machine's data dir.
pub const POINTER: &str = ".pack-shared";

/// Whether `create --from` uses the shared store: smolvm's `shared_extract_enabled()` on
/// Linux (the only platform the simulator runs on), for the versions that have it.
pub fn enabled(p: crate::personality::Personality) -> bool {
    p.is_head() && std::env::var_os("SMOLVM_DISABLE_SHARED_EXTRACT").is_none()
}

/// `<home>/vms/_shared` (smolvm: `<vm_cache_root>/_shared`; the `_` cannot collide with a
/// machine's 16-hex data dir).
pub fn root() -> PathBuf {
    crate::home::home().join("vms").join("_shared")
}

/// The shared copy a machine's pointer names, when the pointer exists and the copy is
/// complete (smolvm's `read_shared_pack_pointer`: a stale pointer reads as none).
pub fn read_pointer(data: &Path) -> Option<PathBuf> {
    let raw = fs::read_to_string(data.join(POINTER)).ok()?;
    let dir = PathBuf::from(raw.trim());
    dir.join(EXTRACTED_MARKER).exists().then_some(dir)
}

fn with_suffix(dir: &Path, suffix: &str) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// An exclusive flock on `path` (created), released when the file is dropped.
fn lock(path: &Path) -> Result<fs::File, SimError> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| {
            agent(
                "extract sidecar (shared)",
                format!("{}: {e}", path.display()),
            )
        })?;
    // SAFETY: flock on a descriptor we own; it has no memory-safety preconditions.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(agent(
            "extract sidecar (shared)",
            format!(
                "lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(f)
}

/// The pack file as smolvm fingerprints it before trusting a cached digest.
#[derive(Serialize, Deserialize, PartialEq, Eq, Debug)]
struct SourceIdentity {
    canonical_path: String,
    len: u64,
    modified_secs: Option<u64>,
    modified_nanos: Option<u32>,
}

fn identity(sidecar: &Path) -> std::io::Result<SourceIdentity> {
    let canonical = sidecar.canonicalize()?;
    let meta = fs::metadata(&canonical)?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    Ok(SourceIdentity {
        canonical_path: canonical.to_string_lossy().into_owned(),
        len: meta.len(),
        modified_secs: modified.map(|d| d.as_secs()),
        modified_nanos: modified.map(|d| d.subsec_nanos()),
    })
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Write `bytes` to `path` by temp file + rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = with_suffix(path, &format!(".tmp-{}", std::process::id()));
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path)
}

/// smolvm's `ensure_shared_artifact_sha256`: the pack's SHA-256, hashed only when the
/// cached fingerprint does not match this file.
fn ensure_digest(sidecar: &Path, dir: &Path) -> Result<(), SimError> {
    let op = "extract sidecar (shared)";
    let io = |e: std::io::Error| agent(op, e.to_string());
    let digest_path = with_suffix(dir, ".artifact-sha256");
    let source_path = with_suffix(dir, ".artifact-source.json");
    let _lock = lock(&with_suffix(dir, ".artifact-sha256.lock"))?;
    let source = identity(sidecar).map_err(io)?;
    let cached = fs::read_to_string(&digest_path).ok();
    if cached.is_some() {
        let known = fs::read(&source_path)
            .ok()
            .and_then(|b| serde_json::from_slice::<SourceIdentity>(&b).ok());
        if known.as_ref() == Some(&source) {
            return Ok(());
        }
    }
    let digest = sha256_file(sidecar).map_err(io)?;
    if let Some(c) = cached.as_deref().map(str::trim)
        && c != digest
    {
        return Err(agent(
            op,
            format!(
                "{} has the CRC32 of the shared copy {} but other contents (sha256 {digest}, \
                 the copy's {c})",
                sidecar.display(),
                dir.display()
            ),
        ));
    }
    write_atomic(&digest_path, digest.as_bytes()).map_err(io)?;
    let json = serde_json::to_vec(&source).map_err(|e| agent(op, e.to_string()))?;
    write_atomic(&source_path, &json).map_err(io)
}

/// Extracts `sidecar` into the shared store unless it is there already (a warm hit), then
/// publishes `data`'s pointer and its empty `pack/`. Returns the shared copy.
pub fn materialize(sidecar: &Path, data: &Path) -> Result<PathBuf, SimError> {
    let op = "extract sidecar (shared)";
    let footer = format::read_footer(sidecar).map_err(|e| match e {
        SimError::Agent { reason, .. } => agent(op, reason),
        other => other,
    })?;
    let root = root();
    fs::create_dir_all(&root).map_err(|e| agent(op, format!("{}: {e}", root.display())))?;
    let dir = root.join(format!("{:08x}", footer.crc32));
    {
        let _lock = lock(&with_suffix(&dir, ".lock"))?;
        if !dir.join(EXTRACTED_MARKER).exists() {
            // Removes a partial copy first, and its own partial copy on failure.
            super::extract(sidecar, &dir).map_err(|e| match e {
                SimError::Agent { reason, .. } => agent(op, reason),
                other => other,
            })?;
        }
    }
    ensure_digest(sidecar, &dir)?;
    fs::create_dir_all(data.join("pack")).map_err(|e| agent(op, e.to_string()))?;
    write_atomic(&data.join(POINTER), dir.to_string_lossy().as_bytes())
        .map_err(|e| agent(op, e.to_string()))?;
    Ok(dir)
}
