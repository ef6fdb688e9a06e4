//! One module per command group.

pub mod chamber;
pub mod demo;
pub mod doctor;
