//! What goes into a chamber's machine ([`Input`]) and what comes out
//! ([`Effect`]): two closed sets, so one `match` in the shell lists every
//! thing cryod does for a chamber, and one in the machine every reason it
//! changes.
//!
//! An effect whose outcome the machine needs (a write that may fail, a spawn,
//! a ledger insert) carries a continuation tag (`then`); the shell performs
//! it and feeds the outcome back as the matching result input with the same
//! tag, before anything else happens to the chamber.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::message::Message;
use crate::session::{Outcome, Trigger};
use crate::todo::{Claim, NewTodo, Settle, Todo, TodoError, TodoList};

/// Names a caller waiting for a reply (the shell keeps the channel).
pub type ReqId = u64;

/// What the chamber's rules need of `cryo.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub agent: String,
    pub timezone: Tz,
    /// `timezone` was set in the file (else it follows the system's zone).
    pub timezone_set: bool,
    /// Seconds; 0 = no limit.
    pub max_session_duration: u64,
    pub max_attempts: u32,
    /// The agent has cryo's verbs as MCP tools (the prompt says so).
    pub mcp: bool,
    /// Whether and how far sessions continue one conversation.
    pub continuity: crate::session::Continuity,
    /// `precheck`: the command run before a scheduled wake for a TODO that
    /// names none of its own.
    pub precheck: Option<String>,
    /// `[approvals]`: what a TODO's own pre-check (which the agent may have
    /// written) must be allowed by to run.
    pub approvals: Option<Box<crate::approvals::Policy>>,
    /// How long a pre-check may run before it counts as failed.
    pub precheck_timeout: Duration,
    /// `[[on_end]]`: the chambers a session's end is handed on to.
    pub on_end: Vec<super::handoff::OnEnd>,
    /// `expect_activity_within`: raise `silent` after this long without a
    /// visible message while started.
    pub expect_activity_within: Option<chrono::Duration>,
    /// `[git]`: each session works in a worktree made ready before it
    /// ([`Effect::Prepare`]) and kept after it ([`Effect::Settle`]).
    pub git: bool,
}

/// Where a `[git]` session works, once its worktree is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workplace {
    /// The worktree: the agent's working folder.
    pub dir: std::path::PathBuf,
    /// The prompt's opening: the worktree, the branch, the base, how far
    /// the base moved.
    pub opening: String,
    /// Lines for the session's block in `cryo.log`.
    pub notes: Vec<String>,
}

/// A pre-check to run before a scheduled wake, and the TODOs it gates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub command: String,
    pub todos: Vec<u64>,
}

/// What a pre-check said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// It exited 0: the wake goes ahead, with its output for the prompt.
    Wake { output: String },
    /// It exited [`crate::todo::PRECHECK_SKIP`]: nothing to do; its first
    /// line of output says why.
    Skip { line: String },
    /// Any other exit, a timeout, or it could not run: the wake goes ahead
    /// (a failing check never holds a wake back).
    Failed { why: String },
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

/// Why the shell could not do what an effect asked, or could not read what
/// an input reports (a file that would not parse, a ledger that would not
/// take a row): one line for a person, made by the shell from its own
/// typed error where it crosses into the machine. The machine never
/// decides by its text; it shows it (a fault, an attention line, a refusal)
/// and acts on the failure alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Failed(pub String);

impl Failed {
    /// The line of any error.
    pub fn of(e: impl std::fmt::Display) -> Failed {
        Failed(e.to_string())
    }
}

impl From<String> for Failed {
    fn from(s: String) -> Failed {
        Failed(s)
    }
}

impl From<&str> for Failed {
    fn from(s: &str) -> Failed {
        Failed(s.to_string())
    }
}

/// Why a request was refused; the shell maps each kind to its status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Invalid(String),
    Precondition(String),
    NotFound(String),
    Internal(String),
}

impl Refusal {
    /// The one line that says why.
    pub fn text(&self) -> &str {
        match self {
            Refusal::Invalid(s) | Refusal::Precondition(s) | Refusal::NotFound(s) | Refusal::Internal(s) => s,
        }
    }
}

/// A call from `cryo-agent`.
#[derive(Debug, Clone)]
pub enum Call {
    Hibernate { summary: String, complete: bool, exit_code: i32, linger_secs: u32 },
    Send { text: String, question: bool, subject: String },
    Receive,
    Dialog { last: u32, all: bool },
    Todo(TodoCall),
}

/// A change to (or a look at) the TODO list, by the agent or an operator.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum TodoCall {
    Add { text: String, at: String, every: String, cron: String, missed: String, precheck: String },
    List,
    Done(u64),
    Remove(u64),
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

