//! How the chamber is doing: the last session's result, the failure its
//! next prompt mentions, what needs the operator (attention), a completed
//! plan, the back-off after failed sessions (mail waits), a failed write
//! and its retry, the last start's lateness, and the questions the agent
//! asked with no message to it since. Status views show it; the rules of
//! the back-offs live here.

use chrono::{DateTime, Duration, Utc};

use super::{View, WRITE_RETRY};
use crate::hibernate::Ending;
use crate::session::{self, Outcome};
use crate::todo;

/// The chamber's health; see the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct Health {
    /// The last session's end (or why none started), as the view shows it.
    last_result: Option<String>,
    /// How the last session failed, for the next one's prompt.
    previous_failure: Option<String>,
    /// What needs the operator, until they look (start, resume) or a session
    /// hibernates well.
    attention: Option<String>,
    /// Something in the chamber's files a person must mend (a link where
    /// cryod writes): shown while no other attention is, until they look.
    /// A session's good end does not clear it: the file is as it was.
    trouble: Option<String>,
    /// The plan was completed: no scheduled wakes until mail arrives.
    completed: bool,
    /// Sessions that failed in a row. After a failure, mail waits before it
    /// wakes the agent again (2^k minutes, at most a day), so an agent that
    /// crashes on every message does not loop.
    failures: u32,
    /// Mail wakes no agent before this (a failure's back-off, a provider's
    /// limit).
    mail_hold_until: Option<DateTime<Utc>>,
    /// A wake failed to write its record or claim: no wake before this.
    write_retry_at: Option<DateTime<Utc>>,
    /// A failed session left nothing to retry its work (no claim of its
    /// became a retry TODO): the chamber wakes again then, after the
    /// back-off, so that it is never left silently idle.
    rework_at: Option<DateTime<Utc>>,
    /// The last write into the chamber that failed, until one succeeds.
    write_error: Option<String>,
    /// How late the last session's agent started after its due time.
    last_lateness_ms: Option<i64>,
    /// Questions the agent asked with no message to it since.
    open_questions: u32,
    /// An approval the chamber waits for, or its answer (boxed: rare).
    approval: Option<Box<Approval>>,
    /// A person set what needs them aside, until it changes or a time
    /// (boxed: rare).
    acknowledged: Option<Box<Acknowledged>>,
}

/// A person has seen what needs them on a chamber (a failure, a fault, an
/// attention line, mail waiting on it while stopped) and set it aside: it
/// leaves the queue of what needs them until it changes (a new failure or
/// line, a fault, new mail) or, snoozed, until `until`. The chamber still
/// shows it; nothing about the chamber's own work changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Acknowledged {
    /// When it was set aside.
    pub at: DateTime<Utc>,
    /// Snoozed: it comes back then (none: when it changes).
    pub until: Option<DateTime<Utc>>,
}

/// What of a chamber's health must survive a restart of cryod or a fleet
/// hand-over: what a person must do (the attention, a file to mend), the
/// failures in a row and their back-off, the failed work's next try, and a
/// completed plan. Kept in the store (`Effect::SaveHealth`) whenever it
/// changes, read back at the start, so that a chamber looks and acts the
/// same after the restart as before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HealthRecord {
    pub attention: Option<String>,
    pub trouble: Option<String>,
    pub failures: u32,
    pub previous_failure: Option<String>,
    pub mail_hold_until: Option<DateTime<Utc>>,
    pub rework_at: Option<DateTime<Utc>>,
    pub completed: bool,
    pub acknowledged: Option<Acknowledged>,
    /// The last hand-off delivered (to, session, when) and the last loop
    /// one closed: what the chamber's hand-off line shows.
    pub handoff_last: Option<(String, u64, DateTime<Utc>)>,
    pub handoff_loop: Option<Vec<String>>,
}

