//! Session history (the wake ledger) and the claim journal in SQLite: every
//! wake is recorded (with its trigger, due time and claimed TODOs) before
//! its agent is spawned, then updated when the agent starts and when the
//! session ends; an inbox batch is journaled before its files are archived.

use rusqlite::{OptionalExtension, params};

use super::super::history::{self, Pruned, UsageQuery};
use super::super::{OpenClaim, OpenSession, PassedSlot, SessionRow, StoreError, UsageRow, read_time};
use crate::base::clock::rfc3339;

pub(super) fn last_session_number(c: &rusqlite::Connection, chamber: i64) -> Result<u64, StoreError> {
    let n: Option<i64> = c
        .prepare_cached("SELECT max(number) FROM sessions WHERE chamber_id = ?1")?
        .query_row([chamber], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(n.unwrap_or(0) as u64)
}

pub(super) fn recent_sessions(
    c: &rusqlite::Connection,
    chamber: i64,
    limit: u32,
) -> Result<Vec<SessionRow>, StoreError> {
    let mut st = c.prepare_cached(&format!(
        "SELECT {} FROM sessions WHERE chamber_id = ?1 ORDER BY number DESC LIMIT ?2",
        crate::store::SESSION_COLUMNS
    ))?;
    let rows = st
        .query_map(params![chamber, limit], |r| {
            Ok(SessionRow {
                number: r.get::<_, i64>(0)? as u64,
                wake_id: r.get(1)?,
                trigger: r.get(2)?,
                due_at: r.get::<_, Option<String>>(3)?.as_deref().map(read_time),
                started_at: r.get::<_, Option<String>>(4)?.as_deref().map(read_time),
                lateness_ms: r.get(5)?,
                ended_at: r.get::<_, Option<String>>(6)?.as_deref().map(read_time),
                outcome: r.get(7)?,
                usage: cryo_session::Usage {
                    model: r.get(8)?,
                    input_tokens: r.get::<_, Option<i64>>(9)?.unwrap_or(0) as u64,
                    output_tokens: r.get::<_, Option<i64>>(10)?.unwrap_or(0) as u64,
                    cached_tokens: r.get::<_, Option<i64>>(11)?.unwrap_or(0) as u64,
                    // Not kept: what they cost is in the cost.
                    cache_write_tokens: 0,
                    cost_usd: r.get(12)?,
                    provider_session: r.get(13)?,
                    provider: r.get(14)?,
                },
                resumed_from: r.get::<_, Option<i64>>(15)?.map(|n| n as u64),
                thread: match (r.get::<_, Option<i64>>(16)?, r.get::<_, Option<i64>>(17)?) {
                    (Some(n), t) => Some((n as u32, t.unwrap_or(0) as u64)),
                    _ => None,
                },
                git: r.get(18)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub(super) fn open_sessions(c: &rusqlite::Connection, chamber: Option<i64>) -> Result<Vec<OpenSession>, StoreError> {
    // Through the partial index of open sessions, whatever the ledger's
    // size: an `OR` in the condition, or an order the index does not keep,
    // made SQLite walk every session instead (2 s at 300,000 rows, at every
    // start). Sorted here.
    let mut st = c.prepare_cached(OPEN_SESSIONS_SQL)?;
    let mut rows = st
        .query_map([chamber.unwrap_or(-1), chamber.is_none() as i64], |r| {
            Ok(OpenSession {
                chamber_id: r.get(0)?,
                number: r.get::<_, i64>(1)? as u64,
                wake_id: r.get(2)?,
                pid: r.get::<_, Option<i64>>(3)?.map(|p| p as u32),
                claimed: r.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    rows.sort_by_key(|s| (s.chamber_id, s.number));
    Ok(rows)
}

/// The open sessions of chamber `?1`, or of all if `?2`.
pub(super) const OPEN_SESSIONS_SQL: &str = "SELECT chamber_id, number, wake_id, pid, claimed
    FROM sessions INDEXED BY sessions_open WHERE ended_at IS NULL AND (?2 OR chamber_id = ?1)";

pub(super) fn open_claims(c: &rusqlite::Connection, chamber: i64) -> Result<Vec<OpenClaim>, StoreError> {
    let mut st = c.prepare_cached(
        "SELECT id, session, files FROM claims WHERE chamber_id = ?1 AND answered_at IS NULL ORDER BY id",
    )?;
    let rows = st
        .query_map([chamber], |r| {
            let files: String = r.get(2)?;
            Ok(OpenClaim {
                id: r.get(0)?,
                session: r.get::<_, i64>(1)? as u64,
                files: serde_json::from_str(&files).unwrap_or_default(),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub(super) fn usage(c: &rusqlite::Connection, q: &UsageQuery) -> Result<Vec<UsageRow>, StoreError> {
    let pruned: Option<String> = c
        .prepare_cached("SELECT value FROM history_marks WHERE key = ?1")?
        .query_row([history::PRUNED_BEFORE], |r| r.get(0))
        .optional()?;
    let mut rows = Vec::new();
    for (sql, args) in q.statements(&history::SQLITE, pruned.as_deref()) {
        let args = args.iter().map(|a| match a {
            history::Arg::Text(t) => rusqlite::types::Value::Text(t.clone()),
            history::Arg::Int(i) => rusqlite::types::Value::Integer(*i),
        });
        let mut st = c.prepare_cached(&sql)?;
        let found = st.query_map(rusqlite::params_from_iter(args), usage_row)?;
        for row in found {
            rows.push(row?);
        }
    }
    Ok(rows)
}

/// A row of usage sums, in the column order every usage statement selects.
pub(super) fn usage_row(r: &rusqlite::Row) -> rusqlite::Result<UsageRow> {
    Ok(UsageRow {
        chamber_id: r.get(0)?,
        day: r.get(1)?,
        provider: r.get(2)?,
        model: r.get(3)?,
        sessions: r.get::<_, i64>(4)? as u64,
        input_tokens: r.get::<_, i64>(5)? as u64,
        output_tokens: r.get::<_, i64>(6)? as u64,
        cached_tokens: r.get::<_, i64>(7)? as u64,
        cost_usd: r.get(8)?,
    })
}

/// One batch of [`history::prune_statements`]: the rows it removed.
pub(super) fn prune_batch(c: &rusqlite::Connection, before: &str) -> Result<Pruned, StoreError> {
    let [sessions, passed, claims] = history::prune_statements(&history::SQLITE);
    let run = |sql: &str| -> Result<u64, StoreError> { Ok(c.prepare_cached(sql)?.execute([before])? as u64) };
    Ok(Pruned { sessions: run(&sessions)?, passed: run(&passed)?, claims: run(&claims)? })
}

/// Records that history before `before` is (being) pruned.
pub(super) fn mark_pruned(c: &rusqlite::Connection, before: &str) -> Result<(), StoreError> {
    c.prepare_cached(
        "INSERT INTO history_marks (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
    )?
    .execute(params![history::PRUNED_BEFORE, before])?;
    Ok(())
}

pub(super) fn record_passed(c: &rusqlite::Connection, chamber: i64, slots: &[PassedSlot]) -> Result<(), StoreError> {
    let mut st = c.prepare_cached(&format!(
        "INSERT INTO passed (chamber_id, {}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        crate::store::PASSED_COLUMNS
    ))?;
    for p in slots {
        let (slot_at, todo_id, at) = (rfc3339(p.slot_at), p.todo_id.map(|n| n as i64), rfc3339(p.at));
        st.execute(params![chamber, slot_at, todo_id, p.todo_text, p.what, p.reason, at])?;
    }
    Ok(())
}

pub(super) fn passed(c: &rusqlite::Connection, chamber: i64, limit: u32) -> Result<(u64, Vec<PassedSlot>), StoreError> {
    let total: i64 =
        c.prepare_cached("SELECT count(*) FROM passed WHERE chamber_id = ?1")?.query_row([chamber], |r| r.get(0))?;
    let mut st = c.prepare_cached(&format!(
        "SELECT {} FROM passed WHERE chamber_id = ?1 ORDER BY id DESC LIMIT ?2",
        crate::store::PASSED_COLUMNS
    ))?;
    let rows = st
        .query_map(params![chamber, limit], |r| {
            Ok(PassedSlot {
                slot_at: read_time(&r.get::<_, String>(0)?),
                todo_id: r.get::<_, Option<i64>>(1)?.map(|n| n as u64),
                todo_text: r.get(2)?,
                what: r.get(3)?,
                reason: r.get(4)?,
                at: read_time(&r.get::<_, String>(5)?),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok((total as u64, rows))
}
