//! What outlives cryod in the simulated world: each chamber's files and
//! registry row ([`Disk`]), the wake ledger and the claim journal
//! ([`Ledger`]), and the process table ([`Proc`]: agents run on when cryod
//! dies). A restart recovers from these alone; the invariants ([`super::check`])
//! read them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::agent::Agent;
use crate::chamber::handoff::When;
use crate::chamber::{Call, LogLine, ReqId};
use crate::message::Message;
use crate::todo::{Claim, TodoList};

/// One chamber's durable state: its files and its registry row.
#[derive(Debug, Clone)]
pub struct Disk {
    pub name: String,
    pub tz: Tz,
    pub max_attempts: u32,
    pub started: bool,
    pub paused: bool,
    pub archived: bool,
    pub todos: TodoList,
    pub inbox: BTreeMap<String, Message>,
    pub archive: BTreeMap<String, Message>,
    pub outbox: BTreeMap<String, Message>,
    pub log: Vec<LogLine>,
    /// Read from the machine at the end.
    pub completed: bool,
    pub faulted: bool,
    /// `session = "resume"`.
    pub resume: bool,
    /// It has a `precheck`.
    pub precheck: bool,
    /// It has `[git]`: each session works in a worktree made ready first.
    pub git: bool,
    /// The session whose worktree is made ready and not yet settled (its
    /// mark survives a crash of cryod; the next preparation settles it).
    pub worktree: Option<u64>,
    /// Its provider account (of [`ACCOUNTS`]), and the fallback its wakes
    /// go to while that one is held, if it has one.
    pub account: usize,
    pub fallback: Option<usize>,
    /// Its `[[on_end]]` table: the chamber it hands on to, when, and the
    /// link's rate.
    pub on_end: Option<(usize, When, u32)>,
    /// Its `[budget] daily_sessions`.
    pub daily_sessions: Option<u32>,
    /// It has `[approvals]` (`world::approvals::policy`).
    pub approvals: bool,
    /// Its health as the store keeps it (`Effect::SaveHealth`).
    pub health: Option<crate::chamber::HealthRecord>,
}

/// One wake in the ledger.
#[derive(Debug, Clone)]
pub struct Row {
    pub chamber: usize,
    pub number: u64,
    pub wake_id: String,
    pub claims: Vec<Claim>,
    pub ended: bool,
    pub outcome: String,
    /// The session whose conversation it continued.
    pub resumed_from: Option<u64>,
    /// When the wake was recorded (and so decided to continue it or not).
    pub recorded_at: DateTime<Utc>,
    /// When it ended, whether its outcome lets its conversation be resumed,
    /// and the conversation it left (as cryod records it).
    pub ended_at: Option<DateTime<Utc>>,
    pub resumable: bool,
    pub thread: Option<crate::session::Thread>,
}

/// A journaled inbox batch.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: i64,
    pub chamber: usize,
    pub session: u64,
    pub files: Vec<String>,
    pub answered: bool,
    pub dropped: bool,
}

/// The wake ledger and the claim journal (SQLite in cryod).
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    pub rows: Vec<Row>,
    pub batches: Vec<Batch>,
}

/// An agent process: it outlives the daemon that spawned it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub chamber: usize,
    pub session: u64,
    pub wake_id: String,
    pub token: String,
    /// The daemon incarnation that spawned it (and waits for its exit).
    pub inc: u32,
    pub alive: bool,
    pub agent: Agent,
    pub waiting: Option<(ReqId, Call)>,
    /// The approval request its CLI waits for in place.
    pub asking: Option<String>,
    /// The provider conversation it speaks in.
    pub conversation: String,
}

/// The provider accounts the simulated chambers share.
pub const ACCOUNTS: usize = 3;

pub fn account_name(k: usize) -> String {
    format!("acct{k}")
}
