//! What a response says it used, read as its bytes pass (whole or
//! streamed), and the usage a Chat Completions stream is asked for when
//! its client did not ask.
//!
//! The shapes, as the providers document them and the pinned CLIs send and
//! read them (see `gateway/gateway.md`):
//! - Anthropic Messages (`POST …/v1/messages`): `message_start` carries the
//!   model and the prompt's usage (`input_tokens`,
//!   `cache_creation_input_tokens`, `cache_read_input_tokens`);
//!   `message_delta` the output tokens so far. A whole answer carries
//!   `usage` at its top.
//! - OpenAI Responses (`POST …/responses`): `response.completed` (or
//!   `.incomplete`, `.failed`) carries `response.usage` (`input_tokens`,
//!   `input_tokens_details.cached_tokens`, `output_tokens`).
//! - OpenAI Chat Completions (`POST …/chat/completions`): the last chunk
//!   carries `usage` (`prompt_tokens`, `prompt_tokens_details.cached_tokens`,
//!   `completion_tokens`) when the request asks for it
//!   (`stream_options.include_usage`): the gateway asks when the client did
//!   not, and holds that event back from it ([`Unasked`]).
//! - Google's Gemini API (`POST …/models/MODEL:generateContent`, or
//!   `:streamGenerateContent?alt=sse`): each chunk carries `usageMetadata`
//!   so far (`promptTokenCount`, cached included, `cachedContentTokenCount`,
//!   `candidatesTokenCount`, `thoughtsTokenCount`) and `modelVersion`.
//!
//! Token counts follow `cryo_session::Usage`: `input` is every prompt token, those
//! read from a cache included; `cached` are the cached ones among them.

use serde_json::Value;

use super::Api;

/// What one response said it used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counted {
    pub model: Option<String>,
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    /// Anthropic's cache writes (`cache_creation_input_tokens`), among
    /// `input`: priced above plain input.
    pub written: u64,
}

impl Counted {
    pub fn is_empty(&self) -> bool {
        self.input == 0 && self.output == 0 && self.cached == 0
    }
}

/// The most of a response body kept to read its usage when it is one JSON
/// document (a streamed one is read line by line and keeps one line).
const MAX_KEPT: usize = 16 * 1024 * 1024;

/// Reads a response's usage as its bytes pass through, whole or streamed
/// (server-sent events).
#[derive(Debug)]
pub struct Meter {
    api: Api,
    streamed: bool,
    /// The unfinished line (streamed), or the body so far (whole).
    buf: Vec<u8>,
    /// Too much to keep: the rest is not read.
    overflow: bool,
    pub counted: Counted,
}

impl Meter {
    pub fn new(api: Api, streamed: bool) -> Meter {
        Meter { api, streamed, buf: Vec::new(), overflow: false, counted: Counted::default() }
    }

