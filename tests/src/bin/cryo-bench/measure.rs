//! What both systems' scenarios share: clocks, `/proc` readings, percentiles,
//! the wake schedule, and the figures computed from what agents recorded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cryo_tests::wait_until_within;

/// One scenario's figures, by name (printed, and written by `--json`).
pub type Figures = serde_json::Map<String, serde_json::Value>;

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Median and p99.
pub fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

pub fn now_ns() -> i128 {
    #[allow(clippy::disallowed_methods)] // a benchmark measures real time
    let t = std::time::SystemTime::now();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i128
}

pub fn rfc3339_ns(ns: i128) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let nanos = (ns % 1_000_000_000) as u32;
    chrono::DateTime::from_timestamp(secs, nanos).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Context switches (voluntary + involuntary) of each thread of `pid`, by
/// thread id.
pub fn context_switches(pid: u32) -> std::collections::HashMap<u64, u64> {
    let mut threads = std::collections::HashMap::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else { continue };
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let n = status
                .lines()
                .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
            threads.insert(tid, n);
        }
    }
    threads
}

/// The context switches between two readings of [`context_switches`]: each
/// thread's growth, a thread started in between counted whole. A thread that
/// ended in between (tokio's idle blocking threads end after ten seconds)
/// takes its count with it; summing totals instead would go backwards.
pub fn switches_between(
    before: &std::collections::HashMap<u64, u64>,
    after: &std::collections::HashMap<u64, u64>,
) -> u64 {
    after.iter().map(|(tid, n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0))).sum()
}

pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 here).
    (ticks(11) + ticks(12)) / 100.0
}

