//! cryod's own stop and start: what a shutdown cuts short, what a boot
//! recovers from the ledger, and work run again once.

use super::{Rig, add_todo, hibernate, machine, messages, reply, spawn_of, t0};
use crate::chamber::{
    Boot, Call, Effect, Input, LogLine, OpenBatch, OpenSession, Outgoing, Refusal, Reply, Rerun, SKIP_GRACE, Sig,
    TodoOp,
};
use crate::hibernate::Ending;
use crate::session::{Outcome, Trigger};
use crate::todo::{Settle, TodoList};

#[test]
fn shutdown_interrupts_the_session_and_exits() {
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let req = rig.req();
    let out = rig.feed(Input::Shutdown { req });
    assert!(out.iter().any(|e| matches!(e, Effect::Signal { sig: Sig::Term, .. })), "{out:#?}");
    let end = rig.exit("killed by signal 15");
    assert_eq!(reply(&end, req), Some(Ok(Reply::Done)));
    assert!(
        end.iter()
            .any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Requeue { .. }, .. }, .. }))
    );
    assert!(rig.m.finished());
}

/// A hibernate parked for its linger stands: the agent cut inside it (cryod
/// shutting down) ended its session as it asked, with nothing to report;
/// only new mail takes the hibernate back, with a refusal the agent hears.
#[test]
fn a_hibernate_cut_inside_its_linger_stands_and_only_mail_takes_it_back() {
    let lingering = Call::Hibernate { summary: "done".into(), complete: false, exit_code: 0, linger_secs: 60 };
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.call(Call::Send { text: "progress".into(), question: false, subject: String::new() }).unwrap();
    rig.call(add_todo("+1h")).unwrap();
    let req = rig.req();
    let session = rig.m.live_session().expect("live").0;
    let parked = rig.feed(Input::Agent { session, req, call: lingering.clone() });
    assert_eq!(reply(&parked, req), None, "the call is held open: {parked:#?}");
    let stop = rig.req();
    rig.feed(Input::Shutdown { req: stop });
    let end = rig.exit("killed by signal 15");
    assert!(
        end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::Hibernated(Ending::Hibernate), .. })),
        "{end:#?}"
    );
    assert!(
        end.iter().any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Complete, .. }, .. })),
        "{end:#?}"
    );
    assert!(messages(&end).iter().all(|m| m.from != crate::message::CRYOCHAMBER), "nothing to report: {end:#?}");

    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.call(add_todo("+1h")).unwrap();
    let req = rig.req();
    let session = rig.m.live_session().expect("live").0;
    rig.feed(Input::Agent { session, req, call: lingering });
    let released = rig.feed(Input::Inbox { unread: vec!["a.md".into()], arrived: true });
    let Some(Err(Refusal::Precondition(why))) = reply(&released, req) else { panic!("{released:#?}") };
    assert!(why.contains("new mail arrived"), "{why}");
    let end = rig.exit("exit 0");
    assert!(
        end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::MailArrived(_), .. })),
        "released for new mail, then gone: no failure, the next session reads it: {end:#?}"
    );
}

