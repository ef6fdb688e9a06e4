//! cryo-mcp: the operator's MCP server, cryo's Control API as tools and
//! resources for a person's own assistant (Claude Desktop, Claude Code,
//! Codex, any MCP client). Two doors, one implementation: `cryoctl mcp`
//! serves it on stdio over the gRPC socket, and the hub at `/mcp` over
//! streamable HTTP inside cryod. Both hand [`OperatorTools`] a
//! [`cryo_proto::Control`] client: cryoctl's is on the socket, the hub's on
//! cryod's own Control server in process (`cryo_proto::control_over`), the
//! same service the socket serves. The crate knows nothing of the daemon,
//! so the operator's CLI links none of it.
//!
//! Tools answer with a few lines of text and the same JSON `cryoctl --json`
//! prints (`cryo_proto::json`) as structured content; a refusal of cryod's is
//! a tool error with its one line. Resources: each chamber's `plan.md`,
//! `NOTES.md` and recent log, as `cryo://CHAMBER/plan.md`,
//! `cryo://CHAMBER/NOTES.md` and `cryo://CHAMBER/log`.

use cryo_proto::json as j;
use cryo_proto::v1 as pb;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

/// Calls the Control method `$m` with `$req` on the client `$control`.
macro_rules! call {
    ($control:expr, $m:ident, $req:expr) => {
        $control.clone().$m(Request::new($req)).await.map(Response::into_inner)
    };
}

/// The tools that only read; `--read-only` offers these alone.
pub const READ_TOOLS: &[&str] = &["list_chambers", "chamber_status", "read_messages", "todo_list", "approvals"];

/// What the server tells the assistant when it connects.
const INSTRUCTIONS: &str = "cryo runs AI coding agents in chambers: each wakes for a session, works, and \
hibernates until its next TODO comes due or a message arrives. These tools watch and steer them: list and \
status, the conversation with each agent (read_messages, send_message: a message wakes the agent), TODOs, \
wake, pause and resume, and the tool calls agents wait to have approved (approvals, approve, deny). Each chamber's plan.md, NOTES.md and recent log are resources (cryo://CHAMBER/plan.md).";

/// The arguments of the tools about one chamber (`chamber_status`,
/// `pause`, `resume`, `todo_list`).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChamberArg {
    /// The chamber's name (or its folder's absolute path).
    pub chamber: String,
}

/// The arguments of `approvals`.
#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsArg {
    /// One chamber's (its name); none: every chamber's.
    #[serde(default)]
    pub chamber: Option<String>,
    /// The decided ones too.
    #[serde(default)]
    pub all: bool,
}

/// The arguments of `approve` and `deny`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideArg {
    /// The request's id (from `approvals`).
    pub id: String,
    /// A denial's reason, for the agent.
    #[serde(default)]
    pub reason: String,
}

/// The arguments of `read_messages`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadMessages {
    /// The chamber's name (or its folder's absolute path).
    pub chamber: String,
    /// The last N messages (default 20).
    #[serde(default, deserialize_with = "count")]
    #[schemars(with = "u32")]
    pub last: Option<u32>,
}

/// A count as a number or as its digits (`2` or `"2"`: some clients send
/// every argument as text).
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Count {
        Number(u32),
        Text(String),
    }
    match Option::<Count>::deserialize(d)? {
        None => Ok(None),
        Some(Count::Number(n)) => Ok(Some(n)),
        Some(Count::Text(t)) => t
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("`last` must be a whole number, not {t:?}"))),
    }
}

/// The arguments of `send_message`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The chamber's name (or its folder's absolute path).
    pub chamber: String,
    /// The message (Markdown). It lands in the chamber's inbox and wakes the agent.
    pub text: String,
    /// A short subject line.
    #[serde(default)]
    pub subject: String,
}

/// The arguments of `wake`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Wake {
    /// The chamber's name (or its folder's absolute path).
    pub chamber: String,
    /// A note for the agent, also written to its inbox.
    #[serde(default)]
    pub message: String,
}

/// The arguments of `todo_add`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoAdd {
    /// The chamber's name (or its folder's absolute path).
    pub chamber: String,
    /// What the agent should do then.
    pub text: String,
    /// When: RFC 3339, "+2h", "tomorrow 9:00" (the chamber's zone). Default: now.
    #[serde(default)]
    pub at: String,
    /// Repeat every DURATION ("6h", "1d").
    #[serde(default)]
    pub every: String,
    /// Repeat on a 5-field cron schedule in the chamber's zone.
    #[serde(default)]
    pub cron: String,
    /// Missed slots of a repeating TODO: "once" (default) or "skip".
    #[serde(default)]
    pub missed: String,
    /// A shell command run in the chamber before a scheduled wake for it: exit 0 wakes the agent
    /// (its output in the prompt), 78 passes the slot by (nothing to do), anything else wakes it.
    #[serde(default)]
    pub precheck: String,
}

