//! The chamber's rules, one at a time: each test feeds the machine inputs
//! and reads the effects it asks for, with a small rig that performs the
//! result-bearing effects the way a healthy shell would (or fails the one a
//! test names). The simulator (`crate::sim`) checks the same rules at random,
//! across crashes; these pin the order and the wording.

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::{
    Boot, Call, Chamber, DEFAULT_PRECHECK_TIMEOUT, DIALOG_LAST, Effect, Failed, Input, Limits, Loaded, LogLine,
    OpenBatch, OpenSession, Outgoing, Refusal, Reply, ReqId, Rerun, SKIP_GRACE, Settings, Sig, Timer, TodoCall, TodoOp,
    TodoWriteError, WRITE_RETRY, handoff,
};
use crate::chamber::State;
use crate::hibernate::Ending;
use crate::session::{self, Outcome, Trigger};
use crate::todo::{Missed, NewTodo, Settle, TodoList};

const PID: u32 = 4242;

/// The machine, its `todo.json`, and every effect it asked for.
struct Rig {
    m: Chamber,
    now: DateTime<Utc>,
    todos: TodoList,
    effects: Vec<Effect>,
    /// Effects of this kind fail (by their `Debug` name: "RecordWake", …).
    fail: Option<&'static str>,
    written: u32,
    req: ReqId,
}

fn settings() -> Settings {
    Settings {
        agent: "agent".into(),
        timezone: chrono_tz::UTC,
        timezone_set: true,
        max_session_duration: 1800,
        max_attempts: 3,
        mcp: false,
        continuity: crate::session::Continuity::default(),
        precheck: None,
        approvals: None,
        precheck_timeout: DEFAULT_PRECHECK_TIMEOUT,
        on_end: Vec::new(),
        expect_activity_within: None,
        git: false,
    }
}

/// A started chamber's machine as loaded from these files.
fn machine(todos: &TodoList, unread: &[&str], last_session: u64) -> Chamber {
    Chamber::new(loaded(todos, unread, last_session), Limits { stop_grace: StdDuration::from_secs(10) })
}

/// What a started chamber's machine is made from, with these files.
fn loaded(todos: &TodoList, unread: &[&str], last_session: u64) -> Loaded {
    Loaded {
        id: 1,
        name: "c".into(),
        started: true,
        paused: false,
        archived: false,
        begun_again: false,
        last_session,
        last_result: None,
        last_lateness_ms: None,
        open_questions: 0,
        config: Ok(settings()),
        warnings: Vec::new(),
        todos: Ok(todos.clone()),
        unread: unread.iter().map(|s| s.to_string()).collect(),
        system_tz: chrono_tz::UTC,
        thread: None,
        last_visible: None,
        rerun: None,
        awaiting: None,
        health: None,
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 9, 0, 0).unwrap()
}

impl Rig {
    /// A started chamber that has run a session before, with these TODOs (one-shot, at these offsets in minutes from now) and unread mail.
    fn new(due_in_minutes: &[i64], unread: &[&str]) -> Rig {
        let now = t0();
        let mut todos = TodoList::default();
        for (i, m) in due_in_minutes.iter().enumerate() {
            let new = NewTodo {
                text: format!("task {}", i + 1),
                at: Some(now + Duration::minutes(*m)),
                every: None,
                cron: None,
                missed: Missed::Once,
                precheck: None,
            };
            todos.add(new, now - Duration::hours(1), chrono_tz::UTC).unwrap();
        }
        let m = machine(&todos, unread, 1);
        let mut rig = Rig { m, now, todos, effects: Vec::new(), fail: None, written: 0, req: 100 };
        rig.feed(Input::Boot(Boot::default()));
        rig.effects.clear();
        rig
    }

    fn req(&mut self) -> ReqId {
        self.req += 1;
        self.req
    }

