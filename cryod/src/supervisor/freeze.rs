//! A chamber at rest without a supervisor: frozen.
//!
//! A supervisor whose machine holds nothing that a boot from the store and
//! the files would not make again ([`Chamber::may_sleep`], and no session,
//! timer, caller, bridge or git task of the shell's) lets its chamber go:
//! its task ends, and its queue keeps the receiver with what thaws it
//! ([`queue::Receiver::freeze`]). The chamber keeps its registry entry, its
//! snapshot (what the views read), its place in the scheduler and its
//! watches, whose sinks send to the same queue; the next event sent thaws
//! it: the daemon reads its record and boots it again on the same queue
//! and snapshot (`Daemon::thaw`), and the event waits in the queue for it.
//!
//! A start-up boots every chamber as before and freezes those at rest at
//! once, so a resting chamber costs its entry, its view and its place in
//! the schedule and the watcher, not a supervisor.
//!
//! [`Chamber::may_sleep`]: cryo_core::chamber::Chamber::may_sleep

use std::sync::Arc;
use std::time::Duration;

use super::{Event, Sup, queue};
use crate::services::runtime::{Shared, Thaw};

/// How long a supervisor at rest waits for another event before it
/// freezes (at its start: not at all). Events come in runs (a session's
/// end, its git settling, an operator's few commands): a boot for each is
/// waste.
const STILL_FOR: Duration = Duration::from_secs(30);

/// For the tests: the milliseconds a supervisor at rest waits before it
/// freezes, in place of 30 s.
pub const TEST_STILL_FOR: &str = "CRYO_TEST_STILL_FOR_MS";

/// [`STILL_FOR`], or the tests' (read once).
pub(super) fn still_for() -> Duration {
    static SET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        let ms = std::env::var(TEST_STILL_FOR).ok().and_then(|v| v.parse().ok());
        ms.map(Duration::from_millis).unwrap_or(STILL_FOR)
    })
}

impl Sup {
    /// Whether the chamber may freeze now: the machine holds nothing only
    /// memory keeps, nor does the shell (a session, an armed timer that
    /// matters at rest, a caller waiting, a bridge, a git task, a due
    /// instant told ahead, a fallback account it told of, a failed write).
    /// A fleet's chambers never freeze: their ownership and mirror are
    /// held by the supervisor.
    pub(super) fn may_freeze(&self) -> bool {
        self.running.is_none()
            && !self.unsaved
            && self.fell_back.is_none()
            && self.timers.iter().all(|(t, task)| task.is_finished() || !t.matters_at_rest())
            && self.early().is_none()
            && self.callers.is_empty()
            && self.bridges.is_empty()
            && self.owner.is_ours()
            && !self.shared.lease.is_fleet()
            && self.git_lock.try_lock().is_ok()
            && self.machine.may_sleep()
    }

    /// Freezes the chamber if nothing waits in its queue (else `rx` comes
    /// back): the next event sent hands the receiver to the daemon, which
    /// boots the chamber again on it. The timers still armed, none of
    /// which matters at rest, are dropped (one that fires meanwhile thaws
    /// the chamber, whose new machine finds it stale).
    pub(super) fn freeze(&self, rx: queue::Receiver<Event>) -> Result<(), queue::Receiver<Event>> {
        let (shared, chamber) = (Arc::downgrade(&self.shared), self.id);
        rx.freeze(move |rx| {
            // cryod is stopping when it is gone (the receiver goes too).
            let Some(shared) = shared.upgrade() else { return drop_elsewhere(rx) };
            if let Err(back) = shared.thaws.send(Thaw { chamber, frozen: Box::new(rx) }) {
                drop_elsewhere(back);
            }
        })?;
        for (_, task) in &self.timers {
            task.abort();
        }
        self.shared.freezes.freed();
        Ok(())
    }
}

/// Drops what a thaw that cannot happen (cryod is stopping) holds: the
/// receiver and the events waiting in it, whose drops (a permit's) may take
/// locks the sender holds, so not on the sender's thread.
fn drop_elsewhere<T: Send + 'static>(held: T) {
    std::thread::spawn(move || drop(held));
}

/// The receiver a frozen chamber's [`Thaw`] holds.
pub(super) fn receiver(thaw: Thaw) -> Option<queue::Receiver<Event>> {
    thaw.frozen.downcast().ok().map(|rx| *rx)
}

/// What the machine of a thawed chamber is told of the time it had none.
pub(super) fn thawed(shared: &Shared) -> cryo_core::chamber::Thawed {
    cryo_core::chamber::Thawed { up_since: shared.up_since, slept: shared.sleeps.list() }
}
