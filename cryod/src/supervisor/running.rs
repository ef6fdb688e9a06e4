//! The running session's part of a supervisor: what exists only while the
//! chamber holds an admission permit, from `Admitted` to `Release`. It is
//! made when the permit arrives and dropped when it goes back, so nothing of
//! one session (its agent's group, its door, what it used or claimed) can
//! be read by the next.
//!
//! The machine orders a session's end so that everything here is read
//! before the permit goes back: the exit (`Exited`) takes the group and
//! notes the usage, `RevokeToken` closes the door, `SessionEnded` takes the
//! usage and `HoldProvider` reads the limit's guess, then `Release`.

use crate::chamber::mailbox::Stored;
use crate::services::admission::Permit;
use cryo_session::Door;
use cryo_session::Usage;

/// What a supervisor holds for its running session (boxed in `Sup`: a
/// chamber at rest pays one pointer for it).
pub(super) struct Running {
    /// The admission slot the session runs under; dropping it gives it back.
    permit: Permit,
    /// The wake's pre-checks, which run under the permit: ended when it
    /// goes back ([`Running::release`]).
    checks: Option<tokio::task::AbortHandle>,
    /// The agent's process group, from its spawn to its exit.
    agent_pgid: Option<i32>,
    /// The session's own socket, from the agent's spawn until its token is
    /// revoked (dropping it closes it).
    door: Option<Door>,
    /// The batch the last `receive` archived, for its reply.
    claimed: Vec<Stored>,
    /// What the agent's stream said it used (with its session's number),
    /// from its exit to its session's row.
    usage: Option<(u64, Usage)>,
    /// The last limit named no reset: its hold is `limit_hold_seconds`.
    limit_guessed: bool,
    /// The session's credential at the provider gateway, from the agent's
    /// spawn to its exit (dropping it makes it worthless).
    ticket: Option<crate::gateway::Ticket>,
    /// The wake's trace, from the agent's spawn to its session's row.
    trace: Option<std::sync::Arc<crate::base::otlp::Trace>>,
}

impl Running {
    /// A session begins with its permit.
    pub(super) fn admitted(permit: Permit) -> Box<Running> {
        Box::new(Running {
            permit,
            checks: None,
            agent_pgid: None,
            door: None,
            claimed: Vec::new(),
            usage: None,
            limit_guessed: false,
            ticket: None,
            trace: None,
        })
    }

    /// The provider account the session bills (its permit's).
    pub(super) fn account(&self) -> Option<&str> {
        self.permit.account()
    }

    /// Another permit while one is held (admission gives a chamber one at a
    /// time, so it does not happen): it replaces the one held, which goes
    /// back.
    pub(super) fn readmitted(&mut self, permit: Permit) {
        self.permit = permit;
    }

    /// The wake's pre-checks run (under the permit, which ends them).
    pub(super) fn checking(&mut self, checks: tokio::task::AbortHandle) {
        self.checks = Some(checks);
    }

    /// The agent runs in group `pgid`, reached through `door` (and the
    /// gateway, with `ticket`).
    pub(super) fn started(
        &mut self,
        pgid: i32,
        door: Door,
        ticket: Option<crate::gateway::Ticket>,
        trace: Option<std::sync::Arc<crate::base::otlp::Trace>>,
    ) {
        self.door = Some(door);
        self.agent_pgid = Some(pgid);
        self.ticket = ticket;
        self.trace = trace;
    }

    /// The wake's trace, for its root span (once).
    pub(super) fn take_trace(&mut self) -> Option<std::sync::Arc<crate::base::otlp::Trace>> {
        self.trace.take()
    }

    /// The wait the provider asked for, if its last answer to the session
    /// (through the gateway) was a refusal (429).
    pub(super) fn last_refusal(&self) -> Option<std::time::Duration> {
        self.ticket.as_ref()?.route().used().last_refusal
    }

    /// The agent exited: its group is no longer the session's to keep, nor
    /// its credential at the gateway worth anything.
    pub(super) fn exited(&mut self) -> Option<i32> {
        self.ticket = None;
        self.agent_pgid.take()
    }

    /// Notes what the exited agent of `session` used, if its stream said
    /// (what an earlier exit said is replaced, even by nothing).
    pub(super) fn used(&mut self, session: u64, usage: Option<Usage>) {
        self.usage = usage.map(|u| (session, u));
    }

    /// What session `number` used, for its row (once).
    pub(super) fn take_usage(&mut self, number: u64) -> Option<Usage> {
        self.usage.take().filter(|u| u.0 == number).map(|u| u.1)
    }

    /// The session's token was revoked: its door closes with it.
    pub(super) fn close_door(&mut self) {
        self.door = None;
    }

    /// The batch a `receive` archived, kept for its reply.
    pub(super) fn claimed(&mut self, mail: Vec<Stored>) {
        self.claimed = mail;
    }

    /// The batch kept for a `receive`'s reply (once).
    pub(super) fn take_claimed(&mut self) -> Vec<Stored> {
        std::mem::take(&mut self.claimed)
    }

    /// A dialog's reply reads the mailbox itself: the batch is not needed.
    pub(super) fn forget_claimed(&mut self) {
        self.claimed.clear();
    }

    /// Notes whether the provider's limit named no reset (cryod guesses the
    /// wait).
    pub(super) fn limit_told(&mut self, guessed: bool) {
        self.limit_guessed = guessed;
    }

    /// Whether the limit's hold is cryod's guess.
    pub(super) fn limit_guessed(&self) -> bool {
        self.limit_guessed
    }

    /// The permit goes back, and whatever still runs of the pre-checks ends
    /// (a stop or a pause gave it back while they ran).
    pub(super) fn release(self: Box<Self>) {
        let Running { permit, checks, .. } = *self;
        drop(permit);
        if let Some(checks) = checks {
            checks.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::Running;
    use crate::services::admission::{Admission, Permit};
    use cryo_session::Usage;

    fn permit(admission: &Admission) -> Permit {
        let got = Arc::new(Mutex::new(None));
        let put = got.clone();
        let sink: crate::services::admission::Sink = Arc::new(move |p| {
            *put.lock().unwrap() = Some(p);
            Ok(())
        });
        admission.request(cryo_core::session::Trigger::Manual, 1, None, sink);
        got.lock().unwrap().take().expect("a free slot is granted at once")
    }

    #[test]
    fn what_a_session_used_goes_only_to_its_own_row() {
        let admission = Admission::new(1, Default::default());
        let mut running = Running::admitted(permit(&admission));
        running.used(4, Some(Usage { input_tokens: 10, ..Usage::default() }));
        assert!(running.take_usage(5).is_none(), "another session's");
        running.used(4, Some(Usage { input_tokens: 10, ..Usage::default() }));
        assert_eq!(running.take_usage(4).map(|u| u.input_tokens), Some(10));
        assert!(running.take_usage(4).is_none(), "taken once");
    }

    #[tokio::test]
    async fn the_release_gives_the_permit_back_and_ends_the_checks() {
        let admission = Admission::new(1, Default::default());
        let mut running = Running::admitted(permit(&admission));
        assert_eq!(admission.running(), 1);
        let checks = tokio::spawn(std::future::pending::<()>());
        running.checking(checks.abort_handle());
        running.release();
        assert_eq!(admission.running(), 0, "the slot is free");
        assert!(checks.await.expect_err("aborted").is_cancelled());
    }
}
