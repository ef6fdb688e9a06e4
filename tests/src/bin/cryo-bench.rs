//! `cryo-bench`: measures cryo on this machine and prints the figures.
//!
//! Each scenario starts a real cryod in a private folder (the same harness as
//! the tests), sets the scenario up, measures, prints a table and cleans up.
//! Run it from a release build:
//!
//! ```sh
//! cargo build --release --workspace
//! ./target/release/cryo-bench lateness --wakes 200
//! ./target/release/cryo-bench idle --chambers 1000 --seconds 60
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use cryo_proto::v1 as pb;
use cryo_tests::{Env, wait_until};

#[derive(Parser)]
#[command(name = "cryo-bench")]
struct Cli {
    /// Also print the figures as one JSON object.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Wake lateness: due time to the agent process's own start, over many wakes.
    Lateness {
        #[arg(long, default_value_t = 200)]
        wakes: usize,
        #[arg(long, default_value_t = 20)]
        chambers: usize,
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
        /// The seed system's binaries (`cargo install cryochamber --root DIR`,
        /// then DIR/bin): run the same scenario with one of its daemons per
        /// chamber, side by side.
        #[arg(long, value_name = "DIR")]
        seed: Option<PathBuf>,
    },
    /// Control-plane latency: `cryoctl chamber list --json` and a `cryo-agent`
    /// call, whole process start to exit, and the raw gRPC round trip.
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
        /// agents start together); by default one message at a time, round
        /// robin over the chambers.
        #[arg(long)]
        burst: bool,
        /// The seed system's binaries: the same messages to its chambers
        /// (one daemon each), side by side.
        #[arg(long, value_name = "DIR")]
        seed: Option<PathBuf>,
    },
    /// A burst: every chamber due at the same instant, with a session limit.
    Burst {
        #[arg(long, default_value_t = 1000)]
        chambers: usize,
        #[arg(long, default_value_t = 8)]
        limit: usize,
    },
    /// SIGKILL cryod while sessions run; time until the restarted daemon
    /// serves again, with every chamber loaded and the sessions recovered.
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
    let figures = match cli.scenario {
        Scenario::Lateness { wakes, chambers } => lateness(wakes, chambers),
        Scenario::Idle { chambers, todos, seconds, seed } => {
            let mut f = idle(chambers, todos, seconds);
            if let Some(seed) = seed {
                let s = seed_idle(&seed, chambers, todos, seconds);
                let ratio = |k: &str| {
                    let (a, b) = (f[k].as_f64().unwrap_or(f64::NAN), s[k].as_f64().unwrap_or(f64::NAN));
                    if a > 0.0 { format!("{:.0}x", b / a) } else { "n/a (cryo: 0)".into() }
                };
                println!("\n                       cryo        seed system     seed / cryo");
                for (k, unit) in [("rss_mb", "MB"), ("wakeups_per_minute", "/min"), ("cpu_seconds_per_minute", "s/min")]
                {
                    println!(
                        "  {k:<22} {:>8.2} {unit:<5} {:>10.2} {unit:<5} {}",
                        f[k].as_f64().unwrap_or(0.0),
                        s[k].as_f64().unwrap_or(0.0),
                        ratio(k)
                    );
                }
                for (k, v) in s {
                    f.insert(format!("seed_{k}"), v);
                }
            }
            f
        }
        Scenario::Recovery { chambers, running } => recovery(chambers, running),
        Scenario::Control { chambers, runs } => control(chambers, runs),
        Scenario::Inbox { messages, chambers, burst, seed } => {
            let mut f = inbox(messages, chambers, burst);
            if let Some(seed) = seed {
                let s = seed_inbox(&seed, messages, chambers);
                println!("\n                            cryo        seed system     seed / cryo");
                for k in [
                    "inbox_to_start_p50_ms",
                    "inbox_to_start_p99_ms",
                    "inbox_to_receive_p50_ms",
                    "inbox_to_receive_p99_ms",
                ] {
                    let (a, b) = (f[k].as_f64().unwrap_or(f64::NAN), s[k].as_f64().unwrap_or(f64::NAN));
                    println!("  {k:<26} {a:>8.1} ms   {b:>10.1} ms   {:.1}x", b / a);
                }
                for (k, v) in s {
                    f.insert(format!("seed_{k}"), v);
                }
            }
            f
        }
        Scenario::Burst { chambers, limit } => burst(chambers, limit),
    };
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::Value::Object(figures)).unwrap());
    }
}

