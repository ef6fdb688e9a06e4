//! The hub's security layer: every request passes `guard` (Host against
//! DNS rebinding, CSRF on writes, the page headers) and `auth` (the owner's
//! bearer token or a guest's invite); refusals are one line of JSON.

use std::path::Path;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::*;

/// A refusal: its status and one line of JSON.
pub(super) fn refuse(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(json!({ "error": why }))).into_response()
}

/// 429, with `Retry-After` in whole seconds (at least one).
pub(super) fn too_many(why: &str, wait: std::time::Duration) -> Response {
    let secs = (wait.as_secs_f64().ceil() as u64).max(1);
    let mut r = refuse(StatusCode::TOO_MANY_REQUESTS, &format!("{why}; try again in {secs} s"));
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// Reads (or creates, 0600) the hub's token in the state folder.
pub fn token(state_dir: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = state_dir.join("hub-token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim().to_string();
        if t.len() >= 32 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            return Ok(t);
        }
    }
    let t = crate::base::random::hex(32);
    crate::chamber::write_secret(&path, format!("{t}\n").as_bytes())?;
    Ok(t)
}

/// Every request: the Host must be the hub itself; writes need the CSRF
/// header (or a same-origin fetch); responses never sniff or refer.
pub(super) async fn guard(State(hub): State<Hub>, req: Request, next: Next) -> Response {
    // A webhook is signed with its chamber's secret: it comes through a
    // proxy (another Host) from a sender that knows no CSRF header.
    if req.uri().path().starts_with("/hooks/") {
        return next.run(req).await;
    }
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !hub.hosts.iter().any(|h| h == host) {
        return (StatusCode::MISDIRECTED_REQUEST, "this hub answers only on its own address").into_response();
    }
    // `/mcp` answers MCP clients, which send no CSRF header; the bearer
    // token it needs is never sent by a browser on its own.
    // A notice's approval link carries its own signed token (bound to one
    // request and one answer): a phone's notification action POSTs it
    // without the header.
    let path = req.uri().path();
    let write =
        !matches!(*req.method(), Method::GET | Method::HEAD) && path != "/mcp" && !path.starts_with("/approve/");
    if write && !csrf_ok(req.headers()) {
        return (StatusCode::FORBIDDEN, "writes need the X-Cryo-Csrf header").into_response();
    }
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

pub(super) fn csrf_ok(h: &HeaderMap) -> bool {
    h.get("x-cryo-csrf").is_some_and(|v| v == "1") || h.get("sec-fetch-site").is_some_and(|v| v == "same-origin")
}

/// API requests: the owner's bearer token or a guest's invite token, each
/// compared in constant time. A wrong or missing token gets 401 and nothing
/// else; a guest asking for more than conversations gets 403. The role goes
/// to the handlers, which keep a guest to its own chambers.
pub(super) async fn auth(State(hub): State<Hub>, mut req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let role = if constant_time_eq(given.as_bytes(), hub.token.as_bytes()) {
        Role::Owner
    } else if let Some(g) = (!given.is_empty()).then(|| hub.invites.guest(given)).flatten() {
        Role::Guest(Arc::new(g))
    } else {
        // RFC 9110: a 401 says how to authenticate (and nothing else).
        let mut r = StatusCode::UNAUTHORIZED.into_response();
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"cryo hub\""));
        return r;
    };
    if matches!(role, Role::Guest(_)) && !guest_may(req.method(), req.uri().path()) {
        return refuse(StatusCode::FORBIDDEN, "an invite opens only its chambers' conversations");
    }
    req.extensions_mut().insert(role);
    next.run(req).await
}

/// The routes a guest may use (the handlers then check the chamber):
/// who it is, the list, a chamber's summary, its conversation and sends,
/// attachments, and the event stream.
pub(super) fn guest_may(method: &Method, path: &str) -> bool {
    let path = path.strip_prefix("/api").unwrap_or(path);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let get = *method == Method::GET;
    match parts.as_slice() {
        ["me"] | ["events"] | ["chambers"] | ["chambers", _] => get,
        ["chambers", _, "messages"] => get || *method == Method::POST,
        ["chambers", _, "attachments"] => *method == Method::POST,
        ["chambers", _, "attachments", _] => get,
        _ => false,
    }
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
