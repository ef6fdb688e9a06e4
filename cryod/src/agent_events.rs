//! The known agent CLIs' machine-readable output, read as it comes: a
//! readable transcript for `cryo-agent.log`, and what the session used
//! (model, tokens, cost, the provider's session id) for the ledger.
//!
//! The formats, verified on the pinned CLIs (`agent-events.md` beside this
//! file holds the details and the flags that turn them on):
//! - Claude Code `-p --output-format stream-json --verbose`: one JSON object
//!   a line; `system/init` (`session_id`, `model`), `assistant` and `user`
//!   messages (text, `tool_use`, `tool_result`), and a final `result` with
//!   `usage` and `total_cost_usd`.
//! - Codex `exec --json`: `thread.started` (`thread_id`), `item.started` and
//!   `item.completed` (`command_execution`, `mcp_tool_call`,
//!   `agent_message`, `error`), `turn.completed` with `usage`.
//! - OpenCode `run --format json`: `text`, `tool_use` (with its output),
//!   `step_finish` (`tokens`, `cost`), every event with its `sessionID`.
//!
//! Token counts: `input_tokens` are all the prompt's tokens, those read from
//! a cache included; `cached_tokens` are the cached ones among them.

use serde_json::Value;

/// Which stream a known kind writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Claude,
    Codex,
    OpenCode,
    /// Qwen Code's `--output-format stream-json`: Claude Code's events.
    Qwen,
    /// Gemini CLI's `--output-format stream-json`.
    Gemini,
    /// Pi's `--mode json`.
    Pi,
    /// What cryod's ACP client (`agent::acp`) writes of an ACP agent.
    Acp,
}

/// What one session used, as far as its stream said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub model: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// As the CLI reported it (Claude Code, OpenCode), else from the price
    /// table (`Prices`).
    pub cost_usd: Option<f64>,
    pub provider_session: Option<String>,
    /// The provider account that served it (`spawn::provider_account`).
    pub provider: Option<String>,
}

impl Usage {
    /// Whether the stream said anything of use.
    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// The provider refused for its limit: when it said it resets, if it did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limited {
    /// Seconds since the epoch (a usage window's reset).
    pub resets_at: Option<i64>,
    /// Or a delay the CLI was told (milliseconds, from its last retry).
    pub retry_after_ms: Option<u64>,
    /// The CLI's own words (or the gateway's reading of the headers).
    pub text: String,
    /// Read by the gateway from the provider's own headers: the hold ends
    /// at that instant, without the jitter that spreads guessed ones.
    pub exact: bool,
}

/// A provider's limit in one of a kind's log lines (its stderr, which cryod
/// reads for OpenCode and Gemini CLI).
pub fn log_limit(format: Format, line: &str) -> Option<Limited> {
    match format {
        Format::OpenCode => opencode_log_limit(line),
        Format::Gemini => gemini_log_limit(line),
        _ => None,
    }
}

/// A provider's limit in Gemini CLI's stderr: it retries a 429 with its own
/// backoff (not the provider's `retry-after`), saying `Attempt 1 failed
/// with status 429. Retrying with backoff... _ApiError: {…}`; it would only
/// wait.
pub fn gemini_log_limit(line: &str) -> Option<Limited> {
    let (_, rest) = line.split_once("failed with status ")?;
    rest.starts_with("429").then(|| Limited { text: clip(line.trim()), ..Limited::default() })
}

/// A provider's limit in one of OpenCode's log lines (`--print-logs` on
/// stderr; its JSON events say nothing of a 429, it waits silently):
/// `level=ERROR ... message="stream error" ... error.error="AI_APICallError:
/// Rate limit reached. ..."`.
pub fn opencode_log_limit(line: &str) -> Option<Limited> {
    if !line.contains("level=ERROR") {
        return None;
    }
    // Only the error's own words: the rest of the line (its timestamp's
    // milliseconds, ids) may hold any digits.
    let (_, error) = line.split_once("error.error=")?;
    let error = error.trim_matches('"');
    says_limit(error).then(|| Limited { text: error.to_string(), ..Limited::default() })
}

/// Whether an error's text is a provider's limit: a 429 (as a number of its
/// own, not digits inside another), "Too Many Requests", a rate or usage limit.
fn says_limit(text: &str) -> bool {
    let lower = text.to_lowercase();
    let status = lower.split(|c: char| !c.is_ascii_digit()).any(|n| n == "429");
    status || ["too many requests", "rate limit", "usage limit"].iter().any(|w| lower.contains(w))
}

/// The most of one message's words gathered from its pieces.
const MAX_SAID: usize = 64 * 1024;

/// The most ACP tool calls a session's reader remembers as shown.
const MAX_SHOWN: usize = 10_000;

/// Longest line of a tool's result shown in the transcript, and how many.
const RESULT_LINES: usize = 3;
const LINE_CHARS: usize = 200;

/// Reads one session's stream, line by line.
pub struct Reader {
    format: Format,
    pub usage: Usage,
    /// The stream ended on the provider's limit.
    pub limited: Option<Limited>,
    /// The delay of the last retry after a 429 (Claude Code's `api_retry`).
    retry_ms: Option<u64>,
    /// Claude Code's messages so far, by id: their usage as last seen (a
    /// message's blocks come one line each), until its `result` gives the
    /// totals; what the session used while it runs.
    messages: std::collections::BTreeMap<String, (u64, u64, u64)>,
    /// OpenCode reports a cost per step; summed here.
    cost_reported: f64,
    /// The tool calls seen since they were last taken, in order.
    pub calls: Vec<ToolCall>,
    /// Gemini CLI's and ACP agents' assistant text, which comes in pieces.
    said: String,
    /// The ACP tool calls already shown (their updates repeat them).
    shown: std::collections::HashSet<String>,
}

/// A tool call the agent made, as its stream told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The tool's name (`Bash`, `$` for Codex's shell).
    pub name: String,
    /// The tool and its exact arguments: the same for the same call.
    pub key: String,
    /// As the transcript shows it (`Bash: git status`).
    pub shown: String,
}

