//! Issue 22: smarter wakes. Pre-check gates (a cheap command decides
//! whether a scheduled wake needs its agent), with scripted agents; session
//! continuity runs with the real CLIs in `agents`.

use cryo_tests::{Chamber, Env, wait_until};

/// Writes its prompt to `prompt-N.txt` and hibernates (with a far TODO).
const AGENT: &str = "printf '%s' \"$1\" > \"prompt-$CRYO_SESSION.txt\"\ncryo-agent receive >/dev/null\ncryo-agent send ok >/dev/null\ncryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n";

/// Says there is work when the file `work` exists (printing it), nothing
/// to do (78) otherwise; counts its runs in `checks`.
const CHECK: &str = "echo run >> checks\nif [ -f work ]; then echo \"found: $(cat work)\"; exit 0; fi\necho 'nothing new since the last look'\nexit 78\n";

fn status(env: &Env, name: &str) -> serde_json::Value {
    env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone()
}

/// A started chamber with a far TODO only, past its first session, and the
/// check script `check.sh`.
fn gated(env: &Env, name: &str, toml: &str) -> Chamber {
    let c = crate::scheduling::quiet_chamber_with(env, name, AGENT, toml);
    std::fs::write(c.dir.join("check.sh"), CHECK).unwrap();
    c
}

fn checks(c: &Chamber) -> usize {
    c.read("checks").lines().count()
}

/// A chamber's `precheck` that finds nothing passes the slot: no agent, the
/// TODO done for it, the pass in the ledger with the check's first line, no
/// failure shown; once it finds work, the agent wakes with its output.
#[test]
fn a_precheck_gates_a_scheduled_wake() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = gated(&env, "c", "precheck = \"sh check.sh\"\n");
    env.cryoctl(&["chamber", "todo", "c", "add", "look at CI", "--at", "+1s"]).ok();
    wait_until("the slot to pass", || status(&env, "c")["passed_total"] == 1);
    let s = status(&env, "c");
    assert_eq!(s["passed"][0]["what"], "skipped", "{s}");
    assert_eq!(s["passed"][0]["reason"], "nothing new since the last look", "{s}");
    assert_eq!(s["passed"][0]["text"], "look at CI", "{s}");
    assert!(s["attention"].is_null() && s["last_result"].is_null(), "a pass is no failure: {s}");
    assert_eq!((c.begun(), checks(&c)), (1, 1), "no agent ran, the check ran once");
    let todos = c.todos();
    let done = todos.as_array().unwrap().iter().find(|t| t["id"] == 2).map(|t| t["done"].clone());
    assert_eq!(done, Some(serde_json::json!(true)), "the one-shot TODO is done for its slot: {todos}");
    assert!(c.cryo_log().contains("TODO 2 passed: its pre-check found nothing to do"), "{}", c.cryo_log());
    let text = env.cryoctl(&["chamber", "status", "c"]).ok().to_string();
    assert!(text.contains("1 slot(s) passed by a pre-check or missed"), "{text}");

    // Now there is work: the agent wakes, the check's output in its prompt.
    std::fs::write(c.dir.join("work"), "2 new failures on main").unwrap();
    env.cryoctl(&["chamber", "todo", "c", "add", "look at CI", "--at", "+1s"]).ok();
    c.wait_ended(2);
    let p = c.read("prompt-2.txt");
    assert!(p.contains("## Pre-check output") && p.contains("found: 2 new failures on main"), "{p}");
    assert_eq!(status(&env, "c")["passed_total"], 1);
}

/// A recurring TODO whose check finds nothing moves on to its next slot.
#[test]
fn a_passed_series_moves_to_its_next_slot() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", AGENT, "precheck = \"sh check.sh\"\n");
    std::fs::write(c.dir.join("check.sh"), CHECK).unwrap();
    c.seed_history();
    let first = cryo_tests::date_utc("-30 seconds");
    std::fs::write(
        c.dir.join("todo.json"),
        format!(r#"[{{"id":1,"text":"poll","done":false,"claimed":false,"at":"{first}","every":"1h"}}]"#),
    )
    .unwrap();
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_until("the slot to pass", || status(&env, "c")["passed_total"] == 1);
    let todos = c.todos();
    let series = &todos.as_array().unwrap()[0];
    assert_eq!(series["done"], false, "{todos}");
    assert_ne!(series["at"].as_str().unwrap(), first, "the series moved on: {todos}");
    assert_eq!(c.begun(), 1);
}

