//! Issue 3: the chamber runtime, end to end. Each test runs the real cryod
//! with chambers whose agent is a small shell script calling the real
//! `cryo-agent`, and asserts on the chamber's files.

use std::time::{Duration, Instant};

use cryo_tests::{Chamber, Daemon, Env, wait_until};

/// A daemon and one started chamber running `script`.
fn run_chamber(script: &str, toml_extra: &str) -> (Env, Daemon, Chamber) {
    let env = Env::new();
    let d = env.start_daemon();
    let c = env.chamber("c", script, toml_extra);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    (env, d, c)
}

fn status(env: &Env, name: &str) -> serde_json::Value {
    env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone()
}

const SCHEDULE_AND_SLEEP: &str = "cryo-agent todo add 'later' --at +1h >/dev/null\n";

#[test]
fn a_crash_without_hibernate_is_reported_with_the_log_tail() {
    let script = "echo 'working on it'\necho 'fatal: the sky fell' >&2\nexit 3\n";
    let (env, _d, c) = run_chamber(script, "");
    c.wait_ended(1);
    let log = c.cryo_log();
    assert!(log.contains("agent exited: exit 3"), "{log}");
    assert!(log.contains("session ended: crashed: exit 3"), "{log}");
    let fb = c.fallbacks();
    assert_eq!(fb.len(), 1, "{fb:?}");
    assert!(fb[0].contains("subject: Session 1 crashed before sending anything"), "{}", fb[0]);
    assert!(fb[0].contains("fatal: the sky fell"), "the crash text quotes cryo-agent.log: {}", fb[0]);
    assert_eq!(status(&env, "c")["last_result"], "crashed: exit 3");
}

#[test]
fn a_quick_exit_is_reported_as_likely_misconfiguration() {
    let (env, _d, c) = run_chamber("echo 'error: invalid API key' >&2\nexit 1\n", "");
    c.wait_ended(1);
    let fb = c.fallbacks();
    assert!(fb[0].contains("likely a misconfiguration"), "{}", fb[0]);
    assert!(fb[0].contains("error: invalid API key"), "{}", fb[0]);
    let st = status(&env, "c");
    assert!(st["attention"].as_str().unwrap_or("").contains("misconfiguration"), "{st}");
}

#[test]
fn an_agent_command_that_does_not_exist_cannot_start() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", "", "agent = \"no-such-agent-cli --flag\"");
    let r = env.cryoctl(&["chamber", "start", "c"]);
    let line = r.fails(1);
    assert!(line.contains("\"no-such-agent-cli\" is not found"), "{line}");
    assert_eq!(c.begun(), 0);
    assert_eq!(status(&env, "c")["state"], "stopped");
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    // The agent starts a grandchild, records its pid, and never hibernates.
    let script = "sleep 300 &\necho $! > child.pid\nsleep 300\n";
    let (_env, _d, c) = run_chamber(script, "max_session_duration = 1");
    let start = Instant::now();
    c.wait_ended(1);
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    let log = c.cryo_log();
    assert!(log.contains("session timed out: ending the agent"), "{log}");
    assert!(log.contains("session ended: timed out"), "{log}");
    let pid: i32 = c.read("child.pid").trim().parse().expect("child pid");
    wait_until("the background child to be gone", || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
    });
    assert!(c.fallbacks()[0].contains("timed out before sending anything"), "{:?}", c.fallbacks());
}

