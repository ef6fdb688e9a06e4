//! The hub's live updates: server-sent events of what changed (`/api/events`)
//! and of a chamber's transcript as it is written.

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast::error::RecvError;

use super::*;
use crate::services::runtime::NoticeKind;

/// One SSE stream of everything: `status` (a chamber changed), `message`,
/// `log` (a cryo.log line), `approval` (a request asked or decided, to the
/// owner), `index` (chambers added or removed) and `resync` (this client
/// fell behind: re-read everything). It ends on shutdown.
pub(super) async fn events(State(hub): State<Hub>, axum::Extension(role): Who) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(256);
    let daemon = hub.daemon.clone();
    let (mut notices, stopping) = (daemon.notices(), daemon.stopping());
    let mut revoked = hub.invites.watch();
    tokio::spawn(async move {
        let _ = tx.send(": cryo hub events\n\n".to_string()).await;
        loop {
            let n = tokio::select! {
                _ = stopping.cancelled() => return,
                _ = tx.closed() => return,
                // A guest's stream ends the moment its invite is revoked.
                _ = revoked.changed() => match &role {
                    Role::Guest(g) if !hub.invites.stands(g) => return,
                    _ => continue,
                },
                n = notices.recv() => n,
            };
            let frame = match n {
                Ok(n) => match sse_frame(&daemon, &role, n) {
                    Some(f) => f,
                    None => continue,
                },
                Err(RecvError::Lagged(_)) => "event: resync\ndata: {}\n\n".to_string(),
                Err(RecvError::Closed) => return,
            };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    sse(crate::base::conn::with_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

pub(super) fn sse(body: Body) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /api/chambers/NAME/transcript`: the agent's transcript
/// (`cryo-agent.log`) as an event stream: its last lines, then each line as
/// the agent writes it (`event: lines`, `{lines}`), until the page goes.
pub(super) async fn transcript(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> Response {
    use tokio_stream::StreamExt;
    let v = match view(&hub, &name).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let frames = crate::fronts::rpc::follow::log(&hub.daemon, v, true, true, 200).map(|r| match r {
        Ok(l) => format!("event: lines\ndata: {}\n\n", json!({ "lines": l.lines })),
        Err(s) => format!("event: error\ndata: {}\n\n", json!({ "error": s.message() })),
    });
    sse(crate::base::conn::with_keep_alive(frames))
}

pub(super) fn sse_frame(daemon: &Daemon, role: &Role, n: crate::services::runtime::Notice) -> Option<String> {
    let v = daemon.view_by_id(n.chamber);
    let name = v.as_ref().map(|v| v.record.name.clone()).unwrap_or_default();
    if !matches!(n.what, NoticeKind::Removed) && !role.sees(&name) {
        return None;
    }
    let (event, data) = match n.what {
        NoticeKind::Status => ("status", json!({ "chamber": chamber_value_for(role, v.as_ref()?) })),
        NoticeKind::Log(_) if matches!(role, Role::Guest(_)) => return None,
        NoticeKind::Log(line) => ("log", json!({ "chamber": name, "line": line })),
        NoticeKind::Message { folder, name: file } => {
            let v = v?;
            let mb = crate::chamber::mailbox::Mailbox::new(
                Path::new(&v.record.path),
                v.snap.view.timezone.parse().unwrap_or(chrono_tz::UTC),
            );
            // Only that file is read, off the worker's other tasks.
            let m = tokio::task::block_in_place(|| mb.read_named(folder, &file))?;
            ("message", json!({ "chamber": v.record.name, "message": message_value(&m) }))
        }
        NoticeKind::Approval(_) if !matches!(role, Role::Owner) => return None,
        NoticeKind::Approval(record) => {
            let named = crate::daemon::approvals::Named { chamber: name.clone(), record: *record };
            ("approval", json!({ "chamber": name, "approval": crate::fronts::convert::approval_value(&named) }))
        }
        NoticeKind::Removed => ("index", json!({})),
    };
    Some(format!("event: {event}\ndata: {data}\n\n"))
}
