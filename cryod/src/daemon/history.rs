//! History kept as long as `[history] keep_sessions` says: the ledger's
//! old rows are pruned daily (their usage stays in the per-day rollups, see
//! `store::history`), or at once by `cryoctl history prune`.

use super::{ChamberView, Daemon};
use crate::error::{Error, Result};
use crate::store::Pruned;

/// How often cryod prunes on its own.
const EVERY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl Daemon {
    /// Prunes now (a minute after start, off the start's path) and then
    /// daily, as `[history] keep_sessions` says.
    pub(super) fn prune_daily(&self) {
        let first = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        self.every(first, EVERY, |d| async move {
            match d.prune_history("").await {
                Ok((before, n)) if !n.is_empty() => tracing::info!(
                    before,
                    sessions = n.sessions,
                    passed = n.passed,
                    claims = n.claims,
                    "history pruned"
                ),
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "history could not be pruned"),
            }
        });
    }

    /// Prunes history older than `keep` ("2y", "90d"; empty: the setting's):
    /// the UTC day it pruned before (empty when it keeps everything) and
    /// what it deleted.
    pub async fn prune_history(&self, keep: &str) -> Result<(String, Pruned)> {
        let shared = &self.0.shared;
        let keep = if keep.is_empty() { shared.config.history.keep_sessions.as_str() } else { keep };
        let Some(keep) = crate::config::parse_keep(keep).map_err(Error::Invalid)? else {
            return Ok((String::new(), Pruned::default()));
        };
        let before = crate::store::history::prune_day(shared.clock.now(), keep);
        let pruned = shared.store.prune(before.clone()).await?;
        Ok((before, pruned))
    }

    /// What the sessions `q` names used, summed per chamber, UTC day,
    /// provider account and model.
    pub async fn usage(&self, q: crate::store::UsageQuery) -> Result<Vec<crate::store::UsageRow>> {
        Ok(self.0.shared.store.usage(q).await?)
    }

    /// A page of the chamber's archived done TODOs, newest last, ending
    /// before `before` (0: the newest), and where the page before it ends.
    pub async fn archived_todos(
        &self,
        v: &ChamberView,
        tz: chrono_tz::Tz,
        before: u64,
        limit: u32,
    ) -> Result<(Vec<cryo_core::todo::Todo>, u64)> {
        let root = std::path::PathBuf::from(&v.record.path);
        let limit = limit.min(1_000) as usize;
        let read = crate::chamber::blocking(move || crate::chamber::todos::archived(&root, tz, before, limit));
        match read.await? {
            Ok(page) => Ok(page),
            Err(e) if e.is_planted() => Err(Error::Precondition(e.to_string())),
            Err(e) => Err(Error::Internal(e.to_string())),
        }
    }
}
