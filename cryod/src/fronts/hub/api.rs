//! The hub's JSON API: one handler per route, each calling the same
//! [`Daemon`] operation as the gRPC services and printing the same JSON as
//! `cryoctl --json`.

use axum::extract::{Path as UrlPath, Query, State};
use axum::response::{IntoResponse, Response};
use cryo_proto::json as j;
use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::daemon::{ChamberRef, ChamberView};
use crate::error::Error;
use crate::fronts::convert;
use crate::supervisor::TodoCall;

/// An error as a status and one line of JSON.
pub(super) struct ApiError(pub(super) Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Error::Internal(m) = &self.0 {
            tracing::error!(error = %m, "hub request failed");
        }
        (self.0.http_status(), axum::Json(json!({ "error": self.0.to_string() }))).into_response()
    }
}

pub(super) type ApiResult = Result<axum::Json<Value>, ApiError>;

pub(super) async fn view(hub: &Hub, name: &str) -> Result<ChamberView, ApiError> {
    Ok(hub.daemon.resolve(&ChamberRef::Name(name.to_string())).await?)
}

pub(super) fn chamber_value(v: &ChamberView) -> Value {
    let mut c = j::chamber_json(&convert::chamber(v));
    let archived = c["archived"].as_bool().unwrap_or(false);
    c["actions"] = json!(actions(c["state"].as_str().unwrap_or_default(), archived));
    c
}

/// The controls the page offers a chamber in `state`: the page draws what
/// cryod says here rather than keep a copy of the rule.
pub(super) fn actions(state: &str, archived: bool) -> &'static [&'static str] {
    if archived {
        return &["unarchive", "reset"];
    }
    match state {
        "stopped" => &["start", "archive", "reset"],
        "idle" => &["wake", "pause", "stop"],
        "running" => &["pause", "stop"],
        "paused" => &["resume", "stop"],
        // Answered on the approvals panel; until then it can be stopped.
        "awaiting approval" => &["stop"],
        "held" => &["wake", "pause", "stop"],
        "faulted" => &["start", "stop", "reset"],
        _ => &[],
    }
}

/// `GET /api/limits`: provider accounts held at their limit now
/// (`provider`, `until`, `waiting`).
pub(super) async fn limits(State(hub): State<Hub>) -> ApiResult {
    let holds = convert::holds(&hub.daemon);
    let v = holds.iter().map(
        |h| json!({ "provider": h.provider, "until": h.until, "waiting": h.waiting, "default_hold": h.default_hold, "source": h.source, "chambers": h.chambers }),
    );
    Ok(axum::Json(Value::Array(v.collect())))
}

pub(super) type Who = axum::Extension<Role>;

/// What a guest sees of a chamber: its name and whether it is busy, never
/// its folder, agent, log or attention lines.
pub(super) fn guest_chamber_value(v: &ChamberView) -> Value {
    let c = chamber_value(v);
    json!({
        "name": c["name"], "state": c["state"], "next_wake": c["next_wake"],
        "open_questions": c["open_questions"], "mail_waiting": c["mail_waiting"],
    })
}

pub(super) fn chamber_value_for(role: &Role, v: &ChamberView) -> Value {
    match role {
        Role::Owner => chamber_value(v),
        Role::Guest(_) => guest_chamber_value(v),
    }
}

/// What the list page draws of a chamber (`web/list.js`: a row, the
/// queue's item, the search; `web/app.js`: who waits on a hold), under the
/// whole chamber's names and with its values ([`chamber_value`]), built
/// from the view without the rest. At 1,000 chambers it is 3 in 10 of the
/// whole list's bytes to send and parse before the first row (issue 63).
pub(super) fn chamber_row(v: &ChamberView) -> Value {
    let s = &v.snap.view;
    let time = |t: Option<_>| t.map_or(Value::Null, |t| crate::base::clock::rfc3339(t).into());
    let text = |t: Option<&str>| j::null_if_empty(t.unwrap_or_default());
    let state = j::state_name(convert::state(s.state) as i32);
    json!({
        "name": v.record.name,
        "state": state,
        "agent": s.agent,
        "session": s.session,
        "next_wake": time(s.next_wake),
        "last_result": text(s.last_result.as_deref()),
        "attention": text(s.attention.as_deref()),
        "fault": text(s.fault.as_deref()),
        "mail_waiting": s.mail_waiting,
        "open_questions": s.open_questions,
        "node": text(v.record.owner_name.as_deref()),
        "archived": s.archived,
        "held_by": text(s.held.as_ref().map(|h| h.account.as_str())),
        "acknowledged_at": time(s.acknowledged.map(|a| a.at)),
        "snoozed_until": time(s.acknowledged.and_then(|a| a.until)),
        "actions": actions(state, s.archived),
    })
}

