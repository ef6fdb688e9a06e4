//! Issue 60: never silently idle. Every failure leaves a next step (a
//! planned wake, a hold with its end, or a line naming the command that
//! mends it), the same after a restart; mail that lands as a session ends
//! is read by the next one at once; a fault never starts a session.

use std::time::{Duration, Instant};

use cryo_tests::{Env, wait_until, wait_until_telling, wait_until_within};

fn status(env: &Env, name: &str) -> serde_json::Value {
    env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone()
}

/// Issue 60, case 2: a restart forgets nothing a person must do. A failed
/// chamber's attention, its planned retry and its last result read the same
/// after cryod is killed and started again.
#[test]
fn a_restart_keeps_what_a_person_must_do_and_the_next_wake() {
    let env = Env::new();
    let mut d = env.start_daemon();
    let c = env.chamber("c", "cryo-agent send 'on it' >/dev/null\nexit 0\n", "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    wait_until("the failure's line", || status(&env, "c")["attention"].is_string());
    let before = status(&env, "c");
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let _d = env.start_daemon();
    wait_until("the chamber back", || status(&env, "c")["state"] != "stopped");
    let after = status(&env, "c");
    for key in ["attention", "next_wake", "last_result", "desired"] {
        assert_eq!(after[key], before[key], "{key} after the restart: {after}\nbefore: {before}");
    }
    assert!(before["next_wake"].is_string() && before["attention"].is_string(), "{before}");
}

/// Issue 60, case 3: mail that lands while a session ends. Its hibernate
/// is refused for it and the agent leaves (exit 1): no crash, no back-off;
/// the next session reads the mail at once.
#[test]
fn mail_that_lands_as_a_session_ends_is_read_at_once() {
    let env = Env::new();
    let _d = env.start_daemon();
    let script = r#"if [ "$CRYO_SESSION" = 1 ]; then
cryo-agent todo add later --at +1h >/dev/null
cryo-agent send 'working' >/dev/null
while [ ! -e go ]; do sleep 0.05; done
cryo-agent hibernate > refused.txt 2>&1 || exit 1
exit 0
fi
cryo-agent receive > got.txt
cryo-agent send 'answered' >/dev/null
cryo-agent hibernate >/dev/null
"#;
    let c = env.chamber("m", script, "");
    env.cryoctl(&["chamber", "start", "m"]).ok();
    wait_until("session 1 to work", || c.outbox().iter().any(|m| m.contains("working")));
    // The mail lands while session 1 is at work; then it tries to end.
    c.write_inbox(1, "one more thing");
    wait_until("the mail seen", || status(&env, "m")["mail_waiting"] == 1);
    let at = Instant::now();
    std::fs::write(c.dir.join("go"), "").unwrap();
    wait_until_within(Duration::from_secs(30), "session 2 to answer", || c.ended() >= 2);
    assert!(at.elapsed() < Duration::from_secs(15), "the next session came at once, not after a back-off");
    assert!(c.read("refused.txt").contains("unread"), "{}", c.read("refused.txt"));
    let log = c.cryo_log();
    assert!(log.contains("session ended: mail arrived"), "{log}");
    assert!(!log.contains("crashed"), "{log}");
    assert!(c.read("got.txt").contains("one more thing"), "{}", c.read("got.txt"));
    assert!(!c.fallbacks().iter().any(|f| f.contains("crashed")), "{:?}", c.fallbacks());
    assert_eq!(status(&env, "m")["attention"], serde_json::Value::Null);
}

/// Issue 60, case 4: a faulted `cryo.toml` (a typo) never starts a session:
/// mail waits for the mend without a failure counted, and the mend wakes the
/// chamber at once for it.
#[test]
fn a_fault_starts_no_session_and_its_mend_wakes_the_chamber_at_once() {
    let env = Env::new();
    let _d = env.start_daemon();
    let script = "cryo-agent receive >/dev/null\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent send ok >/dev/null\ncryo-agent hibernate >/dev/null\n";
    let c = env.chamber("f", script, "");
    env.cryoctl(&["chamber", "start", "f"]).ok();
    c.wait_ended(1);
    let toml = c.dir.join("cryo.toml");
    let good = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{good}\nmax_atempts = 3\n")).unwrap();
    wait_until("the fault", || status(&env, "f")["state"] == "faulted");
    c.write_inbox(1, "while faulted");
    wait_until("the mail seen", || status(&env, "f")["mail_waiting"] == 1);
    // Nothing starts while it is faulted (a session would only fail).
    let s = status(&env, "f");
    assert_eq!(c.begun(), 1, "{}", c.cryo_log());
    // Issue 61: the fault is one short line with the closest key.
    let fault = s["fault"].as_str().unwrap_or_default();
    assert!(fault.ends_with("unknown key `max_atempts`: did you mean `max_attempts`?"), "{s}");
    assert!(fault.len() < 200 + toml.display().to_string().len(), "{fault}");
    assert!(!c.cryo_log().contains("crashed"), "{}", c.cryo_log());
    // The mend: at once, for the mail that waited.
    let at = Instant::now();
    std::fs::write(&toml, &good).unwrap();
    wait_until_within(Duration::from_secs(30), "the session for the mail", || c.ended() >= 2);
    assert!(at.elapsed() < Duration::from_secs(15), "no back-off after a fault");
    let s = status(&env, "f");
    assert_eq!((s["fault"].is_null(), s["attention"].is_null()), (true, true), "{s}");
}

/// cryod's binary replaced while it runs (an upgrade in place, Linux's
/// `PATH (deleted)`): no session can start, and the chamber's line says
/// that and what to do. It used to say `"sh" not found on PATH`, naming
/// the agent's program for cryod's own.
#[test]
fn a_binary_replaced_under_cryod_is_named_with_the_fix() {
    let env = Env::new();
    let dir = env.path("bin");
    std::fs::create_dir_all(&dir).unwrap();
    for b in ["cryod", "cryo-agent"] {
        std::fs::copy(cryo_tests::bin(b), dir.join(b)).unwrap();
    }
    let _d = env.start_daemon_from(&dir.join("cryod"));
    env.chamber("upgraded", "cryo-agent hibernate --complete\n", "");
    // The upgrade: a new file in the old one's place.
    std::fs::remove_file(dir.join("cryod")).unwrap();
    std::fs::copy(cryo_tests::bin("cryod"), dir.join("cryod")).unwrap();
    env.cryoctl(&["chamber", "start", "upgraded"]);
    let attention = || status(&env, "upgraded")["attention"].as_str().unwrap_or_default().to_string();
    wait_until("the line", || attention().contains("was replaced or removed since cryod started"));
    let line = attention();
    assert!(line.contains("cryoctl daemon stop") && !line.contains("not found on PATH"), "{line}");
}

/// A process that has ended (gone, or a zombie no one reaped yet).
fn ended(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().is_none_or(|rest| rest.trim_start().starts_with(['Z', 'X']))
}

/// A supervisor that panics (a bug of ours) leaves no chamber without one:
/// the session's agent is ended, the chamber says why in its log and is
/// taken up again at once, its session recovered; the new supervisor
/// answers and runs the next session. A second fall soon after waits a
/// while, says so, and is taken up again after it.
#[test]
fn a_supervisor_that_panics_is_started_again_and_says_so() {
    let env = Env::new();
    let d = env.spawn_daemon_with(&[], &[("CRYO_TEST_PANIC", "wake:p")]);
    d.wait_ready(&env);
    let script = r#"echo "$CRYO_SESSION $$" >> sessions.txt
if [ "$CRYO_SESSION" = 1 ]; then while :; do sleep 0.1; done; fi
cryo-agent receive >/dev/null
cryo-agent todo add later --at +1h >/dev/null
cryo-agent hibernate >/dev/null
"#;
    let c = env.chamber("p", script, "");
    env.cryoctl(&["chamber", "start", "p"]).ok();
    wait_until("session 1 at work", || c.read("sessions.txt").starts_with("1 "));
    let agent: i32 = c.read("sessions.txt").split_whitespace().nth(1).unwrap().parse().unwrap();
    // The operator's wake is the one the test makes the supervisor fall on.
    let woke = env.cryoctl(&["chamber", "wake", "p"]);
    assert_ne!(woke.code, Some(0), "the wake fell with its supervisor");
    wait_until("session 1's agent ended", || ended(agent));
    wait_until("the fall in cryo.log", || c.cryo_log().contains("cryod's supervisor of this chamber failed"));
    assert!(c.cryo_log().contains("names this chamber's wake"), "the panic's message: {}", c.cryo_log());
    // Taken up again: mail starts its next session.
    c.write_inbox(1, "are you there?");
    let tell = || {
        let s = env.cryoctl(&["chamber", "status", "p", "--json"]).stdout;
        format!(
            "status: {s}\nsessions.txt:\n{}\ncryo.log:\n{}\ncryod's log:\n{}",
            c.read("sessions.txt"),
            c.cryo_log(),
            env.daemon_log()
        )
    };
    wait_until_telling(
        Duration::from_secs(60),
        "the next session's end",
        || c.read("sessions.txt").lines().count() >= 2 && c.ended() >= 1,
        tell,
    );
    wait_until("a planned wake", || status(&env, "p")["next_wake"].is_string());
    // A second fall soon after: the chamber waits, and says so.
    env.cryoctl(&["chamber", "wake", "p"]);
    wait_until("the wait's line", || c.cryo_log().contains("it starts again in 1 s"));
    wait_until("taken up again after the wait", || {
        let s = status(&env, "p");
        s["attention"].is_null() && s["next_wake"].is_string()
    });
    assert!(env.daemon_log().contains("supervisor failed"), "cryod's log names the fall");
}

/// A chamber whose boot panics at every start (a bug of ours that its
/// files set off) is registered all the same: it answers, its line says
/// what failed and when it is tried again, each try waiting longer, and
/// cryod goes on serving its other chambers. Without the bug it runs.
#[test]
fn a_chamber_whose_boot_panics_says_so_and_keeps_trying() {
    let env = Env::new();
    let mut d = env.start_daemon();
    let script = "cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate >/dev/null\n";
    let (b, ok) = (env.chamber("b", script, ""), env.chamber("ok", script, ""));
    for name in ["b", "ok"] {
        env.cryoctl(&["chamber", "start", name]).ok();
    }
    b.wait_ended(1);
    ok.wait_ended(1);
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let mut d = env.spawn_daemon_with(&[], &[("CRYO_TEST_PANIC", "boot:b")]);
    d.wait_ready(&env);
    let attention = || status(&env, "b")["attention"].as_str().unwrap_or_default().to_string();
    wait_until("the line of a later try", || attention().contains("it starts again in 2 s"));
    assert!(attention().contains("names this chamber's boot"), "{}", attention());
    assert!(b.cryo_log().contains("it starts again now"), "the first try is at once: {}", b.cryo_log());
    // The other chamber is served as ever.
    ok.write_inbox(1, "still there?");
    ok.wait_ended(2);
    // Without the bug, the chamber runs again from where it was.
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let _d = env.start_daemon();
    wait_until("b back, its wake planned", || {
        let s = status(&env, "b");
        s["attention"].is_null() && s["next_wake"].is_string() && s["desired"] == "started"
    });
}