/// A check that fails (any other exit) or runs past `precheck_timeout`
/// never holds a wake back: the agent runs, told why.
#[test]
fn a_failing_or_slow_precheck_fails_open() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = gated(&env, "c", "precheck = \"echo 'gh: not logged in' >&2; exit 4\"\n");
    env.cryoctl(&["chamber", "todo", "c", "add", "look", "--at", "+1s"]).ok();
    c.wait_ended(2);
    let p = c.read("prompt-2.txt");
    assert!(p.contains("PRE-CHECK FAILED: `echo 'gh: not logged in' >&2; exit 4` exited 4: gh: not logged in"), "{p}");

    let slow = gated(&env, "slow", "precheck = \"sleep 30\"\nprecheck_timeout = 1\n");
    env.cryoctl(&["chamber", "todo", "slow", "add", "look", "--at", "+1s"]).ok();
    slow.wait_ended(2);
    let p = slow.read("prompt-2.txt");
    assert!(p.contains("PRE-CHECK FAILED: `sleep 30` timed out after 1s"), "{p}");
}

/// Mail and operators' wakes never run the check; a TODO's own
/// `--precheck` (from cryoctl or the agent) stands for the chamber's.
#[test]
fn mail_and_operators_never_wait_for_a_check_and_todos_carry_their_own() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = gated(&env, "c", "precheck = \"sh check.sh\"\n");
    c.write_inbox(1, "hello");
    c.wait_ended(2);
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    c.wait_ended(3);
    assert_eq!(checks(&c), 0, "no check ran for mail or a wake");

    // The TODO's own check, not the chamber's (which would find work).
    std::fs::write(c.dir.join("work"), "something").unwrap();
    let r = env.cryoctl(&["chamber", "todo", "c", "add", "nightly", "--at", "+1s", "--precheck", "echo idle; exit 78"]);
    r.ok();
    let list = env.cryoctl(&["chamber", "todo", "c", "list", "--json"]).json();
    let todo = list.as_array().unwrap().iter().find(|t| t["text"] == "nightly").cloned().unwrap();
    assert_eq!(todo["precheck"], "echo idle; exit 78", "{list}");
    wait_until("the slot to pass", || status(&env, "c")["passed_total"] == 1);
    assert_eq!(status(&env, "c")["passed"][0]["reason"], "idle");
    assert_eq!((c.begun(), checks(&c)), (3, 0));
}

/// Mail that will not be read at once says so, with when and how to have
/// it read now; `chamber wake` has it read at once.
#[test]
fn mail_that_must_wait_says_when_it_will_be_read() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", "exit 1\n", "");
    c.seed_history();
    let send = |text: &str| env.cryoctl(&["chamber", "send", "c", text, "--json"]).json();
    let stopped = send("are you there?");
    assert!(stopped["waits"].as_str().unwrap().contains("c is stopped"), "{stopped}");
    assert!(stopped["waits"].as_str().unwrap().contains("cryoctl chamber start c"), "{stopped}");
    // Started, the mail wakes the agent, which crashes: the next mail waits.
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(2);
    let held = send("again?");
    let line = held["waits"].as_str().unwrap_or_default().to_string();
    assert!(line.contains("after 1 failed session(s) in a row") && line.contains("cryoctl chamber wake c"), "{held}");
    let text = env.cryoctl(&["chamber", "send", "c", "a third"]).ok().to_string();
    assert!(text.contains("not read yet: after 1 failed session(s)"), "{text}");
    // The operator's wake does not wait for the back-off.
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    c.wait_ended(3);
    env.cryoctl(&["chamber", "pause", "c"]).ok();
    let paused = send("paused?");
    assert!(paused["waits"].as_str().unwrap().contains("cryoctl chamber resume c"), "{paused}");

    // A chamber that reads its mail at once says nothing.
    let ok = gated(&env, "ok", "");
    let r = env.cryoctl(&["chamber", "send", "ok", "hello", "--json"]).json();
    assert!(r["waits"].is_null(), "{r}");
    ok.wait_ended(2);
}

