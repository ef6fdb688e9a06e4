//! Conversions between daemon types and `cryo.v1` messages, in one place:
//! both adapters (the gRPC services in `rpc` and the hub) use them.

use std::path::PathBuf;

use cryo_proto::v1 as pb;

use crate::chamber::scaffold::Scaffolded;
use crate::daemon::{ChamberRef, ChamberView, State};
use crate::error::Error;
use crate::store::Desired;

pub fn chamber_ref(r: Option<pb::ChamberRef>) -> Result<ChamberRef, Error> {
    match r.and_then(|r| r.by) {
        Some(pb::chamber_ref::By::Name(n)) if !n.is_empty() => Ok(ChamberRef::Name(n)),
        Some(pb::chamber_ref::By::Path(p)) if !p.is_empty() => Ok(ChamberRef::Path(PathBuf::from(p))),
        _ => Err(Error::Invalid("no chamber named: give a name or a path".into())),
    }
}

pub fn chamber(v: &ChamberView) -> pb::Chamber {
    pb::Chamber {
        id: v.record.id,
        name: v.record.name.clone(),
        path: v.record.path.clone(),
        desired: match v.record.desired {
            Desired::Stopped => pb::DesiredState::Stopped,
            Desired::Started => pb::DesiredState::Started,
        } as i32,
        state: state(v.snap.view.state) as i32,
        created_at: crate::base::clock::rfc3339(v.record.created_at),
        fault: v.snap.view.fault.clone().unwrap_or_default(),
        agent: v.snap.view.agent.clone(),
        timezone: v.snap.view.timezone.clone(),
        session: v.snap.view.session,
        next_wake: v.snap.view.next_wake.map(crate::base::clock::rfc3339).unwrap_or_default(),
        last_result: v.snap.view.last_result.clone().unwrap_or_default(),
        mail_waiting: v.snap.view.mail_waiting,
        attention: v.snap.view.attention.clone().unwrap_or_default(),
        last_lateness_ms: v.snap.view.last_lateness_ms.unwrap_or(-1),
        error: v.snap.view.error.clone().unwrap_or_default(),
        open_questions: v.snap.view.open_questions,
        bridges: v.snap.bridges.iter().map(bridge).collect(),
        node: v.record.owner_name.clone().unwrap_or_default(),
        handoffs: v.snap.view.handoffs.clone().unwrap_or_default(),
        archived: v.snap.view.archived,
        sandbox: v.snap.sandbox.map(|m| m.as_str().to_string()).unwrap_or_default(),
        git: v.snap.git.as_deref().map(git_work),
        warnings: v.snap.view.warnings.clone(),
        held_by: v.snap.view.held.as_ref().map(|h| h.account.clone()).unwrap_or_default(),
        held_until: v.snap.view.held.as_ref().map(|h| crate::base::clock::rfc3339(h.until)).unwrap_or_default(),
        acknowledged_at: v.snap.view.acknowledged.map(|a| crate::base::clock::rfc3339(a.at)).unwrap_or_default(),
        snoozed_until: v
            .snap
            .view
            .acknowledged
            .and_then(|a| a.until)
            .map(crate::base::clock::rfc3339)
            .unwrap_or_default(),
    }
}

/// What a session did on a `[git]` branch, on the wire.
pub fn git_work(g: &crate::services::git::Settled) -> pb::GitWork {
    pb::GitWork {
        branch: g.branch.clone(),
        session: g.session,
        start: g.start.clone(),
        end: g.end.clone(),
        commits: g.commits,
        files: g.files,
        additions: g.additions,
        deletions: g.deletions,
        committed_leftovers: g.committed_leftovers,
        pull_request: g.pull_request.unwrap_or(0),
        pull_request_url: g.pull_request_url.clone().unwrap_or_default(),
    }
}

/// One notifier's delivery, on the wire.
pub fn delivery(d: &crate::services::notifier::Delivery) -> pb::Delivery {
    pb::Delivery {
        at: crate::base::clock::rfc3339(d.at),
        notifier: d.notifier.clone(),
        event: d.event.clone(),
        kind: d.kind.clone(),
        chamber: d.chamber.clone(),
        ok: d.ok,
        outcome: d.outcome.clone(),
        attempts: d.attempts,
        latency_ms: d.latency_ms,
    }
}

