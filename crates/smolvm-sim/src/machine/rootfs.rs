//! The guest root filesystem, in one of two forms.
//!
//! **Image** (the default): the root is one overlay whose read-only lower layer is the
//! cached image (`image::cache`, shared by every machine of that image) and whose upper layer
//! is the machine's own `<data>/guest/image-upper`, as smolvm keeps a persistent overlay per
//! machine on its storage disk. The image's own `/root`, `/home`, `/tmp`, `/etc` are what the
//! guest sees; `/workspace` is added (smolvm's storage-disk directory); there is no `/data`
//! (box makes its own). 1.9 mounts a fresh tmpfs on `/tmp` at every boot, as smolvm's agent
//! does from 1.9 on (crun spec, privileged containers); 1.0.4 keeps the image's `/tmp`.
//!
//! **Host userland** (SMOLVM_SIM_HOST_USERLAND=1, the fast-test shortcut), described next.
//! Overlayfs refuses an upper dir inside its lower dir, so `/` cannot be the lower layer while
//! the machine's state lives under SMOLVM_SIM_HOME. Instead the root is assembled per top-level
//! directory: a persistent skeleton (`<data>/guest/top`, which holds the guest's own `/root`,
//! `/home`, `/tmp`, `/data`, `/workspace`, `/opt`, `/srv` ...) is bind-mounted as the new root,
//! and each host system directory (`/usr`, `/etc`, `/var`, `/lib*` ...) is an overlay whose
//! lower layer is the host directory (read-only) and whose upper layer is
//! `<data>/guest/upper/<dir>`. `/usr/local` is the guest's own (`<data>/guest/usr-local`), so
//! site-local host tools never leak into a guest. `/proc`,
//! `/sys` (read-only), a minimal `/dev` and `/run` are fresh per boot. Everything else persists
//! across stop/start, like smolvm's persistent overlay; deleting the machine removes it.

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// Host directories the guest sees through a per-machine overlay (symlinks are copied).
pub const OVERLAID: [&str; 9] = [
    "usr", "etc", "var", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
];

/// The parts of the host userland that are site-local rather than distro packages start
/// empty in a guest, as in a stock image: `/usr/local` (hidden by a private directory with the
/// usual skeleton), `/opt` and `/srv` (private directories).
const USR_LOCAL_SKELETON: [&str; 9] = [
    "bin", "etc", "games", "include", "lib", "man", "sbin", "share", "src",
];

/// Guest-private directories in the persistent skeleton, with their modes.
const PRIVATE_DIRS: [(&str, u32); 14] = [
    ("opt", 0o755),
    ("srv", 0o755),
    ("root", 0o700),
    ("home", 0o755),
    ("tmp", 0o1777),
    ("data", 0o755),
    ("workspace", 0o755),
    ("mnt", 0o755),
    ("media", 0o755),
    ("boot", 0o755),
    ("run", 0o755),
    ("proc", 0o555),
    ("sys", 0o555),
    ("dev", 0o755),
];

pub fn guest_dir(data: &Path) -> PathBuf {
    data.join("guest")
}

pub fn mountpoint(data: &Path) -> PathBuf {
    data.join("rootfs")
}

/// SMOLVM_SIM_HOME must not sit inside a directory the guest overlays.
pub fn check_home(home: &Path) -> Result<(), String> {
    let h = fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    for d in OVERLAID {
        let host = Path::new("/").join(d);
        let Ok(real) = fs::canonicalize(&host) else {
            continue;
        };
        if h.starts_with(&real) {
            return Err(format!(
                "SMOLVM_SIM_HOME ({}) is inside {}, which smolvm-sim overlays into every guest; \
                 use a directory under /root, /home, /tmp or /work instead",
                h.display(),
                real.display()
            ));
        }
    }
    Ok(())
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default()
}

