//! A wake from its due time to its agent, and the agent's calls in a
//! session: the order of ledger, spawn and claim; mail, hibernate and
//! dialog; a `[git]` worktree; a conversation continued.

use chrono::Duration;

use super::{PID, Rig, add_todo, hibernate, messages, pos, reply, settings, spawn_of, t0};
use crate::chamber::{
    Call, DIALOG_LAST, Effect, Failed, Input, LogLine, Refusal, Reply, Settings, Timer, TodoCall, TodoOp,
};
use crate::session::Trigger;
use crate::todo::Settle;

#[test]
fn a_due_wake_asks_for_admission_then_records_spawns_and_claims_in_that_order() {
    let mut rig = Rig::new(&[0], &[]);
    let due = rig.feed(Input::Due);
    assert!(due.iter().any(|e| matches!(e, Effect::RequestAdmission(Trigger::Scheduled))), "{due:#?}");
    assert!(!due.iter().any(|e| matches!(e, Effect::Spawn { .. })), "nothing runs before a permit");

    let out = rig.feed(Input::Admitted { nonce: "n0".into(), token: "tok".into(), fresh: None });
    let record = pos(&out, "RecordWake", |e| matches!(e, Effect::RecordWake(_)));
    let token = pos(&out, "RegisterToken", |e| matches!(e, Effect::RegisterToken { .. }));
    let spawn = pos(&out, "Spawn", |e| matches!(e, Effect::Spawn { .. }));
    let started = pos(&out, "SessionStarted", |e| matches!(e, Effect::SessionStarted { pid: PID, .. }));
    let claim = pos(&out, "a claim", |e| matches!(e, Effect::UpdateTodos { op: TodoOp::Claim { .. }, .. }));
    // The ledger row, with its claims, is the claim's durable record: the
    // agent starts right after it, and todo.json shows the claim next.
    assert!(record < token && token < spawn && spawn < started && started < claim, "{out:#?}");
    // The shell's lines about the start go inside the session's block.
    let begin = pos(&out, "the block's start", |e| matches!(e, Effect::Log(LogLine::Begin(2))));
    let note = pos(&out, "the spawn's note", |e| matches!(e, Effect::Log(LogLine::Event(t)) if t == "a note"));
    assert!(spawn < begin && begin < note, "{out:#?}");
    let Effect::RecordWake(w) = &out[record] else { unreachable!() };
    assert_eq!(w.claims.len(), 1);
    // The claim names the wake that holds it, in todo.json itself.
    assert_eq!(rig.todos.items[0].claimed_by.as_deref(), Some(w.wake_id.as_str()));
    assert_eq!(rig.m.live_session().map(|s| s.0), Some(2));
}

#[test]
fn a_permit_with_nothing_due_is_given_back_without_a_session() {
    let mut rig = Rig::new(&[60], &[]);
    // A stale deadline (the TODO moved): the machine looks again.
    let out = rig.wake();
    assert!(out.iter().any(|e| matches!(e, Effect::Release)), "{out:#?}");
    assert!(!out.iter().any(|e| matches!(e, Effect::RecordWake(_) | Effect::Spawn { .. })), "{out:#?}");
    assert!(out.iter().any(|e| matches!(e, Effect::Plan(Some(t)) if *t == t0() + Duration::minutes(60))));
}

