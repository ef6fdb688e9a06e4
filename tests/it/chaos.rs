//! Issue 5, the chaos test: chambers whose agents receive, send, add TODOs and
//! hibernate, while a driver writes mail and kills cryod with SIGKILL at
//! random moments and restarts it. At the end the invariants are checked from
//! the chamber files alone.
//!
//! `CRYO_CHAOS_CYCLES=N` runs a longer soak (default 100 cycles).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use cryo_tests::{Chamber, Env};
use nix::sys::signal::Signal;

const AGENT: &str = r#"
echo "$CRYO_WAKE_ID" >> wakes.txt
tries=0
while [ $tries -lt 40 ]; do
  tries=$((tries + 1))
  cryo-agent receive > /dev/null 2>&1
  cryo-agent send "reply from $CRYO_WAKE_ID" > /dev/null 2>&1
  if [ ! -e "added-$CRYO_WAKE_ID" ]; then
    if cryo-agent todo add "t-$CRYO_WAKE_ID" --at +1h > /dev/null 2>&1; then
      echo "t-$CRYO_WAKE_ID" >> added.txt
      touch "added-$CRYO_WAKE_ID"
    fi
  fi
  cryo-agent hibernate > /dev/null 2>&1 && exit 0
  sleep 0.05
done
exit 1
"#;

/// A small deterministic random source (xorshift), seeded from the clock so
/// runs differ; the seed is printed to replay a failure.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn message_files(c: &Chamber, folder: &str) -> Vec<(String, String)> {
    c.messages(folder)
}

#[test]
fn chaos_sigkill_at_random_moments_loses_and_doubles_nothing() {
    let cycles: usize = std::env::var("CRYO_CHAOS_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let seed = std::env::var("CRYO_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::UNIX_EPOCH.elapsed().map(|d| d.as_nanos() as u64).unwrap_or(1) | 1);
    eprintln!("chaos: {cycles} cycles, seed {seed} (CRYO_CHAOS_SEED to replay)");
    let mut rng = Rng(seed);
    let env = Env::new();
    env.daemon_config("max_concurrent_sessions = 3\nstop_grace_seconds = 1\n");
    let mut d = env.start_daemon();
    let chambers: Vec<Chamber> = (0..4).map(|i| env.chamber(&format!("c{i}"), AGENT, "")).collect();
    for c in &chambers {
        env.cryoctl(&["chamber", "start", &c.name]).ok();
    }
    let mut sent: Vec<(usize, String)> = Vec::new();
    let mut kills = 0;
    let start = Instant::now();
    for cycle in 0..cycles {
        let n = 1 + rng.below(3) as usize;
        for _ in 0..n {
            let i = rng.below(chambers.len() as u64) as usize;
            let name = chambers[i].write_inbox(sent.len() % 100, &format!("message {} of cycle {cycle}", sent.len()));
            // write_inbox names by a counter mod 100; make names unique.
            let unique = format!("{:06}-{name}", sent.len());
            let inbox = chambers[i].dir.join("messages/inbox");
            std::fs::rename(inbox.join(&name), inbox.join(&unique)).unwrap_or(());
            sent.push((i, unique));
        }
        std::thread::sleep(Duration::from_millis(rng.below(120)));
        d.signal_and_wait(Signal::SIGKILL);
        kills += 1;
        d = env.start_daemon();
    }
    // Settle: every chamber idle, its mail claimed, nothing due soon.
    let settled = || {
        let list = env.cryoctl(&["chamber", "list", "--json"]).json();
        let soon = cryo_tests::date_utc("+30 seconds");
        list.as_array().unwrap().iter().all(|c| {
            c["state"] == "idle" && c["mail_waiting"] == 0 && c["next_wake"].as_str().is_none_or(|t| t > soon.as_str())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !settled() {
        assert!(
            Instant::now() < deadline,
            "the chambers did not settle:\n{}",
            env.cryoctl(&["chamber", "list"]).stdout
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(d);

    // ---- the invariants, from the files alone ----
    let mut sessions = 0;
    let mut fallbacks = 0;
    let mut replies_total = 0;
    for (i, c) in chambers.iter().enumerate() {
        let archived = message_files(c, "messages/inbox/archive");
        let outgoing: Vec<(String, String)> =
            [message_files(c, "messages/outbox"), message_files(c, "messages/outbox/archive")].concat();
        replies_total += outgoing.len();
        fallbacks += outgoing.iter().filter(|(_, t)| t.contains("from: cryochamber\n")).count();
        // Every message sent to this chamber was claimed exactly once.
        let mine: Vec<&String> = sent.iter().filter(|(j, _)| *j == i).map(|(_, n)| n).collect();
        let archived_names: Vec<&String> = archived.iter().map(|(n, _)| n).collect();
        for name in &mine {
            let copies = archived_names.iter().filter(|a| **a == *name).count();
            let again = format!("{}-1.md", name.trim_end_matches(".md"));
            assert!(copies == 1 && !archived_names.contains(&&again), "{}: {name} claimed {copies} times", c.name);
        }
        assert!(message_files(c, "messages/inbox").is_empty(), "{}: mail left unclaimed", c.name);
        // Every claimed message has at least one reply (the agent's or cryochamber's).
        let in_reply_to: HashSet<String> = outgoing
            .iter()
            .filter_map(|(_, t)| t.lines().find_map(|l| l.strip_prefix("in_reply_to: ")).map(str::to_string))
            .flat_map(|l| l.split(' ').map(str::to_string).collect::<Vec<_>>())
            .collect();
        for (name, _) in &archived {
            assert!(in_reply_to.contains(name), "{}: {name} was claimed but never answered", c.name);
        }
        // No wake id spawned two agents.
        let wakes: Vec<String> = c.read("wakes.txt").lines().map(str::to_string).collect();
        let mut seen = HashMap::new();
        for w in &wakes {
            *seen.entry(w).or_insert(0) += 1;
        }
        let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(doubled.is_empty(), "{}: wake ids spawned twice: {doubled:?}", c.name);
        sessions += wakes.len();
        // No TODO vanished: each one the agent added is in todo.json (or its retry).
        let todos = c.todos();
        let texts: Vec<String> =
            todos.as_array().unwrap().iter().map(|t| t["text"].as_str().unwrap().to_string()).collect();
        for added in c.read("added.txt").lines() {
            assert!(
                texts.iter().any(|t| t == added || t.starts_with(&format!("{added} (attempt"))),
                "{}: TODO {added} vanished",
                c.name
            );
        }
        // Every file parses.
        let ids: HashSet<u64> = todos.as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
        assert_eq!(ids.len(), todos.as_array().unwrap().len(), "{}: duplicate TODO ids", c.name);
        for (name, text) in archived.iter().chain(&outgoing) {
            assert!(text.starts_with("---\n") && text[4..].contains("\n---\n"), "{}: {name} does not parse", c.name);
        }
        let rejected = c.messages("messages/rejected");
        let reasons: Vec<String> = std::fs::read_dir(c.dir.join("messages/rejected"))
            .map(|rd| rd.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok()).collect())
            .unwrap_or_default();
        assert!(
            rejected.is_empty() && reasons.is_empty(),
            "{}: something was rejected: {rejected:?} {reasons:?}",
            c.name
        );
    }
    eprintln!(
        "chaos: {cycles} cycles, {kills} kills, {sessions} sessions, {} messages in, {replies_total} out ({fallbacks} from cryochamber), {:.1} s",
        sent.len(),
        start.elapsed().as_secs_f64()
    );
}