/// What an operator's wake did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WakeOutcome {
    pub replaced: bool,
    pub queued: bool,
    pub message_file: Option<String>,
}

/// A successful answer to a caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `start`: whether it was started already.
    Started(bool),
    /// `stop`: it was stopped already; a session was ended.
    Stopped {
        already: bool,
        ended: bool,
    },
    /// `pause`/`resume`: nothing changed.
    Paused(bool),
    /// `archive`/`unarchive`: nothing changed.
    Archived(bool),
    /// `reset`: where the runtime files went (`history/TIMESTAMP`).
    Reset(String),
    /// `acknowledge`: set aside until it changes or the snooze ends.
    Acknowledged,
    Woke(WakeOutcome),
    /// An operator's message, as `messages/inbox/NAME`, and, when the
    /// agent will not read it at once, one line saying when and how to wake
    /// it now ([`super::Chamber::mail_waits`]).
    Delivered {
        file: String,
        waits: Option<String>,
    },
    Hibernate(String),
    Sent {
        file: String,
        reply: bool,
    },
    /// `receive`: the names the batch has in `inbox/archive/` (the shell
    /// answers with the messages themselves).
    Mail(Vec<String>),
    /// `dialog`: the shell answers with the conversation's last `last` (or
    /// `all`) messages.
    Dialog {
        claimed: u32,
        last: u32,
        all: bool,
    },
    Todos {
        todos: Vec<Todo>,
        tz: Tz,
    },
    Done,
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
            TodoOp::Claim { wake, ids, now, tz } => {
                TodoDone::Claimed(list.claim_for(wake, ids, *now, *tz, super::SKIP_GRACE))
            }
            TodoOp::Settle { wake, claims, how, now, tz } => {
                list.reclaim(wake, claims, *now, *tz, super::SKIP_GRACE);
                let (retries, exhausted) = list.settle(wake, claims, *how);
                TodoDone::Settled { retries, exhausted }
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
            TodoOp::Skip { now, tz } => TodoDone::Skipped(list.skip_missed(*now, *tz, super::SKIP_GRACE)),
            TodoOp::Rezone { now, tz } => TodoDone::Moved(list.rezone(*now, *tz)),
            TodoOp::Pass { ids, now, tz } => TodoDone::Passed(list.pass(ids, *now, *tz, super::SKIP_GRACE)),
        })
    }
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
    /// Missed `skip` slots moved on; nothing else was due.
    Skipped,
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

/// A session that was open in the ledger when cryod started.
#[derive(Debug, Clone)]
pub struct OpenSession {
    pub number: u64,
    pub wake_id: String,
    pub claims: Vec<Claim>,
    /// Process groups of its agent that start-up found and ended.
    pub groups_ended: usize,
}

/// An inbox batch journaled as claimed and not yet answered.
#[derive(Debug, Clone)]
pub struct OpenBatch {
    pub id: i64,
    pub session: u64,
    pub files: Vec<String>,
    /// Those of its files that reached `inbox/archive/` (so the agent may
    /// have seen them); the rest are still unread mail.
    pub archived: Vec<String>,
}

/// A message the chamber sent (outbox or its archive), as recovery needs it.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub session: Option<u64>,
    /// Written by the agent (not a fallback of cryochamber).
    pub by_agent: bool,
    pub in_reply_to: Vec<String>,
}

/// Work cut short by cryod's own stop or death (or its node's), not by
/// the agent: it runs again once, at once, without the crash back-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rerun {
    /// The interrupted session.
    pub session: u64,
    /// Messages it had received (in `inbox/archive/`) and not answered;
    /// cryochamber's holding reply told their senders the work runs again.
    pub mail: Vec<String>,
}

impl Rerun {
    /// What the ledger's newest session says at start-up: `outcome` as the
    /// ledger keeps it; `outgoing` (read only for an interrupted session),
    /// what the chamber sent, for the messages cryochamber answered for it.
    pub fn after(session: u64, outcome: Option<&str>, outgoing: impl FnOnce() -> Vec<Outgoing>) -> Option<Rerun> {
        let kind = outcome.and_then(Outcome::kind_of_described)?;
        (kind == "interrupted").then(|| Rerun {
            session,
            mail: outgoing()
                .into_iter()
                .filter(|m| m.session == Some(session) && !m.by_agent)
                .flat_map(|m| m.in_reply_to)
                .collect(),
        })
    }

