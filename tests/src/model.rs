//! A scripted model server: a local HTTP server that plays a language model
//! for the real agent CLIs, so they run whole sessions offline.
//!
//! It speaks the three wire APIs the CLIs use, each streamed with server-sent
//! events as the clients ask:
//! - Anthropic's Messages API (`POST /v1/messages`, Claude Code),
//! - OpenAI's Responses API (`POST /v1/responses`, Codex),
//! - OpenAI's Chat Completions API (`POST /v1/chat/completions`, OpenCode
//!   and Qwen Code through an OpenAI-compatible provider),
//! - Google's Gemini API (`POST /v1beta/models/MODEL:streamGenerateContent`
//!   or `:generateContent`, Gemini CLI).
//!
//! A [`Script`] maps a marker in the user's prompt (`- session: 2`) to the
//! steps of that session: shell commands, answered as a call of the client's
//! shell tool, or calls of cryo's MCP tools by name (`send`), answered with
//! the name under which the client offers them: Anthropic `mcp__cryo__send`,
//! OpenAI Responses `send` inside the namespace `mcp__cryo`, Chat Completions
//! `cryo_send` (OpenCode) or `mcp__cryo__send` (Qwen Code), Gemini
//! `mcp_cryo_send`. A tool the client only lists as deferred (Claude Code's tool
//! search) is first fetched with a `ToolSearch` call. Which step is next is
//! the number of calls the conversation already holds, tool searches aside.
//! When the steps are used up, or the request offers no tool for the next one
//! (title generation and other side requests), the answer is a short text
//! that ends the turn.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use self::answers::*;

mod answers;

/// One step of a session: a shell command, or a call of one of cryo's MCP
/// tools with its arguments.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Shell(String),
    Tool(String, Value),
}

impl Step {
    /// How the step is shown in [`ModelServer::answered`]: the command, or
    /// `tool NAME ARGS`.
    pub fn label(&self) -> String {
        match self {
            Step::Shell(c) => c.clone(),
            Step::Tool(name, args) => format!("tool {name} {args}"),
        }
    }
}

/// One session's steps, chosen by a marker in the prompt.
#[derive(Clone, Debug, Default)]
pub struct Script {
    turns: Vec<(String, Vec<Step>)>,
}

impl Script {
    pub fn new() -> Script {
        Script::default()
    }

    /// The shell commands to run when the prompt contains `marker`.
    pub fn on(mut self, marker: &str, commands: &[&str]) -> Script {
        self.turns.push((marker.to_string(), commands.iter().map(|c| Step::Shell(c.to_string())).collect()));
        self
    }

    /// The MCP tool calls (cryo's tool name, arguments) to make when the
    /// prompt contains `marker`.
    pub fn on_tools(mut self, marker: &str, calls: &[(&str, Value)]) -> Script {
        self.turns
            .push((marker.to_string(), calls.iter().map(|(n, a)| Step::Tool(n.to_string(), a.clone())).collect()));
        self
    }

    /// The steps' labels of the first turn whose marker `prompt` contains.
    pub fn commands(&self, prompt: &str) -> Vec<String> {
        self.steps_for(prompt).iter().map(Step::label).collect()
    }

    /// The first marker `text` contains.
    fn marker_in(&self, text: &str) -> Option<&str> {
        self.turns.iter().map(|(m, _)| m.as_str()).find(|m| text.contains(m))
    }

    fn steps_for(&self, prompt: &str) -> &[Step] {
        self.turns.iter().find(|(m, _)| prompt.contains(m.as_str())).map(|(_, c)| c.as_slice()).unwrap_or(&[])
    }
}

/// A request the server received, for assertions and for diagnosing a
/// failing test.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The step this request was answered with, if any ([`Step::label`]);
    /// a tool search is `ToolSearch QUERY`.
    pub answered: Option<String>,
    /// The script's marker of the newest prompt it carries (its session).
    pub turn: Option<String>,
    /// Markers of earlier prompts it carries too (a resumed conversation).
    pub earlier: Vec<String>,
    /// The request body's size in bytes.
    pub bytes: usize,
}

struct Inner {
    script: Script,
    seen: Mutex<Vec<Seen>>,
    /// API keys refused with 429 until then (a provider's limit), and the
    /// `retry-after` said (seconds).
    limits: Mutex<Vec<(String, std::time::Instant, u64)>>,
}

/// A running model server (stopped on drop).
pub struct ModelServer {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    _runtime: tokio::runtime::Runtime,
}

