//! A session's exchanges with its provider, kept for people to read beside
//! the transcript (`keep_exchanges = true` in `cryo.toml`): one JSON line
//! per request the gateway forwarded, with what it asked and what came
//! back, redacted. No credential is ever in a line: the headers kept are a
//! short allowlist (never `authorization`, `x-api-key` or a cookie), and
//! the real key and the session's token are replaced wherever they appear
//! in a body. Bounded: each body is kept up to [`MAX_BODY`], a session's
//! file up to [`MAX_FILE`]; past that a last line says what was left out.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// The most of one request's or response's body kept.
pub const MAX_BODY: usize = 1024 * 1024;
/// The most one session's exchanges file holds.
pub const MAX_FILE: u64 = 64 * 1024 * 1024;

/// The request headers kept (what shapes the exchange, nothing secret).
const HEADERS: &[&str] = &["content-type", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent"];

/// Lines waiting to be written, at most: past it one is left out (an
/// agent's flood of requests must not queue work on cryod's threads).
const PENDING: usize = 32;

/// Where a session's exchanges are written (the file `launch` opened in
/// the chamber, links refused).
#[derive(Clone)]
pub struct Kept(Arc<Shared>);

struct Shared {
    sink: Mutex<Sink>,
    full: AtomicBool,
    pending: AtomicUsize,
}

struct Sink {
    file: std::fs::File,
    written: u64,
}

impl Kept {
    pub fn new(file: std::fs::File) -> Kept {
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        let sink = Mutex::new(Sink { file, written });
        Kept(Arc::new(Shared { sink, full: AtomicBool::new(written >= MAX_FILE), pending: AtomicUsize::new(0) }))
    }

    /// Writes `x`'s line, redacted of `secrets`: made and written off the
    /// request's path, and not at all once the file is full or too many
    /// wait.
    pub fn write(&self, x: Exchange, secrets: Vec<String>) {
        let shared = self.0.clone();
        if shared.full.load(Ordering::Relaxed) || shared.pending.fetch_add(1, Ordering::Relaxed) >= PENDING {
            shared.pending.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        tokio::task::spawn_blocking(move || {
            let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
            let line = x.line(&secrets);
            let mut s = shared.sink.lock().expect("exchanges lock");
            shared.pending.fetch_sub(1, Ordering::Relaxed);
            if shared.full.load(Ordering::Relaxed) {
                return;
            }
            let line = if s.written + line.len() as u64 + 1 > MAX_FILE {
                shared.full.store(true, Ordering::Relaxed);
                json!({ "left_out": format!("this session's exchanges passed {} MiB; the rest are not kept", MAX_FILE >> 20) })
                    .to_string()
            } else {
                line
            };
            if writeln!(s.file, "{line}").is_ok() {
                s.written += line.len() as u64 + 1;
            }
        });
    }
}

/// One exchange being recorded: the request as it came, the response's
/// bytes as they pass.
pub struct Exchange {
    at: chrono::DateTime<chrono::Utc>,
    started: std::time::Instant,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    /// Its first [`MAX_BODY`] bytes (the rest is not held), and its size.
    request: Vec<u8>,
    request_bytes: u64,
    status: u16,
    response: Vec<u8>,
    response_bytes: u64,
}

impl Exchange {
    pub fn new(
        at: chrono::DateTime<chrono::Utc>,
        method: &str,
        path: &str,
        headers: &axum::http::HeaderMap,
        request: &[u8],
    ) -> Exchange {
        let headers = HEADERS
            .iter()
            .filter_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()).map(|v| (h.to_string(), v.to_string())))
            .collect();
        Exchange {
            at,
            started: std::time::Instant::now(),
            method: method.to_string(),
            path: path.to_string(),
            headers,
            request: request[..request.len().min(MAX_BODY)].to_vec(),
            request_bytes: request.len() as u64,
            status: 0,
            response: Vec::new(),
            response_bytes: 0,
        }
    }

    pub fn answered(&mut self, status: u16) {
        self.status = status;
    }

    /// A piece of the response passed.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.response_bytes += chunk.len() as u64;
        let room = MAX_BODY.saturating_sub(self.response.len());
        self.response.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// The exchange's line, with every one of `secrets` replaced.
    pub fn line(self, secrets: &[&str]) -> String {
        let request_bytes = self.request_bytes;
        let line = json!({
            "at": self.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "ms": self.started.elapsed().as_millis() as u64,
            "method": self.method,
            "path": self.path,
            "headers": self.headers.into_iter().map(|(k, v)| (k, Value::String(v))).collect::<serde_json::Map<String, Value>>(),
            "request": body(&self.request, request_bytes),
            "status": self.status,
            "response": body(&self.response, self.response_bytes),
        })
        .to_string();
        redact(line, secrets)
    }
}

/// A body as kept: its JSON if it is JSON and whole, else its text (an
/// event stream, or what was cut at [`MAX_BODY`]), with its full size.
fn body(bytes: &[u8], total: u64) -> Value {
    let whole = total as usize <= MAX_BODY;
    // A cut body loses its last 256 bytes too: no secret is kept in part.
    let kept = &bytes[..bytes.len().min(MAX_BODY)];
    let kept = if whole { kept } else { &kept[..kept.len().saturating_sub(256)] };
    match serde_json::from_slice::<Value>(kept) {
        Ok(v) if whole => v,
        _ if whole => Value::String(String::from_utf8_lossy(kept).into_owned()),
        _ => json!({ "cut_at": kept.len(), "bytes": total, "text": String::from_utf8_lossy(kept) }),
    }
}

/// `text` with each of `secrets` (the non-empty ones) replaced.
fn redact(mut text: String, secrets: &[&str]) -> String {
    for s in secrets.iter().filter(|s| s.len() >= 8) {
        // As they appear in JSON text too (escaped the same way: keys and
        // tokens are plain ASCII).
        text = text.replace(s, "[redacted]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_exchange_holds_no_credential_and_is_bounded() {
        let mut h = axum::http::HeaderMap::new();
        h.insert("x-api-key", "sk-real-key-123".parse().unwrap());
        h.insert("authorization", "Bearer sk-real-key-123".parse().unwrap());
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let request = br#"{"model":"m1","messages":[{"content":"my key is sk-real-key-123"}]}"#;
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-27T10:00:00Z").unwrap().to_utc();
        let mut x = Exchange::new(at, "POST", "/v1/messages", &h, request);
        x.answered(200);
        x.feed(b"event: message_start\ndata: {\"token\":\"cryo-gw-abcdef0123456789\"}\n\n");
        let line = x.line(&["sk-real-key-123", "cryo-gw-abcdef0123456789", ""]);
        assert!(!line.contains("sk-real-key-123") && !line.contains("cryo-gw-abcdef"), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["headers"], json!({ "anthropic-version": "2023-06-01" }));
        assert_eq!(v["request"]["model"], "m1");
        assert!(v["response"].as_str().unwrap().starts_with("event: message_start"));
        // A body past the bound is cut, and says so.
        let mut big = Exchange::new(at, "POST", "/v1/messages", &h, b"");
        big.feed(&vec![b'x'; MAX_BODY + 10]);
        let v: Value = serde_json::from_str(&big.line(&[])).unwrap();
        assert_eq!(
            (v["response"]["cut_at"].as_u64(), v["response"]["bytes"].as_u64()),
            (Some(MAX_BODY as u64 - 256), Some(MAX_BODY as u64 + 10))
        );
    }
}
