//! Issue 18, fleet mode: cryod nodes on one real PostgreSQL (started by the
//! harness as `nobody`), sharing one chambers folder, with lease timings
//! scaled down in the defaults' ratios (heartbeat 250 ms, lease 1.5 s: 1:6,
//! as 5 s : 30 s).
//!
//! The agents append `start`/`tick`/`end` lines (chamber, fence, pid, wake
//! id, monotonic time) to their chamber's `trace.log`; after each scenario
//! the traces must show no two sessions of one chamber overlapping, fences
//! that never go back, and each wake started once.
//!
//! `CRYO_FLEET_CYCLES=N` runs the kill-and-restart scenario longer (default 2).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cryo_tests::pg::Postgres;
use cryo_tests::{Chamber, Daemon, Env, wait_until_within};
use cryod::store::postgres::{LeaseTimes, NodeInfo, Postgres as Store};
use cryod::store::{Backend, Desired, NewChamber, WakeRecord};
use nix::sys::signal::Signal;

const AGENT: &str = r#"
t() { read u _ < /proc/uptime; echo "$u"; }
line() { echo "$1 $CRYO_CHAMBER $CRYO_FENCE $$ $CRYO_WAKE_ID $(t)" >> trace.log; }
line start
i=0
while [ $i -lt 3 ]; do line tick; sleep 0.1; i=$((i + 1)); done
cryo-agent todo add "again" --at "+1s" >/dev/null
line end
cryo-agent hibernate >/dev/null
"#;

const HEARTBEAT_MS: u64 = 250;
const LEASE_MS: u64 = 1500;
/// How long a takeover may take: the lease, a claim round, and slack for a
/// loaded machine.
const TAKEOVER: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn node_info(name: &str, ttl: Duration) -> NodeInfo {
    NodeInfo {
        id: format!("{name}-{}", std::process::id()),
        name: name.into(),
        domain: "test".into(),
        host: "localhost".into(),
        pid: std::process::id(),
        socket: "/nonexistent".into(),
        capacity: 4,
        lease: LeaseTimes { heartbeat: ttl / 6, ttl },
    }
}

fn wake(number: u64) -> WakeRecord {
    WakeRecord {
        number,
        wake_id: format!("w{number}-{}", std::process::id()),
        trigger: "todo".into(),
        reasons: "[]".into(),
        claimed: "[]".into(),
        due_at: None,
        created_at: "2026-11-23T00:00:00Z".into(),
    }
}

/// The store on a real PostgreSQL: migrated from empty (twice, as two nodes
/// starting), a chamber's rows written only with the owner's fence, a
/// takeover after expiry (on the database's clock) that fences the old
/// owner, and a lease that cannot be revived.
#[test]
fn fleet_store_migrates_from_empty_and_fences_an_old_owner() {
    let Some(pg) = Postgres::start() else { return };
    let url = pg.url("cryo");
    runtime().block_on(async {
        let ttl = Duration::from_secs(60);
        let a = Store::connect(&url, node_info("a", ttl)).await.expect("node a joins");
        let b = Store::connect(&url, node_info("b", ttl)).await.expect("node b joins (the schema exists)");
        assert_eq!(pg.sql("SELECT max(version) FROM cryo_schema"), cryod::store::postgres::SCHEMA_VERSION.to_string());
        assert_eq!(pg.sql("SELECT count(*) FROM cryo_schema"), "1", "migrated once");

        let new = NewChamber {
            base_name: "c".into(),
            exact_name: false,
            path: "/x/c".into(),
            created_at: "2026-11-23T00:00:00Z".into(),
        };
        let (c, existed) = a.add_chamber(new.clone()).await.unwrap();
        assert!(!existed);
        assert_eq!((c.owner.as_deref(), c.fence, c.home.as_deref()), (Some(a.node_id().as_str()), 1, Some("a")));
        let (again, existed) = b.add_chamber(new.clone()).await.unwrap();
        assert!(existed && again.id == c.id);
        let (other, _) = b.add_chamber(NewChamber { path: "/x/other/c".into(), ..new }).await.unwrap();
        assert_eq!(other.name, "c-2", "names are unique across the fleet");

        a.record_wake(c.fence(), wake(1)).await.expect("the owner writes");
        let e = b.record_wake(c.fence(), wake(2)).await.unwrap_err();
        assert!(e.is_fenced(), "another node with the same token is fenced: {e}");

        // Nothing to take while a's lease is live (b takes only its own).
        let claimed = b.claim().await.unwrap();
        assert!(claimed.taken.iter().all(|r| r.id != c.id), "a live owner's chamber was taken");

        // a's lease runs out on the database's clock: b takes the chamber.
        pg.sql(&format!("UPDATE cryo_nodes SET expires_at = now() - interval '1 second' WHERE id = '{}'", a.node_id()));
        let claimed = b.claim().await.unwrap();
        let taken = claimed.taken.iter().find(|r| r.id == c.id).expect("b takes the expired owner's chamber");
        assert_eq!(taken.fence, 2);
        assert!(!a.renew().await.unwrap(), "an expired lease is not renewed");
        for e in [
            a.record_wake(c.fence(), wake(3)).await.unwrap_err(),
            a.set_desired(c.fence(), Desired::Started).await.unwrap_err(),
            a.session_ended(c.fence(), 1, "t".into(), "ok".into(), "".into()).await.unwrap_err(),
            a.remove_chamber(c.fence()).await.unwrap_err(),
        ] {
            assert!(e.is_fenced(), "{e}");
        }
        assert_eq!(b.open_sessions(Some(c.id)).await.unwrap().len(), 1, "the old owner's open session is recoverable");
        b.session_ended(taken.fence(), 1, "t".into(), "interrupted".into(), "".into()).await.unwrap();
        assert!(b.open_sessions(Some(c.id)).await.unwrap().is_empty());
        let id = b.journal_claim(taken.fence(), 1, vec!["m.md".into()], "t".into()).await.unwrap();
        assert_eq!(b.open_claims(c.id).await.unwrap()[0].id, id);
        b.claim_answered_by_id(taken.fence(), id, "t".into()).await.unwrap();
        assert!(b.open_claims(c.id).await.unwrap().is_empty());
        assert_eq!(pg.sql(&format!("SELECT desired FROM cryo_chambers WHERE id = {}", c.id)), "stopped");
    });
    // A newer schema is refused with one line.
    pg.sql("INSERT INTO cryo_schema (version) VALUES (999)");
    let e = runtime().block_on(Store::connect(&url, node_info("c", Duration::from_secs(60)))).err().unwrap();
    assert!(e.to_string().contains("newer than this cryod"), "{e}");
}

