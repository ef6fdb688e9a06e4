//! The hub: web pages and a JSON API served by cryod itself, on loopback.
//!
//! Every API call needs the owner's bearer token (made on first start, kept
//! 0600 in the state folder). The Host header must name the hub (against DNS
//! rebinding); writes need `X-Cryo-Csrf: 1` or `Sec-Fetch-Site: same-origin`;
//! pages get `nosniff`, `no-referrer` and a content security policy; bodies
//! are capped. Handlers call the same [`Daemon`] operations as the gRPC
//! services, and print the same JSON as `cryoctl --json` (`cryo_proto::json`).
//! Only fixed files of a chamber are served (`plan.md`, `NOTES.md`, its logs),
//! so no request can name a path outside it. `/mcp` serves the operator's MCP
//! tools (`cryo_mcp`) over streamable HTTP with the same token.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::daemon::{ChamberView, Daemon};
use crate::error::Error;

/// Largest request body accepted.
pub const MAX_BODY: usize = 256 * 1024;

/// The page's files, embedded: path, bytes, type.
const ASSETS: &[(&str, &[u8], &str)] = &[
    ("/", include_bytes!("../../../../web/index.html"), "text/html; charset=utf-8"),
    ("/boot.js", include_bytes!("../../../../web/boot.js"), "text/javascript; charset=utf-8"),
    ("/app.js", include_bytes!("../../../../web/app.js"), "text/javascript; charset=utf-8"),
    ("/lib.js", include_bytes!("../../../../web/lib.js"), "text/javascript; charset=utf-8"),
    ("/chamber.js", include_bytes!("../../../../web/chamber.js"), "text/javascript; charset=utf-8"),
    ("/owner.js", include_bytes!("../../../../web/owner.js"), "text/javascript; charset=utf-8"),
    ("/list.js", include_bytes!("../../../../web/list.js"), "text/javascript; charset=utf-8"),
    ("/approvals.js", include_bytes!("../../../../web/approvals.js"), "text/javascript; charset=utf-8"),
    ("/trust.js", include_bytes!("../../../../web/trust.js"), "text/javascript; charset=utf-8"),
    ("/run.js", include_bytes!("../../../../web/run.js"), "text/javascript; charset=utf-8"),
    ("/timeline.js", include_bytes!("../../../../web/timeline.js"), "text/javascript; charset=utf-8"),
    ("/sw.js", include_bytes!("../../../../web/sw.js"), "text/javascript; charset=utf-8"),
    ("/app.css", include_bytes!("../../../../web/app.css"), "text/css; charset=utf-8"),
    ("/manifest.webmanifest", include_bytes!("../../../../web/manifest.webmanifest"), "application/manifest+json"),
    ("/icon-192.png", include_bytes!("../../../../web/icon-192.png"), "image/png"),
    ("/icon-512.png", include_bytes!("../../../../web/icon-512.png"), "image/png"),
];

pub use crate::services::runtime::HubInfo;

mod api;
mod approvals;
mod attachments;
mod events;
mod guard;
mod history;
pub mod hooks;
pub mod invites;
mod markdown;
mod settings;

use self::api::*;
use self::events::*;
pub use self::guard::token;
use self::guard::*;
use invites::Role;

/// Each credential's recent sends and uploads (`[hub] sends_per_minute`,
/// `uploads_per_minute`).
struct Rates {
    send: crate::services::notifier::Window,
    upload: crate::services::notifier::Window,
}

#[derive(Clone)]
struct Hub {
    daemon: Daemon,
    token: Arc<String>,
    hosts: Arc<Vec<String>>,
    hooks: hooks::Hooks,
    invites: invites::Invites,
    rates: Arc<std::sync::Mutex<Rates>>,
    /// Held while an upload checks the quota and writes.
    uploads: Arc<tokio::sync::Mutex<()>>,
    /// Held while a `cryo.toml` is read and rewritten.
    settings: Arc<tokio::sync::Mutex<()>>,
}

impl Hub {
    /// A chamber `role` may see; one it may not is "not found", as if it
    /// did not exist.
    async fn chamber_for(&self, role: &Role, name: &str) -> Result<ChamberView, ApiError> {
        if !role.sees(name) {
            return Err(Error::NotFound(format!("no chamber named {name:?}")).into());
        }
        view(self, name).await
    }

    /// Counts a send or an upload against `role`'s rate; over it, the 429
    /// to answer with.
    fn over_rate(&self, role: &Role, upload: bool) -> Option<Response> {
        let mut rates = self.rates.lock().expect("rates lock");
        let (window, what) = if upload { (&mut rates.upload, "uploads") } else { (&mut rates.send, "sends") };
        let limit = window.limit();
        let wait = window.take(&role.credential()).err()?;
        Some(too_many(&format!("over {limit} {what} a minute"), wait))
    }
}