type Figures = serde_json::Map<String, serde_json::Value>;

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

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn now_ns() -> i128 {
    #[allow(clippy::disallowed_methods)] // a benchmark measures real time
    let t = std::time::SystemTime::now();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i128
}

fn rfc3339_ns(ns: i128) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let nanos = (ns % 1_000_000_000) as u32;
    chrono::DateTime::from_timestamp(secs, nanos).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Registers (and optionally starts) `n` chambers through the gRPC API.
fn register(env: &Env, n: usize, script: &str, prepare: impl Fn(usize, &Path)) -> Vec<String> {
    let rt = rt();
    rt.block_on(async {
        let channel = cryo_proto::connect(&env.socket()).await.unwrap();
        let mut c = pb::control_client::ControlClient::new(channel);
        let mut names = Vec::new();
        for i in 0..n {
            let name = format!("b{i:05}");
            let dir = env.path(&format!("ch/{name}"));
            c.chamber_init(pb::ChamberInitRequest { dir: dir.to_str().unwrap().into(), agent: "sh agent.sh".into() })
                .await
                .unwrap();
            std::fs::write(dir.join("agent.sh"), script).unwrap();
            std::fs::write(dir.join("cryo.log"), "--- CRYO SESSION 1 | setup ---\n--- CRYO END ---\n").unwrap();
            prepare(i, &dir);
            c.chamber_add(pb::ChamberAddRequest {
                dir: dir.to_str().unwrap().into(),
                name: name.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
            names.push(name);
        }
        names
    })
}

fn start_all(env: &Env, names: &[String]) {
    rt().block_on(async {
        let channel = cryo_proto::connect(&env.socket()).await.unwrap();
        let mut c = pb::control_client::ControlClient::new(channel);
        for n in names {
            let r = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name(n.clone())) };
            c.chamber_start(pb::ChamberStartRequest { chamber: Some(r), no_wait: true }).await.unwrap();
        }
    });
}

