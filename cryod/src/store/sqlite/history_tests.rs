//! The ledger's rollups and its pruning, on SQLite: what `usage` reads from
//! the rollups equals the ledger's own sums, and a prune (even one cut short
//! between its batches) loses and doubles nothing.

use rusqlite::params;

use super::super::{Backend, NewChamber, UsageQuery, UsageRow};
use super::{Sqlite, registry, sessions};

/// Chamber `chamber`'s sessions `numbers`, each ended on day `day + n % 40`
/// of November and December 2026 at `n` minutes past midnight, billed to
/// one of two accounts and models, costing a multiple of 1/8 (exact sums).
/// (A job runs inside the group's transaction.)
fn ledger(c: &rusqlite::Connection, chamber: i64, numbers: std::ops::Range<i64>) -> rusqlite::Result<()> {
    for n in numbers {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 1).unwrap() + chrono::Duration::days(n % 40);
        let ended = format!("{day}T{:02}:{:02}:00Z", (n / 60) % 24, n % 60);
        c.execute(
            "INSERT INTO sessions (chamber_id, number, wake_id, trigger, reasons, claimed, created_at)
             VALUES (?1, ?2, ?3, 'todo', '[]', '[]', ?4)",
            params![chamber, n, format!("w-{chamber}-{n}"), ended],
        )?;
        let (provider, model) = if n % 3 == 0 { ("acct-a", "m1") } else { ("acct-b", "m2") };
        c.execute(
            "UPDATE sessions SET ended_at = ?3, outcome = 'ok', provider = ?4, model = ?5, input_tokens = ?6,
             output_tokens = 1, cached_tokens = 0, cost_usd = ?7 WHERE chamber_id = ?1 AND number = ?2",
            params![chamber, n, ended, provider, model, n, (n % 5) as f64 / 8.0],
        )?;
    }
    Ok(())
}

/// The ledger's own sums of what `q` names (the query before rollups):
/// per chamber, and with an account, the account's over every chamber as
/// rows of chamber 0.
fn summed(c: &rusqlite::Connection, q: &UsageQuery) -> Vec<UsageRow> {
    let since = q.since.map(crate::base::clock::rfc3339).unwrap_or_default();
    let mut st = c
        .prepare(
            "SELECT chamber_id, substr(ended_at, 1, 10), provider, model, count(*), sum(input_tokens),
                sum(output_tokens), sum(cached_tokens), sum(cost_usd)
             FROM sessions WHERE ended_at IS NOT NULL AND ended_at >= ?1
               AND ((?2 IS NULL AND ?3 IS NULL) OR chamber_id = ?2)
             GROUP BY 1, 2, 3, 4
             UNION ALL
             SELECT 0, substr(ended_at, 1, 10), provider, NULL, count(*), sum(input_tokens),
                sum(output_tokens), sum(cached_tokens), sum(cost_usd)
             FROM sessions WHERE ended_at IS NOT NULL AND ended_at >= ?1 AND provider = ?3
             GROUP BY 2, 3",
        )
        .unwrap();
    let rows = st.query_map(params![since, q.chamber, q.account], sessions::usage_row);
    sorted(rows.unwrap().map(Result::unwrap).collect())
}

fn sorted(mut rows: Vec<UsageRow>) -> Vec<UsageRow> {
    rows.sort_by(|a, b| {
        (&a.day, a.chamber_id, &a.provider, &a.model).cmp(&(&b.day, b.chamber_id, &b.provider, &b.model))
    });
    rows
}

fn chamber(name: &str) -> NewChamber {
    NewChamber {
        base_name: name.into(),
        exact_name: true,
        path: format!("/{name}"),
        created_at: chrono::DateTime::UNIX_EPOCH,
    }
}

