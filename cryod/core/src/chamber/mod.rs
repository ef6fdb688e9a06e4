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

mod calls;
mod end;
pub mod handoff;
mod io;
mod missed;
pub mod notice;
mod operator;
mod recovery;
#[cfg(test)]
mod tests;
mod wake;

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
/// After a wake could not be recorded or claimed (a full disk, a read-only
/// file system), the next attempt waits this long, so a failing write is
/// retried once a minute rather than in a loop.
pub const WRITE_RETRY: Duration = Duration::minutes(1);
/// How long a pre-check may run unless `precheck_timeout` says otherwise.
pub const DEFAULT_PRECHECK_TIMEOUT: StdDuration = StdDuration::from_secs(60);
/// How many messages `dialog` shows without `--last`.
pub const DIALOG_LAST: u32 = 20;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Stopped,
    Idle,
    Running,
    Paused,
    Faulted,
}

/// The chamber's state as status views show it (and as a fleet node
/// publishes it for the others, in JSON).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
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
    /// `[[on_end]]`: the links, the last hand-off, what waits, a loop.
    pub handoffs: Option<String>,
    /// Archived: hidden from the default list, never started.
    pub archived: bool,
}

/// What the chamber holds when its machine is made (from the registry, the
/// ledger and the files).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub id: i64,
    pub name: String,
    pub started: bool,
    pub paused: bool,
    pub archived: bool,
    /// It was reset and has run no session since: its next start
    /// bootstraps, as a new chamber's first does.
    pub begun_again: bool,
    pub last_session: u64,
    pub last_result: Option<String>,
    pub last_lateness_ms: Option<i64>,
    pub open_questions: u32,
    pub config: Result<Settings, Failed>,
    pub warnings: Vec<String>,
    pub todos: Result<TodoList, Failed>,
    pub unread: Vec<String>,
    pub system_tz: Tz,
    /// The conversation the last session left to resume (from the ledger).
    pub thread: Option<session::Thread>,
    /// When its newest visible message was written (from the outbox).
    pub last_visible: Option<DateTime<Utc>>,
    /// The newest session was interrupted by a stop of cryod: its work
    /// runs again ([`Rerun::after`]).
    pub rerun: Option<Rerun>,
}

/// Why cryod is cutting a session short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Timeout,
    Stop,
    Shutdown,
    AfterHibernate,
    Replace,
    /// The provider's limit was reached (the agent would only wait).
    Limit,
    /// The session cost more than `max_session_usd`.
    OverBudget,
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The wake (with the claims it makes) is being recorded in the ledger.
    Recording,
    /// Its agent is being started.
    Spawning,
    /// Its agent runs (its claims are written to `todo.json` first thing).
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
    /// What the wake claims, as recorded in the ledger (the durable record;
    /// `todo.json` shows them once the agent runs).
    claims: Vec<Claim>,
    due: Option<DateTime<Utc>>,
    pgid: i32,
    started_at: Option<DateTime<Utc>>,
    hibernate: Option<(Ending, String)>,
    /// Why the agent's last hibernate was refused, if it was (and none was
    /// accepted after): an exit after it is the agent's, not a setup's, fault.
    refused: Option<String>,
    /// Claimed inbox messages not yet answered by a send.
    unanswered: Vec<String>,
    /// It claimed some inbox batch (the journal closes them at its end).
    claimed_mail: bool,
    sent_any: bool,
    linger: Option<ReqId>,
    ending: Option<Cut>,
    /// The agent's stream said the provider's limit stopped it, until then.
    limited: Option<DateTime<Utc>>,
    /// It went over `max_session_usd`; its claims wait until then.
    over_budget: Option<DateTime<Utc>>,
    stop_waiters: Vec<ReqId>,
    shutdown_waiters: Vec<ReqId>,
    /// Set when the session ends, for its settlement.
    outcome: Option<Outcome>,
    log_tail: String,
    /// The conversation it continues, if it resumed one.
    resumed: Option<session::Thread>,
    /// Why it starts a new conversation though the chamber resumes (a cap).
    fresh: Option<String>,
    /// What the agent reported of its conversation, at its exit.
    used: Option<session::Used>,
    /// Notices for its prompt (a failed check).
    notices: Vec<String>,
    /// Its pre-checks' output (command, output), for its prompt as data.
    data: Vec<(String, String)>,
}

