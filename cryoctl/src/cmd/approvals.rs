//! `cryoctl approvals`: the tool calls chambers' `[approvals]` policies sent
//! to a person, listed, approved and denied.

use cryo_proto::v1 as pb;

use crate::client::{self, Result};
use crate::{Ctx, output};
use cryo_proto::json::approval_json;

/// `cryoctl approvals [list] [CHAMBER] [--all]`.
pub async fn list(ctx: Ctx, chamber: Option<String>, all: bool, limit: u32) -> Result<()> {
    let chamber = chamber.as_deref().map(|c| super::chamber::chamber_ref(Some(c))).transpose()?;
    let mut c = client::control(&ctx.socket).await?;
    let r = c.approvals(pb::ApprovalsRequest { chamber, all, limit }).await?.into_inner();
    if ctx.json {
        output::json(&serde_json::Value::Array(r.approvals.iter().map(approval_json).collect()));
        return Ok(());
    }
    if r.approvals.is_empty() {
        outln!("{}", if all { "no approval requests" } else { "no approval request waits" });
        return Ok(());
    }
    let rows = r
        .approvals
        .iter()
        .map(|a| {
            let state = match a.state.as_str() {
                "pending" => output::colored("pending", "33"),
                "approved" => output::colored("approved", "32"),
                s => output::colored(s, "31"),
            };
            let asks = format!("{}: {}", a.tool, a.subject.split_whitespace().collect::<Vec<_>>().join(" "));
            let by = if a.decided_by.is_empty() { String::new() } else { a.decided_by.clone() };
            vec![
                a.id.as_str().into(),
                a.chamber.as_str().into(),
                state,
                output::local_time(&a.created_at).into(),
                asks.into(),
                by.into(),
            ]
        })
        .collect();
    output::table(&["ID", "CHAMBER", "STATE", "ASKED", "CALL", "BY"], rows, 4);
    Ok(())
}

/// `cryoctl approvals approve ID` and `deny ID [--reason TEXT]`.
pub async fn decide(ctx: Ctx, id: String, approve: bool, reason: Option<String>) -> Result<()> {
    let mut c = client::control(&ctx.socket).await?;
    let req = pb::ApprovalDecideRequest { id, approve, reason: reason.unwrap_or_default(), via: String::new() };
    let a = c.approval_decide(req).await?.into_inner();
    if ctx.json {
        output::json(&approval_json(&a));
    } else {
        let done = if approve { "approved" } else { "denied" };
        outln!("{done} {} ({}: {}): {} goes on with the answer", a.id, a.tool, a.subject, a.chamber);
    }
    Ok(())
}