    /// Feeds one input; performs result-bearing effects at once (as the
    /// shell does) and returns every effect it caused, in order.
    fn feed(&mut self, input: Input) -> Vec<Effect> {
        let start = self.effects.len();
        let mut queue: std::collections::VecDeque<Effect> = self.m.handle(input, self.now).into();
        while let Some(e) = queue.pop_front() {
            self.effects.push(e.clone());
            if let Some(result) = self.perform(e) {
                for e in self.m.handle(result, self.now).into_iter().rev() {
                    queue.push_front(e);
                }
            }
        }
        self.effects[start..].to_vec()
    }

    fn fails(&self, e: &Effect) -> bool {
        self.fail.is_some_and(|k| format!("{e:?}").starts_with(k))
    }

    fn perform(&mut self, e: Effect) -> Option<Input> {
        let failing = self.fails(&e);
        Some(match e {
            Effect::RecordWake(_) => Input::Recorded(if failing { err() } else { Ok(()) }),
            Effect::UpdateTodos { op, then } => {
                let mut list = self.todos.clone();
                let result = if failing {
                    Err(TodoWriteError::Write("disk full".into()))
                } else {
                    match op.apply(&mut list) {
                        Ok(done) => {
                            self.todos = list.clone();
                            Ok((done, list))
                        }
                        Err(e) => Err(TodoWriteError::Refused(e)),
                    }
                };
                Input::TodosUpdated { then, result }
            }
            Effect::Spawn { .. } => {
                Input::Spawned { result: if failing { err() } else { Ok(PID) }, notes: vec!["a note".into()] }
            }
            Effect::WriteMessage { then, .. } => {
                self.written += 1;
                Input::MessageWritten {
                    then,
                    result: if failing { err() } else { Ok(format!("m{}.md", self.written)) },
                }
            }
            Effect::SetStarted { then, .. } | Effect::SetPaused { then, .. } | Effect::SetArchived { then, .. } => {
                Input::StoreWritten { then, result: if failing { err() } else { Ok(()) } }
            }
            Effect::JournalClaim { names, then, .. } => {
                Input::Journaled { then, names, result: if failing { err() } else { Ok(()) } }
            }
            Effect::ArchiveInbox { names, then } => {
                Input::Archived { then, result: if failing { err() } else { Ok(names) } }
            }
            Effect::WritePlan { req, .. } => Input::PlanWritten { req, result: if failing { err() } else { Ok(()) } },
            Effect::Reset { req } => {
                if !failing {
                    self.todos = TodoList::default();
                }
                Input::ResetDone { req, result: if failing { err() } else { Ok("history/20261123T090000Z".into()) } }
            }
            _ => return None,
        })
    }

    /// Due, then the permit: a session starts.
    fn wake(&mut self) -> Vec<Effect> {
        let mut out = self.feed(Input::Due);
        out.extend(self.feed(Input::Admitted { nonce: "n0".into(), token: "tok".into(), fresh: None }));
        out
    }

    fn call(&mut self, call: Call) -> Result<Reply, Refusal> {
        let req = self.req();
        let session = self.m.live_session().expect("a live session").0;
        let out = self.feed(Input::Agent { session, req, call });
        reply(&out, req).expect("the call was answered")
    }

    fn exit(&mut self, status: &str) -> Vec<Effect> {
        self.exit_in(status, None)
    }

    /// Exits, the agent's stream having named its conversation.
    fn exit_in(&mut self, status: &str, conversation: Option<&str>) -> Vec<Effect> {
        let session = self.m.live_session().expect("a live session").0;
        let used = conversation.map(|c| crate::session::Used { conversation: c.into(), tokens: 1000 });
        self.feed(Input::Exited { session, status: status.into(), log_tail: String::new(), limited: None, used })
    }
}

fn err<T>() -> Result<T, Failed> {
    Err(Failed::from("disk full"))
}

fn reply(effects: &[Effect], req: ReqId) -> Option<Result<Reply, Refusal>> {
    effects.iter().find_map(|e| match e {
        Effect::Reply { req: r, result } if *r == req => Some(result.clone()),
        _ => None,
    })
}

