//! cryo's end-to-end tests: one binary, one module per capability.

mod agents;
mod bench;
mod browser;
mod chaos;
mod durability;
mod escape;
mod finish;
mod fleet;
mod foundation;
mod gateway;
mod hostile;
mod hub;
mod mcp;
mod metrics;
mod operator;
mod people;
mod providers;
mod runtime;
mod sandbox;
mod scheduling;
mod service;
mod snapshots;
mod sync;
mod twin;
mod wakes;
mod years;
