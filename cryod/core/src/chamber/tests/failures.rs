//! What goes wrong in a wake and what comes of it: a write that fails
//! (the ledger, the claim), a spawn that fails, an agent gone without
//! hibernating, and what the person is told.

use chrono::Duration;

use super::{Rig, add_todo, hibernate, messages, pos, t0};
use crate::chamber::{Call, Effect, Input, LogLine, Timer, TodoOp, WRITE_RETRY};
use crate::session::{Outcome, Trigger};
use crate::todo::{NewTodo, Settle};

#[test]
fn a_wake_whose_ledger_insert_fails_claims_nothing_and_spawns_nothing() {
    let mut rig = Rig::new(&[0], &[]);
    rig.fail = Some("RecordWake");
    let out = rig.wake();
    assert!(!out.iter().any(|e| matches!(e, Effect::Spawn { .. } | Effect::UpdateTodos { .. })), "{out:#?}");
    assert!(out.iter().any(|e| matches!(e, Effect::Release)), "the permit goes back: {out:#?}");
    assert!(rig.todos.items[0].is_pending(), "the TODO is still due");
    assert_eq!(rig.m.live_session(), None);
}

#[test]
fn a_failing_record_is_retried_a_minute_later_not_in_a_loop() {
    let mut rig = Rig::new(&[0], &[]);
    rig.fail = Some("RecordWake");
    let out = rig.wake();
    assert!(!out.iter().any(|e| matches!(e, Effect::Spawn { .. })), "{out:#?}");
    assert!(matches!(out.last(), Some(Effect::Plan(Some(t))) if *t == t0() + WRITE_RETRY), "{out:#?}");
    // Mail meanwhile waits for the retry too.
    let mail = rig.feed(Input::Inbox { unread: vec!["a.md".into()], arrived: true });
    assert!(!mail.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{mail:#?}");
    // A minute on, with the disk writable again, the wake runs.
    rig.fail = None;
    rig.now = t0() + WRITE_RETRY;
    let due = rig.feed(Input::Due);
    assert!(due.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{due:#?}");
    let out = rig.feed(Input::Admitted { nonce: "n1".into(), token: "tok1".into(), fresh: None });
    assert!(out.iter().any(|e| matches!(e, Effect::Spawn { .. })), "{out:#?}");
}

#[test]
fn a_claim_that_cannot_be_written_is_made_by_the_settlement() {
    let mut rig = Rig::new(&[0], &[]);
    rig.fail = Some("UpdateTodos { op: Claim");
    let out = rig.wake();
    assert!(out.iter().any(|e| matches!(e, Effect::Spawn { .. })), "the agent runs: {out:#?}");
    assert!(rig.todos.items[0].is_pending(), "the claim did not reach the file");
    rig.fail = None;
    rig.call(add_todo("+1 days")).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    // Settled from the ledger's record: done, not left due for another run.
    assert!(rig.todos.items[0].done, "{:#?}", rig.todos);
    assert_eq!(rig.todos.items[0].claimed_by, None);
}

/// The session's own wake is not due work while its claim waits for the
/// settlement: `--complete` is accepted, and a plain hibernate still needs
/// a next wake of its own (the claimed TODO is not one).
#[test]
fn a_claim_that_cannot_be_written_does_not_count_as_due() {
    let mut rig = Rig::new(&[0], &[]);
    rig.fail = Some("UpdateTodos { op: Claim");
    rig.wake();
    assert!(rig.todos.items[0].is_pending(), "the claim did not reach the file");
    let refused = rig.call(hibernate()).unwrap_err();
    assert!(refused.text().contains("no pending TODO declares the next wake"), "{}", refused.text());
    let complete = Call::Hibernate { summary: "all done".into(), complete: true, exit_code: 0, linger_secs: 0 };
    rig.call(complete).unwrap();
    rig.exit("exit 0");
    assert!(rig.todos.items[0].done, "settled from the ledger: {:#?}", rig.todos);
}

#[test]
fn a_failed_spawn_fails_the_claim_as_an_attempt_and_reports_it() {
    let mut rig = Rig::new(&[0], &[]);
    rig.fail = Some("Spawn");
    let out = rig.wake();
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Fail { .. }, .. }, .. })),
        "{out:#?}"
    );
    let report = messages(&out);
    assert!(report.iter().any(|m| m.from == crate::message::CRYOCHAMBER), "the failure is reported: {out:#?}");
    assert!(out.iter().any(|e| matches!(e, Effect::SessionEnded { .. })));
    // The TODO is retried as its next attempt, under its own number.
    let t = &rig.todos.items[0];
    assert_eq!((rig.todos.items.len(), t.attempt, t.is_pending()), (1, 1, true), "{:#?}", rig.todos);
}