/// Issue 60, case 1: an agent that ends (exit 0) without `cryo-agent
/// hibernate`, whether at once or after a while, is its own outcome, whose
/// line names the missing hibernate (never a misconfiguration); its work is
/// tried again (a planned wake, never silence), and once it has failed
/// `max_attempts` times in a row the chamber's attention names the command.
#[test]
fn a_session_that_forgets_to_hibernate_is_told_and_tried_again() {
    let script = "cryo-agent send 'starting' >/dev/null\nexit 0\n";
    let (env, _d, c) = run_chamber(script, "max_attempts = 2");
    c.wait_ended(1);
    let log = c.cryo_log();
    assert!(
        log.contains("session ended: no hibernate: the agent ended (exit 0) without `cryo-agent hibernate`"),
        "{log}"
    );
    assert!(log.contains("its work is tried again at"), "{log}");
    let fb = c.fallbacks();
    assert_eq!(fb.len(), 1);
    assert!(fb[0].contains("subject: Session 1 ended without hibernating\n"), "{}", fb[0]);
    assert!(!fb[0].contains("misconfiguration"), "{}", fb[0]);
    let status = || env.cryoctl(&["chamber", "status", &c.name, "--json"]).json()[0].clone();
    let s = status();
    assert!(s["next_wake"].is_string(), "a wake is planned: {s}");
    assert!(s["attention"].as_str().is_some_and(|a| a.contains("without `cryo-agent hibernate`")), "{s}");
    // The second in a row: cryo stops trying and says what runs it again.
    env.cryoctl(&["chamber", "wake", &c.name]).ok();
    c.wait_ended(2);
    wait_until("the attention that names the command", || {
        status()["attention"].as_str().is_some_and(|a| a.contains(&format!("`cryoctl chamber wake {}`", c.name)))
    });
    let s = status();
    assert!(s["attention"].as_str().unwrap().starts_with("2 sessions in a row ended without hibernating"), "{s}");
    // Issue 61: `chamber list` off a terminal cuts the long line (status has it whole).
    let list = env.cryoctl(&["chamber", "list"]).ok().to_string();
    let row = list.lines().find(|l| l.starts_with(&c.name)).unwrap();
    assert!(row.contains("! 2 sessions in a row") && row.contains('…') && row.chars().count() < 140, "{list}");
}

#[test]
fn a_multi_session_plan_completes_on_session_three() {
    let script = r#"
n=$CRYO_SESSION
cryo-agent send "step $n" >/dev/null
if [ "$n" -lt 3 ]; then
  cryo-agent todo add "step $((n + 1))" --at "+1s" >/dev/null
  cryo-agent hibernate --summary "step $n done"
else
  cryo-agent hibernate --complete --summary "all done"
fi
"#;
    let (env, _d, c) = run_chamber(script, "");
    c.wait_ended(3);
    let log = c.cryo_log();
    assert!(log.contains("--- CRYO SESSION 2 |") && log.contains("trigger: scheduled (todo:1)"), "{log}");
    assert!(log.contains("session ended: completed the plan: all done"), "{log}");
    let st = status(&env, "c");
    assert_eq!(st["session"], 3);
    assert_eq!(st["next_wake"], serde_json::Value::Null, "a completed plan has no next wake");
    let todos = c.todos();
    assert!(todos.as_array().unwrap().iter().all(|t| t["done"] == true), "{todos}");
    assert!(c.fallbacks().is_empty());
    // Nothing else runs: the chamber sleeps until mail arrives.
    assert_eq!(c.begun(), 3);
}

#[test]
fn send_receive_and_todo_round_trip() {
    let script = r#"
cryo-agent receive > received.txt
cryo-agent send "got it: $(grep -c 'from tester' received.txt) message(s)" > sent.txt
cryo-agent todo add "follow up" --at "+2h" > added.txt
cryo-agent todo list > list.txt
cryo-agent hibernate --summary ok
"#;
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    c.write_inbox(1, "please look at the build");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let received = c.read("received.txt");
    assert!(received.contains("please look at the build"), "{received}");
    assert!(c.read("sent.txt").starts_with("sent (your reply"), "{}", c.read("sent.txt"));
    assert!(c.read("added.txt").contains("added TODO 1: follow up"), "{}", c.read("added.txt"));
    assert!(c.read("list.txt").contains("1. [ ] follow up (at "), "{}", c.read("list.txt"));
    let out = c.outbox();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(
        out[0].contains("got it: 1 message(s)")
            && out[0].contains("in_reply_to: 2026-01-01T00-00-01.000Z_test_0001.md")
    );
    assert!(c.messages("messages/inbox").is_empty());
    assert_eq!(c.messages("messages/inbox/archive").len(), 1);
    assert_eq!(c.todos()[0]["text"], "follow up");
}