#[derive(Deserialize)]
pub(super) struct ListQuery {
    /// Archived chambers too (`?archived=1`).
    #[serde(default)]
    archived: Option<String>,
    /// `row`: only what the list page draws of each ([`chamber_row`]);
    /// without it, the whole chamber (scripts, other pages).
    #[serde(default)]
    fields: Option<String>,
}

pub(super) async fn list(State(hub): State<Hub>, axum::Extension(role): Who, Query(q): Query<ListQuery>) -> ApiResult {
    let archived = q.archived.is_some_and(|a| !matches!(a.as_str(), "" | "0" | "false"));
    let row = match q.fields.as_deref() {
        None | Some("") => false,
        Some("row") => true,
        Some(other) => return Err(Error::Invalid(format!("fields={other:?}: the one shape is `row`")).into()),
    };
    let list = hub.daemon.listed(archived).await;
    let seen = list.iter().filter(|v| role.sees(&v.record.name));
    let lean = |v: &ChamberView| match (row, &role) {
        (true, Role::Owner) => chamber_row(v),
        // A guest's shape is already no more than a row.
        _ => chamber_value_for(&role, v),
    };
    Ok(axum::Json(Value::Array(seen.map(lean).collect())))
}

/// `GET /api/me`: the role of the token in use (`owner`, or `guest` with
/// its `name` and `chambers`).
pub(super) async fn me(axum::Extension(role): Who) -> ApiResult {
    Ok(axum::Json(match role {
        Role::Owner => json!({ "role": "owner" }),
        Role::Guest(g) => json!({ "role": "guest", "name": g.name, "chambers": g.chambers }),
    }))
}

#[derive(Deserialize)]
pub(super) struct NewInvite {
    name: String,
    chambers: Vec<String>,
}

/// `POST /api/invites` `{name, chambers}`: mints a guest's link, answering
/// `{name, token, link}` (the token is shown this once).
pub(super) async fn invite_add(State(hub): State<Hub>, axum::Json(n): axum::Json<NewInvite>) -> ApiResult {
    let mut chambers = Vec::new();
    for c in &n.chambers {
        chambers.push(view(&hub, c).await?.record.name);
    }
    chambers.dedup();
    let created = crate::base::clock::rfc3339(hub.daemon.now());
    let token = hub.invites.mint(n.name.trim(), chambers, created)?;
    let link = hub.daemon.hub_link(&format!("#token={token}"));
    Ok(axum::Json(json!({ "name": n.name.trim(), "token": token, "link": link })))
}

/// `GET /api/invites`: each invite's name, chambers and when it was made.
pub(super) async fn invite_list(State(hub): State<Hub>) -> ApiResult {
    let list = hub.invites.list();
    let v = list.iter().map(|i| json!({ "name": i.name, "chambers": i.chambers, "created": i.created }));
    Ok(axum::Json(Value::Array(v.collect())))
}

/// `DELETE /api/invites/NAME`: revokes it; its guest is cut off at once.
pub(super) async fn invite_remove(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    hub.invites.revoke(&name)?;
    Ok(axum::Json(json!({ "revoked": name })))
}

#[derive(Deserialize)]
pub(super) struct NewChamber {
    dir: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    start: bool,
}

pub(super) async fn create(State(hub): State<Hub>, axum::Json(n): axum::Json<NewChamber>) -> ApiResult {
    let name = (!n.name.is_empty()).then_some(n.name.as_str());
    let agent = (!n.agent.is_empty()).then_some(n.agent.as_str());
    let added = hub.daemon.add(Path::new(&n.dir), name, true, agent, None).await?;
    let mut v = added.view;
    if n.start {
        v = hub.daemon.start(&ChamberRef::Name(v.record.name.clone()), false).await?.0;
    }
    Ok(axum::Json(json!({ "chamber": chamber_value(&v), "already_registered": added.already_registered })))
}

#[derive(Deserialize)]
pub(super) struct ChamberQuery {
    /// How many of its newest sessions (10 unless asked; at most 500).
    #[serde(default)]
    sessions: Option<u32>,
}

pub(super) async fn chamber(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<ChamberQuery>,
) -> ApiResult {
    let v = hub.chamber_for(&role, &name).await?;
    if let Role::Guest(_) = role {
        return Ok(axum::Json(json!({ "chamber": guest_chamber_value(&v), "sessions": [] })));
    }
    let sessions = hub.daemon.sessions(v.record.id, q.sessions.unwrap_or(10).clamp(1, 500)).await?;
    let sessions: Vec<Value> = sessions.iter().map(|s| j::session_json(&convert::session(s))).collect();
    Ok(axum::Json(json!({ "chamber": chamber_value(&v), "sessions": sessions })))
}

