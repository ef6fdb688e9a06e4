//! A supervisor's hold on its chamber: the fence its writes carry and the
//! lease epoch it runs under. Once the chamber is another owner's (a write
//! was fenced, or this node lost its lease) the hold is lost for good, and
//! the supervisor drops the chamber without writing anything more.

use crate::services::lease::Lease;
use crate::store::{Fence, StoreError};

pub(super) struct Ownership {
    /// This owner's right to write the chamber's rows.
    fence: Fence,
    /// The lease epoch this supervisor runs under (see `lease::Trust`).
    epoch: u64,
    /// The chamber is no longer ours: never set back.
    lost: bool,
}

impl Ownership {
    pub(super) fn new(fence: Fence, epoch: u64) -> Ownership {
        Ownership { fence, epoch, lost: false }
    }

    /// The fence every chamber-scoped write carries.
    pub(super) fn fence(&self) -> Fence {
        self.fence
    }

    /// Whether the chamber is still ours (nothing said otherwise yet).
    pub(super) fn is_ours(&self) -> bool {
        !self.lost
    }

    /// Whether this owner may write now: on one machine always; a fleet
    /// node only while it trusts its lease of this epoch (a frozen node
    /// waits here; one that lost it loses the chamber).
    pub(super) async fn may_write(&mut self, lease: &Lease) -> bool {
        let held = !lease.is_fleet() || lease.held(self.epoch).await;
        if !held {
            self.lost = true;
        }
        held
    }

    /// What each write to the chamber's files asks just before it takes
    /// effect (see [`Lease::gate`]); `None` on one machine.
    pub(super) fn gate(&self, lease: &Lease) -> Option<cryo_files::Gate> {
        lease.gate(self.epoch)
    }

    /// Notes what a write said: refused by the fence, the chamber is
    /// someone else's now (returns whether it was).
    pub(super) fn fenced<T>(&mut self, r: &Result<T, StoreError>) -> bool {
        let fenced = r.as_ref().is_err_and(|e| e.is_fenced());
        if fenced {
            self.lost = true;
        }
        fenced
    }
}