    /// The notice that opens the rerun's prompt.
    pub fn notice(&self) -> String {
        let mut s = format!(
            "RERUN: session {} was interrupted when cryod stopped (not by anything the agent did); this session \
             runs its work again, once.",
            self.session
        );
        if !self.mail.is_empty() {
            s.push_str(&format!(
                " It had received {} without answering; cryochamber told the sender(s) the work runs again. \
                 Read {} in messages/inbox/archive/ and answer with `cryo-agent send`.",
                if self.mail.len() == 1 { "a message" } else { "messages" },
                self.mail.join(", "),
            ));
        }
        s
    }
}

/// What start-up found in the ledger and the folders.
#[derive(Debug, Clone, Default)]
pub struct Boot {
    pub open: Vec<OpenSession>,
    pub batches: Vec<OpenBatch>,
    pub outgoing: Vec<Outgoing>,
}

/// Everything that happens to a chamber.
#[derive(Debug, Clone)]
pub enum Input {
    /// cryod started: finish what a killed cryod left open, then resume.
    Boot(Boot),

    // ---- operators
    /// `agent_check`: the agent's program was found (else why not);
    /// `log_session`: the last session number `cryo.log` shows.
    Start {
        req: ReqId,
        wait: bool,
        agent_check: Result<(), Failed>,
        log_session: u64,
    },
    Stop {
        req: ReqId,
        wait: bool,
    },
    Remove {
        req: ReqId,
    },
    Pause {
        req: ReqId,
        pause: bool,
    },
    /// Archive (true: hidden from the default list, never started) or
    /// unarchive; only a stopped chamber is archived.
    Archive {
        req: ReqId,
        archive: bool,
    },
    /// Move the runtime files into `history/TIMESTAMP/` (a stopped chamber
    /// only): the chamber begins again from its plan and config.
    Reset {
        req: ReqId,
    },
    /// A person sets what needs them aside (a failure, a fault, an
    /// attention line, mail on a stopped chamber), until it changes or,
    /// snoozed, until `until` ([`super::Acknowledged`]).
    Acknowledge {
        req: ReqId,
        until: Option<DateTime<Utc>>,
    },
    Wake {
        req: ReqId,
        message: Option<String>,
        replace: bool,
    },
    Deliver {
        req: ReqId,
        /// Front matter beyond `from` and `subject` (a webhook's marks).
        meta: std::collections::BTreeMap<String, String>,
        from: String,
        subject: String,
        text: String,
    },
    Todo {
        req: ReqId,
        call: TodoCall,
    },
    WritePlan {
        req: ReqId,
        text: String,
    },
    Shutdown {
        req: ReqId,
    },

    // ---- the world
    /// The scheduler's deadline passed.
    Due,
    /// The inbox holds these unread names now; `arrived`: a watcher saw a
    /// message arrive (else a fresh look the shell took).
    Inbox {
        unread: Vec<String>,
        arrived: bool,
    },
    /// `todo.json` as it now reads.
    TodosChanged(Result<TodoList, Failed>),
    /// `cryo.toml` changed (`warnings` for keys of the seed system).
    ConfigChanged {
        config: Result<Settings, Failed>,
        warnings: Vec<String>,
    },
    /// The system's zone changed; `config` read again under it.
    ZoneChanged {
        zone: Tz,
        config: Result<Settings, Failed>,
        warnings: Vec<String>,
    },
    /// The machine goes to sleep (true) or woke (false).
    Power {
        sleeping: bool,
    },

