//! The scenarios on the seed system (`cargo install cryochamber --root DIR`,
//! a measuring aid only: nothing of it is linked or copied). It runs one
//! `cryo` daemon per chamber, each with its own socket; the bench drives it
//! with its own `cryo init`, `cryo start`, `cryo ps`, `cryo status` and
//! `cryo-agent`, and starts its daemons (`cryo daemon` in the chamber) the
//! way its service manager would.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cryo_tests::wait_until_within;
use nix::sys::signal::Signal;

use crate::measure::*;
use crate::scripts;

/// A private HOME with the seed system's chambers in it.
pub struct Seed {
    bin: PathBuf,
    root: tempfile::TempDir,
    dirs: Vec<PathBuf>,
    /// The daemons this bench started itself (reaped when dropped).
    children: Mutex<Vec<Child>>,
}

/// How many `cryo init` + `cryo start` run at once while setting up.
const SETUP_WORKERS: usize = 8;

/// The seed's TODO times are naive local times, whole seconds at most; its
/// processes run with `TZ=UTC`, so these are UTC.
fn seed_time(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0).unwrap().naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// Writes the seed's `todo.json` with one pending TODO per time.
fn write_todos(dir: &Path, at: &[String]) {
    let items: Vec<serde_json::Value> = at
        .iter()
        .enumerate()
        .map(|(k, at)| serde_json::json!({"id": k + 1, "text": format!("wake {k}"), "done": false, "claimed": false, "at": at, "created": "2026-01-01T00:00"}))
        .collect();
    std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
}

/// A ping on the seed daemon's socket, as its own client sends one: the
/// daemon's instance id read from `timer.json`, then a connection per
/// request, one JSON line each way.
fn ping(dir: &Path) -> bool {
    let state = std::fs::read_to_string(dir.join("timer.json")).unwrap_or_default();
    let Some(id) = serde_json::from_str::<serde_json::Value>(&state)
        .ok()
        .and_then(|v| v["instance_id"].as_str().map(String::from))
    else {
        return false;
    };
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(dir.join(".cryo/cryo.sock")) else {
        return false;
    };
    // It answers between sessions only; a daemon in a session (or in its
    // retry back-off) is not ready.
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request = serde_json::json!({"cmd": "ping", "instance_id": id}).to_string() + "\n";
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut line = String::new();
    if BufReader::new(s).read_line(&mut line).is_err() {
        return false;
    }
    serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|v| v["ok"] == true)
}

fn remove(dirs: &[PathBuf], files: &[&str]) {
    for d in dirs {
        for f in files {
            let _ = std::fs::remove_file(d.join(f));
        }
    }
}

impl Seed {
    pub fn new(bin: &Path) -> Seed {
        assert!(
            bin.join("cryo").is_file(),
            "no seed system at {}: cargo install cryochamber --root DIR",
            bin.display()
        );
        let root = tempfile::Builder::new().prefix("cyseed").tempdir_in(cryo_tests::scratch()).unwrap();
        std::fs::create_dir_all(root.path().join("home")).unwrap();
        Seed { bin: bin.to_path_buf(), root, dirs: Vec::new(), children: Mutex::new(Vec::new()) }
    }

    fn command(&self, dir: &Path, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.current_dir(dir)
            .env_clear()
            .env("HOME", self.root.path().join("home"))
            .env("XDG_RUNTIME_DIR", self.root.path().join("run"))
            .env("XDG_STATE_HOME", self.root.path().join("state"))
            .env("XDG_CONFIG_HOME", self.root.path().join("config"))
            .env("TZ", "UTC")
            .env("CRYO_NO_SERVICE", "1")
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .stdin(Stdio::null());
        c
    }

