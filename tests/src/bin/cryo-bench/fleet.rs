//! The fleet scenario: several cryod nodes on one PostgreSQL, what each
//! costs the database at rest and per wake.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cryo_tests::{Env, wait_until_within};

use crate::cryo::{FAR, dirs, register, start_all, write_todos};
use crate::measure::*;
use crate::scripts;

/// A fleet of `nodes` cryod processes on one fresh PostgreSQL with a lease
/// of `(heartbeat, ttl)` milliseconds and `chambers` chambers: the
/// database statements each idle node runs per second (its heartbeat
/// cost), then the statements per wake over `wakes` wakes spread over
/// `spread` seconds, with their lateness. Statements are counted per node
/// (each connects as its own role) by `pg_stat_statements`.
pub fn fleet(nodes: usize, chambers: usize, seconds: u64, wakes: usize, spread: u64, lease: (u64, u64)) -> Figures {
    let pg = cryo_tests::pg::Postgres::start().expect("PostgreSQL is not installed");
    let envs: Vec<(String, Env)> = (1..=nodes)
        .map(|i| {
            let name = format!("n{i}");
            pg.role(&name);
            let env = Env::new();
            env.daemon_config(&format!(
                "max_concurrent_sessions = 8\n[store]\nurl = \"{}\"\nnode = \"{name}\"\ndomain = \"bench\"\nheartbeat_ms = {}\nlease_ms = {}\n",
                pg.url(&name),
                lease.0,
                lease.1
            ));
            (name, env)
        })
        .collect();
    let first = &envs[0].1;
    let _d1 = first.start_daemon();
    // The claims: each chamber registered and started on the first node
    // (its ownership written to the database with its fence).
    let claiming = Instant::now();
    let names = register(first, chambers, scripts::LATENESS, |_, dir| write_todos(dir, &[FAR.to_string()]));
    let dirs = dirs(first, &names);
    start_all(first, &names);
    let claims = claiming.elapsed().as_secs_f64();
    let deadline = Duration::from_secs(120 + chambers as u64 / 100);
    let (mut others, handover, moved) = hand_over(&envs, chambers, deadline);
    let count = || pg.statements_by_role().expect("pg_stat_statements (Debian's postgresql package has it)");
    let of = |m: &std::collections::HashMap<String, u64>| -> u64 {
        envs.iter().map(|(n, _)| m.get(n).copied().unwrap_or(0)).sum()
    };
    // The database says who owns what before the owners have finished taking
    // their chambers up (each adoption reads the ledger and publishes a
    // mirror): at rest means a heartbeat in which no node ran more than
    // its round's statements (six at most).
    let heartbeat = Duration::from_millis(lease.0);
    let mut last = count();
    wait_until_within(Duration::from_secs(120), "the nodes to come to rest", || {
        std::thread::sleep(heartbeat);
        let now = count();
        let busy = envs.iter().any(|(n, _)| now.get(n).unwrap_or(&0) - last.get(n).unwrap_or(&0) > 6);
        last = now;
        !busy
    });
    // At rest.
    let (before, t) = (count(), Instant::now());
    std::thread::sleep(Duration::from_secs(seconds));
    let (after, rest) = (count(), t.elapsed().as_secs_f64());
    let per_node: Vec<f64> = envs
        .iter()
        .map(|(n, _)| (after.get(n).copied().unwrap_or(0) - before.get(n).copied().unwrap_or(0)) as f64 / rest)
        .collect();
    let idle = per_node.iter().sum::<f64>() / nodes as f64;
    if std::env::var_os("CRYO_BENCH_DEBUG").is_some() {
        for (n, _) in &envs {
            eprintln!("--- statements of {n} so far\n{}", pg.statements_of(n));
        }
    }
    // Wakes: at most one chamber a wake (a large fleet's wakes are a few
    // of its chambers).
    let waking = chambers.min(wakes.max(1));
    let dirs = &dirs[..waking];
    let due = schedule(waking, wakes.div_ceil(waking), spread, second_after(3));
    for (d, due) in dirs.iter().zip(&due) {
        let at: Vec<String> = due.iter().map(|s| rfc3339_ns(*s as i128 * 1_000_000_000)).collect();
        write_todos(d, &at);
    }
    let (before, t) = (count(), Instant::now());
    let waited = std::panic::catch_unwind(|| wait_for_wakes(dirs, &due, 0));
    if let Err(e) = waited {
        dump_waiting(&envs, dirs, &due);
        std::panic::resume_unwind(e);
    }
    let (after, busy) = (count(), t.elapsed().as_secs_f64());
    if std::env::var_os("CRYO_BENCH_DEBUG").is_some() {
        dump_late(&envs, dirs, &due);
    }
    let ran: usize = due.iter().map(Vec::len).sum();
    let during = of(&after) - of(&before);
    // An estimate: the heartbeats' share is taken out at the rate measured
    // at rest (a short run's figure is noisy, and may even come out below 0).
    let per_wake = (during as f64 - idle * nodes as f64 * busy) / ran as f64;
    println!(
        "\ncryo: a fleet of {nodes} nodes on PostgreSQL, {chambers} chambers (heartbeat {} ms, lease {} ms)",
        lease.0, lease.1
    );
    println!("  statements per idle node   {idle:.2} /s   (each node: {per_node:.2?}, over {rest:.0} s)");
    println!("  statements per wake        {per_wake:.1}   ({ran} wakes, the heartbeats' share taken out)");
    let mut f = lateness_figures(dirs, &due);
    // The take-over: the last node killed (SIGKILL: no goodbye), its
    // chambers owned again once its lease has run out.
    let (orphans, takeover) =
        take_over(first, &mut others, (nodes, chambers), deadline + Duration::from_millis(lease.1));
    let after_lease = (takeover - lease.1 as f64 / 1000.0).max(0.001);
    println!(
        "  claims                     {chambers} chambers registered and started on n1 in {claims:.1} s ({:.0}/s)",
        chambers as f64 / claims
    );
    println!(
        "  hand-over                  {moved} chambers to {} new nodes in {handover:.1} s ({:.0} chambers/s)",
        nodes - 1,
        moved as f64 / handover
    );
    println!(
        "  take-over after SIGKILL    {orphans} chambers in {takeover:.1} s ({after_lease:.1} s after the {:.0} s lease: {:.0} chambers/s)",
        lease.1 as f64 / 1000.0,
        orphans as f64 / after_lease
    );
    database(&pg, &mut f);
    f.insert("claims_per_second".into(), (chambers as f64 / claims).into());
    f.insert("handover_s".into(), handover.into());
    f.insert("handover_chambers".into(), moved.into());
    f.insert("takeover_s".into(), takeover.into());
    f.insert("takeover_chambers".into(), orphans.into());
    f.insert("nodes".into(), nodes.into());
    f.insert("statements_per_idle_node_per_second".into(), idle.into());
    f.insert("statements_per_wake".into(), per_wake.into());
    f.insert("statements_during_wakes".into(), during.into());
    f
}

