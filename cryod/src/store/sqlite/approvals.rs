//! Approval requests in SQLite: kept when asked, decided once, taken once
//! by the agent's next ask of the same call.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};

use super::super::{APPROVAL_COLUMNS, ApprovalRecord, StoreError, read_time};
use crate::base::clock::rfc3339_ms;

fn record(r: &Row) -> rusqlite::Result<ApprovalRecord> {
    Ok(ApprovalRecord {
        id: r.get(0)?,
        chamber_id: r.get(1)?,
        session: r.get::<_, i64>(2)? as u64,
        tool: r.get(3)?,
        input: r.get(4)?,
        subject: r.get(5)?,
        reason: r.get(6)?,
        rule: r.get(7)?,
        created_at: read_time(&r.get::<_, String>(8)?),
        state: r.get(9)?,
        decided_at: r.get::<_, Option<String>>(10)?.as_deref().map(read_time),
        decided_by: r.get(11)?,
        answer: r.get(12)?,
        used_at: r.get::<_, Option<String>>(13)?.as_deref().map(read_time),
    })
}

pub(super) fn add(c: &rusqlite::Connection, a: &ApprovalRecord) -> Result<(), StoreError> {
    c.prepare_cached(
        "INSERT INTO approvals (id, chamber_id, session, tool, input, subject, reason, rule, created_at, state)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending')",
    )?
    .execute(params![
        a.id,
        a.chamber_id,
        a.session as i64,
        a.tool,
        a.input,
        a.subject,
        a.reason,
        a.rule,
        rfc3339_ms(a.created_at)
    ])?;
    Ok(())
}

pub(super) fn get(c: &rusqlite::Connection, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
    let sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1");
    Ok(c.prepare_cached(&sql)?.query_row([id], record).optional()?)
}

pub(super) fn list(
    c: &rusqlite::Connection,
    chamber: Option<i64>,
    all: bool,
    limit: u32,
) -> Result<Vec<ApprovalRecord>, StoreError> {
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE (?1 IS NULL OR chamber_id = ?1) AND (?2 OR state = 'pending')
         ORDER BY created_at DESC, id LIMIT ?3"
    );
    let mut st = c.prepare_cached(&sql)?;
    let rows = st.query_map(params![chamber, all, limit], record)?.collect::<Result<_, _>>()?;
    Ok(rows)
}

pub(super) fn decide(
    c: &rusqlite::Connection,
    id: &str,
    approve: bool,
    by: &str,
    answer: Option<&str>,
    at: DateTime<Utc>,
) -> Result<ApprovalRecord, StoreError> {
    let state = if approve { "approved" } else { "denied" };
    let at = rfc3339_ms(at);
    c.prepare_cached(
        "UPDATE approvals SET state = ?2, decided_by = ?3, answer = ?4, decided_at = ?5
         WHERE id = ?1 AND state = 'pending'",
    )?
    .execute(params![id, state, by, answer, at])?;
    let now = get(c, id)?.ok_or_else(|| StoreError::Conflict(format!("no approval request {id:?}")))?;
    // Decided by this call: its time as written, and the rest.
    if now.decided_at.map(rfc3339_ms) != Some(at) || now.decided_by.as_deref() != Some(by) || now.state != state {
        return Err(StoreError::Conflict(crate::store::approval_already(&now)));
    }
    Ok(now)
}

pub(super) fn take(
    c: &rusqlite::Connection,
    chamber: i64,
    tool: &str,
    input: &str,
    since: DateTime<Utc>,
    at: DateTime<Utc>,
) -> Result<Option<ApprovalRecord>, StoreError> {
    let (since, at) = (rfc3339_ms(since), rfc3339_ms(at));
    let sql = format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE chamber_id = ?1 AND tool = ?2 AND input = ?3
         AND state <> 'pending' AND used_at IS NULL AND decided_at >= ?4 ORDER BY decided_at DESC LIMIT 1"
    );
    let Some(mut found) = c.prepare_cached(&sql)?.query_row(params![chamber, tool, input, since], record).optional()?
    else {
        return Ok(None);
    };
    c.prepare_cached("UPDATE approvals SET used_at = ?2 WHERE id = ?1")?.execute(params![found.id, at])?;
    found.used_at = Some(read_time(&at));
    Ok(Some(found))
}
