//! Operators' requests: stop, pause, archive, reset, a TODO refused,
//! a failure set aside or snoozed.

use chrono::{DateTime, Duration, Utc};
use std::time::Duration as StdDuration;

use super::{PID, Rig, add_todo, loaded, reply};
use crate::chamber::{
    Boot, Call, Chamber, Effect, Input, Limits, Loaded, Refusal, Reply, Sig, Timer, TodoCall, TodoOp,
};
use crate::session::Trigger;
use crate::todo::Settle;

#[test]
fn stop_sends_sigterm_then_sigkill_after_the_grace() {
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let req = rig.req();
    let out = rig.feed(Input::Stop { req, wait: true });
    assert!(out.iter().any(|e| matches!(e, Effect::Signal { pgid, sig: Sig::Term } if *pgid == PID as i32)));
    assert!(out.iter().any(
        |e| matches!(e, Effect::ArmTimer { timer: Timer::Kill(2), after } if *after == StdDuration::from_secs(10))
    ));
    assert_eq!(reply(&out, req), None, "a waiting stop answers when the session has ended");
    let kill = rig.feed(Input::Timer(Timer::Kill(2)));
    assert!(kill.iter().any(|e| matches!(e, Effect::Signal { sig: Sig::Kill, .. })), "{kill:#?}");
    let end = rig.exit("killed by signal 9");
    assert_eq!(reply(&end, req), Some(Ok(Reply::Stopped { already: false, ended: true })));
    // A stopped session's claim goes back to the queue (requeued, not failed).
    assert!(
        end.iter()
            .any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Requeue { .. }, .. }, .. }))
    );
    assert!(!rig.m.started());
}