pub fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Nanosecond times an agent appended to `file`, one per line.
pub fn times(dir: &Path, file: &str) -> Vec<i128> {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// A wake schedule both systems can express: whole seconds (the seed
/// system's TODO times have no fractions). Each chamber gets `per` wakes
/// `spread / per` seconds apart, and the chambers are spread over that gap,
/// so the wakes come at a steady rate over `spread` seconds, with about
/// `chambers * per / spread` due in the same second. Unix seconds.
pub fn schedule(chambers: usize, per: usize, spread: u64, t0: i64) -> Vec<Vec<i64>> {
    let gap = (spread / per.max(1) as u64).max(1) as i64;
    (0..chambers)
        .map(|i| {
            let offset = i as i64 * gap / chambers as i64;
            (0..per as i64).map(|k| t0 + offset + k * gap).collect()
        })
        .collect()
}

/// The first whole second at least `margin` seconds from now.
pub fn second_after(margin: i64) -> i64 {
    (now_ns() / 1_000_000_000) as i64 + margin + 1
}

/// Lateness of each wake: the agent's first command (`starts.txt`) minus
/// the due time; printed and returned.
pub fn lateness_figures(dirs: &[PathBuf], due: &[Vec<i64>]) -> Figures {
    let mut late = Vec::new();
    for (d, due) in dirs.iter().zip(due) {
        let starts = times(d, "starts.txt");
        if std::env::var_os("CRYO_BENCH_DEBUG").is_some() {
            eprintln!("{}: starts {starts:?}\n      due {due:?}", d.display());
        }
        for (s, d) in starts.iter().zip(due) {
            late.push((s - *d as i128 * 1_000_000_000) as f64 / 1e6);
        }
    }
    late.sort_by(|a, b| a.total_cmp(b));
    let total: usize = due.iter().map(Vec::len).sum();
    let (p50, p99, max) = (percentile(&late, 0.5), percentile(&late, 0.99), late.last().copied().unwrap_or(f64::NAN));
    println!("  wakes measured   {} of {total}", late.len());
    println!("  p50              {p50:.1} ms");
    println!("  p99              {p99:.1} ms");
    println!("  max              {max:.1} ms");
    let mut f = Figures::new();
    f.insert("wakes".into(), late.len().into());
    f.insert("lateness_p50_ms".into(), p50.into());
    f.insert("lateness_p99_ms".into(), p99.into());
    f.insert("lateness_max_ms".into(), max.into());
    // Told a head start ahead, cryod must still start no agent early.
    f.insert("lateness_min_ms".into(), late.first().copied().unwrap_or(f64::NAN).into());
    f
}

/// Median and p99 of `samples` (milliseconds): printed as one line after
/// `label` and kept as `KEY_median_ms` and `KEY_p99_ms`.
pub fn timing(f: &mut Figures, key: &str, label: &str, samples: Vec<f64>, note: &str) {
    let (median, p99) = stats(samples);
    let d = if median < 1.0 { 3 } else { 1 };
    println!("  {label:<30} median {median:.d$} ms, p99 {p99:.d$} ms{note}");
    f.insert(format!("{key}_median_ms"), median.into());
    f.insert(format!("{key}_p99_ms"), p99.into());
}

/// Inbox latencies from what the agents recorded (`starts.txt`,
/// `received.txt`: one nanosecond time per line, the first `skip` lines
/// not for a message) against when each message was written; printed and
/// returned.
pub fn inbox_figures(dirs: &[PathBuf], written: &[Vec<i128>], skip: usize) -> Figures {
    let (mut start, mut recv) = (Vec::new(), Vec::new());
    for (d, written) in dirs.iter().zip(written) {
        for (w, s) in written.iter().zip(times(d, "starts.txt").into_iter().skip(skip)) {
            start.push((s - w) as f64 / 1e6);
        }
        for (w, r) in written.iter().zip(times(d, "received.txt").into_iter().skip(skip)) {
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

/// A burst's outcome from what the agents recorded (`runs.txt` at their
/// start, `ends.txt` before they hibernate): how many chambers ran more
/// than once, and the most sessions running at the same moment.
pub fn burst_figures(dirs: &[PathBuf], took: std::time::Duration, limit: Option<usize>) -> Figures {
    let mut edges = Vec::new();
    let mut twice = 0;
    let mut missing = 0;
    for d in dirs {
        let (runs, ends) = (times(d, "runs.txt"), times(d, "ends.txt"));
        match runs.len() {
            0 => missing += 1,
            1 => {}
            _ => twice += 1,
        }
        for (s, e) in runs.iter().zip(&ends) {
            edges.push((*s, 1));
            edges.push((*e, -1));
        }
    }
    let max = most_at_once(edges);
    let limit = limit.map(|l| format!("(limit {l})")).unwrap_or_else(|| "(no limit)".into());
    println!("  all ran in               {:.1} s (from the restart)", took.as_secs_f64());
    println!("  chambers that ran twice  {twice}");
    println!("  chambers that never ran  {missing}");
    println!("  most at once             {max} {limit}");
    let mut f = Figures::new();
    f.insert("burst_seconds".into(), took.as_secs_f64().into());
    f.insert("ran_twice".into(), twice.into());
    f.insert("never_ran".into(), missing.into());
    f.insert("max_concurrent".into(), max.into());
    f
}

/// The most sessions running at one moment, from their starts (+1) and
/// ends (-1).
fn most_at_once(mut edges: Vec<(i128, i32)>) -> i32 {
    edges.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, x) in edges {
        cur += x;
        max = max.max(cur);
    }
    max
}

/// A mail storm's outcome from what the agents recorded after `t0` (ns):
/// the time from the first message to the last session's end, the
/// sessions that ran, and the most running at the same moment.
pub fn storm_figures(dirs: &[PathBuf], t0: i128) -> Figures {
    let mut edges = Vec::new();
    let mut last = t0;
    for d in dirs {
        let (runs, ends) = (times(d, "runs.txt"), times(d, "ends.txt"));
        for (s, e) in runs.iter().zip(&ends).filter(|(s, _)| **s >= t0) {
            edges.push((*s, 1));
            edges.push((*e, -1));
            last = last.max(*e);
        }
    }
    let sessions = edges.len() / 2;
    let max = most_at_once(edges);
    let took = (last - t0) as f64 / 1e9;
    println!("  every message answered in {took:.2} s (from the first written)");
    println!("  sessions                  {sessions}");
    println!("  most at once              {max}");
    let mut f = Figures::new();
    f.insert("storm_seconds".into(), took.into());
    f.insert("sessions".into(), sessions.into());
    f.insert("max_concurrent".into(), max.into());
    f
}

/// Writes `per` messages into each of `dirs`' inboxes, as fast as it can;
/// returns when it began (ns).
pub fn write_storm(dirs: &[PathBuf], per: usize) -> i128 {
    let t0 = now_ns();
    for k in 0..per {
        for d in dirs {
            write_message(d, k);
        }
    }
    t0
}

/// Whether each of `dirs` has received `per` messages (its agents' counts
/// in `got.txt`) and no session of it is running (as many ends as starts).
pub fn storm_settled(dirs: &[PathBuf], per: usize) -> bool {
    dirs.iter().all(|d| {
        let got: usize = std::fs::read_to_string(d.join("got.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<usize>().ok())
            .sum();
        got >= per && times(d, "runs.txt").len() == times(d, "ends.txt").len()
    })
}

/// Prints cryo's and the seed system's figures side by side with their
/// ratio (seed / cryo: above 1, cryo is smaller or faster), and adds the
/// seed's figures to `cryo`'s as `seed_*` and the ratios as `ratio_*`.
pub fn side_by_side(cryo: &mut Figures, seed: Figures, rows: &[(&str, &str)]) {
    println!("\nside by side                         cryo      seed system   seed / cryo");
    for (key, unit) in rows {
        let get = |f: &Figures| f.get(*key).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        let (a, b) = (get(cryo), get(&seed));
        let ratio = b / a;
        let shown = if a == 0.0 && b > 0.0 {
            "cryo: 0".to_string()
        } else if ratio.is_finite() {
            format!("{ratio:.1}x")
        } else {
            "n/a".to_string()
        };
        println!("  {key:<28} {a:>10.2} {unit:<4} {b:>10.2} {unit:<4} {shown:>9}");
        if ratio.is_finite() {
            cryo.insert(format!("ratio_{key}"), ratio.into());
        }
    }
    for (k, v) in seed {
        cryo.insert(format!("seed_{k}"), v);
    }
}

/// How many of the agents that ran before a crash (the first pid in each
/// chamber's `pids.txt`) still run.
pub fn survivors(dirs: &[PathBuf]) -> usize {
    dirs.iter()
        .filter_map(|d| std::fs::read_to_string(d.join("pids.txt")).ok()?.lines().next()?.trim().parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Not gone, and not a zombie waiting for its parent.
            !stat.is_empty() && !stat.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
        .count()
}

pub fn all_pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
}

/// Every live process whose working folder is under `root` (agents).
pub fn working_in(root: &Path) -> Vec<u32> {
    all_pids().filter(|p| std::fs::read_link(format!("/proc/{p}/cwd")).is_ok_and(|c| c.starts_with(root))).collect()
}

pub fn kill_all(pids: impl IntoIterator<Item = u32>) {
    for p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Waits (up to the schedule's end and a minute) until every chamber's agent
/// recorded as many starts as it has wakes due.
pub fn wait_for_wakes(dirs: &[PathBuf], due: &[Vec<i64>], skip: usize) {
    let last = due.iter().flatten().max().copied().unwrap_or(0);
    let left = (last - (now_ns() / 1_000_000_000) as i64).max(0) as u64;
    wait_until_within(Duration::from_secs(left + 60), "every wake to start its agent", || {
        dirs.iter().zip(due).all(|(d, due)| times(d, "starts.txt").len() >= due.len() + skip)
    });
}

/// The agent's own timings of its `cryo-agent todo list` calls (`calls.txt`,
/// nanoseconds), once it made `runs` of them.
pub fn agent_calls(dir: &Path, runs: usize) -> Vec<f64> {
    let calls = dir.join("calls.txt");
    wait_until_within(Duration::from_secs(60), "the agent's calls", || {
        std::fs::read_to_string(&calls).unwrap_or_default().lines().count() >= runs
    });
    times(dir, "calls.txt").into_iter().map(|ns| ns as f64 / 1e6).collect()
}

/// Writes message `k` into `dir`'s inbox the way a careful writer does
/// (a hidden file renamed into place); returns when it appeared.
pub fn write_message(dir: &Path, k: usize) -> i128 {
    let name = format!("{k:06}-bench.md");
    let tmp = dir.join("messages/inbox").join(format!(".{name}"));
    std::fs::write(&tmp, format!("---\nfrom: bench\nsubject: m{k}\n---\n\nmessage {k}\n")).unwrap();
    let at = now_ns();
    std::fs::rename(&tmp, dir.join("messages/inbox").join(&name)).unwrap();
    at
}

/// How many of these chambers' agents started a second time (their work
/// run again after the crash), waiting up to 30 s.
pub fn count_reruns(dirs: &[PathBuf]) -> usize {
    let rerun = || dirs.iter().filter(|d| times(d, "runs.txt").len() >= 2).count();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rerun() < dirs.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    rerun()
}

/// Watches `pids` at rest for `seconds`: context switches and CPU per
/// minute over the window, resident memory (summed) at its end; printed
/// after the `startup` time and returned.
pub fn at_rest(pids: &[u32], seconds: u64, startup: Duration) -> Figures {
    let switches = || pids.iter().map(|p| context_switches(*p)).collect::<Vec<_>>();
    let cpu = || pids.iter().map(|p| cpu_seconds(*p)).sum::<f64>();
    let (cs0, cpu0) = (switches(), cpu());
    std::thread::sleep(Duration::from_secs(seconds));
    let (cs1, cpu1) = (switches(), cpu());
    let rss: f64 = pids.iter().map(|p| rss_mb(*p)).sum();
    let woke: u64 = cs0.iter().zip(&cs1).map(|(a, b)| switches_between(a, b)).sum();
    let per_min = woke as f64 * 60.0 / seconds as f64;
    let cpu_per_min = (cpu1 - cpu0) * 60.0 / seconds as f64;
    let startup_ms = startup.as_secs_f64() * 1000.0;
    println!("  start-up to ready    {startup_ms:.0} ms");
    println!("  resident memory      {rss:.1} MB");
    println!("  wakeups per minute   {per_min:.1} (context switches of all threads over {seconds} s)");
    println!("  CPU per minute       {cpu_per_min:.3} s");
    let mut f = Figures::new();
    f.insert("processes".into(), pids.len().into());
    f.insert("startup_ms".into(), startup_ms.into());
    f.insert("rss_mb".into(), rss.into());
    f.insert("wakeups_per_minute".into(), per_min.into());
    f.insert("cpu_seconds_per_minute".into(), cpu_per_min.into());
    f
}

/// After a restart that took `ready` (until `what`): how many of the
/// interrupted chambers (`busy`) ran their work again, and how many agents
/// of the killed daemon still run; printed and returned.
pub fn recovered(ready: Duration, what: &str, busy: &[PathBuf]) -> Figures {
    let rerun = count_reruns(busy);
    let survivors = survivors(busy);
    let ready_ms = ready.as_secs_f64() * 1000.0;
    println!("  restart to serving   {ready_ms:.0} ms ({what})");
    println!("  sessions run again   {rerun} of {} within 30 s", busy.len());
    println!("  old agents still running {survivors} of {}", busy.len());
    let mut f = Figures::new();
    f.insert("recovery_ms".into(), ready_ms.into());
    f.insert("rerun".into(), rerun.into());
    f.insert("survivors".into(), survivors.into());
    f
}

/// The `history` scenario's sizes: the aged store's history, and how much
/// is measured on each world.
pub struct Aging {
    /// Ledger rows, spread over `chambers` chambers.
    pub sessions: usize,
    pub chambers: usize,
    /// Done TODOs in the measured chamber's `todo.json`.
    pub done_todos: usize,
    /// Archived inbox messages in the measured chamber.
    pub messages: usize,
    /// Wakes of the measured chamber, `every` seconds apart.
    pub wakes: usize,
    pub every: u64,
    /// Runs of each command, and restarts of the daemon.
    pub runs: usize,
    pub starts: usize,
}

/// The rows of the `history` scenario's table: figure and unit.
pub const HISTORY_ROWS: &[(&str, &str)] = &[
    ("lateness_p50_ms", "ms"),
    ("lateness_p95_ms", "ms"),
    ("todo_list_p50_ms", "ms"),
    ("todo_list_p95_ms", "ms"),
    ("todo_add_p50_ms", "ms"),
    ("todo_add_p95_ms", "ms"),
    ("hibernate_p50_ms", "ms"),
    ("hibernate_p95_ms", "ms"),
    ("status_p50_ms", "ms"),
    ("status_p95_ms", "ms"),
    ("list_p50_ms", "ms"),
    ("list_p95_ms", "ms"),
    ("usage_p50_ms", "ms"),
    ("usage_p95_ms", "ms"),
    ("startup_p50_ms", "ms"),
    ("startup_p95_ms", "ms"),
    ("rss_start_mb", "MB"),
    ("rss_after_mb", "MB"),
];

/// Median and p95 of `samples` (milliseconds): printed as one line after
/// `label` and kept as `KEY_p50_ms` and `KEY_p95_ms`.
pub fn p50_p95(f: &mut Figures, key: &str, label: &str, mut samples: Vec<f64>) {
    samples.sort_by(|a, b| a.total_cmp(b));
    let (p50, p95) = (percentile(&samples, 0.5), percentile(&samples, 0.95));
    let d = if p50 < 1.0 { 3 } else { 1 };
    println!("  {label:<34} p50 {p50:.d$} ms, p95 {p95:.d$} ms ({} runs)", samples.len());
    f.insert(format!("{key}_p50_ms"), p50.into());
    f.insert(format!("{key}_p95_ms"), p95.into());
}

/// The lateness of one chamber's wakes (`starts.txt` against `due`, Unix
/// seconds), as [`p50_p95`] `lateness`; the earliest kept as
/// `lateness_min_ms` (never below 0: no agent starts early).
pub fn lateness_p95(f: &mut Figures, dir: &Path, due: &[i64]) {
    let late: Vec<f64> =
        times(dir, "starts.txt").iter().zip(due).map(|(s, d)| (s - *d as i128 * 1_000_000_000) as f64 / 1e6).collect();
    f.insert("wakes".into(), late.len().into());
    f.insert("lateness_min_ms".into(), late.iter().copied().reduce(f64::min).unwrap_or(f64::NAN).into());
    f.insert("lateness_max_ms".into(), late.iter().copied().reduce(f64::max).unwrap_or(f64::NAN).into());
    p50_p95(f, "lateness", "wake lateness (due -> agent's start)", late);
}

/// The agent's own timings of its calls in `file` (nanoseconds, one per
/// line), in milliseconds.
pub fn agent_times(dir: &Path, file: &str) -> Vec<f64> {
    times(dir, file).into_iter().map(|ns| ns as f64 / 1e6).collect()
}

/// Resident memory of `pids` once their threads have been still for half a
/// second (at most `DEADLINE`).
pub fn settled_rss(pids: &[u32]) -> f64 {
    let all = || pids.iter().map(|p| context_switches(*p)).collect::<Vec<_>>();
    let start = Instant::now();
    loop {
        let a = all();
        std::thread::sleep(Duration::from_millis(500));
        let moved: u64 = a.iter().zip(&all()).map(|(a, b)| switches_between(a, b)).sum();
        if moved == 0 || start.elapsed() > cryo_tests::DEADLINE {
            break;
        }
    }
    pids.iter().map(|p| rss_mb(*p)).sum()
}

/// The `history` scenario's table: the empty store, the aged one and their
/// ratio (aged / empty: the target is at most 1.2), then the seed system
/// on the aged chamber and its ratio to cryo's aged figure (seed / aged:
/// above 1, cryo is faster); "-" where a system cannot measure. Returns
/// every figure in one object: `empty_*`, `aged_*`, `seed_*`, `ratio_*`
/// (aged / empty) and `seed_ratio_*` (seed / aged).
pub fn aged_side_by_side(empty: Figures, aged: Figures, seed: Option<Figures>) -> Figures {
    let get = |f: &Figures, k: &str| f.get(k).and_then(|v| v.as_f64()).filter(|v| v.is_finite());
    let show = |v: Option<f64>, unit: &str| match v {
        Some(v) if v < 10.0 => format!("{v:.2} {unit}"),
        Some(v) => format!("{v:.1} {unit}"),
        None => "-".into(),
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let x = |r: Option<f64>| r.map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".into());
    println!(
        "\nside by side               {:>12} {:>12} {:>11} {:>13} {:>11}",
        "empty", "aged", "aged/empty", "seed (aged)", "seed/aged"
    );
    let mut out = Figures::new();
    for (key, unit) in HISTORY_ROWS {
        let (e, a) = (get(&empty, key), get(&aged, key));
        let s = seed.as_ref().and_then(|s| get(s, key));
        let (r, sr) = (ratio(a, e), ratio(s, a));
        let seed_cols = if seed.is_some() { format!("{:>13} {:>11}", show(s, unit), x(sr)) } else { String::new() };
        println!("  {key:<24} {:>12} {:>12} {:>11} {seed_cols}", show(e, unit), show(a, unit), x(r));
        for (k, v) in [("ratio", r), ("seed_ratio", sr)] {
            if let Some(v) = v {
                out.insert(format!("{k}_{key}"), v.into());
            }
        }
    }
    for (side, f) in [("empty", Some(empty)), ("aged", Some(aged)), ("seed", seed)] {
        for (k, v) in f.into_iter().flatten() {
            out.insert(format!("{side}_{k}"), v);
        }
    }
    out
}
