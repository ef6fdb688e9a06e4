//! The services a chamber's shell uses, above its files and below the
//! supervisor: admission, the file watcher, the sync bridges, the system
//! zone, sessions waiting for an approval; the node's trust gate (the
//! lease), the notifiers, `[git]` worktrees; and `runtime`, which holds
//! them all for every supervisor.
//!
//! None knows the supervisor: each calls a closure or a sink it was given.
//! Each room is a module of its own, used by its path
//! (`crate::services::runtime::Shared`).

pub mod admission;
pub mod approvals;
pub mod bridges;
pub mod git;
pub mod lease;
pub mod notifier;
pub mod runtime;
pub mod watch;
pub mod zone;
