//! `cryo-agent mcp`: the session's verbs as MCP tools, served on standard
//! input and output (the official SDK, `rmcp`).
//!
//! Tools are named and shaped after the command line (`todo add --at` is
//! `todo_add` with `at`), call the same [`crate::verbs`], and
//! authenticate with the session's environment exactly as the CLI does. A
//! refusal of cryod's (a hibernate while mail is unread, a bad `at`) is a
//! tool error carrying the same one line; the connection to cryod is made at
//! the first call that needs it, so a server started before cryod answers
//! still starts.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use tokio::sync::Mutex;

use crate::verbs::{self, Done, Fail, Session};

/// What the server tells the model when it connects.
const INSTRUCTIONS: &str = "cryo runs you in sessions: you wake, work, and hibernate until your next wake. \
These tools are the session's verbs (the `cryo-agent` shell commands do the same). \
Rules: (1) if mail waits, call `receive` first, and answer every received message with `send`; \
(2) before you hibernate, make sure a pending TODO declares your next wake (`todo_add`), unless the plan is complete; \
(3) `hibernate` is the last thing you do: after it, stop. A refused call says why in one line: do what it says, then try again.";

#[derive(Clone)]
pub struct AgentTools {
    session: std::sync::Arc<Mutex<Option<Session>>>,
    tool_router: ToolRouter<AgentTools>,
}

/// Serves until the client closes standard input.
pub async fn serve() -> Result<(), Fail> {
    let tools = AgentTools { session: Default::default(), tool_router: AgentTools::tool_router() };
    let running = tools
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| Fail(format!("MCP: {e}"), cryo_proto::exit::REFUSED))?;
    running.waiting().await.map_err(|e| Fail(format!("MCP: {e}"), cryo_proto::exit::REFUSED))?;
    Ok(())
}

/// A verb's result as a tool's: its text, and its facts as structured
/// content; a failure is a tool error with its one line.
fn result(r: Result<Done, Fail>) -> CallToolResult {
    match r {
        Ok(d) => {
            let mut out = CallToolResult::success(vec![ContentBlock::text(d.text)]);
            out.structured_content = Some(d.facts);
            out
        }
        Err(Fail(line, _)) => CallToolResult::error(vec![ContentBlock::text(line)]),
    }
}

impl AgentTools {
    /// The session's connection, made at the first call that needs it.
    async fn session(&self) -> Result<Session, Fail> {
        let mut s = self.session.lock().await;
        if let Some(s) = s.as_ref() {
            return Ok(s.clone());
        }
        let new = Session::connect().await?;
        *s = Some(new.clone());
        Ok(new)
    }
}

#[tool_router]
impl AgentTools {
    #[tool(description = "End this session: the LAST thing you do. Save your work and schedule your next wake \
        (todo_add) first, unless the whole plan is finished (complete). cryo refuses it while received mail is \
        unanswered or unread mail waits; the refusal says what to do. After it is accepted, stop working.")]
    async fn hibernate(&self, Parameters(a): Parameters<verbs::Hibernate>) -> CallToolResult {
        result(async { self.session().await?.hibernate(a).await }.await)
    }

    #[tool(description = "Send a message to the operator (Markdown, sent exactly as given). After `receive`, your \
        next send is the reply: answer every received message. Set question when you need an answer or a decision.")]
    async fn send(&self, Parameters(a): Parameters<verbs::Send>) -> CallToolResult {
        result(async { self.session().await?.send(a).await }.await)
    }

    #[tool(
        description = "Claim and read the unread messages from the operator. Call it first when mail waits, and \
        answer each message with `send` before you hibernate.",
        annotations(read_only_hint = false, idempotent_hint = false)
    )]
    async fn receive(&self) -> CallToolResult {
        result(async { self.session().await?.receive().await }.await)
    }

    #[tool(description = "The conversation with the operator so far (recent messages, or the last N, or all). \
        Unread messages it shows count as received: answer them.")]
    async fn dialog(&self, Parameters(a): Parameters<verbs::Dialog>) -> CallToolResult {
        result(async { self.session().await?.dialog(a).await }.await)
    }

    #[tool(
        description = "Schedule work: a TODO at a time is a wake. Give `at` (\"+2h\", \"tomorrow 9:00\", RFC 3339), \
        or repeat with `every` (\"6h\") or `cron`. Before you hibernate, a pending TODO must declare your next wake \
        unless the plan is complete."
    )]
    async fn todo_add(&self, Parameters(a): Parameters<verbs::TodoAdd>) -> CallToolResult {
        result(async { self.session().await?.todo_add(a).await }.await)
    }

    #[tool(
        description = "Your pending TODOs, the schedule of your wakes ([~] woke you and completes when you \
        hibernate).",
        annotations(read_only_hint = true)
    )]
    async fn todo_list(&self) -> CallToolResult {
        result(async { self.session().await?.todo_list().await }.await)
    }

    #[tool(description = "Mark a TODO done (a repeating one moves to its next slot).")]
    async fn todo_done(&self, Parameters(a): Parameters<verbs::TodoId>) -> CallToolResult {
        result(async { self.session().await?.todo_done(a).await }.await)
    }

    #[tool(description = "Remove a TODO (a repeating one stops repeating).")]
    async fn todo_remove(&self, Parameters(a): Parameters<verbs::TodoId>) -> CallToolResult {
        result(async { self.session().await?.todo_remove(a).await }.await)
    }

    #[tool(description = "cryo's permission prompt for this session's CLI (not for you to call): whether a tool \
        call may run, by the chamber's approval policy; a call it sends to a person waits for their answer.")]
    async fn approval(&self, Parameters(a): Parameters<verbs::Approval>) -> CallToolResult {
        let asked = async { self.session().await?.approve(&a, None).await }.await;
        let answer = verbs::permission_answer(asked, &a);
        CallToolResult::success(vec![ContentBlock::text(answer.to_string())])
    }

    #[tool(
        description = "The current time in the chamber's zone, or when a time expression falls (to check an `at` \
        before todo_add).",
        annotations(read_only_hint = true)
    )]
    async fn time(&self, Parameters(a): Parameters<verbs::Time>) -> CallToolResult {
        result(verbs::time(a))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cryo", cryo_proto::VERSION).with_title("cryo session"))
            .with_instructions(INSTRUCTIONS)
    }
}
