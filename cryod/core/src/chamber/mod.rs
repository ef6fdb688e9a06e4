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

pub mod approval;
mod calls;
mod end;
mod files;
pub mod handoff;
mod health;
mod io;
mod missed;
pub mod notice;
mod operator;
mod plan;
mod recovery;
mod silence;
#[cfg(test)]
mod tests;
mod wake;
mod waking;
mod wishes;

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

use self::files::Files;
use self::health::Health;
pub use self::health::{Acknowledged, HealthRecord};
pub use self::io::*;
use self::silence::Silence;
use self::waking::{Cut, Waking};
use self::wishes::Wishes;
use crate::session;
use crate::todo::{TodoError, TodoList};

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
    /// A session waits in place for a person's answer to one of its tool
    /// calls, or the chamber is paused until that answer (a parked session).
    #[serde(rename = "awaiting approval")]
    AwaitingApproval,
    /// Started, no session: its provider account is at its limit, and its
    /// wakes wait until the hold ends (`View::held`).
    Held,
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
    /// The provider account whose limit holds its wakes, and until when.
    pub held: Option<crate::limits::AccountHold>,
    /// A session's agent runs now (state `running`, or `awaiting approval`
    /// with the session waiting in place).
    pub in_session: bool,
    /// What needs a person, set aside by one (until it changes or a
    /// snooze ends).
    pub acknowledged: Option<Acknowledged>,
}

/// What the chamber holds when its machine is made (from the registry, the
/// ledger and the files).
/// What a start hands the machine of `todo.json`.
#[derive(Debug, Clone, PartialEq)]
pub enum Listed {
    /// The list, as read.
    Read(TodoList),
    /// Its files are the versions an earlier start read: only the next due
    /// time that read gave, the machine at rest from its start (the first
    /// input that decides from the list has it read, as after any rest; see
    /// [`Chamber::wants_list`]).
    Kept(Option<DateTime<Utc>>),
}

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
    pub todos: Result<Listed, Failed>,
    pub unread: Vec<String>,
    pub system_tz: Tz,
    /// The conversation the last session left to resume (from the ledger).
    pub thread: Option<session::Thread>,
    /// When its newest visible message was written (from the outbox).
    pub last_visible: Option<DateTime<Utc>>,
    /// The newest session was interrupted by a stop of cryod: its work
    /// runs again ([`Rerun::after`]).
    pub rerun: Option<Rerun>,
    /// The approval request the chamber waits for (from the store), and
    /// what it asks.
    pub awaiting: Option<(String, String)>,
    /// Its health as the store kept it (`Effect::SaveHealth`); none from a
    /// store that kept none yet.
    pub health: Option<HealthRecord>,
}

/// One chamber's state; see the module documentation. Its identity, the
/// time and the effects of the step under way are its own; the rest is kept
/// in parts, each with the rules of what it owns.
#[derive(Debug, Clone)]
pub struct Chamber {
    id: i64,
    name: String,
    limits: Limits,
    system_tz: Tz,
    /// What the operator wants of it, as the registry records it.
    wishes: Wishes,
    /// What was last read of its files (`cryo.toml`, `todo.json`, the inbox).
    files: Files,
    /// The session under way and what waits for one.
    waking: Waking,
    /// How it is doing: results, attention, back-offs, a failed write.
    health: Health,
    /// The dead man's switch.
    silence: Silence,
    /// The conversation the next session may resume.
    thread: Option<session::Thread>,
    handoffs: handoff::HandOffs,
    /// What the budgets have said (notices told, the limit that paused it);
    /// boxed, as few chambers have budgets.
    budgets: Box<crate::limits::Budgets>,
    /// Whether mail's senders were told of the provider account's hold.
    hold: crate::limits::Hold,
    /// The provider account's hold as admission last told it.
    limit_hold: Option<crate::limits::AccountHold>,
    /// When and why it could not wake, to explain missed slots.
    spans: missed::Spans,
    /// Events raised since this machine was made (their ids' sequence).
    raised: u64,
    /// The health record last saved (its hash): saved again when it changes.
    saved_health: u64,
    finished: bool,
    now: DateTime<Utc>,
    out: Vec<Effect>,
}