#[test]
fn pause_holds_wakes_and_resume_brings_them_back() {
    let mut rig = Rig::new(&[0], &[]);
    let req = rig.req();
    rig.feed(Input::Pause { req, pause: true });
    let out = rig.feed(Input::Due);
    assert!(!out.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{out:#?}");
    let req = rig.req();
    let out = rig.feed(Input::Pause { req, pause: false });
    assert!(out.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{out:#?}");
}

#[test]
fn an_archived_chamber_is_stopped_and_refuses_to_start_until_unarchived() {
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    // Started, a session running: archive is refused, nothing is written.
    let req = rig.req();
    let out = rig.feed(Input::Archive { req, archive: true });
    assert!(matches!(reply(&out, req), Some(Err(Refusal::Precondition(w))) if w.contains("stop it")), "{out:#?}");
    assert!(!out.iter().any(|e| matches!(e, Effect::SetArchived { .. })), "{out:#?}");
    let req = rig.req();
    rig.feed(Input::Stop { req, wait: true });
    rig.exit("killed by signal 15");
    let req = rig.req();
    let out = rig.feed(Input::Archive { req, archive: true });
    assert_eq!(reply(&out, req), Some(Ok(Reply::Archived(false))));
    assert!(rig.m.view().archived);
    let req = rig.req();
    assert_eq!(reply(&rig.feed(Input::Archive { req, archive: true }), req), Some(Ok(Reply::Archived(true))));
    // Never started while archived: not by an operator, not by due work.
    let req = rig.req();
    let out = rig.feed(Input::Start { req, wait: false, agent_check: Ok(()), log_session: 0 });
    assert!(matches!(reply(&out, req), Some(Err(Refusal::Precondition(w))) if w.contains("unarchive")), "{out:#?}");
    assert!(!rig.feed(Input::Due).iter().any(|e| matches!(e, Effect::RequestAdmission(_))));
    let req = rig.req();
    rig.feed(Input::Archive { req, archive: false });
    assert!(!rig.m.view().archived);
    let req = rig.req();
    let out = rig.feed(Input::Start { req, wait: false, agent_check: Ok(()), log_session: 0 });
    assert_eq!(reply(&out, req), Some(Ok(Reply::Started(false))));
}

#[test]
fn reset_needs_a_stopped_chamber_and_begins_it_again() {
    let mut rig = Rig::new(&[0, 60], &["a.md"]);
    let req = rig.req();
    let out = rig.feed(Input::Reset { req });
    assert!(matches!(reply(&out, req), Some(Err(Refusal::Precondition(_)))), "started: {out:#?}");
    assert!(!out.iter().any(|e| matches!(e, Effect::Reset { .. })));
    let req = rig.req();
    rig.feed(Input::Stop { req, wait: false });
    // A failed move changes nothing.
    rig.fail = Some("Reset");
    let req = rig.req();
    let out = rig.feed(Input::Reset { req });
    assert!(matches!(reply(&out, req), Some(Err(Refusal::Internal(_)))), "{out:#?}");
    assert_eq!(rig.m.unread().len(), 1);
    rig.fail = None;
    let req = rig.req();
    let out = rig.feed(Input::Reset { req });
    assert_eq!(reply(&out, req), Some(Ok(Reply::Reset("history/20261123T090000Z".into()))));
    assert!(out.iter().any(|e| matches!(e, Effect::Rewatch)), "the new inbox is watched: {out:#?}");
    assert!(rig.m.unread().is_empty());
    assert_eq!(rig.m.todos().map(|t| t.map(|l| l.items.len())), Some(Ok(0)));
    assert!(rig.m.view().attention.is_none() && rig.m.view().next_wake.is_none());
    // Started again, it begins from its plan: a bootstrap session, as a new
    // chamber's first.
    let req = rig.req();
    let out = rig.feed(Input::Start { req, wait: false, agent_check: Ok(()), log_session: 0 });
    assert_eq!(reply(&out, req), Some(Ok(Reply::Started(false))));
    assert!(out.iter().any(|e| matches!(e, Effect::RequestAdmission(Trigger::Bootstrap))), "{out:#?}");
}

#[test]
fn a_todo_write_that_fails_is_refused_with_one_error_and_nothing_changes() {
    let mut rig = Rig::new(&[60], &[]);
    let before = rig.todos.clone();
    rig.fail = Some("UpdateTodos");
    let req = rig.req();
    let call = TodoCall::Add {
        text: "x".into(),
        at: "+2h".into(),
        every: "".into(),
        cron: "".into(),
        missed: "".into(),
        precheck: "".into(),
    };
    let out = rig.feed(Input::Todo { req, call });
    let Some(Err(Refusal::Internal(why))) = reply(&out, req) else { panic!("{out:#?}") };
    assert!(why.contains("disk full"), "{why}");
    assert_eq!(rig.todos, before);
    assert!(!out.iter().any(|e| matches!(e, Effect::Plan(_))), "the plan stands: {out:#?}");
}

#[test]
fn a_bad_time_is_refused_as_invalid() {
    let mut rig = Rig::new(&[60], &[]);
    let req = rig.req();
    let call = TodoCall::Add {
        text: "x".into(),
        at: "next blursday".into(),
        every: "".into(),
        cron: "".into(),
        missed: "".into(),
        precheck: String::new(),
    };
    let out = rig.feed(Input::Todo { req, call });
    assert!(matches!(reply(&out, req), Some(Err(Refusal::Invalid(_)))), "{out:#?}");
    assert!(!out.iter().any(|e| matches!(e, Effect::UpdateTodos { .. })), "nothing is written: {out:#?}");
}

/// Issue 39, item 7: a TODO's time long gone is refused with how long ago.
#[test]
fn a_todo_in_the_past_is_refused_with_how_long_ago() {
    let mut rig = Rig::new(&[], &[]);
    let req = rig.req();
    let call = match add_todo("2020-01-01T00:00:00Z") {
        Call::Todo(t) => t,
        _ => unreachable!(),
    };
    let out = rig.feed(Input::Todo { req, call });
    let refused = reply(&out, req).unwrap().unwrap_err();
    let text = format!("{refused:?}");
    assert!(text.contains("in the past") && text.contains("2518d 9h ago"), "{text}");
    assert!(rig.todos.items.is_empty());
}

/// Issue 63: a person sets a failure aside (it leaves the queue until the
/// next failure), or snoozes it (it comes back when the snooze ends); the
/// set-aside is kept with the health record, so a restart keeps it; a
/// chamber that needs nothing has nothing to acknowledge.
#[test]
fn a_failure_set_aside_comes_back_when_it_changes_or_its_snooze_ends() {
    let mut rig = Rig::new(&[0], &[]);
    let ack = |rig: &mut Rig, until: Option<DateTime<Utc>>| {
        let req = rig.req();
        let out = rig.feed(Input::Acknowledge { req, until });
        reply(&out, req).expect("answered")
    };
    let refused = ack(&mut rig, None).expect_err("nothing needs anyone yet");
    assert!(refused.text().contains("needs nothing of you"), "{refused:?}");
    rig.wake();
    rig.exit("exit 0");
    assert!(rig.m.view().attention.is_some(), "a failure needs a person: {:?}", rig.m.view());
    // Acknowledged: the view says since when; the record keeps it.
    assert!(matches!(ack(&mut rig, None), Ok(Reply::Acknowledged)));
    let seen = rig.m.view().acknowledged.expect("set aside");
    assert_eq!((seen.at, seen.until), (rig.now, None));
    assert_eq!(rig.m.health_record().acknowledged, Some(seen), "kept across a restart");
    // Unrelated inputs leave it; the next failure brings it back.
    rig.feed(Input::Due);
    assert!(rig.m.view().acknowledged.is_some());
    rig.now += Duration::hours(3);
    rig.wake();
    rig.exit("exit 0");
    assert_eq!(rig.m.view().acknowledged, None, "a new failure is the person's again: {:#?}", rig.m.view());
    // Snoozed for an hour: set aside until then, back after.
    let past = rig.now - Duration::minutes(1);
    let refused = ack(&mut rig, Some(past)).expect_err("a snooze in the past");
    assert!(matches!(refused, Refusal::Invalid(_)), "{refused:?}");
    let until = rig.now + Duration::hours(1);
    assert!(matches!(ack(&mut rig, Some(until)), Ok(Reply::Acknowledged)));
    assert_eq!(rig.m.view().acknowledged.and_then(|a| a.until), Some(until));
    let armed = rig.effects.iter().rev().find_map(|e| match e {
        Effect::ArmTimer { timer: Timer::SnoozeEnd, after } => Some(*after),
        _ => None,
    });
    assert_eq!(armed, Some(StdDuration::from_secs(3600)), "its end is a timer");
    rig.now = until + Duration::seconds(1);
    let out = rig.feed(Input::Timer(Timer::SnoozeEnd));
    assert!(out.iter().any(|e| matches!(e, Effect::Publish)), "told: {out:?}");
    assert_eq!(rig.m.view().acknowledged, None, "the snooze ended");
    assert_eq!(rig.m.health_record().acknowledged, None, "and is forgotten");
    // A restart reads it back as it was kept.
    let until = rig.now + Duration::hours(1);
    ack(&mut rig, Some(until)).expect("snoozed");
    let record = Some(rig.m.health_record());
    let limits = Limits { stop_grace: StdDuration::from_secs(10) };
    let mut again = Chamber::new(Loaded { health: record, ..loaded(&rig.todos, &[], 2) }, limits);
    let booted = again.handle(Input::Boot(Boot::default()), rig.now);
    assert_eq!(again.view().acknowledged.and_then(|a| a.until), Some(until), "after a restart");
    assert!(booted.iter().any(|e| matches!(e, Effect::ArmTimer { timer: Timer::SnoozeEnd, .. })), "{booted:?}");
}
