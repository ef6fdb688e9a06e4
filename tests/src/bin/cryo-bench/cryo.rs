//! The scenarios on cryo: one real cryod in a private folder (the tests'
//! harness), chambers registered and started over its gRPC API.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cryo_proto::v1 as pb;
use cryo_tests::{Env, wait_until, wait_until_within};

use crate::measure::*;
use crate::scripts;

/// Registers `n` chambers whose agent runs `script` through the gRPC API;
/// `prepare` fills each folder before it is added. Their sandbox is `off`,
/// or what `CRYO_BENCH_SANDBOX` names (`landlock`, `bwrap`): what a
/// session's confinement adds to its start.
pub(crate) fn register(env: &Env, n: usize, script: &str, prepare: impl Fn(usize, &Path)) -> Vec<String> {
    register_range(env, 0..n, script, prepare)
}

/// Chambers kept apart by how many registrations run at once (a 100,000
/// chamber world is set up in minutes, not an hour).
const REGISTERING: usize = 8;

/// [`register`] for the chambers numbered `range` (named `bNNNNN`), a few
/// at once on their own connections; the names in order.
pub(crate) fn register_range(
    env: &Env,
    range: std::ops::Range<usize>,
    script: &str,
    prepare: impl Fn(usize, &Path),
) -> Vec<String> {
    let sandbox = std::env::var("CRYO_BENCH_SANDBOX").unwrap_or_else(|_| "off".into());
    let (prepare, sandbox) = (&prepare, &sandbox);
    let one = |mut c: cryo_proto::Control, i: usize| async move {
        let name = format!("b{i:05}");
        let dir = env.path(&format!("ch/{name}"));
        let init = pb::ChamberInitRequest {
            dir: dir.to_str().unwrap().into(),
            agent: "sh agent.sh".into(),
            sandbox: sandbox.clone(),
        };
        c.chamber_init(init).await.unwrap();
        std::fs::write(dir.join("agent.sh"), script).unwrap();
        std::fs::write(dir.join("cryo.log"), "--- CRYO SESSION 1 | setup ---\n--- CRYO END ---\n").unwrap();
        prepare(i, &dir);
        let add = pb::ChamberAddRequest { dir: dir.to_str().unwrap().into(), name: name.clone(), ..Default::default() };
        c.chamber_add(add).await.unwrap();
        name
    };
    rt().block_on(async {
        let c = cryo_proto::control_unchecked(&env.socket()).await.unwrap();
        let mut names = Vec::with_capacity(range.len());
        let ids: Vec<usize> = range.collect();
        for chunk in ids.chunks(REGISTERING) {
            names.extend(futures_util::future::join_all(chunk.iter().map(|i| one(c.clone(), *i))).await);
        }
        names
    })
}

pub(crate) fn dirs(env: &Env, names: &[String]) -> Vec<PathBuf> {
    names.iter().map(|n| env.path(&format!("ch/{n}"))).collect()
}

pub(crate) fn start_all(env: &Env, names: &[String]) {
    rt().block_on(async {
        let mut c = cryo_proto::control_unchecked(&env.socket()).await.unwrap();
        for n in names {
            let r = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name(n.clone())) };
            c.chamber_start(pb::ChamberStartRequest { chamber: Some(r), no_wait: true }).await.unwrap();
        }
    });
}