    /// Runs `cryo ARGS` in `dir`; it must succeed.
    fn run(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        let out = self.command(dir, "cryo").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "seed: cryo {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Makes `n` chambers whose agent runs `script` and whose `todo.json`
    /// holds `todos` TODOs far in the future, starts them (the seed runs a
    /// first session at `cryo start`), and waits until every first session
    /// ended (the scripts write `ends.txt`) and its agent is gone.
    pub fn chambers(&mut self, n: usize, script: &str, todos: usize) {
        let dirs: Vec<PathBuf> = (0..n).map(|i| self.root.path().join(format!("c{i:05}"))).collect();
        let t = Instant::now();
        std::thread::scope(|s| {
            for w in 0..SETUP_WORKERS {
                let (dirs, this) = (&dirs, &*self);
                s.spawn(move || {
                    for d in dirs.iter().skip(w).step_by(SETUP_WORKERS) {
                        std::fs::create_dir_all(d).unwrap();
                        this.run(d, &["init", "--agent", "sh agent.sh"]);
                        std::fs::write(d.join("agent.sh"), script).unwrap();
                        let far: Vec<String> = (0..todos as i64).map(|k| seed_time(4_070_908_800 + k * 3600)).collect();
                        write_todos(d, &far);
                        this.run(d, &["start"]);
                    }
                });
            }
        });
        self.dirs = dirs;
        wait_until_within(Duration::from_secs(600), "the seed's first sessions to end", || {
            self.dirs.iter().all(|d| d.join("ends.txt").exists()) && self.agents().is_empty()
        });
        eprintln!("seed system: {n} chambers set up in {:.1} s", t.elapsed().as_secs_f64());
    }

    /// Processes in the seed's chambers other than its daemons: agents.
    fn agents(&self) -> Vec<u32> {
        let daemons = self.pids();
        self.in_root().into_iter().filter(|p| !daemons.contains(p)).collect()
    }

    fn in_root(&self) -> Vec<u32> {
        working_in(self.root.path())
    }

    /// Every live process this seed started that runs its `cryo` binary:
    /// its daemons (and any `cryo` command running at the time). Only ours,
    /// by the HOME every one of them is given (a user's own daemons of the
    /// same binary are left alone).
    fn pids(&self) -> Vec<u32> {
        let exe = std::fs::canonicalize(self.bin.join("cryo")).unwrap();
        let mut home = b"HOME=".to_vec();
        home.extend_from_slice(self.root.path().join("home").as_os_str().as_encoded_bytes());
        let ours = |p: &u32| {
            std::fs::read(format!("/proc/{p}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == home))
        };
        all_pids()
            .filter(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe))
            .filter(ours)
            .collect()
    }

    /// Sends `signal` to every daemon and waits until they are gone.
    fn stop(&self, signal: Signal) {
        for p in self.pids() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), signal);
        }
        wait_until_within(Duration::from_secs(120), "the seed daemons to exit", || self.pids().is_empty());
        for c in self.children.lock().unwrap().iter_mut() {
            let _ = c.try_wait();
        }
    }

    /// Starts every chamber's daemon at once, as its service manager would
    /// (`cryo daemon` in the chamber, output appended to `cryo.log`).
    fn launch(&self) {
        let mut children = self.children.lock().unwrap();
        for d in &self.dirs {
            let log = std::fs::OpenOptions::new().append(true).create(true).open(d.join("cryo.log")).unwrap();
            let child =
                self.command(d, "cryo").arg("daemon").stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
            children.push(child);
        }
    }

    /// Waits until every daemon answers on its socket, asking all of them
    /// at once (one thread each: a ping of the seed takes up to a quarter of
    /// a second, so asking in turn would measure the asking).
    fn wait_responding(&self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        std::thread::scope(|s| {
            for d in &self.dirs {
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn_scoped(s, move || {
                        while !ping(d) {
                            assert!(Instant::now() < deadline, "seed daemon in {} never answered", d.display());
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    })
                    .unwrap();
            }
        });
    }
}

impl Drop for Seed {
    /// Kills its daemons and agents (its own `cryo cancel` takes seconds
    /// each, too slow for a thousand); their state lives in the temporary
    /// folder.
    fn drop(&mut self) {
        kill_all(self.pids().into_iter().chain(self.in_root()));
        for c in self.children.get_mut().unwrap().iter_mut() {
            let _ = c.wait();
        }
    }
}

/// Wake lateness on the seed system: the same schedule (whole seconds) and
/// agent script; the daemons are restarted with the schedule in place (they
/// read `todo.json` when they start and after each session).
pub fn lateness(bin: &Path, wakes: usize, chambers: usize, spread: u64) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, scripts::LATENESS, 1);
    seed.stop(Signal::SIGTERM);
    remove(&seed.dirs, &["starts.txt", "ends.txt"]);
    let due = schedule(chambers, wakes.div_ceil(chambers), spread, second_after(3 + chambers as i64 / 50));
    for (d, due) in seed.dirs.iter().zip(&due) {
        write_todos(d, &due.iter().map(|s| seed_time(*s)).collect::<Vec<_>>());
    }
    seed.launch();
    seed.wait_responding();
    wait_for_wakes(&seed.dirs, &due, 0);
    println!("\nseed system: wake lateness, {chambers} chambers, one daemon each");
    lateness_figures(&seed.dirs, &due)
}

/// The seed system at rest: one `cryo` daemon per chamber, restarted to
/// measure start-up (every daemon answering on its socket).
pub fn idle(bin: &Path, chambers: usize, todos: usize, seconds: u64) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, scripts::IDLE, todos);
    seed.stop(Signal::SIGTERM);
    let t = Instant::now();
    seed.launch();
    seed.wait_responding();
    let startup = t.elapsed();
    let ps = seed.pids();
    println!("\nseed system: {} daemons for {chambers} chambers x {todos} TODOs (memory summed)", ps.len());
    at_rest(&ps, seconds, startup)
}

