//! What the two services' HTTP answers mean for a bridge: success, a reason
//! to stop, or a reason to wait and retry.

use std::time::Duration;

use crate::{Error, Result};

/// Longest a long poll may hang before we give up on it (Zulip answers
/// with a heartbeat within a minute or so).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(150);

pub fn client() -> reqwest::Client {
    crate::init_tls();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("cryo/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("an HTTP client with default TLS settings")
}

/// A network-level failure: transient. The message names what was tried,
/// never a credential (those travel in headers).
pub fn network(what: &str, e: reqwest::Error) -> Error {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    Error::transient(format!("{what}: {msg}"))
}

/// How long the service asked us to wait: `Retry-After` (seconds or an HTTP
/// date is not used by these services; seconds only), or GitHub's
/// `x-ratelimit-reset` when the rate limit is spent.
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let h = resp.headers();
    if let Some(secs) = h.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(secs.clamp(0.0, 24.0 * 3600.0)));
    }
    let spent = h.get("x-ratelimit-remaining").and_then(|v| v.to_str().ok()) == Some("0");
    let reset = h.get("x-ratelimit-reset").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<i64>().ok());
    if spent && let Some(reset) = reset {
        let now = crate::now().timestamp();
        return Some(Duration::from_secs((reset - now).clamp(1, 3600) as u64));
    }
    None
}

/// Passes a successful (or 304) response; turns the others into errors.
/// `what` says what was asked, for the message.
pub async fn check(resp: reqwest::Response, what: &str) -> Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() || status == reqwest::StatusCode::NOT_MODIFIED {
        return Ok(resp);
    }
    let wait = retry_after(&resp);
    let code = status.as_u16();
    let body = resp.text().await.unwrap_or_default();
    let detail = service_message(&body);
    let message =
        format!("{what}: HTTP {code}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") });
    Err(match code {
        429 => Error::Transient { message, retry_after: wait },
        403 if wait.is_some() => Error::Transient { message, retry_after: wait },
        500..=599 => Error::Transient { message, retry_after: wait },
        401 => Error::Fatal(format!("{what}: the credentials were refused (HTTP 401){}", suffix(&detail))),
        _ => Error::Fatal(message),
    })
}

fn suffix(detail: &str) -> String {
    if detail.is_empty() { String::new() } else { format!(": {detail}") }
}

/// The service's own words from an error body (`msg` for Zulip, `message`
/// for GitHub), cut short.
pub fn service_message(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let text = v["msg"].as_str().or_else(|| v["message"].as_str()).unwrap_or("");
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    text
}
