//! Budgets measured against the ledger (`[budget]` in `cryo.toml`, and the
//! provider account's in `cryod.toml`): what is used of each limit, which
//! `chamber status` shows and `cryo_core::limits` judges (an 80% notice, a
//! pause at 100%).

use chrono::{DateTime, Utc};

use crate::chamber::config::ChamberConfig;
use crate::config::Budget;
use crate::store::history::ALL_CHAMBERS;
use crate::store::{Store, StoreError, UsageQuery, UsageRow};
pub use cryo_core::limits::BudgetUse;

/// The budgets that apply to a chamber: its own `[budget]` and its provider
/// account's (`[providers.NAME.budget]` in `cryod.toml`).
pub struct Applying {
    pub account: String,
    pub own: Budget,
    pub theirs: Budget,
}

impl Applying {
    /// Those of the chamber configured by `config`; none if neither is set.
    pub fn to(config: &ChamberConfig, cryod: &crate::config::Config) -> Option<Applying> {
        let account = config.provider_account();
        let theirs = cryod.providers.get(&account).map(|p| p.budget.clone()).unwrap_or_default();
        (!config.budget.is_empty() || !theirs.is_empty()).then(|| Applying {
            account,
            own: config.budget.clone(),
            theirs,
        })
    }

    /// The lowest `max_session_usd` that applies.
    pub fn max_session_usd(&self) -> Option<f64> {
        [self.own.max_session_usd, self.theirs.max_session_usd].into_iter().flatten().reduce(f64::min)
    }

    /// Each limit against this month's ledger, at `now`, for chamber `id`.
    pub async fn measured(&self, store: &Store, now: DateTime<Utc>, id: i64) -> Result<Vec<BudgetUse>, StoreError> {
        let Some(month) = month_start(now) else { return Ok(Vec::new()) };
        let q = UsageQuery { since: Some(month), chamber: Some(id), account: Some(self.account.clone()) };
        let rows = store.usage(q).await?;
        Ok(measure(&rows, now, id, &self.account, (&self.own, &self.theirs)))
    }
}

/// The first of this UTC month: the ledger rows to ask for.
fn month_start(now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Some(chrono::Datelike::with_day(&now.date_naive(), 1)?.and_hms_opt(0, 0, 0)?.and_utc())
}

/// Each limit of `own` (the chamber's) and `theirs` (`account`'s) against
/// `rows` (this month's rollups of the chamber, and the account's over
/// every chamber as rows of [`ALL_CHAMBERS`]), at `now`.
fn measure(
    rows: &[UsageRow],
    now: DateTime<Utc>,
    chamber_id: i64,
    account: &str,
    (own, theirs): (&Budget, &Budget),
) -> Vec<BudgetUse> {
    let today = now.format("%Y-%m-%d").to_string();
    let spent = |mine: &dyn Fn(&UsageRow) -> bool| {
        rows.iter().filter(|r| mine(r)).fold([0.0, 0.0, 0.0], |[day, month, sessions], r| {
            let d = r.day == today;
            let today_usd = if d { r.cost_usd } else { 0.0 };
            let today_n = if d { r.sessions as f64 } else { 0.0 };
            [day + today_usd, month + r.cost_usd, sessions + today_n]
        })
    };
    let mine = spent(&|r| r.chamber_id == chamber_id);
    let accounts = spent(&|r| r.chamber_id == ALL_CHAMBERS && r.provider.as_deref() == Some(account));
    let period = [today.clone(), today[..7].to_string(), today.clone()];
    let mut out = Vec::new();
    for (who, b, used) in [("this chamber's".to_string(), own, mine), (format!("{account}'s"), theirs, accounts)] {
        let limits = [b.daily_usd, b.monthly_usd, b.daily_sessions.map(f64::from)];
        for (i, key) in ["daily_usd", "monthly_usd", "daily_sessions"].into_iter().enumerate() {
            if let Some(limit) = limits[i] {
                out.push(BudgetUse { who: who.clone(), key, limit, used: used[i], period: period[i].clone() });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(chamber_id: i64, day: &str, provider: &str, cost_usd: f64) -> UsageRow {
        UsageRow {
            chamber_id,
            day: day.into(),
            provider: Some(provider.into()),
            model: None,
            sessions: 1,
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            cost_usd,
        }
    }

    #[test]
    fn each_limit_counts_its_own_period_and_owner() {
        let now = "2026-11-24T12:00:00Z".parse().unwrap();
        // The chamber's own rows, and each account's over every chamber.
        let rows = [
            row(1, "2026-11-24", "claude-a", 0.85),
            row(1, "2026-11-02", "claude-a", 2.0),
            UsageRow { sessions: 2, ..row(ALL_CHAMBERS, "2026-11-24", "claude-a", 1.85) },
            row(ALL_CHAMBERS, "2026-11-02", "claude-a", 2.0),
            row(ALL_CHAMBERS, "2026-11-24", "codex-b", 5.0),
        ];
        let own = Budget { daily_usd: Some(1.0), monthly_usd: Some(10.0), ..Default::default() };
        let theirs = Budget { daily_sessions: Some(4), ..Default::default() };
        let uses = measure(&rows, now, 1, "claude-a", (&own, &theirs));
        let lines: Vec<String> = uses.iter().map(BudgetUse::line).collect();
        assert_eq!(
            lines,
            [
                "$0.85 of this chamber's daily_usd ($1.00), 85%",
                "$2.85 of this chamber's monthly_usd ($10.00), 29%",
                "2 of claude-a's daily_sessions (4), 50%",
            ]
        );
        assert_eq!(uses[1].period_key(), "this chamber's monthly_usd 2026-11");
    }
}
