//! The ledger's cost held constant over years: usage read from per-day
//! rollups, and old history pruned into them.
//!
//! Each session's usage is added to `usage_days` (chamber, UTC day,
//! provider account, model) by a trigger in the same transaction that
//! records its end, so a query reads the days it asks about: a budget reads
//! this month's rows of one chamber and one account, `usage --since 7d`
//! seven days of rollups. Only a `since` inside a day (`today` in a zone
//! east or west of UTC, `24h`) reads that one day of the ledger itself,
//! through its index by end time.
//!
//! Pruning ([`Backend::prune`](super::Backend::prune)) deletes ended
//! sessions, passed slots and answered claims before a UTC day (each
//! chamber keeps its newest session, whose number the next one follows);
//! the rollups keep what they used. It first records the day it prunes
//! before (`history_marks`), so a later partial-day query that reaches into
//! pruned days reads that day's rollup whole instead of an emptied ledger.
//! It deletes in bounded batches, each its own transaction: a crash between
//! two leaves the rest for the next run, with nothing lost or counted twice.

use chrono::{DateTime, Duration, NaiveTime, Utc};

/// What [`Backend::usage`](super::Backend::usage) sums: sessions ended at
/// or after `since` (all if `None`), of every chamber or of one; with
/// `account`, also that account's sums over every chamber, as rows of
/// chamber [`ALL_CHAMBERS`] (read from `usage_accounts`: a budget reads a
/// month of days, however many chambers bill the account).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageQuery {
    pub since: Option<DateTime<Utc>>,
    pub chamber: Option<i64>,
    pub account: Option<String>,
}

/// The chamber of the rows that sum an account over every chamber.
pub const ALL_CHAMBERS: i64 = 0;

/// A value bound to one of the statements [`UsageQuery::statements`] makes.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Text(String),
    Int(i64),
}

/// The rows removed by one prune.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub sessions: u64,
    pub passed: u64,
    pub claims: u64,
}

impl Pruned {
    pub fn add(&mut self, o: Pruned) {
        self.sessions += o.sessions;
        self.passed += o.passed;
        self.claims += o.claims;
    }

    pub fn is_empty(&self) -> bool {
        *self == Pruned::default()
    }
}

/// Rows deleted per transaction while pruning (a batch holds the writer for
/// a few milliseconds, so wakes are not held up behind a long prune).
pub const PRUNE_BATCH: i64 = 5_000;

/// The key in `history_marks` of the day before which history was pruned.
pub const PRUNED_BEFORE: &str = "pruned_before";

/// The columns of a `usage_days` row as a [`UsageRow`](super::UsageRow).
const ROLLUP_COLUMNS: &str = "chamber_id, day, NULLIF(provider, ''), NULLIF(model, ''), sessions, input_tokens,
    output_tokens, cached_tokens, cost_usd";

/// The same sums over the ledger itself, for part of a day.
const LEDGER_COLUMNS: &str = "chamber_id, substr(ended_at, 1, 10), provider, model, count(*),
    CAST(coalesce(sum(input_tokens), 0) AS BIGINT), CAST(coalesce(sum(output_tokens), 0) AS BIGINT),
    CAST(coalesce(sum(cached_tokens), 0) AS BIGINT), CAST(coalesce(sum(cost_usd), 0) AS DOUBLE PRECISION)";

/// Table names and placeholder style of one backend.
pub struct Dialect {
    /// The prefix of cryo's tables (`cryo_` in PostgreSQL).
    pub prefix: &'static str,
    /// `?` (SQLite) or `$` (PostgreSQL).
    pub placeholder: char,
}

pub const SQLITE: Dialect = Dialect { prefix: "", placeholder: '?' };
pub const POSTGRES: Dialect = Dialect { prefix: "cryo_", placeholder: '$' };

impl UsageQuery {
    /// The statements whose rows, together, answer this query: the whole
    /// days from the rollups, and the part of `since`'s day from the ledger
    /// (unless that day was pruned, `pruned_before` being later).
    pub fn statements(&self, d: &Dialect, pruned_before: Option<&str>) -> Vec<(String, Vec<Arg>)> {
        let Some(since) = self.since else {
            return vec![self.rollups(d, String::new())];
        };
        let day = since.date_naive();
        let midnight = day.and_time(NaiveTime::MIN).and_utc();
        let day_s = day.format("%Y-%m-%d").to_string();
        let pruned = pruned_before.is_some_and(|p| day_s.as_str() < p);
        if since == midnight || pruned {
            return vec![self.rollups(d, day_s)];
        }
        let next = (midnight + Duration::days(1)).format("%Y-%m-%d").to_string();
        vec![self.rollups(d, next.clone()), self.ledger(d, crate::base::clock::rfc3339(since), next)]
    }

    /// Rollup rows of days from `from` (`YYYY-MM-DD`; empty: all).
    fn rollups(&self, d: &Dialect, from: String) -> (String, Vec<Arg>) {
        let table = format!("{}usage_days", d.prefix);
        let select = |filter: &str| format!("SELECT {ROLLUP_COLUMNS} FROM {table} WHERE day >= {}{filter}", p(d, 1));
        match (self.chamber, &self.account) {
            (None, None) => (select(""), vec![Arg::Text(from)]),
            (Some(c), None) => (select(&format!(" AND chamber_id = {}", p(d, 2))), vec![Arg::Text(from), Arg::Int(c)]),
            (c, Some(a)) => {
                let sql = format!(
                    "{} UNION ALL SELECT CAST({ALL_CHAMBERS} AS BIGINT), day, NULLIF(provider, ''), CAST(NULL AS TEXT),
                        sessions, input_tokens, output_tokens, cached_tokens, cost_usd
                     FROM {}usage_accounts WHERE day >= {} AND provider = {}",
                    select(&format!(" AND chamber_id = {}", p(d, 2))),
                    d.prefix,
                    p(d, 1),
                    p(d, 3)
                );
                (sql, vec![Arg::Text(from), Arg::Int(c.unwrap_or(-1)), Arg::Text(a.clone())])
            }
        }
    }

