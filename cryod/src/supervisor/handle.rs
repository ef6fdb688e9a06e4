//! What the rest of cryod holds of a chamber's supervisor: its [`Handle`],
//! the [`Event`]s it takes (each with its reply's sender), and what comes
//! back (an agent's reply, a delivered message, the published
//! [`Snapshot`]).

use chrono::{DateTime, Utc};
use cryo_core::chamber::{Failed, Timer, View};
use tokio::sync::oneshot;

use super::approve::{Answer, Ask};
use super::queue;
use super::{AgentCall, TodoCall, WakeOutcome};
use crate::chamber::mailbox::Stored;
use crate::error::Result;
use crate::services::admission::Permit;
use crate::services::watch::Change;

/// Everything a supervisor reacts to. Kept small (large payloads boxed):
/// every chamber's channel holds a block of 32 of them from its start.
pub enum Event {
    /// Start; with `wait`, the reply comes once a first session's agent has
    /// started (or failed to).
    Start {
        wait: bool,
        reply: oneshot::Sender<Result<bool>>,
    },
    /// Stop; with `wait`, the reply comes once the session has ended.
    Stop {
        wait: bool,
        reply: oneshot::Sender<Result<(bool, bool)>>,
    },
    Remove(oneshot::Sender<()>),
    /// Pause (true) or resume (false); replies whether nothing changed.
    Pause(bool, oneshot::Sender<Result<bool>>),
    /// Set what needs a person aside, until it changes or a time.
    Acknowledge(Option<chrono::DateTime<chrono::Utc>>, oneshot::Sender<Result<bool>>),
    /// Archive (true) or unarchive (false); replies whether nothing changed.
    Archive(bool, oneshot::Sender<Result<bool>>),
    /// Move the runtime files into `history/`; replies with that folder.
    Reset(oneshot::Sender<Result<String>>),
    /// The operator accepts `cryo.toml` as it is (or, with `digests`, as
    /// it is about to be written); replies with the keys that changed since
    /// last accepted, their values before and after. With `diff`, only
    /// replies: nothing is accepted.
    Trust {
        edit: Option<Edit>,
        diff: bool,
        reply: oneshot::Sender<Result<Vec<crate::chamber::trust::Change>>>,
    },
    /// An operator's wake, with an optional message for the inbox.
    Wake {
        message: Option<String>,
        replace: bool,
        reply: oneshot::Sender<Result<WakeOutcome>>,
    },
    /// An operator's message for the inbox: from, subject, text, and
    /// front matter beyond them.
    Deliver {
        message: Box<(String, String, String, std::collections::BTreeMap<String, String>)>,
        reply: oneshot::Sender<Result<Delivered>>,
    },
    /// An operator's TODO change.
    Todo {
        call: Box<TodoCall>,
        reply: oneshot::Sender<Result<AgentReply>>,
    },
    /// An operator replaces `plan.md`.
    WritePlan {
        text: String,
        reply: oneshot::Sender<Result<()>>,
    },
    /// The daemon is shutting down.
    Shutdown(oneshot::Sender<()>),
    /// The scheduler says a TODO (or held mail) is due at this instant
    /// (told a head start ahead of it).
    Due(DateTime<Utc>),
    /// The file watcher saw a change.
    Watched(Change),
    /// Mail may have been written where the watcher cannot see it (by
    /// another node of the fleet): read the inbox again.
    Rescan,
    /// The system's time zone changed.
    ZoneChanged,
    Admitted(Permit),
    Agent {
        session: u64,
        call: Box<AgentCall>,
        reply: oneshot::Sender<Result<AgentReply>>,
    },
    Exited {
        session: u64,
        status: std::process::ExitStatus,
        /// What the agent's stream said it used (known kinds).
        usage: Option<Box<cryo_session::Usage>>,
        /// Its stream ended on the provider's limit.
        limited: Option<Box<cryo_session::Limited>>,
    },
    Timer(Timer),
    /// A wake's pre-checks answered.
    Prechecked {
        nonce: String,
        results: Vec<(cryo_core::chamber::Check, cryo_core::chamber::Checked)>,
    },
    /// A `[git]` wake's worktree is ready (or why not), and what a session
    /// left open before it did, settled first.
    Prepared {
        wake_id: String,
        result: std::result::Result<cryo_core::chamber::Workplace, cryo_core::chamber::Failed>,
        settled_before: Option<crate::services::git::Settled>,
    },
    /// A session's work kept (and published), or the line saying why not.
    GitSettled(std::result::Result<crate::services::git::Settled, String>),
    /// The running session cost more than `max_session_usd`.
    OverBudget {
        session: u64,
    },
    /// The running agent's CLI asks whether a tool call may run.
    Approve {
        session: u64,
        ask: Box<Ask>,
        reply: oneshot::Sender<Result<Answer>>,
    },
    /// A session's ask waited past `approval_wait`: it parks.
    Parked {
        session: u64,
        id: String,
        what: String,
    },
    /// A person decided one of this chamber's approval requests.
    Answered(Box<crate::store::ApprovalRecord>),
    /// A message from cryochamber to the operator.
    Notice {
        subject: String,
        body: String,
    },
    /// Something in the chamber's files a person must mend (see
    /// `Input::Trouble`).
    Trouble(String),
    /// The running session's watch saw it stall or loop.
    Caught {
        session: u64,
        caught: cryo_core::session::Caught,
    },
    /// The running agent's stream says the provider's limit was reached.
    Limit {
        session: u64,
        limited: Box<cryo_session::Limited>,
    },
    /// The machine is about to sleep (true) or has woken up (false).
    Power {
        sleeping: bool,
    },
    /// A sync bridge's status changed.
    BridgesChanged,
    /// A hand-off of this chamber's was delivered (or not).
    HandedOff {
        to: String,
        session: u64,
        result: std::result::Result<cryo_core::chamber::handoff::HandedOff, Failed>,
    },
    /// An operator asks the bridges to pull (or push) now; the answer is
    /// each bridge's count or error, and their status after.
    Sync {
        pull: bool,
        reply: oneshot::Sender<SyncOutcome>,
    },
}

