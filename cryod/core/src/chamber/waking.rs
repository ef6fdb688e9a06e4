//! Waking: the session under way and what waits for one. A wake is asked
//! for (`wanted`: admission queues it), holds its permit while its
//! pre-checks run (`checking`), then lives as the session (`live`) from its
//! record in the ledger to its settlement. Beside them wait what a
//! session's end must answer: an operator's queued wake, a wake that
//! replaces the session, a removal, those waiting for a start to show its
//! agent, and the work a stop of cryod cut short (`rerun`). One session
//! at a time: a wake is wanted only while none is checked or live.

use chrono::{DateTime, Utc};

use super::{ReqId, Rerun};
use crate::hibernate::Ending;
use crate::session::{self, Outcome, Trigger};
use crate::todo::Claim;

/// Why cryod is cutting a session short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    Timeout,
    Stop,
    Shutdown,
    AfterHibernate,
    Replace,
    /// The provider's limit was reached (the agent would only wait).
    Limit,
    /// The session cost more than `max_session_usd`.
    OverBudget,
    /// cryod saw it stall or loop (what it saw is in `Live::caught`).
    Caught,
    /// It waits for a person's approval (the request is in `Live::parked`).
    Approval,
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The wake (with the claims it makes) is being recorded in the ledger.
    Recording,
    /// Its `[git]` worktree is being made ready (a task).
    Preparing,
    /// Its agent is being started.
    Spawning,
    /// Its agent runs (its claims are written to `todo.json` first thing).
    Running,
    /// Its end is being settled.
    Settling,
}

/// The session under way, from its record in the ledger to its
/// settlement (a record the machine's steps fill in as it goes).
#[derive(Debug, Clone)]
pub(super) struct Live {
    pub(super) number: u64,
    pub(super) wake_id: String,
    pub(super) token: String,
    pub(super) trigger: Trigger,
    pub(super) phase: Phase,
    /// What the wake claims, as recorded in the ledger (the durable record;
    /// `todo.json` shows them once the agent runs).
    pub(super) claims: Vec<Claim>,
    pub(super) due: Option<DateTime<Utc>>,
    pub(super) pgid: i32,
    pub(super) started_at: Option<DateTime<Utc>>,
    pub(super) hibernate: Option<(Ending, String)>,
    /// Its last hibernate was refused for mail that arrived during the
    /// session (or its linger was released for it): if it leaves now, that
    /// is no failure.
    pub(super) refused_for_mail: bool,
    /// The unread mail when the session began: a hibernate refused only for
    /// it is the agent's failure to read its mail, not mail that came late.
    pub(super) mail_at_start: Vec<String>,
    /// Why the agent's last hibernate was refused, if it was (and none was
    /// accepted after): an exit after it is the agent's, not a setup's, fault.
    pub(super) refused: Option<String>,
    /// Claimed inbox messages not yet answered by a send.
    pub(super) unanswered: Vec<String>,
    /// It claimed some inbox batch (the journal closes them at its end).
    pub(super) claimed_mail: bool,
    pub(super) sent_any: bool,
    pub(super) linger: Option<ReqId>,
    pub(super) ending: Option<Cut>,
    /// The agent's stream said the provider's limit stopped it, until then.
    pub(super) limited: Option<DateTime<Utc>>,
    /// It went over `max_session_usd`; its claims wait until then.
    pub(super) over_budget: Option<DateTime<Utc>>,
    /// cryod saw it stall or loop, and ends it.
    pub(super) caught: Option<session::Caught>,
    /// It asked for a person's approval and the wait passed: the request's
    /// id and what it asks, and the request that answers nobody the pause
    /// it leaves is made with.
    pub(super) parked: Option<(String, String, ReqId)>,
    /// The requests it waits for in place (a person is asked).
    pub(super) asking: Vec<String>,
    pub(super) stop_waiters: Vec<ReqId>,
    pub(super) shutdown_waiters: Vec<ReqId>,
    /// Set when the session ends, for its settlement.
    pub(super) outcome: Option<Outcome>,
    pub(super) log_tail: String,
    /// The conversation it continues, if it resumed one.
    pub(super) resumed: Option<session::Thread>,
    /// Why it starts a new conversation though the chamber resumes (a cap).
    pub(super) fresh: Option<String>,
    /// What the agent reported of its conversation, at its exit.
    pub(super) used: Option<session::Used>,
    /// Notices for its prompt (a failed check).
    pub(super) notices: Vec<String>,
    /// Its `[git]` worktree, once ready: settled when the session ends.
    pub(super) workplace: Option<super::Workplace>,
    /// Its pre-checks' output (command, output), for its prompt as data.
    pub(super) data: Vec<(String, String)>,
}