impl Chamber {
    pub fn new(l: Loaded, limits: Limits) -> Chamber {
        // A completed plan shows in the ledger's last result; the rest of
        // what the store kept is read back as it was.
        let completed = l.last_result.as_deref().is_some_and(|r| r.starts_with("completed the plan"));
        let mut health = Health::new(l.last_result, l.last_lateness_ms, l.open_questions);
        let mut record = l.health.unwrap_or_default();
        let saved_health = hash(&record);
        let handoffs = handoff::HandOffs::kept(record.handoff_last.take(), record.handoff_loop.take());
        // The ledger has the last word on a completed plan (its end is
        // written before the record is saved again).
        record.completed |= completed;
        health.restore(record);
        if let Some((id, what)) = l.awaiting {
            health.needs(approval::awaiting_line(&id, &what));
            health.awaiting(id);
        }
        Chamber {
            id: l.id,
            name: l.name,
            limits,
            system_tz: l.system_tz,
            wishes: Wishes::new(l.started, l.paused, l.archived, l.begun_again),
            files: Files::new(l.config, l.warnings, l.todos, l.unread),
            waking: Waking::new(l.last_session, l.rerun),
            health,
            silence: Silence::new(l.last_visible),
            thread: l.thread,
            handoffs,
            budgets: Default::default(),
            hold: Default::default(),
            limit_hold: None,
            spans: missed::Spans::default(),
            raised: 0,
            saved_health,
            finished: false,
            now: DateTime::<Utc>::MIN_UTC,
            out: Vec::new(),
        }
    }

