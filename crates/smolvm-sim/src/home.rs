//! Where the simulator keeps its state (`SMOLVM_SIM_HOME`). Its own module, below both the
//! registry of machines and the fault counters, which each keep files under it.

use std::path::PathBuf;

/// The simulator's state root.
pub fn home() -> PathBuf {
    let head = crate::personality::Personality::from_env().is_ok_and(|p| p.is_head());
    let p = if let Some(h) = std::env::var_os("SMOLVM_SIM_HOME").filter(|v| !v.is_empty()) {
        PathBuf::from(h)
    } else if let Some(d) = std::env::var_os("SMOLVM_DATA_DIR").filter(|v| head && !v.is_empty()) {
        // smolvm >= 1.2.5 on Linux: HOME is pointed at SMOLVM_DATA_DIR and XDG vars cleared.
        PathBuf::from(d).join(".local/share/smolvm-sim")
    } else if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        PathBuf::from(x).join("smolvm-sim")
    } else {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/root"));
        home.join(".local/share/smolvm-sim")
    };
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|c| c.join(&p)).unwrap_or(p)
    }
}
