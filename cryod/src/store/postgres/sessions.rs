//! Session history (the wake ledger) and the claim journal in PostgreSQL:
//! every wake is recorded before its agent is spawned, then updated when
//! the agent starts and when the session ends, each write under the
//! chamber's fence; slots that passed unrun, usage read from the rows and
//! the rollups, pruning; an inbox batch is journaled before its files are
//! archived.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use chrono::{DateTime, Utc};

use super::Postgres;
use crate::base::clock::rfc3339;
use crate::store::history::{self, Pruned, UsageQuery};
use crate::store::{
    Fence, OpenClaim, OpenSession, PassedSlot, SessionEnd, SessionRow, SessionStart, StoreError, UsageRow, WakeRecord,
    read_time,
};

fn session_row(r: &Row) -> SessionRow {
    SessionRow {
        number: r.get::<_, i64>(0) as u64,
        wake_id: r.get(1),
        trigger: r.get(2),
        due_at: r.get::<_, Option<&str>>(3).map(read_time),
        started_at: r.get::<_, Option<&str>>(4).map(read_time),
        lateness_ms: r.get(5),
        ended_at: r.get::<_, Option<&str>>(6).map(read_time),
        outcome: r.get(7),
        usage: cryo_session::Usage {
            model: r.get(8),
            input_tokens: r.get::<_, Option<i64>>(9).unwrap_or(0) as u64,
            output_tokens: r.get::<_, Option<i64>>(10).unwrap_or(0) as u64,
            cached_tokens: r.get::<_, Option<i64>>(11).unwrap_or(0) as u64,
            // Not kept: what they cost is in the cost.
            cache_write_tokens: 0,
            cost_usd: r.get(12),
            provider_session: r.get(13),
            provider: r.get(14),
        },
        resumed_from: r.get::<_, Option<i64>>(15).map(|n| n as u64),
        thread: r.get::<_, Option<i64>>(16).map(|n| (n as u32, r.get::<_, Option<i64>>(17).unwrap_or(0) as u64)),
        git: r.get(18),
    }
}

pub(super) async fn record_wake(pg: &Postgres, fence: Fence, w: WakeRecord) -> Result<(), StoreError> {
    let number = w.number as i64;
    let resumed_from = w.resumed_from.map(|n| n as i64);
    let (due_at, created_at) = (w.due_at.map(rfc3339), rfc3339(w.created_at));
    pg.write(
        fence,
        "INSERT INTO cryo_sessions
             (chamber_id, number, wake_id, trigger, reasons, claimed, due_at, created_at, node, fence, resumed_from)
         SELECT f.id, $4, $5, $6, $7, $8, $9, $10, $2, $3, $11 FROM f RETURNING 1::int8 AS r",
        &[&number, &w.wake_id, &w.trigger, &w.reasons, &w.claimed, &due_at, &created_at, &resumed_from],
    )
    .await
}

pub(super) async fn session_started(pg: &Postgres, fence: Fence, s: SessionStart) -> Result<(), StoreError> {
    let (number, pid, started_at) = (s.number as i64, s.pid as i64, rfc3339(s.started_at));
    pg.write(
        fence,
        "UPDATE cryo_sessions SET pid = $5, started_at = $6, lateness_ms = $7
         WHERE chamber_id = (SELECT id FROM f) AND number = $4 RETURNING 1::int8 AS r",
        &[&number, &pid, &started_at, &s.lateness_ms],
    )
    .await
}

pub(super) async fn session_ended(pg: &Postgres, fence: Fence, e: SessionEnd) -> Result<(), StoreError> {
    let (number, ended_at) = (e.number as i64, rfc3339(e.ended_at));
    let u = &e.usage;
    pg.write(
        fence,
        "UPDATE cryo_sessions SET ended_at = $5, outcome = $6, detail = $7, model = $8, input_tokens = $9,
         output_tokens = $10, cached_tokens = $11, cost_usd = $12, provider_session = $13, provider = $14,
         thread_sessions = $15, thread_tokens = $16
         WHERE chamber_id = (SELECT id FROM f) AND number = $4 RETURNING 1::int8 AS r",
        &[
            &number,
            &ended_at,
            &e.outcome,
            &e.detail,
            &u.model,
            &(u.input_tokens as i64),
            &(u.output_tokens as i64),
            &(u.cached_tokens as i64),
            &u.cost_usd,
            &u.provider_session,
            &u.provider,
            &e.thread.map(|t| t.0 as i64),
            &e.thread.map(|t| t.1 as i64),
        ],
    )
    .await
}

