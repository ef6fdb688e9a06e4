//! What comes out of a chamber's machine: [`Effect`], everything cryod does
//! for a chamber, and what effects carry: the ledger's rows, changes to
//! `todo.json`, timers, and the continuation tags (`then`) their results
//! come back with.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

// The inputs that answer effects, named in the docs only (`→`).
#[cfg(doc)]
use super::Input;
use super::reply::{Refusal, Reply, ReqId};
use crate::chamber::{SKIP_GRACE, handoff, notice};
use crate::message::Message;
use crate::session::{Outcome, Trigger};
use crate::todo::{Claim, NewTodo, Settle, Todo, TodoError, TodoList};

/// Everything cryod does for a chamber.
#[derive(Debug, Clone)]
pub enum Effect {
    // ---- schedule and admission
    /// The chamber's next wake by itself (none: nothing scheduled).
    Plan(Option<DateTime<Utc>>),
    /// Queue for a permit. → [`Input::AdmissionAsked`], with what limits
    /// the wake (the budgets, the provider account's hold).
    RequestAdmission(Trigger),
    CancelAdmission,
    /// Give back the admission slot.
    Release,
    /// Run these pre-checks in the chamber (each in its own process group,
    /// output captured, ended after `timeout`) for the wake `nonce`, whose
    /// permit the chamber holds meanwhile. → [`Input::Prechecked`], later.
    Precheck {
        nonce: String,
        checks: Vec<Check>,
        timeout: Duration,
    },
    /// Record slots that passed without a session in the ledger.
    RecordPassed(Vec<Passed>),
    /// Tell people (the notifiers of `cryod.toml`).
    Notify(notice::Notice),
    /// Deliver a session's end into another chamber's inbox, from this one
    /// (`[[on_end]]`). → [`Input::HandedOff`]
    HandOff(handoff::HandOff),
    /// The provider's limit was reached: hold every wake of this chamber's
    /// provider account until then.
    HoldProvider {
        until: DateTime<Utc>,
    },
    ArmTimer {
        timer: Timer,
        after: Duration,
    },

    // ---- the ledger (durable, before what depends on it)
    /// → [`Input::Recorded`]
    RecordWake(WakeRecord),
    SessionStarted {
        number: u64,
        pid: u32,
        at: DateTime<Utc>,
        /// What woke it, and when it was due (or asked for): its lateness is
        /// `at - due`.
        trigger: Trigger,
        due: Option<DateTime<Utc>>,
    },
    SessionEnded {
        number: u64,
        at: DateTime<Utc>,
        outcome: Outcome,
        summary: String,
        /// For the figures: what woke it, and when its agent started (none
        /// if it never did, or in an earlier cryod).
        trigger: Trigger,
        started: Option<DateTime<Utc>>,
        /// The conversation it leaves for the next session to resume.
        thread: Option<crate::session::Thread>,
    },
    /// Journal an inbox batch as claimed by session `number`, before the
    /// files move. → [`Input::Journaled`]
    JournalClaim {
        number: u64,
        names: Vec<String>,
        then: AfterClaim,
    },
    /// Session `number`'s batches are answered.
    JournalAnswer {
        number: u64,
    },
    /// A batch of an ended session was answered (found at start-up).
    JournalAnswered {
        id: i64,
    },
    /// A journaled batch whose files never left the inbox: the agent never saw it.
    JournalDrop {
        id: i64,
    },
    /// → [`Input::StoreWritten`]
    SetStarted {
        started: bool,
        then: AfterStore,
    },
    /// → [`Input::StoreWritten`]
    SetPaused {
        paused: bool,
        then: AfterStore,
    },
    /// → [`Input::StoreWritten`]
    SetArchived {
        archived: bool,
        then: AfterStore,
    },

