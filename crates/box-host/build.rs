//! Records the git commit so `box --version` can say exactly what was built, and marks a
//! release build (`BOX_RELEASE_BUILD=1`, set by scripts/release.sh) with `cfg(box_release)`:
//! a release `box` must not look for its guest assets in the source tree it was built from.

use std::process::Command;

fn main() {
    let commit = std::env::var("BOX_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=BOX_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=BOX_BUILD_COMMIT");
    println!("cargo::rustc-check-cfg=cfg(box_release)");
    if std::env::var_os("BOX_RELEASE_BUILD").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=box_release");
    }
    println!("cargo:rerun-if-env-changed=BOX_RELEASE_BUILD");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
}