impl ToolCall {
    fn new(name: &str, input: &Value) -> ToolCall {
        let name = tool_name(name);
        ToolCall { key: call_key(&name, &input.to_string()), shown: call(&name, input), name }
    }
}

/// A tool's name as kept: one short line (an agent names its own MCP
/// tools as it likes).
fn tool_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// A call's identity: its tool and a digest of its exact arguments (not
/// the arguments themselves, which may be large).
fn call_key(name: &str, input: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    input.hash(&mut h);
    format!("{name}\0{:016x}", h.finish())
}

impl Reader {
    /// `model` is what the agent line or the CLI's config names, if any
    /// (Codex and OpenCode do not repeat it in their events).
    pub fn new(format: Format, model: Option<String>) -> Reader {
        Reader {
            format,
            usage: Usage { model, ..Usage::default() },
            limited: None,
            retry_ms: None,
            messages: Default::default(),
            cost_reported: 0.0,
            calls: Vec::new(),
            said: String::new(),
            shown: Default::default(),
        }
    }

    /// The transcript lines for one line of output; anything that is not
    /// one of the format's events is kept as it is.
    pub fn line(&mut self, line: &str) -> Vec<String> {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return if line.trim().is_empty() { Vec::new() } else { vec![line.to_string()] };
        };
        let mut out = Vec::new();
        match self.format {
            Format::Claude | Format::Qwen => self.claude(&v, &mut out),
            Format::Codex => self.codex(&v, &mut out),
            Format::OpenCode => self.opencode(&v, &mut out),
            Format::Gemini => self.gemini(&v, &mut out),
            Format::Pi => self.pi(&v, &mut out),
            Format::Acp => self.acp(&v, &mut out),
        }
        out
    }

    fn claude(&mut self, v: &Value, out: &mut Vec<String>) {
        let u = &mut self.usage;
        if let Some(s) = str_at(v, "/session_id") {
            u.provider_session = Some(s.to_string());
        }
        match (str_at(v, "/type"), str_at(v, "/subtype")) {
            (Some("system"), Some("init")) => {
                if let Some(m) = str_at(v, "/model") {
                    u.model = Some(m.to_string());
                }
                let failed: Vec<&str> = v["mcp_servers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|s| s["status"] != "connected")
                    .filter_map(|s| s["name"].as_str())
                    .collect();
                out.push(format!(
                    "[session {} · model {}]",
                    u.provider_session.as_deref().unwrap_or("?"),
                    or_q(&u.model)
                ));
                if !failed.is_empty() {
                    out.push(format!("error: MCP server(s) not connected: {}", failed.join(", ")));
                }
            }
            (Some("system"), Some("api_retry")) if v["error_status"] == 429 => {
                self.retry_ms = v["retry_delay_ms"].as_u64();
                out.push(format!(
                    "limit: the provider refused (429); Claude Code retries in {} s",
                    self.retry_ms.unwrap_or(0) / 1000
                ));
            }
            (Some("assistant"), _) => {
                if let Some(m) = str_at(v, "/message/model").filter(|m| !m.starts_with('<')) {
                    u.model = Some(m.to_string());
                }
                if let Some(id) = str_at(v, "/message/id") {
                    let mu = &v["message"]["usage"];
                    let (read, written) = (num(mu, "cache_read_input_tokens"), num(mu, "cache_creation_input_tokens"));
                    let seen = (num(mu, "input_tokens") + read + written, num(mu, "output_tokens"), read);
                    self.messages.insert(id.to_string(), seen);
                    let sum = self.messages.values().fold((0, 0, 0), |a, m| (a.0 + m.0, a.1 + m.1, a.2 + m.2));
                    (u.input_tokens, u.output_tokens, u.cached_tokens) = sum;
                }
                for part in v["message"]["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => push_text(out, "assistant", part["text"].as_str().unwrap_or("")),
                        Some("tool_use") => {
                            let (name, input) = (part["name"].as_str().unwrap_or("?"), &part["input"]);
                            // Qwen Code calls a deferred tool (MCP's) through
                            // its `tool_call`: shown as the tool it calls.
                            let (name, input) = match (self.format, name, input["name"].as_str()) {
                                (Format::Qwen, "tool_call", Some(inner)) => (inner, &input["arguments"]),
                                _ => (name, input),
                            };
                            let c = ToolCall::new(name, input);
                            out.push(format!("→ {}", c.shown));
                            self.calls.push(c);
                        }
                        _ => {}
                    }
                }
            }
            (Some("user"), _) => {
                for part in v["message"]["content"].as_array().into_iter().flatten() {
                    if part["type"] == "tool_result" {
                        let text = match &part["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(parts) => parts
                                .iter()
                                .map(|p| {
                                    p["text"].as_str().map(str::to_string).unwrap_or_else(|| {
                                        p["tool_name"].as_str().map(|t| format!("(loaded {t})")).unwrap_or_default()
                                    })
                                })
                                .collect::<Vec<_>>()
                                .join("\n"),
                            _ => String::new(),
                        };
                        result(out, &text, part["is_error"] == true);
                    }
                }
            }
            (Some("result"), _) => {
                let usage = &v["usage"];
                let (read, written) =
                    (num(usage, "cache_read_input_tokens"), num(usage, "cache_creation_input_tokens"));
                u.input_tokens = num(usage, "input_tokens") + read + written;
                u.output_tokens = num(usage, "output_tokens");
                u.cached_tokens = read;
                u.cost_usd = v["total_cost_usd"].as_f64().or(u.cost_usd);
                if v["is_error"] == true {
                    let why = str_at(v, "/result").unwrap_or("the run failed");
                    out.push(format!("error: {}", clip(why)));
                    if v["api_error_status"] == 429 || v["api_error"] == "usage_limit_reached" {
                        let info = v.pointer("/api_error_params/rate_limit_info");
                        self.limited = Some(Limited {
                            resets_at: info.and_then(|i| i["resetsAt"].as_i64()),
                            retry_after_ms: self.retry_ms,
                            text: why.to_string(),
                            exact: false,
                        });
                    }
                }
                out.push(self.summary());
            }
            _ => {}
        }
    }

    fn codex(&mut self, v: &Value, out: &mut Vec<String>) {
        let item = &v["item"];
        match str_at(v, "/type") {
            Some("thread.started") => {
                self.usage.provider_session = str_at(v, "/thread_id").map(str::to_string);
                out.push(format!(
                    "[thread {} · model {}]",
                    or_q(&self.usage.provider_session),
                    or_q(&self.usage.model)
                ));
            }
            Some("item.started") => match item["type"].as_str() {
                Some("command_execution") => {
                    let command = item["command"].as_str().unwrap_or("");
                    out.push(format!("→ $ {}", clip(command)));
                    let key = call_key("$", command);
                    self.calls.push(ToolCall { name: "$".into(), key, shown: format!("$ {}", clip(command)) });
                }
                Some("mcp_tool_call") => {
                    let name =
                        format!("{}.{}", item["server"].as_str().unwrap_or("?"), item["tool"].as_str().unwrap_or("?"));
                    let c = ToolCall::new(&name, &item["arguments"]);
                    out.push(format!("→ {}", c.shown));
                    self.calls.push(c);
                }
                _ => {}
            },
            Some("item.completed") => match item["type"].as_str() {
                Some("command_execution") => {
                    let code = item["exit_code"].as_i64();
                    let text = item["aggregated_output"].as_str().unwrap_or("");
                    result(out, text, code.is_some_and(|c| c != 0));
                }
                Some("mcp_tool_call") => {
                    let text: Vec<&str> = item["result"]["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["text"].as_str())
                        .collect();
                    let error = item["error"].as_str().or_else(|| item["error"]["message"].as_str());
                    match error {
                        Some(e) => result(out, e, true),
                        None => result(out, &text.join("\n"), false),
                    }
                }
                Some("agent_message") => push_text(out, "assistant", item["text"].as_str().unwrap_or("")),
                Some("reasoning") => push_text(out, "thinking", item["text"].as_str().unwrap_or("")),
                Some("error") => out.push(format!("error: {}", clip(item["message"].as_str().unwrap_or("?")))),
                _ => {}
            },
            Some("turn.completed") => {
                let usage = &v["usage"];
                self.usage.input_tokens += num(usage, "input_tokens");
                self.usage.cached_tokens += num(usage, "cached_input_tokens");
                self.usage.output_tokens += num(usage, "output_tokens");
                out.push(self.summary());
            }
            Some("turn.failed") => {
                out.push(format!("error: {}", clip(str_at(v, "/error/message").unwrap_or("the turn failed"))))
            }
            Some("error") => {
                let message = str_at(v, "/message").unwrap_or("?");
                out.push(format!("error: {}", clip(message)));
                // "Reconnecting... 1/5 (exceeded retry limit, last status:
                // 429 Too Many Requests)": Codex would wait out the limit.
                if says_limit(message) {
                    self.limited.get_or_insert(Limited { text: message.to_string(), ..Limited::default() });
                }
            }
            _ => {}
        }
    }

    fn opencode(&mut self, v: &Value, out: &mut Vec<String>) {
        if let Some(s) = str_at(v, "/sessionID") {
            if self.usage.provider_session.is_none() {
                out.push(format!("[session {s} · model {}]", or_q(&self.usage.model)));
            }
            self.usage.provider_session = Some(s.to_string());
        }
        let part = &v["part"];
        match str_at(v, "/type") {
            Some("text") => push_text(out, "assistant", part["text"].as_str().unwrap_or("")),
            Some("tool_use") => {
                let state = &part["state"];
                let c = ToolCall::new(part["tool"].as_str().unwrap_or("?"), &state["input"]);
                out.push(format!("→ {}", c.shown));
                self.calls.push(c);
                let error = state["status"] == "error";
                let text = state["output"].as_str().or_else(|| state["error"].as_str()).unwrap_or("");
                result(out, text, error);
            }
            Some("step_finish") => {
                let t = &part["tokens"];
                let (read, written) = (num(&t["cache"], "read"), num(&t["cache"], "write"));
                self.usage.input_tokens += num(t, "input") + read + written;
                self.usage.cached_tokens += read;
                self.usage.output_tokens += num(t, "output") + num(t, "reasoning");
                self.cost_reported += part["cost"].as_f64().unwrap_or(0.0);
                if self.cost_reported > 0.0 {
                    self.usage.cost_usd = Some(self.cost_reported);
                }
                if part["reason"] == "stop" {
                    out.push(self.summary());
                }
            }
            Some("error") => {
                let why = str_at(v, "/error/data/message").or_else(|| str_at(v, "/error/name")).unwrap_or("?");
                out.push(format!("error: {}", clip(why)));
            }
            _ => {}
        }
    }

    /// Gemini CLI: `init`, `message` (the assistant's in `delta` pieces,
    /// gathered into one line), `tool_use`, `tool_result`, `error`, and a
    /// final `result` with `stats`.
    fn gemini(&mut self, v: &Value, out: &mut Vec<String>) {
        let kind = str_at(v, "/type");
        if kind != Some("message") || v["role"] != "assistant" {
            self.flush_said(out);
        }
        match kind {
            Some("init") => {
                self.usage.provider_session = str_at(v, "/session_id").map(str::to_string);
                if let Some(m) = str_at(v, "/model") {
                    self.usage.model = Some(m.to_string());
                }
                out.push(format!(
                    "[session {} · model {}]",
                    or_q(&self.usage.provider_session),
                    or_q(&self.usage.model)
                ));
            }
            Some("message") if v["role"] == "assistant" => {
                self.hear(str_at(v, "/content").unwrap_or(""));
                if v["delta"] != true {
                    self.flush_said(out);
                }
            }
            Some("tool_use") => {
                let c = ToolCall::new(str_at(v, "/tool_name").unwrap_or("?"), &v["parameters"]);
                out.push(format!("→ {}", c.shown));
                self.calls.push(c);
            }
            Some("tool_result") => {
                let error = v["status"] == "error";
                let text = str_at(v, "/output").or_else(|| str_at(v, "/error/message")).unwrap_or("");
                result(out, text, error);
            }
            Some("error") => {
                let message = str_at(v, "/message").unwrap_or("?");
                out.push(format!("error: {}", clip(message)));
            }
            Some("result") => {
                let stats = &v["stats"];
                self.usage.input_tokens = num(stats, "input_tokens");
                self.usage.output_tokens = num(stats, "output_tokens");
                self.usage.cached_tokens = num(stats, "cached");
                if v["status"] == "error" {
                    let why = str_at(v, "/error/message").unwrap_or("the run failed");
                    out.push(format!("error: {}", clip(why)));
                    if says_limit(why) || str_at(v, "/error/type").is_some_and(says_limit) {
                        self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                    }
                }
                out.push(self.summary());
            }
            _ => {}
        }
    }

    /// Pi: `session` (its id), `message_end` of each assistant message (its
    /// text, model, usage and cost, or its error), `tool_execution_start` and
    /// `_end`, `auto_retry_start` (a 429 it would wait out), `agent_end`.
    fn pi(&mut self, v: &Value, out: &mut Vec<String>) {
        match str_at(v, "/type") {
            Some("session") => {
                self.usage.provider_session = str_at(v, "/id").map(str::to_string);
                out.push(format!(
                    "[session {} · model {}]",
                    or_q(&self.usage.provider_session),
                    or_q(&self.usage.model)
                ));
            }
            Some("message_end") if v["message"]["role"] == "assistant" => {
                let m = &v["message"];
                if let Some(model) = str_at(m, "/model") {
                    self.usage.model = Some(model.to_string());
                }
                let u = &m["usage"];
                let (read, written) = (num(u, "cacheRead"), num(u, "cacheWrite"));
                self.usage.input_tokens += num(u, "input") + read + written;
                self.usage.cached_tokens += read;
                self.usage.output_tokens += num(u, "output");
                self.cost_reported += u.pointer("/cost/total").and_then(Value::as_f64).unwrap_or(0.0);
                if self.cost_reported > 0.0 {
                    self.usage.cost_usd = Some(self.cost_reported);
                }
                for part in m["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => push_text(out, "assistant", part["text"].as_str().unwrap_or("")),
                        Some("thinking") => push_text(out, "thinking", part["thinking"].as_str().unwrap_or("")),
                        _ => {}
                    }
                }
                if m["stopReason"] == "error" {
                    let why = str_at(m, "/errorMessage").unwrap_or("the model call failed");
                    out.push(format!("error: {}", clip(why)));
                    if says_limit(why) {
                        self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                    }
                }
            }
            Some("tool_execution_start") => {
                let c = ToolCall::new(str_at(v, "/toolName").unwrap_or("?"), &v["args"]);
                out.push(format!("→ {}", c.shown));
                self.calls.push(c);
            }
            Some("tool_execution_end") => {
                let text: Vec<&str> = v["result"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["text"].as_str())
                    .collect();
                result(out, &text.join("\n"), v["isError"] == true);
            }
            Some("auto_retry_start") => {
                let why = str_at(v, "/errorMessage").unwrap_or("?");
                out.push(format!("error: {} (Pi retries)", clip(why)));
                // A limit it would only wait out.
                if says_limit(why) {
                    self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                }
            }
            Some("agent_end") => out.push(self.summary()),
            _ => {}
        }
    }

    /// An ACP agent, as cryod's client writes it (see `agent::acp`): its
    /// `session/update`s (message pieces, with the usage of each model
    /// request in `_meta.usage` for Qwen Code; tool calls and their
    /// updates), the permissions it was given, and the prompt's result (with
    /// `usage`, or Gemini CLI's `_meta.quota`, where the agent reports there).
    fn acp(&mut self, v: &Value, out: &mut Vec<String>) {
        let update = &v["update"];
        let kind = str_at(v, "/type");
        if kind != Some("update") || update["sessionUpdate"] != "agent_message_chunk" {
            self.flush_said(out);
        }
        match kind {
            Some("session") => {
                self.usage.provider_session = str_at(v, "/sessionId").map(str::to_string);
                if let Some(m) = str_at(v, "/model") {
                    self.usage.model = Some(m.to_string());
                }
                let how = if v["resumed"] == true { "resumed" } else { "session" };
                out.push(format!("[{how} {} · model {}]", or_q(&self.usage.provider_session), or_q(&self.usage.model)));
            }
            Some("update") => match update["sessionUpdate"].as_str() {
                Some("agent_message_chunk") => {
                    self.hear(str_at(update, "/content/text").unwrap_or(""));
                    let u = &update["_meta"]["usage"];
                    if u.is_object() {
                        self.usage.input_tokens += num(u, "inputTokens");
                        self.usage.cached_tokens += num(u, "cachedReadTokens");
                        self.usage.output_tokens += num(u, "outputTokens") + num(u, "thoughtTokens");
                    }
                }
                Some("tool_call" | "tool_call_update") => {
                    let id = str_at(update, "/toolCallId").unwrap_or("").to_string();
                    let input = &update["rawInput"];
                    let has_input = input.as_object().is_some_and(|o| !o.is_empty());
                    if has_input && !self.shown.contains(&id) && self.shown.len() < MAX_SHOWN {
                        let name =
                            str_at(update, "/_meta/toolName").or_else(|| str_at(update, "/title")).unwrap_or("?");
                        let c = ToolCall::new(name, input);
                        out.push(format!("→ {}", c.shown));
                        self.calls.push(c);
                        self.shown.insert(id);
                    }
                    if let Some(status @ ("completed" | "failed")) = str_at(update, "/status") {
                        // A shell's own output where the agent gives it
                        // (Qwen Code's `rawOutput.output`), else the content.
                        if let Some(o) = str_at(update, "/rawOutput/output").filter(|o| !o.is_empty()) {
                            result(out, o, status == "failed");
                            return;
                        }
                        let text: Vec<&str> = update["content"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|c| c.pointer("/content/text").and_then(Value::as_str).or(c["path"].as_str()))
                            .collect();
                        result(out, &text.join("\n"), status == "failed");
                    }
                }
                _ => {}
            },
            Some("permission") => out.push(format!(
                "permission: {} ({})",
                clip(str_at(v, "/tool").unwrap_or("?")),
                str_at(v, "/chose").unwrap_or("?")
            )),
            Some("result") => {
                let r = &v["result"];
                let quota = &r["_meta"]["quota"];
                if self.usage.input_tokens == 0 && self.usage.output_tokens == 0 {
                    if r["usage"].is_object() {
                        self.usage.input_tokens = num(&r["usage"], "inputTokens");
                        self.usage.output_tokens = num(&r["usage"], "outputTokens");
                    } else if quota.is_object() {
                        self.usage.input_tokens = num(&quota["token_count"], "input_tokens");
                        self.usage.output_tokens = num(&quota["token_count"], "output_tokens");
                    }
                }
                if let Some(m) = quota.pointer("/model_usage/0/model").and_then(Value::as_str) {
                    self.usage.model.get_or_insert_with(|| m.to_string());
                }
                if r["stopReason"] != "end_turn" {
                    out.push(format!("stopped: {}", str_at(r, "/stopReason").unwrap_or("?")));
                }
                out.push(self.summary());
            }
            Some("error") => {
                let why = str_at(v, "/message").unwrap_or("?");
                out.push(format!("error: {}", clip(why)));
                if says_limit(why) {
                    self.limited.get_or_insert(Limited { text: why.to_string(), ..Limited::default() });
                }
            }
            _ => {}
        }
    }

    /// A piece of the assistant's words, gathered (at most [`MAX_SAID`]
    /// bytes of them: the transcript shows a few lines of each anyway).
    fn hear(&mut self, piece: &str) {
        let room = MAX_SAID.saturating_sub(self.said.len());
        let mut cut = piece.len().min(room);
        while !piece.is_char_boundary(cut) {
            cut -= 1;
        }
        self.said.push_str(&piece[..cut]);
    }

    /// The assistant's words gathered so far, as one transcript line.
    fn flush_said(&mut self, out: &mut Vec<String>) {
        let said = std::mem::take(&mut self.said);
        push_text(out, "assistant", &said);
    }

    /// One line on what the session used so far.
    fn summary(&self) -> String {
        let u = &self.usage;
        let cost = u.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
        format!("[usage: {} in ({} cached), {} out{cost}]", u.input_tokens, u.cached_tokens, u.output_tokens)
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

fn or_q(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("?")
}

fn clip(s: &str) -> String {
    let one: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    match one.char_indices().nth(LINE_CHARS) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

fn push_text(out: &mut Vec<String>, who: &str, text: &str) {
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        out.push(format!("{who}: {}", clip(l)));
    }
}

/// A tool call in one line: its command, its file, or its arguments.
fn call(name: &str, input: &Value) -> String {
    let detail = ["command", "cmd", "file_path", "filePath", "path", "pattern", "url", "query"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| if input.is_null() { String::new() } else { input.to_string() });
    format!("{name}: {}", clip(&detail))
}

/// A tool's result: its first lines, marked when it failed.
fn result(out: &mut Vec<String>, text: &str, error: bool) {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mark = if error { "← error: " } else { "← " };
    if lines.is_empty() {
        out.push(format!("{mark}(no output)"));
    }
    for (i, l) in lines.iter().take(RESULT_LINES).enumerate() {
        out.push(format!("{}{}", if i == 0 { mark } else { "  " }, clip(l)));
    }
    if lines.len() > RESULT_LINES {
        out.push(format!("  … {} more line(s)", lines.len() - RESULT_LINES));
    }
}

/// Prices per million tokens, for a CLI that reports no cost.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Input tokens read from a cache (default: the input price).
    pub cached: Option<f64>,
}