fn mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let s = src.map(|v| CString::new(v).unwrap_or_default());
    let f = fstype.map(|v| CString::new(v).unwrap_or_default());
    let d = data.map(|v| CString::new(v).unwrap_or_default());
    let t = cstr(target);
    // SAFETY: every pointer is a live NUL-terminated string or null.
    let rc = unsafe {
        libc::mount(
            s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            t.as_ptr(),
            f.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            flags,
            d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr().cast()),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount {} on {} ({}): {}",
            src.unwrap_or("none"),
            target.display(),
            fstype.unwrap_or("bind"),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn mkdir_mode(p: &Path, mode: u32) -> Result<(), String> {
    if fs::symlink_metadata(p).is_err() {
        fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
        fs::set_permissions(p, fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", p.display()))?;
    }
    Ok(())
}

/// Create the persistent directories (called by the supervisor before it clones the guest).
pub fn prepare(data: &Path) -> Result<(), String> {
    let g = guest_dir(data);
    for sub in ["top", "upper", "work"] {
        fs::create_dir_all(g.join(sub))
            .map_err(|e| format!("mkdir {}: {e}", g.join(sub).display()))?;
    }
    fs::create_dir_all(mountpoint(data)).map_err(|e| format!("mkdir rootfs: {e}"))?;
    Ok(())
}

/// What the guest's root is built from.
pub enum GuestRoot {
    /// A cached image's root filesystem (read-only lower layer).
    Image {
        lower: PathBuf,
        /// A pack's layer (its source machine's upper dir), stacked above the image and
        /// below the machine's own upper dir, read-only: 1.9's shared pack store or the
        /// machine's private `<data>/pack` extraction (`crate::pack::boot_layer`).
        pack_layer: Option<PathBuf>,
        /// Mount a fresh tmpfs on /tmp at every boot (smolvm 1.9's agent does).
        tmp_tmpfs: bool,
    },
    /// The host's userland (the opt-in fast-test shortcut).
    HostUserland,
}

/// The guest's network, as its root needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestNet {
    None,
    /// The plain NAT: the image's resolver, unless it is on the host's loopback.
    Nat,
    /// An egress policy: the gateway's DNS filter is the only resolver.
    Filtered,
}

/// Build the guest root and pivot into it. Runs as the guest's PID 1, inside its fresh mount
/// namespace, before anything else happens there.
pub fn assemble_and_pivot(data: &Path, root: &GuestRoot, net: GuestNet) -> Result<(), String> {
    // Nothing we mount may propagate back to the host.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    match root {
        GuestRoot::HostUserland => assemble_host_userland(data)?,
        GuestRoot::Image {
            lower,
            pack_layer,
            tmp_tmpfs,
        } => assemble_image(data, lower, pack_layer.as_deref(), *tmp_tmpfs)?,
    }
    let r = mountpoint(data);
    mount_runtime_dirs(&r)?;
    match net {
        GuestNet::None => {}
        GuestNet::Nat => fix_resolv_conf(&r.join("etc"))?,
        GuestNet::Filtered => write_resolv_conf(&r.join("etc"), crate::egress::GUEST_DNS)?,
    }
    pivot(&r)
}

/// The machine's credential CA where smolvm puts it (`/run/smol/credentials/ca.pem`,
/// read-only, nothing else in that directory), and `/run/smolvm/ca-bundle.pem`: the image's
/// own roots as they are at boot, then the CA. Runs in the guest after the pivot, so the
/// image's bundle (often a symlink) resolves inside the guest.
pub fn install_credential_ca(ca_pem: &str) -> Result<(), String> {
    use crate::policy::credential::{GUEST_CA, GUEST_CA_BUNDLE, GUEST_CA_DIR};
    mkdir_all_mode(Path::new(GUEST_CA_DIR), 0o755)?;
    fs::write(GUEST_CA, ca_pem).map_err(|e| format!("{GUEST_CA}: {e}"))?;
    fs::set_permissions(GUEST_CA, fs::Permissions::from_mode(0o444))
        .map_err(|e| format!("{GUEST_CA}: {e}"))?;
    let dir = Path::new(GUEST_CA_DIR);
    mount(Some(GUEST_CA_DIR), dir, None, libc::MS_BIND, None)?;
    mount(
        None,
        dir,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
        None,
    )?;
    let mut bundle = fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(ca_pem);
    let parent = Path::new(GUEST_CA_BUNDLE)
        .parent()
        .unwrap_or(Path::new("/run"));
    mkdir_all_mode(parent, 0o755)?;
    fs::write(GUEST_CA_BUNDLE, bundle).map_err(|e| format!("{GUEST_CA_BUNDLE}: {e}"))
}

