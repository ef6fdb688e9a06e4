//! One chamber as a sans-I/O state machine: every rule of a chamber's life
//! (what a wake claims, when a session is over, which fallback to write,
//! what is due next) and none of the plumbing that carries it out.
//!
//! [`Chamber::handle`] takes an [`Input`] (something that happened, or the
//! result of an effect) and the current time, changes the chamber's state,
//! and returns the [`Effect`]s the shell must perform, in order. The shell
//! performs them one by one; an effect whose result the machine needs carries
//! a continuation tag, and the shell feeds the result straight back, so the
//! effects a result produces run before the rest of the list (depth first).
//! Between any two effects cryod may die; what the effects wrote durably
//! before that is all the next start ([`Input::Boot`]) has to go on, and the
//! order of effects here is what makes that enough (see ARCHITECTURE.md,
//! "The chamber machine").

mod io;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

pub use self::io::*;
use crate::hibernate::{self, Ending, Gate, GateInput};
use crate::message::{CRYOCHAMBER, MAX_MESSAGE_BYTES, Message};
use crate::prompt::{self, PromptInput};
use crate::session::{self, Conversation, Outcome, Trigger};
use crate::todo::{self, Claim, Missed, NewTodo, Settle, TodoError, TodoList};

/// A missed slot of a `skip` TODO later than this is dropped.
pub const SKIP_GRACE: Duration = Duration::minutes(5);
/// An agent that dies sooner than this without hibernating is probably
/// misconfigured (wrong command, missing key).
pub const QUICK_EXIT: Duration = Duration::seconds(5);
/// After an accepted hibernate the agent should exit; past this it is ended.
pub const AFTER_HIBERNATE: StdDuration = StdDuration::from_secs(60);
/// A start that waits for its first agent answers after this at the latest.
pub const START_WAIT: StdDuration = StdDuration::from_secs(10);
/// The longest linger an agent may ask for.
pub const MAX_LINGER_SECS: u32 = 3600;
/// Lines and characters of `cryo-agent.log` quoted in a failure report.
const TAIL_LINES: usize = 12;
const TAIL_CHARS: usize = 2000;
/// Room kept in a message file for its header.
const HEADER_ROOM: usize = 4096;

/// Daemon-wide numbers a chamber's rules use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// SIGTERM to SIGKILL.
    pub stop_grace: StdDuration,
}

/// What the chamber looks like from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    #[default]
    Stopped,
    Idle,
    Running,
    Paused,
    Faulted,
}

/// The chamber's state as status views show it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    pub state: State,
    pub fault: Option<String>,
    pub agent: String,
    pub timezone: String,
    pub session: u64,
    pub next_wake: Option<DateTime<Utc>>,
    pub last_result: Option<String>,
    pub mail_waiting: u32,
    pub attention: Option<String>,
    pub warnings: Vec<String>,
    pub last_lateness_ms: Option<i64>,
    /// The last write into the chamber that failed, until one succeeds.
    pub error: Option<String>,
    /// Questions the agent asked with no message to it since.
    pub open_questions: u32,
}

/// What the chamber holds when its machine is made (from the registry, the
/// ledger and the files).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub id: i64,
    pub name: String,
    pub started: bool,
    pub paused: bool,
    pub last_session: u64,
    pub last_result: Option<String>,
    pub last_lateness_ms: Option<i64>,
    pub open_questions: u32,
    pub config: Result<Settings, String>,
    pub warnings: Vec<String>,
    pub todos: Result<TodoList, String>,
    pub unread: Vec<String>,
    pub system_tz: Tz,
}

/// Why cryod is cutting a session short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Timeout,
    Stop,
    Shutdown,
    AfterHibernate,
    Replace,
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The wake is being recorded in the ledger.
    Recording,
    /// Its TODOs are being claimed in `todo.json`.
    Claiming,
    /// Its agent is being started.
    Spawning,
    Running,
    /// Its end is being settled.
    Settling,
}

#[derive(Debug, Clone)]
struct Live {
    number: u64,
    wake_id: String,
    token: String,
    trigger: Trigger,
    phase: Phase,
    /// What the wake was recorded with; `claims` is what it got.
    intended: Vec<Claim>,
    claims: Vec<Claim>,
    due: Option<DateTime<Utc>>,
    pgid: i32,
    started_at: Option<DateTime<Utc>>,
    hibernate: Option<(Ending, String)>,
    /// Claimed inbox messages not yet answered by a send.
    unanswered: Vec<String>,
    /// It claimed some inbox batch (the journal closes them at its end).
    claimed_mail: bool,
    sent_any: bool,
    linger: Option<ReqId>,
    ending: Option<Cut>,
    stop_waiters: Vec<ReqId>,
    shutdown_waiters: Vec<ReqId>,
    /// Set when the session ends, for its settlement.
    outcome: Option<Outcome>,
    log_tail: String,
}

/// One chamber's state; see the module documentation.
#[derive(Debug, Clone)]
pub struct Chamber {
    id: i64,
    name: String,
    limits: Limits,
    started: bool,
    paused: bool,
    config: Result<Settings, String>,
    warnings: Vec<String>,
    todos: Result<TodoList, String>,
    unread: Vec<String>,
    system_tz: Tz,
    last_session: u64,
    /// A wake is queued for admission (its trigger and when it was asked for).
    wanted: Option<(Trigger, DateTime<Utc>)>,
    live: Option<Live>,
    last_result: Option<String>,
    previous_failure: Option<String>,
    attention: Option<String>,
    /// The plan was completed: no scheduled wakes until mail arrives.
    completed: bool,
    /// Sessions that failed in a row. After a failure, mail waits before it
    /// wakes the agent again (2^k minutes, at most a day), so an agent that
    /// crashes on every message does not loop.
    failures: u32,
    mail_hold_until: Option<DateTime<Utc>>,
    /// An operator asked for a session; it runs when the current one ends.
    manual_queued: bool,
    /// A `wake --replace` waiting for the old session to end.
    replace_with: Option<(Option<String>, ReqId)>,
    last_lateness_ms: Option<i64>,
    /// Operators waiting for a start to show its first agent.
    start_waiters: Vec<ReqId>,
    write_error: Option<String>,
    open_questions: u32,
    /// A `remove` waiting for the running session to end.
    removing: Option<ReqId>,
    finished: bool,
    now: DateTime<Utc>,
    out: Vec<Effect>,
}

impl Chamber {
    pub fn new(l: Loaded, limits: Limits) -> Chamber {
        Chamber {
            id: l.id,
            name: l.name,
            limits,
            started: l.started,
            paused: l.paused,
            config: l.config,
            warnings: l.warnings,
            todos: l.todos,
            unread: l.unread,
            system_tz: l.system_tz,
            last_session: l.last_session,
            wanted: None,
            live: None,
            last_result: l.last_result,
            previous_failure: None,
            attention: None,
            completed: false,
            failures: 0,
            mail_hold_until: None,
            manual_queued: false,
            replace_with: None,
            last_lateness_ms: l.last_lateness_ms,
            start_waiters: Vec::new(),
            write_error: None,
            open_questions: l.open_questions,
            removing: None,
            finished: false,
            now: DateTime::<Utc>::MIN_UTC,
            out: Vec::new(),
        }
    }

