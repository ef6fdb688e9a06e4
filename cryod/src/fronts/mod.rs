//! The fronts: how the world reaches the daemon, each acting through
//! [`crate::daemon::Daemon`]'s operations and named reads. The operator's
//! socket (`server`), the gRPC services (`rpc`), the hub (pages, its API,
//! `/mcp`), the service manager and logind (`system`), a fleet node's
//! loops (`fleet`), and the wire conversions `rpc` and the hub share
//! (`convert`).
//!
//! Each room is a module of its own, used by its path
//! (`crate::fronts::hub::start`).

pub mod convert;
pub mod fleet;
pub mod hub;
pub mod rpc;
pub mod server;
pub mod system;
