//! `machine cp SRC DST`: one regular file between the host and a running machine.
//!
//! The first `:` decides (SRC is tried first). Host-side files are opened first; then this
//! (single-threaded) process joins the guest's mount namespace, which also moves its root to
//! the guest root, so guest paths resolve exactly as `exec` sees them, symlinks included.
//! Uploads are atomic (staging file + rename, parents created, mode 0644, owner root);
//! downloads truncate the local file first and delete it on error. Progress goes to stderr.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::cli::CpCmd;
use crate::context::Ctx;
use crate::faults::Action;
use crate::machine::namespaces::{self, GuestNs};
use crate::output::{self, SimError, VerbResult, agent, config};
use crate::progress::ProgressBar;

/// smolvm's per-transfer limit.
pub const MAX_BYTES: u64 = 4 * 1024 * 1024 * 1024;

pub fn run(ctx: &Ctx, c: CpCmd) -> VerbResult {
    let (name, gpath, local, upload) = if let Some((n, p)) = c.src.split_once(':') {
        (n.to_string(), p.to_string(), c.dst.clone(), false)
    } else if let Some((n, p)) = c.dst.split_once(':') {
        (n.to_string(), p.to_string(), c.src.clone(), true)
    } else {
        return Err(config(
            "cp",
            "one of SRC or DST must use machine:path syntax (e.g., myvm:/workspace/file)",
        ));
    };
    let r = super::require_running(ctx, &name)?;
    // An injected failure strikes mid-transfer, after the first progress update, as an agent
    // connection dropping would: stderr then ends `\r<progress>Error: …`.
    let (fault, fail_mid) = match ctx.fault_point("cp", &name) {
        Ok(a) => (a, None),
        Err(e) => (None, Some(e)),
    };
    let init = r.init_pid.ok_or_else(|| output::not_running(&name))?;
    let ns = GuestNs::open(init).map_err(|_| output::not_running(&name))?;
    let gp = if gpath.starts_with('/') {
        PathBuf::from(&gpath)
    } else {
        Path::new("/").join(&gpath)
    };
    if upload {
        let mode = match &ctx.extras.cp_mode {
            Some(m) => u32::from_str_radix(m.trim_start_matches("0o"), 8)
                .ok()
                .filter(|v| *v <= 0o7777)
                .ok_or_else(|| {
                    config(
                        "cp",
                        format!("invalid --mode '{m}': expected an octal mode like 0644"),
                    )
                })?,
            None => 0o644,
        };
        let owner = (
            ctx.extras.cp_uid.unwrap_or(0),
            ctx.extras.cp_gid.unwrap_or(0),
        );
        upload_file(&ns, &local, &gpath, &gp, mode, owner, fail_mid)?;
    } else {
        download_file(
            &ns,
            &gpath,
            &gp,
            &local,
            fault == Some(Action::Truncate),
            fail_mid,
        )?;
    }
    if fault == Some(Action::After) {
        return Err(crate::context::fault_error("cp", &name));
    }
    Ok(0)
}

/// Enters the guest's filesystem as its agent would act there: with the guest's umask, so
/// the parent directories an upload creates get the agent's modes, not the caller's.
fn join_mnt(ns: &GuestNs) -> Result<(), SimError> {
    namespaces::setns(ns.mnt.as_raw_fd(), libc::CLONE_NEWNS)
        .map_err(|e| agent("connect", format!("join machine filesystem: {e}")))?;
    // SAFETY: umask only sets this process's file mode mask.
    unsafe { libc::umask(namespaces::GUEST_UMASK) };
    Ok(())
}

/// Upload and download chunk sizes (smolvm streams 1 MiB up, 16 MiB down).
const UP_CHUNK: usize = 1024 * 1024;
const DOWN_CHUNK: usize = 16 * 1024 * 1024;

/// Copies `src` to `dst` in `chunk`-sized pieces, updating `bar` after each; `fail_mid`
/// is returned after the first piece (an injected mid-transfer failure).
fn copy_chunks(
    src: &mut impl Read,
    dst: &mut impl Write,
    chunk: usize,
    bar: &mut ProgressBar,
    fail_mid: &mut Option<SimError>,
) -> Result<u64, Result<SimError, std::io::Error>> {
    let mut buf = vec![0u8; chunk];
    let mut n: u64 = 0;
    loop {
        let got = src.read(&mut buf).map_err(Err)?;
        if got == 0 {
            return match fail_mid.take() {
                Some(e) => Err(Ok(e)),
                None => Ok(n),
            };
        }
        dst.write_all(&buf[..got]).map_err(Err)?;
        n += got as u64;
        bar.update(n);
        if let Some(e) = fail_mid.take() {
            return Err(Ok(e));
        }
    }
}