/// A `skip` series whose slot passed long ago (the chamber was paused, say)
/// moves on at the next wake even when other work wakes the agent: it is
/// not left standing, due and unmentioned, behind a busy chamber.
#[test]
fn a_long_past_skip_slot_moves_on_beside_a_wake_for_other_work() {
    let mut rig = Rig::new(&[0], &[]);
    let daily = crate::todo::NewTodo {
        text: "daily check".into(),
        at: Some(t0() - Duration::hours(3)),
        every: Some("1d".into()),
        missed: crate::todo::Missed::Skip,
        ..Default::default()
    };
    let id = rig.todos.add(daily, t0() - Duration::days(1), chrono_tz::UTC).unwrap();
    rig.feed(Input::TodosChanged(Ok(rig.todos.clone())));
    rig.feed(Input::Due);
    let out = rig.feed(Input::Admitted { nonce: "n0".into(), token: "tok".into(), fresh: None });
    let Some(Effect::RecordWake(w)) = out.iter().find(|e| matches!(e, Effect::RecordWake(_))) else {
        panic!("the one-shot TODO wakes the agent: {out:#?}");
    };
    assert_eq!(w.claims.iter().map(|c| c.id).collect::<Vec<_>>(), vec![1], "the skip slot is not run");
    let series = rig.todos.get(id).unwrap();
    assert_eq!(series.at, Some(t0() + Duration::hours(21)), "the series moved to its next slot");
    assert!(series.claimed_by.is_none());
    assert!(
        out.iter().any(
            |e| matches!(e, Effect::Log(LogLine::Event(t)) if t.starts_with(&format!("TODO {id} missed its slot")))
        ),
        "the slot passed by is said: {out:#?}"
    );
    assert!(out.iter().any(|e| matches!(e, Effect::RecordPassed(_))), "and kept: {out:#?}");
    // The session runs on: no second permit is asked for, nothing re-planned.
    assert_eq!(rig.m.live_session().map(|s| s.0), Some(2));
    assert!(!out.iter().any(|e| matches!(e, Effect::RequestAdmission(_))), "{out:#?}");
}

#[test]
fn hibernate_is_refused_while_mail_is_unread_and_accepted_once_it_is_received() {
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.call(add_todo("+1h")).unwrap();
    rig.feed(Input::Inbox { unread: vec!["a.md".into()], arrived: true });
    let refused = rig.call(hibernate()).unwrap_err();
    let Refusal::Precondition(why) = refused else { panic!("{refused:?}") };
    assert!(why.contains("unread"), "{why}");

    let Ok(Reply::Mail(names)) = rig.call(Call::Receive) else { panic!("receive failed") };
    assert_eq!(names, ["a.md"]);
    let Ok(Reply::Sent { reply: true, .. }) =
        rig.call(Call::Send { text: "done it".into(), question: false, subject: String::new() })
    else {
        panic!("the send was not a reply")
    };
    assert!(matches!(rig.call(hibernate()), Ok(Reply::Hibernate(_))));
}

#[test]
fn a_session_journals_its_batch_before_archiving_it_and_closes_it_at_the_end() {
    let mut rig = Rig::new(&[], &["a.md"]);
    let out = rig.wake();
    assert!(out.iter().any(|e| matches!(e, Effect::Spawn { .. })), "mail wakes the chamber: {out:#?}");
    rig.effects.clear();
    rig.call(Call::Receive).unwrap();
    let journal = pos(&rig.effects, "JournalClaim", |e| matches!(e, Effect::JournalClaim { .. }));
    let archive = pos(&rig.effects, "ArchiveInbox", |e| matches!(e, Effect::ArchiveInbox { .. }));
    assert!(journal < archive);
    rig.call(Call::Send { text: "answer".into(), question: false, subject: String::new() }).unwrap();
    rig.call(add_todo("+1h")).unwrap();
    rig.call(hibernate()).unwrap();
    let end = rig.exit("exit 0");
    // Answered by the agent: no fallback, and the journal is closed.
    assert!(messages(&end).is_empty(), "{end:#?}");
    assert!(end.iter().any(|e| matches!(e, Effect::JournalAnswer { number: 2 })), "{end:#?}");
}

