//! cryo-core: the pure heart of cryo.
//!
//! Everything here decides and nothing acts: no tokio, no files, no sockets,
//! no clock of its own. Time arrives as a value (`now`), and results are values
//! the daemon carries out. That keeps the rules of the product (the time
//! grammar, the TODO lifecycle, the hibernate gate, what an agent is told)
//! testable in milliseconds with tables.

pub mod message;
pub mod time;
pub mod todo;