/// One node of a test fleet: its own HOME, socket and role.
struct Node {
    env: Env,
    daemon: Option<Daemon>,
}

impl Node {
    fn new(pg: &Postgres, name: &str) -> Node {
        pg.role(name);
        let env = Env::new();
        env.daemon_config(&format!(
            "max_concurrent_sessions = 4\nstop_grace_seconds = 1\n\n[store]\nurl = \"{}\"\nnode = \"{name}\"\ndomain = \"test\"\nheartbeat_ms = {HEARTBEAT_MS}\nlease_ms = {LEASE_MS}\n",
            pg.url(name)
        ));
        Node { env, daemon: None }
    }

    fn start(&mut self) {
        self.daemon = Some(self.env.start_daemon());
    }

    fn pid(&self) -> i32 {
        self.daemon.as_ref().expect("running").pid() as i32
    }

    fn status(&self) -> serde_json::Value {
        self.env.cryoctl(&["fleet", "status", "--json"]).json()
    }
}

/// Chambers owned per live node name, and how many no live node holds.
fn ownership(n: &Node) -> (HashMap<String, u64>, u64) {
    let s = n.status();
    let mut per = HashMap::new();
    for node in s["nodes"].as_array().unwrap() {
        if node["live"] == true {
            *per.entry(node["name"].as_str().unwrap().to_string()).or_insert(0) += node["chambers"].as_u64().unwrap();
        }
    }
    (per, s["unowned"].as_u64().unwrap())
}

/// One session in a trace: its fence, pid, wake, first and last times.
#[derive(Debug, Clone)]
struct Session {
    fence: i64,
    pid: String,
    wake: String,
    start: f64,
    last: f64,
}

fn sessions(c: &Chamber) -> Vec<Session> {
    let mut out: Vec<Session> = Vec::new();
    let mut by_pid: HashMap<String, usize> = HashMap::new();
    for l in c.read("trace.log").lines() {
        let w: Vec<&str> = l.split(' ').collect();
        assert_eq!(w.len(), 6, "{}: a torn trace line {l:?}", c.name);
        let (fence, pid, wake, t) = (w[2].parse().unwrap(), w[3].to_string(), w[4].to_string(), w[5].parse().unwrap());
        match w[0] {
            "start" => {
                by_pid.insert(pid.clone(), out.len());
                out.push(Session { fence, pid, wake, start: t, last: t });
            }
            _ => {
                let i = *by_pid.get(&pid).unwrap_or_else(|| panic!("{}: a line before its start: {l}", c.name));
                out[i].last = t;
            }
        }
    }
    out
}