fn lateness(wakes: usize, chambers: usize) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {}\n", chambers.max(4)));
    let _d = env.start_daemon();
    let per = wakes.div_ceil(chambers);
    // Wakes of one chamber are 1.5 s apart; chambers are offset from each
    // other so the daemon handles a steady stream, not bursts.
    let spacing_ns: i128 = 1_500_000_000;
    let t0 = now_ns() + 3_000_000_000;
    let mut due: Vec<Vec<i128>> = Vec::new();
    let script = "date +%s%N >> starts.txt\ncryo-agent send ok >/dev/null\ncryo-agent hibernate >/dev/null 2>&1 || cryo-agent hibernate --complete >/dev/null\n";
    let names = register(&env, chambers, script, |i, dir| {
        let offset = spacing_ns * i as i128 / chambers as i128;
        let times: Vec<i128> = (0..per).map(|k| t0 + offset + spacing_ns * k as i128).collect();
        let items: Vec<serde_json::Value> = times
            .iter()
            .enumerate()
            .map(|(k, t)| serde_json::json!({"id": k + 1, "text": format!("wake {k}"), "done": false, "claimed": false, "at": rfc3339_ns(*t)}))
            .collect();
        std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
        let _ = &times;
    });
    for i in 0..chambers {
        let offset = spacing_ns * i as i128 / chambers as i128;
        due.push((0..per).map(|k| t0 + offset + spacing_ns * k as i128).collect());
    }
    start_all(&env, &names);
    let total = per * chambers;
    let dir = |n: &String| env.path(&format!("ch/{n}"));
    let count = || {
        names
            .iter()
            .map(|n| std::fs::read_to_string(dir(n).join("starts.txt")).unwrap_or_default().lines().count())
            .sum::<usize>()
    };
    let deadline = Instant::now() + Duration::from_secs(30) + Duration::from_nanos((spacing_ns as u64) * per as u64);
    while count() < total && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut late = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let starts: Vec<i128> = std::fs::read_to_string(dir(n).join("starts.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if std::env::var_os("CRYO_BENCH_DEBUG").is_some() {
            eprintln!("{n}: starts {starts:?}\n      due {:?}", due[i]);
        }
        for (s, d) in starts.iter().zip(&due[i]) {
            late.push((s - d) as f64 / 1e6);
        }
    }
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (p50, p99, max) = (percentile(&late, 0.5), percentile(&late, 0.99), late.last().copied().unwrap_or(f64::NAN));
    println!("\nscenario: wake lateness (due time to the agent process's first command)");
    println!("  wakes measured   {} of {total} ({chambers} chambers)", late.len());
    println!("  p50              {p50:.1} ms");
    println!("  p99              {p99:.1} ms");
    println!("  max              {max:.1} ms");
    let mut f = Figures::new();
    f.insert("wakes".into(), late.len().into());
    f.insert("lateness_p50_ms".into(), p50.into());
    f.insert("lateness_p99_ms".into(), p99.into());
    f.insert("lateness_max_ms".into(), max.into());
    f
}