pub(super) async fn remove(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = hub.daemon.remove(&ChamberRef::Name(name)).await?;
    Ok(axum::Json(chamber_value(&v)))
}

#[derive(Deserialize, Default)]
pub(super) struct ControlBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    replace: bool,
    /// A reset's confirmation: the chamber's name.
    #[serde(default)]
    confirm: String,
    /// An acknowledgement's snooze: until this time (RFC 3339) ...
    #[serde(default)]
    until: String,
    /// ... or for this many seconds (neither: until what needs you changes).
    #[serde(default)]
    snooze_secs: u64,
}

pub(super) async fn control(
    State(hub): State<Hub>,
    UrlPath((name, action)): UrlPath<(String, String)>,
    body: Option<axum::Json<ControlBody>>,
) -> ApiResult {
    let r = ChamberRef::Name(name);
    let body = body.map(|b| b.0).unwrap_or_default();
    let v = match action.as_str() {
        "start" => hub.daemon.start(&r, true).await?.0,
        "stop" => hub.daemon.stop(&r, true).await?.0,
        "pause" => hub.daemon.pause(&r, true).await?.0,
        "resume" => hub.daemon.pause(&r, false).await?.0,
        "archive" => hub.daemon.archive(&r, true).await?.0,
        "unarchive" => hub.daemon.archive(&r, false).await?.0,
        "reset" => {
            let v = hub.daemon.resolve(&r).await?;
            if body.confirm != v.record.name {
                let why = format!(
                    "a reset moves the chamber's files into history/: confirm it with {{\"confirm\": {:?}}}",
                    v.record.name
                );
                return Err(Error::Invalid(why).into());
            }
            let (v, history) = hub.daemon.reset(&r).await?;
            let mut value = chamber_value(&v);
            value["history"] = history.into();
            return Ok(axum::Json(value));
        }
        "wake" => {
            let message = (!body.message.trim().is_empty()).then(|| body.message.clone());
            hub.daemon.wake(&r, message, body.replace).await?.0
        }
        "acknowledge" => {
            let snooze = crate::daemon::Snooze { until: body.until, secs: body.snooze_secs };
            hub.daemon.acknowledge(&r, snooze).await?
        }
        other => {
            let actions = "start, stop, pause, resume, wake, archive, unarchive, reset, acknowledge";
            return Err(Error::NotFound(format!("no action {other:?} ({actions})")).into());
        }
    };
    Ok(axum::Json(chamber_value(&v)))
}

/// The changes of a `trust` as JSON: each key, its value when last
/// accepted (null: not known) and now.
fn changes_value(changes: &[crate::chamber::trust::Change]) -> Value {
    changes.iter().map(|c| json!({ "key": c.key, "before": c.before, "after": c.after })).collect()
}

/// `GET /api/chambers/NAME/trust`: what changed in its `cryo.toml` since
/// the operator last accepted it (`cryoctl chamber trust NAME --diff`).
pub(super) async fn trust_diff(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let (v, changes) = hub.daemon.trust(&ChamberRef::Name(name), None, true).await?;
    Ok(axum::Json(json!({ "chamber": chamber_value(&v), "changes": changes_value(&changes) })))
}

/// `POST /api/chambers/NAME/trust`: the operator accepts its `cryo.toml`
/// as it is (`cryoctl chamber trust NAME`).
pub(super) async fn trust_accept(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let (v, changes) = hub.daemon.trust(&ChamberRef::Name(name), None, false).await?;
    Ok(axum::Json(json!({ "chamber": chamber_value(&v), "accepted": changes_value(&changes) })))
}

#[derive(Deserialize)]
pub(super) struct Page {
    /// The `file` of the oldest message shown: the page before it.
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    /// The older name for `limit`.
    #[serde(default)]
    last: Option<usize>,
}

/// `GET /api/chambers/NAME/messages[?before=FILE][&limit=N]`: a page of the
/// conversation, oldest first, each message with its `html` (Markdown made
/// safe) beside its `body`. An empty page: nothing older.
pub(super) async fn messages(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<Page>,
) -> ApiResult {
    let v = hub.chamber_for(&role, &name).await?;
    let n = q.limit.or(q.last).unwrap_or(100).clamp(1, 1000);
    let page = hub.daemon.conversation_page(&v, q.before.as_deref(), n).await?;
    Ok(axum::Json(Value::Array(page.iter().map(message_value).collect())))
}