/// One coming wake, on the wire.
pub fn scheduled(p: &crate::daemon::schedule::Planned) -> pb::ScheduledWake {
    let local = p.wake.at.with_timezone(&p.tz);
    pb::ScheduledWake {
        chamber: p.chamber.clone(),
        at: crate::base::clock::rfc3339(p.wake.at),
        local: local.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        timezone: p.tz.name().to_string(),
        zone: local.format("%Z").to_string(),
        todo: p.wake.todo,
        text: p.wake.text.clone(),
        repeat: p.wake.repeat.clone().unwrap_or_default(),
        precheck: p.wake.precheck.clone().unwrap_or_default(),
        note: p.wake.note.clone().unwrap_or_default(),
        overdue: p.wake.overdue,
        held: p.held.clone().unwrap_or_default(),
    }
}

pub fn state(s: State) -> pb::ChamberState {
    match s {
        State::Stopped => pb::ChamberState::Stopped,
        State::Idle => pb::ChamberState::Idle,
        State::Running => pb::ChamberState::Running,
        State::Paused => pb::ChamberState::Paused,
        State::Faulted => pb::ChamberState::Faulted,
        State::AwaitingApproval => pb::ChamberState::AwaitingApproval,
        State::Held => pb::ChamberState::Held,
    }
}

/// The OpenMetrics text of this node's figures (see [`crate::base::metrics`]):
/// chambers by state (named as in `--json`, every state shown), admission.
/// A `[git]` chamber's diff, on the wire.
pub fn diff(d: crate::services::git::Diff) -> pb::ChamberDiffReply {
    pb::ChamberDiffReply {
        branch: d.branch,
        base: d.base.unwrap_or_default(),
        session: d.session.unwrap_or(0),
        from: d.from,
        to: d.to,
        commits: d.commits,
        files: d
            .files
            .into_iter()
            .map(|f| pb::DiffFile {
                path: f.path,
                additions: f.additions.unwrap_or(0),
                deletions: f.deletions.unwrap_or(0),
                binary: f.additions.is_none(),
            })
            .collect(),
        additions: d.additions,
        deletions: d.deletions,
        patch: d.patch,
        cut: d.cut,
    }
}

pub fn metrics(daemon: &crate::daemon::Daemon) -> String {
    use pb::ChamberState as S;
    let mut gauges = crate::base::metrics::Gauges::default();
    for s in [S::Stopped, S::Idle, S::Running, S::Paused, S::Faulted, S::AwaitingApproval, S::Held] {
        gauges.chambers.insert(cryo_proto::json::state_name(s as i32).into(), 0);
    }
    for s in daemon.local_states() {
        *gauges.chambers.entry(cryo_proto::json::state_name(state(s) as i32).into()).or_default() += 1;
    }
    let slots = daemon.slots();
    (gauges.admission_queued, gauges.admission_running, gauges.admission_limit) =
        (slots.queued as u64, slots.running as u64, slots.limit as u64);
    gauges.frozen = daemon.frozen() as u64;
    crate::base::metrics::get().render(&gauges)
}

pub fn bridge(b: &cryo_sync::Status) -> pb::Bridge {
    pb::Bridge {
        name: b.bridge.clone(),
        state: b.state.clone(),
        target: b.target.clone(),
        last_pull: b.last_pull.map(crate::base::clock::rfc3339).unwrap_or_default(),
        last_push: b.last_push.map(crate::base::clock::rfc3339).unwrap_or_default(),
        last_error: b.last_error.clone().unwrap_or_default(),
        delivered: b.delivered,
        posted: b.posted,
    }
}

pub fn init_reply(path: String, s: Scaffolded) -> pb::ChamberInitReply {
    let sandbox = s.sandbox.map(|m| m.as_str().to_string()).unwrap_or_default();
    pb::ChamberInitReply { path, created: s.created, kept: s.kept, sandbox }
}

/// A budget and its use.
pub fn budget_use(u: &crate::supervisor::budget::BudgetUse) -> pb::BudgetUse {
    pb::BudgetUse {
        who: u.who.clone(),
        key: u.key.to_string(),
        limit: u.limit,
        used: u.used,
        period: u.period.clone(),
        line: u.line(),
    }
}

/// A requested sandbox mode: empty means the strongest.
pub fn sandbox_mode(s: &str) -> Result<Option<crate::config::Sandbox>, tonic::Status> {
    if s.is_empty() {
        return Ok(None);
    }
    crate::config::Sandbox::parse(s)
        .map(Some)
        .ok_or_else(|| tonic::Status::invalid_argument(format!("sandbox {s:?}: expected off, landlock or bwrap")))
}