/// Context switches (voluntary + involuntary) of every thread of `pid`.
fn context_switches(pid: u32) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for l in status.lines() {
                if l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:") {
                    total += l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                }
            }
        }
    }
    total
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 here).
    (ticks(11) + ticks(12)) / 100.0
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Waits until the daemon answers a chamber list (it has loaded every chamber).
fn wait_serving(env: &Env) {
    rt().block_on(async {
        loop {
            if let Ok(ch) = cryo_proto::connect(&env.socket()).await {
                let mut c = pb::control_client::ControlClient::new(ch);
                if c.chamber_list(pb::ChamberListRequest {}).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
}

fn idle(chambers: usize, todos: usize, seconds: u64) -> Figures {
    let env = Env::new();
    let mut d = env.start_daemon();
    let far = now_ns() + 30 * 86_400 * 1_000_000_000;
    let names = register(&env, chambers, "exit 0\n", |_, dir| {
        let items: Vec<serde_json::Value> = (0..todos)
            .map(|k| {
                let at = rfc3339_ns(far + k as i128 * 3_600_000_000_000);
                serde_json::json!({"id": k + 1, "text": format!("later {k}"), "done": false, "claimed": false, "at": at})
            })
            .collect();
        std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
    });
    start_all(&env, &names);
    // Restart: measure start-up with everything registered.
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let t = Instant::now();
    let d = env.start_daemon();
    wait_serving(&env);
    let startup = t.elapsed();
    let pid = d.pid();
    wait_until("the daemon to settle", || {
        let a = context_switches(pid);
        std::thread::sleep(Duration::from_millis(500));
        context_switches(pid) == a
    });
    let (cs0, cpu0) = (context_switches(pid), cpu_seconds(pid));
    std::thread::sleep(Duration::from_secs(seconds));
    let (cs1, cpu1) = (context_switches(pid), cpu_seconds(pid));
    let per_min = (cs1 - cs0) as f64 * 60.0 / seconds as f64;
    let cpu_per_min = (cpu1 - cpu0) * 60.0 / seconds as f64;
    let rss = rss_mb(pid);
    println!("\nscenario: idle daemon ({chambers} chambers x {todos} TODOs in the future)");
    println!("  start-up to ready    {:.0} ms", startup.as_secs_f64() * 1000.0);
    println!("  resident memory      {rss:.1} MB");
    println!("  wakeups per minute   {per_min:.1} (context switches of all threads over {seconds} s)");
    println!("  CPU per minute       {cpu_per_min:.3} s");
    let mut f = Figures::new();
    f.insert("chambers".into(), chambers.into());
    f.insert("startup_ms".into(), (startup.as_secs_f64() * 1000.0).into());
    f.insert("rss_mb".into(), rss.into());
    f.insert("wakeups_per_minute".into(), per_min.into());
    f.insert("cpu_seconds_per_minute".into(), cpu_per_min.into());
    f
}

fn recovery(chambers: usize, running: usize) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {}\n", running.max(1)));
    let mut d = env.start_daemon();
    let script = "cryo-agent send working >/dev/null\nsleep 300\n";
    let names = register(&env, chambers, script, |i, dir| {
        let at = if i < running { "2000-01-01T00:00:00Z" } else { "2099-01-01T00:00:00Z" };
        std::fs::write(
            dir.join("todo.json"),
            format!(r#"[{{"id":1,"text":"work","done":false,"claimed":false,"at":"{at}"}}]"#),
        )
        .unwrap();
    });
    start_all(&env, &names);
    let running_now = || {
        rt().block_on(async {
            let ch = cryo_proto::connect(&env.socket()).await.unwrap();
            let mut c = pb::control_client::ControlClient::new(ch);
            let list = c.chamber_list(pb::ChamberListRequest {}).await.unwrap().into_inner();
            list.chambers.iter().filter(|c| c.state == pb::ChamberState::Running as i32).count()
        })
    };
    wait_until("the sessions to run", || running_now() == running);
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let t = Instant::now();
    let _d = env.start_daemon();
    wait_serving(&env);
    let ready = t.elapsed();
    let interrupted = names
        .iter()
        .take(running)
        .filter(|n| {
            std::fs::read_to_string(env.path(&format!("ch/{n}/cryo.log"))).unwrap_or_default().contains("interrupted")
        })
        .count();
    println!("\nscenario: recovery (SIGKILL with {running} sessions running, {chambers} chambers)");
    println!("  restart to serving   {:.0} ms", ready.as_secs_f64() * 1000.0);
    println!("  sessions recovered   {interrupted} of {running} (agents ended, TODOs re-queued, mail answered)");
    let mut f = Figures::new();
    f.insert("chambers".into(), chambers.into());
    f.insert("recovery_ms".into(), (ready.as_secs_f64() * 1000.0).into());
    f.insert("recovered".into(), interrupted.into());
    f
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

fn control(chambers: usize, runs: usize) -> Figures {
    let env = Env::new();
    let _d = env.start_daemon();
    // One chamber's agent times its own `cryo-agent todo list` calls.
    let script = format!(
        "i=0\nwhile [ $i -lt {runs} ]; do a=$(date +%s%N); cryo-agent todo list >/dev/null; b=$(date +%s%N); echo $((b - a)) >> calls.txt; i=$((i + 1)); done\ncryo-agent send done >/dev/null\ncryo-agent hibernate --complete\n"
    );
    let names = register(&env, chambers, &script, |_, _| {});
    wait_serving(&env);
    // cryoctl chamber list --json, whole process.
    let mut list = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out = env.command(cryo_tests::bin("cryoctl")).args(["chamber", "list", "--json"]).output().unwrap();
        list.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success());
    }
    // A simple cryoctl call on one chamber.
    let mut status = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out =
            env.command(cryo_tests::bin("cryoctl")).args(["chamber", "status", &names[0], "--json"]).output().unwrap();
        status.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success());
    }
    // cryo-agent inside a real session.
    start_all(&env, &names[..1]);
    rt().block_on(async {
        let ch = cryo_proto::connect(&env.socket()).await.unwrap();
        let mut c = pb::control_client::ControlClient::new(ch);
        let r = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name(names[0].clone())) };
        c.chamber_wake(pb::ChamberWakeRequest { chamber: Some(r), ..Default::default() }).await.unwrap();
    });
    let calls = env.path(&format!("ch/{}/calls.txt", names[0]));
    wait_until("the agent's calls", || std::fs::read_to_string(&calls).unwrap_or_default().lines().count() >= runs);
    let agent: Vec<f64> = std::fs::read_to_string(&calls)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(|ns| ns / 1e6)
        .collect();
    // The raw gRPC round trip (Hello on an open channel).
    let rtt = rt().block_on(async {
        let ch = cryo_proto::connect(&env.socket()).await.unwrap();
        let mut c = pb::control_client::ControlClient::new(ch);
        let mut v = Vec::new();
        for _ in 0..1000 {
            let t = Instant::now();
            c.hello(pb::HelloRequest {
                client: "bench".into(),
                protocol: cryo_proto::PROTOCOL_VERSION,
                version: String::new(),
            })
            .await
            .unwrap();
            v.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        v
    });
    let (l50, l99) = stats(list);
    let (s50, s99) = stats(status);
    let (a50, a99) = stats(agent);
    let (r50, r99) = stats(rtt);
    println!("\nscenario: control plane ({chambers} chambers, {runs} runs each)");
    println!("  cryoctl chamber list --json    median {l50:.1} ms, p99 {l99:.1} ms (process start to exit)");
    println!("  cryoctl chamber status NAME    median {s50:.1} ms, p99 {s99:.1} ms");
    println!("  cryo-agent todo list           median {a50:.1} ms, p99 {a99:.1} ms (inside a session)");
    println!("  gRPC round trip (Hello)        median {r50:.3} ms, p99 {r99:.3} ms (1000 calls, open channel)");
    let mut f = Figures::new();
    f.insert("list_json_median_ms".into(), l50.into());
    f.insert("list_json_p99_ms".into(), l99.into());
    f.insert("status_median_ms".into(), s50.into());
    f.insert("agent_call_median_ms".into(), a50.into());
    f.insert("agent_call_p99_ms".into(), a99.into());
    f.insert("grpc_rtt_median_ms".into(), r50.into());
    f
}