#[test]
fn boot_requeues_an_open_session_and_answers_only_the_mail_its_agent_saw() {
    let mut rig = Rig::new(&[0], &[]);
    // What a killed cryod left: session 1 open, claiming TODO 1, with one
    // batch archived (seen) and one journaled whose files never moved.
    let claims = rig.todos.clone().claim_for("w1-1-x", &[1], t0(), chrono_tz::UTC, SKIP_GRACE);
    rig.todos.claim_for("w1-1-x", &[1], t0(), chrono_tz::UTC, SKIP_GRACE);
    let mut m = Rig::new(&[], &["unseen.md"]);
    m.todos = rig.todos.clone();
    m.m = machine(&rig.todos, &["unseen.md"], 1);
    let boot = Boot {
        open: vec![OpenSession { number: 1, wake_id: "w1-1-x".into(), claims, groups_ended: 1 }],
        batches: vec![
            OpenBatch { id: 7, session: 1, files: vec!["seen.md".into()], archived: vec!["seen.md".into()] },
            OpenBatch { id: 8, session: 1, files: vec!["unseen.md".into()], archived: vec![] },
        ],
        outgoing: Vec::new(),
        thawed: None,
        open_unknown: false,
    };
    let out = m.feed(Input::Boot(boot));
    assert!(out.iter().any(|e| matches!(e, Effect::JournalDrop { id: 8 })), "{out:#?}");
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Requeue { .. }, .. }, .. }))
    );
    let msgs = messages(&out);
    let replies: Vec<_> = msgs.iter().filter_map(|m| m.meta.get("in_reply_to")).collect();
    assert_eq!(replies, ["seen.md"], "{msgs:#?}");
    assert!(msgs.iter().all(|m| m.from == crate::message::CRYOCHAMBER));
    assert!(out.iter().any(|e| matches!(e, Effect::SessionEnded { number: 1, .. })));
    assert!(out.iter().any(|e| matches!(e, Effect::Log(LogLine::End))), "its log block is closed");
    // The claim is back in the queue under a fresh id, and due: the chamber asks to run it.
    assert!(m.todos.items.iter().all(|t| t.claimed_by.is_none()));
    assert!(out.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{out:#?}");
}

/// A claim `todo.json` still holds for a session that is over (its end
/// recorded, its settlement never written) is re-queued at the next boot
/// that reads the list, and said; an open session's claim is recovery's.
#[test]
fn a_claim_left_by_a_session_that_is_over_runs_again_at_boot() {
    let mut rig = Rig::new(&[0, 0], &[]);
    let open = rig.todos.clone().claim_for("w1-2-open", &[2], t0(), chrono_tz::UTC, SKIP_GRACE);
    rig.todos.claim_for("w1-1-over", &[1], t0(), chrono_tz::UTC, SKIP_GRACE);
    rig.todos.claim_for("w1-2-open", &[2], t0(), chrono_tz::UTC, SKIP_GRACE);
    rig.m = machine(&rig.todos, &[], 2);
    let boot = Boot {
        open: vec![OpenSession { number: 2, wake_id: "w1-2-open".into(), claims: open, groups_ended: 0 }],
        ..Boot::default()
    };
    let out = rig.feed(Input::Boot(boot));
    let released = |e: &Effect| {
        matches!(e, Effect::UpdateTodos { op: TodoOp::Release { orphans, .. }, .. }
            if orphans.len() == 1 && orphans[0].0 == "w1-1-over")
    };
    assert_eq!(out.iter().filter(|e| released(e)).count(), 1, "{out:#?}");
    let said = |e: &Effect| matches!(e, Effect::Log(LogLine::Event(t)) if t.starts_with("TODO 1 was claimed by a wake no open session holds"));
    assert!(out.iter().any(said), "{out:#?}");
    assert!(rig.todos.items.iter().all(|t| t.claimed_by.is_none()), "both settled: {:#?}", rig.todos);
    assert!(rig.todos.items.iter().all(|t| t.is_pending() && t.attempt == 1), "{:#?}", rig.todos);
    assert!(out.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "it runs again: {out:#?}");

    // Open sessions unknown (their read failed): no claim is taken for an
    // orphan's.
    let mut rig = Rig::new(&[0], &[]);
    rig.todos.claim_for("w1-1-over", &[1], t0(), chrono_tz::UTC, SKIP_GRACE);
    rig.m = machine(&rig.todos, &[], 1);
    let out = rig.feed(Input::Boot(Boot { open_unknown: true, ..Boot::default() }));
    assert!(!out.iter().any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Release { .. }, .. })), "{out:#?}");

    // Made up by the agent, who can write todo.json: a thousand claims of
    // a thousand wakes are one line and one write.
    let mut rig = Rig::new(&[], &[]);
    for i in 0..1000 {
        let new = crate::todo::NewTodo { text: format!("t{i}"), at: Some(t0()), ..crate::todo::NewTodo::default() };
        let id = rig.todos.add(new, t0(), chrono_tz::UTC).unwrap();
        rig.todos.claim_for(&format!("made-up-{i}"), &[id], t0(), chrono_tz::UTC, SKIP_GRACE);
    }
    rig.m = machine(&rig.todos, &[], 1);
    let out = rig.feed(Input::Boot(Boot::default()));
    let writes = out.iter().filter(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Release { .. }, .. })).count();
    let lines: Vec<_> = out
        .iter()
        .filter(|e| matches!(e, Effect::Log(LogLine::Event(t)) if t.contains("no open session holds")))
        .collect();
    assert_eq!((writes, lines.len()), (1, 1), "{lines:#?}");
    assert!(format!("{:?}", lines[0]).contains("and 990 more"), "{lines:#?}");
    assert!(rig.todos.items.iter().all(|t| t.claimed_by.is_none() && t.is_pending()));
}