/// The first node owns every chamber; the others start and take their
/// shares: their daemons, the seconds until the shares were even, and how
/// many chambers moved.
fn hand_over(envs: &[(String, Env)], chambers: usize, deadline: Duration) -> (Vec<cryo_tests::Daemon>, f64, u64) {
    let (first, nodes) = (&envs[0].1, envs.len());
    let t = Instant::now();
    let others: Vec<_> = envs[1..].iter().map(|(_, e)| e.start_daemon()).collect();
    let share = chambers.div_ceil(nodes) as u64;
    wait_until_within(deadline, "the chambers to be shared out", || {
        let live = owned(first);
        live.unowned == 0 && live.nodes.len() == nodes && live.nodes.iter().all(|(_, c)| *c <= share)
    });
    let handover = t.elapsed().as_secs_f64();
    let moved = chambers as u64 - owned(first).nodes.iter().find(|(n, _)| n == "n1").map_or(0, |(_, c)| *c);
    (others, handover, moved)
}

/// Kills the last node (SIGKILL: no goodbye) and waits until every chamber
/// it owned is owned by a live node again: how many, and the seconds.
fn take_over(
    first: &Env,
    others: &mut [cryo_tests::Daemon],
    (nodes, chambers): (usize, usize),
    deadline: Duration,
) -> (u64, f64) {
    let victim = format!("n{nodes}");
    let orphans = owned(first).nodes.iter().find(|(n, _)| *n == victim).map_or(0, |(_, c)| *c);
    let t = Instant::now();
    others.last_mut().expect("two nodes at least").signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    wait_until_within(deadline, "the killed node's chambers to be taken over", || {
        let live = owned(first);
        live.unowned == 0
            && live.nodes.len() == nodes - 1
            && live.nodes.iter().map(|(_, c)| c).sum::<u64>() == chambers as u64
    });
    (orphans, t.elapsed().as_secs_f64())
}