/// The invariants, from the files: no two sessions of a chamber overlap,
/// no session of an older fence starts after one of a newer, each wake id
/// started once, and `todo.json` parses.
fn check(chambers: &[Chamber]) -> usize {
    let mut total = 0;
    for c in chambers {
        let mut s = sessions(c);
        s.sort_by(|a, b| a.start.total_cmp(&b.start));
        for pair in s.windows(2) {
            assert!(
                pair[0].last <= pair[1].start,
                "{}: two sessions overlap: {:?} and {:?}\n{}",
                c.name,
                pair[0],
                pair[1],
                c.read("trace.log")
            );
            assert!(pair[0].fence <= pair[1].fence, "{}: an old fence after a newer: {pair:?}", c.name);
        }
        let mut wakes: HashMap<&str, usize> = HashMap::new();
        for x in &s {
            *wakes.entry(&x.wake).or_default() += 1;
        }
        assert!(wakes.values().all(|n| *n == 1), "{}: a wake started twice: {wakes:?}", c.name);
        let todo = c.read("todo.json");
        assert!(todo.is_empty() || serde_json::from_str::<serde_json::Value>(&todo).is_ok(), "{}: todo.json", c.name);
        total += s.len();
    }
    total
}

/// `n` nodes and `chambers` started chambers, registered (and started) on
/// the first node before the others join: they take their share from it
/// (operations on a chamber another node runs are not carried across yet).
fn fleet(pg: &Postgres, n: usize, chambers: usize) -> (Vec<Node>, Vec<Chamber>) {
    let mut nodes: Vec<Node> = (1..=n).map(|i| Node::new(pg, &format!("n{i}"))).collect();
    nodes[0].start();
    let cs = make_chambers(&nodes[0], chambers);
    for node in &mut nodes[1..] {
        node.start();
    }
    (nodes, cs)
}

fn make_chambers(first: &Node, n: usize) -> Vec<Chamber> {
    let cs: Vec<Chamber> = (0..n).map(|i| first.env.chamber(&format!("shared/c{i}"), AGENT, "")).collect();
    for c in &cs {
        first.env.cryoctl(&["chamber", "start", &c.name]).ok();
        first.env.cryoctl(&["chamber", "wake", &c.name]).ok();
    }
    cs
}

fn settle_owned(n: &Node, live: &[&str], total: u64) {
    wait_until_within(TAKEOVER, "every chamber owned by a live node", || {
        let (per, unowned) = ownership(n);
        unowned == 0 && per.values().sum::<u64>() == total && per.keys().all(|k| live.contains(&k.as_str()))
    });
}

fn wait_sessions(cs: &[Chamber], more_than: usize) {
    wait_until_within(TAKEOVER, "sessions to run on the fleet", || {
        cs.iter().map(|c| sessions(c).len()).sum::<usize>() > more_than
    });
}

