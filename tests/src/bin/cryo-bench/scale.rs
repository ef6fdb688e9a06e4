//! `scale`: how cryo's costs grow with the chambers on one node. One world
//! is grown through the sizes asked (1,000, then 10,000, then 100,000), and
//! at each size cryod is restarted, warm and cold, and measured at rest:
//! resident memory, start-up, the list, one chamber's status, and a wake's
//! lateness on a chamber that keeps waking among them.

use std::path::Path;
use std::time::{Duration, Instant};

use cryo_tests::{Daemon, Env, wait_until_within};

use crate::cryo::{cryoctl_times, dirs, register_range, start_all, write_todos};
use crate::measure::*;
use crate::scripts;

/// The probe's number: its name (`b9999999`) sorts after every other.
const PROBE: usize = 9_999_999;
/// Wakes of the probe at each size (two seconds apart).
const WAKES: usize = 5;

/// The most chambers the seed system is run with (one daemon each).
const SEED_AT_MOST: usize = 1000;

/// [`scale`], and with the seed system's binaries in `seed`, its memory,
/// start-up, list and status at the largest size it can run, with cryo's
/// figures at that size under the same keys (for `side_by_side`).
pub fn with_seed(
    sizes: &[usize],
    todos: usize,
    runs: usize,
    drop_caches: bool,
    seed: Option<&Path>,
) -> (Figures, Option<Figures>) {
    let mut f = scale(sizes, todos, runs, drop_caches);
    let at = sizes.iter().copied().filter(|n| *n <= SEED_AT_MOST).max();
    let seed = seed.zip(at).map(|(s, n)| {
        let mut both = crate::seed::idle(s, n, todos, 5);
        both.extend(crate::seed::control(s, n, runs));
        for (k, key) in [("rss_mb", "rss_mb"), ("startup_warm_ms", "startup_ms")] {
            f.insert(key.into(), f[&format!("{k}_{n}")].clone());
        }
        for key in ["list_median_ms", "status_median_ms"] {
            f.insert(key.into(), f[&format!("{key}_{n}")].clone());
        }
        println!("\nthe seed system beside cryo at {n} chambers:");
        both
    });
    (f, seed)
}

/// One size's figures.
struct Row {
    size: usize,
    rss_mb: f64,
    anon_mb: f64,
    warm_ms: f64,
    warm_first_ms: f64,
    cold_ms: Option<f64>,
    cold_first_ms: Option<f64>,
    cpu_s: f64,
    list_ms: f64,
    status_ms: f64,
    late_ms: f64,
}

pub fn scale(sizes: &[usize], todos: usize, runs: usize, drop_caches: bool) -> Figures {
    let env = Env::new();
    let mut d = env.start_daemon();
    let watches = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches").unwrap_or_default();
    println!("inotify watches allowed: {}", watches.trim());
    let probe = register_range(&env, PROBE..PROBE + 1, scripts::LATENESS, |_, _| {});
    let probe_dir = dirs(&env, &probe).remove(0);
    start_all(&env, &probe);
    let far = now_ns() + 30 * 86_400 * 1_000_000_000;
    let at: Vec<String> = (0..todos).map(|k| rfc3339_ns(far + k as i128 * 3_600_000_000_000)).collect();
    let (mut have, mut rows) = (0, Vec::new());
    for &size in sizes {
        let t = Instant::now();
        let names = register_range(&env, have..size.max(have), "exit 0\n", |_, dir| write_todos(dir, &at));
        start_all(&env, &names);
        println!("\n{size} chambers ({} added in {:.1} s)", size - have, t.elapsed().as_secs_f64());
        have = size.max(have);
        after_the_wave(&env, &d, have + 1);
        let (warm, cold);
        (d, warm) = restarts(&env, d, have + 1, runs, false);
        (d, cold) = if drop_caches { restarts(&env, d, have + 1, runs, true) } else { (d, None) };
        let warm = warm.expect("a warm start-up is always measured");
        let pid = d.pid();
        let rss_mb = settled_rss(&[pid]);
        let anon_mb = status_kb(pid, "RssAnon:") / 1024.0;
        let list = cryoctl_times(&env, runs, &["chamber", "list", "--json"]);
        let status = cryoctl_times(&env, runs, &["chamber", "status", "b00000"]);
        let late = probe_wakes(&probe_dir, rows.len() * (WAKES + 1));
        let row = Row {
            size,
            rss_mb,
            anon_mb,
            warm_ms: warm.0,
            warm_first_ms: warm.1,
            cold_ms: cold.map(|c| c.0),
            cold_first_ms: cold.map(|c| c.1),
            cpu_s: warm.2,
            list_ms: stats(list).0,
            status_ms: stats(status).0,
            late_ms: late,
        };
        print_row(&row);
        rows.push(row);
    }
    drop(d);
    let f = growth(&rows);
    crate::cryo::keep_if_asked(env);
    f
}

