//! Version strings: the crate version plus the git commit it was built from.

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("BOX_GIT_COMMIT");
pub const LONG: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("BOX_GIT_COMMIT"), ")");