    /// The next bytes of the body.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        if self.overflow {
            return;
        }
        if !self.streamed {
            if self.buf.len() + chunk.len() > MAX_KEPT {
                self.overflow = true;
                self.buf = Vec::new();
            } else {
                self.buf.extend_from_slice(chunk);
            }
            return;
        }
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.buf.extend_from_slice(&chunk[..i]);
            let line = std::mem::take(&mut self.buf);
            self.line(&line);
            chunk = &chunk[i + 1..];
        }
        if self.buf.len() + chunk.len() > MAX_KEPT {
            // One line this long is no event of ours; skip to the next.
            self.buf.clear();
        } else {
            self.buf.extend_from_slice(chunk);
        }
    }

    /// The body ended: what it said, all told.
    pub fn finish(&mut self) -> &Counted {
        let rest = std::mem::take(&mut self.buf);
        if self.streamed {
            self.line(&rest);
        } else if !self.overflow
            && let Ok(v) = serde_json::from_slice::<Value>(&rest)
        {
            self.whole(&v);
        }
        &self.counted
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else { return };
        // Most events are text going by: only those that can carry usage
        // are parsed.
        let needles: &[&[u8]] = match self.api {
            Api::Messages => &[b"message_start", b"message_delta"],
            Api::Responses => &[b"response.completed", b"response.incomplete", b"response.failed"],
            Api::Chat => &[b"\"usage\""],
            Api::Gemini => &[b"usageMetadata"],
        };
        if !needles.iter().any(|n| data.windows(n.len()).any(|w| w == *n)) {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) else { return };
        self.event(&v);
    }

    /// One streamed event.
    fn event(&mut self, v: &Value) {
        let c = &mut self.counted;
        match self.api {
            Api::Messages => match v["type"].as_str() {
                Some("message_start") => {
                    let m = &v["message"];
                    if let Some(model) = m["model"].as_str() {
                        c.model = Some(model.to_string());
                    }
                    anthropic(c, &m["usage"]);
                }
                // Cumulative counts: the newest stands.
                Some("message_delta") => anthropic(c, &v["usage"]),
                _ => {}
            },
            Api::Responses => {
                if matches!(v["type"].as_str(), Some("response.completed" | "response.incomplete" | "response.failed"))
                {
                    let r = &v["response"];
                    if let Some(model) = r["model"].as_str() {
                        c.model = Some(model.to_string());
                    }
                    responses(c, &r["usage"]);
                }
            }
            Api::Chat => {
                if let Some(model) = v["model"].as_str() {
                    c.model = Some(model.to_string());
                }
                if v["usage"].is_object() {
                    chat(c, &v["usage"]);
                }
            }
            Api::Gemini => gemini(c, v),
        }
    }

    /// A whole (not streamed) answer.
    fn whole(&mut self, v: &Value) {
        let c = &mut self.counted;
        if let Some(model) = v["model"].as_str() {
            c.model = Some(model.to_string());
        }
        match self.api {
            Api::Messages => anthropic(c, &v["usage"]),
            Api::Responses => responses(c, &v["usage"]),
            Api::Chat => chat(c, &v["usage"]),
            Api::Gemini => gemini(c, v),
        }
    }
}

fn num(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Anthropic's usage: a field present replaces what an earlier event said
/// (each event's counts are the message's so far).
fn anthropic(c: &mut Counted, u: &Value) {
    let (fresh, written, read) =
        (num(u, "input_tokens"), num(u, "cache_creation_input_tokens"), num(u, "cache_read_input_tokens"));
    if fresh.is_some() || written.is_some() || read.is_some() {
        let read = read.unwrap_or(c.cached);
        let fresh = fresh.unwrap_or(c.input.saturating_sub(c.cached).saturating_sub(c.written));
        let written = written.unwrap_or(c.written);
        c.input = fresh + written + read;
        (c.cached, c.written) = (read, written);
    }
    if let Some(out) = num(u, "output_tokens") {
        c.output = out;
    }
}

fn responses(c: &mut Counted, u: &Value) {
    if u.is_object() {
        c.input = num(u, "input_tokens").unwrap_or(0);
        c.cached = u.pointer("/input_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0);
        c.output = num(u, "output_tokens").unwrap_or(0);
    }
}

fn chat(c: &mut Counted, u: &Value) {
    if u.is_object() {
        c.input = num(u, "prompt_tokens").unwrap_or(0);
        c.cached = u.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0);
        c.output = num(u, "completion_tokens").unwrap_or(0);
    }
}

/// Gemini's `usageMetadata`: the response's counts so far (the newest
/// stands), and `modelVersion`. `:streamGenerateContent` without `alt=sse`
/// answers a JSON array of the same chunks: each is read.
fn gemini(c: &mut Counted, v: &Value) {
    if let Some(chunks) = v.as_array() {
        chunks.iter().for_each(|chunk| gemini(c, chunk));
        return;
    }
    if let Some(model) = v["modelVersion"].as_str() {
        c.model = Some(model.to_string());
    }
    let u = &v["usageMetadata"];
    if u.is_object() {
        c.input = num(u, "promptTokenCount").unwrap_or(0);
        c.cached = num(u, "cachedContentTokenCount").unwrap_or(0);
        c.output = num(u, "candidatesTokenCount").unwrap_or(0) + num(u, "thoughtsTokenCount").unwrap_or(0);
    }
}

/// Asks a streamed Chat Completions request for its usage (the last chunk
/// carries it only when asked); any other body is left as it is.
pub fn ask_usage(api: Option<Api>, body: &[u8]) -> Option<Vec<u8>> {
    if api != Some(Api::Chat) {
        return None;
    }
    let mut v: Value = serde_json::from_slice(body).ok()?;
    if v.get("stream") != Some(&Value::Bool(true))
        || v.pointer("/stream_options/include_usage") == Some(&Value::Bool(true))
    {
        return None;
    }
    let o = v.as_object_mut()?;
    let opts = o.entry("stream_options").or_insert_with(|| serde_json::json!({}));
    opts.as_object_mut()?.insert("include_usage".into(), Value::Bool(true));
    serde_json::to_vec(&v).ok()
}

/// A streamed Chat Completions body as the client asked for it, when the
/// gateway asked for its usage ([`ask_usage`]) and the client did not: the
/// usage event (`choices: []`) is held back, and so is the `"usage":null`
/// the provider then adds to every other chunk. Everything else passes as
/// it came, event by event (an event is held only until its blank line).
#[derive(Debug, Default)]
pub struct Unasked {
    /// The unfinished event.
    buf: Vec<u8>,
}

impl Unasked {
    /// The next bytes from the upstream; what may go on to the client.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.buf.len());
        let mut start = 0;
        while let Some(end) = event_end(&self.buf[start..]) {
            pass_event(&self.buf[start..start + end], &mut out);
            start += end;
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_KEPT {
            // No event of a chat stream is this long: let it through.
            out.append(&mut self.buf);
        }
        out
    }

    /// The upstream's body ended: what was held of an unfinished event.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.buf);
        pass_event(&rest, &mut out);
        out
    }
}