/// A stop while a check runs gives the permit back and ends the check with
/// its whole process group.
#[test]
fn a_stop_ends_a_running_precheck() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = gated(&env, "c", "precheck = \"sleep 300 & echo $! > check.pid; wait\"\n");
    env.cryoctl(&["chamber", "todo", "c", "add", "look", "--at", "+1s"]).ok();
    wait_until("the check to run", || c.read("check.pid").trim().parse::<i32>().is_ok());
    let pid: i32 = c.read("check.pid").trim().parse().unwrap();
    env.cryoctl(&["chamber", "stop", "c"]).ok();
    wait_until("the check's process to end", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
    });
    assert_eq!(c.begun(), 1, "no agent ran");
}

/// Receives its mail into `mail-N.txt`, then hibernates with a summary
/// (`complete` when the file `done` exists) and a far TODO.
const RELAY: &str = "cryo-agent receive > \"mail-$CRYO_SESSION.txt\"\ncryo-agent send ok >/dev/null\ncryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null\nif [ -f done ]; then cryo-agent hibernate --complete --summary \"built v$CRYO_SESSION\"; else cryo-agent hibernate --summary \"looked $CRYO_SESSION\"; fi\n";

/// `[[on_end]]`: a completed session is handed on to another chamber as a
/// message from the first (its summary, its session number), which wakes
/// it; a hibernate that does not match is not; status shows the link.
#[test]
fn a_completed_session_is_handed_on_to_the_next_chamber() {
    let env = Env::new();
    let _d = env.start_daemon();
    let b = env.chamber("b", RELAY, "");
    b.seed_history();
    env.cryoctl(&["chamber", "start", "b"]).ok();
    let a = env.chamber("a", RELAY, "[[on_end]]\nchamber = \"b\"\nwhen = \"completed\"\n");
    std::fs::write(a.dir.join("done"), "").unwrap();
    a.seed_history();
    env.cryoctl(&["chamber", "start", "a"]).ok();
    env.cryoctl(&["chamber", "wake", "a"]).ok();
    a.wait_ended(2);
    b.wait_ended(2);
    let mail = b.read("mail-2.txt");
    assert!(mail.contains("a: session 2 completed the plan"), "{mail}");
    assert!(mail.contains("Session 2 of a ended: completed the plan.") && mail.contains("built v2"), "{mail}");
    let archived = b.messages("messages/inbox/archive");
    assert!(archived.iter().any(|(_, t)| t.contains("from: a\n")), "from the first chamber: {archived:?}");
    wait_until("a's log to say so", || a.cryo_log().contains("handed session 2 on to b (messages/inbox/"));
    let s = status(&env, "a");
    let line = s["handoffs"].as_str().unwrap_or_default();
    assert!(line.starts_with("→ b when completed; last: session 2 → b at "), "{s}");
    assert!(env.cryoctl(&["chamber", "status", "a"]).ok().contains("on end    → b when completed"));

    // A hibernate with more to do is not "completed": nothing is handed on.
    std::fs::remove_file(a.dir.join("done")).unwrap();
    env.cryoctl(&["chamber", "wake", "a"]).ok();
    a.wait_ended(3);
    assert!(!a.cryo_log().contains("handed session 3"), "{}", a.cryo_log());
    assert_eq!(b.begun(), 2, "b was not woken again");
}