/// Three nodes share twelve chambers; a node killed with SIGKILL (and
/// restarted, for `CRYO_FLEET_CYCLES` cycles) has its chambers taken over
/// by the others, and no chamber ever runs two sessions at once.
#[test]
fn fleet_a_killed_node_is_taken_over_and_no_chamber_runs_twice() {
    let Some(pg) = Postgres::start() else { return };
    let cycles: usize = std::env::var("CRYO_FLEET_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let (mut nodes, cs) = fleet(&pg, 3, 12);
    settle_owned(&nodes[0], &["n1", "n2", "n3"], 12);
    wait_until_within(TAKEOVER, "each node to run its share", || {
        let (per, _) = ownership(&nodes[0]);
        per.len() == 3 && per.values().all(|n| *n >= 3)
    });
    wait_sessions(&cs, 12);
    let mut takeovers = Vec::new();
    for cycle in 0..cycles {
        let victim = 1 + cycle % 2;
        let before = cs.iter().map(|c| sessions(c).len()).sum::<usize>();
        nodes[victim].daemon.as_mut().unwrap().signal_and_wait(Signal::SIGKILL);
        let killed = Instant::now();
        let survivors: Vec<&str> =
            ["n1", "n2", "n3"].into_iter().filter(|n| *n != format!("n{}", victim + 1)).collect();
        settle_owned(&nodes[0], &survivors, 12);
        takeovers.push(killed.elapsed());
        wait_sessions(&cs, before + 12);
        nodes[victim].start();
    }
    wait_sessions(&cs, cs.iter().map(|c| sessions(c).len()).sum::<usize>() + 6);
    settle_owned(&nodes[0], &["n1", "n2", "n3"], 12);
    // A node stopped with SIGTERM hands its chambers over at once (no
    // waiting for its lease to expire).
    let term = Instant::now();
    nodes[1].daemon.as_mut().unwrap().signal_and_wait(Signal::SIGTERM);
    settle_owned(&nodes[0], &["n1", "n3"], 12);
    let handover = term.elapsed();
    wait_sessions(&cs, cs.iter().map(|c| sessions(c).len()).sum::<usize>() + 6);
    for n in [0, 2] {
        nodes[n].daemon.as_mut().unwrap().signal_and_wait(Signal::SIGTERM);
    }
    let total = check(&cs);
    eprintln!(
        "fleet: {total} sessions over {cycles} kill cycles; takeover after SIGKILL: {takeovers:?}; after SIGTERM: {handover:?} (lease {LEASE_MS} ms)"
    );
}

/// cryod alone is stopped (SIGSTOP) past its lease: its keepers kill its
/// agents before another node may take the chambers, the others take them,
/// and when it continues it writes nothing with its old fences.
#[test]
fn fleet_a_frozen_cryod_loses_its_agents_and_writes_nothing() {
    let Some(pg) = Postgres::start() else { return };
    let (mut nodes, cs) = fleet(&pg, 2, 6);
    settle_owned(&nodes[0], &["n1", "n2"], 6);
    wait_until_within(TAKEOVER, "both nodes to run chambers", || ownership(&nodes[0]).0.len() == 2);
    wait_sessions(&cs, 8);
    let frozen = nodes[1].pid();
    let stale_id = nodes[1].status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["this"] == true)
        .map(|n| n["id"].as_str().unwrap().to_string())
        .unwrap();
    // Freeze it while one of its agents runs.
    let mut running = String::new();
    wait_until_within(TAKEOVER, "a session on the node to freeze", || {
        let owned = pg.sql(&format!("SELECT string_agg(name, ' ') FROM cryo_chambers WHERE owner = '{stale_id}'"));
        let list = nodes[1].env.cryoctl(&["chamber", "list", "--json"]).json();
        let busy = list
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["state"] == "running" && owned.split(' ').any(|n| c["name"].as_str() == Some(n)));
        busy.map(|c| running = c["name"].as_str().unwrap().to_string()).is_some()
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(frozen), Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    settle_owned(&nodes[0], &["n1"], 6);
    let taken = stopped.elapsed();
    let busy = cs.iter().find(|c| c.name == running).unwrap();
    let log = busy.read("cryo-agent.log");
    // The agent ended by itself if it was about to; otherwise its keeper
    // killed it.
    let last = sessions(busy).into_iter().filter(|s| s.fence < 100).max_by(|a, b| a.start.total_cmp(&b.start));
    eprintln!("fleet: froze {running} during {last:?}; keeper: {}", log.contains("stopped vouching"));
    if std::env::var_os("CRYO_FLEET_DEBUG").is_some() {
        eprintln!("{}\n---\n{}", busy.read("trace.log"), log);
    }
    // Every agent the frozen node started is dead by now (its keeper killed
    // it when the deadline passed: before the lease expired in the database).
    for c in &cs {
        let fence: i64 = pg.sql(&format!("SELECT fence FROM cryo_chambers WHERE name = '{}'", c.name)).parse().unwrap();
        let old: Vec<Session> = sessions(c).into_iter().filter(|s| s.fence < fence && agent_alive(&s.pid)).collect();
        assert!(old.is_empty(), "{}: agents of an old owner still run: {old:?}", c.name);
    }
    wait_sessions(&cs, cs.iter().map(|c| sessions(c).len()).sum::<usize>() + 6);
    let writes = |id: &str| pg.sql(&format!("SELECT count(*) FROM cryo_sessions WHERE node = '{id}'"));
    let before = writes(&stale_id);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(frozen), Signal::SIGCONT).unwrap();
    // It notices, drops what it had, and joins again under a new id.
    wait_until_within(TAKEOVER, "the thawed node to join again", || {
        nodes[1].status()["nodes"].as_array().unwrap().iter().any(|n| n["this"] == true && n["id"] != stale_id.as_str())
    });
    assert_eq!(writes(&stale_id), before, "the thawed node wrote with its old id");
    wait_sessions(&cs, cs.iter().map(|c| sessions(c).len()).sum::<usize>() + 6);
    for n in &mut nodes {
        n.daemon.as_mut().unwrap().signal_and_wait(Signal::SIGTERM);
    }
    let total = check(&cs);
    eprintln!("fleet: {total} sessions; chambers of a SIGSTOPped cryod taken over after {taken:?}");
}

fn agent_alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/environ")).is_ok_and(|e| e.contains("CRYO_WAKE_ID="))
}
