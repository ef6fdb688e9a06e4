//! The chamber's rules, one at a time: each test feeds the machine inputs
//! and reads the effects it asks for, with a small rig that performs the
//! result-bearing effects the way a healthy shell would (or fails the one a
//! test names). The simulator (`crate::sim`) checks the same rules at random,
//! across crashes; these pin the order and the wording.
//!
//! The rig is here; the tests are in rooms by what they pin: a wake and its
//! calls, failures, operators' requests, cryod's stop and start, what holds
//! a session from outside, and what a chamber tells beyond its conversation.

mod failures;
mod holds;
mod notices;
mod operator;
mod recovery;
mod wake;

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::{
    Boot, Call, Chamber, DEFAULT_PRECHECK_TIMEOUT, Effect, Failed, Input, Limits, Listed, Loaded, Refusal, Reply,
    ReqId, Settings, TodoCall, TodoWriteError,
};
use crate::todo::{Missed, NewTodo, TodoList};

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
        todos: Ok(Listed::Read(todos.clone())),
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