/// Binds and serves the hub until shutdown; returns where it listens.
/// `chosen`: the operator named `bind`; else it is this user's usual
/// port, and if another process holds it the hub takes a free port for
/// this run and says so (`HubInfo::note`).
pub async fn start(daemon: Daemon, bind: &str, chosen: bool, token: String) -> HubInfo {
    let mut note = None;
    let listener = match tokio::net::TcpListener::bind(bind).await {
        Ok(l) => l,
        Err(e) if !chosen && e.kind() == std::io::ErrorKind::AddrInUse => {
            match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(l) => {
                    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
                    note = Some(format!(
                        "the hub's usual port ({bind}) is taken (another user's cryod?): it listens on port {port} \
                         this run; set `[hub] bind = \"127.0.0.1:PORT\"` in {} for a fixed one",
                        daemon.config_file().display()
                    ));
                    l
                }
                Err(e) => return refused(&daemon, bind, e, token),
            }
        }
        Err(e) => return refused(&daemon, bind, e, token),
    };
    if let Some(n) = &note {
        tracing::warn!(note = %n, "the hub moved");
    }
    let addr = listener.local_addr().unwrap_or_else(|_| bind.parse().expect("checked when loading the config"));
    let url = format!("http://{addr}/");
    let app = router(daemon.clone(), token.clone(), addr);
    serve(listener, app, &daemon, "the hub");
    tracing::info!(%url, "hub listening");
    HubInfo { url, token, up: true, error: None, note }
}

/// The hub cannot listen: why, and which key to set.
fn refused(daemon: &Daemon, bind: &str, e: std::io::Error, token: String) -> HubInfo {
    let error = format!(
        "cannot listen on {bind}: {e} (another program holds it?): set `[hub] bind = \"127.0.0.1:PORT\"` in {} \
         and restart cryod",
        daemon.config_file().display()
    );
    tracing::warn!(%error, "the hub is not running");
    HubInfo { error: Some(error), token, ..HubInfo::default() }
}

/// The hub's routes (public for in-process tests).
pub fn router(daemon: Daemon, token: String, addr: SocketAddr) -> Router {
    let port = addr.port();
    let mut hosts =
        vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}"), addr.to_string()];
    hosts.dedup();
    let minute = std::time::Duration::from_secs(60);
    let c = &daemon.config().hub;
    let rates = Rates {
        send: crate::services::notifier::Window::new(minute, c.sends_per_minute.max(1)),
        upload: crate::services::notifier::Window::new(minute, c.uploads_per_minute.max(1)),
    };
    let invites = invites::Invites::load(daemon.state_dir());
    let hub = Hub {
        daemon,
        token: Arc::new(token),
        hosts: Arc::new(hosts),
        hooks: Default::default(),
        invites,
        rates: Arc::new(std::sync::Mutex::new(rates)),
        uploads: Default::default(),
        settings: Default::default(),
    };
    let api = Router::new()
        .route("/chambers", get(list).post(create))
        .route("/chambers/{name}", get(chamber).delete(remove))
        .route("/chambers/{name}/messages", get(messages).post(send))
        .route("/chambers/{name}/todos", get(todos).post(todo_add))
        .route("/chambers/{name}/todos/done", get(todos_done))
        .route("/chambers/{name}/todos/{id}/done", post(todo_done))
        .route("/chambers/{name}/todos/{id}", axum::routing::delete(todo_remove))
        .route("/chambers/{name}/plan", get(plan).put(plan_put))
        .route("/chambers/{name}/notes", get(notes))
        .route("/chambers/{name}/log", get(log))
        .route("/chambers/{name}/settings", get(settings::get).put(settings::put))
        .route("/chambers/{name}/transcript", get(transcript))
        .route("/chambers/{name}/diff", get(diff))
        .route("/chambers/{name}/history", get(history::chamber))
        .route("/schedule", get(history::fleet))
        .route(
            "/chambers/{name}/attachments",
            post(attachments::upload).layer(DefaultBodyLimit::max(attachments::MAX_UPLOAD + 1)),
        )
        .route("/chambers/{name}/attachments/{file}", get(attachments::fetch))
        .route("/chambers/{name}/trust", get(trust_diff).post(trust_accept))
        .route("/chambers/{name}/{action}", post(control))
        .route("/approvals", get(approvals::list))
        .route("/approvals/{id}/{action}", post(approvals::decide))
        .route("/limits", get(limits))
        .route("/push", get(push_list).post(push_add).delete(push_remove))
        .route("/events", get(events))
        .route("/me", get(me))
        .route("/invites", get(invite_list).post(invite_add))
        .route("/invites/{name}", axum::routing::delete(invite_remove))
        .layer(middleware::from_fn_with_state(hub.clone(), auth));
    let metrics =
        Router::new().route("/metrics", get(metrics)).layer(middleware::from_fn_with_state(hub.clone(), auth));
    let mcp = Router::new()
        .nest_service("/mcp", mcp_service(&hub.daemon))
        .layer(middleware::from_fn_with_state(hub.clone(), auth));
    Router::new()
        .merge(metrics)
        .merge(mcp)
        .merge(assets())
        .nest("/api", api)
        .route("/hooks/{name}", post(hooks::receive))
        .route("/approve/{token}", get(approvals::link_page).post(approvals::link_answer))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .layer(middleware::from_fn_with_state(hub.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(tower_http::compression::CompressionLayer::new())
        .with_state(hub)
}

/// `/mcp`: the operator's MCP tools (`cryo_mcp`) over streamable HTTP,
/// for an assistant on another device. Stateless (each POST stands alone:
/// no session to keep or expire) with JSON answers; the hub's own guard
/// checks the Host and its `auth` the bearer token.
fn mcp_service(
    daemon: &Daemon,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    cryo_mcp::OperatorTools,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    // The Control server the socket serves, called in process (no socket,
    // no operator key: `auth` checked the hub's token).
    let control = crate::fronts::rpc::control::ControlService { daemon: daemon.clone() };
    let control = cryo_proto::control_over(cryo_proto::v1::control_server::ControlServer::new(control));
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_BODY)
        .with_cancellation_token(daemon.stopping())
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(cryo_mcp::OperatorTools::new(control.clone(), false)),
        Default::default(),
        config,
    )
}