pub(super) async fn set_session_git(pg: &Postgres, fence: Fence, number: u64, json: String) -> Result<(), StoreError> {
    let sql = "UPDATE cryo_sessions SET git = $5 WHERE chamber_id = (SELECT id FROM f) AND number = $4 \
               RETURNING 1::int8 AS r";
    pg.write(fence, sql, &[&(number as i64), &json]).await
}

pub(super) async fn last_session_number(pg: &Postgres, chamber: i64) -> Result<u64, StoreError> {
    let rows = pg.query("SELECT max(number) FROM cryo_sessions WHERE chamber_id = $1", &[&chamber]).await?;
    Ok(rows.first().and_then(|r| r.get::<_, Option<i64>>(0)).unwrap_or(0) as u64)
}

pub(super) async fn recent_sessions(pg: &Postgres, chamber: i64, limit: u32) -> Result<Vec<SessionRow>, StoreError> {
    let limit = limit as i64;
    let rows = pg
        .query(
            &format!(
                "SELECT {} FROM cryo_sessions WHERE chamber_id = $1 ORDER BY number DESC LIMIT $2",
                crate::store::SESSION_COLUMNS
            ),
            &[&chamber, &limit],
        )
        .await?;
    Ok(rows.iter().map(session_row).collect())
}

pub(super) async fn open_sessions(pg: &Postgres, chamber: Option<i64>) -> Result<Vec<OpenSession>, StoreError> {
    let rows = pg
        .query(
            "SELECT chamber_id, number, wake_id, pid, claimed FROM cryo_sessions
             WHERE ended_at IS NULL AND ($1::int8 IS NULL OR chamber_id = $1) ORDER BY chamber_id, number",
            &[&chamber],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| OpenSession {
            chamber_id: r.get(0),
            number: r.get::<_, i64>(1) as u64,
            wake_id: r.get(2),
            pid: r.get::<_, Option<i64>>(3).map(|p| p as u32),
            claimed: r.get(4),
        })
        .collect())
}

