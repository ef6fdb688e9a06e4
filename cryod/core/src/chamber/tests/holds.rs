//! What ends or holds a session from outside its agent: the provider's
//! limit, a stall cryod saw, a budget, a person's approval.

use chrono::Duration;

use super::{Rig, add_todo, hibernate, messages};
use crate::chamber::{Call, Effect, Input, Sig, State, Timer, TodoOp};
use crate::session::{self, Outcome};
use crate::todo::Settle;

/// The provider's limit is not a failure: the claims wait for the reset as
/// the same attempt, the claimed mail gets one honest reply, mail waits for
/// the reset, the account is held, and nobody is asked to look.
#[test]
fn a_limited_session_defers_its_claims_to_the_reset_and_holds_the_account() {
    let mut rig = Rig::new(&[0], &["a.md"]);
    rig.wake();
    rig.call(Call::Receive).unwrap();
    let session = rig.m.live_session().expect("live").0;
    let until = rig.now + Duration::minutes(20);
    let end = rig.feed(Input::Exited {
        session,
        status: "exit 1".into(),
        log_tail: String::new(),
        limited: Some(until),
        used: None,
    });
    assert!(end.iter().any(
        |e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Defer { until: u }, .. }, .. } if *u == until)
    ));
    let again = rig.todos.items.iter().find(|t| !t.done).expect("the claim waits again");
    assert_eq!((again.at, again.attempt, again.text.as_str()), (Some(until), 0, "task 1"));
    let msgs = messages(&end);
    assert_eq!(msgs.len(), 1, "{msgs:#?}");
    assert!(msgs[0].body.contains("I will answer after 2026-11-23T09:20:00+00:00"), "{}", msgs[0].body);
    assert_eq!(msgs[0].meta.get("in_reply_to").map(String::as_str), Some("a.md"));
    assert!(end.iter().any(|e| matches!(e, Effect::HoldProvider { until: u } if *u == until)));
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::Limited { .. }, .. })));
    assert!(rig.m.view().attention.is_none(), "a limit asks nobody to look");
    // Its next wake waits on the held account: the chamber says `held`, by
    // whom and until when; a wake asked with no hold is plain idle.
    let hold = crate::limits::AccountHold { account: "anthropic:sk-…".into(), until };
    rig.feed(Input::AdmissionAsked { req: 9, budgets: vec![], held: Some(hold.clone()) });
    let v = rig.m.view();
    assert_eq!((v.state, v.held.as_ref()), (State::Held, Some(&hold)));
    rig.feed(Input::AdmissionAsked { req: 10, budgets: vec![], held: None });
    assert_eq!((rig.m.view().state, rig.m.view().held), (State::Idle, None));
}

/// An agent that would only wait out the limit (its stream said so) is
/// ended, and its session is limited, not stopped or crashed.
#[test]
fn a_limit_seen_while_the_agent_runs_ends_it_as_limited() {
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let session = rig.m.live_session().expect("live").0;
    let until = rig.now + Duration::minutes(5);
    let out = rig.feed(Input::ProviderLimit { session, until });
    assert!(out.iter().any(|e| matches!(e, Effect::Signal { sig: Sig::Term, .. })), "{out:#?}");
    let end = rig.exit("signal 15 (SIGTERM)");
    assert!(
        end.iter().any(
            |e| matches!(e, Effect::SessionEnded { outcome: Outcome::Limited { until: u, .. }, .. } if *u == until)
        )
    );
    assert!(end.iter().any(|e| matches!(e, Effect::HoldProvider { .. })));
    let msgs = messages(&end);
    assert_eq!(msgs.len(), 1, "one honest status message: {msgs:#?}");
    assert!(msgs[0].body.contains("stopped at the provider's limit"), "{}", msgs[0].body);
}