fn inbox(messages: usize, chambers: usize, burst: bool) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {}\n", chambers.max(4)));
    let _d = env.start_daemon();
    let script = "date +%s%N >> starts.txt\ncryo-agent receive >/dev/null\ndate +%s%N >> received.txt\ncryo-agent send ok >/dev/null\ncryo-agent hibernate --complete >/dev/null\n";
    let names = register(&env, chambers, script, |_, _| {});
    start_all(&env, &names);
    let per = messages.div_ceil(chambers);
    let dirs: Vec<PathBuf> = names.iter().map(|n| env.path(&format!("ch/{n}"))).collect();
    let count = |d: &PathBuf, f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default().lines().count();
    let mut written: Vec<Vec<i128>> = vec![Vec::new(); chambers];
    let tail = |d: &PathBuf| {
        let log = std::fs::read_to_string(d.join("cryo.log")).unwrap_or_default();
        let agent = std::fs::read_to_string(d.join("cryo-agent.log")).unwrap_or_default();
        let a: Vec<&str> = agent.lines().rev().take(8).collect();
        format!(
            "{}\n--- agent log ---\n{}",
            log.lines().rev().take(24).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n"),
            a.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    };
    // Waits until chamber `d` received its message `k` and its session ended.
    let settle = |d: &PathBuf, k: usize| {
        let start = Instant::now();
        while count(d, "received.txt") <= k {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "message {k} to {} not received:\n{}",
                d.display(),
                tail(d)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        wait_until("the session to end", || {
            std::fs::read_to_string(d.join("cryo.log")).unwrap_or_default().matches("--- CRYO END ---").count() > k + 1
        });
    };
    let write = |d: &PathBuf, k: usize| -> i128 {
        let name = format!("{k:06}-bench.md");
        let tmp = d.join("messages/inbox").join(format!(".{name}"));
        std::fs::write(&tmp, format!("---\nfrom: bench\nsubject: m{k}\n---\n\nmessage {k}\n")).unwrap();
        let at = now_ns();
        std::fs::rename(&tmp, d.join("messages/inbox").join(&name)).unwrap();
        at
    };
    for k in 0..per {
        if burst {
            // One message to every chamber at once, then wait for them all.
            for (i, d) in dirs.iter().enumerate() {
                written[i].push(write(d, k));
            }
            for d in &dirs {
                settle(d, k);
            }
        } else {
            // One message at a time, round robin.
            for (i, d) in dirs.iter().enumerate() {
                written[i].push(write(d, k));
                settle(d, k);
            }
        }
    }
    let how = if burst { "all chambers at once each round" } else { "one at a time" };
    println!("\nscenario: inbox latency ({} messages over {chambers} chambers, {how})", per * chambers);
    inbox_figures(&dirs, &written, 0)
}

/// Inbox latencies from what the agents recorded (`starts.txt`,
/// `received.txt`: one nanosecond time per line, the first `skip` lines
/// not for a message) against when each message was written; printed and
/// returned.
fn inbox_figures(dirs: &[PathBuf], written: &[Vec<i128>], skip: usize) -> Figures {
    let (mut start, mut recv) = (Vec::new(), Vec::new());
    for (i, d) in dirs.iter().enumerate() {
        let read = |f: &str| -> Vec<i128> {
            std::fs::read_to_string(d.join(f))
                .unwrap_or_default()
                .lines()
                .skip(skip)
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        };
        for (w, s) in written[i].iter().zip(read("starts.txt")) {
            start.push((s - w) as f64 / 1e6);
        }
        for (w, r) in written[i].iter().zip(read("received.txt")) {
            recv.push((r - w) as f64 / 1e6);
        }
    }
    let (s50, s99) = stats(start);
    let (r50, r99) = stats(recv);
    println!("  written -> agent process started    p50 {s50:.1} ms, p99 {s99:.1} ms");
    println!("  written -> receive returned it      p50 {r50:.1} ms, p99 {r99:.1} ms");
    let mut f = Figures::new();
    f.insert("inbox_to_start_p50_ms".into(), s50.into());
    f.insert("inbox_to_start_p99_ms".into(), s99.into());
    f.insert("inbox_to_receive_p50_ms".into(), r50.into());
    f.insert("inbox_to_receive_p99_ms".into(), r99.into());
    f
}

fn burst(chambers: usize, limit: usize) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {limit}\n"));
    let mut d = env.start_daemon();
    let script = "date +%s%N >> runs.txt\ncryo-agent send ok >/dev/null\ncryo-agent todo add later --at +1d >/dev/null\ndate +%s%N >> ends.txt\ncryo-agent hibernate >/dev/null\n";
    let due = rfc3339_ns(now_ns() + 600_000_000_000);
    let names = register(&env, chambers, script, |_, dir| {
        std::fs::write(
            dir.join("todo.json"),
            format!(r#"[{{"id":1,"text":"burst","done":false,"claimed":false,"at":"{due}"}}]"#),
        )
        .unwrap();
    });
    start_all(&env, &names);
    // Everything is due in 10 minutes; stop the daemon, move every TODO to
    // the same instant just past, and start it again: all due at once.
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let instant = rfc3339_ns(now_ns() - 1_000_000_000);
    for n in &names {
        let dir = env.path(&format!("ch/{n}"));
        std::fs::write(
            dir.join("todo.json"),
            format!(r#"[{{"id":1,"text":"burst","done":false,"claimed":false,"at":"{instant}"}}]"#),
        )
        .unwrap();
    }
    let t = Instant::now();
    let _d = env.start_daemon();
    let dirs: Vec<PathBuf> = names.iter().map(|n| env.path(&format!("ch/{n}"))).collect();
    wait_until("every chamber to run", || dirs.iter().all(|d| d.join("ends.txt").exists()));
    let took = t.elapsed();
    let mut edges = Vec::new();
    let mut twice = 0;
    for d in &dirs {
        let runs: Vec<i128> =
            std::fs::read_to_string(d.join("runs.txt")).unwrap().lines().filter_map(|l| l.parse().ok()).collect();
        let ends: Vec<i128> =
            std::fs::read_to_string(d.join("ends.txt")).unwrap().lines().filter_map(|l| l.parse().ok()).collect();
        if runs.len() > 1 {
            twice += 1;
        }
        for (s, e) in runs.iter().zip(&ends) {
            edges.push((*s, 1));
            edges.push((*e, -1));
        }
    }
    edges.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, x) in edges {
        cur += x;
        max = max.max(cur);
    }
    println!("\nscenario: burst ({chambers} chambers due at once, max_concurrent_sessions {limit})");
    println!("  all ran in               {:.1} s (from the restart)", took.as_secs_f64());
    println!("  chambers that ran twice  {twice}");
    println!("  most at once             {max} (limit {limit})");
    let mut f = Figures::new();
    f.insert("burst_seconds".into(), took.as_secs_f64().into());
    f.insert("ran_twice".into(), twice.into());
    f.insert("max_concurrent".into(), max.into());
    f
}

/// Chambers of the seed system (installed with `cargo install cryochamber
/// --root DIR`, a measuring aid only): one `cryo` daemon each, in a private
/// HOME, started with the seed's own `cryo init` and `cryo start`.
struct Seed {
    bin: PathBuf,
    root: tempfile::TempDir,
    dirs: Vec<PathBuf>,
}

impl Seed {
    fn new(bin: &Path) -> Seed {
        let root = tempfile::Builder::new().prefix("cyseed").tempdir_in("/tmp").unwrap();
        std::fs::create_dir_all(root.path().join("home")).unwrap();
        Seed { bin: bin.to_path_buf(), root, dirs: Vec::new() }
    }

    fn cmd(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        std::process::Command::new(self.bin.join("cryo"))
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("HOME", self.root.path().join("home"))
            .env("XDG_RUNTIME_DIR", self.root.path().join("run"))
            .env("XDG_STATE_HOME", self.root.path().join("state"))
            .env("XDG_CONFIG_HOME", self.root.path().join("config"))
            .env("CRYO_NO_SERVICE", "1")
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    /// Makes `n` chambers whose agent runs `script` and whose `todo.json`
    /// holds `todos` TODOs far in the future, and starts them.
    fn chambers(&mut self, n: usize, script: &str, todos: usize) {
        for i in 0..n {
            let dir = self.root.path().join(format!("c{i:05}"));
            std::fs::create_dir_all(&dir).unwrap();
            self.cmd(&dir, &["init", "--agent", "sh agent.sh"]);
            std::fs::write(dir.join("agent.sh"), script).unwrap();
            let items: Vec<serde_json::Value> = (0..todos)
                .map(|k| serde_json::json!({"id": k + 1, "text": format!("later {k}"), "done": false, "claimed": false, "at": format!("2099-01-{:02}T{:02}:00", 1 + k % 28, k % 24), "created": "2026-01-01T00:00"}))
                .collect();
            std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
            self.cmd(&dir, &["start"]);
            self.dirs.push(dir);
        }
    }

    /// Every process running the seed's `cryo` binary.
    fn pids(&self) -> Vec<u32> {
        let exe = std::fs::canonicalize(self.bin.join("cryo")).unwrap();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe))
            .collect()
    }
}

