//! Approval requests, as operators (cryoctl, the hub, MCP, a notice's
//! link) and agents' CLIs reach them: a call judged by the chamber's
//! supervisor, the requests listed, and a decision, taken on any node and
//! carried to the chamber's owner.

use tokio::sync::oneshot;

use super::remote::Command;
use super::*;
use crate::error::{Error, Result};
use crate::store::{ApprovalRecord, StoreError};
use crate::supervisor::{self, Event};

/// A request with its chamber's name.
#[derive(Debug, Clone)]
pub struct Named {
    pub chamber: String,
    pub record: ApprovalRecord,
}

/// Whether `id` reads as a request's id (`a` and hex digits).
pub fn valid_id(id: &str) -> bool {
    id.len() > 1 && id.len() <= 32 && id.starts_with('a') && id[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

impl Daemon {
    /// An agent's CLI asks whether a tool call of session `session` may run.
    pub async fn approve_call(&self, chamber: i64, session: u64, ask: supervisor::Ask) -> Result<supervisor::Answer> {
        let handle = self.handle_of(chamber).await?;
        let (reply, rx) = oneshot::channel();
        handle
            .tx
            .send(Event::Approve { session, ask: Box::new(ask), reply })
            .map_err(|_| Error::Unavailable("the chamber's supervisor has stopped".into()))?;
        rx.await.map_err(|_| Error::Unavailable("the session ended during the call".into()))?
    }

    /// The newest `limit` requests, of one chamber or of all; pending ones
    /// only unless `all`.
    pub async fn approvals(&self, chamber: Option<&ChamberRef>, all: bool, limit: u32) -> Result<Vec<Named>> {
        let id = match chamber {
            Some(r) => Some(self.resolve(r).await?.record.id),
            None => None,
        };
        let rows = self.0.shared.store.approvals(id, all, limit).await?;
        Ok(rows.into_iter().map(|record| Named { chamber: self.name_of(record.chamber_id), record }).collect())
    }

    /// One request.
    pub async fn approval(&self, id: &str) -> Result<Named> {
        if !valid_id(id) {
            return Err(Error::Invalid(format!(
                "{id:?} is not an approval id (they read like a1b2c3d4e5f: `cryoctl approvals` lists them)"
            )));
        }
        let record = self.0.shared.store.approval(id.to_string()).await?;
        let record = record.ok_or_else(|| {
            Error::NotFound(format!("no approval request {id:?} (`cryoctl approvals list --all` lists them)"))
        })?;
        Ok(Named { chamber: self.name_of(record.chamber_id), record })
    }

    /// A person's decision on request `id` (`by`: who, as the record keeps
    /// it): kept first, then carried to the chamber, whose session (waiting
    /// in place, or the next one) goes on with it.
    pub async fn decide_approval(&self, id: &str, approve: bool, by: &str, reason: Option<String>) -> Result<Named> {
        self.approval(id).await?;
        let reason = reason.map(|r| r.trim().chars().take(2000).collect::<String>()).filter(|r| !r.is_empty());
        let at = self.now();
        let store = &self.0.shared.store;
        let record = match store.approval_decide(id.to_string(), approve, by.to_string(), reason, at).await {
            Ok(r) => r,
            Err(StoreError::Conflict(m)) => return Err(Error::Precondition(m)),
            Err(e) => return Err(e.into()),
        };
        self.deliver_answer(&record).await;
        Ok(Named { chamber: self.name_of(record.chamber_id), record })
    }

    /// Hands a decided request to its chamber's supervisor, here or on the
    /// node that runs it. Kept in the store whatever happens: a chamber
    /// taken up later finds it there.
    async fn deliver_answer(&self, record: &ApprovalRecord) {
        let id = record.chamber_id;
        // One booting now reads the store before this answer is in it.
        self.ready(id).await;
        if let Some(h) = self.chambers().get(&id).map(|e| e.handle.clone()) {
            let _ = h.tx.send(Event::Answered(Box::new(record.clone())));
            return;
        }
        if let Some(v) = self.view_of(id).filter(|v| self.elsewhere(v)) {
            let cmd = Command::Answered { id: record.id.clone() };
            if let Err(error) = self.forward(&v, cmd).await {
                tracing::warn!(approval = %record.id, %error, "cannot carry an answer to its chamber's owner");
            }
        }
    }

    /// The owner's side of [`Command::Answered`].
    pub(super) async fn answered_here(&self, id: &str) -> Result<()> {
        let named = self.approval(id).await?;
        let handle = self.handle_of(named.record.chamber_id).await?;
        let _ = handle.tx.send(Event::Answered(Box::new(named.record)));
        Ok(())
    }

    /// A chamber's name, for a listing (its id when it is gone).
    fn name_of(&self, id: i64) -> String {
        self.view_of(id).map(|v| v.record.name).unwrap_or_else(|| format!("#{id}"))
    }
}