#[test]
fn crash_then_success_on_the_retry() {
    let script = r#"
printf '%s' "$1" > prompt-$CRYO_SESSION.txt
if [ "$CRYO_SESSION" = 2 ]; then echo crash-now; exit 9; fi
cryo-agent send "session $CRYO_SESSION" >/dev/null
if [ "$CRYO_SESSION" = 1 ]; then cryo-agent todo add "nightly build" --at "+1s" >/dev/null; fi
cryo-agent todo add later --at +1h >/dev/null
cryo-agent hibernate
"#;
    let (_env, _d, c) = run_chamber(script, "");
    c.wait_ended(2);
    // Session 2 claimed "nightly build" and crashed: it waits as its next
    // attempt, under the number it was added as.
    let todos = c.todos();
    let retry = todos.as_array().unwrap().iter().find(|t| t["text"] == "nightly build (attempt 1)").expect("retry");
    assert_eq!(retry["done"], false);
    assert_eq!(retry["attempt"], 1);
    assert!(!todos.as_array().unwrap().iter().any(|t| t["text"] == "nightly build"), "no second TODO: {todos}");
    assert!(c.fallbacks()[0].contains("Retry: TODO"), "{:?}", c.fallbacks());
    // Bring the retry forward by hand; session 3 succeeds and completes it.
    c.make_due_now();
    c.wait_ended(3);
    let todos = c.todos();
    let retry = todos.as_array().unwrap().iter().find(|t| t["text"] == "nightly build (attempt 1)").unwrap();
    assert_eq!(retry["done"], true, "{todos}");
    assert!(!todos.as_array().unwrap().iter().any(|t| t["text"] == "nightly build (attempt 2)"));
    // Session 3 was told that session 2 crashed.
    assert!(c.read("prompt-3.txt").contains("PREVIOUS SESSION FAILED: crashed: exit 9"), "{}", c.read("prompt-3.txt"));
}

#[test]
fn an_agent_that_crashes_on_mail_does_not_loop() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", "exit 2\n", "");
    c.seed_history();
    c.write_inbox(1, "this makes the agent crash");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(2);
    wait_until("the hold to be logged", || c.cryo_log().contains("the next wake for mail is held for 2m"));
    let st = status(&env, "c");
    assert_eq!(st["mail_waiting"], 1, "{st}");
    assert_eq!(st["session"], 2);
    assert!(st["next_wake"].is_string(), "the held mail is a planned wake: {st}");
}

#[test]
fn an_invalid_at_is_refused_and_the_session_goes_on() {
    let script = r#"
cryo-agent todo add "x" --at "next tuesday" 2> refusal.txt
echo "rc=$?" >> refusal.txt
cryo-agent todo add "y" --at "+1h" >/dev/null
cryo-agent send done >/dev/null
cryo-agent hibernate
"#;
    let (_env, _d, c) = run_chamber(script, "");
    c.wait_ended(1);
    let refusal = c.read("refusal.txt");
    assert!(refusal.contains("cannot read \"next tuesday\" as a time; accepted forms:"), "{refusal}");
    assert!(refusal.contains("rc=1"), "{refusal}");
    assert_eq!(refusal.lines().count(), 2, "one error line: {refusal}");
    assert!(c.cryo_log().contains("session ended: hibernated"));
    assert_eq!(c.todos().as_array().unwrap().len(), 1);
}

#[test]
fn two_hibernates_the_last_wins() {
    let script = "cryo-agent send hi >/dev/null\ncryo-agent todo add x --at +1h >/dev/null\ncryo-agent hibernate\ncryo-agent todo remove 1 >/dev/null\ncryo-agent hibernate --complete\n";
    let (_env, _d, c) = run_chamber(script, "");
    c.wait_ended(1);
    let log = c.cryo_log();
    assert!(log.contains("hibernate accepted") && log.contains("hibernate --complete accepted"), "{log}");
    assert!(log.contains("session ended: completed the plan"), "{log}");
}

#[test]
fn hibernate_then_a_nonzero_exit_the_hibernate_stands() {
    let script =
        "cryo-agent send hi >/dev/null\ncryo-agent todo add x --at +1h >/dev/null\ncryo-agent hibernate\nexit 4\n";
    let (_env, _d, c) = run_chamber(script, "");
    c.wait_ended(1);
    let log = c.cryo_log();
    assert!(log.contains("agent exited: exit 4") && log.contains("session ended: hibernated"), "{log}");
    assert!(c.fallbacks().is_empty());
    assert_eq!(c.todos().as_array().unwrap().len(), 1, "no retry was added");
}

