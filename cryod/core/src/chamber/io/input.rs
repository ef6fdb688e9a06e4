//! What goes into a chamber's machine: [`Input`], every reason it changes,
//! and what inputs carry (the settings, an agent's calls, what start-up
//! found).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

// Named in the docs only.
#[cfg(doc)]
use super::Effect;
use super::effect::{AfterClaim, AfterStore, AfterTodos, AfterWrite, Check, Timer, TodoDone, TodoWriteError};
use super::reply::{Failed, ReqId};
use crate::chamber::handoff;
use crate::session::Outcome;
use crate::todo::{Claim, TodoList};

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
    /// snoozed, until `until` ([`Acknowledged`](crate::chamber::Acknowledged)).
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
        result: Result<handoff::HandedOff, Failed>,
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
    pub on_end: Vec<handoff::OnEnd>,
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

/// What start-up found in the ledger and the folders.
#[derive(Debug, Clone, Default)]
pub struct Boot {
    pub open: Vec<OpenSession>,
    pub batches: Vec<OpenBatch>,
    pub outgoing: Vec<Outgoing>,
    /// A frozen machine booted again (see [`crate::chamber::Chamber::may_sleep`]): cryod
    /// ran all along, so only the time before it started was "down".
    pub thawed: Option<Thawed>,
    /// The ledger's open sessions could not be read: which claims are
    /// still held is not known, so none is taken for a session's that is over.
    pub open_unknown: bool,
}

/// What the daemon knows of the time a frozen chamber had no machine.
#[derive(Debug, Clone, Default)]
pub struct Thawed {
    /// When cryod started.
    pub up_since: DateTime<Utc>,
    /// When the computer slept since then (an end of `None`: it is asleep).
    pub slept: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)>,
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
