//! The session's verbs, implemented once for both faces of `cryo-agent`: the
//! command line prints a verb's [`Done::text`], the MCP server returns that
//! text and the same facts as structured content ([`Done::facts`]).
//!
//! The argument structs are shared too: clap reads them from flags, serde
//! from a tool call's arguments, and schemars describes them to the model,
//! each from the same doc comments.

use cryo_proto::exit;
use cryo_proto::json as j;
use cryo_proto::v1 as pb;
use cryo_proto::v1::agent_client::AgentClient;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A verb's result: a few lines for a model to read, and the same facts as
/// JSON.
pub struct Done {
    pub text: String,
    pub facts: Value,
}

/// Why a verb failed: one line, and the exit code the CLI ends with.
#[derive(Debug)]
pub struct Fail(pub String, pub u8);

impl From<tonic::Status> for Fail {
    fn from(s: tonic::Status) -> Fail {
        let (code, message) = exit::for_status(&s);
        Fail(message, code)
    }
}

/// `hibernate`: end this session.
#[derive(clap::Args, Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Hibernate {
    /// One line on what this session did.
    #[arg(long, default_value = "")]
    #[serde(default)]
    pub summary: String,
    /// The whole plan is finished: no next wake.
    #[arg(long, conflicts_with = "exit_code")]
    #[serde(default)]
    pub complete: bool,
    /// The session failed with this code (not 0); cryo retries later.
    #[arg(long = "exit", value_name = "N")]
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Wait up to this many seconds for a quick reply; new mail refuses the hibernate so you can answer it.
    #[arg(long = "linger", value_name = "SECS")]
    #[serde(default)]
    pub linger_secs: Option<u32>,
}

/// `send`: a message to the operator.
#[derive(Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Send {
    /// The message (Markdown). Sent exactly as given.
    pub text: String,
    /// You need an answer or a decision.
    #[serde(default)]
    pub question: bool,
    /// A short subject line.
    #[serde(default)]
    pub subject: String,
}

/// `dialog`: the conversation so far.
#[derive(clap::Args, Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Dialog {
    /// Only the last N messages.
    #[arg(long, value_name = "N", conflicts_with = "all")]
    #[serde(default)]
    pub last: Option<u32>,
    /// The whole conversation, not only the recent part.
    #[arg(long)]
    #[serde(default)]
    pub all: bool,
}

/// `todo add`: schedule work, which is a wake.
#[derive(clap::Args, Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct TodoAdd {
    /// What to do then.
    pub text: String,
    /// When: "+2h", "90m", "tomorrow 09:00", "14:30" (next), "2026-12-01T09:00" (the chamber's zone), an RFC 3339 time, or what `cryo-agent time` prints.
    #[arg(long, value_name = "TIME")]
    #[serde(default)]
    pub at: Option<String>,
    /// Repeat every DURATION (6h, 1d).
    #[arg(long, value_name = "DURATION", conflicts_with = "cron")]
    #[serde(default)]
    pub every: Option<String>,
    /// Repeat on a 5-field cron schedule ("MIN HOUR DOM MON DOW") in the chamber's zone.
    #[arg(long, value_name = "\"MIN HOUR DOM MON DOW\"")]
    #[serde(default)]
    pub cron: Option<String>,
    /// Missed slots of a repeating TODO: "once" (run once for all) or "skip".
    #[arg(long, value_name = "once|skip")]
    #[serde(default)]
    pub missed: Option<String>,
    /// A shell command cryod runs in the chamber before a scheduled wake for this TODO:
    /// exit 0 wakes you (its output is in your prompt), exit 78 means nothing to do (the
    /// slot passes, no session), anything else wakes you with a notice.
    #[arg(long, value_name = "CMD")]
    #[serde(default)]
    pub precheck: Option<String>,
}

/// A TODO named by its number.
#[derive(clap::Args, Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct TodoId {
    /// The TODO's number (from the list).
    pub id: u64,
}

/// `time`: the current time, or when an expression falls.
#[derive(Deserialize, JsonSchema, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct Time {
    /// A time expression ("+2h", "tomorrow 9:00", "friday 17:00"); empty for now.
    #[serde(default)]
    pub expr: String,
}