    // ---- the chamber's files
    /// → [`Input::TodosUpdated`]
    UpdateTodos {
        op: TodoOp,
        then: AfterTodos,
    },
    /// → [`Input::MessageWritten`]
    WriteMessage {
        folder: Folder,
        message: Message,
        then: AfterWrite,
    },
    /// Move these inbox files to `inbox/archive/`. → [`Input::Archived`]
    ArchiveInbox {
        names: Vec<String>,
        then: AfterClaim,
    },
    /// → [`Input::PlanWritten`]
    WritePlan {
        req: ReqId,
        text: String,
    },
    /// Move the chamber's runtime files (`todo.json`, `NOTES.md`, the
    /// messages, the logs, `.cryo/` but for the bridges' cursors) into
    /// `history/TIMESTAMP/`, and scaffold what `init` makes. No session
    /// runs. → [`Input::ResetDone`]
    Reset {
        req: ReqId,
    },
    /// Rotate `cryo.log` and `cryo-agent.log` if they are over their size.
    RotateLogs,
    Log(LogLine),

    // ---- processes
    /// The token is valid from now on (a fast agent calls at once).
    RegisterToken {
        token: String,
        session: u64,
    },
    RevokeToken {
        token: String,
    },
    /// Make the `[git]` worktree ready for session `session` (a task: the
    /// chamber answers meanwhile; one at a time per chamber, after any
    /// settling still under way). → [`Input::Prepared`], later.
    Prepare {
        session: u64,
        wake_id: String,
    },
    /// Keep what session `session` did in its worktree (a task, which then
    /// pushes and opens the pull request if the chamber says so). Nothing
    /// answers: what it kept goes to the ledger and `cryo.log`, and a
    /// settling cut short is finished by the next preparation.
    Settle {
        session: u64,
    },
    /// → [`Input::Spawned`]
    Spawn {
        session: u64,
        wake_id: String,
        token: String,
        prompt: String,
        /// The provider conversation to continue (its id), if any.
        resume: Option<String>,
        /// The worktree to start in (a `[git]` chamber's), else the chamber.
        workdir: Option<std::path::PathBuf>,
    },
    Signal {
        pgid: i32,
        sig: Sig,
    },
    /// SIGTERM to what is left of an ended session's group, SIGKILL soon after.
    EndLeftovers {
        pgid: i32,
    },
    /// Watch the folders `cryo.toml` names now.
    Rewatch,

    // ---- views and callers
    /// Keep the chamber's health in the store (it changed): what a person
    /// must do, the failures' back-off, the failed work's next try. The
    /// shell reads the record as it is when it does so
    /// ([`crate::chamber::Chamber::health_record`]): a save never writes an older one
    /// over a newer.
    SaveHealth,
    /// Publish the chamber's view now (a caller reads it next).
    Publish,
    Reply {
        req: ReqId,
        result: Result<Reply, Refusal>,
    },
}

/// A pre-check to run before a scheduled wake, and the TODOs it gates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub command: String,
    pub todos: Vec<u64>,
}

/// A slot that passed without a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    pub due: DateTime<Utc>,
    pub todo: u64,
    pub text: String,
    /// `skipped` (a pre-check said there was nothing to do) or `missed`.
    pub what: &'static str,
    pub reason: String,
}

/// The machine's timers (the shell sleeps and feeds [`Input::Timer`] back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// `max_session_duration` is over.
    Timeout(u64),
    /// The agent hibernated long ago but has not exited.
    AfterHibernate(u64),
    /// A lingering hibernate's wait is over.
    LingerDone(u64),
    /// The grace after SIGTERM is over.
    Kill(u64),
    /// Waiting for a start's first agent took too long (it is queued).
    StartWaitOver,
    /// A held hand-off's link may carry it now.
    HandOffs,
    /// The dead man's switch: `expect_activity_within` may be over.
    Silence,
    /// A parked session's moment to end by itself is over.
    Park(u64),
    /// A snooze of what needs a person may be over: it is theirs again.
    SnoozeEnd,
}

impl Timer {
    /// Whether this timer, firing for a machine that [may
    /// sleep](crate::chamber::Chamber::may_sleep), could change anything: a
    /// snooze's end and the dead man's switch. The others name a session, a
    /// start's waiters or held hand-offs, of which such a machine has none,
    /// so the shell may drop them when it lets the machine go.
    pub fn matters_at_rest(&self) -> bool {
        matches!(self, Timer::SnoozeEnd | Timer::Silence)
    }
}

/// A signal for the agent's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sig {
    Term,
    Kill,
}