/// The index of the first effect `pred` matches (panics, listing them, if none).
fn pos(effects: &[Effect], what: &str, pred: impl Fn(&Effect) -> bool) -> usize {
    effects.iter().position(pred).unwrap_or_else(|| panic!("no {what} among {effects:#?}"))
}

fn messages(effects: &[Effect]) -> Vec<&crate::message::Message> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::WriteMessage { message, .. } => Some(message),
            _ => None,
        })
        .collect()
}

fn hibernate() -> Call {
    Call::Hibernate { summary: "done".into(), complete: false, exit_code: 0, linger_secs: 0 }
}

fn add_todo(at: &str) -> Call {
    Call::Todo(TodoCall::Add {
        text: "next".into(),
        at: at.into(),
        every: "".into(),
        cron: "".into(),
        missed: "".into(),
        precheck: String::new(),
    })
}

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
fn a_permit_with_nothing_due_is_given_back_without_a_session() {
    let mut rig = Rig::new(&[60], &[]);
    // A stale deadline (the TODO moved): the machine looks again.
    let out = rig.wake();
    assert!(out.iter().any(|e| matches!(e, Effect::Release)), "{out:#?}");
    assert!(!out.iter().any(|e| matches!(e, Effect::RecordWake(_) | Effect::Spawn { .. })), "{out:#?}");
    assert!(out.iter().any(|e| matches!(e, Effect::Plan(Some(t)) if *t == t0() + Duration::minutes(60))));
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
fn dialog_without_last_shows_twenty_and_claims_the_unread_mail() {
    let mut rig = Rig::new(&[0], &["a.md"]);
    rig.wake();
    let reply = rig.call(Call::Dialog { last: 0, all: false });
    assert_eq!(reply, Ok(Reply::Dialog { claimed: 1, last: DIALOG_LAST, all: false }));
    assert_eq!(rig.call(Call::Dialog { last: 3, all: false }), Ok(Reply::Dialog { claimed: 0, last: 3, all: false }));
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

/// The spawn and the ledger row of the session about to start.
fn spawn_of(out: &[Effect]) -> (Option<String>, String, Option<u64>) {
    let resume = out.iter().find_map(|e| match e {
        Effect::Spawn { resume, prompt, .. } => Some((resume.clone(), prompt.clone())),
        _ => None,
    });
    let (resume, prompt) = resume.unwrap_or_else(|| panic!("no spawn among {out:#?}"));
    let from = out.iter().find_map(|e| match e {
        Effect::RecordWake(w) => Some(w.resumed_from),
        _ => None,
    });
    (resume, prompt, from.expect("a recorded wake"))
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

/// `[[on_end]]`: a matching end is handed on (with the summary and the
/// session number), others are not, and a link carries at most its rate an
/// hour: the rest wait in order for the timer, and say so.
#[test]
fn session_ends_are_handed_on_at_the_links_rate() {
    use handoff::{HandedOff, OnEnd, When};
    let mut rig = Rig::new(&[0], &[]);
    let on_end = vec![
        OnEnd { chamber: "review".into(), when: When::Hibernated, message: None, max_per_hour: 2 },
        OnEnd {
            chamber: "pager".into(),
            when: When::Failed,
            message: Some("{chamber} broke: {outcome}".into()),
            max_per_hour: 6,
        },
    ];
    rig.feed(Input::ConfigChanged { config: Ok(Settings { on_end, ..settings() }), warnings: Vec::new() });
    let handoffs = |out: &[Effect]| -> Vec<handoff::HandOff> {
        out.iter()
            .filter_map(|e| match e {
                Effect::HandOff(h) => Some(h.clone()),
                _ => None,
            })
            .collect()
    };
    let session = |rig: &mut Rig, crash: bool| {
        let req = rig.req();
        let mut out = rig.feed(Input::Wake { req, message: None, replace: false });
        out.extend(rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None }));
        if !crash {
            rig.call(add_todo("+9h")).unwrap();
            rig.call(hibernate()).unwrap();
        }
        out.extend(rig.exit(if crash { "exit 1" } else { "exit 0" }));
        rig.now += Duration::minutes(10);
        out
    };
    let out = session(&mut rig, false);
    let sent = handoffs(&out);
    assert_eq!(sent.len(), 1, "{out:#?}");
    assert_eq!((sent[0].to.as_str(), sent[0].session), ("review", 2));
    assert_eq!(sent[0].subject, "c: session 2 hibernated");
    assert_eq!(sent[0].body, "Session 2 of c ended: hibernated.\n\ndone");
    let ended = pos(&out, "SessionEnded", |e| matches!(e, Effect::SessionEnded { .. }));
    let handed = pos(&out, "HandOff", |e| matches!(e, Effect::HandOff(_)));
    assert!(ended < handed, "the ledger has the end before it is handed on");
    let done = HandedOff {
        file: "messages/inbox/x.md".into(),
        waits: None,
        looped: Some(vec!["c".into(), "review".into(), "c".into()]),
    };
    rig.feed(Input::HandedOff { to: "review".into(), session: 2, result: Ok(done) });
    let line = rig.m.view().handoffs.expect("a line");
    assert!(line.starts_with("→ review when hibernated, → pager when failed; last: session 2 → review"), "{line}");
    assert!(line.ends_with("loop: c → review → c"), "{line}");

    // A crash goes to the pager only, with its template.
    let sent = handoffs(&session(&mut rig, true));
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].to.as_str(), sent[0].body.as_str()), ("pager", "c broke: crashed: exit 1"));

    // The second hibernate within the hour is sent; the third waits.
    assert_eq!(handoffs(&session(&mut rig, false)).len(), 1);
    let out = session(&mut rig, false);
    assert!(handoffs(&out).is_empty(), "over the link's rate");
    let armed = out.iter().find_map(|e| match e {
        Effect::ArmTimer { timer: Timer::HandOffs, after } => Some(*after),
        _ => None,
    });
    assert_eq!(armed, Some(StdDuration::from_secs(30 * 60)), "the first of the hour was sent 30 minutes ago");
    assert!(rig.m.view().handoffs.unwrap().contains("1 waiting for the rate limit"));
    let logged = out.iter().any(|e| matches!(e, Effect::Log(LogLine::Event(t)) if t.contains("to review waits until")));
    assert!(logged, "{out:#?}");
    rig.now += Duration::minutes(20);
    let sent = handoffs(&rig.feed(Input::Timer(Timer::HandOffs)));
    assert_eq!(sent.iter().map(|h| h.session).collect::<Vec<_>>(), vec![5]);

    // A failed delivery needs a person.
    rig.feed(Input::HandedOff { to: "review".into(), session: 5, result: Err("no chamber named \"review\"".into()) });
    assert!(rig.m.view().attention.unwrap().contains("could not hand session 5 on to review"));
}

