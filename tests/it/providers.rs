//! Issue 21: providers. Per-provider concurrency with scripted agents (any
//! agent command bills the account its chamber names); usage, cost and the
//! transcript of the real CLIs are checked in `agents.rs`.

use cryo_tests::{Chamber, Env};

/// The agent's work: its start and end times, with some time between.
const TIMED_AGENT: &str = "date +%s%N > start.txt\ncryo-agent send hi >/dev/null\n\
cryo-agent todo add later --at +1h >/dev/null\nsleep 0.2\ndate +%s%N > end.txt\ncryo-agent hibernate\n";

/// Chambers due at once, each with a TODO long past.
fn due_chamber(env: &Env, name: &str, provider: &str) -> Chamber {
    let c = env.chamber(name, TIMED_AGENT, &format!("[provider]\nname = \"{provider}\"\n"));
    c.seed_history();
    c.write_todos(r#"[{"id":1,"text":"due","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    c
}

fn span(c: &Chamber) -> (u128, u128) {
    (c.read("start.txt").trim().parse().unwrap(), c.read("end.txt").trim().parse().unwrap())
}

#[test]
fn max_concurrent_per_provider_holds_with_five_chambers_due_at_once() {
    let env = Env::new();
    env.daemon_config("max_concurrent_sessions = 4\n\n[providers.p1]\nmax_concurrent = 1\n");
    let _d = env.start_daemon();
    let p1: Vec<Chamber> = (0..5).map(|i| due_chamber(&env, &format!("p1-{i}"), "p1")).collect();
    let other = due_chamber(&env, "other", "p2");
    for c in p1.iter().chain([&other]) {
        env.cryoctl(&["chamber", "start", &c.name, "--no-wait"]).ok();
    }
    for c in p1.iter().chain([&other]) {
        c.wait_ended(2);
    }
    let mut spans: Vec<(u128, u128)> = p1.iter().map(span).collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "two sessions of p1 overlapped: {spans:?}");
    }
    // The other account was not held behind p1's queue.
    let (other_start, _) = span(&other);
    assert!(other_start < spans[4].0, "p2 waited for all of p1: {other_start} vs {spans:?}");
}

/// A provider account's budget (`[providers.NAME.budget]`) counts all its
/// chambers: once one chamber's session used the account's one session of
/// the day, the other is paused before its agent starts.
#[test]
fn a_provider_budget_pauses_every_chamber_of_the_account() {
    let env = Env::new();
    env.daemon_config("[providers.p1.budget]\ndaily_sessions = 1\n");
    let _d = env.start_daemon();
    let (first, second) = (due_chamber(&env, "first", "p1"), due_chamber(&env, "second", "p1"));
    let paused = |name: &str| env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone();
    env.cryoctl(&["chamber", "start", "first"]).ok();
    first.wait_ended(2);
    cryo_tests::wait_until("the first chamber's pause", || paused("first")["state"] == "paused");
    env.cryoctl(&["chamber", "start", "second", "--no-wait"]).ok();
    cryo_tests::wait_until("the second chamber's pause", || paused("second")["state"] == "paused");
    let s = paused("second");
    let why = s["attention"].as_str().unwrap_or_default();
    assert!(why.starts_with("budget reached (p1's daily_sessions = 1, 1 used)"), "{s}");
    assert_eq!(second.begun(), 1, "no agent started for it\n{}", second.cryo_log());
    // Status shows the account's budget and its use.
    let b = &s["budgets"][0];
    assert_eq!(
        (b["who"].as_str(), b["key"].as_str(), b["limit"].as_f64()),
        (Some("p1's"), Some("daily_sessions"), Some(1.0))
    );
    let text = env.cryoctl(&["chamber", "status", "second"]).ok().to_string();
    assert!(text.contains("  budget    ") && text.contains("of p1's daily_sessions (1)") && text.contains("(reached)"));
}

/// At 80% of a budget the chamber says so once, in its outbox, and its
/// status shows the line until the period ends; it keeps running.
#[test]
fn at_eighty_percent_of_a_budget_status_and_the_outbox_say_so() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", TIMED_AGENT, "[budget]\ndaily_sessions = 5\n");
    let status = || env.cryoctl(&["chamber", "status", "c"]).ok().to_string();
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    assert!(status().contains("budget    1 of this chamber's daily_sessions (5), 20%\n"), "{}", status());
    for n in 2..=4 {
        env.cryoctl(&["chamber", "wake", "c"]).ok();
        c.wait_ended(n);
    }
    cryo_tests::wait_until("the 80% notice", || {
        c.outbox().iter().any(|m| m.contains("4 of this chamber's daily_sessions (5) is used"))
    });
    let text = status();
    assert!(text.contains("budget    4 of this chamber's daily_sessions (5), 80% (over 80%)"), "{text}");
    let s = env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0].clone();
    assert_eq!(s["budgets"][0]["used"].as_f64(), Some(4.0), "{s}");
    assert!(s["state"] != "paused" && s["attention"].is_null(), "{s}");
}