/// The work of a session cut short by cryod's death runs again, at once and
/// once: even a bootstrap or an operator's wake, which no TODO stands
/// behind; its unanswered mail is named in the rerun's prompt; and new mail
/// is not held by a back-off (the death was not the agent's failure).
#[test]
fn work_interrupted_by_cryod_runs_again_at_once_and_only_once() {
    let mut rig = Rig::new(&[], &[]);
    rig.m = machine(&TodoList::default(), &[], 1);
    let boot = Boot {
        open: vec![OpenSession { number: 1, wake_id: "w1-1-x".into(), claims: Vec::new(), groups_ended: 1 }],
        batches: vec![OpenBatch { id: 7, session: 1, files: vec!["hi.md".into()], archived: vec!["hi.md".into()] }],
        outgoing: Vec::new(),
        thawed: None,
        open_unknown: false,
    };
    let out = rig.feed(Input::Boot(boot));
    let fallback = messages(&out).into_iter().find(|m| m.meta.contains_key("in_reply_to")).expect("a holding reply");
    assert!(fallback.body.contains("runs its work again, once"), "{}", fallback.body);
    assert!(!fallback.body.contains("misconfiguration"), "{}", fallback.body);
    assert!(out.iter().any(|e| matches!(e, Effect::RequestAdmission(Trigger::Recovery))), "{out:#?}");
    // No back-off: mail that arrives now is not held.
    assert_eq!((rig.m.health.failures(), rig.m.health.mail_hold_until()), (0, None));
    let out = rig.feed(Input::Admitted { nonce: "n1".into(), token: "tok".into(), fresh: None });
    let (_, prompt, _) = spawn_of(&out);
    assert!(prompt.contains("RERUN: session 1 was interrupted"), "{prompt}");
    assert!(prompt.contains("hi.md"), "{prompt}");
    assert!(!prompt.contains("PREVIOUS SESSION FAILED"), "{prompt}");
    assert_eq!(rig.m.live_session().map(|s| s.0), Some(2));
    // Session 2 is the rerun: once it ends, nothing runs a third time.
    assert!(!rig.m.waking.reruns());
    assert!(rig.call(add_todo("+1h")).is_ok());
    rig.call(hibernate()).expect("hibernate accepted");
    let out = rig.exit("exit 0");
    assert!(!out.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{out:#?}");
}

/// A stop of cryod with a session running leaves the rerun to the next
/// cryod, which reads it from the ledger's newest row (and the holding
/// replies in the outbox).
#[test]
fn a_rerun_is_read_back_from_the_ledger_after_a_stop() {
    let sent = vec![
        Outgoing { session: Some(3), by_agent: false, in_reply_to: vec!["a.md".into(), "b.md".into()] },
        Outgoing { session: Some(3), by_agent: true, in_reply_to: vec!["c.md".into()] },
        Outgoing { session: Some(2), by_agent: false, in_reply_to: vec!["old.md".into()] },
    ];
    let interrupted = Outcome::Interrupted.describe();
    let r = Rerun::after(3, Some(&interrupted), || sent.clone()).expect("a rerun");
    assert_eq!(r, Rerun { session: 3, mail: vec!["a.md".into(), "b.md".into()] });
    let never = || -> Vec<Outgoing> { panic!("the outbox is read only after an interruption") };
    assert_eq!(Rerun::after(3, Some("hibernated: ok"), never), None);
    assert_eq!(Rerun::after(3, None, never), None);

    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let req = rig.req();
    rig.feed(Input::Shutdown { req });
    let end = rig.exit("killed by signal 15");
    let fallback = messages(&end).into_iter().next().expect("a report");
    assert!(fallback.body.contains("runs its work again"), "{}", fallback.body);
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::Interrupted, .. })), "{end:#?}");
    assert!(rig.m.finished());
}
