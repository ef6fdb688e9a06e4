//! Approvals on the hub: the owner's list and answers (`/api/approvals`),
//! and the links of a notice (`/approve/TOKEN`): a page that shows the
//! request and asks to confirm (a GET changes nothing, so a mail client's
//! or a chat's link preview cannot answer), and its POST, which answers.
//! A link is signed, names one request and one answer, and expires
//! (`approvals::check_link`); it works once, as the request is decided by
//! its first use.

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::Hub;
use super::api::ApiResult;
use crate::daemon::approvals::Named;
use crate::error::Error;
use crate::fronts::convert::approval_value;
use crate::services::approvals;

#[derive(Deserialize, Default)]
pub(super) struct ListQuery {
    #[serde(default)]
    all: bool,
}

/// `GET /api/approvals[?all=true]`: pending requests (all, with `all`).
pub(super) async fn list(
    State(hub): State<Hub>,
    axum::extract::Query(q): axum::extract::Query<ListQuery>,
) -> ApiResult {
    let list = hub.daemon.approvals(None, q.all, 100).await?;
    Ok(axum::Json(json!({ "approvals": list.iter().map(approval_value).collect::<Vec<_>>() })))
}

#[derive(Deserialize, Default)]
pub(super) struct Decide {
    #[serde(default)]
    reason: String,
}

/// `POST /api/approvals/ID/approve` and `…/deny` (`{"reason": …}`).
pub(super) async fn decide(
    State(hub): State<Hub>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    body: Option<axum::Json<Decide>>,
) -> ApiResult {
    let approve = match action.as_str() {
        "approve" => true,
        "deny" => false,
        other => return Err(Error::NotFound(format!("no action {other:?} (approve, deny)")).into()),
    };
    let reason = body.map(|b| b.0.reason).filter(|r| !r.trim().is_empty());
    let named = hub.daemon.decide_approval(&id, approve, "hub", reason).await?;
    Ok(axum::Json(approval_value(&named)))
}

/// The page of a link, or its answer: one short HTML document.
fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width,initial-scale=1\"><title>{t}</title><link rel=\"stylesheet\" href=\"/app.css\">\
         </head><body><main class=\"link-page\"><h1>{t}</h1>{body}<p><a href=\"/\">Open the hub</a></p></main></body></html>",
        t = escape(title)
    );
    let mut r = (status, Html(html)).into_response();
    r.headers_mut().insert("cache-control", axum::http::HeaderValue::from_static("no-store"));
    r
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The request a link names, if the link holds.
async fn linked(hub: &Hub, token: &str) -> Result<(Named, bool), Response> {
    let key = hub.token.as_str();
    let now = hub.daemon.now();
    let (id, approve) = approvals::check_link(key, token, now)
        .map_err(|why| page(StatusCode::FORBIDDEN, "Link refused", &format!("<p>{}</p>", escape(&why.to_string()))))?;
    let named = hub
        .daemon
        .approval(&id)
        .await
        .map_err(|e| page(StatusCode::NOT_FOUND, "Link refused", &format!("<p>{}</p>", escape(&e.to_string()))))?;
    Ok((named, approve))
}

/// `GET /approve/TOKEN`: what the link would do, and a button to do it.
pub(super) async fn link_page(State(hub): State<Hub>, UrlPath(token): UrlPath<String>) -> Response {
    let (named, approve) = match linked(&hub, &token).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let a = &named.record;
    let verb = if approve { "Approve" } else { "Deny" };
    // The whole call, its lines kept: what is approved is what is read.
    let mut body = format!(
        "<p><b>{}</b> asks to run <b>{}</b>:</p><pre>{}</pre><p>{}</p>",
        escape(&named.chamber),
        escape(&a.tool),
        escape(&a.subject),
        escape(&a.rule)
    );
    if !a.reason.is_empty() {
        body.push_str(&format!("<p>The agent says: {}</p>", escape(&a.reason)));
    }
    if a.state != "pending" {
        body.push_str(&format!("<p>{}</p>", escape(&crate::store::approval_already(a))));
        return page(StatusCode::CONFLICT, "Already answered", &body);
    }
    body.push_str(&format!("<form method=\"post\"><button type=\"submit\">{verb}</button></form>"));
    page(StatusCode::OK, &format!("{verb} this call?"), &body)
}

/// `POST /approve/TOKEN`: the answer the link carries.
pub(super) async fn link_answer(State(hub): State<Hub>, UrlPath(token): UrlPath<String>) -> Response {
    let (named, approve) = match linked(&hub, &token).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    match hub.daemon.decide_approval(&named.record.id, approve, "link", None).await {
        Ok(n) => {
            let done = if approve { "Approved" } else { "Denied" };
            let body = format!("<p>{} goes on: {}.</p>", escape(&n.chamber), escape(&approvals::what(&n.record)));
            page(StatusCode::OK, done, &body)
        }
        Err(e) => page(StatusCode::CONFLICT, "Link refused", &format!("<p>{}</p>", escape(&e.to_string()))),
    }
}