fn chamber_ref(name: &str) -> Option<pb::ChamberRef> {
    let by = if name.starts_with('/') {
        pb::chamber_ref::By::Path(name.to_string())
    } else {
        pb::chamber_ref::By::Name(name.to_string())
    };
    Some(pb::ChamberRef { by: Some(by) })
}

/// A tool's answer: text and structured facts, or its refusal's one line.
fn result(r: Result<(String, Value), Status>) -> CallToolResult {
    match r {
        Ok((text, facts)) => {
            let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
            out.structured_content = Some(facts);
            out
        }
        Err(s) => CallToolResult::error(vec![ContentBlock::text(cryo_proto::exit::for_status(&s).1)]),
    }
}

/// One line on a chamber, for people and models alike.
fn chamber_line(c: &pb::Chamber) -> String {
    let mut parts = vec![format!("{}: {}", c.name, j::state_name(c.state))];
    if !c.next_wake.is_empty() {
        parts.push(format!("next wake {}", c.next_wake));
    }
    if c.mail_waiting > 0 {
        parts.push(format!("{} unread message(s)", c.mail_waiting));
    }
    if c.open_questions > 0 {
        parts.push(format!("{} open question(s)", c.open_questions));
    }
    for (what, v) in [("last", &c.last_result), ("attention", &c.attention), ("fault", &c.fault)] {
        if !v.is_empty() {
            parts.push(format!("{what}: {v}"));
        }
    }
    parts.join(", ")
}

fn mail_lines(messages: &[pb::Mail]) -> String {
    if messages.is_empty() {
        return "no messages".into();
    }
    let lines: Vec<String> = messages
        .iter()
        .map(|m| {
            let who = if m.direction == "out" { "agent".to_string() } else { m.from.clone() };
            let q = if m.question { " (question)" } else { "" };
            format!("--- {} {who}{q} ---\n{}", m.timestamp, m.body.trim_end())
        })
        .collect();
    lines.join("\n")
}

fn todo_lines(list: &pb::TodoListReply) -> (String, Value) {
    let open: Vec<&pb::Todo> = list.todos.iter().filter(|t| t.state != "done").collect();
    let text = if open.is_empty() {
        "no pending TODOs".to_string()
    } else {
        let lines: Vec<String> = open
            .iter()
            .map(|t| format!("{}. [{}] {} (at {})", t.id, t.state, t.text, if t.at.is_empty() { "-" } else { &t.at }))
            .collect();
        lines.join("\n")
    };
    (text, json!({ "todos": open.into_iter().map(j::todo_json).collect::<Vec<_>>() }))
}

/// The operator's tools over a Control client.
#[derive(Clone)]
pub struct OperatorTools {
    control: cryo_proto::Control,
    tool_router: ToolRouter<OperatorTools>,
}

impl OperatorTools {
    /// The tools over `control`; with `read_only`, only [`READ_TOOLS`].
    pub fn new(control: cryo_proto::Control, read_only: bool) -> OperatorTools {
        let mut tool_router = OperatorTools::tool_router();
        if read_only {
            let names: Vec<String> = tool_router.list_all().into_iter().map(|t| t.name.to_string()).collect();
            for name in names.iter().filter(|n| !READ_TOOLS.contains(&n.as_str())) {
                tool_router.remove_route(name);
            }
        }
        OperatorTools { control, tool_router }
    }

    async fn messages(&self, chamber: &str, last: u32) -> Result<Vec<pb::Mail>, Status> {
        let req = pb::ChamberMessagesRequest { chamber: chamber_ref(chamber), follow: false, last };
        collect(self.control.clone().chamber_messages(req).await?.into_inner()).await
    }

    async fn log(&self, chamber: &str) -> Result<Vec<String>, Status> {
        let req = pb::ChamberLogRequest { chamber: chamber_ref(chamber), agent: false, follow: false, lines: 200 };
        let batches = collect(self.control.clone().chamber_log(req).await?.into_inner()).await?;
        Ok(batches.into_iter().flat_map(|b| b.lines).collect())
    }