/// What the chamber holds of an approval request.
#[derive(Debug, Clone, Default)]
struct Approval {
    /// The request the chamber waits for (paused until answered).
    awaiting: Option<String>,
    /// A person's answer, for the next session's prompt (which resumes the
    /// conversation that asked).
    answer: Option<String>,
}

impl Health {
    /// What the ledger remembers: the last result, its lateness, open
    /// questions; the rest starts afresh with each cryod.
    pub(super) fn new(last_result: Option<String>, last_lateness_ms: Option<i64>, open_questions: u32) -> Health {
        Health { last_result, last_lateness_ms, open_questions, ..Health::default() }
    }

    /// Its durable part, as the store keeps it.
    pub(super) fn record(&self) -> HealthRecord {
        HealthRecord {
            attention: self.attention.clone(),
            trouble: self.trouble.clone(),
            failures: self.failures,
            previous_failure: self.previous_failure.clone(),
            mail_hold_until: self.mail_hold_until,
            rework_at: self.rework_at,
            completed: self.completed,
            acknowledged: self.acknowledged.as_deref().copied(),
            handoff_last: None,
            handoff_loop: None,
        }
    }

    /// Its durable part, as the store kept it.
    pub(super) fn restore(&mut self, r: HealthRecord) {
        self.attention = r.attention;
        self.trouble = r.trouble;
        self.failures = r.failures;
        self.previous_failure = r.previous_failure;
        self.mail_hold_until = r.mail_hold_until;
        self.rework_at = r.rework_at;
        self.completed = r.completed;
        self.acknowledged = r.acknowledged.map(Box::new);
    }

    /// What the status view shows of it.
    pub(super) fn show(&self, view: &mut View) {
        view.last_result = self.last_result.clone();
        view.attention = self.attention.clone().or_else(|| self.trouble.clone());
        view.last_lateness_ms = self.last_lateness_ms;
        view.error = self.write_error.clone();
        view.open_questions = self.open_questions;
    }

    /// The last session's end, or why none started.
    pub(super) fn result(&mut self, result: String) {
        self.last_result = Some(result);
    }

    pub(super) fn previous_failure(&self) -> Option<&str> {
        self.previous_failure.as_deref()
    }

    // ---- attention ---------------------------------------------------------

    pub(super) fn attention(&self) -> Option<&str> {
        self.attention.as_deref()
    }

    /// Something needs the operator (the newest word wins).
    pub(super) fn needs(&mut self, what: String) {
        self.attention = Some(what);
    }

    /// Something needs the operator, unless something already does.
    pub(super) fn needs_unless_told(&mut self, what: String) {
        self.attention.get_or_insert(what);
    }

    /// The operator has looked (a start, a resume): what needed them is
    /// seen. Returns whether anything did.
    pub(super) fn seen(&mut self) -> bool {
        let trouble = self.trouble.take().is_some();
        self.attention.take().is_some() || trouble
    }

    /// Something in the chamber's files a person must mend; whether it is
    /// new (not the one already shown).
    pub(super) fn trouble(&mut self, line: String) -> bool {
        if self.trouble.as_deref() == Some(line.as_str()) {
            return false;
        }
        self.trouble = Some(line);
        true
    }

    // ---- set aside ------------------------------------------------------------

    /// A person set what needs them aside (see [`Acknowledged`]).
    pub(super) fn acknowledge(&mut self, a: Acknowledged) {
        self.acknowledged = Some(Box::new(a));
    }

    /// What needs a person changed, or a snooze ended: it is theirs again.
    pub(super) fn unacknowledge(&mut self) {
        self.acknowledged = None;
    }

    /// The set-aside standing at `now` (a snooze that ended is none).
    pub(super) fn acknowledged(&self, now: DateTime<Utc>) -> Option<Acknowledged> {
        self.acknowledged.as_deref().copied().filter(|a| a.until.is_none_or(|u| u > now))
    }

    /// Whether anything is set aside (ended or not).
    pub(super) fn any_acknowledged(&self) -> bool {
        self.acknowledged.is_some()
    }