/// The starts just made thawed every new chamber at once: prints cryod's
/// memory once every chamber is frozen again and its heaps were trimmed
/// after the wave (a build that does not trim: 90 s after the last froze).
fn after_the_wave(env: &Env, d: &Daemon, total: usize) {
    const TRIMMED: &str = "the heaps' free pages given back";
    let frozen = || {
        let j = env.cryoctl(&["metrics", "--json"]).json();
        let row = j.as_array().and_then(|a| a.iter().find(|s| s["name"] == "cryo_chambers_frozen").cloned());
        row.and_then(|r| r["value"].as_f64()).unwrap_or(0.0) as usize
    };
    let t = Instant::now();
    wait_until_within(Duration::from_secs(600), "every chamber frozen after the starts", || frozen() >= total);
    let (frozen_after, before) = (t.elapsed(), env.daemon_log().matches(TRIMMED).count());
    let waited = Instant::now();
    while env.daemon_log().matches(TRIMMED).count() == before && waited.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let pid = d.pid();
    println!(
        "  after the starts (every chamber thawed at once), all frozen again in {:.1} s: {:.1} MB RSS ({:.1} MB anonymous)",
        frozen_after.as_secs_f64(),
        rss_mb(pid),
        status_kb(pid, "RssAnon:") / 1024.0
    );
}

/// `runs` restarts of cryod with `total` chambers, the page cache dropped
/// before each when `cold` (if this machine allows it); the medians of the
/// time to every chamber listed and to a first answer, and of its CPU.
fn restarts(env: &Env, mut d: Daemon, total: usize, runs: usize, cold: bool) -> (Daemon, Option<(f64, f64, f64)>) {
    let mut all = Vec::new();
    for _ in 0..runs.max(1) {
        d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
        nix::unistd::sync();
        if cold && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_err() {
            println!("  cold start-up: not measured (the page cache cannot be dropped here: not root)");
            return (env.start_daemon(), None);
        }
        let t = Instant::now();
        d = env.spawn_daemon(&[]);
        let (first, listed) = rt().block_on(timed_start(env, total, t));
        all.push((listed, first, cpu_seconds(d.pid())));
    }
    let median = |f: fn(&(f64, f64, f64)) -> f64| stats(all.iter().map(f).collect()).0;
    let shown: Vec<String> =
        all.iter().map(|(l, f, c)| format!("{l:.0} ms (first answer {f:.0} ms, CPU {c:.2} s)")).collect();
    println!("  {} start-ups: {}", if cold { "cold" } else { "warm" }, shown.join(", "));
    (d, Some((median(|r| r.0), median(|r| r.1), median(|r| r.2))))
}