    async fn decide(&self, a: DecideArg, approve: bool) -> Result<(String, Value), Status> {
        let req = pb::ApprovalDecideRequest { id: a.id, approve, reason: a.reason, via: "mcp".into() };
        let r = call!(self.control, approval_decide, req)?;
        let done = if approve { "approved" } else { "denied" };
        Ok((
            format!("{done} {} ({}: {}) for {}", r.id, r.tool, r.subject, r.chamber),
            json!({ "approval": j::approval_json(&r) }),
        ))
    }

    async fn pause_or_resume(&self, chamber: &str, pause: bool) -> Result<(String, Value), Status> {
        let req = pb::ChamberPauseRequest { chamber: chamber_ref(chamber) };
        let r =
            if pause { call!(self.control, chamber_pause, req)? } else { call!(self.control, chamber_resume, req)? };
        let c = r.chamber.unwrap_or_default();
        let what = match (pause, r.already) {
            (true, true) => "was paused already",
            (true, false) => "paused",
            (false, true) => "was not paused",
            (false, false) => "resumed",
        };
        Ok((format!("{what}: {}", chamber_line(&c)), json!({ "chamber": j::chamber_json(&c), "already": r.already })))
    }

    async fn todo(&self, chamber: &str, op: pb::chamber_todo_request::Op) -> Result<(String, Value), Status> {
        let req = pb::ChamberTodoRequest { chamber: chamber_ref(chamber), op: Some(op) };
        Ok(todo_lines(&call!(self.control, chamber_todo, req)?))
    }
}

/// Everything a finite stream yields.
async fn collect<T>(mut s: tonic::Streaming<T>) -> Result<Vec<T>, Status> {
    let mut out = Vec::new();
    while let Some(item) = s.message().await? {
        out.push(item);
    }
    Ok(out)
}