/// The price table shipped with cryo (USD per million tokens, as the
/// providers listed them in late 2025; `[prices."MODEL"]` in `cryod.toml`
/// overrides or adds). A model that is not listed gets no computed cost.
pub const DEFAULT_PRICES_DATE: &str = "2025-11";
pub fn default_prices() -> Vec<(&'static str, Price)> {
    let p = |input, output, cached| Price { input, output, cached: Some(cached) };
    vec![
        ("gpt-5", p(1.25, 10.0, 0.125)),
        ("gpt-5-codex", p(1.25, 10.0, 0.125)),
        ("gpt-5-mini", p(0.25, 2.0, 0.025)),
        ("claude-sonnet-4-5", p(3.0, 15.0, 0.30)),
        ("claude-opus-4-1", p(15.0, 75.0, 1.50)),
        ("claude-haiku-4-5", p(1.0, 5.0, 0.10)),
    ]
}

/// The price table in use: the shipped defaults with `cryod.toml`'s
/// `[prices."MODEL"]` over them.
#[derive(Debug, Clone, Default)]
pub struct Prices(std::collections::BTreeMap<String, Price>);

impl Prices {
    pub fn new(overrides: &std::collections::BTreeMap<String, Price>) -> Prices {
        let mut all: std::collections::BTreeMap<String, Price> =
            default_prices().into_iter().map(|(m, p)| (m.to_string(), p)).collect();
        all.extend(overrides.iter().map(|(m, p)| (m.clone(), p.clone())));
        Prices(all)
    }