    /// The last session failed: its result is what needs a person.
    pub(super) fn last_failed(&self) -> bool {
        self.previous_failure.is_some()
    }

    /// What needs a person, as text, for telling a change.
    pub(super) fn need(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
        (self.attention.as_deref(), self.trouble.as_deref(), self.last_result.as_deref())
    }

    // ---- the plan and the session's end ------------------------------------

    /// The plan was completed: no scheduled wakes until mail arrives.
    pub(super) fn completed(&self) -> bool {
        self.completed
    }

    /// Mail, or an operator's wake: a completed plan has work again.
    pub(super) fn more_to_do(&mut self) {
        self.completed = false;
    }

    /// A session was settled: its result, and whether it completed the plan.
    pub(super) fn settled(&mut self, outcome: &Outcome, result: String) {
        self.completed = *outcome == Outcome::Hibernated(Ending::Complete);
        self.last_result = Some(result);
    }

    /// A session ended so: a failure is counted and holds mail back
    /// (returned: for how long), a provider's limit holds it until the
    /// reset, an interruption (cryod's stop) is nobody's failure, and a
    /// good end clears the count (and, if it hibernated, the attention);
    /// each end but an interruption ends a set-aside.
    pub(super) fn ended(&mut self, outcome: &Outcome, now: DateTime<Utc>) -> Option<Duration> {
        self.previous_failure = outcome.failed().then(|| outcome.describe());
        // A session's end is news, whatever it says (the same failure
        // again included): what was set aside is the person's again.
        if *outcome != Outcome::Interrupted {
            self.acknowledged = None;
        }
        match outcome {
            Outcome::Interrupted => self.previous_failure = None,
            o if o.failed() => {
                self.failures = self.failures.saturating_add(1);
                let hold = todo::retry_delay(self.failures);
                self.mail_hold_until = Some(now + hold);
                return Some(hold);
            }
            Outcome::Limited { until, .. } => {
                self.failures = 0;
                self.mail_hold_until = Some(*until);
            }
            _ => {
                self.failures = 0;
                self.mail_hold_until = None;
                if matches!(outcome, Outcome::Hibernated(Ending::Hibernate | Ending::Complete)) {
                    self.attention = None;
                }
            }
        }
        None
    }

    /// Sessions that failed in a row.
    pub(super) fn failures(&self) -> u32 {
        self.failures
    }

    // ---- what holds wakes back -----------------------------------------------

    /// Until when mail waits (past or not).
    pub(super) fn mail_hold_until(&self) -> Option<DateTime<Utc>> {
        self.mail_hold_until
    }

    /// Until when mail waits, if that is still ahead.
    pub(super) fn mail_held(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.mail_hold_until.filter(|h| *h > now)
    }

    /// Why mail waits, and until when, if it does.
    pub(super) fn why_mail_waits(&self, now: DateTime<Utc>) -> Option<(String, DateTime<Utc>)> {
        let hold = self.mail_held(now)?;
        let why = if self.failures > 0 {
            format!("after {} failed session(s) in a row, mail waits", self.failures)
        } else {
            "the provider's limit was reached: mail waits".to_string()
        };
        Some((why, hold))
    }

    /// The chamber starts: mail no longer waits for an earlier back-off.
    pub(super) fn release_mail(&mut self) {
        self.mail_hold_until = None;
    }