/// A loop (a → b → a, on every end) runs, but each link carries at most
/// its `max_per_hour`: the next hand-off waits, and status shows the loop.
#[test]
fn a_loop_of_hand_offs_is_rate_limited_and_shown() {
    let env = Env::new();
    let _d = env.start_daemon();
    let link = |to: &str| format!("[[on_end]]\nchamber = \"{to}\"\nwhen = \"any\"\nmax_per_hour = 1\n");
    // b first (a's link must name a registered chamber); then b's link to a.
    let b = env.chamber("b", RELAY, "");
    let a = env.chamber("a", RELAY, &link("b"));
    let toml = b.dir.join("cryo.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}\n{}", link("a"))).unwrap();
    env.cryoctl(&["chamber", "trust", "b"]).ok();
    for c in [&a, &b] {
        c.seed_history();
        env.cryoctl(&["chamber", "start", &c.name]).ok();
    }
    wait_until("b to take its link", || status(&env, "b")["handoffs"].as_str().is_some_and(|l| l.contains("→ a")));
    env.cryoctl(&["chamber", "wake", "a"]).ok();
    // a(2) → b(2) → a(3); a's link to b carried one this hour: it waits.
    a.wait_ended(3);
    b.wait_ended(2);
    wait_until("a's hand-off to wait", || a.cryo_log().contains("hand-off of session 3 to b waits until"));
    let s = status(&env, "a");
    let line = s["handoffs"].as_str().unwrap_or_default().to_string();
    assert!(line.contains("1 waiting for the rate limit"), "{s}");
    assert!(line.contains("loop: a → b → a"), "{s}");
    assert!(a.cryo_log().contains("a loop of hand-offs: a → b → a"), "{}", a.cryo_log());
    assert_eq!(b.begun(), 2, "b is not woken again within the hour");
}

/// An `[[on_end]]` naming no registered chamber is a config error naming
/// the file and line; once that chamber is registered, the chamber reads
/// its file again and runs.
#[test]
fn a_chain_to_an_unknown_chamber_is_a_config_error_until_it_exists() {
    let env = Env::new();
    let _d = env.start_daemon();
    let a = env.chamber("a", RELAY, "[[on_end]]\nchamber = \"later\"\nwhen = \"failed\"\n");
    let s = status(&env, "a");
    let line = a.read("cryo.toml").lines().position(|l| l.starts_with("chamber = \"later\"")).unwrap() + 1;
    let want = format!("cryo.toml:{line}: [[on_end]] `chamber`: no chamber named \"later\" is registered");
    assert_eq!(s["state"], "faulted", "{s}");
    assert!(s["fault"].as_str().unwrap().contains(&want), "{s}");
    let bad = env.chamber("bad", RELAY, "[[on_end]]\nchamber = \"a\"\nwhen = \"sometimes\"\n");
    let fault = status(&env, "bad")["fault"].as_str().unwrap_or_default().to_string();
    assert!(fault.contains("[[on_end]] `when`: \"sometimes\" is none of"), "{fault}");
    assert!(bad.read("cryo.toml").contains("sometimes"), "the file is left as it was");
    env.chamber("later", RELAY, "");
    wait_until("a to read its cryo.toml again", || status(&env, "a")["state"] == "stopped");
}