/// A session cryod saw stall is ended and settled as stalled: a failure
/// of its claim (retried), told once; a second sighting changes nothing,
/// and a hibernate that came first stands.
#[test]
fn a_stall_seen_while_the_agent_runs_ends_it_as_stalled() {
    use crate::session::Caught;
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let session = rig.m.live_session().expect("live").0;
    let out = rig.feed(Input::Caught { session, caught: Caught::Stalled { idle_secs: 600 } });
    assert!(out.iter().any(|e| matches!(e, Effect::Signal { sig: Sig::Term, .. })), "{out:#?}");
    let again = rig.feed(Input::Caught { session, caught: Caught::Looping { call: "x".into(), times: 9 } });
    assert!(!again.iter().any(|e| matches!(e, Effect::Signal { .. })), "told once: {again:#?}");
    let end = rig.exit("signal 15 (SIGTERM)");
    let stalled = Outcome::Caught(Caught::Stalled { idle_secs: 600 });
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome, .. } if *outcome == stalled)), "{end:#?}");
    assert_eq!(stalled.describe(), "stalled: no model request and no agent event for 10m");
    let msgs = messages(&end);
    assert!(msgs.iter().any(|m| m.subject.contains("stalled")), "{msgs:#?}");
    // What a person reads: the count, the setting, the advice and the
    // command, in the message and as the chamber's attention.
    let attention = rig.m.view().attention.unwrap_or_default();
    for part in ["for 10m", "`stall_after`", "cryoctl chamber log"] {
        assert!(attention.contains(part), "{part:?} not in {attention:?}");
        assert!(msgs.iter().any(|m| m.body.contains(part)), "{part:?} not in the message: {msgs:#?}");
    }
    // A loop seen after the agent hibernated: its hibernate stands.
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let session = rig.m.live_session().expect("live").0;
    rig.call(add_todo("+1h")).unwrap();
    rig.call(hibernate()).unwrap();
    rig.feed(Input::Caught { session, caught: Caught::Looping { call: "Bash: ls".into(), times: 20 } });
    let end = rig.exit("exit 0");
    assert!(end.iter().any(|e| matches!(e, Effect::SessionEnded { outcome: Outcome::Hibernated(_), .. })), "{end:#?}");
}

/// A budget's notice is one message from cryochamber; a budget reached
/// pauses the chamber with attention, and a resume releases it.
#[test]
fn a_budget_notices_pauses_and_a_resume_releases_it() {
    let mut rig = Rig::new(&[60], &[]);
    let daily = |used: f64| crate::limits::BudgetUse {
        who: "this chamber's".into(),
        key: "daily_usd",
        limit: 1.0,
        used,
        period: "2026-11-24".into(),
    };
    let out = rig.feed(Input::Budget { req: 1, uses: vec![daily(0.8)] });
    let msgs = messages(&out);
    assert_eq!((msgs.len(), msgs[0].from.as_str()), (1, crate::message::CRYOCHAMBER));
    assert!(!rig.m.paused());
    assert!(messages(&rig.feed(Input::Budget { req: 1, uses: vec![daily(0.9)] })).is_empty(), "told once");
    let why = format!("{} (this chamber's daily_usd = $1.00, $1.20 used)", session::BUDGET_REACHED);
    let out = rig.feed(Input::AdmissionAsked { req: 2, budgets: vec![daily(1.2)], held: None });
    assert!(out.iter().any(|e| matches!(e, Effect::SetPaused { paused: true, .. })), "{out:#?}");
    assert!(rig.m.paused());
    assert_eq!(rig.m.view().attention.as_deref(), Some(why.as_str()));
    rig.feed(Input::Pause { req: 3, pause: false });
    assert!(!rig.m.paused() && rig.m.view().attention.is_none(), "a resume releases the budget's pause");
    let out = rig.feed(Input::Budget { req: 4, uses: vec![daily(1.3)] });
    assert!(!rig.m.paused(), "released for the period: {out:#?}");
}

/// A session starts and asks approval `id`, waiting in place: its number,
/// and a request id for what follows.
fn asking(rig: &mut Rig, id: &str) -> (u64, crate::chamber::ReqId) {
    rig.wake();
    let session = rig.m.live_session().unwrap().0;
    assert_eq!(rig.m.view().state, State::Running);
    rig.feed(Input::ApprovalAsked { session, id: id.into() });
    (session, rig.req())
}

