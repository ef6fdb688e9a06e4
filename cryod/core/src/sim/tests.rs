//! The simulator in `cargo test`: a budget of random seeds every run (more
//! than 10,000 chamber-days across the tests below), every seed that ever
//! failed kept as a regression, and `CRYO_SIM_SEED` / `CRYO_SIM_RUNS` to
//! replay one seed or soak many.

use super::{Config, Report, run};

/// The seeds of one budget: fresh every run (from the time) so that the
/// budget keeps exploring; `CRYO_SIM_SEED=N` replays one (a failure prints
/// it), `CRYO_SIM_RUNS=N` runs N.
fn seeds(base: u64, n: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("CRYO_SIM_SEED") {
        return vec![s.parse().expect("CRYO_SIM_SEED is a number")];
    }
    let n = std::env::var("CRYO_SIM_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(n);
    let fresh = std::time::SystemTime::UNIX_EPOCH.elapsed().map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut rng = super::Rng::new(base ^ fresh);
    (0..n).map(|_| rng.next_u64()).collect()
}

fn budget(name: &str, base: u64, runs: u64, config: Config) -> Report {
    let started = std::time::Instant::now();
    let mut total = Report::default();
    for seed in seeds(base, runs) {
        match run(seed, &config) {
            Ok(r) => total += r,
            Err(f) => panic!("{f}\n(config: {config:?}; add the seed to REGRESSIONS once it is fixed)"),
        }
    }
    eprintln!("sim {name}: {total} in {:.1?}", started.elapsed());
    total
}

/// Six chambers sharing two session slots: admission under pressure.
#[test]
fn budget_crowded() {
    let r = budget("crowded", 1, 60, CROWDED);
    assert!(r.chamber_days >= 3_000 || std::env::var("CRYO_SIM_SEED").is_ok());
}

/// One slot for four chambers, and cryod crashing often.
#[test]
fn budget_crashy() {
    let r = budget("crashy", 2, 90, CRASHY);
    assert!(r.chamber_days >= 3_200 || std::env::var("CRYO_SIM_SEED").is_ok());
}

/// Plenty of slots and longer runs: recurring TODOs across DST edges.
#[test]
fn budget_roomy() {
    let r = budget("roomy", 3, 40, ROOMY);
    assert!(r.chamber_days >= 3_500 || std::env::var("CRYO_SIM_SEED").is_ok());
}

/// Every seed that once failed, with the config it failed under and the bug
/// it found (each fixed; each seed fails again if its fix is undone).
const CROWDED: Config = Config { chambers: 6, days: 7, limit: 2, crash_one_in: 300 };
const CRASHY: Config = Config { chambers: 4, days: 7, limit: 1, crash_one_in: 60 };
const ROOMY: Config = Config { chambers: 8, days: 10, limit: 8, crash_one_in: 500 };
const MONTH: Config = Config { chambers: 6, days: 30, limit: 2, crash_one_in: 150 };
const UNSEEN_BATCH: &str = "cryod stopped after journaling a claimed batch but before moving its files; recovery \
     answered it with an 'interrupted before replying' fallback, though the agent had never seen the mail, and \
     the next session claimed and answered it again: two answers";
const JOURNAL_LEFT_OPEN: &str = "a batch the agent answered itself stayed open in the claim journal (only a \
     fallback closed it), so the ledger disagreed with the outbox until the next restart";
const SKIP_LIVELOCK: &str = "a `missed = \"skip\"` slot past its grace asked for admission, was found not \
     due, released the permit without moving the slot on, and asked again at once, forever";
const REGRESSIONS: &[(u64, Config, &str)] = &[
    (1_795_409_836_870_654_251, MONTH, UNSEEN_BATCH),
    (1_289_751_796_630_280_791, CROWDED, UNSEEN_BATCH),
    (1_630_748_350_133_542_914, CRASHY, UNSEEN_BATCH),
    (5_740_063_671_419_317_141, ROOMY, UNSEEN_BATCH),
    (11_312_805_614_398_289_346, CROWDED, JOURNAL_LEFT_OPEN),
    (13_539_522_885_148_993_838, CRASHY, JOURNAL_LEFT_OPEN),
    (2_124_853_161_027_293_313, ROOMY, JOURNAL_LEFT_OPEN),
    (11_820_751_960_778_316_483, CROWDED, SKIP_LIVELOCK),
    (8_287_617_004_094_386_373, CRASHY, SKIP_LIVELOCK),
    (10_706_849_898_482_293_778, ROOMY, SKIP_LIVELOCK),
];

#[test]
fn regressions() {
    for (seed, config, bug) in REGRESSIONS {
        if let Err(f) = run(*seed, config) {
            panic!("a fixed bug is back ({bug}):\n{f}");
        }
    }
}