#[tool_router]
impl OperatorTools {
    #[tool(
        description = "Every chamber: its state, next wake, unread mail, open questions and anything that needs \
        a person.",
        annotations(read_only_hint = true)
    )]
    async fn list_chambers(&self) -> CallToolResult {
        result(
            async {
                let r = call!(self.control, chamber_list, pb::ChamberListRequest { archived: false })?;
                let text = if r.chambers.is_empty() {
                    "no chambers".to_string()
                } else {
                    r.chambers.iter().map(chamber_line).collect::<Vec<_>>().join("\n")
                };
                Ok((text, json!({ "chambers": r.chambers.iter().map(j::chamber_json).collect::<Vec<_>>() })))
            }
            .await,
        )
    }

    #[tool(
        description = "One chamber in detail, with its recent sessions (trigger, lateness, outcome).",
        annotations(read_only_hint = true)
    )]
    async fn chamber_status(&self, Parameters(a): Parameters<ChamberArg>) -> CallToolResult {
        result(
            async {
                let r =
                    call!(self.control, chamber_status, pb::ChamberStatusRequest { chamber: chamber_ref(&a.chamber) })?;
                let c = r.chambers.first().cloned().unwrap_or_default();
                let mut text = chamber_line(&c);
                for s in &r.sessions {
                    text.push_str(&format!(
                        "\nsession {}: {} at {}, {}",
                        s.number,
                        s.trigger,
                        s.started_at,
                        if s.outcome.is_empty() { "running" } else { &s.outcome }
                    ));
                }
                let sessions: Vec<Value> = r.sessions.iter().map(j::session_json).collect();
                Ok((text, json!({ "chamber": j::chamber_json(&c), "sessions": sessions })))
            }
            .await,
        )
    }

    #[tool(
        description = "The conversation between the operator and a chamber's agent: the last N messages \
        (default 20), oldest first. Reading does not mark anything read for the agent.",
        annotations(read_only_hint = true)
    )]
    async fn read_messages(&self, Parameters(a): Parameters<ReadMessages>) -> CallToolResult {
        result(
            async {
                let messages = self.messages(&a.chamber, a.last.unwrap_or(20)).await?;
                Ok((
                    mail_lines(&messages),
                    json!({ "messages": messages.iter().map(j::mail_json).collect::<Vec<_>>() }),
                ))
            }
            .await,
        )
    }

    #[tool(description = "Send a message to a chamber's agent, as the operator. It lands in the chamber's inbox \
        and wakes the agent (or reaches the running session).")]
    async fn send_message(&self, Parameters(a): Parameters<SendMessage>) -> CallToolResult {
        result(
            async {
                let req = pb::ChamberSendRequest {
                    chamber: chamber_ref(&a.chamber),
                    text: a.text,
                    from: "operator".into(),
                    subject: a.subject,
                };
                let r = call!(self.control, chamber_send, req)?;
                let waits = (!r.waits.is_empty()).then(|| r.waits.clone());
                let text = match &waits {
                    Some(w) => format!("sent: {}\nnot read yet: {w}", r.file),
                    None => format!("sent: {}", r.file),
                };
                Ok((text, json!({ "file": r.file, "waits": waits })))
            }
            .await,
        )
    }

    #[tool(description = "Wake a chamber's agent now, with an optional note (also written to its inbox). \
        A running session is left alone: the wake is queued behind it.")]
    async fn wake(&self, Parameters(a): Parameters<Wake>) -> CallToolResult {
        result(async {
            let req = pb::ChamberWakeRequest { chamber: chamber_ref(&a.chamber), message: a.message, replace: false };
            let r = call!(self.control, chamber_wake, req)?;
            let c = r.chamber.unwrap_or_default();
            let text = if r.queued { "queued behind the running session" } else { "waking" };
            Ok((
                format!("{text}: {}", chamber_line(&c)),
                json!({ "chamber": j::chamber_json(&c), "queued": r.queued, "message_file": j::null_if_empty(&r.message_file) }),
            ))
        }
        .await)
    }

    #[tool(description = "Pause a chamber: no new session starts (a running one finishes); mail waits.")]
    async fn pause(&self, Parameters(a): Parameters<ChamberArg>) -> CallToolResult {
        result(self.pause_or_resume(&a.chamber, true).await)
    }

    #[tool(description = "Resume a paused chamber: what came due meanwhile runs now.")]
    async fn resume(&self, Parameters(a): Parameters<ChamberArg>) -> CallToolResult {
        result(self.pause_or_resume(&a.chamber, false).await)
    }

    #[tool(
        description = "The tool calls agents wait to have approved (a chamber's [approvals] policy asked a \
        person): id, chamber, the call and why it was asked. `all` adds the decided ones.",
        annotations(read_only_hint = true)
    )]
    async fn approvals(&self, Parameters(a): Parameters<ApprovalsArg>) -> CallToolResult {
        let req = pb::ApprovalsRequest { chamber: a.chamber.as_deref().and_then(chamber_ref), all: a.all, limit: 50 };
        result(
            async {
                let r = call!(self.control, approvals, req)?;
                let lines: Vec<String> = r
                    .approvals
                    .iter()
                    .map(|a| format!("{} {} [{}] {}: {} ({})", a.id, a.chamber, a.state, a.tool, a.subject, a.rule))
                    .collect();
                let text = if lines.is_empty() { "no approval request waits".to_string() } else { lines.join("\n") };
                let list: Vec<Value> = r.approvals.iter().map(j::approval_json).collect();
                Ok((text, json!({ "approvals": list })))
            }
            .await,
        )
    }

    #[tool(description = "Approve a tool call an agent waits on (its id from `approvals`): the agent's session, \
        or its next, runs exactly that call.")]
    async fn approve(&self, Parameters(a): Parameters<DecideArg>) -> CallToolResult {
        result(self.decide(a, true).await)
    }

    #[tool(description = "Deny a tool call an agent waits on, with a reason the agent is told.")]
    async fn deny(&self, Parameters(a): Parameters<DecideArg>) -> CallToolResult {
        result(self.decide(a, false).await)
    }

    #[tool(
        description = "A chamber's pending TODOs: the schedule of its agent's wakes.",
        annotations(read_only_hint = true)
    )]
    async fn todo_list(&self, Parameters(a): Parameters<ChamberArg>) -> CallToolResult {
        result(self.todo(&a.chamber, pb::chamber_todo_request::Op::List(pb::TodoListRequest::default())).await)
    }

    #[tool(description = "Schedule work for a chamber's agent: a TODO at a time is a wake (default: now). \
        Repeat with `every` or `cron`.")]
    async fn todo_add(&self, Parameters(a): Parameters<TodoAdd>) -> CallToolResult {
        let add = pb::TodoAddRequest {
            text: a.text,
            at: a.at,
            every: a.every,
            cron: a.cron,
            missed: a.missed,
            precheck: a.precheck,
        };
        result(self.todo(&a.chamber, pb::chamber_todo_request::Op::Add(add)).await)
    }
}

