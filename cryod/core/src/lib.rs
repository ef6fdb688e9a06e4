//! cryo-core: the pure heart of cryo.
//!
//! Everything here decides and nothing acts: no tokio, no files, no sockets,
//! no clock of its own. Time arrives as a value (`now`), and results are values
//! the daemon carries out. That keeps the rules of the product (the time
//! grammar, the TODO lifecycle, the hibernate gate, what an agent is told and
//! what cryod says when a session goes wrong) testable in milliseconds.

pub mod approvals;
pub mod chamber;
pub mod hibernate;
pub mod limits;
pub mod message;
pub mod prompt;
pub mod schedule;
pub mod session;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod time;
pub mod todo;

#[cfg(test)]
mod purity;

#[cfg(test)]
mod documented {
    /// ARCHITECTURE.md lists every input and effect of the chamber machine.
    #[test]
    fn every_input_and_effect_is_on_the_map() {
        let map = include_str!("../../../ARCHITECTURE.md");
        let rooms = [("Input", include_str!("chamber/io/input.rs")), ("Effect", include_str!("chamber/io/effect.rs"))];
        for (name, room) in rooms {
            let start = room.find(&format!("pub enum {name} {{")).expect("the enum");
            let body = &room[start..];
            let end = body.find("\n}\n").expect("its end");
            let variants: Vec<&str> = body[..end]
                .lines()
                .filter_map(|l| l.strip_prefix("    "))
                .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
                .map(|l| l.split(|c: char| !c.is_alphanumeric()).next().unwrap_or(""))
                .collect();
            assert!(variants.len() > 30, "{name}: found only {variants:?}");
            let missing: Vec<_> = variants.iter().filter(|v| !map.contains(&format!("`{v}`"))).collect();
            assert!(missing.is_empty(), "ARCHITECTURE.md does not list these {name}s: {missing:?}");
        }
    }
}