/// An optional string field: empty means unset.
pub fn opt(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// A stored message as a `Mail`.
pub fn mail(m: &crate::chamber::mailbox::Stored) -> pb::Mail {
    pb::Mail {
        file: m.name.clone(),
        from: m.message.from.clone(),
        subject: m.message.subject.clone(),
        timestamp: m.when.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        body: m.message.body.clone(),
        question: m.message.question,
        direction: if m.folder.incoming() { "in" } else { "out" }.to_string(),
    }
}

/// A TODO, its times in `tz`.
pub fn todo(t: &cryo_core::todo::Todo, tz: chrono_tz::Tz) -> pb::Todo {
    use cryo_core::todo::Repeat;
    pb::Todo {
        id: t.id,
        text: t.text.clone(),
        state: if t.done {
            "done"
        } else if t.claimed {
            "claimed"
        } else {
            "pending"
        }
        .to_string(),
        at: t.at.map(|a| cryo_core::time::format_in(a, tz)).unwrap_or_default(),
        attempt: t.attempt,
        every: match &t.repeat {
            Some(Repeat::Every(d)) => cryo_core::time::format_duration(*d),
            _ => String::new(),
        },
        precheck: t.precheck.clone().unwrap_or_default(),
        cron: match &t.repeat {
            Some(Repeat::Cron(c)) => c.clone(),
            _ => String::new(),
        },
    }
}

pub fn todo_add(r: &pb::TodoAddRequest) -> crate::supervisor::TodoCall {
    crate::supervisor::TodoCall::Add {
        text: r.text.clone(),
        at: r.at.clone(),
        every: r.every.clone(),
        cron: r.cron.clone(),
        missed: r.missed.clone(),
        precheck: r.precheck.clone(),
    }
}

pub fn passed(p: &crate::store::PassedSlot) -> pb::PassedSlot {
    pb::PassedSlot {
        slot_at: crate::base::clock::rfc3339(p.slot_at),
        todo_id: p.todo_id.unwrap_or(0),
        todo_text: p.todo_text.clone().unwrap_or_default(),
        what: p.what.clone(),
        reason: p.reason.clone(),
        at: crate::base::clock::rfc3339(p.at),
    }
}

pub fn session(s: &crate::store::SessionRow) -> pb::SessionInfo {
    pb::SessionInfo {
        number: s.number,
        trigger: s.trigger.clone(),
        due_at: s.due_at.map(crate::base::clock::rfc3339).unwrap_or_default(),
        started_at: s.started_at.map(crate::base::clock::rfc3339).unwrap_or_default(),
        ended_at: s.ended_at.map(crate::base::clock::rfc3339).unwrap_or_default(),
        lateness_ms: s.lateness_ms.unwrap_or(-1),
        outcome: s.outcome.clone().unwrap_or_default(),
        wake_id: s.wake_id.clone(),
        model: s.usage.model.clone().unwrap_or_default(),
        input_tokens: s.usage.input_tokens,
        output_tokens: s.usage.output_tokens,
        cached_tokens: s.usage.cached_tokens,
        cost_usd: s.usage.cost_usd.unwrap_or(-1.0),
        provider_session: s.usage.provider_session.clone().unwrap_or_default(),
        resumed_from: s.resumed_from.unwrap_or(0),
        git: s
            .git
            .as_deref()
            .and_then(|j| serde_json::from_str::<crate::services::git::Settled>(j).ok())
            .map(|g| git_work(&g)),
        account: s.usage.provider.clone().unwrap_or_default(),
    }
}

/// A TODO list answer as the protocol (and the hub's JSON) carries it.
pub fn todos_reply(r: crate::supervisor::AgentReply) -> Result<pb::TodoListReply, tonic::Status> {
    match r {
        crate::supervisor::AgentReply::Todos { todos, tz } => Ok(pb::TodoListReply {
            todos: todos.iter().map(|t| todo(t, tz)).collect(),
            timezone: tz.name().to_string(),
            ..Default::default()
        }),
        _ => Err(Error::Internal("unexpected reply from the supervisor".into()).into()),
    }
}

/// Usage rows summed by `by` ("chamber", the default, "provider", "day" or
/// "model"), largest cost first (days in order), with their total. A key
/// that is unknown (a chamber no longer listed, a session with no model)
/// sums as "-".
pub fn usage(
    rows: &[crate::store::UsageRow],
    names: &std::collections::HashMap<i64, String>,
    by: &str,
) -> Result<pb::UsageReply, Error> {
    type Key = fn(&crate::store::UsageRow, &std::collections::HashMap<i64, String>) -> Option<String>;
    let key: Key = match by {
        "" | "chamber" => |r, names| names.get(&r.chamber_id).cloned(),
        "provider" => |r, _| r.provider.clone(),
        "day" => |r, _| Some(r.day.clone()),
        "model" => |r, _| r.model.clone(),
        _ => return Err(Error::Invalid(format!("cannot sum usage by {by:?}: give chamber, provider, day or model"))),
    };
    let add = |into: &mut pb::UsageRow, r: &crate::store::UsageRow| {
        into.sessions += r.sessions;
        into.input_tokens += r.input_tokens;
        into.output_tokens += r.output_tokens;
        into.cached_tokens += r.cached_tokens;
        into.cost_usd += r.cost_usd;
    };
    let mut sums: std::collections::BTreeMap<String, pb::UsageRow> = Default::default();
    let mut total = pb::UsageRow { key: "total".into(), ..Default::default() };
    for r in rows {
        let k = key(r, names).unwrap_or_else(|| "-".into());
        add(sums.entry(k.clone()).or_insert_with(|| pb::UsageRow { key: k, ..Default::default() }), r);
        add(&mut total, r);
    }
    let mut rows: Vec<pb::UsageRow> = sums.into_values().collect();
    if by != "day" {
        rows.sort_by(|a, b| b.cost_usd.total_cmp(&a.cost_usd).then(b.sessions.cmp(&a.sessions)));
    }
    Ok(pb::UsageReply { rows, total: Some(total) })
}

/// The provider accounts held at their limit now.
/// The session slots now, and whether their number was derived.
pub fn admission(daemon: &crate::daemon::Daemon) -> Option<pb::Admission> {
    let slots = daemon.slots();
    Some(pb::Admission {
        limit: slots.limit as u32,
        running: slots.running as u32,
        waiting: slots.waiting as u32,
        derived: daemon.config().max_concurrent_sessions.is_none(),
    })
}

pub fn holds(daemon: &crate::daemon::Daemon) -> Vec<pb::ProviderHold> {
    let now = daemon.now();
    daemon
        .holds()
        .into_iter()
        .map(|h| {
            let names = daemon.names(h.chambers.iter().copied());
            let mut chambers: Vec<String> = names.into_values().collect();
            chambers.sort();
            (h, chambers)
        })
        .map(|(h, chambers)| pb::ProviderHold {
            chambers,
            until: crate::base::clock::rfc3339(now + chrono::Duration::from_std(h.left).unwrap_or_default()),
            provider: h.provider,
            waiting: h.waiting as u32,
            default_hold: h.guessed,
            source: h.source.unwrap_or_default(),
        })
        .collect()
}

/// An approval request on the wire.
/// A request as the hub's JSON shows it (its list, its answers, its event
/// frames): `approvals --json`'s shape, with the one line that says what
/// it asks (`what`).
pub fn approval_value(n: &crate::daemon::approvals::Named) -> serde_json::Value {
    let mut v = cryo_proto::json::approval_json(&approval(n));
    v["what"] = crate::services::approvals::what(&n.record).into();
    v
}

pub fn approval(n: &crate::daemon::approvals::Named) -> pb::Approval {
    let a = &n.record;
    pb::Approval {
        id: a.id.clone(),
        chamber: n.chamber.clone(),
        session: a.session,
        tool: a.tool.clone(),
        input_json: a.input.clone(),
        subject: a.subject.clone(),
        reason: a.reason.clone(),
        rule: a.rule.clone(),
        // A request's times are kept to the millisecond, and shown so.
        created_at: crate::base::clock::rfc3339_ms(a.created_at),
        state: a.state.clone(),
        decided_at: a.decided_at.map(crate::base::clock::rfc3339_ms).unwrap_or_default(),
        decided_by: a.decided_by.clone().unwrap_or_default(),
        answer: a.answer.clone().unwrap_or_default(),
        used_at: a.used_at.map(crate::base::clock::rfc3339_ms).unwrap_or_default(),
    }
}

/// `cryoctl fleet status`: the nodes as the database sees them.
pub fn fleet_status(s: crate::daemon::FleetStatus) -> pb::FleetStatusReply {
    use crate::services::lease::Trust;
    let trust = match s.trust {
        Trust::Held { .. } => "held",
        Trust::Frozen { .. } => "frozen",
        Trust::Lost { .. } => "lost",
    };
    let Some(fleet) = s.nodes else {
        // One machine: its lease is always held.
        return pb::FleetStatusReply { fleet: false, store: s.store, trust: "held".into(), ..Default::default() };
    };
    pb::FleetStatusReply {
        fleet: true,
        store: s.store,
        unowned: fleet.unowned,
        trust: trust.into(),
        nodes: fleet
            .nodes
            .into_iter()
            .map(|n| pb::FleetNode {
                this: n.id == fleet.me,
                id: n.id,
                name: n.name,
                domain: n.domain,
                host: n.host,
                pid: n.pid,
                capacity: n.capacity,
                draining: n.draining,
                lease_left_ms: n.lease_left_ms,
                renewed_ago_ms: n.renewed_ago_ms,
                chambers: n.chambers,
                started_at: n.started_at,
            })
            .collect(),
    }
}