/// `chamber schedule`: the coming wakes in the chamber's zone with its UTC
/// offset, their recurrence and gate, a note where a daylight-saving change
/// moves a slot or doubles its hour, and what holds them (a stopped
/// chamber); `cryoctl schedule` lays every chamber on one time line.
#[test]
fn the_schedule_explains_the_coming_wakes() {
    let env = Env::new();
    let _d = env.start_daemon();
    env.chamber("c", AGENT, "timezone = \"Europe/Berlin\"\nprecheck = \"sh check.sh\"\n");
    let todo = |args: &[&str]| {
        let mut a = vec!["chamber", "todo", "c", "add"];
        a.extend_from_slice(args);
        env.cryoctl(&a).ok();
    };
    // The last Sundays of March and October: the EU's clock changes.
    todo(&["spring", "--cron", "30 2 * 3 0L"]);
    todo(&["autumn", "--cron", "30 2 * 10 0L"]);
    todo(&["soon", "--at", "+1h", "--precheck", "test -f work || exit 78"]);
    let r = env.cryoctl(&["chamber", "schedule", "c", "--count", "3", "--json"]).json();
    let wakes = r["wakes"].as_array().unwrap().clone();
    assert_eq!(wakes.len(), 3, "{r}");
    assert_eq!(wakes[0]["text"], "soon", "soonest first: {r}");
    assert_eq!(wakes[0]["precheck"], "test -f work || exit 78", "a TODO's own gate: {r}");
    assert_eq!(wakes[0]["held"].as_str().unwrap(), "the chamber is stopped (cryoctl chamber start c)");
    let by = |t: &str| wakes.iter().find(|w| w["text"] == t).unwrap().clone();
    let spring = by("spring");
    assert_eq!(spring["repeat"], "cron 30 2 * 3 0L");
    assert_eq!(spring["precheck"], "sh check.sh", "the chamber's gate: {spring}");
    assert!(spring["local"].as_str().unwrap().ends_with("T03:00:00+02:00"), "moved to the gap's end: {spring}");
    assert_eq!(spring["zone"], "CEST");
    assert!(spring["note"].as_str().unwrap().contains("does not exist on"), "{spring}");
    let autumn = by("autumn");
    assert!(autumn["local"].as_str().unwrap().ends_with("T02:30:00+02:00"), "{autumn}");
    assert!(autumn["note"].as_str().unwrap().contains("02:30 happens twice"), "{autumn}");
    let text = env.cryoctl(&["chamber", "schedule", "c"]).ok().to_string();
    assert!(text.contains("CEST (UTC+02:00)  TODO 1 \"spring\" · cron 30 2 * 3 0L · gated by `sh check.sh`"), "{text}");
    assert!(text.contains("DST: its time does not exist on"), "{text}");
    // The book's example (docs/src/wakes.md), as it prints.
    env.chamber("nightly", AGENT, "timezone = \"Europe/Berlin\"\nprecheck = \"sh changed.sh\"\n");
    env.cryoctl(&["chamber", "todo", "nightly", "add", "backup", "--cron", "30 2 * 3 0L"]).ok();
    let example = env.cryoctl(&["chamber", "schedule", "nightly", "-n", "2"]);
    cryo_tests::examples::check("docs/src/wakes.md", "cryoctl chamber schedule nightly -n 2", example.ok());

    // Across chambers, on one time line.
    let d = env.chamber("d", AGENT, "");
    d.write_todos(&format!(
        r#"[{{"id":1,"text":"first of all","done":false,"claimed":false,"at":"{}"}}]"#,
        cryo_tests::date_utc("+30 minutes")
    ));
    let all = env.cryoctl(&["schedule", "--json"]).json();
    let order: Vec<(String, String)> = all["wakes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["chamber"].as_str().unwrap().into(), w["text"].as_str().unwrap().into()))
        .collect();
    assert_eq!(order[..2], [("d".into(), "first of all".into()), ("c".into(), "soon".into())], "{all}");
}

/// A slot that came due while cryod was not running is recorded as missed,
/// with that reason, once it runs.
#[test]
fn a_slot_missed_while_cryod_was_down_says_why() {
    let env = Env::new();
    let d = env.start_daemon();
    let c = crate::scheduling::quiet_chamber_with(&env, "c", AGENT, "");
    drop(d);
    c.write_todos(&format!(
        r#"[{{"id":1,"text":"report","done":false,"claimed":false,"at":"{}"}}]"#,
        cryo_tests::date_utc("-20 minutes")
    ));
    let _d = env.start_daemon();
    c.wait_ended(2);
    wait_until("the missed slot in the ledger", || status(&env, "c")["passed_total"] == 1);
    let s = status(&env, "c");
    let p = &s["passed"][0];
    assert_eq!((p["what"].as_str(), p["todo"].as_u64()), (Some("missed"), Some(1)), "{s}");
    let reason = p["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("ran 20m") && reason.contains("late in session 2: cryod was not running (it started at "),
        "{reason}"
    );
    let text = env.cryoctl(&["chamber", "status", "c"]).ok().to_string();
    assert!(text.contains("  missed    TODO 1 due ") && text.contains("cryod was not running"), "{text}");
}