/// A wake whose permit is held while its pre-checks run.
#[derive(Debug, Clone)]
struct Checking {
    nonce: String,
    token: String,
    trigger: Trigger,
    asked_at: DateTime<Utc>,
    claims: Vec<Claim>,
}

/// What the machine holds of `todo.json`.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    List(TodoList),
    /// At rest: the next due time only.
    Rest {
        next_due: Option<DateTime<Utc>>,
    },
}

/// One chamber's state; see the module documentation.
#[derive(Debug, Clone)]
pub struct Chamber {
    id: i64,
    name: String,
    limits: Limits,
    started: bool,
    paused: bool,
    /// Archived: stopped, and refusing to start until unarchived.
    archived: bool,
    /// Reset, with no session since: the next start bootstraps.
    begun_again: bool,
    config: Result<Settings, Failed>,
    warnings: Vec<String>,
    /// `todo.json` as last read or written, or at rest only its next due
    /// time ([`Chamber::rest`]); the reason it cannot be read.
    todos: Result<Held, Failed>,
    unread: Vec<String>,
    system_tz: Tz,
    last_session: u64,
    /// A wake is queued for admission (its trigger and when it was asked for).
    wanted: Option<(Trigger, DateTime<Utc>)>,
    /// A wake holds its permit while its pre-checks run.
    checking: Option<Checking>,
    live: Option<Box<Live>>,
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
    /// A wake failed to write its record or claim: no wake before this.
    write_retry_at: Option<DateTime<Utc>>,
    /// An operator asked for a session; it runs when the current one ends.
    manual_queued: bool,
    /// Work cryod's own stop cut short, to run again once, at once.
    rerun: Option<Rerun>,
    /// A `wake --replace` waiting for the old session to end.
    replace_with: Option<(Option<String>, ReqId)>,
    last_lateness_ms: Option<i64>,
    /// Operators waiting for a start to show its first agent.
    start_waiters: Vec<ReqId>,
    write_error: Option<String>,
    open_questions: u32,
    /// A `remove` waiting for the running session to end.
    removing: Option<ReqId>,
    /// The conversation the next session may resume.
    thread: Option<session::Thread>,
    handoffs: handoff::HandOffs,
    /// What the budgets have said (notices told, the limit that paused it);
    /// boxed, as few chambers have budgets.
    budgets: Box<crate::limits::Budgets>,
    /// Whether mail's senders were told of the provider account's hold.
    hold: crate::limits::Hold,
    /// When and why it could not wake, to explain missed slots.
    spans: missed::Spans,
    /// When the chamber last wrote a visible message (the dead man's switch).
    last_visible: Option<DateTime<Utc>>,
    silent_armed: bool,
    /// `silent` was raised for this silence.
    silent_told: bool,
    /// Events raised since this machine was made (their ids' sequence).
    raised: u64,
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
            archived: l.archived,
            begun_again: l.begun_again,
            config: l.config,
            warnings: l.warnings,
            todos: l.todos.map(Held::List),
            unread: l.unread,
            system_tz: l.system_tz,
            last_session: l.last_session,
            wanted: None,
            checking: None,
            live: None,
            last_result: l.last_result,
            previous_failure: None,
            attention: None,
            completed: false,
            failures: 0,
            mail_hold_until: None,
            write_retry_at: None,
            manual_queued: false,
            rerun: l.rerun,
            replace_with: None,
            last_lateness_ms: l.last_lateness_ms,
            start_waiters: Vec::new(),
            write_error: None,
            open_questions: l.open_questions,
            removing: None,
            thread: l.thread,
            handoffs: handoff::HandOffs::default(),
            budgets: Default::default(),
            hold: Default::default(),
            spans: missed::Spans::default(),
            last_visible: l.last_visible,
            silent_armed: false,
            silent_told: false,
            raised: 0,
            finished: false,
            now: DateTime::<Utc>::MIN_UTC,
            out: Vec::new(),
        }
    }

    /// The one entry point: what `input` changes, and what to do about it.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        self.now = now;
        let (attention, fault) = (self.attention.clone(), self.fault());
        self.step(input);
        self.notice_changes(attention, fault);
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

    /// Paused: no session starts.
    pub fn paused(&self) -> bool {
        self.paused
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

    /// The list the machine holds (`None` at rest: it keeps only the next
    /// due time then).
    pub fn todos(&self) -> Option<Result<&TodoList, &Failed>> {
        match &self.todos {
            Ok(Held::List(l)) => Some(Ok(l)),
            Ok(Held::Rest { .. }) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Lets go of the parsed list while no session runs, keeping what
    /// planning and the view need (the next due time): a chamber at rest
    /// costs a few bytes, not its whole `todo.json`. The shell calls it
    /// after each event; [`wants_list`](Self::wants_list) says when it reads
    /// the file again.
    pub fn rest(&mut self) {
        if self.live.is_some() {
            return;
        }
        if let Ok(Held::List(l)) = &self.todos {
            self.todos = Ok(Held::Rest { next_due: l.next_due() });
        }
    }

    /// Whether `input` decides from the TODO list, so the shell reads
    /// `todo.json` first and hands it over (as [`Input::TodosChanged`]) if it
    /// differs from what the machine holds, which at rest it always does: a
    /// start, a wake's admission (its claims and prompt), an operator's TODO
    /// call, and an agent's hibernate (the gate) or listing.
    pub fn wants_list(input: &Input) -> bool {
        matches!(
            input,
            Input::Start { .. }
                | Input::Admitted { .. }
                | Input::Prechecked { .. }
                | Input::Todo { .. }
                | Input::Agent { call: Call::Todo(TodoCall::List) | Call::Hibernate { .. }, .. }
        )
    }

    /// The parsed list, for what needs it (the shell gave it, see
    /// [`wants_list`](Self::wants_list)).
    fn list(&self) -> Result<&TodoList, Failed> {
        match &self.todos {
            Ok(Held::List(l)) => Ok(l),
            Ok(Held::Rest { .. }) => Err("todo.json was not read when it was needed (a bug in cryod)".into()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The running session's number and wake id, once its agent may exist.
    /// Why mail written now would not be read at once, and when it will be
    /// and how to have it read now; `None` when the agent reads it at once
    /// (or is running, and is told).
    pub fn mail_waits(&self) -> Option<String> {
        let name = &self.name;
        if let Some(f) = self.fault() {
            return Some(format!("{name} is faulted ({f}): nothing is read until that is fixed"));
        }
        if !self.started {
            return Some(format!(
                "{name} is stopped: its agent reads it when the chamber starts (`cryoctl chamber start {name}`)"
            ));
        }
        if self.paused {
            let why = self
                .attention
                .as_deref()
                .filter(|a| a.starts_with(session::BUDGET_REACHED))
                .map(|a| format!(" ({a})"))
                .unwrap_or_default();
            return Some(format!(
                "{name} is paused{why}: its agent reads it when the chamber resumes (`cryoctl chamber resume {name}`)"
            ));
        }
        if self.live.is_some() || self.checking.is_some() {
            return None;
        }
        let tz = self.tz();
        let wake_now = format!("`cryoctl chamber wake {name}` has it read now");
        if let Some(at) = self.write_retry_at.filter(|t| *t > self.now) {
            let at = crate::time::format_in(at, tz);
            return Some(format!("a write into {name} failed; the next try, at {at}, reads it ({wake_now})"));
        }
        let hold = self.mail_hold_until.filter(|h| *h > self.now)?;
        let why = if self.failures > 0 {
            format!("after {} failed session(s) in a row, mail waits", self.failures)
        } else {
            "the provider's limit was reached: mail waits".to_string()
        };
        Some(format!("{why}; its agent reads it at {} ({wake_now})", crate::time::format_in(hold, tz)))
    }

    /// A wake holds its permit while its pre-checks run.
    pub fn checking(&self) -> bool {
        self.checking.is_some()
    }

    pub fn live_session(&self) -> Option<(u64, &str)> {
        self.live.as_ref().map(|l| (l.number, l.wake_id.as_str()))
    }

    pub fn fault(&self) -> Option<String> {
        match (&self.config, &self.todos) {
            (Err(e), _) | (_, Err(e)) => Some(e.0.clone()),
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
            handoffs: self.handoff_line(),
            archived: self.archived,
        }
    }

    /// The next TODO's due time (none once the plan is completed).
    fn next_todo(&self) -> Option<DateTime<Utc>> {
        match (&self.todos, self.completed) {
            (Ok(Held::List(t)), false) => t.next_due(),
            (Ok(Held::Rest { next_due }), false) => *next_due,
            _ => None,
        }
    }

    /// When this chamber next wakes by itself: its next TODO, held mail, or
    /// a failed write's retry.
    fn next_wake(&self) -> Option<DateTime<Utc>> {
        let todo = self.next_todo();
        let hold = self.mail_hold_until.filter(|_| !self.unread.is_empty());
        let retry = self.write_retry_at.filter(|t| *t > self.now);
        [todo, hold, retry].into_iter().flatten().min()
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
        self.config.as_ref().map(|c| c.max_attempts).unwrap_or(todo::DEFAULT_MAX_ATTEMPTS)
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
                self.todos = Ok(Held::List(list));
                self.write_error = None;
                self.write_retry_at = None;
                Ok(done)
            }
            Err(TodoWriteError::Fault(m)) => {
                self.todos = Err(Failed(m.clone()));
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
            Input::Archive { req, archive } => self.archive(req, archive),
            Input::Reset { req } => self.reset(req),
            Input::Wake { req, message, replace } => self.wake(req, message, replace),
            Input::Deliver { req, from, subject, text, meta } => self.deliver(req, &from, &subject, &text, meta),
            Input::Todo { req, call } => self.todo_call(req, call, By::Operator),
            Input::WritePlan { req, text } => self.write_plan(req, text),
            Input::Shutdown { req } => self.shutdown(req),
            Input::Due => self.replan(),
            Input::Inbox { unread, arrived } => self.inbox(unread, arrived),
            Input::TodosChanged(todos) => self.todos_changed(todos),
            Input::ConfigChanged { config, warnings } => self.config_changed(config, warnings),
            Input::ZoneChanged { zone, config, warnings } => self.zone_changed(zone, config, warnings),
            Input::Power { sleeping } => self.power(sleeping),
            Input::Admitted { nonce, token } => self.admitted(nonce, token),
            Input::Agent { session, req, call } => {
                if self.live.as_ref().is_some_and(|l| l.number == session && l.phase == Phase::Running) {
                    self.agent_call(req, call);
                } else {
                    self.reply(req, Err(Refusal::Precondition("this session has ended".into())));
                }
            }
            Input::ProviderLimit { session, until } => {
                if let Some(l) = self.live.as_mut().filter(|l| l.number == session && l.phase == Phase::Running) {
                    l.limited = Some(until);
                    self.end_session(session, Cut::Limit);
                }
            }
            Input::OverBudget { session, until } => {
                if let Some(l) = self.live.as_mut().filter(|l| l.number == session && l.phase == Phase::Running) {
                    l.over_budget = Some(until);
                    self.end_session(session, Cut::OverBudget);
                }
            }
            Input::Budget { req, uses } => self.budget(req, &uses),
            Input::Notice { subject, body } => self.notice_message(subject, body),
            Input::AdmissionAsked { req, budgets, held } => {
                self.budget(req, &budgets);
                self.held(held);
            }
            Input::Exited { session, status, log_tail, limited, used } => {
                if let Some(l) = self.live.as_mut().filter(|l| l.number == session && l.phase == Phase::Running) {
                    l.used = used;
                    self.finalize(Some(status), log_tail, limited);
                }
            }
            Input::Timer(t) => self.timer(t),
            Input::Prechecked { nonce, results } => self.prechecked(nonce, results),
            Input::HandedOff { to, session, result } => self.handed_off(to, session, result),
            Input::Recorded(r) => self.recorded(r),
            Input::TodosUpdated { then, result } => self.todos_updated(then, result),
            Input::Spawned(r) => self.spawned(r),
            Input::MessageWritten { then, result } => self.message_written(then, result),
            Input::StoreWritten { then, result } => self.store_written(then, result),
            Input::Journaled { then, names, result } => self.journaled(then, names, result),
            Input::Archived { then, result } => self.archived(then, result),
            Input::PlanWritten { req, result } => self.plan_written(req, result),
            Input::ResetDone { req, result } => self.reset_done(req, result),
        }
    }

    /// The chamber is done (removed, or cryod is shutting down): the shell
    /// stops feeding it once [`Chamber::finished`] says so.
    fn exit(&mut self) {
        self.drop_handoffs();
        self.finished = true;
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
            Timer::HandOffs => self.release_handoffs(),
            Timer::Silence => self.silence_over(),
            Timer::StartWaitOver => {
                for w in std::mem::take(&mut self.start_waiters) {
                    self.reply(w, Ok(Reply::Started(false)));
                }
            }
        }
    }

    // ---- planning ----------------------------------------------------------

    /// After a start or a daemon restart: bootstrap a new chamber, else run
    /// what is due and what waits in the inbox.
    fn resume(&mut self) {
        if (self.last_session == 0 || self.begun_again) && self.live.is_none() {
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
        let next = self.next_todo();
        let hold = self.mail_hold_until.filter(|h| *h > now);
        let retry = self.write_retry_at.filter(|t| *t > now);
        if self.live.is_none() && retry.is_none() {
            // Interrupted work owes nothing to the back-off: it was not the
            // agent's failure.
            if self.rerun.is_some() {
                self.want(Trigger::Recovery);
            }
            if next.is_some_and(|t| t <= now) {
                self.want(Trigger::Scheduled);
            }
            if hold.is_none() && !self.unread.is_empty() {
                self.want(Trigger::Inbox);
            }
        }
        // While a session runs, a due TODO waits for it to end (then replan).
        let wake = [next.filter(|t| *t > now), hold, retry].into_iter().flatten().min();
        self.emit(Effect::Plan(wake));
    }

    /// A wake waiting on its pre-checks is dropped (stop, pause, removal):
    /// its permit goes back, and their answer, when it comes, is ignored.
    fn drop_check(&mut self) {
        if self.checking.take().is_some() {
            self.emit(Effect::Release);
        }
    }

    /// A wake's write failed: no wake (and no request for one) until
    /// [`WRITE_RETRY`] has passed; the next re-plan says when.
    fn hold_wakes(&mut self) {
        self.write_retry_at = Some(self.now + WRITE_RETRY);
        self.wanted = None;
        self.emit(Effect::CancelAdmission);
    }

    fn want(&mut self, trigger: Trigger) {
        if !self.started || self.paused || self.live.is_some() || self.checking.is_some() {
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
            let held = |t: Option<DateTime<Utc>>| t.is_some_and(|h| h > self.now);
            if held(self.mail_hold_until) || held(self.write_retry_at) {
                return;
            }
            self.want(Trigger::Inbox);
        }
    }
}

fn claim_req(then: AfterClaim) -> ReqId {
    match then {
        AfterClaim::Receive(req) | AfterClaim::Dialog { req, .. } => req,
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
#[cfg(test)]
mod size {
    /// Every chamber holds one machine for as long as it is registered;
    /// what only a session needs (`Live`) is boxed.
    #[test]
    fn a_machine_at_rest_stays_small() {
        let size = std::mem::size_of::<super::Chamber>();
        assert!(size <= 1024, "Chamber is {size} bytes inline");
    }
}