/// Serves `app` on `listener` until cryod shuts down.
fn serve(listener: tokio::net::TcpListener, app: Router, daemon: &Daemon, what: &'static str) {
    let shutdown = daemon.stopping();
    tokio::spawn(async move {
        let served = axum::serve(crate::base::conn::Capped::new(listener), app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::error!(%error, "{what} stopped");
        }
    });
}

/// `GET /metrics`: the node's figures in OpenMetrics text.
async fn metrics(State(hub): State<Hub>, headers: HeaderMap) -> Response {
    metrics_response(&hub.daemon, &headers)
}

/// The figures in the format the client's `Accept` asks for.
fn metrics_response(daemon: &Daemon, headers: &HeaderMap) -> Response {
    let text = crate::fronts::convert::metrics(daemon);
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (text, kind) = if crate::base::metrics::wants_openmetrics(accept) {
        (text, crate::base::metrics::CONTENT_TYPE)
    } else {
        (crate::base::metrics::to_prometheus(&text), crate::base::metrics::PROMETHEUS_TYPE)
    };
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

/// Why the metrics endpoint does not listen.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The address cannot be bound (taken, not this machine's).
    #[error("cannot listen on {bind} for metrics: {error}")]
    Bind { bind: String, error: std::io::Error },
    /// The socket bound does not say its address.
    #[error("{0}")]
    Address(std::io::Error),
}

/// Serves `GET /metrics` alone, without a token, on `bind` (a loopback
/// address: `[metrics] listen` in `cryod.toml`), until shutdown.
pub async fn serve_metrics(daemon: Daemon, bind: &str) -> Result<SocketAddr, ListenError> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|error| ListenError::Bind { bind: bind.to_string(), error })?;
    let addr = listener.local_addr().map_err(ListenError::Address)?;
    let app = Router::new()
        .route("/metrics", get(|State(d): State<Daemon>, h: HeaderMap| async move { metrics_response(&d, &h) }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .with_state(daemon.clone());
    serve(listener, app, &daemon, "the metrics listener");
    tracing::info!(%addr, "metrics listening");
    Ok(addr)
}

/// The page's files (public: they hold no data).
fn assets() -> Router<Hub> {
    let mut r = Router::new();
    for (path, body, kind) in ASSETS {
        let body: &'static [u8] = if *path == "/sw.js" { &SERVICE_WORKER } else { body };
        r = r.route(path, get(move || async move { page(body, kind) }));
    }
    r
}

/// The service worker as served: its mark replaced by a digest of every
/// file the page is made of, so that the browser, finding the worker's
/// bytes changed, installs a new one (and fills a new cache) whenever a
/// new cryod brings other files. Its cache serves the page at once.
static SERVICE_WORKER: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let mut all = ring::digest::Context::new(&ring::digest::SHA256);
    for (path, body, _) in ASSETS {
        all.update(path.as_bytes());
        all.update(body);
    }
    let digest = hex::encode(&all.finish().as_ref()[..8]);
    let (_, sw, _) = ASSETS.iter().find(|(p, _, _)| *p == "/sw.js").expect("the worker is a page file");
    String::from_utf8_lossy(sw).replace("CRYO_SHELL_DIGEST", &digest).into_bytes()
});

fn page(body: &'static [u8], kind: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; \
             manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}