    /// When a failed write is tried again, if that is still ahead.
    pub(super) fn retry_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.write_retry_at.filter(|t| *t > now)
    }

    /// Whether mail waits now (a back-off, a limit, a failed write's retry).
    pub(super) fn holds_mail(&self, now: DateTime<Utc>) -> bool {
        self.mail_held(now).is_some() || self.retry_at(now).is_some()
    }

    /// A wake's write failed: no wake before [`WRITE_RETRY`] has passed.
    pub(super) fn hold_wakes(&mut self, now: DateTime<Utc>) {
        self.write_retry_at = Some(now + WRITE_RETRY);
    }

    /// A failed session's work is tried again at `at`.
    pub(super) fn rework(&mut self, at: DateTime<Utc>) {
        self.rework_at = Some(at);
    }

    /// When a failed session's work is tried again, if it is.
    pub(super) fn rework_at(&self) -> Option<DateTime<Utc>> {
        self.rework_at
    }

    /// Whether a failed session's work is due to be tried again.
    pub(super) fn rework_due(&self, now: DateTime<Utc>) -> bool {
        self.rework_at.is_some_and(|t| t <= now)
    }

    /// A session began: it takes the work up, whatever woke it.
    pub(super) fn reworked(&mut self) {
        self.rework_at = None;
    }

    /// A wake was recorded: its writes work again.
    pub(super) fn wake_recorded(&mut self) {
        self.write_retry_at = None;
    }

    /// A write into the chamber succeeded: no error to show, no retry due.
    pub(super) fn wrote(&mut self) {
        self.write_error = None;
        self.write_retry_at = None;
    }

    /// A write into the chamber failed: shown until one succeeds.
    pub(super) fn write_failed(&mut self, why: String) {
        self.write_error = Some(why);
    }

    // ---- the session's start and the agent's questions -----------------------

    /// A session's agent started, so late after its due time (if it had one).
    pub(super) fn started_late(&mut self, due: Option<DateTime<Utc>>, now: DateTime<Utc>) {
        self.last_lateness_ms = due.map(|d| session::lateness_ms(d, now));
    }

    /// The agent asked a question.
    pub(super) fn asked(&mut self) {
        self.open_questions += 1;
    }

    /// A message came for the agent: its questions count as answered.
    pub(super) fn answered(&mut self) {
        self.open_questions = 0;
    }

    // ---- approvals ------------------------------------------------------------

    /// The chamber waits for approval request `id`.
    pub(super) fn awaiting(&mut self, id: String) {
        self.approval.get_or_insert_default().awaiting = Some(id);
    }

    /// Whether all of it that matters is in its record or rebuilt at a
    /// boot: no failed write to show or retry, no approval awaited or
    /// answered for the next session.
    pub(super) fn kept_whole(&self) -> bool {
        self.write_error.is_none() && self.write_retry_at.is_none() && self.approval.is_none()
    }

    /// Whether the chamber waits for a person's answer to a request.
    pub(super) fn awaiting_any(&self) -> bool {
        self.approval.as_ref().is_some_and(|a| a.awaiting.is_some())
    }

    /// Whether the chamber waits for request `id` (it stops waiting).
    pub(super) fn awaits(&mut self, id: &str) -> bool {
        let Some(a) = self.approval.as_mut().filter(|a| a.awaiting.as_deref() == Some(id)) else { return false };
        a.awaiting = None;
        true
    }

    /// A person answered: the next session is told.
    pub(super) fn answer(&mut self, line: String) {
        self.approval.get_or_insert_default().answer = Some(line);
    }

    pub(super) fn answer_pending(&self) -> bool {
        self.approval.as_ref().is_some_and(|a| a.answer.is_some())
    }

    /// Whether the last session ended waiting for a person's approval (its
    /// conversation is the one that asked).
    pub(super) fn last_asked(&self) -> bool {
        self.last_result.as_deref().is_some_and(|r| r.starts_with(crate::approvals::request::AWAITING_APPROVAL))
    }

    /// The answer for the session that begins (once).
    pub(super) fn take_answer(&mut self) -> Option<String> {
        let answer = self.approval.as_mut()?.answer.take();
        if self.approval.as_ref().is_some_and(|a| a.awaiting.is_none()) {
            self.approval = None;
        }
        answer
    }

    /// Reset: the chamber begins again (the last result and lateness stay,
    /// as history).
    pub(super) fn reset(&mut self) {
        *self = Health {
            last_result: self.last_result.take(),
            last_lateness_ms: self.last_lateness_ms,
            ..Health::default()
        };
    }
}