/// A wake whose permit is held while its pre-checks run.
#[derive(Debug, Clone)]
pub(super) struct Checking {
    pub(super) nonce: String,
    pub(super) token: String,
    pub(super) trigger: Trigger,
    pub(super) asked_at: DateTime<Utc>,
    pub(super) claims: Vec<Claim>,
    /// Why it starts a new conversation whatever the chamber's continuity.
    pub(super) fresh: Option<String>,
    /// The prompt's notices of TODOs' own pre-checks `[approvals]` refused.
    pub(super) refused: Vec<String>,
}

/// The session under way and what waits for one; see the module
/// documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct Waking {
    /// The newest session's number (from the ledger, then each record).
    last_session: u64,
    /// A wake is queued for admission (its trigger and when it was asked for).
    wanted: Option<(Trigger, DateTime<Utc>)>,
    /// A wake holds its permit while its pre-checks run.
    /// Boxed: a chamber at rest holds none.
    checking: Option<Box<Checking>>,
    /// Boxed: what only a session needs costs a chamber at rest nothing.
    live: Option<Box<Live>>,
    /// An operator asked for a session; it runs when the current one ends.
    manual_queued: bool,
    /// Work cryod's own stop cut short, to run again once, at once.
    rerun: Option<Rerun>,
    /// A `wake --replace` waiting for the old session to end.
    replace_with: Option<(Option<String>, ReqId)>,
    /// Operators waiting for a start to show its first agent.
    start_waiters: Vec<ReqId>,
    /// A `remove` waiting for the running session to end.
    removing: Option<ReqId>,
}

impl Waking {
    /// `last_session` and `rerun` as the ledger has them.
    pub(super) fn new(last_session: u64, rerun: Option<Rerun>) -> Waking {
        Waking { last_session, rerun, ..Waking::default() }
    }

    // ---- sessions ----------------------------------------------------------

    pub(super) fn last_session(&self) -> u64 {
        self.last_session
    }

    /// A session numbered `n` was found (in the log, open at start-up):
    /// the next one is numbered after it.
    pub(super) fn saw_session(&mut self, n: u64) {
        self.last_session = self.last_session.max(n);
    }

    /// The number the status view shows: the live session's, else the last.
    pub(super) fn session(&self) -> u64 {
        self.live.as_ref().map_or(self.last_session, |l| l.number)
    }

    /// No session, no wake wanted or owed, nobody waiting on one.
    pub(super) fn idle(&self) -> bool {
        self.live.is_none()
            && self.checking.is_none()
            && self.wanted.is_none()
            && !self.manual_queued
            && self.rerun.is_none()
            && self.replace_with.is_none()
            && self.start_waiters.is_empty()
            && self.removing.is_none()
    }

    /// A session is under way (from its record to its settlement).
    pub(super) fn in_session(&self) -> bool {
        self.live.is_some()
    }

    /// A wake holds its permit while its pre-checks run.
    pub(super) fn checking(&self) -> bool {
        self.checking.is_some()
    }

    /// A session is under way, or a wake holds its permit for its checks.
    pub(super) fn busy(&self) -> bool {
        self.live.is_some() || self.checking.is_some()
    }

    pub(super) fn live(&self) -> Option<&Live> {
        self.live.as_deref()
    }

    pub(super) fn live_mut(&mut self) -> Option<&mut Live> {
        self.live.as_deref_mut()
    }

    /// Session `number`, if it is the live one and its agent runs.
    pub(super) fn running(&mut self, number: u64) -> Option<&mut Live> {
        self.live_mut().filter(|l| l.number == number && l.phase == Phase::Running)
    }

    /// A wake begins its session (its record is being written).
    pub(super) fn go_live(&mut self, live: Live) {
        self.live = Some(Box::new(live));
    }

    /// Whether the live session waits for its record in the ledger.
    pub(super) fn recording(&self) -> bool {
        self.live.as_ref().is_some_and(|l| l.phase == Phase::Recording)
    }

    /// The live session's record is in the ledger: its number is the last
    /// session's now, and its worktree is made ready (`git`), or its agent
    /// spawned, next.
    pub(super) fn recorded(&mut self, git: bool) {
        if let Some(l) = self.live.as_mut().filter(|l| l.phase == Phase::Recording) {
            self.last_session = l.number;
            l.phase = if git { Phase::Preparing } else { Phase::Spawning };
        }
    }