/// A `[git]` session: its worktree is made ready before the agent (which
/// starts in it, the prompt opening with it), and its work kept after the
/// agent exits; a failed preparation starts no agent and leaves the line
/// as the chamber's attention; a stop while preparing ends the session at
/// once, and the preparation's late answer starts nothing.
#[test]
fn a_git_session_is_prepared_first_and_settled_after() {
    let mut rig = Rig::new(&[0, 60], &[]);
    rig.feed(Input::ConfigChanged { config: Ok(Settings { git: true, ..settings() }), warnings: Vec::new() });
    let out = rig.wake();
    assert!(out.iter().any(|e| matches!(e, Effect::Prepare { session: 2, .. })), "{out:#?}");
    assert!(!out.iter().any(|e| matches!(e, Effect::Spawn { .. })), "no agent before its worktree");
    let wake_id = out
        .iter()
        .find_map(|e| match e {
            Effect::Prepare { wake_id, .. } => Some(wake_id.clone()),
            _ => None,
        })
        .unwrap();
    let place =
        crate::chamber::Workplace { dir: "/c/worktree".into(), opening: "WORKTREE: here\n".into(), notes: vec![] };
    let out = rig.feed(Input::Prepared { wake_id: wake_id.clone(), result: Ok(place) });
    let spawn = out.iter().find_map(|e| match e {
        Effect::Spawn { workdir, prompt, .. } => Some((workdir.clone(), prompt.clone())),
        _ => None,
    });
    let (workdir, prompt) = spawn.expect("the agent starts once its worktree is ready");
    assert_eq!(workdir.as_deref(), Some(std::path::Path::new("/c/worktree")));
    assert!(prompt.starts_with("WORKTREE: here\n"), "{prompt}");
    // A second answer for the same wake starts nothing more.
    let again = rig.feed(Input::Prepared {
        wake_id,
        result: Ok(crate::chamber::Workplace { dir: "/x".into(), opening: String::new(), notes: vec![] }),
    });
    assert!(!again.iter().any(|e| matches!(e, Effect::Spawn { .. })));
    rig.call(hibernate()).unwrap();
    let end = rig.exit("exit 0");
    assert!(end.iter().any(|e| matches!(e, Effect::Settle { session: 2 })), "{end:#?}");
    // The next: its worktree cannot be made ready.
    rig.now += Duration::hours(2);
    let out = rig.wake();
    let wake_id = out.iter().find_map(|e| match e {
        Effect::Prepare { wake_id, .. } => Some(wake_id.clone()),
        _ => None,
    });
    let line = "git: the worktree is locked (once mended, `cryoctl chamber wake c` runs a session)";
    let out = rig.feed(Input::Prepared { wake_id: wake_id.unwrap(), result: Err(Failed(line.into())) });
    assert!(!out.iter().any(|e| matches!(e, Effect::Spawn { .. } | Effect::Settle { .. })), "{out:#?}");
    assert!(rig.m.view().attention.as_deref().is_some_and(|a| a.contains("worktree is locked")), "{:?}", rig.m.view());
    assert!(rig.m.view().attention.as_deref().is_some_and(|a| !a.contains("API key")), "{:?}", rig.m.view());
    // And a stop while one is being made ready.
    let out = rig.feed(Input::Wake { req: 900, message: None, replace: false });
    let out: Vec<Effect> = out
        .into_iter()
        .chain(rig.feed(Input::Admitted { nonce: "n9".into(), token: "t9".into(), fresh: None }))
        .collect();
    let wake_id = out.iter().find_map(|e| match e {
        Effect::Prepare { wake_id, .. } => Some(wake_id.clone()),
        _ => None,
    });
    let wake_id = wake_id.expect("a third preparation");
    let req = rig.req();
    let out = rig.feed(Input::Stop { req, wait: true });
    assert_eq!(reply(&out, req), Some(Ok(Reply::Stopped { already: false, ended: true })), "{out:#?}");
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::UpdateTodos { op: TodoOp::Settle { how: Settle::Requeue { .. }, .. }, .. }))
    );
    let late = rig.feed(Input::Prepared {
        wake_id,
        result: Ok(crate::chamber::Workplace { dir: "/c/worktree".into(), opening: String::new(), notes: vec![] }),
    });
    assert!(!late.iter().any(|e| matches!(e, Effect::Spawn { .. })), "{late:#?}");
}

#[test]
fn a_timer_of_an_ended_session_does_nothing() {
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    rig.call(add_todo("+1h")).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    for t in [Timer::Timeout(2), Timer::Kill(2), Timer::AfterHibernate(2), Timer::LingerDone(2)] {
        let out = rig.feed(Input::Timer(t));
        assert!(!out.iter().any(|e| matches!(e, Effect::Signal { .. })), "{t:?}: {out:#?}");
    }
}