#[test]
fn an_exit_without_hibernating_fails_the_claim_and_answers_the_claimed_mail() {
    let mut rig = Rig::new(&[0], &["a.md"]);
    rig.wake();
    rig.call(Call::Receive).unwrap();
    let end = rig.exit("exit 1");
    let settle = pos(&end, "a settlement", |e| {
        matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Fail { .. }, .. }, .. })
    });
    let msgs = messages(&end);
    assert_eq!(msgs.len(), 1, "one fallback, which is also the reply: {msgs:#?}");
    assert_eq!(msgs[0].from, crate::message::CRYOCHAMBER);
    assert_eq!(msgs[0].meta.get("in_reply_to").map(String::as_str), Some("a.md"));
    let ended = pos(&end, "SessionEnded", |e| matches!(e, Effect::SessionEnded { .. }));
    assert!(settle < ended);
    assert!(end.iter().any(|e| matches!(e, Effect::JournalAnswer { number: 2 })));
    let log_end = pos(&end, "the log block's end", |e| matches!(e, Effect::Log(LogLine::End)));
    assert!(settle < log_end);
}

/// Issue 39, items 5 and 6: a failed session's report says what happened
/// (a refused hibernate and an exit, a missing program, the time limit and
/// its key), and a later good session clears the attention it raised.
#[test]
fn a_failure_says_what_happened_and_a_good_session_clears_it() {
    let attention = |rig: &Rig| rig.m.view().attention.unwrap_or_default();
    // Issue 60, case 3: refused for mail that arrived during the session,
    // then gone: no failure, no attention, and the next session at once.
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.feed(Input::Inbox { unread: vec!["m1.md".into()], arrived: true });
    assert!(rig.call(hibernate()).is_err());
    let end = rig.exit("exit 1");
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::MailArrived(_), .. })), "{end:#?}");
    assert_eq!(attention(&rig), "", "no failure to tell of");
    assert!(end.iter().any(|e| matches!(e, Effect::RequestAdmission(Trigger::Inbox))), "at once: {end:#?}");
    // But mail that was there when the session began, never read, is the
    // agent's failure (a loop of sessions otherwise): backed off, not at once.
    let mut rig = Rig::new(&[0], &["m1.md"]);
    rig.wake();
    assert!(rig.call(hibernate()).is_err());
    let end = rig.exit("exit 1");
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::Crashed(_), .. })), "{end:#?}");
    assert!(!end.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "no session at once: {end:#?}");
    assert!(rig.m.view().next_wake.is_some_and(|w| w > rig.now), "a retry is planned");
    // Issue 60, case 1: gone without a word of hibernate: its own outcome,
    // whose line names what the agent must do.
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let end = rig.exit("exit 0");
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::NoHibernate(_), .. })), "{end:#?}");
    let a = attention(&rig);
    assert!(a.contains("without `cryo-agent hibernate`") && !a.contains("misconfiguration"), "{a}");
    // ... and its work is tried again: a wake is planned, never silence.
    assert!(rig.m.view().next_wake.is_some(), "{:?}", rig.m.view());
    // Refused for another reason (no next wake), then exit 0: the agent's
    // doing, said so.
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    assert!(rig.call(hibernate()).is_err());
    rig.exit("exit 0");
    let a = attention(&rig);
    assert!(a.contains("after its hibernate was refused"), "{a}");
    // A missing program.
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.exit("exit 127");
    let a = attention(&rig);
    assert!(a.contains("not found (exit 127)") && !a.contains("API key"), "{a}");
    // The time limit, named with its key.
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.feed(Input::Timer(Timer::Timeout(2)));
    rig.exit("killed by signal 15");
    let a = attention(&rig);
    assert!(a.contains("max_session_duration = 1800 seconds"), "{a}");
    // The next session hibernates well: the attention goes.
    rig.m.handle(Input::TodosChanged(Ok(rig.todos.clone())), rig.now);
    rig.now += Duration::hours(1);
    rig.todos
        .add(
            NewTodo { text: "again".into(), at: Some(rig.now), ..NewTodo::default() },
            rig.now - Duration::minutes(1),
            chrono_tz::UTC,
        )
        .unwrap();
    rig.feed(Input::TodosChanged(Ok(rig.todos.clone())));
    rig.wake();
    rig.call(add_todo("+1h")).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    assert_eq!(rig.m.view().attention, None);
}