impl ModelServer {
    pub fn start(script: Script) -> ModelServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("model server runtime");
        let inner = Arc::new(Inner { script, seen: Mutex::new(Vec::new()), limits: Mutex::new(Vec::new()) });
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("model server listens on a loopback port");
        let addr = listener.local_addr().expect("model server address");
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ModelServer { addr, inner, _runtime: runtime }
    }

    /// Refuses every request made with `key` for `window`, as a provider at
    /// its limit does: 429, `retry-after` a long way off (so the CLI gives
    /// up rather than wait), each API's error body.
    pub fn limit(&self, key: &str, window: std::time::Duration) {
        self.limit_saying(key, window, 600);
    }

    /// [`ModelServer::limit`], saying `retry-after: SECS` (and its resets
    /// that far off).
    pub fn limit_saying(&self, key: &str, window: std::time::Duration, retry_after: u64) {
        self.inner.limits.lock().unwrap().push((key.to_string(), std::time::Instant::now() + window, retry_after));
    }

    /// The requests refused at a limit, by path.
    pub fn refused(&self) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.answered.as_deref() == Some(REFUSED)).collect()
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// Every step the server handed out, in order (tool searches and
    /// refusals aside).
    pub fn answered(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter_map(|s| s.answered)
            .filter(|a| !a.starts_with(TOOL_SEARCH) && a != REFUSED)
            .collect()
    }

    /// Every tool search the server asked for (Claude Code's deferred tools).
    pub fn searches(&self) -> Vec<String> {
        self.seen().into_iter().filter_map(|s| s.answered).filter(|a| a.starts_with(TOOL_SEARCH)).collect()
    }

    /// One line per request (path, the command answered), for failure messages.
    pub fn transcript(&self) -> String {
        self.seen()
            .iter()
            .map(|s| format!("{} -> {}", s.path, s.answered.as_deref().unwrap_or("(end of turn)")))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Which wire API a request speaks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Api {
    Messages,
    Responses,
    Chat,
    Gemini,
}

async fn handle(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap, body: String) -> Response {
    let bytes = body.len();
    let path = uri.path().to_string();
    let api = match path.as_str() {
        p if p.ends_with("/messages") => Api::Messages,
        p if p.ends_with("/responses") => Api::Responses,
        p if p.ends_with("/chat/completions") => Api::Chat,
        p if p.ends_with(":streamGenerateContent") || p.ends_with(":generateContent") => Api::Gemini,
        p if p.ends_with(":countTokens") => return axum::Json(json!({ "totalTokens": 1000 })).into_response(),
        p if p.ends_with("/count_tokens") => return axum::Json(json!({ "input_tokens": 1000 })).into_response(),
        p if p.ends_with("/models") => {
            return axum::Json(json!({ "object": "list", "data": [{ "id": "m1", "object": "model" }] }))
                .into_response();
        }
        _ => return (StatusCode::NOT_FOUND, format!("no such endpoint {path}")).into_response(),
    };
    let Ok(body) = serde_json::from_str::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "the body is not JSON").into_response();
    };
    let key = headers
        .get("x-api-key")
        .or_else(|| headers.get("x-goog-api-key"))
        .or_else(|| headers.get("authorization"))
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start_matches("Bearer ").to_string())
        .unwrap_or_default();
    let limited = inner
        .limits
        .lock()
        .unwrap()
        .iter()
        .find(|(k, until, _)| *k == key && std::time::Instant::now() < *until)
        .map(|(_, _, secs)| *secs);
    if let Some(retry_after) = limited {
        inner.seen.lock().unwrap().push(Seen {
            path: path.clone(),
            headers: Vec::new(),
            body: body.clone(),
            answered: Some(REFUSED.into()),
            turn: None,
            earlier: Vec::new(),
            bytes: 0,
        });
        let error = match api {
            Api::Messages => json!({ "type": "error", "error": { "type": "rate_limit_error",
                "message": "This request would exceed your account's rate limit. Please try again later." } }),
            Api::Gemini => json!({ "error": { "code": 429, "status": "RESOURCE_EXHAUSTED",
                "message": "Resource has been exhausted (e.g. check quota)." } }),
            _ => json!({ "error": { "type": "rate_limit_exceeded", "code": "rate_limit_exceeded",
                "message": "Rate limit reached. Please try again later." } }),
        };
        // As Anthropic's API answers: the resets in headers (which no CLI
        // passes on, see agent-events.md).
        #[allow(clippy::disallowed_methods)] // the model server's own clock, as a provider's
        let reset = (chrono::Utc::now() + chrono::Duration::seconds(retry_after as i64)).to_rfc3339();
        return Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("content-type", "application/json")
            .header("retry-after", retry_after.to_string())
            .header("anthropic-ratelimit-requests-reset", reset.as_str())
            .header("anthropic-ratelimit-tokens-reset", reset.as_str())
            .body(Body::from(error.to_string()))
            .unwrap();
    }
    let convo = Conversation::read(api, &body, &inner.script);
    let side = system_prompt(&body).is_some_and(|s| SIDE_TASKS.iter().any(|t| s.contains(t)));
    let answer = match side {
        true => None,
        false => inner.script.steps_for(&convo.prompt).get(convo.calls).and_then(|step| convo.call(step)),
    };
    let kept_headers = headers
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "content-length" | "accept-encoding" | "connection"))
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string()))
        .collect();
    inner.seen.lock().unwrap().push(Seen {
        path: path.clone(),
        headers: kept_headers,
        body: body.clone(),
        answered: answer.as_ref().map(|c| c.label.clone()),
        turn: convo.turn.clone(),
        earlier: convo.earlier.clone(),
        bytes,
    });
    let n = inner.seen.lock().unwrap().len();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(path.ends_with(":streamGenerateContent"));
    let named = path.rsplit_once("/models/").and_then(|(_, m)| m.split_once(':')).map(|(m, _)| m);
    let model = body.get("model").and_then(Value::as_str).or(named).unwrap_or("m1").to_string();
    let reply = match answer {
        Some(c) => Reply::Tool { name: c.name, namespace: c.namespace, arguments: c.arguments, id: n },
        None => Reply::Text("Done.".into()),
    };
    let events = match api {
        Api::Messages => messages_events(&reply, &model, n, stream),
        Api::Responses => responses_events(&reply, &model, n, stream),
        Api::Chat => {
            let usage = body.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
            chat_events(&reply, &model, n, (stream, usage))
        }
        Api::Gemini => gemini_events(&reply, &model, stream),
    };
    match events {
        Answer::Json(json) => axum::Json(json).into_response(),
        Answer::Stream(sse) => Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(Body::from(sse))
            .unwrap(),
    }
}