/// A message folder the machine writes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folder {
    Inbox,
    Outbox,
}

/// A line for `cryo.log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLine {
    /// Opens session N's block.
    Begin(u64),
    Event(String),
    /// Closes the open block.
    End,
}

/// A wake for the ledger, recorded before its agent is spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeRecord {
    pub number: u64,
    pub wake_id: String,
    pub trigger: Trigger,
    /// `todo:ID` and `mail:NAME` for every reason it woke.
    pub reasons: Vec<String>,
    pub claims: Vec<Claim>,
    pub due_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// The session whose conversation this one continues.
    pub resumed_from: Option<u64>,
}

/// A pure change to `todo.json`; the shell applies it with
/// [`TodoOp::apply`] inside its locked read-modify-write, which may re-apply
/// it to a version someone else wrote meanwhile.
#[derive(Debug, Clone)]
pub enum TodoOp {
    /// Claim what is due among `ids` for the session of `wake`.
    Claim {
        wake: String,
        ids: Vec<u64>,
        now: DateTime<Utc>,
        tz: Tz,
    },
    /// Settle what `wake` still holds of `claims`, first making again any
    /// of them that never reached the file (see [`TodoList::reclaim`]: the
    /// claim is written after the agent starts, its ledger row being its
    /// durable record).
    Settle {
        wake: String,
        claims: Vec<Claim>,
        how: Settle,
        now: DateTime<Utc>,
        tz: Tz,
    },
    /// Re-queue the claims each wake (a session that is over) still holds
    /// (see `Chamber::release_orphans`): one write for them all.
    Release {
        orphans: Vec<(String, Vec<Claim>)>,
        now: DateTime<Utc>,
    },
    Add {
        new: NewTodo,
        now: DateTime<Utc>,
        tz: Tz,
        /// Made by the agent inside its session: the shell may keep it in
        /// the journal (an append) until the session's settlement rewrites
        /// `todo.json` ([`TodoOp::journaled`]).
        by_agent: bool,
    },
    Done(u64),
    Remove(u64),
    /// `skip` series whose slot passed long ago move on without a run.
    Skip {
        now: DateTime<Utc>,
        tz: Tz,
    },
    /// The zone changed: cron series move to the new wall clock.
    Rezone {
        now: DateTime<Utc>,
        tz: Tz,
    },
    /// Pre-checks said there is nothing to do: the due slots of `ids` pass
    /// without a run (see [`TodoList::pass`]).
    Pass {
        ids: Vec<u64>,
        now: DateTime<Utc>,
        tz: Tz,
    },
}

impl TodoOp {
    /// Whether its write must reach the disk before it counts: a claim's
    /// need not (its wake's ledger row is its durable record, and a claim
    /// the file lost is made again by the settlement), so the wake path
    /// pays for one fsync of the new file and none of its folder.
    pub fn durable(&self) -> bool {
        !matches!(self, TodoOp::Claim { .. })
    }

    /// Whether its write may be an append to the journal beside
    /// `todo.json` rather than a rewrite: an agent's add, which its
    /// session's end (a settlement, always a rewrite) folds into the file.
    /// An operator's add is a rewrite, so `todo.json` shows it at once.
    pub fn journaled(&self) -> bool {
        matches!(self, TodoOp::Add { by_agent: true, .. })
    }

    pub fn apply(&self, list: &mut TodoList) -> Result<TodoDone, TodoError> {
        Ok(match self {
            TodoOp::Claim { wake, ids, now, tz } => TodoDone::Claimed(list.claim_for(wake, ids, *now, *tz, SKIP_GRACE)),
            TodoOp::Settle { wake, claims, how, now, tz } => {
                list.reclaim(wake, claims, *now, *tz, SKIP_GRACE);
                let (retries, exhausted) = list.settle(wake, claims, *how);
                TodoDone::Settled { retries, exhausted }
            }
            TodoOp::Release { orphans, now } => {
                let mut retries = Vec::new();
                for (wake, claims) in orphans {
                    retries.extend(list.settle(wake, claims, Settle::Requeue { now: *now }).0);
                }
                TodoDone::Settled { retries, exhausted: Vec::new() }
            }
            TodoOp::Add { new, now, tz, .. } => {
                let id = list.add(new.clone(), *now, *tz)?;
                TodoDone::Added(list.get(id).cloned().expect("just added"))
            }
            TodoOp::Done(id) => {
                list.done(*id)?;
                TodoDone::Changed
            }
            TodoOp::Remove(id) => {
                list.remove(*id)?;
                TodoDone::Changed
            }
            TodoOp::Skip { now, tz } => TodoDone::Skipped(list.skip_missed(*now, *tz, SKIP_GRACE)),
            TodoOp::Rezone { now, tz } => TodoDone::Moved(list.rezone(*now, *tz)),
            TodoOp::Pass { ids, now, tz } => TodoDone::Passed(list.pass(ids, *now, *tz, SKIP_GRACE)),
        })
    }
}

