//! cryo's end-to-end tests: one binary, one module per capability.

mod foundation;
mod runtime;
mod scheduling;
