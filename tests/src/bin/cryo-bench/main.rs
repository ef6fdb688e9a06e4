//! `cryo-bench`: measures cryo on this machine and prints the figures, side
//! by side with the seed system (one daemon per chamber) when given its
//! binaries.
//!
//! Each scenario starts a real cryod in a private folder (the same harness as
//! the tests), sets the scenario up, measures, prints a table and cleans up.
//! Run it from a release build:
//!
//! ```sh
//! cargo build --release --workspace
//! ./target/release/cryo-bench lateness --wakes 1000 --chambers 100
//! ./target/release/cryo-bench idle --chambers 1000 --seconds 60 --seed /tmp/seed/bin
//! CRYO_BENCH_SANDBOX=landlock ./target/release/cryo-bench lateness   # chambers under a sandbox
//! ```

mod cryo;
mod fleet;
mod gateway;
mod git;
mod hub;
mod measure;
mod scale;
mod scripts;
mod seed;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use measure::{Figures, side_by_side};

#[derive(Parser)]
#[command(name = "cryo-bench")]
struct Cli {
    /// Also print the figures as one JSON object.
    #[arg(long, global = true)]
    json: bool,
    /// The seed system's binaries (`cargo install cryochamber --root DIR`,
    /// then DIR/bin): run the same scenario on it too, with one of its
    /// daemons per chamber, and print both side by side with their ratio.
    #[arg(long, global = true, value_name = "DIR")]
    seed: Option<PathBuf>,
    /// Keep N processes spinning on the CPU for the whole run (a loaded
    /// machine; both systems see the same load).
    #[arg(long, global = true, value_name = "N", default_value_t = 0)]
    load: usize,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// The provider gateway's added latency per request, its throughput
    /// with concurrent streams, and its memory per open stream (cryo only).
    Gateway {
        #[arg(long, default_value_t = 2000)]
        requests: usize,
        #[arg(long, default_value_t = 16)]
        streams: usize,
        /// MiB each stream carries.
        #[arg(long, default_value_t = 16)]
        mib: usize,
        #[arg(long, default_value_t = 500)]
        open: usize,
    },
    /// Wake lateness: due time to the agent process's own start, over many
    /// wakes at whole seconds, spread evenly over `--spread` seconds.
    Lateness {
        #[arg(long, default_value_t = 1000)]
        wakes: usize,
        #[arg(long, default_value_t = 100)]
        chambers: usize,
        /// Seconds the wakes are spread over.
        #[arg(long, default_value_t = 200)]
        spread: u64,
        /// Keep the store on a fresh PostgreSQL (one fleet node) instead
        /// of the SQLite file (cryo only).
        #[arg(long)]
        postgres: bool,
    },
    /// A fleet on one fresh PostgreSQL: statements per idle node per second
    /// (the heartbeat's cost) and per wake, and the wakes' lateness (cryo
    /// only; the seed system has no fleet).
    Fleet {
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        #[arg(long, default_value_t = 100)]
        chambers: usize,
        /// Seconds the fleet is measured at rest.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        #[arg(long, default_value_t = 300)]
        wakes: usize,
        #[arg(long, default_value_t = 30)]
        spread: u64,
        /// The lease's heartbeat and time to live (cryod's defaults).
        #[arg(long, default_value_t = 5000)]
        heartbeat_ms: u64,
        #[arg(long, default_value_t = 30000)]
        lease_ms: u64,
    },
    /// An idle daemon with many chambers and TODOs: memory, start-up, and how
    /// often it wakes (context switches of all its threads).
    Idle {
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        #[arg(long, default_value_t = 100)]
        todos: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Restarts timed (each printed, the median reported as start-up).
        #[arg(long, default_value_t = 1)]
        restarts: usize,
    },
    /// The hub's first paint in headless Chromium and its page weight,
    /// plain and gzipped, at many chambers.
    Paint {
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        #[arg(long, default_value_t = 9)]
        runs: usize,
    },
    /// Control-plane latency: listing the chambers, one chamber's status and
    /// a `cryo-agent` call, whole process start to exit, and the raw round
    /// trip on the socket.
    Control {
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Inbox latency: a message written into an inbox, until the agent process
    /// starts and until its `receive` returns the message.
    Inbox {
        #[arg(long, default_value_t = 500)]
        messages: usize,
        #[arg(long, default_value_t = 10)]
        chambers: usize,
        /// Write one message to every chamber at once, each round (many
        /// agents start together; cryo only); by default one message at a
        /// time, round robin over the chambers.
        #[arg(long)]
        burst: bool,
    },
    /// A mail storm: `--messages` messages written into each chamber's
    /// inbox at once, each session working `--work-ms`, at cryod's default
    /// settings (its session limit derived from the machine).
    Storm {
        #[arg(long, default_value_t = 100)]
        chambers: usize,
        /// Messages to each chamber.
        #[arg(long, default_value_t = 10)]
        messages: usize,
        /// Milliseconds of work in each session.
        #[arg(long, default_value_t = 1000)]
        work_ms: u64,
    },
    /// A burst: every chamber due at the same instant, with a session limit
    /// (the seed system has none).
    Burst {
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        #[arg(long, default_value_t = 8)]
        limit: usize,
    },
    /// Years at constant cost (issue 41): the same measures on an empty
    /// store and on an aged one (a ledger of `--sessions` sessions, a
    /// chamber with `--done-todos` done TODOs and `--messages` archived
    /// messages), side by side with their ratio; the seed system on the
    /// aged chamber too, where it can do the same.
    History {
        /// Ended sessions in the aged ledger, spread over the chambers.
        #[arg(long, default_value_t = 1_000_000)]
        sessions: usize,
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        /// Done TODOs in the measured chamber's todo.json.
        #[arg(long, default_value_t = 50_000)]
        done_todos: usize,
        /// Archived inbox messages in the measured chamber.
        #[arg(long, default_value_t = 100_000)]
        messages: usize,
        /// Wakes of the measured chamber, each a session with the agent's calls.
        #[arg(long, default_value_t = 20)]
        wakes: usize,
        /// Seconds between two wakes.
        #[arg(long, default_value_t = 2)]
        every: u64,
        /// Runs of each operator command.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Starts of the daemon (start-up is measured at each).
        #[arg(long, default_value_t = 5)]
        starts: usize,
    },
    /// What a [git] chamber's worktree preparation adds to a wake, on a
    /// repository of `--files` files (cryo only).
    Git {
        #[arg(long, default_value_t = 10_000)]
        files: usize,
        #[arg(long, default_value_t = 15)]
        wakes: usize,
        /// A fresh worktree each session (`mode = "session"`).
        #[arg(long)]
        session: bool,
    },
    /// How costs grow with the chambers on one node: one world grown
    /// through `--sizes`, and at each size cryod restarted warm and cold
    /// (the page cache dropped, where allowed) and measured at rest:
    /// memory, start-up, the list, a status and a wake's lateness. With
    /// `--seed`, the seed system's memory, start-up, list and status beside
    /// cryo's at the largest size it can run (at most 1,000 daemons).
    Scale {
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        sizes: Vec<usize>,
        #[arg(long, default_value_t = 100)]
        todos: usize,
        /// Restarts at each size, warm and cold each (medians reported),
        /// and runs of each command.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Warm start-ups only: the page cache is left alone (dropping it
        /// slows everything else on the machine; the tests run this).
        #[arg(long)]
        warm_only: bool,
    },
    /// SIGKILL the daemon(s) while sessions run; time until the restarted
    /// daemon serves again, with every chamber loaded and the sessions
    /// recovered.
    Recovery {
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        #[arg(long, default_value_t = 8)]
        running: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    machine();
    let _load = Load::start(cli.load);
    let seed = cli.seed.as_deref();
    if let Some(dir) = seed {
        let version = std::process::Command::new(dir.join("cryo")).arg("--version").output();
        let version = version.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        println!("seed system: {} ({})", version.unwrap_or_else(|e| format!("not runnable: {e}")), dir.display());
    }
    let (mut figures, seed_figures, rows): (Figures, Option<Figures>, &[(&str, &str)]) = match cli.scenario {
        Scenario::Lateness { wakes, chambers, spread, postgres } => (
            cryo::lateness(wakes, chambers, spread, postgres),
            seed.map(|s| seed::lateness(s, wakes, chambers, spread)),
            &[("lateness_p50_ms", "ms"), ("lateness_p99_ms", "ms"), ("lateness_max_ms", "ms")],
        ),
        Scenario::Fleet { nodes, chambers, seconds, wakes, spread, heartbeat_ms, lease_ms } => {
            if seed.is_some() {
                eprintln!("cryo-bench: the seed system has no fleet; run `fleet` without --seed");
                std::process::exit(2);
            }
            (fleet::fleet(nodes, chambers, seconds, wakes, spread, (heartbeat_ms, lease_ms)), None, &[])
        }
        Scenario::Gateway { requests, streams, mib, open } => {
            if seed.is_some() {
                eprintln!("cryo-bench: the seed system has no gateway; run `gateway` without --seed");
                std::process::exit(2);
            }
            (gateway::gateway(requests, streams, mib, open), None, &[])
        }
        Scenario::Idle { chambers, todos, seconds, restarts } => (
            cryo::idle(chambers, todos, seconds, restarts),
            seed.map(|s| seed::idle(s, chambers, todos, seconds)),
            &[("rss_mb", "MB"), ("startup_ms", "ms"), ("wakeups_per_minute", "/min"), ("cpu_seconds_per_minute", "s")],
        ),
        Scenario::Paint { chambers, runs } => (hub::paint(chambers, runs), None, &[]),
        Scenario::Control { chambers, runs } => (
            cryo::control(chambers, runs),
            seed.map(|s| seed::control(s, chambers, runs)),
            &[
                ("list_median_ms", "ms"),
                ("list_p99_ms", "ms"),
                ("status_median_ms", "ms"),
                ("agent_call_median_ms", "ms"),
                ("agent_call_p99_ms", "ms"),
                ("rtt_connect_median_ms", "ms"),
            ],
        ),
        Scenario::Inbox { messages, chambers, burst } => {
            if burst && seed.is_some() {
                eprintln!("cryo-bench: --burst is measured on cryo only; run the seed side by side without it");
                std::process::exit(2);
            }
            (
                cryo::inbox(messages, chambers, burst),
                seed.map(|s| seed::inbox(s, messages, chambers)),
                &[
                    ("inbox_to_start_p50_ms", "ms"),
                    ("inbox_to_start_p99_ms", "ms"),
                    ("inbox_to_receive_p50_ms", "ms"),
                    ("inbox_to_receive_p99_ms", "ms"),
                ],
            )
        }
        Scenario::Git { files, wakes, session } => {
            if seed.is_some() {
                eprintln!("cryo-bench: the seed system has no git; run `git` without --seed");
                std::process::exit(2);
            }
            (git::git(files, wakes, session), None, &[])
        }
        Scenario::Storm { chambers, messages, work_ms } => (
            cryo::storm(chambers, messages, work_ms),
            seed.map(|s| seed::storm(s, chambers, messages, work_ms)),
            &[("storm_seconds", "s"), ("sessions", ""), ("max_concurrent", "")],
        ),
        Scenario::Burst { chambers, limit } => (
            cryo::burst(chambers, limit),
            seed.map(|s| seed::burst(s, chambers)),
            &[("burst_seconds", "s"), ("max_concurrent", ""), ("ran_twice", ""), ("never_ran", "")],
        ),
        Scenario::History { sessions, chambers, done_todos, messages, wakes, every, runs, starts } => {
            let a = measure::Aging { sessions, chambers, done_todos, messages, wakes, every, runs, starts };
            let empty = cryo::history(&a, false);
            let aged = cryo::history(&a, true);
            let seed = seed.map(|s| seed::history(s, &a));
            let f = measure::aged_side_by_side(empty, aged, seed);
            if cli.json {
                println!("{}", serde_json::to_string_pretty(&serde_json::Value::Object(f)).unwrap());
            }
            return;
        }
        Scenario::Scale { sizes, todos, runs, warm_only } => {
            let (f, seed) = scale::with_seed(&sizes, todos, runs, !warm_only, seed);
            (f, seed, &[("rss_mb", "MB"), ("startup_ms", "ms"), ("list_median_ms", "ms"), ("status_median_ms", "ms")])
        }
        Scenario::Recovery { chambers, running } => (
            cryo::recovery(chambers, running),
            seed.map(|s| seed::recovery(s, chambers, running)),
            &[("recovery_ms", "ms"), ("rerun", ""), ("survivors", "")],
        ),
    };
    if let Some(s) = seed_figures {
        side_by_side(&mut figures, s, rows);
    }
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::Value::Object(figures)).unwrap());
    }
}

fn machine() {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string()))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!("machine: {cores} cores, {mem} memory; build: {profile}");
}

/// CPU hogs running beside the scenario; ended when dropped.
struct Load(Vec<std::process::Child>);

impl Load {
    fn start(n: usize) -> Load {
        if n > 0 {
            println!("background load: {n} processes spinning on the CPU");
        }
        // Each spins while the bench lives (even if it exits without drop).
        let script = format!("while kill -0 {} 2>/dev/null; do :; done", std::process::id());
        let spin = || std::process::Command::new("sh").args(["-c", &script]).spawn().expect("starting a CPU hog");
        Load((0..n).map(|_| spin()).collect())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
