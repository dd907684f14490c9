//! Driving smolvm: the `ls --json` model, the version quirks, and the driver with one
//! method per smolvm call box makes, here or on a remote host through the ssh transport
//! ([`crate::remote`]). Running one call as a process is the layer below both
//! ([`crate::process`]), re-exported here for the layers above.

pub mod driver;
pub mod json;
pub mod labels;
mod pack_layers;
pub mod version;

pub use crate::process::{Output, SmolvmError, Stream};
pub use driver::{CreateFromSpec, CreateSpec, ExecOpts, Smolvm, timeouts};
pub use json::{Machine, MachineState};
pub use version::SmolvmVersion;

/// A stand-in `smolvm` for unit tests that play back canned texts: a shell script at
/// `<dir>/smolvm`.
#[cfg(test)]
pub(crate) fn fake_smolvm(dir: &std::path::Path, script: &str) -> Smolvm {
    // The executable is written by a child (`install`), never through a file descriptor of
    // this process: a test thread that forks while such a descriptor is open hands it to its
    // child until that child execs, and exec'ing the script meanwhile fails with ETXTBSY.
    let source = dir.join("smolvm.sh");
    std::fs::write(&source, format!("#!/bin/sh\n{script}\n")).expect("write the fake smolvm");
    let path = dir.join("smolvm");
    let installed = std::process::Command::new("install")
        .arg("-m")
        .arg("755")
        .arg(&source)
        .arg(&path)
        .status()
        .expect("run install");
    assert!(installed.success(), "install the fake smolvm");
    Smolvm::with_binary(path, None)
}