impl Drop for Seed {
    /// Kills its daemons (its own `cryo cancel` takes seconds each, too slow
    /// for a thousand); their state lives in the temporary folder.
    fn drop(&mut self) {
        for p in self.pids() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// The seed system at rest: one `cryo` daemon per chamber.
fn seed_idle(bin: &Path, chambers: usize, todos: usize, seconds: u64) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, "cryo-agent send hi\ncryo-agent hibernate\n", todos);
    let dirs = seed.dirs.clone();
    let pids = || seed.pids();
    wait_until("the seed daemons to hibernate", || {
        dirs.iter().all(|d| std::fs::read_to_string(d.join("cryo.log")).unwrap_or_default().contains("hibernate"))
            && pids().len() >= chambers
    });
    std::thread::sleep(Duration::from_secs(2));
    let ps = pids();
    let cs = |ps: &[u32]| ps.iter().map(|p| context_switches(*p)).sum::<u64>();
    let cpu = |ps: &[u32]| ps.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let (cs0, cpu0) = (cs(&ps), cpu(&ps));
    std::thread::sleep(Duration::from_secs(seconds));
    let (cs1, cpu1) = (cs(&ps), cpu(&ps));
    let rss: f64 = ps.iter().map(|p| rss_mb(*p)).sum();
    let per_min = (cs1 - cs0) as f64 * 60.0 / seconds as f64;
    println!("\nseed system: {} daemons for {chambers} chambers x {todos} TODOs", ps.len());
    println!("  resident memory      {rss:.1} MB (sum)");
    println!("  wakeups per minute   {per_min:.1}");
    println!("  CPU per minute       {:.3} s", (cpu1 - cpu0) * 60.0 / seconds as f64);
    let mut f = Figures::new();
    f.insert("daemons".into(), ps.len().into());
    f.insert("rss_mb".into(), rss.into());
    f.insert("wakeups_per_minute".into(), per_min.into());
    f.insert("cpu_seconds_per_minute".into(), ((cpu1 - cpu0) * 60.0 / seconds as f64).into());
    f
}