/// A slot that runs late is recorded as missed, with the span that held it:
/// here a pause; before the first boot, cryod not running.
#[test]
fn a_late_slot_is_recorded_with_why() {
    let mut rig = Rig::new(&[30], &[]);
    rig.feed(Input::Pause { req: 1, pause: true });
    rig.now += Duration::hours(2);
    rig.feed(Input::Pause { req: 2, pause: false });
    let out = rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    let rows = out
        .iter()
        .find_map(|e| match e {
            Effect::RecordPassed(rows) => Some(rows.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no missed slot among {out:#?}"));
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].todo, rows[0].what), (1, "missed"));
    assert_eq!(rows[0].reason, "ran 1h 30m late in session 2: the chamber was paused");

    // Slots before this cryod started: it was not running.
    let mut rig = Rig::new(&[-90], &[]);
    let out = rig.feed(Input::Due);
    let mut out2 = rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    out2.extend(out);
    let reason = out2.iter().find_map(|e| match e {
        Effect::RecordPassed(rows) => Some(rows[0].reason.clone()),
        _ => None,
    });
    assert_eq!(
        reason.as_deref(),
        Some("ran 1h 30m late in session 2: cryod was not running (it started at 2026-11-23T09:00:00+00:00)")
    );
}

/// The dead man's switch: `silent` only after a whole window without a
/// visible message while started, once per silence; a message ends it.
#[test]
fn silent_is_raised_once_after_a_whole_quiet_window() {
    let mut rig = Rig::new(&[60 * 24], &[]);
    let window = Duration::hours(1);
    let settings = Settings { expect_activity_within: Some(window), ..settings() };
    rig.feed(Input::ConfigChanged { config: Ok(settings), warnings: Vec::new() });
    let silent = |out: &[Effect]| out.iter().filter(|e| matches!(e, Effect::Notify(n) if n.kind == "silent")).count();
    // The agent talks 30 minutes in: the timer at the hour finds it recent.
    rig.now += Duration::minutes(30);
    let req = rig.req();
    rig.feed(Input::Wake { req, message: None, replace: false });
    rig.feed(Input::Admitted { nonce: "n".into(), token: "t".into(), fresh: None });
    rig.call(add_todo("+9h")).unwrap();
    rig.call(Call::Send { text: "still here".into(), question: false, subject: String::new() }).unwrap();
    rig.call(hibernate()).unwrap();
    rig.exit("exit 0");
    rig.now = t0() + Duration::hours(1);
    let out = rig.feed(Input::Timer(Timer::Silence));
    assert_eq!(silent(&out), 0, "the agent spoke half an hour ago");
    let rearmed = out.iter().any(|e| matches!(e, Effect::ArmTimer { timer: Timer::Silence, .. }));
    assert!(rearmed, "armed again for what is left: {out:#?}");
    // A whole window of nothing: once.
    rig.now = t0() + Duration::minutes(91);
    let out = rig.feed(Input::Timer(Timer::Silence));
    assert_eq!(silent(&out), 1);
    let n = out
        .iter()
        .find_map(|e| match e {
            Effect::Notify(n) => Some(n.clone()),
            _ => None,
        })
        .unwrap();
    assert!(n.title.starts_with("c has been silent for 1h"), "{n:?}");
    rig.now += Duration::hours(5);
    assert_eq!(silent(&rig.feed(Input::Timer(Timer::Silence))), 0, "once per silence");
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

#[test]
fn a_parked_session_pauses_the_chamber_until_the_answer_resumes_its_conversation() {
    use crate::chamber::approval::PARK_GRACE;
    let mut rig = Rig::new(&[0], &[]);
    rig.wake();
    let session = rig.m.live_session().unwrap().0;
    let req = rig.req();
    assert_eq!(rig.m.view().state, State::Running);
    rig.feed(Input::ApprovalAsked { session, id: "a0".into() });
    assert_eq!(rig.m.view().state, State::AwaitingApproval, "a session waiting in place is not running");
    assert!(rig.m.view().in_session);
    rig.feed(Input::ApprovalTaken { session, id: "a0".into() });
    assert_eq!(rig.m.view().state, State::Running, "answered in place: running again");
    let out = rig.feed(Input::Parked { session, req, id: "a1".into(), what: "Bash: git push".into() });
    assert_eq!(rig.m.view().state, State::AwaitingApproval);
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

/// The shell's news of a provider's limit (its wakes gone to a fallback
/// account) is a message in the conversation and a `limited` event for the
/// notifiers.
#[test]
fn a_failover_notice_reaches_the_conversation_and_the_notifiers() {
    let mut rig = Rig::new(&[60], &[]);
    let subject = "claude-1234 is at its limit: sessions go to spare".to_string();
    let out = rig.feed(Input::Notice { subject: subject.clone(), body: "The next sessions go to spare too.".into() });
    assert!(messages(&out).iter().any(|m| m.subject == subject), "{out:#?}");
    let told = out.iter().any(|e| matches!(e, Effect::Notify(n) if n.kind == "limited" && n.title.contains(&subject)));
    assert!(told, "{out:#?}");
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