/// The database's size, its largest tables and the statements with the
/// most time, printed; the size in `f`.
fn database(pg: &cryo_tests::pg::Postgres, f: &mut Figures) {
    let size = pg.sql("SELECT pg_database_size(current_database())").parse::<f64>().unwrap_or(0.0);
    let tables = pg.sql(
        "SELECT string_agg(relname || ' ' || pg_size_pretty(pg_total_relation_size(oid)), ', ' ORDER BY pg_total_relation_size(oid) DESC)
         FROM (SELECT oid, relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace
               ORDER BY pg_total_relation_size(oid) DESC LIMIT 4) t",
    );
    println!("  database size              {:.1} MB ({tables})", size / 1e6);
    println!("  slowest statements, by total time (calls, mean ms, total ms):");
    for line in pg.slowest(5).lines() {
        println!("    {line}");
    }
    f.insert("database_mb".into(), (size / 1e6).into());
}

/// Who owns what, as the first node's `cryoctl fleet status` says.
struct Owned {
    unowned: u64,
    /// Each live node's name and chambers.
    nodes: Vec<(String, u64)>,
}

fn owned(env: &Env) -> Owned {
    let s = env.cryoctl(&["fleet", "status", "--json"]).json();
    let nodes = s["nodes"]
        .as_array()
        .expect("fleet status lists the nodes")
        .iter()
        .filter(|n| n["live"] == true)
        .map(|n| (n["name"].as_str().unwrap_or_default().to_string(), n["chambers"].as_u64().unwrap_or(0)))
        .collect();
    Owned { unowned: s["unowned"].as_u64().unwrap_or(u64::MAX), nodes }
}

/// What the chambers still waiting show, and where they run (the wakes did
/// not all come).
fn dump_waiting(envs: &[(String, Env)], dirs: &[PathBuf], due: &[Vec<i64>]) {
    eprintln!("{}", envs[0].1.cryoctl(&["chamber", "list"]).stdout);
    for (d, due) in dirs.iter().zip(due) {
        if times(d, "starts.txt").len() < due.len() {
            let read = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
            eprintln!("{} waits: todo.json {}\ncryo.log:\n{}", d.display(), read("todo.json"), read("cryo.log"));
        }
    }
    for (n, e) in envs {
        eprintln!("--- {n}\n{}", e.daemon_log());
    }
}

/// With `CRYO_BENCH_DEBUG`: each chamber that started over 500 ms late, and
/// each node's last log lines.
fn dump_late(envs: &[(String, Env)], dirs: &[PathBuf], due: &[Vec<i64>]) {
    for (d, due) in dirs.iter().zip(due) {
        let late = (times(d, "starts.txt")[0] - due[0] as i128 * 1_000_000_000) / 1_000_000;
        if late > 500 {
            let log = std::fs::read_to_string(d.join("cryo.log")).unwrap_or_default();
            eprintln!("{} late {late} ms:\n{}", d.display(), log.lines().rev().take(12).collect::<Vec<_>>().join("\n"));
        }
    }
    for (n, e) in envs {
        eprintln!("--- {n}\n{}", e.daemon_log().lines().rev().take(40).collect::<Vec<_>>().join("\n"));
    }
}
