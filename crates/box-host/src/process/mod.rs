//! The lowest layer of driving smolvm: running one call of it as a process (the runner:
//! spawn, deadline, captured output, allowlisted environment) and what such a call can go
//! wrong with ([`SmolvmError`]), whether smolvm runs here or behind ssh on a remote host.
//!
//! Both the ssh transport ([`crate::remote`]) and the driver ([`crate::smolvm`]) stand on
//! it; the transport knows nothing of the driver, and the driver picks a transport.

pub mod error;
pub mod runner;

pub use error::SmolvmError;
pub use runner::{Output, Stream};
