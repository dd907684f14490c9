//! The guest: root filesystem, namespaces, network and the supervisor that keeps them alive.

pub mod disconnect;
pub mod namespaces;
pub mod network;
pub mod rootfs;
pub mod supervisor;
