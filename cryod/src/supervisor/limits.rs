//! A supervisor's limits on spending: `[budget]` windows checked after each
//! session, `max_session_usd`, and when a provider's limit is over.

use chrono::{DateTime, Utc};
use cryo_core::chamber::Input;

use super::*;

impl Sup {
    /// The budgets that apply, if any.
    pub(super) fn budgets(&self) -> Option<budget::Applying> {
        budget::Applying::to(self.config.as_ref().ok()?, &self.shared.config)
    }

    /// The lowest `max_session_usd` that applies.
    pub(super) fn max_session_usd(&self) -> Option<f64> {
        self.budgets()?.max_session_usd()
    }

    /// Measures the budgets against the ledger (UTC day and month): what
    /// the machine should be told (an 80% notice once, or the pause at
    /// 100%), if anything.
    pub(super) async fn budget_check(&mut self) -> Option<Input> {
        let uses = self.budgets()?.measured(&self.shared.store, self.now(), self.id).await.ok()?;
        if let Some(k) = self.budget_paused.take_if(|_| !self.machine.paused()) {
            // Resumed by an operator: this budget no longer pauses it, this period.
            self.budget_released.insert(k);
        }
        let (mut notice, mut reached) = (None, None);
        let mut reached_key = None;
        for u in uses {
            let key_period = u.period_key();
            if u.used >= u.limit && !self.budget_released.contains(&key_period) {
                reached_key.get_or_insert(key_period);
                reached.get_or_insert(format!(
                    "{} ({} {} = {}, {} used)",
                    cryo_core::session::BUDGET_REACHED,
                    u.who,
                    u.key,
                    u.shown(u.limit),
                    u.shown(u.used)
                ));
            } else if u.used >= 0.8 * u.limit && u.used < u.limit && self.budget_noticed.insert(key_period) {
                notice.get_or_insert(format!("{} is used.", u.used_of()));
            }
        }
        if notice.is_none() && reached.is_none() {
            return None;
        }
        if reached.is_some() {
            self.budget_paused = reached_key;
        }
        self.next_req += 1;
        Some(Input::Budget { req: self.next_req, notice, reached })
    }

    /// When a provider's limit is over: the reset it named, else after the
    /// delay it asked for, else after `limit_hold_seconds`; plus up to ten
    /// seconds, so the held wakes of many chambers do not all start at once.
    pub(super) fn limit_until(&mut self, l: &crate::agent_events::Limited) -> DateTime<Utc> {
        let now = self.now();
        let told = l
            .resets_at
            .and_then(|t| DateTime::<Utc>::from_timestamp(t, 0))
            .or_else(|| l.retry_after_ms.map(|ms| now + chrono::Duration::milliseconds(ms as i64)));
        let told = told.filter(|t| *t > now);
        self.limit_guessed = told.is_none();
        if told.is_none() {
            // Said where the operator looks (cryo.log, status's log lines):
            // the wait is cryod's guess, not the provider's word.
            let hold = self.shared.config.limit_hold_seconds;
            let note = format!(
                "the provider named no reset: the account is held for {} (`limit_hold_seconds` in cryod.toml, a \
                 default), then tried again",
                cryo_core::time::humanize(chrono::Duration::seconds(hold as i64))
            );
            self.log(cryo_core::chamber::LogLine::Event(note));
        }
        let at = told.unwrap_or(now + chrono::Duration::seconds(self.shared.config.limit_hold_seconds as i64));
        let jitter = u64::from_str_radix(&random_hex(2), 16).unwrap_or(0) % 10_000;
        at + chrono::Duration::milliseconds(jitter as i64)
    }
}