#[test]
fn exit_1_then_success_on_the_retry() {
    let script = r#"
cryo-agent send "s$CRYO_SESSION" >/dev/null
case "$CRYO_SESSION" in
  1) cryo-agent todo add "deploy" --at "+1s" >added.txt; cryo-agent hibernate ;;
  2) cryo-agent hibernate --exit 1 --summary "registry was down" ;;
  *) cryo-agent todo add later --at +1h >/dev/null; cryo-agent hibernate --summary fine ;;
esac
"#;
    let (_env, _d, c) = run_chamber(script, "");
    c.wait_ended(2);
    assert!(c.cryo_log().contains("session ended: failed: exit 1: registry was down"), "{}", c.cryo_log());
    // The failed TODO waits as its next attempt under the number the agent
    // was given, so a person's `todo done N` still finds it.
    let added = c.read("added.txt");
    let id: u64 = added.strip_prefix("added TODO ").and_then(|r| r.split(':').next()).unwrap().parse().unwrap();
    let todos = c.todos();
    let retry = todos.as_array().unwrap().iter().find(|t| t["text"] == "deploy (attempt 1)").expect("retry");
    assert_eq!(retry["id"], id, "{added}\n{todos}");
    assert!(c.fallbacks()[0].contains("subject: Session 2 failed (exit 1)"), "{:?}", c.fallbacks());
    c.make_due_now();
    c.wait_ended(3);
    assert!(c.cryo_log().contains("session ended: hibernated: fine"));
    let todos = c.todos();
    assert!(
        todos.as_array().unwrap().iter().any(|t| t["text"] == "deploy (attempt 1)" && t["done"] == true),
        "{todos}"
    );
}

#[test]
fn an_orphaned_background_child_does_not_hang_the_chamber() {
    let script = format!(
        "sleep 300 &\necho $! > child.pid\ncryo-agent receive >/dev/null\ncryo-agent send hi >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate\n"
    );
    let (env, _d, c) = run_chamber(&script, "");
    let start = Instant::now();
    c.wait_ended(1);
    assert!(start.elapsed() < Duration::from_secs(10));
    let pid: i32 = c.read("child.pid").trim().parse().unwrap();
    wait_until("the orphan to be ended", || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err());
    // The chamber takes the next wake normally.
    c.write_inbox(1, "again");
    c.wait_ended(2);
    assert_eq!(status(&env, "c")["session"], 2);
}

#[test]
fn provider_env_reaches_the_agent_and_never_appears_in_output() {
    let canary = "sk-canary-7f3a9c";
    let script = format!(
        "echo \"$SECRET_KEY\" > seen.txt\ncryo-agent send hi >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate\n"
    );
    let extra = format!("[provider]\nname = \"test\"\nenv = {{ SECRET_KEY = \"{canary}\" }}\n");
    let (env, _d, c) = run_chamber(&script, &extra);
    c.wait_ended(1);
    assert_eq!(c.read("seen.txt").trim(), canary);
    for args in [
        &["chamber", "status", "c", "--json"][..],
        &["chamber", "status", "c"],
        &["chamber", "list", "--json"],
        &["chamber", "list"],
    ] {
        let out = env.cryoctl(args);
        assert!(!out.stdout.contains(canary) && !out.stderr.contains(canary), "{args:?} leaks the secret");
    }
    assert!(!c.cryo_log().contains(canary));
    assert!(!env.daemon_log().contains(canary));
}