/// `runs` runs of `cryoctl ARGS` (each must succeed), in milliseconds from
/// the process's start to its exit.
pub(crate) fn cryoctl_times(env: &Env, runs: usize, args: &[&str]) -> Vec<f64> {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            let out = env.command(cryo_tests::bin("cryoctl")).args(args).output().unwrap();
            assert!(out.status.success(), "cryoctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

/// A time no scenario reaches: a TODO there keeps a chamber's plan open.
pub const FAR: &str = "2099-01-01T00:00:00Z";

/// Writes a `todo.json` holding one pending TODO per time (RFC 3339).
pub(crate) fn write_todos(dir: &Path, at: &[String]) {
    let items: Vec<serde_json::Value> = at
        .iter()
        .enumerate()
        .map(|(k, at)| serde_json::json!({"id": k + 1, "text": format!("wake {k}"), "done": false, "claimed": false, "at": at}))
        .collect();
    std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
}

/// Waits until the daemon answers a chamber list (it has loaded every chamber).
pub(crate) fn wait_serving(env: &Env) {
    rt().block_on(async {
        loop {
            if let Ok(mut c) = cryo_proto::control_unchecked(&env.socket()).await
                && c.chamber_list(pb::ChamberListRequest { archived: false }).await.is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
}

pub fn lateness(wakes: usize, chambers: usize, spread: u64, postgres: bool) -> Figures {
    let env = Env::new();
    // With `--postgres`, one fleet node on a fresh PostgreSQL instead of the SQLite file.
    let pg = postgres.then(|| cryo_tests::pg::Postgres::start().expect("PostgreSQL is not installed"));
    let store = match &pg {
        Some(pg) => {
            pg.role("n1");
            format!("\n[store]\nurl = \"{}\"\nnode = \"n1\"\n", pg.url("n1"))
        }
        None => String::new(),
    };
    env.daemon_config(&format!("max_concurrent_sessions = {}\n{store}", chambers.max(4)));
    let _d = env.start_daemon();
    let names = register(&env, chambers, scripts::LATENESS, |_, _| {});
    let dirs = dirs(&env, &names);
    let due = schedule(chambers, wakes.div_ceil(chambers), spread, second_after(3));
    for (d, due) in dirs.iter().zip(&due) {
        let at: Vec<String> = due.iter().map(|s| rfc3339_ns(*s as i128 * 1_000_000_000)).collect();
        write_todos(d, &at);
    }
    start_all(&env, &names);
    wait_for_wakes(&dirs, &due, 0);
    if std::env::var_os("CRYO_BENCH_DEBUG").is_some() {
        eprintln!("{}", env.daemon_log());
    }
    let store = if pg.is_some() { "the PostgreSQL store (one fleet node)" } else { "the SQLite store" };
    println!("\ncryo: wake lateness (due time to the agent process's first command), {chambers} chambers, {store}");
    let mut f = lateness_figures(&dirs, &due);
    served_figures(&env, &mut f, "cryo_wake_lateness_seconds", "trigger=\"scheduled\"", "due time -> agent spawned");
    f
}

/// What cryod itself measured of the same thing, read from its `/metrics`
/// (through `cryoctl metrics --json`): the bench and production use one
/// measure. The histogram's resolution is its buckets, so p50 and p99 are
/// bucket bounds.
fn served_figures(env: &Env, f: &mut Figures, name: &str, labels: &str, what: &str) {
    let all = env.cryoctl(&["metrics", "--json"]).json();
    let Some(s) = all.as_array().into_iter().flatten().find(|s| s["name"] == name && s["labels"] == labels) else {
        return;
    };
    let ms = |k: &str| s[k].as_f64().map(|v| v * 1000.0);
    let count = s["value"].as_f64().unwrap_or(0.0);
    let mean = s["sum"].as_f64().map(|sum| sum * 1000.0 / count.max(1.0));
    let show = |v: Option<f64>| v.map(|v| format!("{v:.1} ms")).unwrap_or_else(|| "-".into());
    println!(
        "  cryod's /metrics  {what}: {count} observed, mean {}, p50 <= {}, p99 <= {}",
        show(mean),
        show(ms("p50")),
        show(ms("p99"))
    );
    let key = name.trim_start_matches("cryo_").trim_end_matches("_seconds");
    for (k, v) in [("mean", mean), ("p50", ms("p50")), ("p99", ms("p99"))] {
        if let Some(v) = v {
            f.insert(format!("metrics_{key}_{k}_ms"), v.into());
        }
    }
}

pub fn idle(chambers: usize, todos: usize, seconds: u64, restarts: usize) -> Figures {
    let env = Env::new();
    let d = env.start_daemon();
    let far = now_ns() + 30 * 86_400 * 1_000_000_000;
    let names = register(&env, chambers, "exit 0\n", |_, dir| {
        let at: Vec<String> = (0..todos).map(|k| rfc3339_ns(far + k as i128 * 3_600_000_000_000)).collect();
        write_todos(dir, &at);
    });
    start_all(&env, &names);
    // Restart: measure start-up with everything registered. The thousands
    // of files just made are written back first (`sync`): a restart is not
    // usually at the moment they were made, and their write-back would be
    // measured with it (10,000 chambers: 1.2 s then, 0.8-0.9 s settled).
    // With `restarts` over one, each is timed and the median taken (a
    // start's cost swings with the machine's caches: see BENCHMARKS.md).
    let mut starts = Vec::new();
    let mut d = Some(d);
    for _ in 0..restarts.max(1) {
        d.take().expect("a daemon").signal_and_wait(nix::sys::signal::Signal::SIGTERM);
        nix::unistd::sync();
        let t = Instant::now();
        let started = env.start_daemon();
        wait_serving(&env);
        starts.push((t.elapsed(), cpu_seconds(started.pid())));
        d = Some(started);
    }
    let d = d.expect("a daemon");
    if starts.len() > 1 {
        let runs: Vec<String> =
            starts.iter().map(|(t, cpu)| format!("{:.0} ms (CPU {cpu:.2} s)", t.as_secs_f64() * 1000.0)).collect();
        println!("  restarts             {}", runs.join(", "));
    }
    starts.sort_by_key(|(t, _)| *t);
    let startup = starts[starts.len() / 2].0;
    let pid = d.pid();
    wait_until("the daemon to settle", || {
        let a = context_switches(pid);
        std::thread::sleep(Duration::from_millis(500));
        switches_between(&a, &context_switches(pid)) == 0
    });
    println!("\ncryo: idle daemon ({chambers} chambers x {todos} TODOs in the future)");
    let f = at_rest(&[pid], seconds, startup);
    drop(d);
    keep_if_asked(env);
    f
}

pub fn recovery(chambers: usize, running: usize) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {}\n", running.max(1)));
    let mut d = env.start_daemon();
    let names = register(&env, chambers, scripts::RECOVERY, |i, dir| {
        let at = if i < running { "2000-01-01T00:00:00Z" } else { FAR };
        if i < running {
            std::fs::write(dir.join("work"), "").unwrap();
        }
        write_todos(dir, &[at.to_string()]);
    });
    let dirs = dirs(&env, &names);
    start_all(&env, &names);
    wait_until("the sessions to run", || dirs[..running].iter().all(|d| d.join("runs.txt").exists()));
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let t = Instant::now();
    let _d = env.start_daemon();
    wait_serving(&env);
    let ready = t.elapsed();
    let log = |d: &PathBuf| std::fs::read_to_string(d.join("cryo.log")).unwrap_or_default();
    wait_until("the interrupted sessions to be finalized", || {
        dirs[..running].iter().all(|d| log(d).contains("interrupted"))
    });
    println!(
        "\ncryo: recovery (SIGKILL with {running} sessions running, {chambers} chambers; every one logged as interrupted)"
    );
    let f = recovered(ready, "every chamber loaded, the schedule rebuilt", &dirs[..running]);
    // The sessions run again sleep five minutes: end them with the bench.
    kill_all(working_in(env.root()));
    f
}

pub fn control(chambers: usize, runs: usize) -> Figures {
    let env = Env::new();
    let _d = env.start_daemon();
    let names = register(&env, chambers, &scripts::control(runs), |_, _| {});
    wait_serving(&env);
    let timed = |args: &[&str]| cryoctl_times(&env, runs, args);
    let list = timed(&["chamber", "list", "--json"]);
    let status = timed(&["chamber", "status", &names[0], "--json"]);
    // cryo-agent inside a real session: the agent times its own calls.
    let first = env.path(&format!("ch/{}", names[0]));
    std::fs::write(first.join("measure"), "").unwrap();
    std::fs::write(first.join("measure-mcp"), "").unwrap();
    start_all(&env, &names[..1]);
    rt().block_on(async {
        let mut c = cryo_proto::control_unchecked(&env.socket()).await.unwrap();
        let r = pb::ChamberRef { by: Some(pb::chamber_ref::By::Name(names[0].clone())) };
        c.chamber_wake(pb::ChamberWakeRequest { chamber: Some(r), ..Default::default() }).await.unwrap();
    });
    let agent = agent_calls(&first, runs);
    let (mcp_start, mcp_calls) = mcp_calls(&env, &first, runs);
    let hello =
        || pb::HelloRequest { client: "bench".into(), protocol: cryo_proto::PROTOCOL_VERSION, version: String::new() };
    // The raw gRPC round trip: Hello on an open channel, and with a new
    // connection for each call.
    let (open, fresh) = rt().block_on(async {
        let mut c = cryo_proto::control_unchecked(&env.socket()).await.unwrap();
        let mut open = Vec::new();
        for _ in 0..1000 {
            let t = Instant::now();
            c.hello(hello()).await.unwrap();
            open.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let mut fresh = Vec::new();
        for _ in 0..1000 {
            let t = Instant::now();
            cryo_proto::control_unchecked(&env.socket()).await.unwrap().hello(hello()).await.unwrap();
            fresh.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        (open, fresh)
    });
    println!("\ncryo: control plane ({chambers} chambers, {runs} runs each; process start to exit)");
    let mut f = Figures::new();
    timing(&mut f, "list", "cryoctl chamber list --json", list, "");
    timing(&mut f, "status", "cryoctl chamber status NAME", status, "");
    timing(&mut f, "agent_call", "cryo-agent todo list", agent, " (inside a session)");
    timing(&mut f, "mcp_start", "cryo-agent mcp, start and initialize", mcp_start, "");
    timing(&mut f, "mcp_call", "MCP tool todo_list, open server", mcp_calls, "");
    timing(&mut f, "rtt_open", "gRPC Hello, open channel", open, " (1000 calls)");
    timing(&mut f, "rtt_connect", "gRPC Hello, new connection", fresh, " (1000 calls)");
    served_figures(&env, &mut f, "cryo_agent_call_seconds", "verb=\"todo_list\"", "todo_list inside cryod");
    f
}

/// The session's verbs through `cryo-agent mcp`, as an agent CLI calls
/// them: the server's start and handshake (`runs` times), then `runs` calls
/// of `todo_list` on one open server. The chamber's agent waits meanwhile.
fn mcp_calls(env: &Env, dir: &Path, runs: usize) -> (Vec<f64>, Vec<f64>) {
    use cryo_tests::mcp::StdioClient;
    wait_until_within(Duration::from_secs(60), "the session's environment", || {
        std::fs::read_to_string(dir.join("session.env")).is_ok_and(|t| t.contains("CRYO_SESSION_TOKEN="))
    });
    let vars = std::fs::read_to_string(dir.join("session.env")).unwrap();
    let server = || {
        let mut cmd = env.command(cryo_tests::bin("cryo-agent"));
        cmd.arg("mcp").current_dir(dir);
        for (k, v) in vars.lines().filter_map(|l| l.split_once('=')) {
            cmd.env(k, v);
        }
        cmd
    };
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
    let starts = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let c = StdioClient::start(server());
            let took = ms(t);
            c.finish();
            took
        })
        .collect();
    let mut c = StdioClient::start(server());
    let calls = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let r = c.call("todo_list", serde_json::json!({}));
            assert!(r["isError"] != true, "todo_list through MCP: {r}");
            ms(t)
        })
        .collect();
    c.finish();
    std::fs::write(dir.join("mcp-done"), "").unwrap();
    (starts, calls)
}

pub fn inbox(messages: usize, chambers: usize, burst: bool) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {}\n", chambers.max(4)));
    let _d = env.start_daemon();
    let names = register(&env, chambers, scripts::INBOX, |_, dir| write_todos(dir, &[FAR.into()]));
    start_all(&env, &names);
    let per = messages.div_ceil(chambers);
    let dirs = dirs(&env, &names);
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
    for k in 0..per {
        if burst {
            // One message to every chamber at once, then wait for them all.
            for (i, d) in dirs.iter().enumerate() {
                written[i].push(write_message(d, k));
            }
            for d in &dirs {
                settle(d, k);
            }
        } else {
            // One message at a time, round robin.
            for (i, d) in dirs.iter().enumerate() {
                written[i].push(write_message(d, k));
                settle(d, k);
            }
        }
    }
    let how = if burst { "all chambers at once each round" } else { "one at a time" };
    println!("\ncryo: inbox latency ({} messages over {chambers} chambers, {how})", per * chambers);
    let mut f = inbox_figures(&dirs, &written, 0);
    served_figures(&env, &mut f, "cryo_inbox_to_agent_seconds", "", "message seen -> agent spawned");
    f
}

/// A mail storm at the default settings (no `max_concurrent_sessions` in
/// cryod.toml: the limit cryod derives from the machine): `per` messages
/// written into each of `chambers` inboxes at once; each session works
/// `work_ms`. Time until every message is answered.
pub fn storm(chambers: usize, per: usize, work_ms: u64) -> Figures {
    let env = Env::new();
    env.daemon_config("");
    let _d = env.start_daemon();
    let names = register(&env, chambers, &scripts::storm(work_ms), |_, dir| write_todos(dir, &[FAR.into()]));
    start_all(&env, &names);
    let dirs = dirs(&env, &names);
    let t0 = write_storm(&dirs, per);
    wait_until_within(Duration::from_secs(600), "every message of the storm answered", || storm_settled(&dirs, per));
    let limit = rt().block_on(async {
        let mut c = cryo_proto::control_unchecked(&env.socket()).await.unwrap();
        let r = c.chamber_list(pb::ChamberListRequest { archived: false }).await.unwrap().into_inner();
        r.admission.map(|a| a.limit).unwrap_or_default()
    });
    println!(
        "\ncryo: mail storm ({per} messages to each of {chambers} chambers at once, {work_ms} ms of work a session, \
         max_concurrent_sessions derived: {limit})"
    );
    let mut f = storm_figures(&dirs, t0);
    f.insert("limit".into(), limit.into());
    f
}

pub fn burst(chambers: usize, limit: usize) -> Figures {
    let env = Env::new();
    env.daemon_config(&format!("max_concurrent_sessions = {limit}\n"));
    let mut d = env.start_daemon();
    let due = rfc3339_ns(now_ns() + 600_000_000_000);
    let names = register(&env, chambers, scripts::BURST, |_, dir| write_todos(dir, std::slice::from_ref(&due)));
    start_all(&env, &names);
    // Everything is due in 10 minutes; stop the daemon, move every TODO to
    // the same instant just past, and start it again: all due at once.
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let instant = rfc3339_ns((second_after(-2) as i128) * 1_000_000_000);
    let dirs = dirs(&env, &names);
    for d in &dirs {
        write_todos(d, std::slice::from_ref(&instant));
    }
    let t = Instant::now();
    let _d = env.start_daemon();
    wait_until_within(Duration::from_secs(600), "every chamber to run", || {
        dirs.iter().all(|d| d.join("ends.txt").exists())
    });
    let took = t.elapsed();
    println!("\ncryo: burst ({chambers} chambers due at once, max_concurrent_sessions {limit})");
    burst_figures(&dirs, took, Some(limit))
}

/// The history scenario on one world: `a.chambers` chambers at rest (one
/// TODO far out each), the first of them measured (its `[budget] daily_usd`
/// set, so every status and wake reads its budget). `aged` gives the world
/// its years before the daemon starts again: `a.sessions` ended sessions in
/// the ledger (written into the SQLite file with their rollups, as the
/// migration that made them sums them), `a.done_todos` done TODOs in the
/// measured chamber's `todo.json` and `a.messages` messages in its inbox's
/// archive. Then, on both: start-up (`a.starts` restarts), the operator's
/// commands (`a.runs` each), `a.wakes` wakes of the measured chamber with
/// the agent's own calls, and resident memory after start and after the wakes.
pub fn history(a: &Aging, aged: bool) -> Figures {
    let env = Env::new();
    env.daemon_config("max_concurrent_sessions = 4\n");
    let mut d = env.start_daemon();
    let names = register(&env, a.chambers, scripts::HISTORY, |i, dir| {
        write_todos(dir, &[FAR.to_string()]);
        if i == 0 {
            let toml = dir.join("cryo.toml");
            let text = std::fs::read_to_string(&toml).unwrap();
            std::fs::write(&toml, format!("{text}\n[budget]\ndaily_usd = 1000.0\n")).unwrap();
        }
    });
    start_all(&env, &names);
    wait_serving(&env);
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let first = env.path(&format!("ch/{}", names[0]));
    let world = if aged { "aged" } else { "empty" };
    if aged {
        let t = Instant::now();
        let rows = age_ledger(&env.state_dir().join("cryod.db"), a.sessions);
        let items = done_todos(
            a.done_todos,
            |k, at| serde_json::json!({"id": k, "text": format!("done {k}"), "done": true, "claimed": false, "at": at}),
        );
        let mut items = items;
        items.push(
            serde_json::json!({"id": a.done_todos + 1, "text": "far", "done": false, "claimed": false, "at": FAR}),
        );
        std::fs::write(first.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
        archive_messages(&first, a.messages);
        eprintln!(
            "cryo, aged: {rows} sessions in the ledger, {} done TODOs, {} archived messages, written in {:.1} s",
            a.done_todos,
            a.messages,
            t.elapsed().as_secs_f64()
        );
    }
    let db = std::fs::metadata(env.state_dir().join("cryod.db")).map(|m| m.len()).unwrap_or(0);
    // Start-up: the spawn until the daemon lists its chambers.
    let mut startups = Vec::new();
    let mut daemon = None;
    for _ in 0..a.starts.max(1) {
        if let Some(mut d) = daemon.take() {
            let d: &mut cryo_tests::Daemon = &mut d;
            d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
        }
        let t = Instant::now();
        let d = env.spawn_daemon(&[]);
        wait_serving(&env);
        startups.push(t.elapsed().as_secs_f64() * 1000.0);
        daemon = Some(d);
    }
    let pid = daemon.as_ref().unwrap().pid();
    let rss_start = settled_rss(&[pid]);
    // The operator's commands, process start to exit.
    let timed = |args: &[&str]| cryoctl_times(&env, a.runs, args);
    let status = timed(&["chamber", "status", &names[0]]);
    let list = timed(&["chamber", "list"]);
    let usage = timed(&["usage"]);
    // Wakes of the measured chamber at whole seconds, added to its todo.json
    // as it is now.
    let due: Vec<i64> = (0..a.wakes as i64).map(|k| second_after(2) + k * a.every as i64).collect();
    let mut items: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(first.join("todo.json")).unwrap()).unwrap();
    let high = items.iter().filter_map(|t| t["id"].as_u64()).max().unwrap_or(0);
    for (k, at) in due.iter().enumerate() {
        let at = rfc3339_ns(*at as i128 * 1_000_000_000);
        items.push(serde_json::json!({"id": high + 1 + k as u64, "text": format!("wake {k}"), "done": false, "claimed": false, "at": at}));
    }
    let tmp = first.join(".todo.json.bench");
    std::fs::write(&tmp, serde_json::to_string(&items).unwrap()).unwrap();
    std::fs::rename(&tmp, first.join("todo.json")).unwrap();
    wait_for_wakes(std::slice::from_ref(&first), std::slice::from_ref(&due), 0);
    wait_until_within(Duration::from_secs(60), "the last session's hibernate", || {
        times(&first, "hibernate.txt").len() >= a.wakes
    });
    let rss_after = settled_rss(&[pid]);
    if std::env::var_os("CRYO_BENCH_DEBUG").is_some() {
        eprintln!("{}", env.daemon_log());
    }
    let kept = std::fs::metadata(first.join("todo.json")).map(|m| m.len()).unwrap_or(0);
    println!(
        "\ncryo, {world} store: {} chambers, ledger file {:.1} MB; the measured chamber's todo.json {:.1} kB after the wakes",
        a.chambers,
        db as f64 / 1e6,
        kept as f64 / 1e3
    );
    let mut f = Figures::new();
    lateness_p95(&mut f, &first, &due);
    p50_p95(&mut f, "todo_list", "cryo-agent todo list", agent_times(&first, "list.txt"));
    p50_p95(&mut f, "todo_add", "cryo-agent todo add", agent_times(&first, "add.txt"));
    p50_p95(&mut f, "hibernate", "cryo-agent hibernate", agent_times(&first, "hibernate.txt"));
    p50_p95(&mut f, "status", "cryoctl chamber status NAME", status);
    p50_p95(&mut f, "list", "cryoctl chamber list", list);
    p50_p95(&mut f, "usage", "cryoctl usage", usage);
    p50_p95(&mut f, "startup", "cryod start-up (until it lists)", startups);
    println!("  resident memory                    {rss_start:.1} MB after start, {rss_after:.1} MB after the wakes");
    f.insert("rss_start_mb".into(), rss_start.into());
    f.insert("rss_after_mb".into(), rss_after.into());
    f.insert("ledger_bytes".into(), db.into());
    if aged {
        drop(daemon);
        keep_if_asked(env);
    }
    f
}

/// With `CRYO_BENCH_KEEP` set, leaves `env`'s world on disk (its cryod
/// stopped) and says where, to profile it by hand afterwards.
pub(crate) fn keep_if_asked(env: Env) {
    if std::env::var_os("CRYO_BENCH_KEEP").is_some() {
        eprintln!("cryo-bench: the world is kept at {}", env.root().display());
        std::mem::forget(env);
    }
}

/// `n` done TODOs made by `item(id, at)`, finished over the years before now
/// (`at` RFC 3339, an hour apart).
pub fn done_todos(n: usize, item: impl Fn(usize, String) -> serde_json::Value) -> Vec<serde_json::Value> {
    let start = now_ns() - (n as i128 + 1) * 3_600_000_000_000;
    (1..=n).map(|k| item(k, rfc3339_ns(start + k as i128 * 3_600_000_000_000))).collect()
}

/// `n` messages in `dir`'s `messages/inbox/archive/`, as read ones are.
pub fn archive_messages(dir: &Path, n: usize) {
    let archive = dir.join("messages/inbox/archive");
    std::fs::create_dir_all(&archive).unwrap();
    for k in 0..n {
        let body = format!("---\nfrom: bench\nsubject: old {k}\n---\n\nan old message, {k}\n");
        std::fs::write(archive.join(format!("{k:07}-bench.md")), body).unwrap();
    }
}

/// Writes `sessions` ended sessions into the SQLite ledger at `db` (cryod
/// stopped), spread evenly over its chambers: one a day each, the newest a
/// minute ago, so each chamber's run back years, every day of them has a
/// rollup row, and this week and this month have their share. Each session
/// costs a cent on account `other` (a `sh` agent's). Then sums them into
/// `usage_days` and `usage_accounts` the way migration 10 did for the
/// sessions before it.
/// Returns the rows written.
fn age_ledger(db: &Path, sessions: usize) -> usize {
    let mut c = rusqlite::Connection::open(db).unwrap();
    c.pragma_update(None, "cache_size", -262_144).unwrap();
    let chambers: Vec<i64> = {
        let mut st = c.prepare("SELECT id FROM chambers ORDER BY id").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let per = sessions / chambers.len().max(1);
    let now = (now_ns() / 1_000_000_000) as i64;
    let tx = c.transaction().unwrap();
    {
        let mut st = tx
            .prepare(
                "INSERT INTO sessions (chamber_id, number, wake_id, trigger, reasons, claimed, due_at, created_at,
                     started_at, lateness_ms, pid, ended_at, outcome, model, input_tokens, output_tokens,
                     cached_tokens, cost_usd, provider)
                 VALUES (?1, ?2, ?3, 'todo', '[\"todo\"]', '[]', ?4, ?4, ?4, 3, 4242, ?5, 'hibernated',
                     'bench-model', 12000, 800, 9000, 0.01, 'other')",
            )
            .unwrap();
        let at = |s: i64| rfc3339_ns(s as i128 * 1_000_000_000);
        // Day by day, so the ledger's index by end time grows in order.
        for k in 1..=per as i64 {
            for (i, id) in chambers.iter().enumerate() {
                let ended = now - (per as i64 - k) * 86_400 - 60 - i as i64;
                let wake = format!("aged-{id}-{k}");
                st.execute(rusqlite::params![id, k, wake, at(ended - 120), at(ended)]).unwrap();
            }
        }
    }
    tx.execute_batch(
        "DELETE FROM usage_days;
         INSERT INTO usage_days
            SELECT chamber_id, substr(ended_at, 1, 10), coalesce(provider, ''), coalesce(model, ''), count(*),
                coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), coalesce(sum(cached_tokens), 0),
                coalesce(sum(cost_usd), 0)
            FROM sessions WHERE ended_at IS NOT NULL GROUP BY 1, 2, 3, 4;
         DELETE FROM usage_accounts;
         INSERT INTO usage_accounts
            SELECT provider, day, sum(sessions), sum(input_tokens), sum(output_tokens), sum(cached_tokens),
                sum(cost_usd)
            FROM usage_days GROUP BY 1, 2;",
    )
    .unwrap();
    tx.commit().unwrap();
    // No ANALYZE: cryod runs none, so a store aged in use has no statistics.
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    per * chambers.len()
}
