//! Issue 65: a chamber at rest without a supervisor. A resting chamber
//! freezes (its task and machine let go, its view, schedule and watches
//! kept) and every kind of event boots it again on the same queue: an
//! operator's command, mail, a TODO coming due, a restart of cryod.

use std::time::Duration;

use cryo_tests::{Daemon, Env, wait_until, wait_until_within};

use crate::scheduling::{HIBERNATE, quiet_chamber, quiet_chamber_with};

fn status(env: &Env, name: &str) -> serde_json::Value {
    env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone()
}

/// How many chambers are frozen, as `cryoctl metrics` says.
fn frozen(env: &Env) -> f64 {
    let j = env.cryoctl(&["metrics", "--json"]).json();
    let row = j.as_array().unwrap().iter().find(|s| s["name"] == "cryo_chambers_frozen");
    row.unwrap_or_else(|| panic!("no cryo_chambers_frozen in {j}"))["value"].as_f64().unwrap()
}

/// How many thaws `cryoctl metrics` counts.
fn thaws(env: &Env) -> f64 {
    let j = env.cryoctl(&["metrics", "--json"]).json();
    let row = j.as_array().unwrap().iter().find(|s| s["name"] == "cryo_thaw_seconds" && s["labels"] == "");
    row.unwrap_or_else(|| panic!("no cryo_thaw_seconds in {j}"))["value"].as_f64().unwrap()
}

/// cryod with these variables, its chambers freezing after 300 ms at rest
/// (not 30 s), once it answers.
fn quick_to_freeze(env: &Env, vars: &[(&str, &str)]) -> Daemon {
    let mut all = vec![(cryod::supervisor::TEST_STILL_FOR, "300")];
    all.extend_from_slice(vars);
    let d = env.spawn_daemon_with(&[], &all);
    d.wait_ready(env);
    d
}

/// What a status shows of a chamber at rest, which a freeze and a thaw
/// must not change.
fn at_rest(s: &serde_json::Value) -> serde_json::Value {
    let keys = ["state", "desired", "next_wake", "last_result", "attention", "mail_waiting", "session", "timezone"];
    keys.iter().map(|k| (k.to_string(), s[k].clone())).collect::<serde_json::Map<_, _>>().into()
}

#[test]
fn a_resting_chamber_freezes_and_every_event_thaws_it() {
    let env = Env::new();
    let d = quick_to_freeze(&env, &[]);
    let c = quiet_chamber(&env, "f", HIBERNATE);
    let other = quiet_chamber(&env, "g", HIBERNATE);
    wait_until("both at rest, frozen", || frozen(&env) == 2.0);
    let rested = at_rest(&status(&env, "f"));
    assert_eq!(rested["state"], "idle", "{rested}");
    assert!(rested["next_wake"].is_string(), "{rested}");

    // An operator's wake thaws it; a session runs; it freezes again.
    env.cryoctl(&["chamber", "wake", "f"]).ok();
    c.wait_ended(2);
    wait_until("frozen again after its session", || frozen(&env) == 2.0);
    // Mail: the watcher's event thaws it.
    c.write_inbox(1, "are you there?");
    c.wait_ended(3);
    assert!(c.outbox().len() >= 2, "it answered: {:?}", c.outbox());
    wait_until("frozen again", || frozen(&env) == 2.0);
    // A TODO coming due: the scheduler's event thaws it, on time.
    env.cryoctl(&["chamber", "todo", "f", "add", "soon", "--at", "+3s"]).ok();
    wait_until("frozen with the TODO planned", || frozen(&env) == 2.0);
    c.wait_ended(4);
    let late = status(&env, "f")["sessions"][0]["lateness_ms"].as_i64().expect("lateness recorded");
    assert!(late < 1000, "the thawed wake was {late} ms late");
    // Stopped, and started again from frozen.
    env.cryoctl(&["chamber", "stop", "f"]).ok();
    wait_until("frozen, stopped", || frozen(&env) == 2.0 && status(&env, "f")["desired"] == "stopped");
    env.cryoctl(&["chamber", "start", "f"]).ok();
    wait_until("started again", || status(&env, "f")["desired"] == "started");
    wait_until("frozen, started", || frozen(&env) == 2.0);
    let s = status(&env, "f");
    assert!(s["next_wake"].is_string() && s["attention"].is_null(), "{s}");
    // The other chamber never woke: a thaw is one chamber's; and none
    // boots over and over.
    assert_eq!(other.ended(), 1, "{}", other.cryo_log());
    let n = thaws(&env);
    assert!((4.0..=30.0).contains(&n), "{n} thaws for four sessions and a few commands");

    // A restart: the frozen chambers stop at once and come back as they were.
    let before = at_rest(&status(&env, "g"));
    let mut d = d;
    let stopped = std::time::Instant::now();
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    assert!(stopped.elapsed() < Duration::from_secs(10), "a stop took {:?}", stopped.elapsed());
    let _d = env.start_daemon();
    wait_until_within(Duration::from_secs(30), "g back", || at_rest(&status(&env, "g")) == before);
    assert!(!c.cryo_log().contains("interrupted"), "{}", c.cryo_log());
}

