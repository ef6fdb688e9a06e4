//! The known agent CLIs' machine-readable output, read as it comes: a
//! readable transcript for `cryo-agent.log`, and what the session used
//! (model, tokens, cost, the provider's session id) for the ledger.
//!
//! One room per stream reads its events (each [`Kind`] writes one) (`agent-events.md`, beside this
//! folder, holds what was verified on the pinned CLIs and the flags that
//! turn them on):
//! - `claude`: Claude Code's `-p --output-format stream-json --verbose`,
//!   and Qwen Code's `--output-format stream-json` (the same events);
//! - `codex`: Codex's `exec --json`;
//! - `opencode`: OpenCode's `run --format json`;
//! - `gemini`: Gemini CLI's `--output-format stream-json`;
//! - `pi`: Pi's `--mode json`;
//! - `acp`: an Agent Client Protocol agent, as cryod's client writes it.
//!
//! Token counts: `input_tokens` are all the prompt's tokens, those read from
//! a cache included; `cached_tokens` are the cached ones among them.

use serde_json::Value;

use crate::kinds::Kind;

/// What one session used, as far as its stream said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub model: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// Input tokens written to a cache (Anthropic's cache writes), among
    /// `input_tokens`: priced at `Price::cache_write`.
    pub cache_write_tokens: u64,
    /// As the CLI reported it (Claude Code, OpenCode), else from the price
    /// table (`Prices`).
    pub cost_usd: Option<f64>,
    pub provider_session: Option<String>,
    /// The provider account that served it (cryod's `ChamberConfig::provider_account`).
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
pub(crate) fn log_limit(kind: Kind, line: &str) -> Option<Limited> {
    match kind {
        Kind::OpenCode => opencode_log_limit(line),
        Kind::Gemini => gemini_log_limit(line),
        _ => None,
    }
}

/// A provider's limit in Gemini CLI's stderr: it retries a 429 with its own
/// backoff (not the provider's `retry-after`), saying `Attempt 1 failed
/// with status 429. Retrying with backoff... _ApiError: {…}`; it would only
/// wait.
pub(crate) fn gemini_log_limit(line: &str) -> Option<Limited> {
    let (_, rest) = line.split_once("failed with status ")?;
    rest.starts_with("429").then(|| Limited { text: clip(line.trim()), ..Limited::default() })
}

/// A provider's limit in one of OpenCode's log lines (`--print-logs` on
/// stderr; its JSON events say nothing of a 429, it waits silently):
/// `level=ERROR ... message="stream error" ... error.error="AI_APICallError:
/// Rate limit reached. ..."`.
pub(crate) fn opencode_log_limit(line: &str) -> Option<Limited> {
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
pub(crate) struct Reader {
    kind: Kind,
    pub usage: Usage,
    /// The stream ended on the provider's limit.
    pub limited: Option<Limited>,
    /// The delay of the last retry after a 429 (Claude Code's `api_retry`).
    retry_ms: Option<u64>,
    /// Claude Code's messages so far, by id: their usage as last seen (a
    /// message's blocks come one line each), until its `result` gives the
    /// totals; what the session used while it runs.
    messages: std::collections::BTreeMap<String, (u64, u64, u64, u64)>,
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
    /// The CLI's own id of the call (`toolu_…`, an item's or a part's id),
    /// where its stream gives one: a trace's `gen_ai.tool.call.id`.
    pub id: Option<String>,
}

impl ToolCall {
    fn new(name: &str, input: &Value) -> ToolCall {
        let name = tool_name(name);
        ToolCall { key: call_key(&name, &input.to_string()), shown: call(&name, input), name, id: None }
    }

    /// The call, with the CLI's id for it (none if empty or absent).
    fn with_id(mut self, id: Option<&str>) -> ToolCall {
        self.id = id.filter(|i| !i.is_empty()).map(|i| i.chars().take(200).collect());
        self
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
    pub(crate) fn new(kind: Kind, model: Option<String>) -> Reader {
        Reader {
            kind,
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
    /// one of the kind's events is kept as it is.
    pub(crate) fn line(&mut self, line: &str) -> Vec<String> {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return if line.trim().is_empty() { Vec::new() } else { vec![line.to_string()] };
        };
        let mut out = Vec::new();
        match self.kind {
            Kind::Claude | Kind::Qwen => self.claude(&v, &mut out),
            Kind::Codex => self.codex(&v, &mut out),
            Kind::OpenCode => self.opencode(&v, &mut out),
            Kind::Gemini => self.gemini(&v, &mut out),
            Kind::Pi => self.pi(&v, &mut out),
            Kind::Acp => self.acp(&v, &mut out),
            // Not read (see `Kind::writes_events`): kept as it is.
            Kind::Other => out.push(line.to_string()),
        }
        out
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
    /// Input tokens written to a cache (default: the input price; Anthropic
    /// charges 1.25 times it for its five-minute cache).
    #[serde(default)]
    pub cache_write: Option<f64>,
}

/// The price table shipped with cryo (USD per million tokens, as the
/// providers listed them in November 2025; `[prices."MODEL"]` in
/// `cryod.toml` overrides or adds). A model that is not listed gets no
/// computed cost.
pub(crate) fn default_prices() -> Vec<(&'static str, Price)> {
    let p = |input, output, cached| Price { input, output, cached: Some(cached), cache_write: None };
    // Anthropic bills a cache write at 1.25 times the input price.
    let a = |input: f64, output, cached| Price { cache_write: Some(input * 1.25), ..p(input, output, cached) };
    vec![
        ("gpt-5", p(1.25, 10.0, 0.125)),
        ("gpt-5-codex", p(1.25, 10.0, 0.125)),
        ("gpt-5-mini", p(0.25, 2.0, 0.025)),
        ("claude-sonnet-4-5", a(3.0, 15.0, 0.30)),
        ("claude-opus-4-1", a(15.0, 75.0, 1.50)),
        ("claude-haiku-4-5", a(1.0, 5.0, 0.10)),
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
        let fresh = u.input_tokens.saturating_sub(u.cached_tokens).saturating_sub(u.cache_write_tokens) as f64;
        let (cached, written) = (u.cached_tokens as f64, u.cache_write_tokens as f64);
        (fresh * self.input
            + cached * self.cached.unwrap_or(self.input)
            + written * self.cache_write.unwrap_or(self.input)
            + u.output_tokens as f64 * self.output)
            / 1e6
    }
}

mod acp;
mod claude;
mod codex;
mod gemini;
mod opencode;
mod pi;

#[cfg(test)]
mod tests;
