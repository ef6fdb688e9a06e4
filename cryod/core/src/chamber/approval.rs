//! A session that waits for a person's approval: it is parked (ends as
//! `awaiting approval`, its claims re-queued), the chamber pauses until the
//! answer comes, and the next session resumes the conversation with it.

use std::time::Duration as StdDuration;

use super::waking::{Cut, Phase};
use super::{Chamber, ReqId, Timer};
// The line is the request's: `approvals::request` reads it back at boot.
pub use crate::approvals::request::{AWAITING_APPROVAL, awaiting_line};

/// How long a parked session has to end by itself (its CLI keeps the
/// refusal in its conversation, which the next session resumes) before
/// cryod ends it.
pub const PARK_GRACE: StdDuration = StdDuration::from_secs(10);

impl Chamber {
    /// Whether the live session waits in place for approval `id`, and will
    /// go on with the answer: only then may an answer count as taken in
    /// place. Not an ask of a session that has ended (its wait may not have
    /// let go yet), nor of one parked or being ended (it goes, the answer
    /// with it): the chamber hears those answers itself.
    pub fn asks(&self, id: &str) -> bool {
        self.waking.live().is_some_and(|l| {
            l.phase == Phase::Running && l.ending.is_none() && l.parked.is_none() && l.asking.iter().any(|a| a == id)
        })
    }

    /// The running session asks request `id` and waits in place.
    pub(super) fn asked(&mut self, session: u64, id: String) {
        if let Some(l) = self.waking.running(session)
            && !l.asking.contains(&id)
        {
            l.asking.push(id);
        }
    }

    /// The running session took the answer to `id` in place.
    pub(super) fn taken(&mut self, session: u64, id: &str) {
        if let Some(l) = self.waking.running(session) {
            l.asking.retain(|a| a != id);
        }
        // A chamber an operator resumed while it waited for this request
        // waits for it no more: a session took the answer.
        self.health.awaits(id);
    }

    /// The running session's ask was not answered within `approval_wait`.
    pub(super) fn parked(&mut self, session: u64, req: ReqId, id: String, what: String) {
        let Some(l) = self.waking.running(session) else { return };
        if l.parked.is_some() {
            return;
        }
        l.parked = Some((id.clone(), what.clone(), req));
        self.log(format!("approval {id} ({what}) waits for a person: the session ends and the chamber waits"));
        self.arm(Timer::Park(session), PARK_GRACE);
    }

    /// A parked session ends: the chamber waits for the answer (paused,
    /// with its line), kept before the end is written (a crash between
    /// leaves an open session, which recovery finds paused for the
    /// request). False when the answer came already: a session runs next.
    pub(super) fn await_approval(&mut self, id: &str, what: &str, req: ReqId) -> bool {
        if self.health.answer_pending() {
            return false;
        }
        self.health.awaiting(id.to_string());
        self.health.needs(awaiting_line(id, what));
        if self.wishes.started() {
            self.pause(req, true);
        }
        true
    }

    /// A person answered request `id`: the next session's prompt says so and
    /// resumes the conversation; a chamber paused for it goes on.
    pub(super) fn answered(&mut self, req: ReqId, id: &str, line: String) {
        self.log(line.clone());
        self.health.answer(line);
        if self.health.awaits(id) {
            self.health.seen();
            // A session now, whatever woke the one that asked (its claims
            // are due again; a first start or mail claimed none).
            self.health.more_to_do();
            self.waking.queue_manual();
            // Its own pause ends; a budget's holds until an operator resumes
            // (the session waits for that).
            if self.wishes.paused() && !self.budgets.pausing() {
                self.pause(req, false);
            } else {
                self.replan();
            }
        }
    }

    /// Ends a parked session now (its moment is over).
    pub(super) fn park_over(&mut self, session: u64) {
        self.end_session(session, Cut::Approval);
    }
}