pub(super) async fn record_passed(pg: &Postgres, fence: Fence, slots: Vec<PassedSlot>) -> Result<(), StoreError> {
    for p in &slots {
        let (slot_at, todo_id, at) = (rfc3339(p.slot_at), p.todo_id.map(|n| n as i64), rfc3339(p.at));
        pg.write(
            fence,
            &format!(
                "INSERT INTO cryo_passed (chamber_id, {}) SELECT f.id, $4, $5, $6, $7, $8, $9 FROM f
                 RETURNING 1::int8 AS r",
                crate::store::PASSED_COLUMNS
            ),
            &[&slot_at, &todo_id, &p.todo_text, &p.what, &p.reason, &at],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn passed(pg: &Postgres, chamber: i64, limit: u32) -> Result<(u64, Vec<PassedSlot>), StoreError> {
    let limit = limit as i64;
    let sql = format!(
        "SELECT {} FROM cryo_passed WHERE chamber_id = $1 ORDER BY id DESC LIMIT $2",
        crate::store::PASSED_COLUMNS
    );
    let rows = pg.query(&sql, &[&chamber, &limit]).await?;
    let total = pg.query("SELECT count(*) FROM cryo_passed WHERE chamber_id = $1", &[&chamber]).await?;
    let total = total.first().map(|r| r.get::<_, i64>(0)).unwrap_or(0) as u64;
    let slots = rows
        .iter()
        .map(|r| PassedSlot {
            slot_at: read_time(r.get(0)),
            todo_id: r.get::<_, Option<i64>>(1).map(|n| n as u64),
            todo_text: r.get(2),
            what: r.get(3),
            reason: r.get(4),
            at: read_time(r.get(5)),
        })
        .collect();
    Ok((total, slots))
}

pub(super) async fn usage(pg: &Postgres, q: UsageQuery) -> Result<Vec<UsageRow>, StoreError> {
    let marks = pg.query("SELECT value FROM cryo_history_marks WHERE key = $1", &[&history::PRUNED_BEFORE]).await?;
    let pruned: Option<String> = marks.first().map(|r| r.get(0));
    let mut out = Vec::new();
    for (sql, args) in q.statements(&history::POSTGRES, pruned.as_deref()) {
        let args: Vec<Box<dyn ToSql + Sync + Send>> = args
            .into_iter()
            .map(|a| -> Box<dyn ToSql + Sync + Send> {
                match a {
                    history::Arg::Text(t) => Box::new(t),
                    history::Arg::Int(i) => Box::new(i),
                }
            })
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| &**a as &(dyn ToSql + Sync)).collect();
        out.extend(pg.query(&sql, &refs).await?.iter().map(|r| UsageRow {
            chamber_id: r.get(0),
            day: r.get(1),
            provider: r.get(2),
            model: r.get(3),
            sessions: r.get::<_, i64>(4) as u64,
            input_tokens: r.get::<_, i64>(5) as u64,
            output_tokens: r.get::<_, i64>(6) as u64,
            cached_tokens: r.get::<_, i64>(7) as u64,
            cost_usd: r.get(8),
        }));
    }
    Ok(out)
}

pub(super) async fn prune(pg: &Postgres, before: String) -> Result<Pruned, StoreError> {
    pg.query(
        "INSERT INTO cryo_history_marks (key, value) VALUES ($1, $2)
         ON CONFLICT (key) DO UPDATE SET value = greatest(cryo_history_marks.value, excluded.value)
         RETURNING 1",
        &[&history::PRUNED_BEFORE, &before],
    )
    .await?;
    let [sessions, passed, claims] = history::prune_statements(&history::POSTGRES);
    let mut total = Pruned::default();
    loop {
        let client = pg.pool.get().await?;
        let mut counts = [0; 3];
        for (sql, n) in [&sessions, &passed, &claims].into_iter().zip(&mut counts) {
            *n = client.execute(&client.prepare_cached(sql).await?, &[&before]).await?;
        }
        let batch = Pruned { sessions: counts[0], passed: counts[1], claims: counts[2] };
        if batch.is_empty() {
            return Ok(total);
        }
        total.add(batch);
    }
}

pub(super) async fn journal_claim(
    pg: &Postgres,
    fence: Fence,
    session: u64,
    files: Vec<String>,
    at: DateTime<Utc>,
) -> Result<i64, StoreError> {
    let files = serde_json::to_string(&files).unwrap_or_else(|_| "[]".into());
    let (session, at) = (session as i64, rfc3339(at));
    let id = pg
        .fenced(
            fence,
            "INSERT INTO cryo_claims (chamber_id, session, files, claimed_at)
             SELECT f.id, $4, $5, $6 FROM f RETURNING id AS r",
            &[&session, &files, &at],
        )
        .await?;
    id.ok_or_else(|| StoreError::Postgres("the claim journal returned no id".into()))
}

pub(super) async fn journal_answer(
    pg: &Postgres,
    fence: Fence,
    session: u64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (session, at) = (session as i64, rfc3339(at));
    pg.write(
        fence,
        "UPDATE cryo_claims SET answered_at = $5
         WHERE chamber_id = (SELECT id FROM f) AND session = $4 AND answered_at IS NULL RETURNING 1::int8 AS r",
        &[&session, &at],
    )
    .await
}

pub(super) async fn journal_drop(pg: &Postgres, fence: Fence, id: i64) -> Result<(), StoreError> {
    pg.write(
        fence,
        "DELETE FROM cryo_claims WHERE id = $4 AND chamber_id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&id],
    )
    .await
}

pub(super) async fn claim_answered_by_id(
    pg: &Postgres,
    fence: Fence,
    id: i64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let at = rfc3339(at);
    pg.write(
        fence,
        "UPDATE cryo_claims SET answered_at = $5
         WHERE id = $4 AND chamber_id = (SELECT id FROM f) RETURNING 1::int8 AS r",
        &[&id, &at],
    )
    .await
}

pub(super) async fn open_claims(pg: &Postgres, chamber: i64) -> Result<Vec<OpenClaim>, StoreError> {
    let rows = pg
        .query(
            "SELECT id, session, files FROM cryo_claims
             WHERE chamber_id = $1 AND answered_at IS NULL ORDER BY id",
            &[&chamber],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| OpenClaim {
            id: r.get(0),
            session: r.get::<_, i64>(1) as u64,
            files: serde_json::from_str(r.get(2)).unwrap_or_default(),
        })
        .collect())
}