/// The inbox scenario on the seed system: the same agent script and the same
/// messages, one at a time, round robin over its chambers.
pub fn inbox(bin: &Path, messages: usize, chambers: usize) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, scripts::INBOX, 1);
    let count = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default().lines().count();
    let per = messages.div_ceil(chambers);
    let mut written: Vec<Vec<i128>> = vec![Vec::new(); chambers];
    for k in 0..per {
        for (i, d) in seed.dirs.iter().enumerate() {
            written[i].push(write_message(d, k));
            wait_until_within(Duration::from_secs(60), "the seed to answer", || count(d, "ends.txt") >= k + 2);
        }
    }
    println!(
        "\nseed system: inbox latency ({} messages over {chambers} chambers, one daemon each, one at a time)",
        per * chambers
    );
    // The first line of each file is the session `cryo start` ran.
    inbox_figures(&seed.dirs, &written, 1)
}

/// The control plane on the seed system: `cryo ps` (its list of chambers'
/// daemons), `cryo status` in a chamber, `cryo-agent todo list` in a session,
/// and a ping on a daemon's socket (a new connection per request: its
/// protocol).
pub fn control(bin: &Path, chambers: usize, runs: usize) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, &scripts::control(runs), 1);
    let first = seed.dirs[0].clone();
    let timed = |args: &[&str]| -> Vec<f64> {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                seed.run(&first, args);
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect()
    };
    let listed = String::from_utf8_lossy(&seed.run(&first, &["ps"]).stdout).lines().count();
    assert_eq!(listed, chambers, "seed: cryo ps lists every daemon");
    let list = timed(&["ps"]);
    let status = timed(&["status"]);
    std::fs::write(first.join("measure"), "").unwrap();
    write_message(&first, 0);
    let agent = agent_calls(&first, runs);
    // Its ping takes about a quarter of a second: `runs` of them, not 1000.
    let rtt: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            assert!(ping(&first));
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    println!("\nseed system: control plane ({chambers} chambers, one daemon each; {runs} runs each)");
    let mut f = Figures::new();
    timing(&mut f, "list", "cryo ps", list, &format!(" (lists the {chambers} daemons)"));
    timing(&mut f, "status", "cryo status (in the chamber)", status, "");
    timing(&mut f, "agent_call", "cryo-agent todo list", agent, " (inside a session)");
    timing(&mut f, "rtt_connect", "ping, new connection", rtt, &format!(" ({runs} calls)"));
    f
}

/// The burst on the seed system: every chamber's TODO moved to the same
/// instant just past while its daemons are down, then all daemons started.
/// It has no session limit (each daemon runs its own chamber).
pub fn burst(bin: &Path, chambers: usize) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, scripts::BURST, 1);
    seed.stop(Signal::SIGTERM);
    remove(&seed.dirs, &["runs.txt", "ends.txt"]);
    let instant = seed_time(second_after(-2));
    for d in &seed.dirs {
        write_todos(d, std::slice::from_ref(&instant));
    }
    let t = Instant::now();
    seed.launch();
    wait_until_within(Duration::from_secs(600), "every seed chamber to run", || {
        seed.dirs.iter().all(|d| d.join("ends.txt").exists())
    });
    let took = t.elapsed();
    println!("\nseed system: burst ({chambers} chambers due at once, one daemon each)");
    burst_figures(&seed.dirs, took, None)
}

/// The mail storm on the seed system: one daemon per chamber, the same
/// messages written at once, the same agent.
pub fn storm(bin: &Path, chambers: usize, per: usize, work_ms: u64) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, &scripts::storm(work_ms), 1);
    let t0 = write_storm(&seed.dirs, per);
    wait_until_within(Duration::from_secs(600), "the seed to answer every message of the storm", || {
        storm_settled(&seed.dirs, per)
    });
    println!("\nseed system: mail storm ({per} messages to each of {chambers} chambers at once, one daemon each)");
    storm_figures(&seed.dirs, t0)
}

/// Recovery on the seed system: `running` chambers in a session (woken by a
/// message), every daemon SIGKILLed, then all started again; time until
/// every daemon answers.
pub fn recovery(bin: &Path, chambers: usize, running: usize) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(chambers, scripts::RECOVERY, 1);
    let busy = &seed.dirs[..running];
    for (k, d) in busy.iter().enumerate() {
        std::fs::write(d.join("work"), "").unwrap();
        write_message(d, k);
    }
    wait_until_within(Duration::from_secs(60), "the seed's sessions to run", || {
        busy.iter().all(|d| d.join("pids.txt").exists())
    });
    seed.stop(Signal::SIGKILL);
    let t = Instant::now();
    seed.launch();
    seed.wait_responding();
    let ready = t.elapsed();
    println!("\nseed system: recovery (SIGKILL of its {chambers} daemons with {running} sessions running)");
    recovered(ready, "every daemon answering", busy)
}

