//! The image cache: one read-only root filesystem per buildable image, shared by every
//! machine (each machine writes only to its own overlay upper layer), and the pull that
//! fills it on a machine's first start.
//!
//! Default location `/var/cache/smolvm-sim/images` (outside any checkout and any
//! SMOLVM_SIM_HOME, so one build serves every test's fresh state root); SMOLVM_SIM_IMAGES
//! overrides it. `build-image.sh` (embedded below, also run by scripts/setup.sh) builds into
//! a temp dir and renames it into place under a flock, so concurrent first starts build once
//! and nobody ever sees half an image.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::output::{SimError, agent};

use super::refs;

/// The recipe, one copy for the simulator and for scripts/setup.sh.
const BUILD_SCRIPT: &str = include_str!("build-image.sh");

pub fn cache_dir() -> PathBuf {
    std::env::var_os("SMOLVM_SIM_IMAGES")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/smolvm-sim/images"))
}

/// `debian:13` → `debian_13` (the cache key, as build-image.sh spells it).
fn key(image: &str) -> String {
    image.replace(':', "_")
}

/// The read-only root of a buildable image (it exists once the image is cached).
pub fn rootfs(image: &str) -> PathBuf {
    cache_dir().join(key(image)).join("rootfs")
}

pub fn is_cached(image: &str) -> bool {
    rootfs(image).join("bin").exists()
}

/// smolvm's first-boot pull on stderr (`src/cli/vm_common.rs` "Pulling {image}...", then
/// `src/cli/mod.rs` pull_with_progress: `\r`-redrawn bar, "done." even on failure), for the
/// reference the machine was created with. `build` is the buildable image behind it; when
/// it is not cached yet it is built now (tens of seconds), with the bar following the build.
pub fn pull(requested: &str, build: Option<&str>) -> Result<(), SimError> {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "Pulling {requested}...");
    let _ = write!(err, "Pulling image {requested}...");
    let _ = err.flush();
    let result = match build {
        None => Err(agent("pull image", refs::pull_error_reason(requested))),
        Some(image) if is_cached(image) => {
            bar(requested, 100);
            Ok(())
        }
        Some(image) => build_now(requested, image),
    };
    let _ = writeln!(
        err,
        "\rPulling image {requested}... done.                              "
    );
    result
}

fn bar(requested: &str, percent: u8) {
    let filled = usize::from(percent.min(100)) / 5;
    let cells: String = (0..20)
        .map(|i| match i.cmp(&filled) {
            std::cmp::Ordering::Less => '=',
            std::cmp::Ordering::Equal => '>',
            std::cmp::Ordering::Greater => ' ',
        })
        .collect();
    let mut err = std::io::stderr();
    let _ = write!(err, "\rPulling image {requested}... [{cells}] {percent}%");
    let _ = err.flush();
}

/// Runs build-image.sh for `image`, drawing its progress lines as smolvm's pull bar.
fn build_now(requested: &str, image: &str) -> Result<(), SimError> {
    let cache = cache_dir();
    let fail = |why: String| {
        agent(
            "pull image",
            format!(
                "crane manifest failed: Error: fetching manifest {}: smolvm-sim could not build \
                 {image} with mmdebstrap (it needs mmdebstrap and the Debian archive; \
                 scripts/setup.sh builds the images ahead of time): {why}",
                refs::normalize(requested)
            ),
        )
    };
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(BUILD_SCRIPT)
        .arg("build-image.sh")
        .arg(&cache)
        .arg(image)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot run bash: {e}")))?;
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    });
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(p) = line
                .strip_prefix("progress ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<u8>().ok())
            {
                bar(requested, p);
            }
        }
    }
    let status = child.wait().map_err(|e| fail(e.to_string()))?;
    let stderr = err_reader.join().unwrap_or_default();
    if status.success() && is_cached(image) {
        return Ok(());
    }
    let why = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("build-image.sh failed without a message")
        .to_string();
    Err(fail(format!("{why} ({status})")))
}