/// A message as `cryoctl --json` prints it, with its `html`.
pub(super) fn message_value(m: &crate::chamber::mailbox::Stored) -> Value {
    let mut v = j::mail_json(&convert::mail(m));
    v["html"] = Value::String(markdown::to_html(&m.message.body));
    v
}

#[derive(Deserialize)]
pub(super) struct SendBody {
    text: String,
    #[serde(default)]
    subject: String,
}

/// `POST /api/chambers/NAME/messages`: mail to the agent, from the
/// operator or, stamped with its name, from a guest.
pub(super) async fn send(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath(name): UrlPath<String>,
    axum::Json(b): axum::Json<SendBody>,
) -> Response {
    let v = match hub.chamber_for(&role, &name).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    if let Some(refused) = hub.over_rate(&role, false) {
        return refused;
    }
    let from = match &role {
        Role::Owner => "operator".to_string(),
        Role::Guest(g) => format!("{} (guest)", g.name),
    };
    match hub.daemon.send(&ChamberRef::Name(v.record.name), &from, &b.subject, &b.text).await {
        Ok(d) => axum::Json(json!({ "file": d.file, "waits": d.waits })).into_response(),
        Err(e) => ApiError(e).into_response(),
    }
}

pub(super) fn todos_value(reply: crate::supervisor::AgentReply) -> ApiResult {
    let list = convert::todos_reply(reply).map_err(|s| ApiError(Error::Internal(s.message().to_string())))?;
    Ok(axum::Json(Value::Array(list.todos.iter().map(j::todo_json).collect())))
}

pub(super) async fn todos(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), TodoCall::List).await?)
}

#[derive(Deserialize)]
pub(super) struct DoneQuery {
    /// The page ending here (a page's `before`); none: the newest.
    before: Option<u64>,
    limit: Option<u32>,
}

/// `GET /api/chambers/NAME/todos/done`: done TODOs, newest last, a page at
/// a time: the first page is the archive's newest and `todo.json`'s done
/// ones; `before` names the page before it (`null`: none).
pub(super) async fn todos_done(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<DoneQuery>,
) -> ApiResult {
    let chamber = ChamberRef::Name(name);
    let reply = hub.daemon.todo(&chamber, TodoCall::List).await?;
    let mut list = convert::todos_reply(reply).map_err(|s| ApiError(Error::Internal(s.message().to_string())))?;
    let req = cryo_proto::v1::TodoListRequest {
        archived: q.limit.unwrap_or(50).clamp(1, 500),
        archived_before: q.before.unwrap_or(0),
    };
    let v = hub.daemon.resolve(&chamber).await?;
    let tz: chrono_tz::Tz = list.timezone.parse().unwrap_or(chrono_tz::UTC);
    let (archived, next) = hub.daemon.archived_todos(&v, tz, req.archived_before, req.archived).await?;
    let current = list.todos.drain(..).filter(|t| t.state == "done" && q.before.is_none());
    let todos: Vec<Value> =
        archived.iter().map(|t| convert::todo(t, tz)).chain(current).map(|t| j::todo_json(&t)).collect();
    Ok(axum::Json(json!({ "todos": todos, "before": (next > 0).then_some(next) })))
}

#[derive(Deserialize)]
pub(super) struct PushBody {
    endpoint: String,
    keys: crate::services::notifier::webpush::Keys,
    #[serde(default)]
    name: String,
}

/// `GET /api/push`: the VAPID key (the page's `applicationServerKey`) and
/// the devices subscribed (their names and push services, never their keys).
pub(super) async fn push_list(State(hub): State<Hub>) -> ApiResult {
    let notifiers = hub.daemon.notifiers();
    let key = notifiers.push_key().map_err(Error::from)?;
    let subs: Vec<Value> = notifiers
        .devices()
        .iter()
        .map(|s| {
            let service =
                reqwest::Url::parse(&s.endpoint).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
            json!({ "name": s.name, "service": service, "endpoint": s.endpoint })
        })
        .collect();
    Ok(axum::Json(json!({ "key": key, "subscriptions": subs })))
}

/// `POST /api/push`: subscribes a device (replacing one with the same endpoint).
pub(super) async fn push_add(State(hub): State<Hub>, axum::Json(b): axum::Json<PushBody>) -> ApiResult {
    let sub = crate::services::notifier::webpush::Subscription { endpoint: b.endpoint, keys: b.keys, name: b.name };
    let n = hub.daemon.notifiers().subscribe(sub).map_err(Error::from)?;
    Ok(axum::Json(json!({ "subscriptions": n })))
}

