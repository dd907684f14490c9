//! The host half of `box doctor`: smolvm present and in the checked range, KVM on Linux,
//! Apple Silicon on macOS, a browser opener.

use std::path::Path;

use crate::smolvm::Smolvm;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skip,
}

/// One line of the doctor's report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// `host`, `registry` or `box <name>`.
    pub scope: String,
    pub name: String,
    pub status: Status,
    pub detail: String,
}

impl Check {
    pub fn new(scope: &str, name: &str, status: Status, detail: impl Into<String>) -> Self {
        Self {
            scope: scope.to_string(),
            name: name.to_string(),
            status,
            detail: detail.into(),
        }
    }
}

/// Whether SMOLVM names the bundled simulator (which needs no KVM).
fn is_simulator(smolvm: &Smolvm) -> bool {
    Path::new(smolvm.binary())
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("smolvm-sim"))
}

pub fn run(smolvm: &Smolvm) -> Vec<Check> {
    let mut out = Vec::new();
    let h = "host";
    match smolvm.version() {
        Ok(v) if v.is_tested() => {
            out.push(Check::new(h, "smolvm", Status::Ok, format!("smolvm {v}")))
        }
        Ok(v) => out.push(Check::new(
            h,
            "smolvm",
            Status::Warn,
            format!(
                "smolvm {v} is outside the checked range {}",
                crate::smolvm::version::checked_range()
            ),
        )),
        Err(e) => out.push(Check::new(h, "smolvm", Status::Fail, e.to_string())),
    }
    if cfg!(target_os = "linux") {
        if is_simulator(smolvm) {
            out.push(Check::new(
                h,
                "kvm",
                Status::Skip,
                "the smolvm simulator needs no /dev/kvm",
            ));
        } else {
            let rw = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/kvm");
            match rw {
                Ok(_) => out.push(Check::new(h, "kvm", Status::Ok, "/dev/kvm is readable and writable")),
                Err(e) => out.push(Check::new(
                    h,
                    "kvm",
                    Status::Fail,
                    format!("/dev/kvm: {e}; enable KVM and add yourself to the kvm group (sudo usermod -aG kvm $USER)"),
                )),
            }
        }
    } else if cfg!(target_os = "macos") {
        if std::env::consts::ARCH == "aarch64" {
            out.push(Check::new(h, "cpu", Status::Ok, "Apple Silicon"));
        } else {
            out.push(Check::new(
                h,
                "cpu",
                Status::Fail,
                "smolvm needs Apple Silicon (arm64) on macOS",
            ));
        }
    }
    match crate::commands::open::find_opener() {
        Ok((p, _)) => out.push(Check::new(
            h,
            "opener",
            Status::Ok,
            format!("browser opener {}", p.display()),
        )),
        Err(e) => out.push(Check::new(
            h,
            "opener",
            Status::Warn,
            format!("{e} (only box open needs it)"),
        )),
    }
    out
}