#[test]
fn a_delayed_wake_is_noticed_but_not_on_inbox_wakes() {
    let script = format!(
        "printf '%s' \"$1\" > prompt-$CRYO_SESSION.txt\ncryo-agent receive >/dev/null\ncryo-agent send hi >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate\n"
    );
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", &script, "");
    // A TODO that was due 10 minutes ago, as if the machine had been asleep.
    let due = cryo_tests::date_utc("-10 minutes");
    std::fs::write(
        c.dir.join("todo.json"),
        format!(r#"[{{"id":1,"text":"check","done":false,"claimed":false,"at":"{due}"}}]"#),
    )
    .unwrap();
    c.seed_history();
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(2);
    let p = c.read("prompt-2.txt");
    assert!(p.contains("DELAYED WAKE: this wake was due at"), "{p}");
    assert!(p.contains("late"), "{p}");
    // An inbox wake is never "late".
    c.write_inbox(1, "hello");
    c.wait_ended(3);
    assert!(!c.read("prompt-3.txt").contains("DELAYED"), "{}", c.read("prompt-3.txt"));
}

#[test]
fn five_messages_at_once_start_exactly_one_session() {
    let script = r#"
while true; do
  cryo-agent receive >> received.txt
  cryo-agent send "answered" >/dev/null
  cryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null
  cryo-agent hibernate 2>>refused.txt && break
done
"#;
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    for n in 1..=5 {
        c.write_inbox(n, &format!("message {n}"));
    }
    c.wait_ended(2);
    wait_until("all five to be received", || c.read("received.txt").matches("from tester").count() == 5);
    // Settle: no further session starts for these messages.
    assert!(c.messages("messages/inbox").is_empty());
    let st = status(&env, "c");
    assert_eq!(st["session"], 2, "{st}");
    assert_eq!(c.begun(), 2);
}

#[test]
fn dialog_shows_the_history() {
    let script = r#"
cryo-agent receive >/dev/null
cryo-agent send "reply $CRYO_SESSION" >/dev/null
cryo-agent dialog --all > dialog-$CRYO_SESSION.txt
cryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null
cryo-agent hibernate
"#;
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    c.write_inbox(1, "first question");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    // Named by when it is written, as every writer of cryo's names mail:
    // the dialog is in the order of the times in the names.
    let now = std::process::Command::new("date").args(["-u", "+%Y-%m-%dT%H-%M-%S.%3NZ"]).output().unwrap();
    let name = format!("{}_test_0002.md", String::from_utf8(now.stdout).unwrap().trim());
    let inbox = c.dir.join("messages/inbox");
    std::fs::write(inbox.join(format!(".{name}")), "---\nfrom: tester\nsubject: test 2\n---\n\nsecond question\n")
        .unwrap();
    std::fs::rename(inbox.join(format!(".{name}")), inbox.join(&name)).unwrap();
    c.wait_ended(2);
    let d = c.read("dialog-2.txt");
    let order = ["first question", "reply 1", "second question", "reply 2"];
    let pos: Vec<usize> = order.iter().map(|s| d.find(s).unwrap_or_else(|| panic!("{s} missing: {d}"))).collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "out of order: {d}");
    assert!(d.contains("message 4 of 4"), "{d}");
}

#[test]
fn unread_mail_blocks_hibernate_until_it_is_read() {
    let script = r#"
cryo-agent send "status only" >/dev/null
cryo-agent todo add later --at +1h >/dev/null
cryo-agent hibernate 2> refused.txt
echo "rc=$?" >> refused.txt
cryo-agent receive >/dev/null
cryo-agent send "now answered" >/dev/null
cryo-agent hibernate
"#;
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    c.write_inbox(1, "are you there?");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let refused = c.read("refused.txt");
    assert!(refused.contains("refused: 1 unread message in the inbox"), "{refused}");
    assert!(refused.contains("rc=1"));
    assert!(c.cryo_log().contains("hibernate refused: refused: 1 unread message"));
    assert!(c.fallbacks().is_empty());
    assert!(c.outbox().iter().any(|m| m.contains("now answered") && m.contains("in_reply_to:")));
}

#[test]
fn a_status_send_without_receive_writes_no_fallback() {
    let script = format!("cryo-agent send 'all quiet' >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate\n");
    let (_env, _d, c) = run_chamber(&script, "");
    c.wait_ended(1);
    assert_eq!(c.outbox().len(), 1);
    assert!(c.fallbacks().is_empty());
}

#[test]
fn a_hibernate_without_anything_sent_gets_a_fallback() {
    let script = format!("{SCHEDULE_AND_SLEEP}cryo-agent hibernate\n");
    let (_env, _d, c) = run_chamber(&script, "");
    c.wait_ended(1);
    let fb = c.fallbacks();
    assert_eq!(fb.len(), 1);
    assert!(fb[0].contains("subject: Session 1 hibernated without sending anything"), "{}", fb[0]);
}

