//! Host state: where it lives, the registry of boxes and the operation locks.

pub mod locks;
pub mod paths;
pub mod registry;
pub mod reserved;

pub use locks::{LockGuard, LockKey};
pub use paths::StateDir;
pub use registry::{BoxRecord, Registry};