/// `approval`: the permission prompt of an agent's CLI (Claude Code's
/// `--permission-prompt-tool`): may this tool call run?
#[derive(Deserialize, JsonSchema, Debug, Default)]
pub struct Approval {
    /// The tool the agent wants to call.
    pub tool_name: String,
    /// Its arguments.
    #[serde(default)]
    pub input: serde_json::Map<String, Value>,
    /// Why, for the person asked (else a shell call's `description`).
    #[serde(default, skip)]
    pub reason: Option<String>,
}

/// The answer a permission prompt gives (Claude Code's shape): allowed,
/// with the input unchanged, or denied with the reason; a call cryod could
/// not judge is denied with its line.
pub fn permission_answer(asked: Result<(bool, String), Fail>, a: &Approval) -> Value {
    match asked {
        Ok((true, _)) => json!({ "behavior": "allow", "updatedInput": a.input }),
        Ok((false, message)) => json!({ "behavior": "deny", "message": message }),
        Err(Fail(line, _)) => json!({ "behavior": "deny", "message": line }),
    }
}

/// `cryo-agent approval --hook`: a CLI's pre-tool hook (Codex's and Qwen
/// Code's `PreToolUse`, Gemini CLI's `BeforeTool`). The call comes on
/// standard input as `{"tool_name":…,"tool_input":{…}}`; allowed, it exits
/// 0 and says nothing; refused, or not judged (any failure: a hook that
/// fails lets those CLIs run the call), it prints why on standard error
/// and exits 2, which each of them takes as a denial with that reason.
pub async fn hook(wait_at_most: Option<u32>) -> Result<(), Fail> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::io::stdin().take(1024 * 1024).read_to_string(&mut text);
    let asked = match read
        .map_err(|e| e.to_string())
        .and_then(|_| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
    {
        Err(e) => Err(Fail(format!("cryo could not read the hook's input: {e}"), 2)),
        Ok(v) => {
            let input = v.get("tool_input").and_then(Value::as_object).cloned().unwrap_or_default();
            let tool_name = v.get("tool_name").and_then(Value::as_str).unwrap_or("").to_string();
            let a = Approval { tool_name, input, reason: None };
            async { Session::connect().await?.approve(&a, wait_at_most).await }.await
        }
    };
    match asked {
        Ok((true, _)) => Ok(()),
        Ok((false, why)) | Err(Fail(why, _)) => Err(Fail(why, 2)),
    }
}

/// A connection to cryod as this session: the token and chamber cryod gave
/// the agent's environment ride on every call.
#[derive(Clone)]
pub struct Session {
    client: AgentClient<InterceptedService<Channel, Auth>>,
}

#[derive(Clone)]
struct Auth {
    token: MetadataValue<tonic::metadata::Ascii>,
    chamber: MetadataValue<tonic::metadata::Ascii>,
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert(cryo_proto::TOKEN_METADATA, self.token.clone());
        req.metadata_mut().insert("x-cryo-chamber", self.chamber.clone());
        Ok(req)
    }
}

impl Session {
    /// Connects with the session's environment (`CRYO_SESSION_TOKEN`,
    /// `CRYO_CHAMBER`, `CRYO_SOCKET`).
    pub async fn connect() -> Result<Session, Fail> {
        let token = std::env::var("CRYO_SESSION_TOKEN").unwrap_or_default();
        if token.is_empty() {
            return Err(Fail(
                "not inside a cryo session (CRYO_SESSION_TOKEN is not set): only `cryo-agent time` works here".into(),
                exit::REFUSED,
            ));
        }
        let chamber = std::env::var("CRYO_CHAMBER").unwrap_or_default();
        let bad = |what: &str| Fail(format!("{what} is not valid"), exit::REFUSED);
        let auth = Auth {
            token: token.parse().map_err(|_| bad("CRYO_SESSION_TOKEN"))?,
            chamber: chamber.parse().map_err(|_| bad("CRYO_CHAMBER"))?,
        };
        // The session's own socket: gone once the session has ended.
        let path = cryo_proto::socket_path();
        let channel = cryo_proto::connect(&path).await.map_err(|e| match e {
            cryo_proto::ConnectError::NoSocket(p) | cryo_proto::ConnectError::Refused(p) => Fail(
                format!(
                    "this session has ended: its socket {} is closed (cryo-agent works only while its session runs)",
                    p.display()
                ),
                exit::REFUSED,
            ),
            e => Fail(e.to_string(), exit::UNREACHABLE),
        })?;
        let mut client = AgentClient::with_interceptor(channel, auth).max_decoding_message_size(cryo_proto::MAX_REPLY);
        let hello = client.hello(cryo_proto::hello_request("cryo-agent")).await?.into_inner();
        cryo_proto::hello_reply(hello, "cryo-agent")?;
        Ok(Session { client })
    }

