//! OpenTelemetry traces over OTLP/HTTP: with `[telemetry] otlp_endpoint`
//! in `cryod.toml`, each wake is a trace. Its root span is the agent's run
//! (`invoke_agent`, with the GenAI semantic conventions' attributes: the
//! provider, the model, the conversation's id, the tokens used), each model
//! request through the gateway (`chat`) and each tool call the agent made
//! (`execute_tool`) a child span, and a chamber's wake links the one before
//! it.
//!
//! Spans are encoded as OTLP's JSON (the protobuf mapping the OTLP/HTTP
//! specification defines: lowerCamelCase fields, trace and span ids in hex,
//! 64-bit integers as strings) and posted to `{endpoint}/v1/traces` by one
//! task, a session's spans in one request when its wake ends. A collector
//! that is down or slow costs a warning, never a wake: the queue is
//! bounded, and what does not fit is dropped and counted.
//!
//! Nothing of a request's body or headers is in a span: what a tool call
//! was is its name and the transcript's short form of its arguments.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value as Json, json};

/// Sessions' traces waiting to be sent, at most.
const QUEUE: usize = 256;
/// How long one export may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Child spans one trace keeps, at most (a session of a thousand tool
/// calls is still one request of bounded size).
const MAX_SPANS: usize = 2000;

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Int(n.min(i64::MAX as u64) as i64)
    }
}

impl From<f64> for Value {
    fn from(n: f64) -> Value {
        Value::Float(n)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// A span's kind (OTLP's `SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Client = 3,
}

/// Where a span sits: its trace and its own id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    pub trace: [u8; 16],
    pub span: [u8; 8],
}

/// One finished span.
#[derive(Debug, Clone)]
pub struct Span {
    pub context: Context,
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub attributes: Vec<(&'static str, Value)>,
    pub links: Vec<Context>,
    /// An error, and what it was.
    pub error: Option<String>,
}

/// Where traces go: a queue to the exporting task, or nowhere (no
/// endpoint). Cheap to clone.
#[derive(Clone)]
pub struct Exporter {
    tx: Option<tokio::sync::mpsc::Sender<Vec<Span>>>,
    clock: crate::base::clock::Clock,
}

impl Exporter {
    /// Starts the exporting task for `endpoint` (`http://HOST:4318`; the
    /// path `/v1/traces` is added); none: an exporter that sends nothing.
    pub fn start(endpoint: Option<&str>, clock: crate::base::clock::Clock) -> Exporter {
        let Some(endpoint) = endpoint else { return Exporter { tx: None, clock } };
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Span>>(QUEUE);
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        tokio::spawn(async move {
            let mut failing = false;
            while let Some(spans) = rx.recv().await {
                let body = encode(&spans).to_string();
                let sent = client.post(&url).header("content-type", "application/json").body(body).send().await;
                let ok = sent.as_ref().is_ok_and(|r| r.status().is_success());
                // Said once per outage, not per trace.
                if !ok && !failing {
                    let why = match sent {
                        Ok(r) => format!("it answered {}", r.status()),
                        Err(e) => e.without_url().to_string(),
                    };
                    tracing::warn!(%url, %why, "cannot export traces (OTLP)");
                }
                failing = !ok;
            }
        });
        Exporter { tx: Some(tx), clock }
    }

    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// A new trace, linked to `after` (the chamber's wake before), if the
    /// exporter sends anything.
    pub fn trace(&self, after: Option<Context>) -> Option<Arc<Trace>> {
        let tx = self.tx.clone()?;
        let context = Context { trace: random_id(), span: random_id() };
        let clock = self.clock.clone();
        Some(Arc::new(Trace { tx, context, after, clock, spans: Mutex::new(Vec::new()), dropped: Default::default() }))
    }
}

/// One wake's trace while its session runs: its children are added as
/// they end; [`Trace::finish`] adds the root and sends them all.
pub struct Trace {
    tx: tokio::sync::mpsc::Sender<Vec<Span>>,
    context: Context,
    after: Option<Context>,
    clock: crate::base::clock::Clock,
    spans: Mutex<Vec<Span>>,
    dropped: std::sync::atomic::AtomicU64,
}

impl Trace {
    /// The daemon's time, for a span's ends.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The root span's place (what the next wake links to).
    pub fn context(&self) -> Context {
        self.context
    }

