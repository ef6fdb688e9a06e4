//! What the gateway reads of the model APIs' traffic, without I/O: which
//! API a request speaks and whether its key may reach it (here), what a
//! response says it used, streamed or not (`usage.rs`, which also tells
//! each API's shapes), and what its rate-limit headers say of the account
//! (`limits.rs`).

mod limits;
mod usage;

pub use limits::{Pressure, pressure};
use serde_json::Value;
pub use usage::{Counted, Meter, Unasked, ask_usage};

/// The model APIs the gateway counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Messages,
    Responses,
    Chat,
    Gemini,
}

impl Api {
    /// The API a request's path (below the upstream's base) speaks, if it is
    /// one the gateway counts.
    pub fn of(path: &str) -> Option<Api> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/messages") || path == "messages" {
            Some(Api::Messages)
        } else if path.ends_with("/responses") || path == "responses" {
            Some(Api::Responses)
        } else if path.ends_with("/chat/completions") {
            Some(Api::Chat)
        } else if path.ends_with(":generateContent") || path.ends_with(":streamGenerateContent") {
            Some(Api::Gemini)
        } else {
            None
        }
    }

    /// An error body in this API's own shape, which its CLI shows as an
    /// API error.
    pub fn error(api: Option<Api>, kind: &str, message: &str) -> Value {
        match api {
            Some(Api::Messages) | None => {
                serde_json::json!({ "type": "error", "error": { "type": kind, "message": message } })
            }
            Some(Api::Gemini) => serde_json::json!({ "error": { "code": 400, "status": kind, "message": message } }),
            Some(_) => serde_json::json!({ "error": { "type": kind, "code": kind, "message": message } }),
        }
    }
}

/// Whether the gateway forwards `method` on `path` (below the base): the
/// model calls the known CLIs make, and the model lists they read. The real
/// key reaches nothing else (no files, batches, fine-tunes, admin calls).
///
/// The path is matched whole against each API's endpoints (an optional
/// version first: `v1`, `v1beta`, `v1alpha`), never by its end, and only in
/// its plainest form: letters, digits and `-._:@` between single slashes.
/// An escape (`%2e`, `%2f`), a backslash (which URL parsers read as a
/// slash), an empty or dot segment would let the upstream resolve it into
/// another endpoint, or another tenant's: refused.
pub fn allowed(method: &str, path: &str) -> bool {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"/-._:@".contains(&b);
    if !path.starts_with('/') || !path.bytes().all(plain) {
        return false;
    }
    let segments: Vec<&str> = path.strip_suffix('/').unwrap_or(path)[1..].split('/').collect();
    if segments.iter().any(|s| s.is_empty() || s.bytes().all(|b| b == b'.')) {
        return false;
    }
    let rest = match segments.split_first() {
        Some((v, rest)) if ["v1", "v1beta", "v1alpha"].contains(v) => rest,
        _ => &segments[..],
    };
    // Gemini's: `models/MODEL:VERB`.
    let gemini = |m: &str| {
        m.split_once(':').is_some_and(|(model, verb)| {
            !model.is_empty() && ["generateContent", "streamGenerateContent", "countTokens"].contains(&verb)
        })
    };
    match (method, rest) {
        ("POST", ["messages"] | ["messages", "count_tokens"]) => true,
        ("POST", ["responses"] | ["responses", "compact"]) => true,
        ("POST", ["chat", "completions"] | ["completions"]) => true,
        ("POST", ["models", m]) => gemini(m),
        // The list, or one model of it.
        ("GET", ["models"] | ["models", _]) => true,
        _ => false,
    }
}

/// The model a request asks for: Gemini's is in its path
/// (`models/MODEL:generateContent`), the others' in the body's `model`
/// (read without keeping the rest of a body that may be megabytes).
pub fn requested_model(api: Option<Api>, path: &str, body: &[u8]) -> Option<String> {
    if api == Some(Api::Gemini) {
        let (_, rest) = path.rsplit_once("/models/")?;
        return rest.split_once(':').map(|(m, _)| m.to_string()).filter(|m| !m.is_empty());
    }
    #[derive(serde::Deserialize)]
    struct Model {
        model: Option<String>,
    }
    api?;
    serde_json::from_slice::<Model>(body).ok()?.model.filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods_the_key_may_reach() {
        assert_eq!(Api::of("/v1/messages"), Some(Api::Messages));
        assert_eq!(Api::of("/responses"), Some(Api::Responses));
        assert_eq!(Api::of("/v1/chat/completions"), Some(Api::Chat));
        for (m, p) in [
            ("POST", "/v1/messages"),
            ("POST", "/v1/messages/count_tokens"),
            ("GET", "/v1/models"),
            ("GET", "/models/gpt-5"),
            ("POST", "/responses"),
            ("POST", "/v1beta/models/gemini-3-pro:streamGenerateContent"),
            ("POST", "/v1beta/models/m1:generateContent"),
            ("POST", "/v1beta/models/m1:countTokens"),
            ("GET", "/v1beta/models"),
        ] {
            assert!(allowed(m, p), "{m} {p}");
        }
        for (m, p) in [
            ("POST", "/v1/files"),
            ("GET", "/v1/organizations/api_keys"),
            ("DELETE", "/v1/models/x"),
            ("POST", "/v1/batches"),
            ("GET", "/v1/messages"),
            // Dot segments a client or the upstream would resolve elsewhere.
            ("GET", "/v1/models/.."),
            ("GET", "/v1/models/%2e%2e"),
            ("GET", "/v1/models/%2E%2e/files"),
            ("POST", "/v1/files/../messages"),
            ("GET", "/v1/models/x%2f..%2ffiles"),
            ("POST", "/v1beta/models/m1:embedContent"),
            ("POST", "/v1beta/models/:generateContent"),
            ("POST", "/v1beta/files/m1:generateContent"),
            ("POST", "/v1beta/cachedContents"),
            // Issue 59, case 7: a backslash (a URL parser's slash) walked
            // out of the configured prefix into another tenant's.
            ("POST", "/v1\\..\\..\\tenant-b/v1/messages"),
            ("POST", "/v1/x\\messages"),
            // Only whole endpoints, not any path ending like one.
            ("POST", "/tenant-b/v1/messages"),
            ("POST", "/anything/messages"),
            ("GET", "/admin/models/x"),
            ("POST", "/v1//messages"),
            ("POST", "/v1/%6d%65ssages"),
        ] {
            assert!(!allowed(m, p), "{m} {p}");
        }
    }

    #[test]
    fn the_requested_model_is_read_from_the_body_or_gemini_path() {
        let body = br#"{"messages":[{"role":"user","content":"a \"model\": b"}],"model":"m1","stream":true}"#;
        assert_eq!(requested_model(Some(Api::Chat), "/v1/chat/completions", body).as_deref(), Some("m1"));
        let gemini = "/v1beta/models/gemini-3-pro:streamGenerateContent";
        assert_eq!(requested_model(Some(Api::Gemini), gemini, b"{}").as_deref(), Some("gemini-3-pro"));
        assert_eq!(requested_model(Some(Api::Messages), "/v1/messages", b"not json"), None);
        assert_eq!(requested_model(None, "/v1/other", br#"{"model":"x"}"#), None);
    }
}