/// A hostile hand on frozen chambers' files, as between sessions: a flood
/// of mail thaws its chamber a few times, not once a message; a link and a
/// FIFO as `cryo.toml` are refused with one line, as for a live chamber;
/// cryod answers throughout, and a chamber nobody touched stays frozen.
#[test]
fn a_frozen_chamber_takes_a_flood_a_link_and_a_fifo_as_a_live_one_does() {
    let env = Env::new();
    let _d = quick_to_freeze(&env, &[]);
    let flooded = quiet_chamber(&env, "flooded", HIBERNATE);
    let linked = quiet_chamber(&env, "linked", HIBERNATE);
    let fifo = quiet_chamber(&env, "fifo", HIBERNATE);
    let untouched = quiet_chamber(&env, "untouched", HIBERNATE);
    wait_until("all four frozen", || frozen(&env) == 4.0);
    let before = thaws(&env);

    // 300 messages at once: read in a few sessions, each a thaw at most.
    let sent: Vec<String> = (1..=300).map(|n| flooded.write_inbox(n, "flood")).collect();
    let inbox = flooded.dir.join("messages/inbox");
    wait_until("the flood read", || sent.iter().all(|n| !inbox.join(n).exists()));
    wait_until("frozen again after the flood", || frozen(&env) == 4.0);
    let sessions = flooded.ended() - 1;
    let n = thaws(&env) - before;
    assert!(n >= 1.0 && n <= (sessions + 2) as f64, "{n} thaws for {sessions} sessions of a flood");

    // A link to another chamber's cryo.toml, and a FIFO, while frozen.
    std::fs::remove_file(linked.dir.join("cryo.toml")).unwrap();
    std::os::unix::fs::symlink(untouched.dir.join("cryo.toml"), linked.dir.join("cryo.toml")).unwrap();
    std::fs::remove_file(fifo.dir.join("cryo.toml")).unwrap();
    nix::unistd::mkfifo(&fifo.dir.join("cryo.toml"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (c, says) in [(&linked, "symbolic link"), (&fifo, "FIFO")] {
        wait_until(&format!("{} faulted", c.name), || status(&env, &c.name)["state"] == "faulted");
        let s = status(&env, &c.name);
        let fault = s["fault"].as_str().unwrap_or_default();
        assert!(fault.contains(says) && fault.lines().count() == 1, "{}: {s}", c.name);
    }
    let at = std::time::Instant::now();
    env.cryoctl(&["chamber", "list"]).ok();
    assert!(at.elapsed() < Duration::from_secs(5), "a FIFO held cryod");
    // Nothing the hand touched woke the untouched chamber, or changed it.
    assert_eq!(untouched.ended(), 1, "{}", untouched.cryo_log());
    assert_eq!(status(&env, "untouched")["state"], "idle");
    assert!(untouched.dir.join("cryo.toml").symlink_metadata().unwrap().is_file());
}

/// Without a file watcher (the user's inotify used up), the folders are
/// looked at every few seconds: a frozen chamber stays frozen through the
/// looks that find nothing new in its folder (a look that told every
/// chamber to read everything again thawed them all), and mail still
/// wakes it.
#[test]
fn a_polled_chamber_stays_frozen_until_its_mail_comes() {
    let env = Env::new();
    let _d = quick_to_freeze(&env, &[("CRYO_TEST_NO_INOTIFY", "1"), ("RUST_LOG", "cryod=debug")]);
    let polled = quiet_chamber(&env, "polled", HIBERNATE);
    wait_until("frozen", || frozen(&env) == 1.0);
    let thawed = || {
        let log = env.daemon_log();
        log.lines().filter(|l| l.contains("a frozen chamber boots again") && l.contains("chamber=polled")).count()
    };
    // Looks: the first tells of what changed since the folders were
    // routed, the next of what its first session changed (a change is told
    // at the two looks after it).
    let looks = || env.daemon_log().matches("the folders looked at").count();
    let settled = looks() + 3;
    wait_until("three looks", || looks() >= settled);
    let before = thawed();
    wait_until("three more looks", || looks() >= settled + 3);
    assert_eq!(thawed(), before, "a look that found nothing thawed it: {}", env.daemon_log());
    assert_eq!(polled.ended(), 1);
    // Its own mail is found by the next look.
    polled.write_inbox(1, "and this");
    polled.wait_ended(2);
    wait_until("frozen again", || frozen(&env) == 1.0);
}

/// A `cryo.toml` warning is logged when it first shows, not at each read
/// of the file: a re-read or a thaw logs a new warning alone, and the file
/// written again as it was logs nothing (at 100,000 chambers every look
/// at the folders logged each one's warnings again).
#[test]
fn a_warning_is_logged_once_not_at_every_read() {
    let env = Env::new();
    let _d = quick_to_freeze(&env, &[]);
    let c = quiet_chamber_with(&env, "w", HIBERNATE, "zulip_poll_interval = 5\n");
    let said =
        |key: &str| env.daemon_log().lines().filter(|l| l.contains(" WARN cryo.toml") && l.contains(key)).count();
    wait_until("frozen", || frozen(&env) == 1.0);
    assert_eq!(said("zulip_poll_interval"), 1, "{}", env.daemon_log());
    // A new warning, written while frozen: only it is said.
    let toml = c.dir.join("cryo.toml");
    let text = format!("{}gh_poll_interval = 5\n", std::fs::read_to_string(&toml).unwrap());
    std::fs::write(&toml, &text).unwrap();
    wait_until("the new warning said", || said("gh_poll_interval") == 1);
    wait_until("frozen again", || frozen(&env) == 1.0);
    // Written again as it is: thawed, read, nothing said.
    let before = thaws(&env);
    std::fs::write(&toml, &text).unwrap();
    wait_until("thawed and frozen again", || thaws(&env) > before && frozen(&env) == 1.0);
    assert_eq!((said("zulip_poll_interval"), said("gh_poll_interval")), (1, 1), "{}", env.daemon_log());
}
