//! The base: what every other room stands on and which knows nothing of
//! chambers, sessions or the store. The clock (the one reader of the wall
//! clock), random names and secrets, where log lines go, the metrics
//! registry, bounded TCP connections; on the clock, the wall-clock
//! scheduler and each wake's trace over OTLP.
//!
//! Each room is a module of its own, used by its path
//! (`crate::base::clock::Clock`): they share no API, only their place at
//! the bottom of the layers.

pub mod clock;
pub mod conn;
pub mod logline;
pub mod memory;
pub mod metrics;
pub mod otlp;
pub mod random;
pub mod scheduler;
