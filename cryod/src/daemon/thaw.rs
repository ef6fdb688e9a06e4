//! Frozen chambers booted again: a resting chamber's supervisor lets go of
//! it (`supervisor::freeze`), and the first event sent to it brings its
//! queue here, where its record and ledger rows are read and it boots on
//! the same queue and snapshot, the event waiting for it there.

use std::future::Future;
use std::time::Duration;

use super::*;
use crate::services::runtime::Thaw;
use crate::store::StoreError;

/// The longest wait between two reads the store could not answer.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// Thaws booting at once: a change of the system's zone or a wake from
/// sleep may thaw every chamber, whose boots then take their turns (the
/// start-up's loader batches its boots the same way).
const AT_ONCE: usize = 16;

/// How long after a wave of freezes begins the heaps are trimmed: the
/// wave's chambers froze by then (each 30 s after its last event).
const WAVE_SETTLES: Duration = Duration::from_secs(45);

impl Daemon {
    /// Gives the heaps' free pages back to the system after a wave of
    /// freezes ([`memory::WAVE`](crate::base::memory::WAVE) since the
    /// last). A start of every chamber, a change of the system's zone or a
    /// wake from sleep thaw thousands of chambers at once; each frees its
    /// supervisor as it freezes again, but the allocator keeps the pages:
    /// 90,000 chambers started at once left 770 MB resident, 683 MB after
    /// the trim (346 MB after a restart: the rest is the heaps' pages
    /// still partly used). Woken by the wave, never at rest.
    pub(super) fn trim_after_waves(&self) {
        let (waves, shutdown) = (self.0.shared.freezes.clone(), self.0.shared.shutdown.clone());
        tokio::spawn(async move {
            loop {
                let settled = async {
                    waves.next().await;
                    tokio::time::sleep(WAVE_SETTLES).await;
                };
                tokio::select! {
                    () = settled => {}
                    () = shutdown.cancelled() => return,
                }
                let began = std::time::Instant::now();
                let _ = tokio::task::spawn_blocking(crate::base::memory::give_back_freed_memory).await;
                let (freezes, in_ms) = (waves.trimmed(), began.elapsed().as_millis() as u64);
                tracing::debug!(freezes, in_ms, "the heaps' free pages given back");
            }
        });
    }

    /// Boots each frozen chamber an event was sent to, until shutdown.
    pub(super) fn thaw_frozen(&self) {
        let Some(mut rx) = self.0.shared.thaws.take_receiver() else { return };
        let daemon = Arc::downgrade(&self.0);
        let shutdown = self.0.shared.shutdown.clone();
        let turns = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
        tokio::spawn(async move {
            loop {
                let thaw = tokio::select! {
                    t = rx.recv() => t,
                    () = shutdown.cancelled() => None,
                };
                let (Some(thaw), Some(inner)) = (thaw, daemon.upgrade()) else { break };
                // Taken before the task is made: the thaws waiting for a
                // turn are jobs in the queue, not large futures.
                let Ok(turn) = turns.clone().acquire_owned().await else { break };
                tokio::spawn(Daemon(inner).thaw(thaw, turn));
            }
        });
    }

    /// Boots a frozen chamber again on its queue, once its registry entry
    /// is there (a chamber freezes as its boot ends, which may be before
    /// the boot's caller has put it in). A chamber no longer registered, or
    /// whose entry holds another queue, is let go, its queue with it.
    async fn thaw(self, thaw: Thaw, _turn: tokio::sync::OwnedSemaphorePermit) {
        let chamber = thaw.chamber;
        self.ready(chamber).await;
        let handle = match self.handle_now(chamber) {
            Ok(h) => h,
            // Being registered under `starting` (added, taken up, mended).
            Err(_) => {
                let _one = self.0.starting.lock().await;
                match self.handle_now(chamber) {
                    Ok(h) => h,
                    Err(_) => return,
                }
            }
        };
        let (shared, began) = (&self.0.shared, std::time::Instant::now());
        let Some(Some(record)) = self.read_again(|| shared.store.chamber(chamber)).await else { return };
        let Some(mut rows) = self.read_again(|| shared.store.boot_rows(vec![chamber])).await else { return };
        let rows = rows.remove(&chamber).unwrap_or_default();
        tracing::debug!(chamber = %record.name, "a frozen chamber boots again");
        let fell = crate::supervisor::thaw(shared.clone(), record, rows, thaw, handle).await;
        crate::base::metrics::get().thawed(began.elapsed());
        self.fell_at_boot(chamber, fell);
    }

    /// What `read` gives, asked again and again (1 s, doubling to a minute)
    /// while the store cannot answer: a thaw does not go on from a guess
    /// (its events wait). `None` once cryod is stopping.
    async fn read_again<T, F>(&self, read: impl Fn() -> F) -> Option<T>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let shared = &self.0.shared;
        let mut wait = Duration::from_secs(1);
        loop {
            match read().await {
                Ok(v) => return Some(v),
                Err(error) => tracing::warn!(%error, "cannot read a frozen chamber's record; trying again in {wait:?}"),
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shared.shutdown.cancelled() => return None,
            }
            wait = (wait * 2).min(LONGEST_WAIT);
        }
    }
}