#[test]
fn a_received_batch_without_a_reply_gets_a_fallback_reply() {
    let script = format!("cryo-agent receive >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate\n");
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", &script, "");
    let name = c.write_inbox(1, "hello?");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let fb = c.fallbacks();
    assert_eq!(fb.len(), 1);
    assert!(
        fb[0].contains("hibernated without replying") && fb[0].contains(&format!("in_reply_to: {name}")),
        "{}",
        fb[0]
    );
}

#[test]
fn linger_is_released_by_new_mail_one_session_two_replies() {
    let script = r#"
cryo-agent receive >/dev/null
cryo-agent send "first reply" >/dev/null
cryo-agent todo add later --at +1h >/dev/null
if cryo-agent hibernate --linger 30 2> linger.txt; then exit 0; fi
cryo-agent receive >/dev/null
cryo-agent send "second reply" >/dev/null
cryo-agent hibernate
"#;
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    c.write_inbox(1, "first");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_until("the agent to linger", || c.cryo_log().contains("lingering up to 30s"));
    c.write_inbox(2, "second");
    c.wait_ended(1);
    assert!(c.read("linger.txt").contains("new mail arrived"), "{}", c.read("linger.txt"));
    let replies: Vec<_> = c.outbox().into_iter().filter(|m| m.contains("in_reply_to:")).collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(c.begun(), 1, "one session answered both");
    assert!(c.fallbacks().is_empty());
}

#[test]
fn linger_expires_and_the_session_ends() {
    let script =
        format!("cryo-agent send hi >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate --linger 1 > out.txt\n");
    let (_env, _d, c) = run_chamber(&script, "");
    c.wait_ended(1);
    assert!(c.cryo_log().contains("linger expired: hibernating"), "{}", c.cryo_log());
    assert!(c.read("out.txt").contains("hibernating: next wake at"));
}

#[test]
fn a_token_works_only_for_its_own_chamber_and_live_session() {
    let env = Env::new();
    let _d = env.start_daemon();
    // B publishes its token and stays alive (lingering) until A is done.
    let b = env.chamber(
        "b",
        &format!("echo \"$CRYO_SOCKET\" > socket.txt\necho \"$CRYO_SESSION_TOKEN\" > token.txt\ncryo-agent send hi >/dev/null\n{SCHEDULE_AND_SLEEP}cryo-agent hibernate --linger 20\n"),
        "",
    );
    env.cryoctl(&["chamber", "start", "b"]).ok();
    wait_until("b's token", || b.read("token.txt").trim().len() == 64);
    let a_script = format!(
        r#"
CRYO_SESSION_TOKEN=$(cat {b}/token.txt) cryo-agent todo list 2> cross.txt
echo "rc=$?" >> cross.txt
CRYO_SOCKET=$(cat {b}/socket.txt) CRYO_SESSION_TOKEN=$(cat {b}/token.txt) cryo-agent todo list 2> cross-door.txt
echo "rc=$?" >> cross-door.txt
echo "$CRYO_SESSION_TOKEN" > own-token.txt
echo "$CRYO_SOCKET" > own-socket.txt
cryo-agent send hi >/dev/null
{SCHEDULE_AND_SLEEP}cryo-agent hibernate
"#,
        b = b.dir.display()
    );
    let a = env.chamber("a", &a_script, "");
    env.cryoctl(&["chamber", "start", "a"]).ok();
    a.wait_ended(1);
    // B's token through A's own door; then through B's door, claiming A.
    let cross = a.read("cross.txt");
    assert!(cross.contains("came through another session's socket"), "{cross}");
    assert!(cross.contains("rc=1"));
    let cross = a.read("cross-door.txt");
    assert!(cross.contains("belongs to another chamber"), "{cross}");
    assert!(cross.contains("rc=1"));
    // (b's session still runs: its own add may wait in its journal, so ask
    // for the list, not todo.json.)
    let listed = env.cryoctl(&["chamber", "todo", "b", "list", "--json"]).json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "b's TODOs are untouched: {listed}");
    // A's own token, replayed after its session ended (its door is gone),
    // or through the operator's socket, is refused.
    for (socket, says) in [
        (std::path::PathBuf::from(a.read("own-socket.txt").trim()), "session has ended"),
        (env.socket(), "does not serve agent calls"),
    ] {
        let mut replay = env.command(cryo_tests::bin("cryo-agent"));
        replay
            .args(["todo", "list"])
            .env("CRYO_SOCKET", &socket)
            .env("CRYO_CHAMBER", "a")
            .env("CRYO_SESSION_TOKEN", a.read("own-token.txt").trim());
        let out = replay.output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{out:?}");
    }
    // Outside a session altogether.
    let mut outside = env.command(cryo_tests::bin("cryo-agent"));
    outside.args(["send", "x"]);
    let out = outside.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a cryo session"));
    // `time` works anywhere.
    let mut time = env.command(cryo_tests::bin("cryo-agent"));
    time.args(["time", "+30m"]);
    let out = time.output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("in 30m"), "{out:?}");
}