#[test]
fn dialog_without_last_shows_twenty_and_claims_the_unread_mail() {
    let mut rig = Rig::new(&[0], &["a.md"]);
    rig.wake();
    let reply = rig.call(Call::Dialog { last: 0, all: false });
    assert_eq!(reply, Ok(Reply::Dialog { claimed: 1, last: DIALOG_LAST, all: false }));
    assert_eq!(rig.call(Call::Dialog { last: 3, all: false }), Ok(Reply::Dialog { claimed: 0, last: 3, all: false }));
}

/// `session = "resume"`: a session after a hibernate continues its
/// conversation (short prompt, the ledger says from which), one after a
/// crash starts afresh, and past `resume_max_sessions` the next is told why
/// it starts afresh.
#[test]
fn sessions_continue_one_conversation_within_the_caps() {
    let mut rig = Rig::new(&[0], &[]);
    let continuity = crate::session::Continuity { resume: true, max_sessions: 2, ..Default::default() };
    rig.feed(Input::ConfigChanged { config: Ok(Settings { continuity, ..settings() }), warnings: Vec::new() });
    let round = |rig: &mut Rig, crash: bool, conversation: &str| {
        let req = rig.req();
        let mut out = rig.feed(Input::Wake { req, message: None, replace: false });
        out.extend(rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None }));
        let spawn = spawn_of(&out);
        if !crash {
            let add = TodoCall::Add {
                text: "next".into(),
                at: "+9h".into(),
                every: String::new(),
                cron: String::new(),
                missed: String::new(),
                precheck: String::new(),
            };
            rig.call(Call::Todo(add)).unwrap();
            rig.call(hibernate()).unwrap();
        }
        rig.exit_in(if crash { "exit 1" } else { "exit 0" }, Some(conversation));
        rig.now += Duration::minutes(10);
        spawn
    };
    let (resume, prompt, from) = round(&mut rig, false, "A");
    assert_eq!((resume, from), (None, None));
    assert!(prompt.starts_with(crate::prompt::PROTOCOL.lines().next().unwrap()));
    let (resume, prompt, from) = round(&mut rig, false, "A");
    assert_eq!((resume.as_deref(), from), (Some("A"), Some(2)), "the rig's first session is 2");
    assert!(prompt.starts_with("# A new session in the same chamber"), "{prompt}");
    // Two sessions in conversation A: the cap.
    let (resume, prompt, _) = round(&mut rig, true, "B");
    assert_eq!(resume, None);
    assert!(prompt.contains("FRESH CONVERSATION: the last conversation spans 2 sessions"), "{prompt}");
    // After a crash: afresh, with nothing to say about caps.
    let (resume, prompt, _) = round(&mut rig, false, "C");
    assert_eq!(resume, None);
    assert!(!prompt.contains("FRESH CONVERSATION"), "{prompt}");
    let (resume, _, from) = round(&mut rig, false, "C");
    assert_eq!((resume.as_deref(), from), (Some("C"), Some(5)));
    // Too long a pause.
    rig.now += Duration::hours(4);
    let (resume, prompt, _) = round(&mut rig, false, "D");
    assert_eq!(resume, None);
    assert!(prompt.contains("more than resume_max_age (3h)"), "{prompt}");
}

/// Mail to a chamber that will not read it at once says why, until when,
/// and how to have it read now.
#[test]
fn mail_that_waits_says_so() {
    let mut rig = Rig::new(&[60], &[]);
    assert_eq!(rig.m.mail_waits(), None, "an idle started chamber reads mail at once");
    let req = rig.req();
    rig.feed(Input::Wake { req, message: None, replace: false });
    rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    rig.exit("exit 1");
    let line = rig.m.mail_waits().expect("held after a failure");
    assert!(line.contains("after 1 failed session(s) in a row") && line.contains("cryoctl chamber wake c"), "{line}");
    rig.feed(Input::Pause { req: 9, pause: true });
    assert!(rig.m.mail_waits().unwrap().contains("cryoctl chamber resume c"));
}