/// The history scenario on the seed system, on the aged chamber alone (one
/// daemon: it has no shared ledger to age, and one chamber's daemon is what
/// serves that chamber): its `todo.json` with `a.done_todos` done TODOs and
/// `a.messages` archived messages; start-up (`a.starts` launches until it
/// answers a ping), `cryo status` and `cryo ps`, the same wakes and agent
/// calls, and its daemon's resident memory. It has no `usage`.
pub fn history(bin: &Path, a: &Aging) -> Figures {
    let mut seed = Seed::new(bin);
    seed.chambers(1, scripts::HISTORY, 1);
    seed.stop(Signal::SIGTERM);
    let dir = seed.dirs[0].clone();
    remove(&seed.dirs, &["starts.txt", "ends.txt", "list.txt", "add.txt", "hibernate.txt"]);
    let t = Instant::now();
    let far = serde_json::json!({"id": a.done_todos + 1, "text": "far", "done": false, "claimed": false,
        "at": seed_time(4_070_908_800), "created": "2026-01-01T00:00"});
    let mut items = crate::cryo::done_todos(a.done_todos, |k, at| {
        let unix = chrono::DateTime::parse_from_rfc3339(&at).unwrap().timestamp();
        serde_json::json!({"id": k, "text": format!("done {k}"), "done": true, "claimed": false,
            "at": seed_time(unix), "created": seed_time(unix - 3600)})
    });
    items.push(far);
    std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
    crate::cryo::archive_messages(&dir, a.messages);
    eprintln!(
        "seed system, aged chamber: {} done TODOs, {} archived messages, written in {:.1} s",
        a.done_todos,
        a.messages,
        t.elapsed().as_secs_f64()
    );
    let mut startups = Vec::new();
    for k in 0..a.starts.max(1) {
        if k > 0 {
            seed.stop(Signal::SIGTERM);
        }
        let t = Instant::now();
        seed.launch();
        seed.wait_responding();
        startups.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let rss_start = settled_rss(&seed.pids());
    let timed = |args: &[&str]| -> Vec<f64> {
        (0..a.runs)
            .map(|_| {
                let t = Instant::now();
                seed.run(&dir, args);
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect()
    };
    let status = timed(&["status"]);
    let list = timed(&["ps"]);
    // The wakes: it reads todo.json when it starts (and after each session).
    seed.stop(Signal::SIGTERM);
    let mut items: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("todo.json")).unwrap()).unwrap();
    let high = items.iter().filter_map(|t| t["id"].as_u64()).max().unwrap_or(0);
    let due: Vec<i64> = (0..a.wakes as i64).map(|k| second_after(3) + k * a.every as i64).collect();
    for (k, at) in due.iter().enumerate() {
        items.push(serde_json::json!({"id": high + 1 + k as u64, "text": format!("wake {k}"), "done": false,
            "claimed": false, "at": seed_time(*at), "created": "2026-01-01T00:00"}));
    }
    std::fs::write(dir.join("todo.json"), serde_json::to_string(&items).unwrap()).unwrap();
    seed.launch();
    seed.wait_responding();
    wait_for_wakes(std::slice::from_ref(&dir), std::slice::from_ref(&due), 0);
    wait_until_within(Duration::from_secs(120), "the seed's last hibernate", || {
        times(&dir, "hibernate.txt").len() >= a.wakes
    });
    let rss_after = settled_rss(&seed.pids());
    println!("\nseed system, aged chamber: one daemon, its todo.json with {} done TODOs", a.done_todos);
    let mut f = Figures::new();
    lateness_p95(&mut f, &dir, &due);
    p50_p95(&mut f, "todo_list", "cryo-agent todo list", agent_times(&dir, "list.txt"));
    p50_p95(&mut f, "todo_add", "cryo-agent todo add", agent_times(&dir, "add.txt"));
    p50_p95(&mut f, "hibernate", "cryo-agent hibernate", agent_times(&dir, "hibernate.txt"));
    p50_p95(&mut f, "status", "cryo status (in the chamber)", status);
    p50_p95(&mut f, "list", "cryo ps (its one daemon)", list);
    p50_p95(&mut f, "startup", "daemon start-up (until a ping answers)", startups);
    println!("  resident memory                    {rss_start:.1} MB after start, {rss_after:.1} MB after the wakes");
    f.insert("rss_start_mb".into(), rss_start.into());
    f.insert("rss_after_mb".into(), rss_after.into());
    f
}
