//! Headless Chromium (Debian's `chromium`) for the tests of what a person sees through the
//! `box open` gateway: one page load in a given profile, its DOM after the scripts ran,
//! and its console (Chromium logs it to stderr with `--enable-logging=stderr`).
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether Chromium is installed; missing, it fails under CI=true and skips otherwise.
pub fn available() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    let why =
        "box open gateway tests need chromium (apt-get install chromium; scripts/setup.sh does)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
    false
}

/// What one page load left: the DOM and Chromium's stderr (console lines included).
pub struct Loaded {
    pub dom: String,
    pub log: String,
}

/// Loads `url` in the profile at `profile` (kept between loads: cookies persist) and
/// returns the DOM after the page's scripts ran, within a 20 s virtual-time budget.
pub fn load(profile: &Path, url: &str) -> Loaded {
    let out = Command::new("timeout")
        .arg("120")
        .arg(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=20000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "chromium failed ({}): {log}",
        out.status
    );
    Loaded { dom, log }
}

/// The visible text of a DOM, roughly: tags and scripts removed.
pub fn text_of(dom: &str) -> String {
    let mut out = String::new();
    let mut rest = dom;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        out.push(' ');
        let tail = &rest[at..];
        let skip_to = if tail.starts_with("<script") {
            tail.find("</script>").map(|e| e + 9)
        } else if tail.starts_with("<style") {
            tail.find("</style>").map(|e| e + 8)
        } else {
            tail.find('>').map(|e| e + 1)
        };
        match skip_to {
            Some(n) => rest = &tail[n..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}