    /// The one entry point: what `input` changes, and what to do about it.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        self.now = now;
        let (attention, fault) = (self.health.attention().map(str::to_string), self.fault());
        let need = self.health.any_acknowledged().then(|| self.need());
        self.step(input);
        // What was set aside comes back when it changes or its snooze ends.
        if need.is_some_and(|n| n != self.need() || self.health.acknowledged(now).is_none()) {
            self.health.unacknowledge();
        }
        self.notice_changes(attention, fault);
        self.save_health();
        std::mem::take(&mut self.out)
    }

    /// Saves the health record if it changed since it was last saved.
    pub(super) fn save_health(&mut self) {
        let h = hash(&self.health_record());
        if h != self.saved_health {
            self.saved_health = h;
            self.emit(Effect::SaveHealth);
        }
    }

    /// What of its health the store keeps, as it is now (with the last
    /// hand-off its line shows).
    pub fn health_record(&self) -> HealthRecord {
        let (handoff_last, handoff_loop) = self.handoffs.shown();
        HealthRecord { handoff_last, handoff_loop, ..self.health.record() }
    }

    // ---- what the shell reads --------------------------------------------

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn tz(&self) -> Tz {
        self.files.tz(self.system_tz)
    }

    /// Started (paused included): bridges run, mail is taken in.
    pub fn started(&self) -> bool {
        self.wishes.started()
    }

    /// Paused: no session starts.
    pub fn paused(&self) -> bool {
        self.wishes.paused()
    }

    /// The chamber is done: removed, or cryod shut it down.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The plan was completed: no scheduled wakes until mail arrives.
    pub fn completed(&self) -> bool {
        self.health.completed()
    }

    pub fn unread(&self) -> &[String] {
        self.files.unread()
    }

    /// The list the machine holds (`None` at rest: it keeps only the next
    /// due time then).
    pub fn todos(&self) -> Option<Result<&TodoList, &Failed>> {
        self.files.todos()
    }

    /// Lets go of the parsed list while no session runs, keeping what
    /// planning and the view need (the next due time): a chamber at rest
    /// costs a few bytes, not its whole `todo.json`. The shell calls it
    /// after each event; [`wants_list`](Self::wants_list) says when it reads
    /// the file again.
    pub fn rest(&mut self) {
        if !self.waking.in_session() {
            self.files.rest();
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
        self.files.list()
    }

    /// Why mail written now would not be read at once, and when it will be
    /// and how to have it read now; `None` when the agent reads it at once
    /// (or is running, and is told).
    pub fn mail_waits(&self) -> Option<String> {
        let name = &self.name;
        if let Some(f) = self.fault() {
            return Some(format!("{name} is faulted ({f}): nothing is read until that is fixed"));
        }
        if !self.wishes.started() {
            return Some(format!(
                "{name} is stopped: its agent reads it when the chamber starts (`cryoctl chamber start {name}`)"
            ));
        }
        if self.wishes.paused() {
            let why = self
                .health
                .attention()
                .filter(|a| a.starts_with(session::BUDGET_REACHED))
                .map(|a| format!(" ({a})"))
                .unwrap_or_default();
            return Some(format!(
                "{name} is paused{why}: its agent reads it when the chamber resumes (`cryoctl chamber resume {name}`)"
            ));
        }
        if self.waking.busy() {
            return None;
        }
        let tz = self.tz();
        let wake_now = format!("`cryoctl chamber wake {name}` has it read now");
        if let Some(at) = self.health.retry_at(self.now) {
            let at = crate::time::format_in(at, tz);
            return Some(format!("a write into {name} failed; the next try, at {at}, reads it ({wake_now})"));
        }
        let (why, hold) = self.health.why_mail_waits(self.now)?;
        Some(format!("{why}; its agent reads it at {} ({wake_now})", crate::time::format_in(hold, tz)))
    }

    /// A wake holds its permit while its pre-checks run.
    pub fn checking(&self) -> bool {
        self.waking.checking()
    }

    /// A wake is on its way: asked of admission, its pre-checks running, or
    /// its session under way.
    pub fn waking(&self) -> bool {
        self.waking.busy() || self.waking.wanted().is_some()
    }

    /// The running session's number and wake id, once its agent may exist.
    pub fn live_session(&self) -> Option<(u64, &str)> {
        self.waking.live().map(|l| (l.number, l.wake_id.as_str()))
    }

    pub fn fault(&self) -> Option<String> {
        self.files.fault()
    }

    pub fn view(&self) -> View {
        let held = self.limit_hold.clone().filter(|h| h.until > self.now);
        let state = if self.fault().is_some() {
            State::Faulted
        } else if let Some(l) = self.waking.live() {
            if l.asking.is_empty() && l.parked.is_none() { State::Running } else { State::AwaitingApproval }
        } else {
            match self.wishes.state() {
                State::Paused if self.health.awaiting_any() => State::AwaitingApproval,
                State::Idle if held.is_some() => State::Held,
                other => other,
            }
        };
        let mut view = View {
            state,
            fault: self.fault(),
            agent: self.files.settings().map(|c| c.agent.clone()).unwrap_or_default(),
            timezone: self.tz().name().to_string(),
            session: self.waking.session(),
            next_wake: if self.wishes.wakes() { self.next_wake() } else { None },
            mail_waiting: self.files.unread().len() as u32,
            warnings: self.files.warnings().to_vec(),
            handoffs: self.handoff_line(),
            archived: self.wishes.archived(),
            held: if state == State::Held { held } else { None },
            in_session: self.waking.live().is_some(),
            ..View::default()
        };
        self.health.show(&mut view);
        view.acknowledged = self.health.acknowledged(self.now);
        view
    }

    /// What needs a person now, hashed, to tell when it changes: the
    /// attention line, a file to mend, the last result, a fault, the mail
    /// waiting.
    fn need(&self) -> u64 {
        hash(&(self.health.need(), self.fault(), self.files.unread().len()))
    }

    /// Whether anything needs a person that they could set aside.
    fn needs_a_person(&self) -> bool {
        let (attention, trouble, _) = self.health.need();
        attention.is_some()
            || trouble.is_some()
            || self.health.last_failed()
            || self.fault().is_some()
            || (!self.wishes.started() && !self.files.unread().is_empty())
    }

    /// The next TODO's due time (none once the plan is completed).
    fn next_todo(&self) -> Option<DateTime<Utc>> {
        if self.health.completed() { None } else { self.files.next_due() }
    }

    /// When this chamber next wakes by itself: its next TODO, held mail, or
    /// a failed write's retry.
    fn next_wake(&self) -> Option<DateTime<Utc>> {
        let todo = self.next_todo();
        let hold = self.health.mail_hold_until().filter(|_| !self.files.unread().is_empty());
        let retry = self.health.retry_at(self.now);
        [todo, hold, retry, self.health.rework_at()].into_iter().flatten().min()
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

    /// Keeps the in-memory list and the write error in step with a
    /// `todo.json` update; returns what it did, or the caller's refusal.
    fn todos_written(
        &mut self,
        result: Result<(TodoDone, TodoList), TodoWriteError>,
        refused: impl FnOnce(TodoError) -> Refusal,
    ) -> Result<TodoDone, Refusal> {
        match result {
            Ok((done, list)) => {
                self.files.todos_written(list);
                self.health.wrote();
                Ok(done)
            }
            Err(TodoWriteError::Fault(m)) => {
                self.files.todos_unreadable(m.clone());
                Err(Refusal::Precondition(format!("the chamber is faulted: {m}")))
            }
            Err(TodoWriteError::Refused(e)) => Err(refused(e)),
            Err(TodoWriteError::Write(m)) => {
                self.health.write_failed(m.clone());
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
            Input::Acknowledge { req, until } => self.acknowledge(req, until),
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
            Input::Admitted { nonce, token, fresh } => self.admitted(nonce, token, fresh),
            Input::Agent { session, req, call } => {
                if self.waking.running(session).is_some() {
                    self.agent_call(req, call);
                } else {
                    self.reply(req, Err(Refusal::Precondition("this session has ended".into())));
                }
            }
            Input::ProviderLimit { session, until } => {
                if let Some(l) = self.waking.running(session) {
                    l.limited = Some(until);
                    self.end_session(session, Cut::Limit);
                }
            }
            Input::OverBudget { session, until } => {
                if let Some(l) = self.waking.running(session) {
                    l.over_budget = Some(until);
                    self.end_session(session, Cut::OverBudget);
                }
            }
            Input::Parked { session, req, id, what } => self.parked(session, req, id, what),
            Input::Answered { req, id, line } => self.answered(req, &id, line),
            Input::Caught { session, caught } => {
                if let Some(l) = self.waking.running(session).filter(|l| l.caught.is_none()) {
                    l.caught = Some(caught);
                    self.end_session(session, Cut::Caught);
                }
            }
            Input::Budget { req, uses } => self.budget(req, &uses),
            Input::Notice { subject, body } => {
                let key = format!("notice-{}", self.now.timestamp_millis());
                self.notice("limited", &key, format!("{}: {subject}", self.name), &body);
                self.notice_message(subject, body);
            }
            Input::Trouble { line } => self.trouble(line),
            Input::AdmissionAsked { req, budgets, held } => {
                self.budget(req, &budgets);
                self.held(held);
            }
            Input::ApprovalAsked { session, id } => self.asked(session, id),
            Input::ApprovalTaken { session, id } => self.taken(session, &id),
            Input::Exited { session, status, log_tail, limited, used } => {
                if let Some(l) = self.waking.running(session) {
                    l.used = used;
                    self.finalize(Some(status), log_tail, limited);
                }
            }
            Input::Timer(t) => self.timer(t),
            Input::Prechecked { nonce, results } => self.prechecked(nonce, results),
            Input::Prepared { wake_id, result } => self.prepared(wake_id, result),
            Input::HandedOff { to, session, result } => self.handed_off(to, session, result),
            Input::Recorded(r) => self.recorded(r),
            Input::TodosUpdated { then, result } => self.todos_updated(then, result),
            Input::Spawned { result, notes } => self.spawned(result, notes),
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
                if let Some(pgid) = self.waking.live().filter(|l| l.number == n && l.pgid > 0).map(|l| l.pgid) {
                    self.emit(Effect::Signal { pgid, sig: Sig::Kill });
                }
            }
            Timer::Park(n) => self.park_over(n),
            Timer::HandOffs => self.release_handoffs(),
            Timer::Silence => self.silence_over(),
            // `handle` ends the set-aside, once its time has come.
            Timer::SnoozeEnd => self.emit(Effect::Publish),
            Timer::StartWaitOver => {
                for w in self.waking.take_start_waiters() {
                    self.reply(w, Ok(Reply::Started(false)));
                }
            }
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

/// A record's hash, to tell whether it changed.
fn hash(r: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    r.hash(&mut h);
    h.finish()
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
