//! Planning: from the list, the inbox and what holds wakes back, whether to
//! ask for a wake now and when the scheduler should call again.

use super::{Chamber, Effect, Refusal};
use crate::session::Trigger;

impl Chamber {
    /// After a start or a daemon restart: bootstrap a new chamber, else run
    /// what is due and what waits in the inbox.
    pub(super) fn resume(&mut self) {
        if self.wishes.bootstraps(self.waking.last_session()) && !self.waking.in_session() {
            self.want(Trigger::Bootstrap);
        }
        self.replan();
    }

    /// Whether nothing of this machine lives only in memory: no session,
    /// no wake wanted or waiting, nobody waiting for a reply, and nothing
    /// held, told, awaited or failed that a boot from the store and the
    /// files would not make again. The shell may then let it go and boot it again when
    /// something arrives for it (cryod's `supervisor::freeze`): a resting
    /// chamber then costs its view and its place in the schedule.
    pub fn may_sleep(&self) -> bool {
        !self.finished
            && self.out.is_empty()
            && self.waking.idle()
            && self.handoffs.is_idle(self.now)
            && self.budgets.is_quiet()
            && !self.hold.told()
            && self.limit_hold.is_none()
            && self.silence.is_quiet()
            && self.health.kept_whole()
    }

    /// Whether nothing would wake the chamber: no session wanted or
    /// running, no TODO to come, no mail, no retry or rework planned, and
    /// its plan not complete.
    pub(super) fn nothing_planned(&self) -> bool {
        self.waking.wanted().is_none()
            && !self.waking.in_session()
            && self.next_todo().is_none()
            && self.files.unread().is_empty()
            && self.health.rework_at().is_none()
            && self.health.retry_at(self.now).is_none()
            && !self.health.completed()
    }

    /// Decides from the list and the inbox: wake now (due TODOs, unread
    /// mail), or tell the scheduler when the next TODO is due.
    pub(super) fn replan(&mut self) {
        if !self.wishes.wakes() || self.fault().is_some() {
            return self.emit(Effect::Plan(None));
        }
        if self.waking.manual_queued() && !self.waking.in_session() {
            self.want(Trigger::Manual);
        }
        let now = self.now;
        let next = self.next_todo();
        let hold = self.health.mail_held(now);
        let retry = self.health.retry_at(now);
        let rework = self.health.rework_at();
        if !self.waking.in_session() && retry.is_none() {
            // A first session whose wake could not be recorded (a full
            // disk) is asked for again once writes may work.
            if self.wishes.bootstraps(self.waking.last_session()) {
                self.want(Trigger::Bootstrap);
            }
            // Interrupted work owes nothing to the back-off: it was not the
            // agent's failure.
            if self.waking.reruns() {
                self.want(Trigger::Recovery);
            }
            // A failed session's work, after its back-off.
            if rework.is_some_and(|t| t <= now) {
                self.want(Trigger::Recovery);
            }
            if next.is_some_and(|t| t <= now) {
                self.want(Trigger::Scheduled);
            }
            if hold.is_none() && !self.files.unread().is_empty() {
                self.want(Trigger::Inbox);
            }
        }
        // While a session runs, a due TODO waits for it to end (then replan).
        let wake = [next.filter(|t| *t > now), hold, retry, rework.filter(|t| *t > now)].into_iter().flatten().min();
        self.emit(Effect::Plan(wake));
    }

    /// A wake waiting on its pre-checks is dropped (stop, pause, removal):
    /// its permit goes back, and their answer, when it comes, is ignored.
    pub(super) fn drop_check(&mut self) {
        if self.waking.drop_check() {
            self.emit(Effect::Release);
        }
    }

    /// A wake's write failed: no wake (and no request for one) until
    /// [`WRITE_RETRY`](super::WRITE_RETRY) has passed; the next re-plan says
    /// when.
    pub(super) fn hold_wakes(&mut self) {
        self.health.hold_wakes(self.now);
        self.waking.unwant();
        self.emit(Effect::CancelAdmission);
    }

    /// Asks admission for a wake, if the chamber wakes at all: never while
    /// its `cryo.toml` is faulted (no session could start; what waits, waits
    /// for the mend, counting no failure).
    pub(super) fn want(&mut self, trigger: Trigger) {
        if !self.wishes.wakes() || self.fault().is_some() {
            return;
        }
        if let Some(t) = self.waking.want(trigger, self.now) {
            self.emit(Effect::RequestAdmission(t));
        }
    }

    /// Mail arrived: a lingering agent is told to read it; else, unless mail
    /// is held back, a wake is wanted for it.
    pub(super) fn on_inbox(&mut self) {
        if let Some(l) = self.waking.live_mut() {
            if let Some(req) = l.linger.take() {
                l.hibernate = None;
                l.refused_for_mail = true;
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
        if !self.files.unread().is_empty() {
            self.health.more_to_do();
            if self.health.holds_mail(self.now) {
                return;
            }
            self.want(Trigger::Inbox);
        }
    }
}
