//! Where a chamber's look goes out: the snapshot this node's views read,
//! and in a fleet the mirror other nodes read (written in order by its own
//! task, until the chamber is let go).

use std::sync::Arc;

use cryo_core::chamber::View;
use tokio::sync::watch;

use super::Snapshot;

/// A chamber's latest [`Snapshot`], written by its supervisor alone and
/// read by the views. Nothing waits on it (a change is told through the
/// runtime's notices), so it is a lock rather than a watch channel, whose
/// eight wakers cost a resting chamber 300 bytes.
#[derive(Clone, Default)]
pub struct Shown(Arc<std::sync::RwLock<Snapshot>>);

impl Shown {
    pub fn borrow(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Shows that the chamber's supervisor fell and when it starts again
    /// (`line`), until the next supervisor shows its own.
    pub fn show_fallen(&self, line: String) {
        let mut shown = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        shown.view.attention = Some(line);
        shown.view.in_session = false;
    }

    /// Shows `snap`; returns whether it differs from what was shown.
    pub(super) fn replace(&self, snap: Snapshot) -> bool {
        let mut shown = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = *shown != snap;
        *shown = snap;
        changed
    }
}

pub(super) struct Outlets {
    snapshot: Shown,
    /// What other nodes show of the chamber (fleet only).
    mirror: Option<watch::Sender<View>>,
}

impl Outlets {
    pub(super) fn new(snapshot: Shown, mirror: Option<watch::Sender<View>>) -> Outlets {
        Outlets { snapshot, mirror }
    }

    /// Shows `snap`; returns whether it differs from what was shown (the
    /// mirror is written only then).
    pub(super) fn show(&mut self, snap: Snapshot) -> bool {
        let view = self.mirror.as_ref().map(|_| snap.view.clone());
        let changed = self.snapshot.replace(snap);
        if changed && let (Some(m), Some(view)) = (&self.mirror, view) {
            m.send_replace(view);
        }
        changed
    }

    /// The chamber is let go: its mirror is no longer this node's to write.
    pub(super) fn stop_mirror(&mut self) {
        self.mirror = None;
    }
}
