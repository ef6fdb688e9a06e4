//! A node's trust in its lease, as the shell sees it: a gate every chamber
//! passes before each write, and the keepers of its agents.
//!
//! On one machine the gate is always open. In a fleet, `fleet` renews the
//! lease and moves the gate: `Held` (write), `Frozen` (too long without a
//! renewal: agents stopped, every supervisor waits before its next effect),
//! `Lost` (the trust window ran out: agents killed, chambers dropped without
//! finalizing). Each renewal also extends the deadline of every session's
//! keeper (see `keeper`), which kills its agent if cryod stops extending it.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::watch;

/// Where the gate stands. `epoch` counts lost leases: a supervisor started
/// under one epoch is done when the epoch changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    Held { epoch: u64 },
    Frozen { epoch: u64 },
    Lost { epoch: u64 },
}

impl Trust {
    pub fn epoch(self) -> u64 {
        match self {
            Trust::Held { epoch } | Trust::Frozen { epoch } | Trust::Lost { epoch } => epoch,
        }
    }
}

/// Whether a writer of `epoch` may write now: the lease held in that
/// epoch, and its trust window (if any) still open.
fn trusted(trust: Trust, until: Option<Instant>, epoch: u64) -> bool {
    trust == Trust::Held { epoch } && until.is_none_or(|u| Instant::now() < u)
}

pub struct Lease {
    fleet: bool,
    state: watch::Sender<Trust>,
    /// Until when this node trusts its lease (monotonic); `None` on one
    /// machine. `fleet` waits on its changes.
    until: watch::Sender<Option<Instant>>,
    /// The running agents' keepers: each agent's process group, and the pipe
    /// that extends its keeper's deadline.
    keepers: Mutex<HashMap<i32, std::fs::File>>,
}

impl Lease {
    /// One machine: always held, no keepers.
    pub fn single() -> Lease {
        Lease {
            fleet: false,
            state: watch::channel(Trust::Held { epoch: 0 }).0,
            until: watch::channel(None).0,
            keepers: Default::default(),
        }
    }

    /// A fleet node, trusting its fresh lease until `until`.
    pub fn fleet(until: Instant) -> Lease {
        Lease { fleet: true, until: watch::channel(Some(until)).0, ..Lease::single() }
    }

    pub fn is_fleet(&self) -> bool {
        self.fleet
    }

    pub fn trust(&self) -> Trust {
        *self.state.borrow()
    }

    /// Waits while frozen; true once held in `epoch`, false if the lease of
    /// `epoch` is lost (the caller drops its chamber).
    ///
    /// Held is not enough: the trust window must still be open. A node
    /// frozen past its window (SIGSTOP, a stalled VM) and thawed still reads
    /// `Held` until its watch runs; a supervisor that wrote in between would
    /// write over the chamber's new owner. It waits instead, until the
    /// watch calls the lease lost or a renewal opens the window again.
    pub async fn held(&self, epoch: u64) -> bool {
        let mut state = self.state.subscribe();
        let mut until = self.until.subscribe();
        loop {
            let open = *until.borrow_and_update();
            match *state.borrow_and_update() {
                trust if trusted(trust, open, epoch) => return true,
                Trust::Held { epoch: e } | Trust::Frozen { epoch: e } if e == epoch => {}
                _ => return false,
            }
            tokio::select! {
                r = state.changed() => if r.is_err() { return false },
                r = until.changed() => if r.is_err() { return false },
            }
        }
    }

    /// [`Lease::held`] asked at once, never waiting, by a write just before
    /// it takes effect (see `cryo_files::Gate`): the supervisor's gate is
    /// passed before the write begins, and a node stopped in the middle
    /// (reading, rendering, syncing) may run again past its window. `None`
    /// on one machine.
    pub fn gate(&self, epoch: u64) -> Option<cryo_files::Gate> {
        if !self.fleet {
            return None;
        }
        let (state, until) = (self.state.subscribe(), self.until.subscribe());
        Some(cryo_files::Gate::new(move || trusted(*state.borrow(), *until.borrow(), epoch)))
    }

    /// Trust left (zero when none; `None` on one machine).
    pub fn left(&self) -> Option<Duration> {
        let until = (*self.until.borrow())?;
        Some(until.saturating_duration_since(Instant::now()))
    }

    /// The end of trust as it moves (a fleet node's watch sleeps until the
    /// next instant that matters, and wakes when a renewal moves it).
    pub fn until(&self) -> watch::Receiver<Option<Instant>> {
        self.until.subscribe()
    }

