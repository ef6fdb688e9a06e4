//! Deterministic simulation of many chambers through years of wakes, in the
//! manner of FoundationDB's simulator and TigerBeetle's VOPR.
//!
//! A [`World`] holds what would be durable on a real machine (each chamber's
//! files, the ledger and the claim journal, the registry), the process table
//! (agents outlive cryod), and a simulated daemon: one [`Chamber`] machine per
//! chamber, admission under a global limit, the scheduler's plans, timers and
//! live tokens. Everything runs on a simulated clock from one seed. Agents are
//! scripted ([`agent`]); people write mail; operators start, stop, pause,
//! wake and write TODOs; the machine sleeps and wakes; time zones cross DST;
//! a wake's ledger insert or claim fails now and then (a full disk).
//! And between any two effects cryod may crash: its volatile part is dropped,
//! the agents it left run on, and a restart recovers from the durable part
//! only, as the real daemon does (`Daemon::load`: end the agents of open
//! sessions, then start every chamber with [`Input::Boot`]).
//!
//! [`check`] states the invariants; they are checked after every step and at
//! the end. A failure names its seed; `CRYO_SIM_SEED=N` replays it.

pub mod agent;
mod check;
mod durable;
mod world;

pub use self::world::{Failure, Files, Report, ScriptStep, World};

/// A small, fast, seedable generator (SplitMix64): the only randomness.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn hex(&mut self, digits: usize) -> String {
        let v = self.next_u64();
        format!("{v:016x}")[..digits.min(16)].to_string()
    }
}

/// The shape of one simulated run.
#[derive(Debug, Clone)]
pub struct Config {
    pub chambers: usize,
    /// Simulated days before the final drain.
    pub days: u32,
    /// `max_concurrent_sessions`.
    pub limit: usize,
    /// cryod crashes before an effect with probability 1 / this (0: never).
    pub crash_one_in: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config { chambers: 6, days: 30, limit: 2, crash_one_in: 150 }
    }
}

/// Runs one simulation from `seed`.
pub fn run(seed: u64, config: &Config) -> Result<Report, Failure> {
    World::new(seed, config.clone()).run()
}

#[cfg(test)]
mod tests;
