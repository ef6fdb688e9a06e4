//! `chamber sync` and `chamber todo`: its bridges and its TODO list.

use cryo_proto::json::{null_if_empty, todo_json};
use cryo_proto::v1 as pb;

use super::status::dash;
use super::*;
use crate::Ctx;
use crate::client::{self, Result};
use crate::output;

pub(super) async fn sync(ctx: &Ctx, chamber: Option<String>, action: SyncAction) -> Result<()> {
    use pb::chamber_sync_request::Action;
    let action = match action {
        SyncAction::Status => Action::Status,
        SyncAction::Pull => Action::Pull,
        SyncAction::Push => Action::Push,
    };
    let r = ask(ctx, chamber.as_deref(), |mut c, r| async move {
        c.chamber_sync(pb::ChamberSyncRequest { chamber: Some(r), action: action as i32 }).await
    })
    .await?;
    let failed: Vec<&pb::SyncResult> = r.results.iter().filter(|x| !x.error.is_empty()).collect();
    if ctx.json {
        let results: Vec<serde_json::Value> = r
            .results
            .iter()
            .map(|x| serde_json::json!({ "bridge": x.bridge, "count": x.count, "error": null_if_empty(&x.error) }))
            .collect();
        output::json(&serde_json::json!({
            "bridges": r.bridges.iter().map(cryo_proto::json::bridge_json).collect::<Vec<_>>(),
            "results": results,
        }));
    } else if r.bridges.is_empty() {
        outln!(
            "no sync bridges (configure [sync.zulip] or [sync.github] in cryo.toml; they run while the chamber is started)"
        );
    } else {
        for x in &r.results {
            let verb = if action == Action::Pull { "delivered" } else { "posted" };
            if x.error.is_empty() {
                outln!("{}: {verb} {}", x.bridge, x.count);
            }
        }
        let rows: Vec<Vec<output::Cell>> = r
            .bridges
            .iter()
            .map(|b| {
                let time = |t: &str| if t.is_empty() { "-".to_string() } else { output::local_time(t) };
                vec![
                    b.name.as_str().into(),
                    b.state.as_str().into(),
                    time(&b.last_pull).into(),
                    time(&b.last_push).into(),
                    dash(&b.last_error).into(),
                ]
            })
            .collect();
        output::table(&["BRIDGE", "STATE", "LAST PULL", "LAST PUSH", "LAST ERROR"], rows, 4);
    }
    match failed.as_slice() {
        [] => Ok(()),
        f => Err(client::Failure::refused(
            f.iter().map(|x| format!("{}: {}", x.bridge, x.error)).collect::<Vec<_>>().join("; "),
        )),
    }
}

pub(super) async fn todo(ctx: &Ctx, chamber: Option<String>, op: TodoOp) -> Result<()> {
    use pb::chamber_todo_request::Op;
    // A listing shows the same TODOs as a table or as JSON.
    let hide_done = matches!(op, TodoOp::List { all: false, .. });
    // An older page of the archive (`--before`) shows that page alone.
    let older_page = matches!(op, TodoOp::List { before: Some(_), .. });
    let op = match op {
        TodoOp::List { all, limit, before } => Op::List(pb::TodoListRequest {
            archived: if all { limit } else { 0 },
            archived_before: before.unwrap_or(0),
        }),
        TodoOp::Add { text, at, every, cron, missed, precheck } => Op::Add(pb::TodoAddRequest {
            text,
            at: at.unwrap_or_default(),
            every: every.unwrap_or_default(),
            cron: cron.unwrap_or_default(),
            missed: missed.unwrap_or_default(),
            precheck: precheck.unwrap_or_default(),
        }),
        TodoOp::Done { id } => Op::Done(pb::TodoIdRequest { id }),
        TodoOp::Remove { id } => Op::Remove(pb::TodoIdRequest { id }),
    };
    let r = ask(ctx, chamber.as_deref(), |mut c, r| {
        let op = op.clone();
        async move { c.chamber_todo(pb::ChamberTodoRequest { chamber: Some(r), op: Some(op) }).await }
    })
    .await?;
    // With --all: the archive's page (older done TODOs) first, then todo.json's.
    let current = r.todos.iter().filter(|t| !older_page && (!hide_done || t.state != "done"));
    let shown: Vec<&pb::Todo> = r.archived.iter().chain(current).collect();
    if r.archived_before > 0 {
        eprintln!("note: older done TODOs: add --before {}", r.archived_before);
    }
    if ctx.json {
        output::json(&serde_json::Value::Array(shown.iter().map(|t| todo_json(t)).collect()));
        return Ok(());
    }
    if shown.is_empty() {
        outln!("no pending TODOs");
        return Ok(());
    }
    let rows: Vec<Vec<output::Cell>> = shown
        .iter()
        .map(|t| {
            let repeat = if !t.every.is_empty() {
                format!("every {}", t.every)
            } else if !t.cron.is_empty() {
                format!("cron {}", t.cron)
            } else {
                "-".into()
            };
            let at = if t.at.is_empty() { "-".to_string() } else { output::local_time(&t.at) };
            vec![t.id.to_string().into(), t.state.as_str().into(), at.into(), repeat.into(), t.text.as_str().into()]
        })
        .collect();
    output::table(&["ID", "STATE", "AT", "REPEAT", "TEXT"], rows, 4);
    Ok(())
}
