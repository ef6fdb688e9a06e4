//! Approval requests in PostgreSQL: asked on the node that ran the session,
//! decided on any node, taken by the node that owns the chamber then.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use super::Postgres;
use crate::base::clock::rfc3339_ms;
use crate::store::{APPROVAL_COLUMNS, ApprovalRecord, Fence, StoreError, read_time};

fn record(r: &Row) -> ApprovalRecord {
    ApprovalRecord {
        id: r.get(0),
        chamber_id: r.get(1),
        session: r.get::<_, i64>(2) as u64,
        tool: r.get(3),
        input: r.get(4),
        subject: r.get(5),
        reason: r.get(6),
        rule: r.get(7),
        created_at: read_time(r.get(8)),
        state: r.get(9),
        decided_at: r.get::<_, Option<&str>>(10).map(read_time),
        decided_by: r.get(11),
        answer: r.get(12),
        used_at: r.get::<_, Option<&str>>(13).map(read_time),
    }
}

impl Postgres {
    pub(super) async fn approval_add_row(&self, fence: Fence, a: ApprovalRecord) -> Result<(), StoreError> {
        let (session, created_at) = (a.session as i64, rfc3339_ms(a.created_at));
        self.write(
            fence,
            "INSERT INTO cryo_approvals (id, chamber_id, session, tool, input, subject, reason, rule, created_at, state)
             SELECT $4, f.id, $5, $6, $7, $8, $9, $10, $11, 'pending' FROM f RETURNING 1::int8 AS r",
            &[&a.id, &session, &a.tool, &a.input, &a.subject, &a.reason, &a.rule, &created_at],
        )
        .await
    }

    pub(super) async fn approval_row(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let sql = format!("SELECT {APPROVAL_COLUMNS} FROM cryo_approvals WHERE id = $1");
        Ok(self.query(&sql, &[&id]).await?.first().map(record))
    }

    pub(super) async fn approval_rows(
        &self,
        chamber: Option<i64>,
        all: bool,
        limit: u32,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM cryo_approvals
             WHERE ($1::int8 IS NULL OR chamber_id = $1) AND ($2 OR state = 'pending')
             ORDER BY created_at DESC, id LIMIT $3"
        );
        let limit = limit as i64;
        Ok(self.query(&sql, &[&chamber, &all, &limit]).await?.iter().map(record).collect())
    }

    pub(super) async fn approval_decide_row(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        answer: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let (state, at) = (if approve { "approved" } else { "denied" }, rfc3339_ms(at));
        let sql = format!(
            "UPDATE cryo_approvals SET state = $2, decided_by = $3, answer = $4, decided_at = $5
             WHERE id = $1 AND state = 'pending' RETURNING {APPROVAL_COLUMNS}"
        );
        if let Some(r) = self.query(&sql, &[&id, &state, &by, &answer, &at]).await?.first() {
            return Ok(record(r));
        }
        match self.approval_row(id).await? {
            Some(a) => Err(StoreError::Conflict(crate::store::approval_already(&a))),
            None => Err(StoreError::Conflict(format!("no approval request {id:?}"))),
        }
    }

    pub(super) async fn approval_take_row(
        &self,
        fence: Fence,
        tool: &str,
        input: &str,
        since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let (since, at) = (rfc3339_ms(since), rfc3339_ms(at));
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM cryo_approvals WHERE chamber_id = $1 AND tool = $2 AND input = $3
             AND state <> 'pending' AND used_at IS NULL AND decided_at >= $4 ORDER BY decided_at DESC LIMIT 1"
        );
        let Some(mut found) = self.query(&sql, &[&fence.chamber, &tool, &input, &since]).await?.first().map(record)
        else {
            return Ok(None);
        };
        let took = self
            .fenced(
                fence,
                "UPDATE cryo_approvals SET used_at = $5
                 WHERE id = $4 AND used_at IS NULL AND chamber_id = (SELECT id FROM f) RETURNING 1::int8 AS r",
                &[&found.id, &at],
            )
            .await?;
        found.used_at = Some(read_time(&at));
        Ok(took.map(|_| found))
    }
}
