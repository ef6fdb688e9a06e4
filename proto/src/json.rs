//! The JSON forms of the protocol's objects, defined once for every client
//! (`cryoctl --json` and the hub's API print the same shapes). Fields are only
//! ever added.

use serde_json::json;

use crate::v1;

pub fn state_name(s: i32) -> &'static str {
    match v1::ChamberState::try_from(s).unwrap_or(v1::ChamberState::Unspecified) {
        v1::ChamberState::Stopped => "stopped",
        v1::ChamberState::Idle => "idle",
        v1::ChamberState::Running => "running",
        v1::ChamberState::Faulted => "faulted",
        v1::ChamberState::Paused => "paused",
        v1::ChamberState::AwaitingApproval => "awaiting approval",
        v1::ChamberState::Held => "held",
        v1::ChamberState::Unspecified => "unknown",
    }
}

pub fn desired_name(s: i32) -> &'static str {
    match v1::DesiredState::try_from(s).unwrap_or(v1::DesiredState::Unspecified) {
        v1::DesiredState::Started => "started",
        v1::DesiredState::Stopped => "stopped",
        v1::DesiredState::Unspecified => "unknown",
    }
}

/// The stable JSON form of a chamber (documented in README.md).
pub fn chamber_json(c: &v1::Chamber) -> serde_json::Value {
    json!({
        "id": c.id,
        "name": c.name,
        "path": c.path,
        "state": state_name(c.state),
        "desired": desired_name(c.desired),
        "agent": c.agent,
        "timezone": c.timezone,
        "created_at": c.created_at,
        "fault": null_if_empty(&c.fault),
        "session": c.session,
        "next_wake": null_if_empty(&c.next_wake),
        "last_result": null_if_empty(&c.last_result),
        "mail_waiting": c.mail_waiting,
        "attention": null_if_empty(&c.attention),
        "last_lateness_ms": if c.last_lateness_ms < 0 { serde_json::Value::Null } else { c.last_lateness_ms.into() },
        "error": null_if_empty(&c.error),
        "open_questions": c.open_questions,
        "bridges": c.bridges.iter().map(bridge_json).collect::<Vec<_>>(),
        "node": null_if_empty(&c.node),
        "handoffs": null_if_empty(&c.handoffs),
        "archived": c.archived,
        "sandbox": null_if_empty(&c.sandbox),
        "git": c.git.as_ref().map(git_work_json),
        "warnings": c.warnings,
        "held_by": null_if_empty(&c.held_by),
        "held_until": null_if_empty(&c.held_until),
        "acknowledged_at": null_if_empty(&c.acknowledged_at),
        "snoozed_until": null_if_empty(&c.snoozed_until),
    })
}

/// The stable JSON form of what a session did on a `[git]` branch.
pub fn git_work_json(g: &v1::GitWork) -> serde_json::Value {
    json!({
        "branch": g.branch,
        "session": g.session,
        "start": null_if_empty(&g.start),
        "end": null_if_empty(&g.end),
        "commits": g.commits,
        "files": g.files,
        "additions": g.additions,
        "deletions": g.deletions,
        "committed_leftovers": g.committed_leftovers,
        "pull_request": if g.pull_request == 0 { serde_json::Value::Null } else { json!(g.pull_request) },
        "pull_request_url": null_if_empty(&g.pull_request_url),
    })
}

/// The stable JSON form of a sync bridge's status.
pub fn bridge_json(b: &v1::Bridge) -> serde_json::Value {
    json!({
        "name": b.name,
        "state": b.state,
        "target": null_if_empty(&b.target),
        "last_pull": null_if_empty(&b.last_pull),
        "last_push": null_if_empty(&b.last_push),
        "last_error": null_if_empty(&b.last_error),
        "delivered": b.delivered,
        "posted": b.posted,
    })
}

pub fn null_if_empty(s: &str) -> serde_json::Value {
    if s.is_empty() { serde_json::Value::Null } else { s.into() }
}

/// The stable JSON form of a session.
pub fn session_json(s: &v1::SessionInfo) -> serde_json::Value {
    json!({
        "number": s.number,
        "trigger": s.trigger,
        "due_at": null_if_empty(&s.due_at),
        "started_at": null_if_empty(&s.started_at),
        "ended_at": null_if_empty(&s.ended_at),
        "lateness_ms": if s.lateness_ms < 0 { serde_json::Value::Null } else { s.lateness_ms.into() },
        "outcome": null_if_empty(&s.outcome),
        "wake_id": s.wake_id,
        "model": null_if_empty(&s.model),
        "input_tokens": s.input_tokens,
        "output_tokens": s.output_tokens,
        "cached_tokens": s.cached_tokens,
        "cost_usd": if s.cost_usd < 0.0 { serde_json::Value::Null } else { s.cost_usd.into() },
        "provider_session": null_if_empty(&s.provider_session),
        "account": null_if_empty(&s.account),
        "resumed_from": if s.resumed_from == 0 { serde_json::Value::Null } else { s.resumed_from.into() },
        "git": s.git.as_ref().map(git_work_json),
    })
}