    pub async fn hibernate(&self, a: Hibernate) -> Result<Done, Fail> {
        if a.exit_code == Some(0) {
            return Err(Fail("the exit code must not be 0 (a clean end needs none)".into(), exit::USAGE));
        }
        let r = self
            .client
            .clone()
            .hibernate(pb::HibernateRequest {
                summary: a.summary,
                complete: a.complete,
                exit_code: a.exit_code.unwrap_or(0),
                linger_secs: a.linger_secs.unwrap_or(0),
            })
            .await?
            .into_inner();
        Ok(Done { facts: json!({ "accepted": true, "message": r.message }), text: r.message })
    }

    pub async fn send(&self, a: Send) -> Result<Done, Fail> {
        if a.text.trim().is_empty() {
            return Err(Fail("nothing to send: the text is empty".into(), exit::USAGE));
        }
        let r = self
            .client
            .clone()
            .send(pb::SendRequest { text: a.text, question: a.question, subject: a.subject })
            .await?
            .into_inner();
        let what = if r.reply { "sent (your reply to the received messages)" } else { "sent" };
        Ok(Done { text: format!("{what}: {}", r.file), facts: json!({ "file": r.file, "reply": r.reply }) })
    }

    pub async fn receive(&self) -> Result<Done, Fail> {
        let r = self.client.clone().receive(pb::ReceiveRequest {}).await?.into_inner();
        let mut text = mail_text(&r.messages, "no new messages");
        if !r.messages.is_empty() {
            text.push_str("\n(received; the next message you send is the reply)");
        }
        Ok(Done { text, facts: json!({ "messages": r.messages.iter().map(j::mail_json).collect::<Vec<_>>() }) })
    }

    pub async fn dialog(&self, a: Dialog) -> Result<Done, Fail> {
        let r =
            self.client.clone().dialog(pb::DialogRequest { last: a.last.unwrap_or(0), all: a.all }).await?.into_inner();
        let mut text = mail_text(&r.messages, "no messages yet");
        if r.claimed > 0 {
            text.push_str(&format!("\n({} new message(s) were received by this call; reply with send)", r.claimed));
        }
        let messages: Vec<Value> = r.messages.iter().map(j::mail_json).collect();
        Ok(Done { text, facts: json!({ "messages": messages, "claimed": r.claimed }) })
    }

    pub async fn todo_add(&self, a: TodoAdd) -> Result<Done, Fail> {
        let r = self
            .client
            .clone()
            .todo_add(pb::TodoAddRequest {
                text: a.text,
                at: a.at.unwrap_or_default(),
                every: a.every.unwrap_or_default(),
                cron: a.cron.unwrap_or_default(),
                missed: a.missed.unwrap_or_default(),
                precheck: a.precheck.unwrap_or_default(),
            })
            .await?
            .into_inner();
        let t = r.todo.unwrap_or_default();
        Ok(Done {
            text: format!("added TODO {}: {} (at {})", t.id, t.text, t.at),
            facts: json!({ "todo": j::todo_json(&t) }),
        })
    }

    /// Asks cryod whether a tool call may run: whether it may, and what to
    /// tell the agent.
    pub async fn approve(&self, a: &Approval, wait_at_most: Option<u32>) -> Result<(bool, String), Fail> {
        let input = Value::Object(a.input.clone());
        // Claude Code's shell tool carries the agent's words on the call.
        let described = a.input.get("description").and_then(Value::as_str).unwrap_or_default();
        let reason = a.reason.clone().unwrap_or_else(|| described.to_string());
        let r = self
            .client
            .clone()
            .approve(pb::ApproveRequest {
                tool: a.tool_name.clone(),
                input_json: input.to_string(),
                reason,
                max_wait_secs: wait_at_most.unwrap_or(0),
            })
            .await?
            .into_inner();
        Ok((r.allow, r.message))
    }