    /// The one entry point: what `input` changes, and what to do about it.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        self.now = now;
        self.step(input);
        std::mem::take(&mut self.out)
    }

    // ---- what the shell reads --------------------------------------------

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn tz(&self) -> Tz {
        self.config.as_ref().map(|c| c.timezone).unwrap_or(self.system_tz)
    }

    /// Started (paused included): bridges run, mail is taken in.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The chamber is done: removed, or cryod shut it down.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The plan was completed: no scheduled wakes until mail arrives.
    pub fn completed(&self) -> bool {
        self.completed
    }

    pub fn unread(&self) -> &[String] {
        &self.unread
    }

    pub fn todos(&self) -> Result<&TodoList, &String> {
        self.todos.as_ref()
    }

    /// The running session's number and wake id, once its agent may exist.
    pub fn live_session(&self) -> Option<(u64, &str)> {
        self.live.as_ref().map(|l| (l.number, l.wake_id.as_str()))
    }

    pub fn fault(&self) -> Option<String> {
        match (&self.config, &self.todos) {
            (Err(e), _) | (_, Err(e)) => Some(e.clone()),
            _ => None,
        }
    }

    pub fn view(&self) -> View {
        let state = if self.fault().is_some() {
            State::Faulted
        } else if self.live.is_some() {
            State::Running
        } else if self.started && self.paused {
            State::Paused
        } else if self.started {
            State::Idle
        } else {
            State::Stopped
        };
        View {
            state,
            fault: self.fault(),
            agent: self.config.as_ref().map(|c| c.agent.clone()).unwrap_or_default(),
            timezone: self.tz().name().to_string(),
            session: self.live.as_ref().map(|l| l.number).unwrap_or(self.last_session),
            next_wake: if self.started && !self.paused { self.next_wake() } else { None },
            last_result: self.last_result.clone(),
            mail_waiting: self.unread.len() as u32,
            attention: self.attention.clone(),
            warnings: self.warnings.clone(),
            last_lateness_ms: self.last_lateness_ms,
            error: self.write_error.clone(),
            open_questions: self.open_questions,
        }
    }

    /// When this chamber next wakes by itself: its next TODO, or held mail.
    fn next_wake(&self) -> Option<DateTime<Utc>> {
        let todo = match (&self.todos, self.completed) {
            (Ok(t), false) => t.next_due(),
            _ => None,
        };
        let hold = self.mail_hold_until.filter(|_| !self.unread.is_empty());
        [todo, hold].into_iter().flatten().min()
    }

    // ---- small helpers -----------------------------------------------------

    fn emit(&mut self, e: Effect) {
        self.out.push(e);
    }

    fn log(&mut self, text: impl Into<String>) {
        self.emit(Effect::Log(LogLine::Event(text.into())));
    }

    fn reply(&mut self, req: ReqId, result: Result<Reply, Refusal>) {
        self.emit(Effect::Reply { req, result });
    }

    fn arm(&mut self, timer: Timer, after: StdDuration) {
        self.emit(Effect::ArmTimer { timer, after });
    }

    fn max_attempts(&self) -> u32 {
        self.config.as_ref().map(|c| c.max_attempts).unwrap_or(10)
    }

    fn note_unread(&mut self, name: String) {
        if let Err(i) = self.unread.binary_search(&name) {
            self.unread.insert(i, name);
        }
    }

    /// Keeps the in-memory list and the write error in step with a
    /// `todo.json` update; returns what it did, or the caller's refusal.
    fn todos_written(
        &mut self,
        result: Result<(TodoDone, TodoList), TodoWriteError>,
        refused: impl FnOnce(TodoError) -> Refusal,
    ) -> Result<TodoDone, Refusal> {
        match result {
            Ok((done, list)) => {
                self.todos = Ok(list);
                self.write_error = None;
                Ok(done)
            }
            Err(TodoWriteError::Fault(m)) => {
                self.todos = Err(m.clone());
                Err(Refusal::Precondition(format!("the chamber is faulted: {m}")))
            }
            Err(TodoWriteError::Refused(e)) => Err(refused(e)),
            Err(TodoWriteError::Write(m)) => {
                self.write_error = Some(m.clone());
                Err(Refusal::Internal(m))
            }
        }
    }

    // ---- the one match -----------------------------------------------------

    fn step(&mut self, input: Input) {
        match input {
            Input::Boot(boot) => self.boot(boot),
            Input::Start { req, wait, agent_check, log_session } => self.start(req, wait, agent_check, log_session),
            Input::Stop { req, wait } => self.stop(req, wait),
            Input::Remove { req } => self.remove(req),
            Input::Pause { req, pause } => self.pause(req, pause),
            Input::Wake { req, message, replace } => self.wake(req, message, replace),
            Input::Deliver { req, from, subject, text } => self.deliver(req, &from, &subject, &text),
            Input::Todo { req, call } => self.todo_call(req, call, By::Operator),
            Input::WritePlan { req, text } => {
                if text.len() > 1024 * 1024 {
                    self.reply(req, Err(Refusal::Invalid("the plan is over 1 MiB".into())));
                } else {
                    self.emit(Effect::WritePlan { req, text });
                }
            }
            Input::Shutdown { req } => match self.live.as_mut() {
                Some(l) => {
                    l.shutdown_waiters.push(req);
                    let n = l.number;
                    self.end_session(n, Cut::Shutdown);
                }
                None => {
                    self.reply(req, Ok(Reply::Done));
                    self.exit();
                }
            },
            Input::Due => self.replan(),
            Input::Inbox { unread, arrived } => {
                self.unread = unread;
                self.unread.sort();
                if arrived {
                    self.open_questions = 0;
                    self.on_inbox();
                }
            }
            Input::TodosChanged(todos) => {
                if todos != self.todos {
                    self.todos = todos;
                    self.replan();
                }
            }
            Input::ConfigChanged { config, warnings } => {
                self.warnings = warnings;
                self.config = config;
                if self.config.is_ok() {
                    self.emit(Effect::Rewatch);
                }
                self.replan();
            }
            Input::ZoneChanged { zone, config, warnings } => {
                self.system_tz = zone;
                self.warnings = warnings;
                self.config = config;
                // Chambers on the system's zone move their cron series to the
                // new zone's wall clock.
                if self.config.as_ref().is_ok_and(|c| !c.timezone_set) {
                    let op = TodoOp::Rezone { now: self.now, tz: self.tz() };
                    self.emit(Effect::UpdateTodos { op, then: AfterTodos::Rezoned });
                }
            }
            Input::Power { sleeping } => {
                if self.live.is_some() {
                    self.log(if sleeping { "the machine is going to sleep" } else { "the machine woke up" });
                }
                if !sleeping {
                    self.replan();
                }
            }
            Input::Admitted { nonce, token } => self.admitted(nonce, token),
            Input::Agent { session, req, call } => {
                if self.live.as_ref().is_some_and(|l| l.number == session && l.phase == Phase::Running) {
                    self.agent_call(req, call);
                } else {
                    self.reply(req, Err(Refusal::Precondition("this session has ended".into())));
                }
            }
            Input::Exited { session, status, log_tail } => {
                if self.live.as_ref().is_some_and(|l| l.number == session && l.phase == Phase::Running) {
                    self.finalize(Some(status), log_tail);
                }
            }
            Input::Timer(t) => self.timer(t),
            Input::Recorded(r) => self.recorded(r),
            Input::TodosUpdated { then, result } => self.todos_updated(then, result),
            Input::Spawned(r) => self.spawned(r),
            Input::MessageWritten { then, result } => self.message_written(then, result),
            Input::StoreWritten { then, result } => self.store_written(then, result),
            Input::Journaled { then, names, result } => match result {
                Ok(()) => self.emit(Effect::ArchiveInbox { names, then }),
                Err(e) => {
                    let req = claim_req(then);
                    self.reply(req, Err(Refusal::Internal(format!("cannot journal the claim: {e}"))));
                }
            },
            Input::Archived { then, result } => self.archived(then, result),
            Input::PlanWritten { req, result } => match result {
                Ok(()) => {
                    self.log("plan.md replaced by the operator");
                    self.reply(req, Ok(Reply::Done));
                }
                Err(e) => self.reply(req, Err(Refusal::Internal(format!("cannot write plan.md: {e}")))),
            },
        }
    }

    fn exit(&mut self) {
        self.finished = true;
        self.emit(Effect::Exit);
    }

    fn timer(&mut self, t: Timer) {
        match t {
            Timer::Timeout(n) => self.end_session(n, Cut::Timeout),
            Timer::AfterHibernate(n) => self.end_session(n, Cut::AfterHibernate),
            Timer::LingerDone(n) => self.linger_done(n),
            Timer::Kill(n) => {
                if let Some(l) = self.live.as_ref().filter(|l| l.number == n && l.pgid > 0) {
                    let pgid = l.pgid;
                    self.emit(Effect::Signal { pgid, sig: Sig::Kill });
                }
            }
            Timer::StartWaitOver => {
                for w in std::mem::take(&mut self.start_waiters) {
                    self.reply(w, Ok(Reply::Started(false)));
                }
            }
        }
    }

    // ---- recovery ------------------------------------------------------------

    /// Finishes the sessions a killed cryod left open (their processes were
    /// ended by start-up before this): re-queues what they still hold of
    /// their claims, answers their claimed mail, closes their `cryo.log`
    /// blocks and records them as interrupted. Then resumes.
    fn boot(&mut self, boot: Boot) {
        let answered = |name: &str| boot.outgoing.iter().any(|m| m.in_reply_to.iter().any(|f| f == name));
        for s in &boot.open {
            let mut unanswered = Vec::new();
            for b in boot.batches.iter().filter(|b| b.session == s.number) {
                if b.archived.is_empty() {
                    // Journaled, but cryod stopped before the files moved:
                    // the agent never saw them; they are still unread mail,
                    // for the next session to claim (and answer) afresh.
                    self.emit(Effect::JournalDrop { id: b.id });
                }
                unanswered.extend(b.archived.iter().filter(|f| !answered(f)).cloned());
            }
            let sent_any = boot.outgoing.iter().any(|m| m.session == Some(s.number) && m.by_agent);
            let note = if s.groups_ended == 0 {
                "cryod stopped during this session; it was found at restart".to_string()
            } else {
                format!(
                    "cryod stopped during this session; at restart its agent was still running and was ended ({} process group(s))",
                    s.groups_ended
                )
            };
            self.last_session = self.last_session.max(s.number);
            let op = TodoOp::Settle {
                wake: s.wake_id.clone(),
                claims: s.claims.clone(),
                how: Settle::Requeue { now: self.now },
            };
            let then = AfterTodos::Recovered(Recovered { number: s.number, unanswered, sent_any, note });
            self.emit(Effect::UpdateTodos { op, then });
        }
        // Batches of sessions that did end, but whose answer was not recorded.
        for b in boot.batches.iter().filter(|b| !boot.open.iter().any(|s| s.number == b.session)) {
            if !b.archived.is_empty() {
                self.emit(Effect::JournalAnswered { id: b.id });
            } else {
                // Journaled, but the files never moved: the agent never saw
                // them; they are still unread mail.
                self.emit(Effect::JournalDrop { id: b.id });
            }
        }
        if self.started {
            self.resume();
        } else {
            self.replan();
        }
    }

    fn recovered(&mut self, r: Recovered, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        let outcome = Outcome::Interrupted;
        let settled = self.todos_written(result, |e| Refusal::Internal(e.to_string()));
        let mut details = vec![format!("{}.", capitalize(&r.note))];
        details.extend(self.settle_details(&outcome, settled.ok()));
        let conv = Conversation { unanswered_batch: !r.unanswered.is_empty(), sent_any: r.sent_any };
        self.write_fallbacks(r.number, &outcome, conv, &r.unanswered, &details.join("\n\n"));
        self.log(format!("session {} interrupted: {}", r.number, r.note));
        self.emit(Effect::Log(LogLine::End));
        let now = self.now;
        self.emit(Effect::SessionEnded { number: r.number, at: now, outcome: outcome.describe(), summary: r.note });
        self.emit(Effect::JournalAnswer { number: r.number });
        self.last_result = Some(outcome.describe());
        self.previous_failure = Some(outcome.describe());
        self.replan();
    }

    // ---- operator requests ---------------------------------------------

    fn start(&mut self, req: ReqId, wait: bool, agent_check: Result<(), String>, log_session: u64) {
        if let Some(f) = self.fault() {
            let why = format!("{} is faulted, so it cannot start: {f}", self.name);
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if let Err(why) = agent_check {
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if self.started {
            return self.reply(req, Ok(Reply::Started(true)));
        }
        // The files may have changed since the machine was made.
        self.last_session = self.last_session.max(log_session);
        self.mail_hold_until = None;
        self.emit(Effect::SetStarted { started: true, then: AfterStore::Started { req, wait } });
    }

    fn stop(&mut self, req: ReqId, wait: bool) {
        let was_started = self.started;
        if was_started {
            self.emit(Effect::SetStarted { started: false, then: AfterStore::Stopped { req, wait, was_started } });
        } else {
            self.stopped(req, wait, was_started);
        }
    }

    fn stopped(&mut self, req: ReqId, wait: bool, was_started: bool) {
        self.started = false;
        self.wanted = None;
        self.emit(Effect::CancelAdmission);
        self.emit(Effect::Plan(None));
        match self.live.as_mut() {
            Some(l) => {
                let n = l.number;
                if wait {
                    l.stop_waiters.push(req);
                } else {
                    self.reply(req, Ok(Reply::Stopped { already: false, ended: true }));
                }
                self.end_session(n, Cut::Stop);
            }
            None => {
                self.emit(Effect::Publish);
                self.reply(req, Ok(Reply::Stopped { already: !was_started, ended: false }));
            }
        }
    }

    fn remove(&mut self, req: ReqId) {
        self.started = false;
        self.wanted = None;
        self.emit(Effect::CancelAdmission);
        match self.live.as_ref() {
            Some(l) => {
                let n = l.number;
                self.removing = Some(req);
                self.end_session(n, Cut::Stop);
            }
            None => {
                self.emit(Effect::Plan(None));
                self.reply(req, Ok(Reply::Done));
                self.exit();
            }
        }
    }

    fn pause(&mut self, req: ReqId, pause: bool) {
        if pause && !self.started {
            let why = format!("{} is stopped; only a started chamber can be paused", self.name);
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if self.paused == pause {
            self.emit(Effect::Publish);
            return self.reply(req, Ok(Reply::Paused(true)));
        }
        self.emit(Effect::SetPaused { paused: pause, then: AfterStore::Paused { req, pause } });
    }

    fn store_written(&mut self, then: AfterStore, result: Result<(), String>) {
        if let Err(e) = result {
            let req = match then {
                AfterStore::Started { req, .. } | AfterStore::Stopped { req, .. } | AfterStore::Paused { req, .. } => {
                    req
                }
            };
            return self.reply(req, Err(Refusal::Internal(format!("cannot update the registry: {e}"))));
        }
        match then {
            AfterStore::Started { req, wait } => {
                self.started = true;
                self.attention = None;
                self.resume();
                self.emit(Effect::Publish);
                if wait && self.wanted.is_some() {
                    self.start_waiters.push(req);
                    self.arm(Timer::StartWaitOver, START_WAIT);
                } else {
                    self.reply(req, Ok(Reply::Started(false)));
                }
            }
            AfterStore::Stopped { req, wait, was_started } => self.stopped(req, wait, was_started),
            AfterStore::Paused { req, pause } => {
                self.paused = pause;
                if pause {
                    self.wanted = None;
                    self.emit(Effect::CancelAdmission);
                    self.emit(Effect::Plan(None));
                } else {
                    self.replan();
                }
                // The caller reads the view next.
                self.emit(Effect::Publish);
                self.reply(req, Ok(Reply::Paused(false)));
            }
        }
    }

    fn wake(&mut self, req: ReqId, message: Option<String>, replace: bool) {
        let refusal = if let Some(f) = self.fault() {
            Some(format!("{} is faulted: {f}", self.name))
        } else if !self.started {
            Some(format!("{} is stopped: start it first (`cryoctl chamber start {}`)", self.name, self.name))
        } else if self.paused {
            Some(format!("{} is paused: resume it first (`cryoctl chamber resume {}`)", self.name, self.name))
        } else if self.replace_with.is_some() {
            Some("a replacing wake is already under way".into())
        } else {
            None
        };
        if let Some(why) = refusal {
            return self.reply(req, Err(Refusal::Precondition(why)));
        }
        if let Some(l) = &self.live
            && replace
        {
            let n = l.number;
            self.replace_with = Some((message, req));
            return self.end_session(n, Cut::Replace);
        }
        match message {
            Some(m) => match self.operator_message("operator", "", &m) {
                Ok(message) => self.emit(Effect::WriteMessage {
                    folder: Folder::Inbox,
                    message,
                    then: AfterWrite::WakeMessage { req },
                }),
                Err(e) => self.reply(req, Err(e)),
            },
            None => self.woke(req, None),
        }
    }

    fn woke(&mut self, req: ReqId, message_file: Option<String>) {
        self.completed = false;
        self.manual_queued = true;
        let queued = self.live.is_some();
        self.log(if queued { "operator wake: queued after the running session" } else { "operator wake" });
        self.replan();
        self.reply(req, Ok(Reply::Woke(WakeOutcome { replaced: false, queued, message_file })));
    }

    /// An operator's message for the inbox, checked.
    fn operator_message(&self, from: &str, subject: &str, text: &str) -> Result<Message, Refusal> {
        if text.trim().is_empty() {
            return Err(Refusal::Invalid("the message is empty".into()));
        }
        let limit = MAX_MESSAGE_BYTES - HEADER_ROOM;
        if text.len() > limit {
            return Err(Refusal::Invalid(format!("the message is {} bytes, over the limit of {limit}", text.len())));
        }
        let from = if from.trim().is_empty() { "operator" } else { from };
        let subject = if subject.trim().is_empty() { first_line(text) } else { subject.to_string() };
        Ok(Message {
            from: from.to_string(),
            subject,
            timestamp: Some(self.now),
            question: false,
            meta: BTreeMap::new(),
            body: text.to_string(),
        })
    }

    fn deliver(&mut self, req: ReqId, from: &str, subject: &str, text: &str) {
        match self.operator_message(from, subject, text) {
            Ok(message) => {
                self.emit(Effect::WriteMessage { folder: Folder::Inbox, message, then: AfterWrite::Delivered { req } })
            }
            Err(e) => self.reply(req, Err(e)),
        }
    }

    fn message_written(&mut self, then: AfterWrite, result: Result<String, String>) {
        match (then, result) {
            (AfterWrite::Fallback { subject }, Ok(name)) => {
                self.log(format!("cryochamber wrote: {subject} ({name})"));
            }
            (AfterWrite::Fallback { .. }, Err(e)) => {
                self.write_error = Some(format!("cannot write a fallback message: {e}"));
            }
            (AfterWrite::Sent { req, reply, question, subject }, Ok(name)) => {
                if question {
                    self.open_questions += 1;
                }
                if let Some(l) = self.live.as_mut() {
                    l.sent_any = true;
                    l.unanswered.clear();
                }
                let what = if question { "send (question)" } else { "send" };
                self.log(format!("{what}: {subject}{}", if reply { " [reply]" } else { "" }));
                self.reply(req, Ok(Reply::Sent { file: format!("messages/outbox/{name}"), reply }));
            }
            (AfterWrite::Sent { req, .. }, Err(e)) => {
                self.reply(req, Err(Refusal::Internal(format!("cannot write the outbox: {e}"))));
            }
            (AfterWrite::Delivered { req }, Ok(name)) => {
                self.note_unread(name.clone());
                self.reply(req, Ok(Reply::Delivered(format!("messages/inbox/{name}"))));
                self.open_questions = 0;
                self.on_inbox();
            }
            (AfterWrite::WakeMessage { req }, Ok(name)) => {
                self.note_unread(name.clone());
                self.woke(req, Some(format!("messages/inbox/{name}")));
            }
            (AfterWrite::Replaced { req }, Ok(name)) => {
                self.note_unread(name.clone());
                self.manual_queued = true;
                let out =
                    WakeOutcome { replaced: true, queued: false, message_file: Some(format!("messages/inbox/{name}")) };
                self.reply(req, Ok(Reply::Woke(out)));
                self.replan();
            }
            (AfterWrite::Delivered { req } | AfterWrite::WakeMessage { req }, Err(e)) => {
                self.reply(req, Err(Refusal::Internal(format!("cannot write the inbox: {e}"))));
            }
            (AfterWrite::Replaced { req }, Err(e)) => {
                self.reply(req, Err(Refusal::Internal(format!("cannot write the inbox: {e}"))));
                self.replan();
            }
        }
    }

    // ---- planning ----------------------------------------------------------

    /// After a start or a daemon restart: bootstrap a new chamber, else run
    /// what is due and what waits in the inbox.
    fn resume(&mut self) {
        if self.last_session == 0 && self.live.is_none() {
            self.want(Trigger::Bootstrap);
        }
        self.replan();
    }

    /// Decides from the list and the inbox: wake now (due TODOs, unread
    /// mail), or tell the scheduler when the next TODO is due.
    fn replan(&mut self) {
        if !self.started || self.paused || self.fault().is_some() {
            return self.emit(Effect::Plan(None));
        }
        if self.manual_queued && self.live.is_none() {
            self.want(Trigger::Manual);
        }
        let now = self.now;
        let next = match (&self.todos, self.completed) {
            (Ok(t), false) => t.next_due(),
            _ => None,
        };
        let hold = self.mail_hold_until.filter(|h| *h > now);
        if self.live.is_none() {
            if next.is_some_and(|t| t <= now) {
                self.want(Trigger::Scheduled);
            }
            if hold.is_none() && !self.unread.is_empty() {
                self.want(Trigger::Inbox);
            }
        }
        // While a session runs, a due TODO waits for it to end (then replan).
        let wake = [next.filter(|t| *t > now), hold].into_iter().flatten().min();
        self.emit(Effect::Plan(wake));
    }

    fn want(&mut self, trigger: Trigger) {
        if !self.started || self.paused || self.live.is_some() {
            return;
        }
        let t = match self.wanted {
            Some((t, _)) if t <= trigger => t,
            Some((_, since)) => {
                self.wanted = Some((trigger, since));
                trigger
            }
            None => {
                self.wanted = Some((trigger, self.now));
                trigger
            }
        };
        self.emit(Effect::RequestAdmission(t));
    }

    fn on_inbox(&mut self) {
        if let Some(l) = self.live.as_mut() {
            if let Some(req) = l.linger.take() {
                l.hibernate = None;
                self.reply(
                    req,
                    Err(Refusal::Precondition(
                        "refused: new mail arrived while you lingered. Run `cryo-agent receive`, answer it, then hibernate again."
                            .into(),
                    )),
                );
                self.log("linger released: new mail arrived");
            }
            return;
        }
        if !self.unread.is_empty() {
            self.completed = false;
            if self.mail_hold_until.is_some_and(|h| h > self.now) {
                return;
            }
            self.want(Trigger::Inbox);
        }
    }

    // ---- a session: wake, record, claim, spawn ------------------------------

    fn admitted(&mut self, nonce: String, token: String) {
        // A chamber holds one slot at most: a permit granted while a session
        // runs is surplus, and the shell has given it back already.
        if self.live.is_some() {
            return;
        }
        let Some((trigger, asked_at)) = self.wanted.take() else { return self.emit(Effect::Release) };
        if !self.started || self.paused {
            return self.emit(Effect::Release);
        }
        // Any session answers a queued operator wake; it is recorded as one.
        let trigger = if std::mem::take(&mut self.manual_queued) { Trigger::Manual } else { trigger };
        let (now, tz) = (self.now, self.tz());
        let list = match &self.todos {
            Ok(l) => l.clone(),
            Err(e) => {
                self.last_result = Some(format!("no session started: {e}"));
                return self.emit(Effect::Release);
            }
        };
        let intended = if self.completed { Vec::new() } else { list.clone().claim_due(now, tz, SKIP_GRACE) };
        let demand =
            !intended.is_empty() || !self.unread.is_empty() || matches!(trigger, Trigger::Bootstrap | Trigger::Manual);
        if !demand {
            // Demand-driven: nothing is due and no mail waits.
            self.emit(Effect::Release);
            if list.clone().skip_missed(now, tz, SKIP_GRACE) > 0 {
                // What was due were `skip` slots long past: they move on.
                return self.emit(Effect::UpdateTodos { op: TodoOp::Skip { now, tz }, then: AfterTodos::Skipped });
            }
            return self.replan();
        }
        let number = self.last_session + 1;
        let wake_id = format!("w{}-{}-{}", self.id, number, nonce);
        let due = intended.iter().map(|c| c.due).min().or(Some(asked_at));
        let mut reasons: Vec<String> = intended.iter().map(|c| format!("todo:{}", c.id)).collect();
        reasons.extend(self.unread.iter().map(|m| format!("mail:{m}")));
        self.emit(Effect::RecordWake(WakeRecord {
            number,
            wake_id: wake_id.clone(),
            trigger,
            reasons,
            claims: intended.clone(),
            due_at: due,
            created_at: now,
        }));
        self.live = Some(Live {
            number,
            wake_id,
            token,
            trigger,
            phase: Phase::Recording,
            intended,
            claims: Vec::new(),
            due,
            pgid: 0,
            started_at: None,
            hibernate: None,
            unanswered: Vec::new(),
            claimed_mail: false,
            sent_any: false,
            linger: None,
            ending: None,
            stop_waiters: Vec::new(),
            shutdown_waiters: Vec::new(),
            outcome: None,
            log_tail: String::new(),
        });
    }

    /// The wake is in the ledger: claim its TODOs in `todo.json` next. (In
    /// this order, a crash between the two leaves a recorded wake whose
    /// claims never landed: recovery finds nothing in flight and the TODOs,
    /// still pending, run at the next wake.)
    fn recorded(&mut self, r: Result<(), String>) {
        let Some(l) = self.live.as_mut().filter(|l| l.phase == Phase::Recording) else { return };
        match r {
            Ok(()) => {
                self.last_session = l.number;
                l.phase = Phase::Claiming;
                let op = TodoOp::Claim {
                    wake: l.wake_id.clone(),
                    ids: l.intended.iter().map(|c| c.id).collect(),
                    now: self.now,
                    tz: self.tz(),
                };
                self.emit(Effect::UpdateTodos { op, then: AfterTodos::Claimed });
            }
            Err(e) => {
                self.live = None;
                self.last_result = Some(format!("no session started: cannot record the wake: {e}"));
                self.emit(Effect::Release);
            }
        }
    }

    fn claimed(&mut self, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        let claims = match self.todos_written(result, |e| Refusal::Internal(e.to_string())) {
            Ok(TodoDone::Claimed(c)) => Ok(c),
            Ok(_) => Err("unexpected answer to a claim".to_string()),
            Err(r) => Err(refusal_text(r)),
        };
        let Some(l) = self.live.as_mut() else { return };
        let claims = match claims {
            Ok(c) => c,
            Err(e) => return self.not_started(format!("cannot claim its TODOs: {e}")),
        };
        // Someone changed the list since the wake was decided: without what
        // was due and without mail, there is nothing to do after all.
        let nothing = claims.is_empty()
            && !l.intended.is_empty()
            && self.unread.is_empty()
            && !matches!(l.trigger, Trigger::Bootstrap | Trigger::Manual);
        if nothing {
            return self.not_started("nothing was due any more".into());
        }
        l.claims = claims;
        l.phase = Phase::Spawning;
        let l = self.live.as_ref().expect("live");
        let (number, trigger, wake_id, token) = (l.number, l.trigger, l.wake_id.clone(), l.token.clone());
        let list = self.todos.as_ref().cloned().unwrap_or_default();
        let prompt = prompt::build(&PromptInput {
            chamber: &self.name,
            session: number,
            now: self.now,
            tz: self.tz(),
            trigger,
            claims: &l.claims,
            mail: &self.unread,
            todos: &list,
            due: l.claims.iter().map(|c| c.due).min(),
            previous_failure: self.previous_failure.as_deref(),
            note: None,
        });
        let mut reasons: Vec<String> = l.claims.iter().map(|c| format!("todo:{}", c.id)).collect();
        reasons.extend(self.unread.iter().map(|m| format!("mail:{m}")));
        self.emit(Effect::RotateLogs);
        self.emit(Effect::Log(LogLine::Begin(number)));
        self.log(format!(
            "trigger: {} ({})",
            trigger.as_str(),
            if reasons.is_empty() { "-".into() } else { reasons.join(", ") }
        ));
        // The token is valid before the agent exists: a fast agent calls
        // cryo-agent at once.
        self.emit(Effect::RegisterToken { token: token.clone(), session: number });
        self.emit(Effect::Spawn { session: number, wake_id, token, prompt });
    }

    /// A recorded wake that started no agent: closed at once in the ledger.
    fn not_started(&mut self, why: String) {
        let Some(l) = self.live.take() else { return };
        let now = self.now;
        self.emit(Effect::SessionEnded {
            number: l.number,
            at: now,
            outcome: format!("not started: {why}"),
            summary: String::new(),
        });
        self.last_result = Some(format!("no session started: {why}"));
        self.emit(Effect::Release);
        self.replan();
    }

    fn spawned(&mut self, r: Result<u32, String>) {
        let now = self.now;
        let Some(l) = self.live.as_mut().filter(|l| l.phase == Phase::Spawning) else { return };
        match r {
            Ok(pid) => {
                l.phase = Phase::Running;
                l.pgid = pid as i32;
                l.started_at = Some(now);
                let (number, due) = (l.number, l.due);
                let lateness_ms = due.map(|d| (now - d).num_milliseconds().max(0));
                self.last_lateness_ms = lateness_ms;
                self.emit(Effect::SessionStarted { number, pid, at: now, lateness_ms });
                self.log(format!("agent started (pid {pid})"));
                for w in std::mem::take(&mut self.start_waiters) {
                    self.reply(w, Ok(Reply::Started(false)));
                }
                let limit = self.config.as_ref().map(|c| c.max_session_duration).unwrap_or(0);
                if limit > 0 {
                    self.arm(Timer::Timeout(number), StdDuration::from_secs(limit));
                }
            }
            Err(e) => {
                l.phase = Phase::Running;
                for w in std::mem::take(&mut self.start_waiters) {
                    let why = format!("the agent could not start: {e}");
                    self.reply(w, Err(Refusal::Precondition(why)));
                }
                self.log(format!("agent could not start: {e}"));
                self.attention = Some(format!("the agent could not start: {e}"));
                self.finalize_with(Outcome::Crashed(format!("could not start: {e}")), None, String::new());
            }
        }
    }

    // ---- a session: the agent's calls ---------------------------------------

    fn agent_call(&mut self, req: ReqId, call: Call) {
        match call {
            Call::Hibernate { summary, complete, exit_code, linger_secs } => {
                self.hibernate(req, summary, complete, exit_code, linger_secs)
            }
            Call::Send { text, question, subject } => self.send(req, text, question, subject),
            Call::Receive => self.claim_inbox(AfterClaim::Receive(req)),
            Call::Dialog { last, all } => self.claim_inbox(AfterClaim::Dialog { req, last, all }),
            Call::Todo(call) => self.todo_call(req, call, By::Agent),
        }
    }

    fn hibernate(&mut self, req: ReqId, summary: String, complete: bool, exit_code: i32, linger: u32) {
        let now = self.now;
        let (has_next_wake, due_now) = match &self.todos {
            Ok(t) => (t.has_pending(), t.due(now).count()),
            Err(e) => {
                let why = format!("todo.json cannot be read, so hibernate cannot check it: {e}");
                return self.reply(req, Err(Refusal::Precondition(why)));
            }
        };
        let unread = self.unread.len();
        match hibernate::gate(&GateInput { unread, has_next_wake, due_now, complete, exit_code }) {
            Gate::Refuse(why) => {
                self.log(format!("hibernate refused: {why}"));
                self.reply(req, Err(Refusal::Precondition(why)));
            }
            Gate::Accept(ending) => {
                let l = self.live.as_mut().expect("agent calls come from a live session");
                l.hibernate = Some((ending, summary.clone()));
                let number = l.number;
                let lingering = linger > 0 && !matches!(ending, Ending::Failure(_));
                let what = match ending {
                    Ending::Hibernate => "hibernate accepted".to_string(),
                    Ending::Complete => "hibernate --complete accepted".to_string(),
                    Ending::Failure(n) => format!("hibernate --exit {n} accepted"),
                };
                let summary_text = if summary.is_empty() { String::new() } else { format!(": {summary}") };
                self.log(format!("{what}{summary_text}"));
                if lingering {
                    let secs = linger.min(MAX_LINGER_SECS);
                    self.log(format!("lingering up to {secs}s for new mail"));
                    self.live.as_mut().expect("live").linger = Some(req);
                    return self.arm(Timer::LingerDone(number), StdDuration::from_secs(u64::from(secs)));
                }
                self.arm(Timer::AfterHibernate(number), AFTER_HIBERNATE);
                let text = self.hibernate_message(Some(ending));
                self.reply(req, Ok(Reply::Hibernate(text)));
            }
        }
    }

    fn hibernate_message(&self, ending: Option<Ending>) -> String {
        match ending {
            Some(Ending::Complete) => "hibernating: plan complete; the chamber sleeps until a message arrives".into(),
            Some(Ending::Failure(n)) => {
                format!("hibernating after failure (exit {n}): cryo will retry and tell the operator")
            }
            _ => match self.todos.as_ref().ok().and_then(|t| t.next_due()) {
                Some(t) => format!("hibernating: next wake at {}", crate::time::format_in(t, self.tz())),
                None => "hibernating".into(),
            },
        }
    }

    fn linger_done(&mut self, session: u64) {
        let Some(l) = self.live.as_mut().filter(|l| l.number == session) else { return };
        if let Some(req) = l.linger.take() {
            let ending = l.hibernate.as_ref().map(|h| h.0);
            let text = self.hibernate_message(ending);
            self.reply(req, Ok(Reply::Hibernate(text)));
            self.log("linger expired: hibernating");
            self.arm(Timer::AfterHibernate(session), AFTER_HIBERNATE);
        }
    }

    fn send(&mut self, req: ReqId, text: String, question: bool, subject: String) {
        if text.trim().is_empty() {
            return self.reply(req, Err(Refusal::Invalid("the message is empty".into())));
        }
        let limit = MAX_MESSAGE_BYTES - HEADER_ROOM;
        if text.len() > limit {
            return self.reply(
                req,
                Err(Refusal::Invalid(format!(
                    "the message is {} bytes, over the limit of {limit}: put long output in a file under messages/attachments/ and send its name",
                    text.len()
                ))),
            );
        }
        let l = self.live.as_ref().expect("agent calls come from a live session");
        let mut meta = BTreeMap::new();
        meta.insert("session".to_string(), l.number.to_string());
        let reply = !l.unanswered.is_empty();
        if reply {
            meta.insert("in_reply_to".to_string(), l.unanswered.join(" "));
        }
        let subject = if subject.trim().is_empty() { first_line(&text) } else { subject };
        let message = Message {
            from: self.name.clone(),
            subject: subject.clone(),
            timestamp: Some(self.now),
            question,
            meta,
            body: text,
        };
        let then = AfterWrite::Sent { req, reply, question, subject };
        self.emit(Effect::WriteMessage { folder: Folder::Outbox, message, then });
    }

    /// Claims the inbox: the batch is journaled (durably) before its files
    /// move to the archive, so a crash can never lose the duty to answer it.
    fn claim_inbox(&mut self, then: AfterClaim) {
        if self.unread.is_empty() {
            return self.claim_answered(then, 0);
        }
        let number = self.live.as_ref().expect("live").number;
        self.emit(Effect::JournalClaim { number, names: self.unread.clone(), then });
    }

    fn archived(&mut self, then: AfterClaim, result: Result<Vec<String>, String>) {
        match result {
            Ok(names) => {
                let before = std::mem::take(&mut self.unread);
                // What did not move (rejected, vanished) is no longer unread either.
                self.unread = before.into_iter().filter(|n| !names.contains(n)).collect();
                self.log(format!("receive: {} message(s): {}", names.len(), names.join(", ")));
                let count = names.len() as u32;
                if let Some(l) = self.live.as_mut() {
                    l.unanswered.extend(names.iter().cloned());
                    l.claimed_mail = true;
                }
                match then {
                    AfterClaim::Receive(req) => self.reply(req, Ok(Reply::Mail(names))),
                    AfterClaim::Dialog { .. } => self.claim_answered(then, count),
                }
            }
            Err(e) => {
                let req = claim_req(then);
                self.reply(req, Err(Refusal::Internal(format!("cannot archive the inbox: {e}"))));
            }
        }
    }

    fn claim_answered(&mut self, then: AfterClaim, claimed: u32) {
        match then {
            AfterClaim::Receive(req) => self.reply(req, Ok(Reply::Mail(Vec::new()))),
            AfterClaim::Dialog { req, last, all } => self.reply(req, Ok(Reply::Dialog { claimed, last, all })),
        }
    }

    fn todo_call(&mut self, req: ReqId, call: TodoCall, by: By) {
        let (now, tz) = (self.now, self.tz());
        let (op, what) = match call {
            TodoCall::Add { text, at, every, cron, missed } => {
                let at = match at.trim() {
                    "" if every.is_empty() && cron.is_empty() => {
                        let why = "give a time with --at (or --every / --cron for a repeating TODO)";
                        return self.reply(req, Err(Refusal::Invalid(why.into())));
                    }
                    "" => None,
                    s => match crate::time::parse_time(s, now, tz) {
                        Ok(t) => Some(t),
                        Err(e) => return self.reply(req, Err(Refusal::Invalid(e.to_string()))),
                    },
                };
                let missed = match missed.as_str() {
                    "" | "once" => Missed::Once,
                    "skip" => Missed::Skip,
                    other => {
                        let why = format!("--missed must be once or skip, not {other:?}");
                        return self.reply(req, Err(Refusal::Invalid(why)));
                    }
                };
                let opt = |s: String| (!s.trim().is_empty()).then_some(s);
                let new = NewTodo { text, at, every: opt(every), cron: opt(cron), missed };
                (TodoOp::Add { new, now, tz }, TodoWhat::Add)
            }
            TodoCall::List => {
                let r = match &self.todos {
                    Ok(l) => Ok(Reply::Todos { todos: l.items.clone(), tz }),
                    Err(e) => Err(Refusal::Precondition(e.clone())),
                };
                return self.reply(req, r);
            }
            TodoCall::Done(id) => (TodoOp::Done(id), TodoWhat::Done(id)),
            TodoCall::Remove(id) => (TodoOp::Remove(id), TodoWhat::Remove(id)),
        };
        self.emit(Effect::UpdateTodos { op, then: AfterTodos::Call { req, by, what } });
    }

    fn todo_called(
        &mut self,
        req: ReqId,
        by: By,
        what: TodoWhat,
        result: Result<(TodoDone, TodoList), TodoWriteError>,
    ) {
        let refused = |e: TodoError| match (what, e) {
            (TodoWhat::Add, e) => Refusal::Invalid(e.to_string()),
            (_, e @ TodoError::NotFound(_)) => Refusal::NotFound(e.to_string()),
            (_, e) => Refusal::Precondition(e.to_string()),
        };
        let tz = self.tz();
        match (self.todos_written(result, refused), what) {
            (Err(e), _) => self.reply(req, Err(e)),
            (Ok(TodoDone::Added(todo)), _) => {
                let at = todo.at.map(|a| crate::time::format_in(a, tz)).unwrap_or_default();
                self.log(format!("todo add {} by {}: {} (at {at})", todo.id, by.as_str(), todo.text));
                self.replan();
                self.reply(req, Ok(Reply::Todos { todos: vec![todo], tz }));
            }
            (Ok(_), TodoWhat::Done(id) | TodoWhat::Remove(id)) => {
                let verb = if matches!(what, TodoWhat::Done(_)) { "done" } else { "remove" };
                self.log(format!("todo {verb} {id} by {}", by.as_str()));
                self.replan();
                let todos = self.todos.as_ref().map(|l| l.items.clone()).unwrap_or_default();
                self.reply(req, Ok(Reply::Todos { todos, tz }));
            }
            (Ok(_), TodoWhat::Add) => self.reply(req, Err(Refusal::Internal("unexpected answer to an add".into()))),
        }
    }

    fn todos_updated(&mut self, then: AfterTodos, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        match then {
            AfterTodos::Claimed => self.claimed(result),
            AfterTodos::Settled => self.settled(result),
            AfterTodos::Recovered(r) => self.recovered(r, result),
            AfterTodos::Call { req, by, what } => self.todo_called(req, by, what, result),
            AfterTodos::Skipped => {
                let _ = self.todos_written(result, |e| Refusal::Internal(e.to_string()));
                self.log("missed slots of `skip` TODOs were skipped");
                self.replan();
            }
            AfterTodos::Rezoned => {
                let _ = self.todos_written(result, |e| Refusal::Internal(e.to_string()));
                let zone = self.tz().name().to_string();
                self.log(format!("the system's time zone is now {zone}: re-planned"));
                self.replan();
            }
        }
    }

    // ---- a session: its end --------------------------------------------------

    /// Ends the live session from outside: SIGTERM to its group, SIGKILL
    /// after the grace period.
    fn end_session(&mut self, session: u64, why: Cut) {
        let grace = match why {
            Cut::Shutdown => self.limits.stop_grace.min(StdDuration::from_secs(3)),
            _ => self.limits.stop_grace,
        };
        let Some(l) = self.live.as_mut().filter(|l| l.number == session && l.phase == Phase::Running) else {
            return;
        };
        if why == Cut::Timeout && l.hibernate.is_some() {
            return;
        }
        if l.ending.is_none() || matches!(why, Cut::Stop | Cut::Shutdown | Cut::Replace) {
            l.ending = Some(why);
        }
        let linger = l.linger.take();
        let pgid = l.pgid;
        if let Some(req) = linger {
            self.reply(req, Err(Refusal::Precondition("the session is ending".into())));
        }
        self.log(match why {
            Cut::Timeout => "session timed out: ending the agent",
            Cut::Stop => "stopped by the operator: ending the agent",
            Cut::Shutdown => "cryod is shutting down: ending the agent",
            Cut::AfterHibernate => "agent did not exit after hibernating: ending it",
            Cut::Replace => "replaced by the operator's wake: ending the agent",
        });
        if pgid > 0 {
            self.emit(Effect::Signal { pgid, sig: Sig::Term });
        }
        self.arm(Timer::Kill(session), grace);
    }

    fn finalize(&mut self, status: Option<String>, log_tail: String) {
        let Some(l) = self.live.as_ref() else { return };
        let outcome = match (l.ending, &l.hibernate) {
            (Some(Cut::Stop | Cut::Replace), _) => Outcome::Stopped,
            (Some(Cut::Shutdown), None) => Outcome::Interrupted,
            (_, Some((ending, _))) => Outcome::Hibernated(*ending),
            (Some(Cut::Timeout), None) => Outcome::TimedOut,
            (_, None) => Outcome::Crashed(status.clone().unwrap_or_else(|| "no exit status".into())),
        };
        self.finalize_with(outcome, status, log_tail);
    }

    /// The first half of a session's end: the token goes, leftovers of its
    /// group are ended, and its claims are settled in `todo.json`; the rest
    /// follows when the settlement is written ([`Chamber::settled`]).
    fn finalize_with(&mut self, outcome: Outcome, status: Option<String>, log_tail: String) {
        let (now, max_attempts) = (self.now, self.max_attempts());
        let Some(l) = self.live.as_mut() else { return };
        l.phase = Phase::Settling;
        l.log_tail = log_tail;
        let how = match &outcome {
            Outcome::Stopped | Outcome::Interrupted => Settle::Requeue { now },
            o if o.failed() => Settle::Fail { now, max_attempts },
            _ => Settle::Complete,
        };
        l.outcome = Some(outcome);
        let (token, pgid) = (l.token.clone(), l.pgid);
        let op = TodoOp::Settle { wake: l.wake_id.clone(), claims: l.claims.clone(), how };
        self.emit(Effect::RevokeToken { token });
        if pgid > 0 {
            // Leftover children (an agent's background jobs) end with the session.
            self.emit(Effect::EndLeftovers { pgid });
        }
        if let Some(s) = status {
            self.log(format!("agent exited: {s}"));
        }
        self.emit(Effect::UpdateTodos { op, then: AfterTodos::Settled });
    }

    /// Sentences for a session's report on how its claims were settled.
    fn settle_details(&mut self, outcome: &Outcome, done: Option<TodoDone>) -> Vec<String> {
        let tz = self.tz();
        let max_attempts = self.max_attempts();
        let Some(TodoDone::Settled { retries, exhausted }) = done else {
            return vec![
                "cryo could not update todo.json for this session's TODOs (see `cryoctl chamber status`).".into(),
            ];
        };
        let mut details = Vec::new();
        if matches!(outcome, Outcome::Stopped | Outcome::Interrupted) {
            if !retries.is_empty() {
                details.push(format!("Its TODOs were re-queued as {}.", ids_text(&retries)));
            }
        } else if let Ok(list) = &self.todos {
            for id in &retries {
                if let Some(t) = list.get(*id) {
                    let at = t.at.map(|a| crate::time::format_in(a, tz)).unwrap_or_default();
                    details.push(format!("Retry: TODO {id} \"{}\" at {at}.", t.text));
                }
            }
        }
        for c in exhausted {
            let m = format!(
                "TODO {} \"{}\" failed {} times (max_attempts = {max_attempts}); cryo gave up on it and needs you to look.",
                c.id,
                todo::base_text(&c.text),
                c.attempt + 1
            );
            details.push(m.clone());
            self.attention = Some(m);
        }
        details
    }

    /// The second half of a session's end: the report and fallbacks, the
    /// journal, the log block, the ledger; then whoever waited, the slot, and
    /// what comes next.
    fn settled(&mut self, result: Result<(TodoDone, TodoList), TodoWriteError>) {
        let done = self.todos_written(result, |e| Refusal::Internal(e.to_string())).ok();
        let Some(l) = self.live.take() else { return };
        let now = self.now;
        let outcome = l.outcome.clone().expect("set when the session ended");
        let mut details = self.settle_details(&outcome, done);
        if outcome.failed() {
            let quick = matches!(outcome, Outcome::Crashed(_)) && l.started_at.is_none_or(|s| now - s < QUICK_EXIT);
            if quick {
                let m = format!(
                    "The agent exited within {} seconds without hibernating: likely a misconfiguration (agent command, API key, permissions). Check `agent` in cryo.toml.",
                    QUICK_EXIT.num_seconds()
                );
                details.insert(0, m.clone());
                self.attention.get_or_insert(m);
            }
            let tail = session::log_tail(&l.log_tail, TAIL_LINES, TAIL_CHARS);
            if !tail.is_empty() {
                details.push(format!("Last lines of cryo-agent.log:\n\n```\n{tail}\n```"));
            }
        }
        let conv = Conversation { unanswered_batch: !l.unanswered.is_empty(), sent_any: l.sent_any };
        self.write_fallbacks(l.number, &outcome, conv, &l.unanswered, &details.join("\n\n"));
        // Every batch it claimed is answered now: by the agent, or above.
        if l.claimed_mail {
            self.emit(Effect::JournalAnswer { number: l.number });
        }
        let summary = l.hibernate.as_ref().map(|(_, s)| s.clone()).filter(|s| !s.is_empty());
        let result = match &summary {
            Some(s) => format!("{}: {}", outcome.describe(), s),
            None => outcome.describe(),
        };
        self.log(format!("session ended: {result}"));
        self.emit(Effect::Log(LogLine::End));
        self.emit(Effect::SessionEnded {
            number: l.number,
            at: now,
            outcome: outcome.describe(),
            summary: summary.unwrap_or_default(),
        });
        self.previous_failure = outcome.failed().then(|| outcome.describe());
        if outcome.failed() {
            self.failures = self.failures.saturating_add(1);
            let hold = todo::retry_delay(self.failures);
            self.mail_hold_until = Some(now + hold);
            if !self.unread.is_empty() {
                self.log(format!(
                    "mail waits; after {} failed session(s) the next wake for mail is held for {}",
                    self.failures,
                    crate::time::humanize(hold)
                ));
            }
        } else {
            self.failures = 0;
            self.mail_hold_until = None;
        }
        self.completed = outcome == Outcome::Hibernated(Ending::Complete);
        self.last_result = Some(result);
        // Whoever waits reads the view next: it must show the end.
        if !l.stop_waiters.is_empty() {
            self.emit(Effect::Publish);
        }
        for w in l.stop_waiters {
            self.reply(w, Ok(Reply::Stopped { already: false, ended: true }));
        }
        let shutting_down = !l.shutdown_waiters.is_empty();
        for w in l.shutdown_waiters {
            self.reply(w, Ok(Reply::Done));
        }
        self.emit(Effect::Release);
        if let Some(req) = self.removing.take() {
            self.emit(Effect::Plan(None));
            self.reply(req, Ok(Reply::Done));
            return self.exit();
        }
        if shutting_down {
            return self.exit();
        }
        match self.replace_with.take() {
            Some((Some(m), req)) => match self.operator_message("operator", "", &m) {
                // The rest follows when the message is written.
                Ok(message) => self.emit(Effect::WriteMessage {
                    folder: Folder::Inbox,
                    message,
                    then: AfterWrite::Replaced { req },
                }),
                Err(e) => {
                    self.reply(req, Err(e));
                    self.replan();
                }
            },
            Some((None, req)) => {
                self.manual_queued = true;
                self.reply(req, Ok(Reply::Woke(WakeOutcome { replaced: true, ..WakeOutcome::default() })));
                self.replan();
            }
            None => self.replan(),
        }
    }

    /// The `cryochamber` messages a session's end calls for.
    fn write_fallbacks(
        &mut self,
        number: u64,
        outcome: &Outcome,
        conv: Conversation,
        unanswered: &[String],
        details: &str,
    ) {
        for f in session::fallbacks(number, outcome, conv, details) {
            let mut meta = BTreeMap::new();
            meta.insert("session".to_string(), number.to_string());
            if f.is_reply {
                meta.insert("in_reply_to".to_string(), unanswered.join(" "));
            }
            let message = Message {
                from: CRYOCHAMBER.into(),
                subject: f.subject.clone(),
                timestamp: Some(self.now),
                question: false,
                meta,
                body: f.body,
            };
            let then = AfterWrite::Fallback { subject: f.subject };
            self.emit(Effect::WriteMessage { folder: Folder::Outbox, message, then });
        }
    }
}

fn claim_req(then: AfterClaim) -> ReqId {
    match then {
        AfterClaim::Receive(req) | AfterClaim::Dialog { req, .. } => req,
    }
}

fn refusal_text(r: Refusal) -> String {
    match r {
        Refusal::Invalid(s) | Refusal::Precondition(s) | Refusal::NotFound(s) | Refusal::Internal(s) => s,
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

fn ids_text(ids: &[u64]) -> String {
    ids.iter().map(|i| format!("TODO {i}")).collect::<Vec<_>>().join(", ")
}

/// A message's first non-empty line, cut at 80 characters.
pub fn first_line(s: &str) -> String {
    let line = s.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let mut out: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        out.push('…');
    }
    out
}