fn mkdir_all_mode(p: &Path, mode: u32) -> Result<(), String> {
    fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", p.display()))
}

/// Point the guest at `nameserver` only (a symlinked resolv.conf is replaced, never
/// followed).
fn write_resolv_conf(etc: &Path, nameserver: &str) -> Result<(), String> {
    let p = etc.join("resolv.conf");
    if fs::symlink_metadata(&p).is_ok() {
        fs::remove_file(&p).map_err(|e| format!("remove guest resolv.conf: {e}"))?;
    }
    fs::write(&p, format!("nameserver {nameserver}\n"))
        .map_err(|e| format!("write guest resolv.conf: {e}"))
}

/// The image form: one overlay over the cached image, plus smolvm's `/workspace`.
fn assemble_image(
    data: &Path,
    lower: &Path,
    pack_layer: Option<&Path>,
    tmp_tmpfs: bool,
) -> Result<(), String> {
    if !lower.join("bin").exists() {
        return Err(format!(
            "image root {} is missing (was the image cache removed?)",
            lower.display()
        ));
    }
    let g = guest_dir(data);
    let upper = g.join("image-upper");
    let work = g.join("image-work");
    for p in [&upper, &work] {
        fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
    }
    let r = mountpoint(data);
    // overlayfs: the leftmost lower layer is the top one; whiteouts and opaque dirs in the
    // pack's layer hide what the source machine deleted from the image.
    let lowers = match pack_layer {
        Some(layer) => format!("{}:{}", layer.display(), lower.display()),
        None => lower.display().to_string(),
    };
    // smolvm's agent mounts with `index=off` (v1.0.4 crates/smolvm-agent/src/storage.rs
    // `try_mount_overlay_multi_lower` L2644), and its guest kernel is built without
    // CONFIG_OVERLAY_FS_REDIRECT_DIR and CONFIG_OVERLAY_FS_METACOPY
    // (smol-machines/libkrunfw config-libkrunfw_{x86_64,aarch64}): renaming a directory
    // that came from a lower layer fails with EXDEV, and a chown copies the whole file up.
    // Said explicitly so a host kernel with other defaults cannot make the guest friendlier.
    let opts = format!(
        "lowerdir={lowers},upperdir={},workdir={},index=off,redirect_dir=follow,metacopy=off",
        upper.display(),
        work.display()
    );
    mount(Some("overlay"), &r, Some("overlay"), 0, Some(&opts))?;
    mkdir_mode(&r.join("workspace"), 0o755)?;
    for (d, mode) in [
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run", 0o755),
        ("tmp", 0o1777),
    ] {
        mkdir_mode(&r.join(d), mode)?;
    }
    if tmp_tmpfs {
        mount(
            Some("tmpfs"),
            &r.join("tmp"),
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777"),
        )?;
    }
    Ok(())
}

/// The host-userland form (see the module doc).
fn assemble_host_userland(data: &Path) -> Result<(), String> {
    let g = guest_dir(data);
    let top = g.join("top");
    let r = mountpoint(data);
    mount(
        Some(&top.to_string_lossy()),
        &r,
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )?;

    for d in OVERLAID {
        let host = Path::new("/").join(d);
        let Ok(md) = fs::symlink_metadata(&host) else {
            continue;
        };
        let target = r.join(d);
        if md.file_type().is_symlink() {
            if fs::symlink_metadata(&target).is_err() {
                let to = fs::read_link(&host)
                    .map_err(|e| format!("readlink {}: {e}", host.display()))?;
                symlink(&to, &target).map_err(|e| format!("symlink {}: {e}", target.display()))?;
            }
            continue;
        }
        if !md.is_dir() {
            continue;
        }
        let upper = g.join("upper").join(d);
        let work = g.join("work").join(d);
        for p in [&target, &upper, &work] {
            fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))?;
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            host.display(),
            upper.display(),
            work.display()
        );
        mount(Some("overlay"), &target, Some("overlay"), 0, Some(&opts))?;
    }
    for (d, mode) in PRIVATE_DIRS {
        mkdir_mode(&r.join(d), mode)?;
    }
    let local = g.join("usr-local");
    for d in USR_LOCAL_SKELETON {
        mkdir_mode(&local.join(d), 0o755)?;
    }
    if r.join("usr/local").is_dir() {
        mount(
            Some(&local.to_string_lossy()),
            &r.join("usr/local"),
            None,
            libc::MS_BIND,
            None,
        )?;
    }
    Ok(())
}