    /// Trusts the lease until `until` (a renewal came back, or, with now,
    /// the database said it is gone), and tells every keeper.
    pub fn trust_until(&self, until: Instant) {
        self.until.send_replace(Some(until));
        // The keepers' clock: milliseconds of the machine's monotonic clock.
        let millis = cryo_session::keeper_until(until.saturating_duration_since(Instant::now()));
        let mut keepers = self.keepers.lock().expect("keepers lock");
        // A keeper that is gone (its pipe broken) has nothing to keep; a full
        // pipe (a stopped keeper) only misses this extension.
        keepers.retain(|_, pipe| {
            writeln!(pipe, "{millis}").map_or_else(|e| e.kind() != std::io::ErrorKind::BrokenPipe, |()| true)
        });
    }

    /// Moves the gate; stops (`Frozen`), continues (`Held`) or kills
    /// (`Lost`) every kept agent's process group.
    pub fn set(&self, trust: Trust) {
        let before = self.trust();
        if before == trust {
            return;
        }
        let signal = match trust {
            Trust::Frozen { .. } => Some(Signal::SIGSTOP),
            Trust::Held { .. } if matches!(before, Trust::Frozen { .. }) => Some(Signal::SIGCONT),
            Trust::Lost { .. } => Some(Signal::SIGKILL),
            Trust::Held { .. } => None,
        };
        if let Some(signal) = signal {
            for pgid in self.keepers.lock().expect("keepers lock").keys() {
                cryo_session::signal_group(*pgid, signal);
            }
        }
        if matches!(trust, Trust::Lost { .. }) {
            self.keepers.lock().expect("keepers lock").clear();
        }
        self.state.send_replace(trust);
    }

    /// The deadline a new keeper starts with: the trust left now.
    pub fn deadline(&self) -> Duration {
        self.left().unwrap_or(Duration::MAX)
    }

    pub fn keep(&self, pgid: i32, pipe: std::fs::File) {
        self.keepers.lock().expect("keepers lock").insert(pgid, pipe);
    }

    pub fn forget(&self, pgid: i32) {
        self.keepers.lock().expect("keepers lock").remove(&pgid);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Lease, Trust};

    /// Polled once: whether `held` has answered yet.
    async fn answered(f: &mut std::pin::Pin<&mut impl std::future::Future<Output = bool>>) -> Option<bool> {
        tokio::time::timeout(Duration::ZERO, f.as_mut()).await.ok()
    }

    /// A node thawed past its window still reads `Held` until its watch
    /// runs: the gate stays shut, then opens on a renewal or closes for good.
    #[tokio::test]
    async fn a_window_run_out_shuts_the_gate_though_the_lease_reads_held() {
        let past = Instant::now().checked_sub(Duration::from_millis(1)).unwrap();
        let fresh = Instant::now() + Duration::from_secs(60);
        assert!(Lease::fleet(fresh).held(0).await, "an open window writes");
        assert!(Lease::single().held(0).await, "one machine always writes");

        let lease = Lease::fleet(past);
        assert_eq!(lease.trust(), Trust::Held { epoch: 0 });
        let held = lease.held(0);
        tokio::pin!(held);
        assert_eq!(answered(&mut held).await, None, "a run-out window waits");
        lease.trust_until(fresh);
        assert_eq!(answered(&mut held).await, Some(true), "a renewal opens it again");

        let lease = Lease::fleet(past);
        let held = lease.held(0);
        tokio::pin!(held);
        assert_eq!(answered(&mut held).await, None);
        lease.set(Trust::Lost { epoch: 0 });
        assert_eq!(answered(&mut held).await, Some(false), "the watch called it lost");
    }

    /// The gate a write asks just before it takes effect: shut as soon as
    /// the window runs out (the lease still reading `Held`), open again on
    /// a renewal, shut for an old epoch; none on one machine.
    #[test]
    fn a_writes_gate_shuts_with_the_window() {
        assert!(Lease::single().gate(0).is_none());
        let lease = Lease::fleet(Instant::now() + Duration::from_secs(60));
        let gate = lease.gate(0).unwrap();
        let open = |g: &cryo_files::Gate| {
            let dir = tempfile::tempdir().unwrap();
            let d = cryo_files::Dir::open(dir.path()).unwrap().gated(Some(g.clone()));
            d.write(std::path::Path::new("f"), b"x", cryo_files::NewFile::QUICK).is_ok()
        };
        assert!(open(&gate));
        lease.trust_until(Instant::now().checked_sub(Duration::from_millis(1)).unwrap());
        assert_eq!(lease.trust(), Trust::Held { epoch: 0 });
        assert!(!open(&gate), "a run-out window");
        lease.trust_until(Instant::now() + Duration::from_secs(60));
        assert!(open(&gate), "renewed");
        assert!(!open(&lease.gate(1).unwrap()), "another epoch");
        lease.set(Trust::Frozen { epoch: 0 });
        assert!(!open(&gate), "frozen");
    }
}