    /// The cost of `u`'s tokens, if its model has a price (its name, or the
    /// name without a provider prefix: `openai/gpt-5`).
    pub fn cost(&self, u: &Usage) -> Option<f64> {
        let model = u.model.as_deref()?;
        let bare = model.rsplit('/').next().unwrap_or(model);
        self.0.get(model).or_else(|| self.0.get(bare)).map(|p| p.cost(u))
    }
}

impl Price {
    /// The cost of `u`'s tokens.
    pub fn cost(&self, u: &Usage) -> f64 {
        let fresh = u.input_tokens.saturating_sub(u.cached_tokens) as f64;
        let cached = u.cached_tokens as f64;
        (fresh * self.input + cached * self.cached.unwrap_or(self.input) + u.output_tokens as f64 * self.output) / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(format: Format, model: Option<&str>, text: &str) -> (Vec<String>, Usage) {
        let mut r = Reader::new(format, model.map(str::to_string));
        let lines = text.lines().flat_map(|l| r.line(l)).collect();
        (lines, r.usage)
    }

    /// Lines captured from Claude Code 2.1.330 against the scripted model.
    #[test]
    fn claude_stream() {
        let (t, u) = read(Format::Claude, None, include_str!("testdata/claude-stream.jsonl"));
        assert_eq!(u.model.as_deref(), Some("claude-opus-5-5"));
        assert_eq!(u.provider_session.as_deref(), Some("67d0929e-d211-4e51-954a-22e4a92a1a9a"));
        assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens), (70, 35, 0), "the result's totals");
        assert_eq!(u.cost_usd, Some(0.0009800000000000002));
        // Before the result, what the messages so far used.
        let mut r = Reader::new(Format::Claude, None);
        for l in include_str!("testdata/claude-stream.jsonl").lines().filter(|l| !l.contains("\"total_cost_usd\"")) {
            r.line(l);
        }
        assert!(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, "{:?}", r.usage);
        assert_eq!(r.usage.cost_usd, None);
        assert!(t.iter().any(|l| l.starts_with("[session 67d0929e")), "{t:?}");
        assert!(
            t.contains(&"→ mcp__cryo__send: {\"text\":\"hello from session 1, through MCP\"}".to_string()),
            "{t:?}"
        );
        assert!(t.iter().any(|l| l.starts_with("← (loaded mcp__cryo__send)")), "{t:?}");
        assert!(t.iter().any(|l| l == "→ Bash: cryo-agent send 'hello from session 1'"), "{t:?}");
        assert!(t.iter().any(|l| l.starts_with("← sent: messages/outbox/")), "{t:?}");
        assert!(t.iter().any(|l| l == "[usage: 70 in (0 cached), 35 out, $0.0010]"), "{t:?}");
    }

    /// Lines captured from Codex 0.169.0.
    #[test]
    fn codex_events() {
        let (t, u) = read(Format::Codex, Some("m1"), include_str!("testdata/codex-events.jsonl"));
        assert_eq!(u.provider_session.as_deref(), Some("01a2099b-b164-71a3-a92a-210aefd3ddcd"));
        assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens, u.cost_usd), (40, 20, 0, None));
        assert!(t.contains(&"[thread 01a2099b-b164-71a3-a92a-210aefd3ddcd · model m1]".to_string()), "{t:?}");
        assert!(t.iter().any(|l| l.starts_with("error: Model metadata for `m1` not found")), "{t:?}");
        assert!(t.iter().any(|l| l.starts_with("→ cryo.send: {\"text\"")), "{t:?}");
        assert!(t.iter().any(|l| l.starts_with("→ $ /bin/bash -c \"cryo-agent send")), "{t:?}");
        assert!(t.iter().any(|l| l.starts_with("← sent: messages/outbox/")), "{t:?}");
    }

    /// Lines captured from OpenCode 1.18.33.
    #[test]
    fn opencode_events() {
        let (t, u) = read(Format::OpenCode, None, include_str!("testdata/opencode-events.jsonl"));
        assert_eq!(u.provider_session.as_deref(), Some("ses_df66415c7ffe43h2zsKRwpH3bI"));
        assert_eq!((u.input_tokens, u.output_tokens), (30, 15), "{u:?}");
        assert_eq!(u.cost_usd, None, "a reported cost of 0 is no cost");
        assert!(t.iter().any(|l| l.starts_with("→ cryo_send: {\"text\"")), "{t:?}");
        assert!(t.iter().any(|l| l == "→ bash: cryo-agent send 'hello from session 1'"), "{t:?}");
        assert!(t.iter().any(|l| l == "← hibernating: next wake at 2026-11-23T18:12:30+00:00"), "{t:?}");
    }

    /// Qwen Code 0.24.4's stream-json is Claude Code's; a deferred (MCP)
    /// tool called through its `tool_call` shows as that tool.
    #[test]
    fn qwen_stream() {
        let lines = [
            r#"{"type":"system","subtype":"init","session_id":"e653","cwd":"/c","mcp_servers":[{"name":"cryo","status":"connected"}],"model":"m1","permission_mode":"yolo","qwen_code_version":"0.24.4"}"#,
            r#"{"type":"assistant","session_id":"e653","parent_tool_use_id":null,"message":{"id":"a1","type":"message","role":"assistant","model":"m1","content":[{"type":"tool_use","id":"call_1","name":"tool_call","input":{"name":"mcp__cryo__send","arguments":{"text":"hi"}}}],"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":0,"total_tokens":15}}}"#,
            r#"{"type":"user","session_id":"e653","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","is_error":false,"content":"sent: messages/outbox/x.md"}]}}"#,
            r#"{"type":"result","subtype":"success","session_id":"e653","is_error":false,"result":"Done.","usage":{"input_tokens":20,"output_tokens":10,"cache_read_input_tokens":0,"total_tokens":30}}"#,
        ];
        let (t, u) = read(Format::Qwen, None, &lines.join("\n"));
        assert_eq!((u.model.as_deref(), u.provider_session.as_deref()), (Some("m1"), Some("e653")));
        assert_eq!((u.input_tokens, u.output_tokens, u.cost_usd), (20, 10, None), "no cost: the price table's");
        assert!(t.contains(&"→ mcp__cryo__send: {\"text\":\"hi\"}".to_string()), "{t:?}");
        assert!(t.contains(&"← sent: messages/outbox/x.md".to_string()), "{t:?}");
    }

    /// Gemini CLI 0.61.0's stream-json, in the shapes its source emits and
    /// the scripted model's runs showed: the assistant's words come in
    /// pieces and are gathered into one line.
    #[test]
    fn gemini_stream() {
        let lines = [
            r#"{"type":"init","timestamp":"2026-11-27T04:50:26.274Z","session_id":"6310a789","model":"m1"}"#,
            r#"{"type":"message","timestamp":"t","role":"user","content":"- session: 1"}"#,
            r#"{"type":"tool_use","timestamp":"t","tool_name":"mcp_cryo_send","tool_id":"c1","parameters":{"text":"hi"}}"#,
            r#"{"type":"tool_result","timestamp":"t","tool_id":"c1","status":"success","output":"sent: messages/outbox/x.md"}"#,
            r#"{"type":"tool_use","timestamp":"t","tool_name":"run_shell_command","tool_id":"c2","parameters":{"command":"false"}}"#,
            r#"{"type":"tool_result","timestamp":"t","tool_id":"c2","status":"error","error":{"type":"TOOL_EXECUTION_ERROR","message":"exit 1"}}"#,
            r#"{"type":"message","timestamp":"t","role":"assistant","content":"All ","delta":true}"#,
            r#"{"type":"message","timestamp":"t","role":"assistant","content":"done.","delta":true}"#,
            r#"{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":45,"input_tokens":30,"output_tokens":15,"cached":4,"input":26,"duration_ms":67,"tool_calls":2}}"#,
        ];
        let (t, u) = read(Format::Gemini, None, &lines.join("\n"));
        assert_eq!((u.model.as_deref(), u.provider_session.as_deref()), (Some("m1"), Some("6310a789")));
        assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens, u.cost_usd), (30, 15, 4, None));
        assert_eq!(
            t,
            [
                "[session 6310a789 · model m1]",
                "→ mcp_cryo_send: {\"text\":\"hi\"}",
                "← sent: messages/outbox/x.md",
                "→ run_shell_command: false",
                "← error: exit 1",
                "assistant: All done.",
                "[usage: 30 in (4 cached), 15 out]",
            ]
        );
        let mut r = Reader::new(Format::Gemini, None);
        r.line(r#"{"type":"result","status":"error","error":{"type":"FatalError","message":"429 Too Many Requests"},"stats":{}}"#);
        assert!(r.limited.is_some());
    }

    /// Lines captured from Pi 0.73.1 (`--mode json`) against a fake
    /// OpenAI-compatible server: one `bash` call, then text.
    #[test]
    fn pi_events() {
        let (t, u) = read(Format::Pi, None, include_str!("testdata/pi-events.jsonl"));
        assert_eq!(u.provider_session.as_deref(), Some("01a21b6b-c06c-717c-83e1-61e36fe41fbd"));
        assert_eq!(u.model.as_deref(), Some("fake-model"));
        // Two model calls: 100 in and 10 out, then 120 in (20 cached) and 5 out.
        assert_eq!((u.input_tokens, u.cached_tokens, u.output_tokens, u.cost_usd), (220, 20, 15, None), "{u:?}");
        assert_eq!(t.first().map(String::as_str), Some("[session 01a21b6b-c06c-717c-83e1-61e36fe41fbd · model ?]"));
        assert!(t.contains(&"→ bash: echo hi".to_string()), "{t:?}");
        assert!(t.contains(&"← hi".to_string()), "{t:?}");
        assert!(t.contains(&"assistant: Done.".to_string()), "{t:?}");
        assert!(t.last().is_some_and(|l| l.starts_with("[usage: 220 in (20 cached), 15 out")), "{t:?}");
        let mut r = Reader::new(Format::Pi, None);
        r.line(r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000,"errorMessage":"429 Rate limit reached for requests. Please try again in 600s."}"#);
        assert!(r.limited.is_some(), "a 429 it would retry ends the session as limited");
    }

    /// An ACP agent as cryod's client writes it (Qwen Code 0.24.4's
    /// `session/update`s, captured over ACP): usage per model request in
    /// `_meta.usage`; a tool call shown once, with its input, whichever
    /// update carries it; a shell's own output.
    #[test]
    fn acp_lines() {
        let lines = [
            r#"{"type":"session","sessionId":"ce32","model":"m1","resumed":false}"#,
            r#"{"type":"update","update":{"sessionUpdate":"tool_call","toolCallId":"call_61","status":"pending","title":"Shell","rawInput":{},"_meta":{"toolName":"run_shell_command","phase":"preparing"}}}"#,
            r#"{"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":""},"_meta":{"usage":{"inputTokens":161,"outputTokens":7,"totalTokens":168,"thoughtTokens":0,"cachedReadTokens":100}}}}"#,
            r#"{"type":"update","update":{"sessionUpdate":"tool_call","toolCallId":"call_61","status":"pending","title":"touch x","rawInput":{"command":"touch x"},"_meta":{"toolName":"run_shell_command"}}}"#,
            r#"{"type":"permission","tool":"touch x","chose":"proceed_once"}"#,
            r#"{"type":"update","update":{"sessionUpdate":"tool_call_update","toolCallId":"call_61","status":"in_progress","title":"Shell: touch x","rawInput":{"command":"touch x"}}}"#,
            r#"{"type":"update","update":{"sessionUpdate":"tool_call_update","toolCallId":"call_61","status":"completed","content":[{"type":"content","content":{"type":"text","text":"Command: touch x\nOutput: (empty)"}}],"rawOutput":{"type":"shell_result","output":"made x"}}}"#,
            r#"{"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Do"}}}"#,
            r#"{"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ne."}}}"#,
            r#"{"type":"result","result":{"stopReason":"end_turn"}}"#,
        ];
        let (t, u) = read(Format::Acp, None, &lines.join("\n"));
        assert_eq!((u.provider_session.as_deref(), u.model.as_deref()), (Some("ce32"), Some("m1")));
        assert_eq!((u.input_tokens, u.cached_tokens, u.output_tokens), (161, 100, 7));
        assert_eq!(
            t,
            [
                "[session ce32 · model m1]",
                "→ run_shell_command: touch x",
                "permission: touch x (proceed_once)",
                "← made x",
                "assistant: Done.",
                "[usage: 161 in (100 cached), 7 out]",
            ]
        );
        // An agent that reports usage with its result only (OpenCode).
        let (_, u) = read(
            Format::Acp,
            None,
            r#"{"type":"result","result":{"stopReason":"end_turn","usage":{"inputTokens":103,"outputTokens":7}}}"#,
        );
        assert_eq!((u.input_tokens, u.output_tokens), (103, 7));
    }

    /// Claude Code 2.1.330 against a Messages API answering 429 with
    /// `retry-after: 20` (it retries) and then `600` (it gives up).
    #[test]
    fn claude_at_the_providers_limit() {
        let mut r = Reader::new(Format::Claude, None);
        let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":20553,"error_status":429,"error":"rate_limit","session_id":"s1"}"#;
        assert_eq!(r.line(retry), ["limit: the provider refused (429); Claude Code retries in 20 s"]);
        assert_eq!(r.limited, None, "a retry inside the session is not the end");
        let result = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","terminal_reason":"api_error","result":"API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.","session_id":"s1","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}"#;
        r.line(result);
        let l = r.limited.clone().expect("limited");
        assert_eq!((l.resets_at, l.retry_after_ms), (None, Some(20553)));
        assert!(l.text.starts_with("API Error: Request rejected (429)"));
        let mut r = Reader::new(Format::Claude, None);
        let window = r#"{"type":"result","is_error":true,"api_error":"usage_limit_reached","api_error_params":{"rate_limit_info":{"status":"rejected","resetsAt":1795460000}},"result":"limit reached"}"#;
        r.line(window);
        assert_eq!(r.limited.expect("limited").resets_at, Some(1795460000));
    }

    /// Codex 0.169.0 against a Responses API answering 429 (`retry-after:
    /// 600`): it says so once, then waits.
    #[test]
    fn codex_at_the_providers_limit() {
        let mut r = Reader::new(Format::Codex, None);
        r.line(r#"{"type":"turn.started"}"#);
        assert_eq!(r.limited, None);
        let t = r.line(
            r#"{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)"}"#,
        );
        assert!(t[0].starts_with("error: Reconnecting... 1/5"), "{t:?}");
        assert!(r.limited.expect("limited").text.contains("429 Too Many Requests"));
    }

    /// OpenCode 1.18.33 with `--print-logs` against a Chat Completions API
    /// answering 429.
    #[test]
    fn opencode_at_the_providers_limit() {
        let line = r#"timestamp=2026-11-23T18:54:56.547Z level=ERROR run=4e8ac471 message="stream error" providerID=local modelID=m1 session.id=ses_x small=false agent=build mode=primary error.error="AI_APICallError: Rate limit reached. Please try again later.""#;
        let l = opencode_log_limit(line).expect("limited");
        assert_eq!(l.text, "AI_APICallError: Rate limit reached. Please try again later.");
        assert_eq!(opencode_log_limit("timestamp=… level=WARN message=\"slow\""), None);
        assert_eq!(opencode_log_limit("level=ERROR message=\"stream error\" error.error=\"disk full\""), None);
        // A timestamp's milliseconds are not a status (a chamber was held for one).
        let models = r#"timestamp=2026-11-23T19:54:29.429Z level=ERROR run=c182c9d2 message="Failed to fetch models.dev" cause="Unable to connect""#;
        assert_eq!(opencode_log_limit(models), None);
        let gemini = r#"Attempt 1 failed with status 429. Retrying with backoff... _ApiError: {"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
        assert!(log_limit(Format::Gemini, gemini).expect("limited").text.starts_with("Attempt 1 failed"));
        assert_eq!(log_limit(Format::Gemini, "Attempt 2 failed with status 503. Retrying"), None);
        assert_eq!(log_limit(Format::Claude, gemini), None, "only the kinds whose logs are read");
        assert!(!says_limit("request 14291 failed") && says_limit("last status: 429 Too Many Requests"));
    }

    #[test]
    fn other_lines_pass_through_and_results_are_clipped() {
        let (t, _) = read(Format::Codex, None, "WARNING: something\n\n");
        assert_eq!(t, ["WARNING: something"]);
        let mut out = Vec::new();
        result(&mut out, "a\nb\nc\nd\ne", true);
        assert_eq!(out, ["← error: a", "  b", "  c", "  … 2 more line(s)"]);
        let long = "x".repeat(500);
        assert_eq!(clip(&long).chars().count(), LINE_CHARS + 1);
    }

    #[test]
    fn prices_cost_the_tokens() {
        let p = Price { input: 3.0, output: 15.0, cached: Some(0.3) };
        let mut u =
            Usage { input_tokens: 1_000_000, cached_tokens: 500_000, output_tokens: 100_000, ..Usage::default() };
        assert!((p.cost(&u) - (1.5 + 0.15 + 1.5)).abs() < 1e-9);
        let mut mine = std::collections::BTreeMap::new();
        mine.insert("m1".to_string(), Price { input: 1.0, output: 2.0, cached: None });
        let prices = Prices::new(&mine);
        assert_eq!(prices.cost(&u), None, "no model, no cost");
        u.model = Some("local/m1".into());
        assert!((prices.cost(&u).unwrap() - (1.0 + 0.2)).abs() < 1e-9);
        u.model = Some("gpt-5".into());
        assert!(prices.cost(&u).is_some(), "a shipped price");
        u.model = Some("unknown".into());
        assert_eq!(prices.cost(&u), None);
    }
}