/// `/proc`, read-only `/sys`, `/run` and a minimal `/dev`, fresh at every boot.
fn mount_runtime_dirs(r: &Path) -> Result<(), String> {
    let nodev = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    mount(Some("proc"), &r.join("proc"), Some("proc"), nodev, None)?;
    mount(
        Some("sysfs"),
        &r.join("sys"),
        Some("sysfs"),
        nodev | libc::MS_RDONLY,
        None,
    )?;
    mount(
        Some("tmpfs"),
        &r.join("run"),
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=755"),
    )?;
    mkdir_mode(&r.join("run/lock"), 0o1777)?;
    make_dev(&r.join("dev"))
}

/// Make `r` the root of this mount namespace.
fn pivot(r: &Path) -> Result<(), String> {
    // pivot_root(".", ".") stacks the old root on top of the new one; detach it.
    let rc = std::env::set_current_dir(r);
    rc.map_err(|e| format!("chdir {}: {e}", r.display()))?;
    let dot = CString::new(".").unwrap_or_default();
    // SAFETY: syscall with valid NUL-terminated strings.
    if unsafe { libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) } != 0 {
        return Err(format!("pivot_root: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    if unsafe { libc::umount2(dot.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(format!(
            "umount old root: {}",
            std::io::Error::last_os_error()
        ));
    }
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    Ok(())
}

/// A minimal /dev: tmpfs with bind-mounted host device nodes, a private devpts, shm.
fn make_dev(dev: &Path) -> Result<(), String> {
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID,
        Some("mode=755,size=65536k"),
    )?;
    for n in ["null", "zero", "full", "random", "urandom", "tty"] {
        let t = dev.join(n);
        fs::write(&t, b"").map_err(|e| format!("create {}: {e}", t.display()))?;
        mount(Some(&format!("/dev/{n}")), &t, None, libc::MS_BIND, None)?;
    }
    let pts = dev.join("pts");
    mkdir_mode(&pts, 0o755)?;
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620,gid=5"),
    )?;
    let shm = dev.join("shm");
    mkdir_mode(&shm, 0o1777)?;
    mount(
        Some("tmpfs"),
        &shm,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )?;
    for (l, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(to, dev.join(l)).map_err(|e| format!("symlink /dev/{l}: {e}"))?;
    }
    Ok(())
}

/// A loopback nameserver on the host is unreachable from the guest (slirp is started with
/// --disable-host-loopback): point the guest at slirp's DNS forwarder instead. Edits go to the
/// guest's /etc overlay only. A symlinked resolv.conf is replaced, never followed, so nothing
/// resolves into the host.
fn fix_resolv_conf(etc: &Path) -> Result<(), String> {
    let p = etc.join("resolv.conf");
    let md = fs::symlink_metadata(&p);
    let needs = match &md {
        Ok(m) if m.file_type().is_symlink() => true,
        Ok(_) => fs::read_to_string(&p)
            .map(|s| {
                !s.lines().any(|l| {
                    let l = l.trim();
                    l.starts_with("nameserver") && !l.contains(" 127.") && !l.contains(" ::1")
                })
            })
            .unwrap_or(true),
        Err(_) => true,
    };
    if needs {
        if md.is_ok() {
            fs::remove_file(&p).map_err(|e| format!("remove guest resolv.conf: {e}"))?;
        }
        fs::write(&p, "nameserver 10.0.2.3\n")
            .map_err(|e| format!("write guest resolv.conf: {e}"))?;
    }
    Ok(())
}
