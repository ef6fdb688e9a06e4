//! Session history and the wake ledger: every wake is recorded (with its
//! trigger, due time and claimed TODOs) before its agent is spawned, then
//! updated when the agent starts and when the session ends.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

/// A wake about to be spawned.
#[derive(Debug, Clone)]
pub struct WakeRecord {
    pub chamber_id: i64,
    pub number: u64,
    pub wake_id: String,
    pub trigger: String,
    /// JSON array of reasons (due TODO ids, message names).
    pub reasons: String,
    /// JSON array of claimed TODO ids.
    pub claimed: String,
    pub due_at: Option<String>,
    pub created_at: String,
}

/// One row of history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub number: u64,
    pub wake_id: String,
    pub trigger: String,
    pub due_at: Option<String>,
    pub started_at: Option<String>,
    pub lateness_ms: Option<i64>,
    pub ended_at: Option<String>,
    pub outcome: Option<String>,
}

impl Store {
    pub async fn record_wake(&self, w: WakeRecord) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "INSERT INTO sessions (chamber_id, number, wake_id, trigger, reasons, claimed, due_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    w.chamber_id,
                    w.number as i64,
                    w.wake_id,
                    w.trigger,
                    w.reasons,
                    w.claimed,
                    w.due_at,
                    w.created_at
                ],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn session_started(
        &self,
        chamber_id: i64,
        number: u64,
        pid: u32,
        started_at: String,
        lateness_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE sessions SET pid = ?3, started_at = ?4, lateness_ms = ?5 WHERE chamber_id = ?1 AND number = ?2",
                params![chamber_id, number as i64, pid, started_at, lateness_ms],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn session_ended(
        &self,
        chamber_id: i64,
        number: u64,
        ended_at: String,
        outcome: String,
        detail: String,
    ) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE sessions SET ended_at = ?3, outcome = ?4, detail = ?5 WHERE chamber_id = ?1 AND number = ?2",
                params![chamber_id, number as i64, ended_at, outcome, detail],
            )?;
            Ok(())
        })
        .await
    }

    pub async fn last_session_number(&self, chamber_id: i64) -> Result<u64, StoreError> {
        self.call(move |c| {
            let n: Option<i64> = c
                .query_row("SELECT max(number) FROM sessions WHERE chamber_id = ?1", [chamber_id], |r| r.get(0))
                .optional()?
                .flatten();
            Ok(n.unwrap_or(0) as u64)
        })
        .await
    }

    /// The most recent sessions of a chamber, newest first.
    pub async fn recent_sessions(&self, chamber_id: i64, limit: u32) -> Result<Vec<SessionRow>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT number, wake_id, trigger, due_at, started_at, lateness_ms, ended_at, outcome
                 FROM sessions WHERE chamber_id = ?1 ORDER BY number DESC LIMIT ?2",
            )?;
            let rows = st
                .query_map(params![chamber_id, limit], |r| {
                    Ok(SessionRow {
                        number: r.get::<_, i64>(0)? as u64,
                        wake_id: r.get(1)?,
                        trigger: r.get(2)?,
                        due_at: r.get(3)?,
                        started_at: r.get(4)?,
                        lateness_ms: r.get(5)?,
                        ended_at: r.get(6)?,
                        outcome: r.get(7)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
}

/// A session that was never closed: cryod died while it ran.
#[derive(Debug, Clone)]
pub struct OpenSession {
    pub chamber_id: i64,
    pub number: u64,
    pub wake_id: String,
    pub pid: Option<u32>,
    /// JSON array of the claimed TODOs (see `WakeRecord::claimed`).
    pub claimed: String,
}

/// A journaled inbox batch without an answer.
#[derive(Debug, Clone)]
pub struct OpenClaim {
    pub id: i64,
    pub session: u64,
    pub files: Vec<String>,
}

impl Store {
    /// Every session of every chamber that has no end: the daemon died.
    pub async fn open_sessions(&self) -> Result<Vec<OpenSession>, StoreError> {
        self.call(|c| {
            let mut st = c.prepare(
                "SELECT chamber_id, number, wake_id, pid, claimed FROM sessions WHERE ended_at IS NULL ORDER BY chamber_id, number",
            )?;
            let rows = st
                .query_map([], |r| {
                    Ok(OpenSession {
                        chamber_id: r.get(0)?,
                        number: r.get::<_, i64>(1)? as u64,
                        wake_id: r.get(2)?,
                        pid: r.get::<_, Option<i64>>(3)?.map(|p| p as u32),
                        claimed: r.get(4)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Journals a claimed batch (before its files are archived).
    pub async fn journal_claim(
        &self,
        chamber_id: i64,
        session: u64,
        files: Vec<String>,
        at: String,
    ) -> Result<i64, StoreError> {
        self.call(move |c| {
            let files = serde_json::to_string(&files).unwrap_or_else(|_| "[]".into());
            c.execute(
                "INSERT INTO claims (chamber_id, session, files, claimed_at) VALUES (?1, ?2, ?3, ?4)",
                params![chamber_id, session as i64, files, at],
            )?;
            Ok(c.last_insert_rowid())
        })
        .await
    }

    /// Marks every open batch of a session answered.
    pub async fn journal_answer(&self, chamber_id: i64, session: u64, at: String) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute(
                "UPDATE claims SET answered_at = ?3 WHERE chamber_id = ?1 AND session = ?2 AND answered_at IS NULL",
                params![chamber_id, session as i64, at],
            )?;
            Ok(())
        })
        .await
    }

    /// Forgets a journaled batch whose files never reached the agent.
    pub async fn journal_drop(&self, id: i64) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute("DELETE FROM claims WHERE id = ?1", [id])?;
            Ok(())
        })
        .await
    }

    pub async fn open_claims(&self, chamber_id: i64) -> Result<Vec<OpenClaim>, StoreError> {
        self.call(move |c| {
            let mut st = c.prepare(
                "SELECT id, session, files FROM claims WHERE chamber_id = ?1 AND answered_at IS NULL ORDER BY id",
            )?;
            let rows = st
                .query_map([chamber_id], |r| {
                    let files: String = r.get(2)?;
                    Ok(OpenClaim {
                        id: r.get(0)?,
                        session: r.get::<_, i64>(1)? as u64,
                        files: serde_json::from_str(&files).unwrap_or_default(),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    pub async fn claim_answered_by_id(&self, id: i64, at: String) -> Result<(), StoreError> {
        self.call(move |c| {
            c.execute("UPDATE claims SET answered_at = ?2 WHERE id = ?1", params![id, at])?;
            Ok(())
        })
        .await
    }
}