    // ---- a session
    /// A slot under the concurrency limit; `nonce` makes the wake id unique
    /// and `token` is the session's secret.
    Admitted {
        nonce: String,
        token: String,
        /// Why its session cannot continue the chamber's conversation,
        /// if the shell knows (it runs another agent: a fallback account's).
        fresh: Option<String>,
    },
    Agent {
        session: u64,
        req: ReqId,
        call: Call,
    },
    /// The agent process exited; `log_tail` is the end of `cryo-agent.log`.
    Exited {
        session: u64,
        status: String,
        log_tail: String,
        /// The agent's stream said the provider's limit stopped it, until
        /// then (the shell reads the stream).
        limited: Option<DateTime<Utc>>,
        /// The provider conversation it spoke in, and what it used.
        used: Option<crate::session::Used>,
    },
    /// The agent's stream says the provider's limit was reached and the
    /// agent would only wait: the session ends as limited, until then.
    ProviderLimit {
        session: u64,
        until: DateTime<Utc>,
    },
    /// The running session cost more than `max_session_usd`: it is stopped
    /// as over budget, and its claims wait until `until` (the next period).
    OverBudget {
        session: u64,
        until: DateTime<Utc>,
    },
    /// cryod saw the running session stall or loop: it ends with that
    /// outcome (unless it hibernates first).
    Caught {
        session: u64,
        caught: crate::session::Caught,
    },
    /// The running session asked for a person's approval (request `id`:
    /// `what`) and the wait in the session passed: it ends as awaiting
    /// approval (given a moment to end by itself), and the chamber waits
    /// for the answer. `req` answers nobody (the pause it leaves).
    Parked {
        session: u64,
        req: ReqId,
        id: String,
        what: String,
    },
    /// A person answered approval request `id` (`line`: who, what, when,
    /// for the log and the next session's prompt): a chamber that waits for
    /// it goes on, resuming the conversation. `req` answers nobody.
    Answered {
        req: ReqId,
        id: String,
        line: String,
    },
    /// The shell found, in the chamber's files, something a person must
    /// mend before cryod can do its part there (a link planted where
    /// cryod writes `cryo.log` or moves an unreadable message): `line`
    /// says what and how, and becomes the chamber's attention.
    Trouble {
        line: String,
    },
    /// A message from cryochamber to the operator, also told to the
    /// notifiers as a `limited` event (the shell's news of a provider's
    /// limit: its wakes gone to a fallback account).
    Notice {
        subject: String,
        body: String,
    },
    /// Admission was asked for the wanted wake (see
    /// [`Effect::RequestAdmission`]): what the shell measured then. Each
    /// budget that applies against the ledger (none: none applies, or the
    /// ledger could not be read), and when the hold on the chamber's
    /// provider account ends, if admission holds it at its limit. `req`
    /// answers nobody (a pause the budgets make).
    AdmissionAsked {
        req: ReqId,
        budgets: Vec<crate::limits::BudgetUse>,
        held: Option<crate::limits::AccountHold>,
    },
    /// The running session asked a person about one of its tool calls
    /// (request `id`), and waits in place for the answer: the chamber shows
    /// `awaiting approval` until it comes ([`Input::ApprovalTaken`]) or the
    /// wait passes ([`Input::Parked`]).
    ApprovalAsked {
        session: u64,
        id: String,
    },
    /// The session that waited in place for request `id` got its answer.
    ApprovalTaken {
        session: u64,
        id: String,
    },
    /// A session's end was recorded: each budget that applies, measured
    /// again. `req` answers nobody.
    Budget {
        req: ReqId,
        uses: Vec<crate::limits::BudgetUse>,
    },
    Timer(Timer),
    /// A hand-off was delivered to `to` (or could not be).
    HandedOff {
        to: String,
        session: u64,
        result: Result<super::handoff::HandedOff, Failed>,
    },
    /// The pre-checks of the wake `nonce` answered (one per check, in order).
    Prechecked {
        nonce: String,
        results: Vec<(Check, Checked)>,
    },
    /// The worktree of the wake `wake_id` is ready, or the one line saying
    /// why its session cannot start.
    Prepared {
        wake_id: String,
        result: Result<Workplace, Failed>,
    },

    // ---- results of effects
    Recorded(Result<(), Failed>),
    TodosUpdated {
        then: AfterTodos,
        result: Result<(TodoDone, TodoList), TodoWriteError>,
    },
    /// The agent started (its pid), or why not; `notes` are the shell's
    /// lines for the session's block in `cryo.log` (a limit not applied,
    /// a provider reached without the gateway).
    Spawned {
        result: Result<u32, Failed>,
        notes: Vec<String>,
    },
    MessageWritten {
        then: AfterWrite,
        result: Result<String, Failed>,
    },
    StoreWritten {
        then: AfterStore,
        result: Result<(), Failed>,
    },
    Journaled {
        then: AfterClaim,
        names: Vec<String>,
        result: Result<(), Failed>,
    },
    /// The names the batch got in `inbox/archive/`.
    Archived {
        then: AfterClaim,
        result: Result<Vec<String>, Failed>,
    },
    PlanWritten {
        req: ReqId,
        result: Result<(), Failed>,
    },
    /// The runtime files were moved into this folder (relative to the
    /// chamber), or why not.
    ResetDone {
        req: ReqId,
        result: Result<String, Failed>,
    },
}

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
    Notify(super::notice::Notice),
    /// Deliver a session's end into another chamber's inbox, from this one
    /// (`[[on_end]]`). → [`Input::HandedOff`]
    HandOff(super::handoff::HandOff),
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
    /// ([`super::Chamber::health_record`]): a save never writes an older one
    /// over a newer.
    SaveHealth,
    /// Publish the chamber's view now (a caller reads it next).
    Publish,
    Reply {
        req: ReqId,
        result: Result<Reply, Refusal>,
    },
}