#[test]
fn twenty_chambers_never_exceed_the_concurrency_limit() {
    let env = Env::new();
    env.daemon_config("max_concurrent_sessions = 4\n");
    let _d = env.start_daemon();
    let script = format!(
        "date +%s%N > start.txt\nsleep 0.3\ncryo-agent send hi >/dev/null\n{SCHEDULE_AND_SLEEP}date +%s%N > end.txt\ncryo-agent hibernate\n"
    );
    let chambers: Vec<Chamber> = (0..20).map(|i| env.chamber(&format!("c{i:02}"), &script, "")).collect();
    for c in &chambers {
        env.cryoctl(&["chamber", "start", &c.name, "--json"]).ok();
    }
    for c in &chambers {
        c.wait_ended(1);
    }
    // Max overlap of [start, end] intervals recorded by the agents themselves.
    let mut edges: Vec<(u128, i32)> = Vec::new();
    for c in &chambers {
        let s: u128 = c.read("start.txt").trim().parse().unwrap();
        let e: u128 = c.read("end.txt").trim().parse().unwrap();
        edges.push((s, 1));
        edges.push((e, -1));
    }
    edges.sort();
    let (mut cur, mut max) = (0, 0);
    for (_, d) in edges {
        cur += d;
        max = max.max(cur);
    }
    assert!(max <= 4, "{max} agents ran at once");
    assert!(max >= 2, "sessions ran concurrently ({max})");
}

#[test]
fn stop_ends_a_running_session_and_requeues_its_todos() {
    let script = "cryo-agent send started >/dev/null\nsleep 300\n";
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    std::fs::write(
        c.dir.join("todo.json"),
        r#"[{"id":1,"text":"long job","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#,
    )
    .unwrap();
    c.seed_history();
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_until("the session to run", || status(&env, "c")["state"] == "running" && !c.outbox().is_empty());
    let r = env.cryoctl(&["chamber", "stop", "c"]);
    assert!(r.ok().contains("its running session was ended"), "{}", r.stdout);
    // Returned after the session ended.
    assert_eq!(c.ended(), 2);
    assert!(c.cryo_log().contains("session ended: stopped by the operator"));
    let todos = c.todos();
    assert!(
        todos.as_array().unwrap().iter().any(|t| t["text"] == "long job (attempt 1)" && t["done"] == false),
        "{todos}"
    );
    assert_eq!(status(&env, "c")["state"], "stopped");
}

#[test]
fn a_started_chamber_stays_started_across_restarts_and_mail_waiting_wakes_it() {
    let script = format!(
        "cryo-agent receive >/dev/null\ncryo-agent send hi >/dev/null\ncryo-agent todo list | grep -q later || {SCHEDULE_AND_SLEEP}cryo-agent hibernate\n"
    );
    let env = Env::new();
    let mut d = env.start_daemon();
    let c = env.chamber("c", &script, "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    // Mail arrives while cryod is down.
    c.write_inbox(1, "while you were out");
    let _d = env.start_daemon();
    c.wait_ended(2);
    assert!(c.cryo_log().contains("trigger: inbox"), "{}", c.cryo_log());
    assert_eq!(status(&env, "c")["state"], "idle");
}
