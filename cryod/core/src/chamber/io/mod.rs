//! What goes into a chamber's machine ([`Input`]) and what comes out
//! ([`Effect`]): two closed sets, so one `match` in the shell lists every
//! thing cryod does for a chamber, and one in the machine every reason it
//! changes.
//!
//! An effect whose outcome the machine needs (a write that may fail, a spawn,
//! a ledger insert) carries a continuation tag (`then`); the shell performs
//! it and feeds the outcome back as the matching result input with the same
//! tag, before anything else happens to the chamber.
//!
//! Three rooms: [`Input`] and what it carries (`input.rs`), [`Effect`] and
//! what it carries (`effect.rs`), and the answers to callers (`reply.rs`).

mod effect;
mod input;
mod reply;

pub use self::effect::*;
pub use self::input::*;
pub use self::reply::*;
