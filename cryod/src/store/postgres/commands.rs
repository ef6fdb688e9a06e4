//! Operations on a chamber carried out by its owner for another node.
//!
//! The asking node inserts a row naming the owner and sends
//! `NOTIFY cryo_fleet 'cmd:<node>'`; the owner takes its rows, carries each
//! out as if asked locally, writes the reply and sends `'done:<id>'`. The
//! asker waits for that notification (and polls, since a notification is
//! only a hint), then deletes the row. An owner whose lease runs out before
//! answering leaves the row unanswered: the asker withdraws it and says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::Postgres;
use crate::store::StoreError;

/// Askers waiting for an answer, by command id (woken by `done:<id>`).
pub(super) type Waiters = Arc<Mutex<HashMap<i64, Arc<Notify>>>>;

/// How a command asked of another node ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Called {
    /// The owner's reply.
    Answered(String),
    /// The owner's lease ran out before it answered (it may or may not
    /// have carried the command out).
    OwnerGone,
    /// No answer within the deadline; the command was withdrawn.
    TimedOut,
}

/// A command taken by its owner.
#[derive(Debug)]
pub struct Taken {
    pub id: i64,
    pub chamber: Option<i64>,
    pub body: String,
}

/// How often an asker looks whether the owner is still there: a lease
/// running out raises no notification. (An answer does: `done:<id>`.)
const OWNER_CHECK: Duration = Duration::from_secs(1);

impl Postgres {
    /// Asks `node` to carry out `body` for `chamber` and waits (up to
    /// `deadline`) for its answer.
    pub async fn call(
        &self,
        node: &str,
        chamber: Option<i64>,
        body: &str,
        deadline: Duration,
    ) -> Result<Called, StoreError> {
        let client = self.pool.get().await?;
        let row = client
            .query_one(
                "WITH i AS (INSERT INTO cryo_commands (node, chamber_id, body, asked_by)
                            VALUES ($1, $2, $3, $4) RETURNING id)
                 SELECT id, pg_notify('cryo_fleet', 'cmd:' || $1) FROM i",
                &[&node, &chamber, &body, &self.node_id()],
            )
            .await?;
        drop(client);
        let id: i64 = row.get(0);
        let notify = Arc::new(Notify::new());
        self.waiters.lock().expect("waiters lock").insert(id, notify.clone());
        let out = self.await_answer(id, &notify, deadline).await;
        self.waiters.lock().expect("waiters lock").remove(&id);
        out
    }

    async fn await_answer(&self, id: i64, notify: &Notify, deadline: Duration) -> Result<Called, StoreError> {
        let until = tokio::time::Instant::now() + deadline;
        loop {
            // The answer, or the owner gone: either way the row goes.
            let rows = self
                .query(
                    "DELETE FROM cryo_commands c WHERE c.id = $1 AND (c.reply IS NOT NULL OR NOT EXISTS
                        (SELECT 1 FROM cryo_nodes n WHERE n.id = c.node AND n.expires_at > now()))
                     RETURNING c.reply",
                    &[&id],
                )
                .await?;
            if let Some(row) = rows.first() {
                return Ok(match row.get::<_, Option<String>>(0) {
                    Some(reply) => Called::Answered(reply),
                    None => Called::OwnerGone,
                });
            }
            let woke = tokio::select! {
                _ = notify.notified() => true,
                _ = tokio::time::sleep(OWNER_CHECK) => true,
                _ = tokio::time::sleep_until(until) => false,
            };
            if !woke {
                let withdrawn = self
                    .query("DELETE FROM cryo_commands WHERE id = $1 AND reply IS NULL RETURNING id", &[&id])
                    .await?;
                if !withdrawn.is_empty() {
                    return Ok(Called::TimedOut);
                }
                // Answered just now: read it on the next turn.
            }
        }
    }

    /// Takes the commands asked of this node.
    pub async fn take_commands(&self) -> Result<Vec<Taken>, StoreError> {
        let rows = self
            .query(
                "UPDATE cryo_commands SET taken_at = now() WHERE node = $1 AND taken_at IS NULL
                 RETURNING id, chamber_id, body",
                &[&self.node_id()],
            )
            .await?;
        Ok(rows.iter().map(|r| Taken { id: r.get(0), chamber: r.get(1), body: r.get(2) }).collect())
    }

    /// Answers a command taken from the table.
    pub async fn answer(&self, id: i64, reply: &str) -> Result<(), StoreError> {
        self.query(
            "WITH u AS (UPDATE cryo_commands SET reply = $2 WHERE id = $1 RETURNING id)
             SELECT pg_notify('cryo_fleet', 'done:' || id::text) FROM u",
            &[&id, &reply],
        )
        .await
        .map(drop)
    }

    /// Tells the chamber's owner that mail was written into its inbox here.
    pub async fn mail_written(&self, chamber: i64) -> Result<(), StoreError> {
        self.notify(&format!("mail:{chamber}")).await
    }
}
