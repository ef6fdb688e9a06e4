//! A supervisor's limits on spending: `[budget]` windows checked after each
//! session, `max_session_usd`, and when a provider's limit is over.

use super::*;
use chrono::{DateTime, Utc};

impl Sup {
    /// The budgets that apply, if any.
    pub(super) fn budgets(&self) -> Option<budget::Applying> {
        budget::Applying::to(self.config.as_ref().ok()?, &self.shared.config)
    }

    /// The lowest `max_session_usd` that applies.
    pub(super) fn max_session_usd(&self) -> Option<f64> {
        self.budgets()?.max_session_usd()
    }

    /// Each budget that applies, measured against the ledger (UTC day and
    /// month); none if none applies or the ledger cannot be read.
    pub(super) async fn measure_budgets(&self) -> Vec<cryo_core::limits::BudgetUse> {
        let Some(applying) = self.budgets() else { return Vec::new() };
        match applying.measured(&self.shared.store, self.now(), self.id).await {
            Ok(uses) => uses,
            Err(error) => {
                tracing::warn!(chamber = %self.machine.name(), %error, "cannot measure the budgets");
                Vec::new()
            }
        }
    }

    /// When a provider's limit is over (`cryo_core::limits::hold_until`):
    /// the reset it named, else after the delay it asked for, else after
    /// `limit_hold_seconds`, spread by a random jitter.
    pub(super) fn limit_until(&mut self, l: &crate::agent_events::Limited) -> DateTime<Utc> {
        let now = self.now();
        let told = l
            .resets_at
            .and_then(|t| DateTime::<Utc>::from_timestamp(t, 0))
            .or_else(|| l.retry_after_ms.map(|ms| now + chrono::Duration::milliseconds(ms as i64)));
        let default = chrono::Duration::seconds(self.shared.config.limit_hold_seconds as i64);
        let jitter = if l.exact { 0 } else { u64::from_str_radix(&random_hex(2), 16).unwrap_or(0) };
        let hold = cryo_core::limits::hold_until(now, told, default, jitter);
        if let Some(running) = self.running.as_mut() {
            running.limit_told(hold.guessed.is_some());
        }
        if let Some(note) = hold.guessed {
            // Said where the operator looks (cryo.log, status's log lines):
            // the wait is cryod's guess, not the provider's word.
            self.log(cryo_core::chamber::LogLine::Event(note));
        }
        hold.at
    }
}