fn upload_file(
    ns: &GuestNs,
    local: &str,
    gpath: &str,
    gp: &Path,
    mode: u32,
    owner: (u32, u32),
    mut fail_mid: Option<SimError>,
) -> Result<(), SimError> {
    let mut src =
        File::open(local).map_err(|e| agent("read local file", format!("{local}: {e}")))?;
    let md = src
        .metadata()
        .map_err(|e| agent("stat local file", format!("{local}: {e}")))?;
    if md.is_dir() {
        return Err(agent(
            "read local file",
            format!("{local}: Is a directory (os error 21)"),
        ));
    }
    if md.len() > MAX_BYTES {
        return Err(agent(
            "write file",
            format!(
                "{local}: file too large: {} bytes (max {MAX_BYTES} bytes per transfer)",
                md.len()
            ),
        ));
    }
    join_mnt(ns)?;
    let werr = |e: std::io::Error| agent("write file", format!("{gpath}: {e}"));
    if gp.is_dir() {
        return Err(agent(
            "write file",
            format!("{gpath}: Is a directory (os error 21)"),
        ));
    }
    let parent = gp.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent).map_err(werr)?;
    let base = gp
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = parent.join(format!(".{base}.smolvm-upload.{}", std::process::id()));
    let mut bar = ProgressBar::new(format!("Uploading {local} -> {gpath}"), Some(md.len()));
    let res = (|| -> Result<u64, Result<SimError, std::io::Error>> {
        let mut dst = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&staging)
            .map_err(Err)?;
        let n = copy_chunks(&mut src, &mut dst, UP_CHUNK, &mut bar, &mut fail_mid)?;
        let finish = || -> std::io::Result<()> {
            dst.sync_all()?;
            std::os::unix::fs::fchown(&dst, Some(owner.0), Some(owner.1))?;
            dst.set_permissions(fs::Permissions::from_mode(mode))?;
            fs::rename(&staging, gp)
        };
        finish().map_err(Err)?;
        Ok(n)
    })();
    match res {
        Ok(n) => {
            bar.finish(n);
            Ok(())
        }
        Err(e) => {
            let _ = fs::remove_file(&staging);
            Err(e.unwrap_or_else(werr))
        }
    }
}

fn download_file(
    ns: &GuestNs,
    gpath: &str,
    gp: &Path,
    local: &str,
    truncate: bool,
    mut fail_mid: Option<SimError>,
) -> Result<(), SimError> {
    let lp = Path::new(local);
    let mut dst =
        File::create(lp).map_err(|e| agent("write local file", format!("{local}: {e}")))?;
    // Keep a handle on the local directory: after joining the guest, host paths are gone.
    let dir = lp
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dirf = File::open(dir).map_err(|e| agent("write local file", format!("{local}: {e}")))?;
    let base = CString::new(
        lp.file_name()
            .map(|b| b.as_encoded_bytes().to_vec())
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    let remove_local = || {
        // SAFETY: unlinkat relative to a directory fd we hold.
        unsafe { libc::unlinkat(dirf.as_raw_fd(), base.as_ptr(), 0) };
    };
    if let Err(e) = join_mnt(ns) {
        remove_local();
        return Err(e);
    }
    let mut bar = ProgressBar::new(format!("Downloading {gpath} -> {local}"), None);
    let res = (|| -> Result<u64, SimError> {
        let mut src = File::open(gp)
            .map_err(|e| agent("read file", format!("failed to open {gpath}: {e}")))?;
        let md = src
            .metadata()
            .map_err(|e| agent("read file", format!("failed to stat {gpath}: {e}")))?;
        if md.is_dir() {
            return Err(agent(
                "read file",
                format!("failed to read {gpath}: Is a directory (os error 21)"),
            ));
        }
        if md.len() > MAX_BYTES {
            return Err(agent(
                "read file",
                format!(
                    "{gpath}: file too large: {} bytes (max {MAX_BYTES} bytes per transfer)",
                    md.len()
                ),
            ));
        }
        let rerr = |e: std::io::Error| agent("read file", format!("{gpath}: {e}"));
        let keep = if truncate { md.len() / 2 } else { md.len() };
        let n = copy_chunks(
            &mut (&mut src).take(keep),
            &mut dst,
            DOWN_CHUNK,
            &mut bar,
            &mut fail_mid,
        )
        .map_err(|e| e.unwrap_or_else(rerr))?;
        dst.flush()
            .and_then(|_| dst.sync_all())
            .map_err(|e| agent("write local file", format!("{local}: {e}")))?;
        Ok(n)
    })();
    match res {
        Ok(n) => {
            bar.finish(n);
            Ok(())
        }
        Err(e) => {
            remove_local();
            Err(e)
        }
    }
}