/// Milliseconds from `t` until the socket first answers one chamber's
/// status (`first`, the middle one of the `total`: cryod boots a chamber
/// asked for before its turn), and until a list holds all `total`. A
/// daemon that stops answering ends the bench with its log's tail.
async fn timed_start(env: &Env, total: usize, t: Instant) -> (f64, f64) {
    use cryo_proto::v1::{ChamberListRequest, ChamberRef, ChamberStatusRequest, chamber_ref::By};
    let ms = || t.elapsed().as_secs_f64() * 1000.0;
    let deadline = Instant::now() + Duration::from_secs(600);
    let name = format!("b{:05}", (total - 1) / 2);
    let (mut first, mut listed, mut c) = (None, None, None);
    loop {
        assert!(Instant::now() < deadline, "cryod never listed its {total} chambers:\n{}", tail(env));
        if c.is_none() {
            c = cryo_proto::control_unchecked(&env.socket()).await.ok();
        }
        if let Some(client) = c.as_mut() {
            let answered = match first {
                None => {
                    let chamber = Some(ChamberRef { by: Some(By::Name(name.clone())) });
                    client.chamber_status(ChamberStatusRequest { chamber }).await.map(|r| {
                        assert_eq!(r.into_inner().chambers[0].name, name, "the status asked for");
                        first = Some(ms());
                    })
                }
                Some(_) => client.chamber_list(ChamberListRequest { archived: false }).await.map(|r| {
                    if r.into_inner().chambers.len() >= total {
                        listed = Some(ms());
                    }
                }),
            };
            if answered.is_err() {
                c = None;
            }
            if let (Some(f), Some(l)) = (first, listed) {
                return (f, l);
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn tail(env: &Env) -> String {
    let log = env.daemon_log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The probe wakes [`WAKES`] times, two seconds apart, among all the others:
/// its median lateness (due to the agent's start), in milliseconds. Its
/// TODOs are numbered after the `done` it did before (an id is never used
/// twice in a chamber: the ledger remembers what each one claimed), and a
/// far one is left after them, so its plan is never complete.
fn probe_wakes(dir: &Path, done: usize) -> f64 {
    let _ = std::fs::remove_file(dir.join("starts.txt"));
    let first = second_after(2);
    let due: Vec<i64> = (0..WAKES as i64).map(|k| first + 2 * k).collect();
    let far = crate::cryo::FAR.to_string();
    let at = due.iter().map(|s| rfc3339_ns(*s as i128 * 1_000_000_000)).chain([far]);
    let items: Vec<serde_json::Value> = at
        .enumerate()
        .map(|(k, at)| serde_json::json!({"id": done + k + 1, "text": format!("probe {k}"), "done": false, "claimed": false, "at": at}))
        .collect();
    std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
    wait_until_within(Duration::from_secs(120), "the probe's wakes", || times(dir, "starts.txt").len() >= WAKES);
    let mut f = Figures::new();
    lateness_p95(&mut f, dir, &due);
    f["lateness_p50_ms"].as_f64().unwrap_or(f64::NAN)
}

fn status_kb(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(key));
    line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

fn print_row(r: &Row) {
    let ms = |v: Option<f64>| v.map(|v| format!("{v:.0} ms")).unwrap_or_else(|| "-".into());
    println!("  resident memory      {:.1} MB ({:.1} MB of it anonymous)", r.rss_mb, r.anon_mb);
    println!(
        "  start-up (median)    warm {:.0} ms (first answer {:.0} ms), cold {} (first answer {}); CPU {:.2} s",
        r.warm_ms,
        r.warm_first_ms,
        ms(r.cold_ms),
        ms(r.cold_first_ms),
        r.cpu_s
    );
    println!("  cryoctl chamber list --json   median {:.1} ms", r.list_ms);
    println!("  cryoctl chamber status NAME   median {:.1} ms", r.status_ms);
    println!("  a wake's lateness    p50 {:.1} ms ({WAKES} wakes of one chamber among them)", r.late_ms);
}

/// The growth table, and every figure keyed by size.
fn growth(rows: &[Row]) -> Figures {
    println!("\ngrowth          RSS MB  anon MB  KB/chamber  warm ms  cold ms  list ms  status ms  late ms");
    let mut f = Figures::new();
    let mut last: Option<&Row> = None;
    for r in rows {
        // What each chamber added since the size before (the daemon's base
        // left out), in anonymous memory: a chamber's own bytes.
        let per = last.map(|l| (r.anon_mb - l.anon_mb) * 1024.0 / (r.size - l.size) as f64);
        let per_shown = per.map(|p| format!("{p:.1}")).unwrap_or_else(|| "-".into());
        let cold = r.cold_ms.map(|c| format!("{c:.0}")).unwrap_or_else(|| "-".into());
        println!(
            "  {:>7}  {:>10.1}  {:>7.1}  {per_shown:>10}  {:>7.0}  {cold:>7}  {:>7.1}  {:>9.1}  {:>7.1}",
            r.size, r.rss_mb, r.anon_mb, r.warm_ms, r.list_ms, r.status_ms, r.late_ms
        );
        let n = r.size;
        for (k, v) in [
            ("rss_mb", Some(r.rss_mb)),
            ("anon_mb", Some(r.anon_mb)),
            ("kb_per_chamber", per),
            ("startup_warm_ms", Some(r.warm_ms)),
            ("first_answer_warm_ms", Some(r.warm_first_ms)),
            ("startup_cold_ms", r.cold_ms),
            ("first_answer_cold_ms", r.cold_first_ms),
            ("startup_cpu_s", Some(r.cpu_s)),
            ("list_median_ms", Some(r.list_ms)),
            ("status_median_ms", Some(r.status_ms)),
            ("lateness_p50_ms", Some(r.late_ms)),
        ] {
            if let Some(v) = v {
                f.insert(format!("{k}_{n}"), v.into());
            }
        }
        last = Some(r);
    }
    f
}