/// The shell tool a client offered, and how its arguments are shaped.
#[derive(Clone, Debug)]
struct ShellTool {
    name: String,
    /// The parameters' JSON schema.
    params: Value,
}

impl ShellTool {
    fn arguments(&self, cmd: &str) -> Value {
        let props = self.params.get("properties").cloned().unwrap_or(Value::Null);
        if props.get("cmd").is_some() {
            return json!({ "cmd": cmd });
        }
        let wants_array = props.pointer("/command/type").and_then(Value::as_str) == Some("array");
        if wants_array {
            return json!({ "command": ["bash", "-lc", cmd] });
        }
        let mut args = json!({ "command": cmd });
        if props.get("description").is_some() {
            args["description"] = json!("scripted step");
        }
        args
    }
}

/// What the server needs from a request: the prompt text, how many calls
/// the model made so far (tool searches aside), and the tools on offer. A
/// conversation resumed across sessions carries earlier sessions' prompts
/// and calls: the newest prompt with a marker starts the current turn.
struct Conversation {
    prompt: String,
    calls: usize,
    /// The marker of the current turn, and those of earlier ones.
    turn: Option<String>,
    earlier: Vec<String>,
    shell_tool: Option<ShellTool>,
    /// Every offered tool: (namespace, name).
    offered: Vec<(Option<String>, String)>,
    /// The queries of the tool searches the conversation made.
    searched: Vec<String>,
}

/// A call to answer with.
struct Call {
    name: String,
    namespace: Option<String>,
    arguments: Value,
    label: String,
}

const SHELL_NAMES: &[&str] = &["bash", "shell", "exec_command", "run_shell_command"];

/// How a request refused at a limit shows in [`Seen::answered`].
pub const REFUSED: &str = "429";

/// How a tool search shows in [`ModelServer::answered`] (Claude Code's
/// tool that loads deferred tools' schemas).
const TOOL_SEARCH: &str = "ToolSearch";

/// The tools that load deferred tools' schemas: Claude Code's, Qwen Code's.
const TOOL_SEARCHES: &[&str] = &[TOOL_SEARCH, "tool_search"];

/// Qwen Code's tool that calls a deferred tool once fetched.
const TOOL_CALL: &str = "tool_call";