/// The inbox scenario on the seed system: the same agent script and the same
/// messages, one at a time, round robin over its chambers.
fn seed_inbox(bin: &Path, messages: usize, chambers: usize) -> Figures {
    let mut seed = Seed::new(bin);
    // Its hibernate lingers 300 s by default; 0 ends the session at once.
    let script = "date +%s%N >> starts.txt\ncryo-agent receive >/dev/null\ndate +%s%N >> received.txt\ncryo-agent send ok >/dev/null\ncryo-agent hibernate --linger 0 >/dev/null\ndate +%s%N >> ends.txt\n";
    seed.chambers(chambers, script, 1);
    let count = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default().lines().count();
    // The first session runs at `cryo start`.
    for d in &seed.dirs {
        wait_until("the seed's first session", || count(d, "ends.txt") >= 1);
    }
    let per = messages.div_ceil(chambers);
    let mut written: Vec<Vec<i128>> = vec![Vec::new(); chambers];
    for k in 0..per {
        for (i, d) in seed.dirs.iter().enumerate() {
            let name = format!("{k:06}-bench.md");
            let tmp = d.join("messages/inbox").join(format!(".{name}"));
            std::fs::write(&tmp, format!("---\nfrom: bench\nsubject: m{k}\n---\n\nmessage {k}\n")).unwrap();
            written[i].push(now_ns());
            std::fs::rename(&tmp, d.join("messages/inbox").join(&name)).unwrap();
            wait_until("the seed to answer", || count(d, "ends.txt") >= k + 2);
        }
    }
    println!(
        "\nseed system: inbox latency ({} messages over {chambers} chambers, one daemon each, one at a time)",
        per * chambers
    );
    // The first line of each file is the session `cryo start` ran.
    inbox_figures(&seed.dirs, &written, 1)
}
