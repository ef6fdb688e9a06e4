//! Where a chamber's look goes out: the snapshot this node's views read,
//! and in a fleet the mirror other nodes read (written in order by its own
//! task, until the chamber is let go).

use cryo_core::chamber::View;
use tokio::sync::watch;

use super::Snapshot;

pub(super) struct Outlets {
    snapshot: watch::Sender<Snapshot>,
    /// What other nodes show of the chamber (fleet only).
    mirror: Option<watch::Sender<View>>,
}

impl Outlets {
    pub(super) fn new(snapshot: watch::Sender<Snapshot>, mirror: Option<watch::Sender<View>>) -> Outlets {
        Outlets { snapshot, mirror }
    }

    /// Shows `snap`; returns whether it differs from what was shown (the
    /// mirror is written only then).
    pub(super) fn show(&mut self, snap: Snapshot) -> bool {
        let changed = *self.snapshot.borrow() != snap;
        if changed && let Some(m) = &self.mirror {
            m.send_replace(snap.view.clone());
        }
        self.snapshot.send_replace(snap);
        changed
    }

    /// The chamber is let go: its mirror is no longer this node's to write.
    pub(super) fn stop_mirror(&mut self) {
        self.mirror = None;
    }
}