/// The stable JSON form of a slot that passed without a session.
pub fn passed_json(p: &v1::PassedSlot) -> serde_json::Value {
    json!({
        "slot_at": p.slot_at,
        "todo": if p.todo_id == 0 { serde_json::Value::Null } else { p.todo_id.into() },
        "text": null_if_empty(&p.todo_text),
        "what": p.what,
        "reason": p.reason,
        "at": p.at,
    })
}

/// The stable JSON form of a notifier's delivery (`cryoctl notify`).
/// An approval request, as `cryoctl approvals --json`, the operator's MCP
/// tools and the hub show it: its arguments as JSON, empty texts as null.
pub fn approval_json(a: &v1::Approval) -> serde_json::Value {
    let input: serde_json::Value = serde_json::from_str(&a.input_json).unwrap_or(serde_json::Value::Null);
    json!({
        "id": a.id, "chamber": a.chamber, "session": a.session, "tool": a.tool, "input": input,
        "subject": a.subject, "reason": null_if_empty(&a.reason), "rule": a.rule, "created_at": a.created_at,
        "state": a.state, "decided_at": null_if_empty(&a.decided_at), "decided_by": null_if_empty(&a.decided_by),
        "answer": null_if_empty(&a.answer), "used_at": null_if_empty(&a.used_at),
    })
}

pub fn delivery_json(d: &v1::Delivery) -> serde_json::Value {
    json!({
        "at": d.at,
        "notifier": d.notifier,
        "event": d.event,
        "kind": d.kind,
        "chamber": null_if_empty(&d.chamber),
        "ok": d.ok,
        "outcome": d.outcome,
        "attempts": d.attempts,
        "latency_ms": d.latency_ms,
    })
}

/// The stable JSON form of a coming wake (`cryoctl schedule`).
pub fn scheduled_json(w: &v1::ScheduledWake) -> serde_json::Value {
    json!({
        "chamber": w.chamber,
        "at": w.at,
        "local": w.local,
        "timezone": w.timezone,
        "zone": w.zone,
        "todo": w.todo,
        "text": w.text,
        "repeat": null_if_empty(&w.repeat),
        "precheck": null_if_empty(&w.precheck),
        "note": null_if_empty(&w.note),
        "overdue": w.overdue,
        "held": null_if_empty(&w.held),
    })
}

/// The stable JSON form of a `[git]` chamber's diff (`cryoctl chamber diff
/// --json`, the hub's run diff).
pub fn diff_json(d: &v1::ChamberDiffReply) -> serde_json::Value {
    let files: Vec<serde_json::Value> = d
        .files
        .iter()
        .map(|f| match f.binary {
            true => json!({ "path": f.path, "additions": null, "deletions": null, "binary": true }),
            false => json!({ "path": f.path, "additions": f.additions, "deletions": f.deletions, "binary": false }),
        })
        .collect();
    json!({
        "branch": d.branch,
        "base": null_if_empty(&d.base),
        "session": if d.session == 0 { serde_json::Value::Null } else { json!(d.session) },
        "from": d.from,
        "to": d.to,
        "commits": d.commits,
        "files": files,
        "additions": d.additions,
        "deletions": d.deletions,
        "patch": d.patch,
        "cut": d.cut,
    })
}

/// The stable JSON form of a TODO.
pub fn todo_json(t: &v1::Todo) -> serde_json::Value {
    json!({
        "id": t.id,
        "text": t.text,
        "state": t.state,
        "at": null_if_empty(&t.at),
        "attempt": t.attempt,
        "every": null_if_empty(&t.every),
        "cron": null_if_empty(&t.cron),
        "precheck": null_if_empty(&t.precheck),
    })
}

/// The stable JSON form of a message.
pub fn mail_json(m: &v1::Mail) -> serde_json::Value {
    json!({
        "file": m.file,
        "direction": m.direction,
        "from": m.from,
        "subject": m.subject,
        "timestamp": m.timestamp,
        "question": m.question,
        "body": m.body,
    })
}
