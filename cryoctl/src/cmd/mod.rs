//! One module per command group.

pub mod chamber;
pub mod daemon;
pub mod demo;
pub mod doctor;