/// The resources of one chamber: (file part of the URI, name, description).
const RESOURCES: &[(&str, &str, &str)] = &[
    ("plan.md", "plan", "The chamber's plan: what its agent works towards."),
    ("NOTES.md", "notes", "The agent's own notes, kept across sessions."),
    ("log", "log", "The last 200 lines of the chamber's cryo.log: wakes, sessions, refusals."),
];

#[tool_handler(router = self.tool_router)]
impl ServerHandler for OperatorTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("cryo", cryo_proto::VERSION).with_title("cryo operator"))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let r = call!(self.control, chamber_list, pb::ChamberListRequest { archived: false })
            .map_err(|s| ErrorData::internal_error(cryo_proto::exit::for_status(&s).1, None))?;
        let resources = r
            .chambers
            .iter()
            .flat_map(|c| {
                RESOURCES.iter().map(move |(file, name, about)| {
                    Resource::new(format!("cryo://{}/{file}", c.name), format!("{} {name}", c.name))
                        .with_description(*about)
                        .with_mime_type(if *file == "log" { "text/plain" } else { "text/markdown" })
                })
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = RESOURCES
            .iter()
            .map(|(file, name, about)| {
                let mut t = ResourceTemplate::new(format!("cryo://{{chamber}}/{file}"), *name);
                t.description = Some(about.to_string());
                t
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let unknown = || {
            ErrorData::resource_not_found(
                format!("no such resource {uri:?} (cryo://CHAMBER/plan.md, NOTES.md or log)"),
                None,
            )
        };
        let (chamber, file) = uri.strip_prefix("cryo://").and_then(|r| r.split_once('/')).ok_or_else(unknown)?;
        let failed = |s: Status| ErrorData::resource_not_found(cryo_proto::exit::for_status(&s).1, None);
        let text = match file {
            "plan.md" | "NOTES.md" => {
                let req = pb::ChamberFileRequest { chamber: chamber_ref(chamber), name: file.to_string() };
                call!(self.control, chamber_file, req).map_err(failed)?.text
            }
            "log" => self.log(chamber).await.map_err(failed)?.join("\n"),
            _ => return Err(unknown()),
        };
        let mut contents = ResourceContents::text(text, uri.clone());
        if let ResourceContents::TextResourceContents { mime_type, .. } = &mut contents {
            *mime_type = Some(if file == "log" { "text/plain" } else { "text/markdown" }.into());
        }
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Control client on a service that refuses every call, as cryod
    /// would while it stops: the tools can be built without a daemon.
    fn refusing() -> cryo_proto::Control {
        cryo_proto::control_over(tower::service_fn(|_: tonic::codegen::http::Request<tonic::body::Body>| async {
            Ok::<_, std::convert::Infallible>(Status::failed_precondition("cryod is stopping").into_http())
        }))
    }

    fn names(tools: &OperatorTools) -> Vec<String> {
        let mut names: Vec<String> = tools.tool_router.list_all().into_iter().map(|t| t.name.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn read_only_offers_exactly_the_tools_marked_read_only() {
        let mut read: Vec<String> = READ_TOOLS.iter().map(|t| t.to_string()).collect();
        read.sort();
        assert_eq!(names(&OperatorTools::new(refusing(), true)), read);
        let all = OperatorTools::new(refusing(), false);
        assert_eq!(names(&all).len(), 12, "{:?}", names(&all));
        for t in all.tool_router.list_all() {
            let hint = t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
            assert_eq!(hint, READ_TOOLS.contains(&t.name.as_ref()), "{}", t.name);
        }
    }

    #[test]
    fn last_is_a_number_or_its_digits() {
        let last =
            |v: Value| serde_json::from_value::<ReadMessages>(json!({ "chamber": "a", "last": v })).map(|r| r.last);
        assert_eq!(last(json!(2)).unwrap(), Some(2));
        assert_eq!(last(json!(" 3 ")).unwrap(), Some(3));
        assert!(last(json!("two")).unwrap_err().to_string().contains("`last` must be a whole number"));
        let none = serde_json::from_value::<ReadMessages>(json!({ "chamber": "a" })).unwrap();
        assert_eq!(none.last, None);
    }

    #[tokio::test]
    async fn a_refusal_is_a_tool_error_of_one_line() {
        let tools = OperatorTools::new(refusing(), false);
        let r = tools.list_chambers().await;
        assert_eq!(r.is_error, Some(true));
        let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("cryod is stopping"));
        let r = tools.read_messages(Parameters(ReadMessages { chamber: "a".into(), last: None })).await;
        assert_eq!(r.is_error, Some(true), "a streamed call refused is a tool error too");
    }
}