/// Side requests a CLI makes with the conversation in them, which must not
/// take the next scripted step: their system prompt says what they are.
const SIDE_TASKS: &[&str] = &["managed memory extraction subagent"];

impl Conversation {
    /// The call that makes `step`, if the request offers what it needs.
    fn call(&self, step: &Step) -> Option<Call> {
        match step {
            Step::Shell(cmd) => self.shell_tool.as_ref().map(|t| Call {
                name: t.name.clone(),
                namespace: None,
                arguments: t.arguments(cmd),
                label: step.label(),
            }),
            Step::Tool(tool, args) => {
                let found = self.offered.iter().find(|(ns, name)| match ns {
                    Some(ns) => ns.contains("cryo") && name == tool,
                    None => [format!("mcp__cryo__{tool}"), format!("cryo_{tool}"), format!("mcp_cryo_{tool}")]
                        .contains(name),
                });
                if let Some((namespace, name)) = found {
                    return Some(Call {
                        name: name.clone(),
                        namespace: namespace.clone(),
                        arguments: args.clone(),
                        label: step.label(),
                    });
                }
                // Deferred and already fetched, where the client calls
                // deferred tools through a tool of its own (Qwen Code's
                // `tool_call`).
                let query = format!("select:mcp__cryo__{tool}");
                let through = self.offered.iter().any(|(ns, n)| ns.is_none() && n == TOOL_CALL);
                if through && self.searched.contains(&query) {
                    return Some(Call {
                        name: TOOL_CALL.into(),
                        namespace: None,
                        arguments: json!({ "name": format!("mcp__cryo__{tool}"), "arguments": args }),
                        label: step.label(),
                    });
                }
                // Deferred: listed by name only, fetched by a search first.
                let search = self.offered.iter().find(|(ns, n)| ns.is_none() && TOOL_SEARCHES.contains(&n.as_str()));
                let query = format!("select:mcp__cryo__{tool}");
                search.map(|(_, name)| Call {
                    name: name.clone(),
                    namespace: None,
                    arguments: json!({ "query": query, "max_results": 5 }),
                    label: format!("{TOOL_SEARCH} {query}"),
                })
            }
        }
    }
}

impl Conversation {
    fn read(api: Api, body: &Value, script: &Script) -> Conversation {
        let mut prompt = String::new();
        let mut calls = 0;
        let mut turn: Option<String> = None;
        let mut earlier = Vec::new();
        let mut searched = Vec::new();
        let empty = Vec::new();
        // A user message's text; one with a marker begins a new turn.
        let mut text_of = |content: &Value, prompt: &mut String, calls: &mut usize| {
            let mut text = String::new();
            match content {
                Value::String(s) => text.push_str(s),
                Value::Array(parts) => {
                    for p in parts {
                        if let Some(t) = p.get("text").and_then(Value::as_str)
                            && matches!(p.get("type").and_then(Value::as_str), Some("text" | "input_text"))
                        {
                            text.push_str(t);
                            text.push('\n');
                        }
                    }
                }
                _ => {}
            }
            if let Some(m) = script.marker_in(&text) {
                earlier.extend(turn.replace(m.to_string()));
                prompt.clear();
                *calls = 0;
            }
            prompt.push_str(&text);
        };
        let not_search = |name: Option<&str>| !name.is_some_and(|n| TOOL_SEARCHES.contains(&n));
        match api {
            Api::Messages | Api::Chat => {
                for m in body.get("messages").and_then(Value::as_array).unwrap_or(&empty) {
                    let role = m.get("role").and_then(Value::as_str).unwrap_or("");
                    let content = m.get("content").unwrap_or(&Value::Null);
                    match role {
                        "user" => text_of(content, &mut prompt, &mut calls),
                        "assistant" => {
                            // Messages: tool_use blocks; Chat: tool_calls.
                            let blocks = content.as_array().unwrap_or(&empty).iter().filter(|b| {
                                b.get("type").and_then(Value::as_str) == Some("tool_use")
                                    && not_search(b.get("name").and_then(Value::as_str))
                            });
                            calls += blocks.count();
                            let chat_calls = m.get("tool_calls").and_then(Value::as_array).unwrap_or(&empty);
                            for c in chat_calls.iter().chain(content.as_array().unwrap_or(&empty)) {
                                let f = c.get("function").unwrap_or(c);
                                if !not_search(f.get("name").and_then(Value::as_str)) {
                                    let args = match f.get("arguments").or_else(|| f.get("input")) {
                                        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
                                        Some(v) => v.clone(),
                                        None => Value::Null,
                                    };
                                    searched.extend(args["query"].as_str().map(str::to_string));
                                }
                            }
                            calls += chat_calls
                                .iter()
                                .filter(|c| not_search(c.pointer("/function/name").and_then(Value::as_str)))
                                .count();
                        }
                        _ => {}
                    }
                }
            }
            Api::Gemini => {
                for c in body.get("contents").and_then(Value::as_array).unwrap_or(&empty) {
                    let parts = c.get("parts").and_then(Value::as_array).unwrap_or(&empty);
                    match c.get("role").and_then(Value::as_str) {
                        Some("user") => {
                            let text: String =
                                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect();
                            text_of(&Value::String(text), &mut prompt, &mut calls)
                        }
                        Some("model") => {
                            calls += parts
                                .iter()
                                .filter(|p| not_search(p.pointer("/functionCall/name").and_then(Value::as_str)))
                                .filter(|p| p.get("functionCall").is_some())
                                .count()
                        }
                        _ => {}
                    }
                }
            }
            Api::Responses => {
                for item in body.get("input").and_then(Value::as_array).unwrap_or(&empty) {
                    match item.get("type").and_then(Value::as_str) {
                        Some("function_call" | "custom_tool_call") => calls += 1,
                        Some("message") | None if item.get("role").and_then(Value::as_str) == Some("user") => {
                            text_of(item.get("content").unwrap_or(&Value::Null), &mut prompt, &mut calls)
                        }
                        _ => {}
                    }
                }
            }
        }
        let (offered, shell_tool) = offered_tools(body);
        Conversation { prompt, calls, turn, earlier, shell_tool, offered, searched }
    }
}