/// Where the first whole event of `buf` ends (past its blank line).
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            match buf.get(i + 1) {
                Some(b'\n') => return Some(i + 2),
                Some(b'\r') if buf.get(i + 2) == Some(&b'\n') => return Some(i + 3),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// An event on to `out`, unless it is the usage the client did not ask for.
fn pass_event(event: &[u8], out: &mut Vec<u8>) {
    let data: Vec<u8> = event
        .split(|&b| b == b'\n')
        .filter_map(|l| l.strip_suffix(b"\r").unwrap_or(l).strip_prefix(b"data:"))
        .flat_map(|d| d.strip_prefix(b" ").unwrap_or(d).iter().copied())
        .collect();
    if let Ok(v) = serde_json::from_slice::<Value>(&data)
        && v["choices"].as_array().is_some_and(Vec::is_empty)
        && v["usage"].is_object()
    {
        return;
    }
    const NULL_USAGE: &[u8] = br#","usage":null"#;
    match event.windows(NULL_USAGE.len()).position(|w| w == NULL_USAGE) {
        Some(at) => {
            out.extend_from_slice(&event[..at]);
            out.extend_from_slice(&event[at + NULL_USAGE.len()..]);
        }
        None => out.extend_from_slice(event),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(api: Api, streamed: bool, body: &str, cut: usize) -> Counted {
        let mut m = Meter::new(api, streamed);
        for piece in body.as_bytes().chunks(cut) {
            m.feed(piece);
        }
        m.finish().clone()
    }

    #[test]
    fn messages_streamed_in_any_pieces() {
        let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":90,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n\
            event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\r\n\r\n";
        for cut in [1, 7, 64, 10_000] {
            let c = metered(Api::Messages, true, body, cut);
            assert_eq!(
                c,
                Counted { model: Some("claude-x".into()), input: 105, output: 42, cached: 90, written: 5 },
                "{cut}"
            );
        }
    }

    #[test]
    fn whole_answers_of_each_api() {
        let m = r#"{"model":"claude-x","usage":{"input_tokens":3,"output_tokens":4}}"#;
        assert_eq!(
            metered(Api::Messages, false, m, 5),
            Counted { model: Some("claude-x".into()), input: 3, output: 4, cached: 0, written: 0 }
        );
        let r = r#"{"model":"gpt-x","usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":20},"output_tokens":4}}"#;
        assert_eq!(
            metered(Api::Responses, false, r, 5),
            Counted { model: Some("gpt-x".into()), input: 30, output: 4, cached: 20, written: 0 }
        );
        let c = r#"{"model":"m1","usage":{"prompt_tokens":7,"completion_tokens":2}}"#;
        assert_eq!(
            metered(Api::Chat, false, c, 3),
            Counted { model: Some("m1".into()), input: 7, output: 2, cached: 0, written: 0 }
        );
    }

    #[test]
    fn responses_and_chat_streamed() {
        let r = "data: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-x\"}}\n\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-x\",\"usage\":{\"input_tokens\":40,\"output_tokens\":20}}}\n\n";
        assert_eq!(
            metered(Api::Responses, true, r, 9),
            Counted { model: Some("gpt-x".into()), input: 40, output: 20, cached: 0, written: 0 }
        );
        let c = "data: {\"model\":\"m1\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\ndata: {\"model\":\"m1\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n";
        assert_eq!(
            metered(Api::Chat, true, c, 4),
            Counted { model: Some("m1".into()), input: 10, output: 5, cached: 0, written: 0 }
        );
    }

    /// Gemini's chunks each carry the counts so far; the newest stand.
    #[test]
    fn gemini_streamed_and_whole() {
        let g = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":{\"promptTokenCount\":100,\"candidatesTokenCount\":1},\"modelVersion\":\"gemini-x\"}\r\n\r\n\
            data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":100,\"cachedContentTokenCount\":60,\"candidatesTokenCount\":7,\"thoughtsTokenCount\":3},\"modelVersion\":\"gemini-x\"}\r\n\r\n";
        let want = Counted { model: Some("gemini-x".into()), input: 100, output: 10, cached: 60, written: 0 };
        assert_eq!(metered(Api::Gemini, true, g, 7), want);
        let whole = r#"{"candidates":[],"usageMetadata":{"promptTokenCount":100,"cachedContentTokenCount":60,"candidatesTokenCount":7,"thoughtsTokenCount":3},"modelVersion":"gemini-x"}"#;
        assert_eq!(metered(Api::Gemini, false, whole, 5), want);
        // A stream asked for without `alt=sse`: one JSON array of chunks,
        // counted all the same (else a session could spend unmetered).
        let array = format!(r#"[{{"usageMetadata":{{"promptTokenCount":100,"candidatesTokenCount":1}}}},{whole}]"#);
        assert_eq!(metered(Api::Gemini, false, &array, 5), want);
        assert_eq!(Api::of("/v1beta/models/m1:streamGenerateContent"), Some(Api::Gemini));
    }

    #[test]
    fn garbage_counts_nothing() {
        for body in ["", "data: {", "not json", "data: [1,2]\n", "{\"usage\": 7}"] {
            for api in [Api::Messages, Api::Responses, Api::Chat, Api::Gemini] {
                assert!(metered(api, true, body, 3).is_empty());
                assert!(metered(api, false, body, 3).is_empty());
            }
        }
    }

    #[test]
    fn chat_requests_are_asked_for_their_usage() {
        let out = ask_usage(Some(Api::Chat), br#"{"stream":true,"model":"m1"}"#).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert!(ask_usage(Some(Api::Chat), br#"{"stream":false}"#).is_none());
        assert!(ask_usage(Some(Api::Messages), br#"{"stream":true}"#).is_none());
        assert!(ask_usage(Some(Api::Chat), b"not json").is_none());
    }

    /// The usage event the gateway asked for never reaches a client that
    /// did not, however the upstream's bytes are cut; the rest passes as
    /// it came.
    #[test]
    fn the_usage_the_client_did_not_ask_for_is_held_back() {
        let stream = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
            ": a comment\r\n\r\n",
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5}}\n\n",
            "data: [DONE]\n\n",
        );
        let want = concat!(
            "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            ": a comment\r\n\r\n",
            "data: [DONE]\n\n",
        );
        for cut in 1..stream.len() {
            let mut u = Unasked::default();
            let mut out = u.feed(&stream.as_bytes()[..cut]);
            out.extend(u.feed(&stream.as_bytes()[cut..]));
            out.extend(u.finish());
            assert_eq!(String::from_utf8(out).unwrap(), want, "cut at {cut}");
        }
        // A body that ends without its blank line still ends whole.
        let mut u = Unasked::default();
        let mut out = u.feed(b"data: {\"choices\":[{}]}");
        out.extend(u.finish());
        assert_eq!(out, b"data: {\"choices\":[{}]}");
    }
}