    /// A child of the root that ran from `start` to `end`.
    pub fn child(
        &self,
        name: String,
        kind: Kind,
        (start, end): (DateTime<Utc>, DateTime<Utc>),
        attributes: Vec<(&'static str, Value)>,
        error: Option<String>,
    ) {
        let mut spans = self.spans.lock().expect("trace lock");
        if spans.len() >= MAX_SPANS {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let context = Context { trace: self.context.trace, span: random_id() };
        spans.push(Span {
            context,
            parent: Some(self.context.span),
            name,
            kind,
            start,
            end,
            attributes,
            links: Vec::new(),
            error,
        });
    }

    /// The root span (`name`, from `start` to `end`) ends the trace: it and
    /// its children are queued for export (dropped if the queue is full).
    pub fn finish(
        &self,
        name: String,
        (start, end): (DateTime<Utc>, DateTime<Utc>),
        mut attributes: Vec<(&'static str, Value)>,
        error: Option<String>,
    ) {
        let mut spans = std::mem::take(&mut *self.spans.lock().expect("trace lock"));
        let dropped = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            attributes.push(("cryo.spans_dropped", dropped.into()));
        }
        spans.push(Span {
            context: self.context,
            parent: None,
            name,
            kind: Kind::Internal,
            start,
            end,
            attributes,
            links: self.after.into_iter().collect(),
            error,
        });
        if self.tx.try_send(spans).is_err() {
            tracing::warn!("the trace export queue is full: a wake's trace is dropped");
        }
    }
}

/// A session's tool calls, as its stream reads them: an `execute_tool`
/// span each, named by GenAI's semantic conventions.
impl cryo_session::Trace for Trace {
    fn now(&self) -> DateTime<Utc> {
        Trace::now(self)
    }

    fn tool_call(&self, call: cryo_session::ToolCall, start: DateTime<Utc>, end: DateTime<Utc>) {
        let mut attributes = vec![
            ("gen_ai.operation.name", "execute_tool".into()),
            ("gen_ai.tool.name", call.name.clone().into()),
            ("cryo.tool.call", call.shown.into()),
        ];
        if let Some(id) = call.id {
            attributes.push(("gen_ai.tool.call.id", id.into()));
        }
        self.child(format!("execute_tool {}", call.name), Kind::Internal, (start, end), attributes, None);
    }
}

fn random_id<const N: usize>() -> [u8; N] {
    let mut id = [0u8; N];
    // An id of all zeros is invalid in OTLP.
    while id.iter().all(|b| *b == 0) {
        getrandom::fill(&mut id).expect("the OS random source works");
    }
    id
}

/// `spans` as an OTLP/HTTP JSON export request.
pub fn encode(spans: &[Span]) -> Json {
    let spans: Vec<Json> = spans.iter().map(span).collect();
    json!({ "resourceSpans": [{
        "resource": { "attributes": attributes(&[
            ("service.name", "cryod".into()),
            ("service.version", env!("CARGO_PKG_VERSION").into()),
        ]) },
        "scopeSpans": [{ "scope": { "name": "cryod", "version": env!("CARGO_PKG_VERSION") }, "spans": spans }],
    }] })
}

fn span(s: &Span) -> Json {
    let nanos = |t: DateTime<Utc>| t.timestamp_nanos_opt().unwrap_or(0).max(0).to_string();
    let mut out = json!({
        "traceId": hex::encode(s.context.trace),
        "spanId": hex::encode(s.context.span),
        "name": s.name,
        "kind": s.kind as i32,
        "startTimeUnixNano": nanos(s.start),
        "endTimeUnixNano": nanos(s.end.max(s.start)),
        "attributes": attributes(&s.attributes),
        "status": match &s.error {
            Some(m) => json!({ "code": 2, "message": m }),
            None => json!({ "code": 0 }),
        },
    });
    if let Some(p) = s.parent {
        out["parentSpanId"] = hex::encode(p).into();
    }
    if !s.links.is_empty() {
        out["links"] = s
            .links
            .iter()
            .map(|l| json!({ "traceId": hex::encode(l.trace), "spanId": hex::encode(l.span) }))
            .collect::<Vec<_>>()
            .into();
    }
    out
}

fn attributes(a: &[(&'static str, Value)]) -> Json {
    a.iter()
        .map(|(k, v)| {
            let value = match v {
                Value::Str(s) => json!({ "stringValue": s }),
                Value::Int(n) => json!({ "intValue": n.to_string() }),
                Value::Float(f) => json!({ "doubleValue": f }),
                Value::Bool(b) => json!({ "boolValue": b }),
            };
            json!({ "key": k, "value": value })
        })
        .collect::<Vec<_>>()
        .into()
}

/// The GenAI semantic conventions' name of a known kind's provider.
pub fn provider_name(kind: &str) -> &'static str {
    match kind {
        "claude" => "anthropic",
        // Qwen Code speaks OpenAI's API, as Codex and OpenCode do.
        "codex" | "opencode" | "qwen" => "openai",
        "gemini" => "gcp.gemini",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_encode_as_otlp_json() {
        let t0 = DateTime::parse_from_rfc3339("2026-11-27T10:00:00Z").unwrap().to_utc();
        let root = Context { trace: [1; 16], span: [2; 8] };
        let s = Span {
            context: Context { trace: root.trace, span: [3; 8] },
            parent: Some(root.span),
            name: "chat m1".into(),
            kind: Kind::Client,
            start: t0,
            end: t0 + chrono::Duration::milliseconds(1500),
            attributes: vec![("gen_ai.usage.input_tokens", 10u64.into()), ("gen_ai.provider.name", "anthropic".into())],
            links: vec![Context { trace: [4; 16], span: [5; 8] }],
            error: Some("429".into()),
        };
        let j = encode(&[s]);
        let span = &j["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "01".repeat(16));
        assert_eq!(span["parentSpanId"], "02".repeat(8));
        assert_eq!(span["kind"], 3);
        assert_eq!(span["startTimeUnixNano"], "1795773600000000000");
        assert_eq!(span["endTimeUnixNano"], "1795773601500000000");
        assert_eq!(span["attributes"][0], json!({ "key": "gen_ai.usage.input_tokens", "value": { "intValue": "10" } }));
        assert_eq!(span["links"][0]["spanId"], "05".repeat(8));
        assert_eq!(span["status"], json!({ "code": 2, "message": "429" }));
    }

    #[test]
    fn no_endpoint_no_trace() {
        assert!(Exporter::start(None, crate::base::clock::Clock::system()).trace(None).is_none());
    }
}
