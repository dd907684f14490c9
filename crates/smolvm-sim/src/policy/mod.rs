//! A machine's network policy and credential bindings as plain data: what `machine create`
//! records and checks, and what the running gateway and interceptor read. The ground floor:
//! it imports nothing else of the simulator.

pub mod addresses;
pub mod credential;