/// The tools a request offers (a namespace's by their namespace), and its
/// shell tool, if one.
fn offered_tools(body: &Value) -> (Vec<(Option<String>, String)>, Option<ShellTool>) {
    let empty = Vec::new();
    // Messages: {name, input_schema}; Responses: {type, name,
    // parameters}, or a namespace {type, name, tools}; Chat: {type,
    // function: {name, parameters}}.
    let mut offered = Vec::new();
    let mut shell_tool = None;
    // Gemini: [{functionDeclarations: [{name, parametersJsonSchema}]}].
    let declared: Vec<Value> = body
        .get("tools")
        .and_then(Value::as_array)
        .unwrap_or(&empty)
        .iter()
        .flat_map(|t| t.get("functionDeclarations").and_then(Value::as_array).cloned().unwrap_or_default())
        .collect();
    let tools = body.get("tools").and_then(Value::as_array).unwrap_or(&empty);
    for t in tools.iter().filter(|t| t.get("functionDeclarations").is_none()).chain(&declared) {
        let f = t.get("function").unwrap_or(t);
        let Some(name) = f.get("name").and_then(Value::as_str) else { continue };
        if t.get("type").and_then(Value::as_str) == Some("namespace") {
            for inner in t.get("tools").and_then(Value::as_array).unwrap_or(&empty) {
                if let Some(n) = inner.get("name").and_then(Value::as_str) {
                    offered.push((Some(name.to_string()), n.to_string()));
                }
            }
            continue;
        }
        offered.push((None, name.to_string()));
        if shell_tool.is_none() && SHELL_NAMES.contains(&name.to_lowercase().as_str()) {
            shell_tool = Some(ShellTool {
                name: name.to_string(),
                params: f
                    .get("input_schema")
                    .or_else(|| f.get("parameters"))
                    .or_else(|| f.get("parametersJsonSchema"))
                    .cloned()
                    .unwrap_or(Value::Null),
            });
        }
    }
    (offered, shell_tool)
}

/// The request's system prompt: Chat's first `system` message, Messages'
/// `system`, Responses' `instructions`, Gemini's `systemInstruction`.
fn system_prompt(body: &Value) -> Option<String> {
    let first = body.pointer("/messages/0").filter(|m| m["role"] == "system").map(|m| &m["content"]);
    let text = first
        .or_else(|| body.get("system"))
        .or_else(|| body.get("instructions"))
        .or_else(|| body.get("systemInstruction"))?;
    Some(match text {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// A whole JSON answer, or a stream of server-sent events.
enum Answer {
    Json(Value),
    Stream(String),
}

enum Reply {
    Tool { name: String, namespace: Option<String>, arguments: Value, id: usize },
    Text(String),
}
