//! The operator's standing wishes for the chamber, as the registry records
//! them: started, paused, archived, and begun again after a reset. The
//! machine takes a wish only once the registry holds it
//! ([`Input::StoreWritten`](super::Input::StoreWritten)), so a restarted
//! cryod finds the chamber as the operator last left it.

use super::State;

/// What the operator wants of the chamber; see the module documentation.
#[derive(Debug, Clone, Default)]
pub(super) struct Wishes {
    /// Started (paused included): bridges run, mail is taken in.
    started: bool,
    /// Paused: no session starts.
    paused: bool,
    /// Archived: stopped, and refusing to start until unarchived.
    archived: bool,
    /// Reset, with no session since: the next start bootstraps.
    begun_again: bool,
}

impl Wishes {
    pub(super) fn new(started: bool, paused: bool, archived: bool, begun_again: bool) -> Wishes {
        Wishes { started, paused, archived, begun_again }
    }

    pub(super) fn started(&self) -> bool {
        self.started
    }

    pub(super) fn paused(&self) -> bool {
        self.paused
    }

    pub(super) fn archived(&self) -> bool {
        self.archived
    }

    /// Started and not paused: a session may start.
    pub(super) fn wakes(&self) -> bool {
        self.started && !self.paused
    }

    /// What the chamber looks like from outside, a fault and a running
    /// session aside (they show over this).
    pub(super) fn state(&self) -> State {
        match (self.started, self.paused) {
            (true, true) => State::Paused,
            (true, false) => State::Idle,
            (false, _) => State::Stopped,
        }
    }

    /// The registry has it started (or stopped).
    pub(super) fn start(&mut self, started: bool) {
        self.started = started;
    }

    /// The registry has it paused (or resumed).
    pub(super) fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// The registry has it archived (or unarchived).
    pub(super) fn archive(&mut self, archived: bool) {
        self.archived = archived;
    }

    /// Whether a start (or a restart of cryod) begins with a bootstrap: the
    /// chamber has run no session (`last_session` 0), or none since a reset.
    pub(super) fn bootstraps(&self, last_session: u64) -> bool {
        last_session == 0 || self.begun_again
    }

    /// A session began: a reset chamber is under way again.
    pub(super) fn session_began(&mut self) {
        self.begun_again = false;
    }

    /// The chamber was reset: its next start bootstraps, as a new one's.
    pub(super) fn begin_again(&mut self) {
        self.begun_again = true;
    }
}