async fn two_chambers(s: &Sqlite, sessions: i64) -> (i64, i64) {
    s.call(move |c| {
        let (a, _) = registry::add_chamber(c, chamber("a"))?;
        let (b, _) = registry::add_chamber(c, chamber("b"))?;
        ledger(c, a.id, 1..sessions)?;
        ledger(c, b.id, 1..sessions / 2)?;
        Ok((a.id, b.id))
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn usage_read_from_the_rollups_is_the_ledgers_own_sums() {
    let s = Sqlite::open_in_memory().unwrap();
    let (a, b) = two_chambers(&s, 2_000).await;
    let at = |t: &str| Some(t.parse().unwrap());
    let queries = [
        UsageQuery::default(),
        UsageQuery { since: at("2026-11-20T00:00:00Z"), ..Default::default() },
        // Inside a day: that day's part from the ledger.
        UsageQuery { since: at("2026-11-20T13:37:00Z"), ..Default::default() },
        UsageQuery { since: at("2026-11-20T13:37:00Z"), chamber: Some(b), account: None },
        // A budget: one chamber and one account's every chamber.
        UsageQuery { since: at("2026-12-01T00:00:00Z"), chamber: Some(a), account: Some("acct-a".into()) },
        UsageQuery { since: at("2026-11-05T06:00:00Z"), chamber: None, account: Some("acct-b".into()) },
    ];
    for q in queries {
        let got = sorted(s.usage(q.clone()).await.unwrap());
        let want = s.call({
            let q = q.clone();
            move |c| Ok(summed(c, &q))
        });
        assert_eq!(got, want.await.unwrap(), "{q:?}");
        assert!(!got.is_empty(), "{q:?}");
    }
}

/// A prune cut short after its first batch (a crash: each batch is its own
/// transaction) has lost nothing and counted nothing twice; run again, it
/// finishes, and every chamber keeps its newest session.
#[tokio::test]
async fn a_prune_cut_short_and_run_again_loses_and_doubles_nothing() {
    let s = Sqlite::open_in_memory().unwrap();
    let (a, b) = two_chambers(&s, 12_000).await;
    let all = UsageQuery::default();
    let before = sorted(s.usage(all.clone()).await.unwrap());
    let first = s.call(|c| sessions::prune_batch(c, "2026-12-11")).await.unwrap();
    assert_eq!(first.sessions, super::super::history::PRUNE_BATCH as u64, "one bounded batch");
    assert_eq!(sorted(s.usage(all.clone()).await.unwrap()), before, "a batch changes no sum");
    let rest = s.prune("2026-12-11".into()).await.unwrap();
    assert_eq!(sorted(s.usage(all.clone()).await.unwrap()), before, "a whole prune changes no sum");
    let left: i64 = s.call(|c| Ok(c.query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))?)).await.unwrap();
    assert_eq!(left, 2, "each chamber keeps its newest session, the rest before the day is gone");
    assert_eq!(first.sessions + rest.sessions, 11_998 + 5_998);
    assert_eq!(s.last_session_number(a).await.unwrap(), 11_999, "the numbers go on");
    assert_eq!(s.last_session_number(b).await.unwrap(), 5_999);
    // A partial day before the prune's day reads its day's rollup whole.
    let q = UsageQuery { since: Some("2026-11-03T12:00:00Z".parse().unwrap()), chamber: Some(a), account: None };
    let whole = UsageQuery { since: Some("2026-11-03T00:00:00Z".parse().unwrap()), ..q.clone() };
    assert_eq!(s.usage(q).await.unwrap(), s.usage(whole).await.unwrap());
    assert!(s.prune("2026-12-11".into()).await.unwrap().is_empty(), "nothing left to prune");
}

/// A start asks for the open sessions of every chamber: through the index
/// of open sessions, never a walk of the ledger.
#[tokio::test]
async fn the_open_sessions_are_read_through_their_index() {
    let s = Sqlite::open_in_memory().unwrap();
    let plan: Vec<String> = s
        .call(|c| {
            let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {}", sessions::OPEN_SESSIONS_SQL))?;
            let rows = st.query_map(params![-1, 1], |r| r.get::<_, String>(3))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
        .unwrap();
    assert!(plan.iter().all(|p| p.contains("sessions_open")), "{plan:?}");
    let (a, _) = two_chambers(&s, 50).await;
    assert!(s.open_sessions(None).await.unwrap().is_empty());
    s.call(move |c| {
        c.execute("UPDATE sessions SET ended_at = NULL WHERE chamber_id = ?1 AND number IN (3, 7)", [a])?;
        Ok(())
    })
    .await
    .unwrap();
    let open: Vec<u64> = s.open_sessions(None).await.unwrap().iter().map(|o| o.number).collect();
    assert_eq!(open, [3, 7]);
    assert_eq!(s.open_sessions(Some(a)).await.unwrap().len(), 2);
    assert!(s.open_sessions(Some(a + 1)).await.unwrap().is_empty());
}

/// One chamber's part of a day (a status's cost windows start inside a day)
/// reads that chamber's sessions through their index by chamber and end
/// time, never every chamber's sessions of the day.
#[tokio::test]
async fn one_chambers_partial_day_reads_its_own_sessions() {
    let s = Sqlite::open_in_memory().unwrap();
    let since = "2026-11-20T12:30:00Z".parse().unwrap();
    let q = UsageQuery { since: Some(since), chamber: Some(1), account: None };
    let statements = q.statements(&crate::store::history::SQLITE, None);
    let (sql, _) = statements.last().unwrap().clone();
    assert!(sql.contains("FROM sessions"), "{sql}");
    let plan: Vec<String> = s
        .call(move |c| {
            let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
            let rows = st.query_map(params!["2026-11-20T12:30:00Z", "2026-11-21", 1], |r| r.get::<_, String>(3))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
        .unwrap();
    assert!(plan.iter().any(|p| p.contains("sessions_by_chamber_end")), "{plan:?}");
}

/// A statement kept prepared runs again with new values without being
/// compiled again (a `LIMIT ?` bound to a new value recompiled it, once per
/// chamber at every start).
#[tokio::test]
async fn kept_statements_are_not_compiled_again_for_new_values() {
    let s = Sqlite::open_in_memory().unwrap();
    let (a, b) = two_chambers(&s, 20).await;
    for (chamber, limit) in [(a, 1), (b, 5), (a, 3), (b, 1)] {
        let rows = s.recent_sessions(chamber, limit).await.unwrap();
        assert_eq!(rows.len(), limit as usize);
    }
    let recompiled = s
        .call(|c| {
            let sql = format!(
                "SELECT {} FROM sessions WHERE chamber_id = ?1 ORDER BY number DESC LIMIT ?2",
                crate::store::SESSION_COLUMNS
            );
            let st = c.prepare_cached(&sql)?;
            Ok(st.get_status(rusqlite::StatementStatus::RePrepare))
        })
        .await
        .unwrap();
    assert_eq!(recompiled, 0);
}
