//! A known kind's output, read as it comes: its events go raw to
//! `.cryo/agent-events.jsonl` and rendered to `cryo-agent.log` (the
//! transcript), its log lines (OpenCode's stderr) are kept and read for the
//! provider's limit, and what the session used is gathered. A limit, or a
//! cost past `max_session_usd`, is told at once; each line and tool call
//! goes to the session's watch.

use std::sync::Arc;

/// The raw event stream of a known kind's agent, in `.cryo/`.
pub const EVENTS_FILE: &str = ".cryo/agent-events.jsonl";

/// How long the end of an agent's stream is awaited once it exited (a child
/// it left running may hold the pipe open).
const STREAM_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A known kind's stdout being read: its lines go raw to
/// `.cryo/agent-events.jsonl` and rendered to `cryo-agent.log`, and what
/// the session used is gathered.
pub(crate) struct EventStream {
    seen: Arc<std::sync::Mutex<Seen>>,
    done: tokio::task::JoinHandle<()>,
}

/// What a stream said so far.
#[derive(Default)]
struct Seen {
    usage: crate::events::Usage,
    limited: Option<crate::events::Limited>,
}

impl Seen {
    /// Keeps the first limit seen (stdout or the logs), and tells it at
    /// once: an agent that would wait out the limit is ended.
    fn limited(&mut self, l: &crate::events::Limited, tell: &dyn Fn(crate::events::Limited)) {
        if self.limited.is_none() {
            self.limited = Some(l.clone());
            tell(l.clone());
        }
    }
}

impl EventStream {
    /// What the stream said, once it ended (or after `STREAM_DRAIN`, 2 s).
    pub(crate) async fn finish(self) -> (Option<Box<crate::events::Usage>>, Option<Box<crate::events::Limited>>) {
        let _ = tokio::time::timeout(STREAM_DRAIN, self.done).await;
        let seen = std::mem::take(&mut *self.seen.lock().expect("stream lock"));
        ((!seen.usage.is_empty()).then(|| Box::new(seen.usage)), seen.limited.map(Box::new))
    }
}

/// Where a known kind's output goes: the readable transcript (and its
/// log lines), and the raw events file.
pub(crate) struct Logs {
    pub transcript: std::fs::File,
    pub stderr: std::fs::File,
    /// `.cryo/agent-events.jsonl`, if it could be opened (a link or a FIFO
    /// planted there is not).
    pub raw: Option<std::fs::File>,
}

/// What a session's stream tells the supervisor as soon as it is seen.
pub struct Tell {
    /// The provider's limit.
    pub limit: Arc<dyn Fn(crate::events::Limited) + Send + Sync>,
    /// The cost passed `max_session_usd` (the maximum, and whom to tell).
    pub over: Option<(f64, Box<dyn Fn() + Send + Sync>)>,
    /// The session's watch, given each line and tool call (see
    /// [`Watch`](crate::Watch)).
    pub watch: Option<super::watch::Watch>,
    /// The wake's trace: each tool call is a span of it.
    pub trace: Option<Arc<dyn Trace>>,
}

/// A wake's trace, as a session's stream adds its tool calls to it
/// (cryod's OTLP export implements it).
pub trait Trace: Send + Sync {
    /// Now, by the trace's clock.
    fn now(&self) -> chrono::DateTime<chrono::Utc>;
    /// One tool call, a span from `start` to `end`.
    fn tool_call(
        &self,
        call: crate::events::ToolCall,
        start: chrono::DateTime<chrono::Utc>,
        end: chrono::DateTime<chrono::Utc>,
    );
}

/// Reads a known kind's events (`out`) and log lines (`err`) into the
/// transcript, the raw events file and the session's usage.
pub(crate) fn read(
    out: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    err: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>,
    kind: crate::kinds::Kind,
    model: Option<String>,
    logs: Logs,
    prices: Arc<crate::events::Prices>,
    tell: Tell,
) -> EventStream {
    let (limit, watch) = (tell.limit.clone(), tell.watch.clone());
    let s = read_events(out, kind, model, logs.raw, logs.transcript, prices, tell);
    if let Some(err) = err {
        read_logs(err, kind, logs.stderr, s.seen.clone(), limit, watch);
    }
    s
}

fn read_events(
    out: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    kind: crate::kinds::Kind,
    model: Option<String>,
    mut raw: Option<std::fs::File>,
    mut transcript: std::fs::File,
    prices: Arc<crate::events::Prices>,
    tell: Tell,
) -> EventStream {
    let Tell { limit, over, watch, trace } = tell;
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let shared = seen.clone();
    let done = tokio::spawn(async move {
        let mut reader = crate::events::Reader::new(kind, model);
        let mut told_over = false;
        let mut tools = Tools { trace, open: Vec::new() };
        let mut lines = tokio::io::BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(f) = raw.as_mut() {
                let _ = writeln!(f, "{line}");
            }
            let text: String = reader.line(&line).into_iter().map(|l| l + "\n").collect();
            let _ = transcript.write_all(text.as_bytes());
            let calls = std::mem::take(&mut reader.calls);
            if let Some(w) = &watch {
                w.touch();
                calls.iter().for_each(|c| w.call(c));
            }
            tools.line(calls);
            let mut u = reader.usage.clone();
            if u.cost_usd.is_none() {
                u.cost_usd = prices.cost(&u);
            }
            if let (Some((max, tell)), Some(cost)) = (&over, u.cost_usd)
                && cost > *max
                && !told_over
            {
                told_over = true;
                tell();
            }
            let mut seen = shared.lock().expect("stream lock");
            seen.usage = u;
            if let Some(l) = &reader.limited {
                seen.limited(l, &*limit);
            }
        }
        tools.line(Vec::new());
    });
    EventStream { seen, done }
}

/// A session's tool calls as spans of its wake's trace: a call is open
/// from the event that made it to the next event (its result, or what
/// the agent did next).
struct Tools {
    trace: Option<Arc<dyn Trace>>,
    open: Vec<(crate::events::ToolCall, chrono::DateTime<chrono::Utc>)>,
}

impl Tools {
    /// A line came, making `calls`: those open end now, these begin.
    fn line(&mut self, calls: Vec<crate::events::ToolCall>) {
        let Some(trace) = &self.trace else { return };
        let now = trace.now();
        for (call, start) in self.open.drain(..) {
            trace.tool_call(call, start, now);
        }
        self.open.extend(calls.into_iter().map(|c| (c, now)));
    }
}

/// An agent's log lines (OpenCode's and Gemini CLI's stderr): kept in
/// `cryo-agent.log` as they are, and read for the provider's limit.
fn read_logs(
    err: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    kind: crate::kinds::Kind,
    mut log: std::fs::File,
    seen: Arc<std::sync::Mutex<Seen>>,
    limit: Arc<dyn Fn(crate::events::Limited) + Send + Sync>,
    watch: Option<super::watch::Watch>,
) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = writeln!(log, "{line}");
            if let Some(w) = &watch {
                w.touch();
            }
            if let Some(l) = crate::events::log_limit(kind, &line) {
                seen.lock().expect("stream lock").limited(&l, &*limit);
            }
        }
    });
}
