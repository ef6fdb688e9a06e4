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
mod purity {
    /// The core stays free of I/O and runtimes (STYLE.md section 1).
    #[test]
    fn core_imports_no_io() {
        let sources = [
            include_str!("chamber/mod.rs"),
            include_str!("chamber/io/mod.rs"),
            include_str!("chamber/io/input.rs"),
            include_str!("chamber/io/effect.rs"),
            include_str!("chamber/io/reply.rs"),
            include_str!("chamber/calls.rs"),
            include_str!("chamber/end.rs"),
            include_str!("chamber/operator.rs"),
            include_str!("chamber/recovery.rs"),
            include_str!("chamber/wake.rs"),
            include_str!("hibernate.rs"),
            include_str!("limits.rs"),
            include_str!("message.rs"),
            include_str!("prompt.rs"),
            include_str!("session.rs"),
            include_str!("time.rs"),
            include_str!("todo.rs"),
            include_str!("sim/mod.rs"),
            include_str!("sim/world.rs"),
            include_str!("sim/world/effects.rs"),
            include_str!("sim/agent.rs"),
            include_str!("sim/check.rs"),
        ];
        for src in sources {
            for banned in
                ["tokio", "tonic", "rusqlite", "std::fs", "std::net", "std::process", "SystemTime::now", "Utc::now"]
            {
                assert!(!src.contains(banned), "cryo-core must not use {banned}");
            }
        }
    }
}

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