#[derive(Deserialize)]
pub(super) struct PushRemove {
    endpoint: String,
}

/// `DELETE /api/push`: forgets a device.
pub(super) async fn push_remove(State(hub): State<Hub>, axum::Json(b): axum::Json<PushRemove>) -> ApiResult {
    match hub.daemon.notifiers().unsubscribe(&[b.endpoint]).map_err(Error::from)? {
        Some(n) => Ok(axum::Json(json!({ "subscriptions": n }))),
        None => Err(Error::NotFound("no device with that endpoint".into()).into()),
    }
}

#[derive(Deserialize)]
pub(super) struct TodoBody {
    text: String,
    #[serde(default)]
    at: String,
    #[serde(default)]
    every: String,
    #[serde(default)]
    cron: String,
    #[serde(default)]
    precheck: String,
}

pub(super) async fn todo_add(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    axum::Json(b): axum::Json<TodoBody>,
) -> ApiResult {
    let call = TodoCall::Add {
        text: b.text,
        at: b.at,
        every: b.every,
        cron: b.cron,
        missed: String::new(),
        precheck: b.precheck,
    };
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), call).await?)
}

pub(super) async fn todo_done(State(hub): State<Hub>, UrlPath((name, id)): UrlPath<(String, u64)>) -> ApiResult {
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), TodoCall::Done(id)).await?)
}

pub(super) async fn todo_remove(State(hub): State<Hub>, UrlPath((name, id)): UrlPath<(String, u64)>) -> ApiResult {
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), TodoCall::Remove(id)).await?)
}

pub(super) async fn plan(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = view(&hub, &name).await?;
    Ok(axum::Json(json!({ "text": hub.daemon.read_chamber_file(&v, "plan.md").await? })))
}

#[derive(Deserialize)]
pub(super) struct PlanBody {
    text: String,
}

pub(super) async fn plan_put(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    axum::Json(b): axum::Json<PlanBody>,
) -> ApiResult {
    let v = view(&hub, &name).await?;
    hub.daemon.write_plan(&v, &b.text).await?;
    Ok(axum::Json(json!({ "saved": true })))
}

pub(super) async fn notes(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = view(&hub, &name).await?;
    Ok(axum::Json(json!({ "text": hub.daemon.read_chamber_file(&v, "NOTES.md").await? })))
}

#[derive(Deserialize)]
pub(super) struct DiffQuery {
    /// One session's changes (none: the branch's since its base).
    #[serde(default)]
    session: Option<u64>,
}

/// `GET /api/chambers/NAME/diff[?session=N]`: a `[git]` chamber's changes,
/// as `cryoctl chamber diff --json` prints them.
pub(super) async fn diff(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<DiffQuery>,
) -> ApiResult {
    let v = view(&hub, &name).await?;
    let d = hub.daemon.chamber_diff(&v, q.session.filter(|n| *n > 0)).await?;
    Ok(axum::Json(j::diff_json(&convert::diff(d))))
}

#[derive(Deserialize)]
pub(super) struct LogQuery {
    #[serde(default)]
    agent: bool,
    #[serde(default)]
    lines: Option<usize>,
    /// One session's lines (its block among the log's last 5,000 lines).
    #[serde(default)]
    session: Option<u64>,
    /// The session's wake id, which the agent log's start line names.
    #[serde(default)]
    wake: Option<String>,
}

pub(super) async fn log(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<LogQuery>,
) -> ApiResult {
    let v = view(&hub, &name).await?;
    let rel = if q.agent { cryo_session::AGENT_LOG } else { crate::chamber::log::LOG };
    let root = std::path::PathBuf::from(&v.record.path);
    let n = if q.session.is_some() { 5000 } else { q.lines.unwrap_or(200).min(5000) };
    let (lines, _) =
        crate::chamber::blocking(move || crate::chamber::log::tail(&root, rel, n)).await?.unwrap_or_default();
    let Some(number) = q.session else { return Ok(axum::Json(json!({ "lines": lines }))) };
    match crate::chamber::log::session_block(&lines, number, q.wake.as_deref().filter(|_| q.agent)) {
        Some(block) => Ok(axum::Json(json!({ "lines": block, "session": number }))),
        None => Ok(axum::Json(json!({ "lines": [], "session": number, "note": format!(
            "session {number} is not among the last 5,000 lines of {rel}: `cryoctl chamber log {name}{}` shows the whole file",
            if q.agent { " --agent" } else { "" }
        ) }))),
    }
}