/// What a [`TodoOp`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum TodoDone {
    Claimed(Vec<Claim>),
    Settled {
        retries: Vec<u64>,
        exhausted: Vec<Claim>,
    },
    Added(Todo),
    Changed,
    /// Series moved to a new slot (re-zoned): how many.
    Moved(usize),
    /// `skip` series whose slots passed long ago moved on (`due`: the
    /// first slot each passed by, `slots`: how many).
    Skipped(Vec<Claim>),
    /// Slots passed by without a run.
    Passed(Vec<Claim>),
}

/// Why a `todo.json` update did not happen.
#[derive(Debug, Clone, PartialEq)]
pub enum TodoWriteError {
    /// The file (or the id state) cannot be read: the chamber is faulted.
    Fault(String),
    /// The change itself was refused.
    Refused(TodoError),
    /// Writing failed (disk full, read-only): the old file is intact.
    Write(String),
}

/// Who made a TODO call (for `cryo.log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    Agent,
    Operator,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Agent => "agent",
            By::Operator => "operator",
        }
    }
}

/// Continuations of a `todo.json` update.
#[derive(Debug, Clone)]
pub enum AfterTodos {
    /// A wake's claim: spawn next.
    Claimed,
    /// A session's settlement: report and close it next.
    Settled,
    /// A session a killed cryod left open, settled at start-up.
    Recovered(Recovered),
    /// A TODO call by the agent or an operator.
    Call {
        req: ReqId,
        by: By,
        what: TodoWhat,
    },
    Rezoned,
    /// Missed `skip` slots moved on, alone or beside a wake.
    Skipped,
    /// Claims of a session that is over, re-queued at start-up (see
    /// `Chamber::release_orphans`): the TODOs as a line names them, and
    /// how many.
    Released {
        shown: String,
        count: usize,
    },
    /// Slots pre-checks passed by, with each check's first line.
    Passed {
        skipped: std::collections::BTreeMap<u64, String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TodoWhat {
    Add,
    Done(u64),
    Remove(u64),
}

/// What recovery knows of an interrupted session while its TODOs settle.
#[derive(Debug, Clone)]
pub struct Recovered {
    pub number: u64,
    pub unanswered: Vec<String>,
    pub sent_any: bool,
    pub note: String,
}

/// Continuations of a message written by the machine.
#[derive(Debug, Clone)]
pub enum AfterWrite {
    /// The agent's `send`.
    Sent { req: ReqId, reply: bool, question: bool, subject: String, body: String },
    /// An operator's message.
    Delivered { req: ReqId },
    /// The message of an operator's wake.
    WakeMessage { req: ReqId },
    /// The message of a `wake --replace`, after the old session ended.
    Replaced { req: ReqId },
    /// A fallback from cryochamber.
    Fallback { subject: String },
}

/// Continuations of the registry's desired state.
#[derive(Debug, Clone, Copy)]
pub enum AfterStore {
    Started { req: ReqId, wait: bool },
    Stopped { req: ReqId, wait: bool, was_started: bool },
    Paused { req: ReqId, pause: bool },
    Archived { req: ReqId, archive: bool },
}

/// Continuations of claiming the inbox.
#[derive(Debug, Clone, Copy)]
pub enum AfterClaim {
    Receive(ReqId),
    Dialog { req: ReqId, last: u32, all: bool },
}