    pub async fn todo_list(&self) -> Result<Done, Fail> {
        let r = self.client.clone().todo_list(pb::TodoListRequest::default()).await?.into_inner();
        Ok(todos_done(None, &r))
    }

    pub async fn todo_done(&self, a: TodoId) -> Result<Done, Fail> {
        let r = self.client.clone().todo_done(pb::TodoIdRequest { id: a.id }).await?.into_inner();
        Ok(todos_done(Some(format!("TODO {} done", a.id)), &r))
    }

    pub async fn todo_remove(&self, a: TodoId) -> Result<Done, Fail> {
        let r = self.client.clone().todo_remove(pb::TodoIdRequest { id: a.id }).await?.into_inner();
        Ok(todos_done(Some(format!("TODO {} removed", a.id)), &r))
    }
}

/// `time`: works anywhere, without cryod, in the zone of `TZ` (cryod sets it
/// to the chamber's zone for agents) or the system's.
pub fn time(a: Time) -> Result<Done, Fail> {
    let tz: chrono_tz::Tz = std::env::var("TZ")
        .ok()
        .and_then(|t| t.trim_start_matches(':').parse().ok())
        .or_else(|| iana_time_zone::get_timezone().ok().and_then(|n| n.parse().ok()))
        .unwrap_or(chrono_tz::UTC);
    #[allow(clippy::disallowed_methods)] // a CLI's one read of the clock
    let now = chrono::Utc::now();
    let expr = a.expr.trim();
    if expr.is_empty() {
        let t = cryo_core::time::format_in(now, tz);
        return Ok(Done {
            text: format!("{t} ({})", tz.name()),
            facts: json!({ "time": t, "zone": tz.name(), "in": null }),
        });
    }
    let at = cryo_core::time::parse_time(expr, now, tz).map_err(|e| Fail(e.to_string(), exit::USAGE))?;
    let (t, until) = (cryo_core::time::format_in(at, tz), cryo_core::time::humanize(at - now));
    Ok(Done {
        text: format!("{t} ({}), in {until}", tz.name()),
        facts: json!({ "time": t, "zone": tz.name(), "in": until }),
    })
}

fn mail_text(messages: &[pb::Mail], none: &str) -> String {
    if messages.is_empty() {
        return none.to_string();
    }
    let n = messages.len();
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let dir = if m.direction == "out" { "to" } else { "from" };
        let who = if m.direction == "out" { "operator (sent by you or cryo)" } else { m.from.as_str() };
        let q = if m.question { ", question" } else { "" };
        out.push(format!("--- message {} of {n}: {dir} {who}, {}{q} ---", i + 1, m.timestamp));
        if !m.subject.is_empty() {
            out.push(format!("subject: {}", m.subject));
        }
        out.push(m.body.trim_end_matches('\n').to_string());
    }
    out.join("\n")
}

/// The open TODOs (pending and claimed), after `head` if any.
fn todos_done(head: Option<String>, list: &pb::TodoListReply) -> Done {
    let open: Vec<&pb::Todo> = list.todos.iter().filter(|t| t.state != "done").collect();
    let mut lines: Vec<String> = head.into_iter().collect();
    if open.is_empty() {
        lines.push("no pending TODOs".into());
    }
    for t in &open {
        let mark = if t.state == "claimed" { "~" } else { " " };
        let rep = if !t.every.is_empty() {
            format!(", every {}", t.every)
        } else if !t.cron.is_empty() {
            format!(", cron \"{}\"", t.cron)
        } else {
            String::new()
        };
        let at = if t.at.is_empty() { "no time" } else { t.at.as_str() };
        lines.push(format!("{}. [{mark}] {} (at {at}{rep})", t.id, t.text));
    }
    Done { text: lines.join("\n"), facts: json!({ "todos": open.into_iter().map(j::todo_json).collect::<Vec<_>>() }) }
}