/// What a pull or push asked by an operator did: per bridge, a count or an
/// error; then every bridge's status.
pub type SyncOutcome = (Vec<(String, std::result::Result<u64, String>)>, Vec<cryo_sync::Status>);

/// The answer to an agent's call (or an operator's TODO call).
pub enum AgentReply {
    Hibernate(String),
    Sent { file: String, reply: bool },
    Mail(Vec<Stored>),
    Dialog { messages: Vec<Stored>, claimed: u32 },
    Todos { todos: Vec<cryo_core::todo::Todo>, tz: chrono_tz::Tz },
}

/// An operator's message written into the inbox: its file, and when the
/// agent will not read it at once, one line saying when and how to have it
/// read now.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Delivered {
    pub file: String,
    pub waits: Option<String>,
}

/// What a chamber looks like from outside, published after every event:
/// the machine's view plus the sync bridges (none unless `cryo.toml`
/// configures some and the chamber is started).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub view: View,
    pub bridges: Vec<cryo_sync::Status>,
    /// The sandbox its sessions run under (none while `cryo.toml` does
    /// not load, or for another node's chamber).
    pub sandbox: Option<crate::config::Sandbox>,
    /// What the last session did on a `[git]` chamber's branch.
    pub git: Option<std::sync::Arc<crate::services::git::Settled>>,
    /// The provider accounts its wakes may bill: its own, then its
    /// fallbacks (what `chamber status` shows the holds of).
    pub accounts: Vec<String>,
}

/// A cheap handle to a supervisor. `tx.abandon()` drops the chamber at
/// once, without finalizing anything (it is another node's now): its agent
/// is killed. `tx.closed()` returns once the supervisor has ended, either
/// way.
#[derive(Clone)]
pub struct Handle {
    pub tx: queue::Sender<Event>,
    pub snapshot: super::outlets::Shown,
}

/// The digests of a chamber's settings the operator accepted (see
/// [`crate::chamber::trust`]).
pub type Trusted = std::collections::BTreeMap<String, String>;

/// What the operator accepted, held packed (see
/// [`crate::chamber::trust::Packed`]) and read into [`Trusted`] only when a
/// `cryo.toml` is checked against it: a chamber at rest holds one short
/// byte string, not a map of two dozen strings nor their JSON.
#[derive(Debug, Clone)]
pub(super) struct Accepted(crate::chamber::trust::Packed);

impl Accepted {
    pub(super) fn of(digests: &Trusted) -> Accepted {
        Accepted(crate::chamber::trust::Packed::of(digests))
    }

    pub(super) fn digests(&self) -> Trusted {
        self.0.digests()
    }
}

/// An operator's edit of `cryo.toml` (the hub's settings), accepted before
/// it is written: the digests of the file as it will be, and the keys the
/// operator changed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Edit {
    pub digests: Trusted,
    pub touched: Vec<String>,
}