#[test]
fn a_parked_session_pauses_the_chamber_until_the_answer_resumes_its_conversation() {
    use crate::chamber::approval::PARK_GRACE;
    let mut rig = Rig::new(&[0], &[]);
    let (session, req) = asking(&mut rig, "a0");
    assert_eq!(rig.m.view().state, State::AwaitingApproval, "a session waiting in place is not running");
    assert!(rig.m.view().in_session);
    assert!(rig.m.asks("a0") && !rig.m.asks("a1"), "only its own ask is taken in place");
    rig.feed(Input::ApprovalTaken { session, id: "a0".into() });
    assert_eq!(rig.m.view().state, State::Running, "answered in place: running again");
    assert!(!rig.m.asks("a0"));
    rig.feed(Input::ApprovalAsked { session, id: "a1".into() });
    let out = rig.feed(Input::Parked { session, req, id: "a1".into(), what: "Bash: git push".into() });
    assert_eq!(rig.m.view().state, State::AwaitingApproval);
    // Parked, it goes within its grace: asked again meanwhile, the answer
    // is still the chamber's to hear, not the going session's to take.
    rig.feed(Input::ApprovalAsked { session, id: "a1".into() });
    assert!(rig.m.live_session().is_some() && !rig.m.asks("a1"), "a parked session does not take it in place");
    assert!(
        out.iter().any(
            |e| matches!(e, Effect::ArmTimer { timer: Timer::Park(s), after } if *s == session && *after == PARK_GRACE)
        ),
        "{out:#?}"
    );
    // It ends (by itself, or at the timer): awaiting approval, its claim
    // re-queued, the chamber paused and saying what it waits for.
    let end = rig.exit_in("exit 0", Some("conv-1"));
    assert!(
        end.iter()
            .any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Requeue { .. }, .. }, .. }))
    );
    assert!(
        end.iter().any(|e| matches!(
            e,
            Effect::SessionEnded { outcome: crate::session::Outcome::AwaitingApproval { .. }, .. }
        ))
    );
    assert!(rig.m.paused());
    assert_eq!(rig.m.view().state, State::AwaitingApproval, "parked: the chamber says what it waits for");
    assert!(!rig.m.view().in_session);
    assert!(rig.m.view().attention.unwrap_or_default().starts_with("awaiting approval: a1 (Bash: git push)"));
    // The ask ended with its session: an answer handed to a wait it left
    // behind is the machine's to hear (`Input::Answered`), not taken.
    assert!(!rig.m.asks("a1"), "no live session asks it");
    // What comes due meanwhile waits.
    let due = rig.feed(Input::Due);
    assert!(!due.iter().any(|e| matches!(e, Effect::RequestAdmission { .. })), "{due:#?}");
    // Another request's answer changes nothing.
    let req = rig.req();
    rig.feed(Input::Answered { req, id: "a9".into(), line: "Approval a9 was given".into() });
    assert!(rig.m.paused());
    // The answer: the chamber goes on, and the next session is told and
    // resumes the conversation that asked (though `session` is "fresh").
    let req = rig.req();
    let out = rig.feed(Input::Answered { req, id: "a1".into(), line: "Approval a1 was given by operator".into() });
    assert!(!rig.m.paused(), "{out:#?}");
    assert_ne!(rig.m.view().state, State::AwaitingApproval);
    assert!(out.iter().any(|e| matches!(e, Effect::RequestAdmission { .. })), "{out:#?}");
    let out = rig.feed(Input::Admitted { nonce: "n1".into(), token: "tok2".into(), fresh: None });
    let (prompt, resume) = out
        .iter()
        .find_map(|e| match e {
            Effect::Spawn { prompt, resume, .. } => Some((prompt.clone(), resume.clone())),
            _ => None,
        })
        .expect("a session starts");
    assert!(prompt.contains("Approval a1 was given by operator"), "{prompt}");
    assert_eq!(resume.as_deref(), Some("conv-1"));
}

/// An operator resumes a chamber parked for an approval without answering
/// it; a later session makes the same call, joins the request and takes
/// the answer in place. The chamber no longer waits for it: paused again,
/// it says paused, not "awaiting approval" for a request already answered.
#[test]
fn an_answer_taken_in_place_ends_the_chambers_wait_for_it() {
    let mut rig = Rig::new(&[0], &[]);
    let (session, req) = asking(&mut rig, "a1");
    rig.feed(Input::Parked { session, req, id: "a1".into(), what: "Bash: git push".into() });
    rig.exit_in("exit 0", Some("conv-1"));
    assert_eq!(rig.m.view().state, State::AwaitingApproval);
    let req = rig.req();
    rig.feed(Input::Pause { req, pause: false });
    assert!(!rig.m.paused());
    rig.feed(Input::Admitted { nonce: "n1".into(), token: "tok2".into(), fresh: None });
    let session = rig.m.live_session().expect("the resumed chamber runs").0;
    rig.feed(Input::ApprovalAsked { session, id: "a1".into() });
    rig.feed(Input::ApprovalTaken { session, id: "a1".into() });
    rig.call(add_todo("+1h")).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    let req = rig.req();
    rig.feed(Input::Pause { req, pause: true });
    assert!(rig.m.paused());
    assert_eq!(rig.m.view().state, State::Paused, "{:?}", rig.m.view().attention);
}
