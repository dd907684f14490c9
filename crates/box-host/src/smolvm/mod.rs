//! Driving smolvm: the runner (spawn, deadline, capture), the `ls --json` model, the
//! version quirks, and the driver with one method per smolvm call box makes.

pub mod driver;
pub mod error;
pub mod json;
pub mod runner;
pub mod version;

pub use driver::{CreateSpec, ExecOpts, Smolvm, timeouts};
pub use error::SmolvmError;
pub use json::{Machine, MachineState};
pub use runner::{Output, Stream};
pub use version::SmolvmVersion;
