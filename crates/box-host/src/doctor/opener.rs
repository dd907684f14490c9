//! The program that opens a URL in the user's browser (`box open`), and whether there is
//! one (`box doctor`'s host checks): `BOX_BROWSER`, else the platform's opener.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The opener: `BOX_BROWSER` (must be on PATH or a path), else `open` on macOS,
/// `xdg-open` then `gio open` on Linux. Returns the program and its leading arguments.
pub fn find_opener() -> Result<(PathBuf, Vec<String>)> {
    if let Some(b) = std::env::var_os("BOX_BROWSER").filter(|v| !v.is_empty()) {
        let b = PathBuf::from(b);
        return match which(&b) {
            Some(p) => Ok((p, vec![])),
            None => bail!("BOX_BROWSER={} is not an executable on PATH", b.display()),
        };
    }
    let candidates: &[(&str, &[&str])] = if cfg!(target_os = "macos") {
        &[("open", &[])]
    } else {
        &[("xdg-open", &[]), ("gio", &["open"])]
    };
    for (prog, lead) in candidates {
        if let Some(p) = which(Path::new(prog)) {
            return Ok((p, lead.iter().map(|s| s.to_string()).collect()));
        }
    }
    bail!("could not find a browser opener (xdg-open, gio); set BOX_BROWSER to a graphical opener")
}

/// Resolves a program name on PATH (or checks a path) to an executable file.
pub fn which(prog: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.components().count() > 1 {
        return ok(prog).then(|| prog.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(prog))
            .find(|p| ok(p))
    })
}