    /// The ledger's sums of sessions ended from `since` to the day `until`.
    fn ledger(&self, d: &Dialect, since: String, until: String) -> (String, Vec<Arg>) {
        let mut args = vec![Arg::Text(since), Arg::Text(until)];
        let span = format!(
            "FROM {}sessions WHERE ended_at IS NOT NULL AND ended_at >= {} AND ended_at < {}",
            d.prefix,
            p(d, 1),
            p(d, 2)
        );
        let by_chamber = |filter: &str| {
            format!(
                "SELECT {LEDGER_COLUMNS} {span}{filter} GROUP BY chamber_id, substr(ended_at, 1, 10), provider, model"
            )
        };
        let sql = match (self.chamber, &self.account) {
            (None, None) => by_chamber(""),
            (Some(c), None) => {
                args.push(Arg::Int(c));
                by_chamber(&format!(" AND chamber_id = {}", p(d, 3)))
            }
            (c, Some(a)) => {
                args.extend([Arg::Int(c.unwrap_or(-1)), Arg::Text(a.clone())]);
                let all = LEDGER_COLUMNS
                    .replacen("chamber_id", &format!("CAST({ALL_CHAMBERS} AS BIGINT)"), 1)
                    .replacen("model", "CAST(NULL AS TEXT)", 1);
                format!(
                    "{} UNION ALL SELECT {all} {span} AND provider = {} GROUP BY substr(ended_at, 1, 10), provider",
                    by_chamber(&format!(" AND chamber_id = {}", p(d, 3))),
                    p(d, 4)
                )
            }
        };
        (sql, args)
    }
}

/// Placeholder `n` of dialect `d`.
fn p(d: &Dialect, n: usize) -> String {
    format!("{}{n}", d.placeholder)
}

/// The statements of one prune batch, each deleting at most [`PRUNE_BATCH`]
/// rows before the day `$1`/`?1`, in order: ended sessions (not a chamber's
/// newest), passed slots, answered claims. Each returns nothing; the
/// backend counts the rows it changed.
pub fn prune_statements(d: &Dialect) -> [String; 3] {
    let (t, b) = (d.prefix, PRUNE_BATCH);
    let one = p(d, 1);
    [
        format!(
            "DELETE FROM {t}sessions WHERE (chamber_id, number) IN (
                SELECT s.chamber_id, s.number FROM {t}sessions s
                WHERE s.ended_at IS NOT NULL AND s.ended_at < {one}
                  AND s.number < (SELECT max(n.number) FROM {t}sessions n WHERE n.chamber_id = s.chamber_id)
                LIMIT {b})"
        ),
        format!("DELETE FROM {t}passed WHERE id IN (SELECT id FROM {t}passed WHERE at < {one} LIMIT {b})"),
        format!(
            "DELETE FROM {t}claims WHERE id IN (
                SELECT id FROM {t}claims WHERE answered_at IS NOT NULL AND answered_at < {one} LIMIT {b})"
        ),
    ]
}

/// The UTC day before which `keep` of history ends, at `now`.
pub fn prune_day(now: DateTime<Utc>, keep: Duration) -> String {
    (now - keep).format("%Y-%m-%d").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_midnight_reads_rollups_only_and_a_moment_adds_its_day_from_the_ledger() {
        let q = UsageQuery { since: Some(at("2026-11-01T00:00:00Z")), ..Default::default() };
        let s = q.statements(&SQLITE, None);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1, [Arg::Text("2026-11-01".into())]);
        let q = UsageQuery { since: Some(at("2026-11-25T23:00:00Z")), chamber: Some(7), account: None };
        let s = q.statements(&POSTGRES, None);
        assert_eq!(s.len(), 2);
        assert!(s[0].0.contains("cryo_usage_days") && s[0].0.contains("chamber_id = $2"), "{}", s[0].0);
        assert_eq!(s[0].1, [Arg::Text("2026-11-26".into()), Arg::Int(7)]);
        assert!(s[1].0.contains("cryo_sessions") && s[1].0.contains("ended_at < $2"), "{}", s[1].0);
        assert_eq!(s[1].1[..2], [Arg::Text("2026-11-25T23:00:00Z".into()), Arg::Text("2026-11-26".into())]);
        // Its day pruned: that day's rollup, whole.
        let s = q.statements(&SQLITE, Some("2026-11-26"));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1[0], Arg::Text("2026-11-25".into()));
    }

    #[test]
    fn a_budget_reads_its_chamber_and_its_account_by_their_indexes() {
        let q = UsageQuery { since: None, chamber: Some(3), account: Some("claude-a".into()) };
        let (sql, args) = &q.statements(&SQLITE, None)[0];
        assert!(sql.contains("usage_accounts") && sql.contains("provider = ?3"), "{sql}");
        assert_eq!(args, &[Arg::Text(String::new()), Arg::Int(3), Arg::Text("claude-a".into())]);
    }

    #[test]
    fn the_prune_day_is_a_utc_day() {
        assert_eq!(prune_day(at("2028-11-26T08:00:00Z"), Duration::days(730)), "2026-11-27");
    }
}