    /// The live session `number`, while its worktree is made ready.
    pub(super) fn preparing(&mut self, number: u64) -> Option<&mut Live> {
        self.live_mut().filter(|l| l.number == number && l.phase == Phase::Preparing)
    }

    /// The live session is over (settled, or never recorded).
    pub(super) fn end_live(&mut self) -> Option<Box<Live>> {
        self.live.take()
    }

    // ---- wakes asked for ---------------------------------------------------

    /// The wake queued for admission: its trigger, and since when.
    pub(super) fn wanted(&self) -> Option<(Trigger, DateTime<Utc>)> {
        self.wanted
    }

    /// A wake is wanted for `trigger`: returns the trigger to ask admission
    /// for (the strongest wanted; a wake already wanted keeps its time), or
    /// none while a session is checked or live.
    pub(super) fn want(&mut self, trigger: Trigger, now: DateTime<Utc>) -> Option<Trigger> {
        if self.busy() {
            return None;
        }
        Some(match self.wanted {
            Some((t, _)) if t <= trigger => t,
            Some((_, since)) => {
                self.wanted = Some((trigger, since));
                trigger
            }
            None => {
                self.wanted = Some((trigger, now));
                trigger
            }
        })
    }

    /// A permit came: the wake it was for, if one is still wanted.
    pub(super) fn admit(&mut self) -> Option<(Trigger, DateTime<Utc>)> {
        self.wanted.take()
    }

    /// No wake is wanted any more (stopped, paused, a write failed).
    pub(super) fn unwant(&mut self) {
        self.wanted = None;
    }

    /// The admitted wake runs its pre-checks first, holding its permit.
    pub(super) fn check(&mut self, c: Checking) {
        self.checking = Some(Box::new(c));
    }

    /// The pre-checks of `nonce` answered: their wake, if it still waits.
    pub(super) fn checked(&mut self, nonce: &str) -> Option<Checking> {
        self.checking.take_if(|c| c.nonce == nonce).map(|c| *c)
    }

    /// Drops the wake waiting on its pre-checks; returns whether there was
    /// one (its permit goes back).
    pub(super) fn drop_check(&mut self) -> bool {
        self.checking.take().is_some()
    }

    // ---- what waits for a session ------------------------------------------

    /// An operator's wake waits for the running session, if any.
    pub(super) fn manual_queued(&self) -> bool {
        self.manual_queued
    }

    pub(super) fn queue_manual(&mut self) {
        self.manual_queued = true;
    }

    /// A session begins: it answers a queued operator's wake (returned).
    pub(super) fn take_manual(&mut self) -> bool {
        std::mem::take(&mut self.manual_queued)
    }

    /// Work cryod's own stop cut short waits to run again.
    pub(super) fn reruns(&self) -> bool {
        self.rerun.is_some()
    }

    pub(super) fn rerun_later(&mut self, r: Rerun) {
        self.rerun = Some(r);
    }

    /// The rerun owed, if one is.
    pub(super) fn rerun(&self) -> Option<&Rerun> {
        self.rerun.as_ref()
    }

    /// The session that begins is the rerun (once per interruption).
    pub(super) fn take_rerun(&mut self) -> Option<Rerun> {
        self.rerun.take()
    }

    /// A replacing wake is under way.
    pub(super) fn replacing(&self) -> bool {
        self.replace_with.is_some()
    }

    /// `wake --replace` (with its message) once the live session ended.
    pub(super) fn replace(&mut self, message: Option<String>, req: ReqId) {
        self.replace_with = Some((message, req));
    }

    pub(super) fn take_replace(&mut self) -> Option<(Option<String>, ReqId)> {
        self.replace_with.take()
    }

    /// An operator waits for a start to show its first agent.
    pub(super) fn wait_for_start(&mut self, req: ReqId) {
        self.start_waiters.push(req);
    }

    pub(super) fn take_start_waiters(&mut self) -> Vec<ReqId> {
        std::mem::take(&mut self.start_waiters)
    }

    /// A `remove` waits for the live session to end.
    pub(super) fn remove_when_ended(&mut self, req: ReqId) {
        self.removing = Some(req);
    }

    pub(super) fn take_removing(&mut self) -> Option<ReqId> {
        self.removing.take()
    }

    /// Reset: no operator's wake queued, no rerun owed.
    pub(super) fn reset(&mut self) {
        self.manual_queued = false;
        self.rerun = None;
    }
}
