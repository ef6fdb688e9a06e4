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
//! tools (`crate::mcp`) over streamable HTTP with the same token.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cryo_proto::json as j;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::convert;
use crate::daemon::{ChamberRef, ChamberView, Daemon};
use crate::error::Error;
use crate::runtime::NoticeKind;
use crate::supervisor::TodoCall;

/// Largest request body accepted.
pub const MAX_BODY: usize = 256 * 1024;

/// The page's files, embedded: path, bytes, type.
const ASSETS: &[(&str, &[u8], &str)] = &[
    ("/", include_bytes!("../../../web/index.html"), "text/html; charset=utf-8"),
    ("/app.js", include_bytes!("../../../web/app.js"), "text/javascript; charset=utf-8"),
    ("/lib.js", include_bytes!("../../../web/lib.js"), "text/javascript; charset=utf-8"),
    ("/chamber.js", include_bytes!("../../../web/chamber.js"), "text/javascript; charset=utf-8"),
    ("/owner.js", include_bytes!("../../../web/owner.js"), "text/javascript; charset=utf-8"),
    ("/timeline.js", include_bytes!("../../../web/timeline.js"), "text/javascript; charset=utf-8"),
    ("/sw.js", include_bytes!("../../../web/sw.js"), "text/javascript; charset=utf-8"),
    ("/app.css", include_bytes!("../../../web/app.css"), "text/css; charset=utf-8"),
    ("/manifest.webmanifest", include_bytes!("../../../web/manifest.webmanifest"), "application/manifest+json"),
    ("/icon-192.png", include_bytes!("../../../web/icon-192.png"), "image/png"),
    ("/icon-512.png", include_bytes!("../../../web/icon-512.png"), "image/png"),
];

pub use crate::runtime::HubInfo;

mod attachments;
mod conn;
mod history;
pub mod hooks;
pub mod invites;
mod markdown;
mod settings;

use invites::Role;

/// Each credential's recent sends and uploads (`[hub] sends_per_minute`,
/// `uploads_per_minute`).
struct Rates {
    send: crate::notifier::Window,
    upload: crate::notifier::Window,
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
    fn chamber_for(&self, role: &Role, name: &str) -> Result<ChamberView, ApiError> {
        if !role.sees(name) {
            return Err(Error::NotFound(format!("no chamber named {name:?}")).into());
        }
        view(self, name)
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

/// A refusal: its status and one line of JSON.
fn refuse(status: StatusCode, why: &str) -> Response {
    (status, axum::Json(json!({ "error": why }))).into_response()
}

/// 429, with `Retry-After` in whole seconds (at least one).
fn too_many(why: &str, wait: std::time::Duration) -> Response {
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
    let t = crate::random::hex(32);
    crate::chamber::write_secret(&path, format!("{t}\n").as_bytes())?;
    Ok(t)
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
                         this run; set `[hub] bind = \"127.0.0.1:PORT\"` in cryod.toml for a fixed one"
                    ));
                    l
                }
                Err(e) => return refused(bind, e, token),
            }
        }
        Err(e) => return refused(bind, e, token),
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
fn refused(bind: &str, e: std::io::Error, token: String) -> HubInfo {
    let error = format!(
        "cannot listen on {bind}: {e} (another program holds it?): set `[hub] bind = \"127.0.0.1:PORT\"` in cryod.toml \
         and restart cryod"
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
    let c = &daemon.shared().config.hub;
    let rates = Rates {
        send: crate::notifier::Window::new(minute, c.sends_per_minute.max(1)),
        upload: crate::notifier::Window::new(minute, c.uploads_per_minute.max(1)),
    };
    let invites = invites::Invites::load(&daemon.shared().places.state_dir);
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
        .route("/chambers/{name}/todos/{id}/done", post(todo_done))
        .route("/chambers/{name}/todos/{id}", axum::routing::delete(todo_remove))
        .route("/chambers/{name}/plan", get(plan).put(plan_put))
        .route("/chambers/{name}/notes", get(notes))
        .route("/chambers/{name}/log", get(log))
        .route("/chambers/{name}/settings", get(settings::get).put(settings::put))
        .route("/chambers/{name}/transcript", get(transcript))
        .route("/chambers/{name}/history", get(history::chamber))
        .route("/schedule", get(history::fleet))
        .route(
            "/chambers/{name}/attachments",
            post(attachments::upload).layer(DefaultBodyLimit::max(attachments::MAX_UPLOAD + 1)),
        )
        .route("/chambers/{name}/attachments/{file}", get(attachments::fetch))
        .route("/chambers/{name}/{action}", post(control))
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
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .layer(middleware::from_fn_with_state(hub.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(hub)
}

/// `/mcp`: the operator's MCP tools (`crate::mcp`) over streamable HTTP,
/// for an assistant on another device. Stateless (each POST stands alone:
/// no session to keep or expire) with JSON answers; the hub's own guard
/// checks the Host and its `auth` the bearer token.
fn mcp_service(
    daemon: &Daemon,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    crate::mcp::OperatorTools,
    rmcp::transport::streamable_http_server::session::never::NeverSessionManager,
> {
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let backend = crate::mcp::Backend::Local(crate::rpc::control::ControlService { daemon: daemon.clone() });
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_BODY)
        .with_cancellation_token(daemon.shared().shutdown.child_token())
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || Ok(crate::mcp::OperatorTools::new(backend.clone(), false)),
        Default::default(),
        config,
    )
}

/// Serves `app` on `listener` until cryod shuts down.
fn serve(listener: tokio::net::TcpListener, app: Router, daemon: &Daemon, what: &'static str) {
    let shutdown = daemon.shared().shutdown.clone();
    tokio::spawn(async move {
        let served = axum::serve(conn::Capped::new(listener), app)
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
    let text = crate::convert::metrics(daemon);
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (text, kind) = if crate::metrics::wants_openmetrics(accept) {
        (text, crate::metrics::CONTENT_TYPE)
    } else {
        (crate::metrics::to_prometheus(&text), crate::metrics::PROMETHEUS_TYPE)
    };
    let mut r = text.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

/// Serves `GET /metrics` alone, without a token, on `bind` (a loopback
/// address: `[metrics] listen` in `cryod.toml`), until shutdown.
pub async fn serve_metrics(daemon: Daemon, bind: &str) -> Result<SocketAddr, String> {
    let listener =
        tokio::net::TcpListener::bind(bind).await.map_err(|e| format!("cannot listen on {bind} for metrics: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
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
        r = r.route(path, get(move || async move { page(body, kind) }));
    }
    r
}

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

/// Every request: the Host must be the hub itself; writes need the CSRF
/// header (or a same-origin fetch); responses never sniff or refer.
async fn guard(State(hub): State<Hub>, req: Request, next: Next) -> Response {
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
    let write = !matches!(*req.method(), Method::GET | Method::HEAD) && req.uri().path() != "/mcp";
    if write && !csrf_ok(req.headers()) {
        return (StatusCode::FORBIDDEN, "writes need the X-Cryo-Csrf header").into_response();
    }
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

fn csrf_ok(h: &HeaderMap) -> bool {
    h.get("x-cryo-csrf").is_some_and(|v| v == "1") || h.get("sec-fetch-site").is_some_and(|v| v == "same-origin")
}

/// API requests: the owner's bearer token or a guest's invite token, each
/// compared in constant time. A wrong or missing token gets 401 and nothing
/// else; a guest asking for more than conversations gets 403. The role goes
/// to the handlers, which keep a guest to its own chambers.
async fn auth(State(hub): State<Hub>, mut req: Request, next: Next) -> Response {
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
fn guest_may(method: &Method, path: &str) -> bool {
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An error as a status and one line of JSON.
struct ApiError(Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self.0 {
            Error::Invalid(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Precondition(_) => StatusCode::CONFLICT,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(m) => {
                tracing::error!(error = %m, "hub request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        (status, axum::Json(json!({ "error": self.0.to_string() }))).into_response()
    }
}

type ApiResult = Result<axum::Json<Value>, ApiError>;

fn view(hub: &Hub, name: &str) -> Result<ChamberView, ApiError> {
    Ok(hub.daemon.resolve(&ChamberRef::Name(name.to_string()))?)
}

fn chamber_value(v: &ChamberView) -> Value {
    j::chamber_json(&convert::chamber(v))
}

/// `GET /api/limits`: provider accounts held at their limit now
/// (`provider`, `until`, `waiting`).
async fn limits(State(hub): State<Hub>) -> ApiResult {
    let holds = convert::holds(&hub.daemon);
    let v = holds.iter().map(
        |h| json!({ "provider": h.provider, "until": h.until, "waiting": h.waiting, "default_hold": h.default_hold }),
    );
    Ok(axum::Json(Value::Array(v.collect())))
}

type Who = axum::Extension<Role>;

/// What a guest sees of a chamber: its name and whether it is busy, never
/// its folder, agent, log or attention lines.
fn guest_chamber_value(v: &ChamberView) -> Value {
    let c = chamber_value(v);
    json!({
        "name": c["name"], "state": c["state"], "next_wake": c["next_wake"],
        "open_questions": c["open_questions"], "mail_waiting": c["mail_waiting"],
    })
}

fn chamber_value_for(role: &Role, v: &ChamberView) -> Value {
    match role {
        Role::Owner => chamber_value(v),
        Role::Guest(_) => guest_chamber_value(v),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    /// Archived chambers too (`?archived=1`).
    #[serde(default)]
    archived: Option<String>,
}

async fn list(State(hub): State<Hub>, axum::Extension(role): Who, Query(q): Query<ListQuery>) -> ApiResult {
    let archived = q.archived.is_some_and(|a| !matches!(a.as_str(), "" | "0" | "false"));
    let list = hub.daemon.listed(archived);
    let seen = list.iter().filter(|v| role.sees(&v.record.name));
    Ok(axum::Json(Value::Array(seen.map(|v| chamber_value_for(&role, v)).collect())))
}

/// `GET /api/me`: the role of the token in use (`owner`, or `guest` with
/// its `name` and `chambers`).
async fn me(axum::Extension(role): Who) -> ApiResult {
    Ok(axum::Json(match role {
        Role::Owner => json!({ "role": "owner" }),
        Role::Guest(g) => json!({ "role": "guest", "name": g.name, "chambers": g.chambers }),
    }))
}

#[derive(Deserialize)]
struct NewInvite {
    name: String,
    chambers: Vec<String>,
}

/// `POST /api/invites` `{name, chambers}`: mints a guest's link, answering
/// `{name, token, link}` (the token is shown this once).
async fn invite_add(State(hub): State<Hub>, axum::Json(n): axum::Json<NewInvite>) -> ApiResult {
    let mut chambers = Vec::new();
    for c in &n.chambers {
        chambers.push(view(&hub, c)?.record.name);
    }
    chambers.dedup();
    let created = hub.daemon.shared().clock.now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let token = hub.invites.mint(n.name.trim(), chambers, created)?;
    let link = hub.daemon.shared().hub_link(&format!("#token={token}"));
    Ok(axum::Json(json!({ "name": n.name.trim(), "token": token, "link": link })))
}

/// `GET /api/invites`: each invite's name, chambers and when it was made.
async fn invite_list(State(hub): State<Hub>) -> ApiResult {
    let list = hub.invites.list();
    let v = list.iter().map(|i| json!({ "name": i.name, "chambers": i.chambers, "created": i.created }));
    Ok(axum::Json(Value::Array(v.collect())))
}

/// `DELETE /api/invites/NAME`: revokes it; its guest is cut off at once.
async fn invite_remove(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    hub.invites.revoke(&name)?;
    Ok(axum::Json(json!({ "revoked": name })))
}

#[derive(Deserialize)]
struct NewChamber {
    dir: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    start: bool,
}

async fn create(State(hub): State<Hub>, axum::Json(n): axum::Json<NewChamber>) -> ApiResult {
    let name = (!n.name.is_empty()).then_some(n.name.as_str());
    let agent = (!n.agent.is_empty()).then_some(n.agent.as_str());
    let added = hub.daemon.add(Path::new(&n.dir), name, true, agent, None).await?;
    let mut v = added.view;
    if n.start {
        v = hub.daemon.start(&ChamberRef::Name(v.record.name.clone()), false).await?.0;
    }
    Ok(axum::Json(json!({ "chamber": chamber_value(&v), "already_registered": added.already_registered })))
}

async fn chamber(State(hub): State<Hub>, axum::Extension(role): Who, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = hub.chamber_for(&role, &name)?;
    if let Role::Guest(_) = role {
        return Ok(axum::Json(json!({ "chamber": guest_chamber_value(&v), "sessions": [] })));
    }
    let sessions = hub.daemon.sessions(v.record.id, 10).await?;
    let sessions: Vec<Value> = sessions.iter().map(|s| j::session_json(&convert::session(s))).collect();
    Ok(axum::Json(json!({ "chamber": chamber_value(&v), "sessions": sessions })))
}

async fn remove(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = hub.daemon.remove(&ChamberRef::Name(name)).await?;
    Ok(axum::Json(chamber_value(&v)))
}

#[derive(Deserialize, Default)]
struct ControlBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    replace: bool,
    /// A reset's confirmation: the chamber's name.
    #[serde(default)]
    confirm: String,
}

async fn control(
    State(hub): State<Hub>,
    UrlPath((name, action)): UrlPath<(String, String)>,
    body: Option<axum::Json<ControlBody>>,
) -> ApiResult {
    let r = ChamberRef::Name(name);
    let body = body.map(|b| b.0).unwrap_or_default();
    let v = match action.as_str() {
        "start" => hub.daemon.start(&r, true).await?.0,
        "stop" => hub.daemon.stop(&r, true).await?.0,
        "pause" => hub.daemon.pause(&r, true).await?.0,
        "resume" => hub.daemon.pause(&r, false).await?.0,
        "archive" => hub.daemon.archive(&r, true).await?.0,
        "unarchive" => hub.daemon.archive(&r, false).await?.0,
        "reset" => {
            let v = hub.daemon.resolve(&r)?;
            if body.confirm != v.record.name {
                let why = format!(
                    "a reset moves the chamber's files into history/: confirm it with {{\"confirm\": {:?}}}",
                    v.record.name
                );
                return Err(Error::Invalid(why).into());
            }
            let (v, history) = hub.daemon.reset(&r).await?;
            let mut value = chamber_value(&v);
            value["history"] = history.into();
            return Ok(axum::Json(value));
        }
        "wake" => {
            let message = (!body.message.trim().is_empty()).then(|| body.message.clone());
            hub.daemon.wake(&r, message, body.replace).await?.0
        }
        other => {
            let actions = "start, stop, pause, resume, wake, archive, unarchive, reset";
            return Err(Error::NotFound(format!("no action {other:?} ({actions})")).into());
        }
    };
    Ok(axum::Json(chamber_value(&v)))
}

#[derive(Deserialize)]
struct Page {
    /// The `file` of the oldest message shown: the page before it.
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    /// The older name for `limit`.
    #[serde(default)]
    last: Option<usize>,
}

/// `GET /api/chambers/NAME/messages[?before=FILE][&limit=N]`: a page of the
/// conversation, oldest first, each message with its `html` (Markdown made
/// safe) beside its `body`. An empty page: nothing older.
async fn messages(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<Page>,
) -> ApiResult {
    let v = hub.chamber_for(&role, &name)?;
    let n = q.limit.or(q.last).unwrap_or(100).clamp(1, 1000);
    let page = hub.daemon.conversation_page(&v, q.before.as_deref(), n).await?;
    Ok(axum::Json(Value::Array(page.iter().map(message_value).collect())))
}

/// A message as `cryoctl --json` prints it, with its `html`.
fn message_value(m: &crate::chamber::mailbox::Stored) -> Value {
    let mut v = j::mail_json(&convert::mail(m));
    v["html"] = Value::String(markdown::to_html(&m.message.body));
    v
}

#[derive(Deserialize)]
struct SendBody {
    text: String,
    #[serde(default)]
    subject: String,
}

/// `POST /api/chambers/NAME/messages`: mail to the agent, from the
/// operator or, stamped with its name, from a guest.
async fn send(
    State(hub): State<Hub>,
    axum::Extension(role): Who,
    UrlPath(name): UrlPath<String>,
    axum::Json(b): axum::Json<SendBody>,
) -> Response {
    let v = match hub.chamber_for(&role, &name) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    if let Some(refused) = hub.over_rate(&role, false) {
        return refused;
    }
    let from = match &role {
        Role::Owner => "operator".to_string(),
        Role::Guest(g) => format!("{} (guest)", g.name),
    };
    match hub.daemon.send(&ChamberRef::Name(v.record.name), &from, &b.subject, &b.text).await {
        Ok(d) => axum::Json(json!({ "file": d.file, "waits": d.waits })).into_response(),
        Err(e) => ApiError(e).into_response(),
    }
}

fn todos_value(reply: crate::supervisor::AgentReply) -> ApiResult {
    let list = convert::todos_reply(reply).map_err(|s| ApiError(Error::Internal(s.message().to_string())))?;
    Ok(axum::Json(Value::Array(list.todos.iter().map(j::todo_json).collect())))
}

async fn todos(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), TodoCall::List).await?)
}

#[derive(Deserialize)]
struct PushBody {
    endpoint: String,
    keys: crate::notifier::webpush::Keys,
    #[serde(default)]
    name: String,
}

/// `GET /api/push`: the VAPID key (the page's `applicationServerKey`) and
/// the devices subscribed (their names and push services, never their keys).
async fn push_list(State(hub): State<Hub>) -> ApiResult {
    let notifiers = &hub.daemon.shared().notifiers;
    let key = notifiers.push_key().map_err(Error::Internal)?;
    let subs: Vec<Value> = notifiers
        .devices()
        .iter()
        .map(|s| {
            let service =
                reqwest::Url::parse(&s.endpoint).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
            json!({ "name": s.name, "service": service, "endpoint": s.endpoint })
        })
        .collect();
    Ok(axum::Json(json!({ "key": key, "subscriptions": subs })))
}

/// `POST /api/push`: subscribes a device (replacing one with the same endpoint).
async fn push_add(State(hub): State<Hub>, axum::Json(b): axum::Json<PushBody>) -> ApiResult {
    let sub = crate::notifier::webpush::Subscription { endpoint: b.endpoint, keys: b.keys, name: b.name };
    let n = hub.daemon.shared().notifiers.subscribe(sub).map_err(Error::Invalid)?;
    Ok(axum::Json(json!({ "subscriptions": n })))
}

#[derive(Deserialize)]
struct PushRemove {
    endpoint: String,
}

/// `DELETE /api/push`: forgets a device.
async fn push_remove(State(hub): State<Hub>, axum::Json(b): axum::Json<PushRemove>) -> ApiResult {
    match hub.daemon.shared().notifiers.unsubscribe(&[b.endpoint]).map_err(Error::Internal)? {
        Some(n) => Ok(axum::Json(json!({ "subscriptions": n }))),
        None => Err(Error::NotFound("no device with that endpoint".into()).into()),
    }
}

#[derive(Deserialize)]
struct TodoBody {
    text: String,
    #[serde(default)]
    at: String,
    #[serde(default)]
    every: String,
    #[serde(default)]
    cron: String,
    #[serde(default)]
    precheck: String,
}

async fn todo_add(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    axum::Json(b): axum::Json<TodoBody>,
) -> ApiResult {
    let call = TodoCall::Add {
        text: b.text,
        at: b.at,
        every: b.every,
        cron: b.cron,
        missed: String::new(),
        precheck: b.precheck,
    };
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), call).await?)
}

async fn todo_done(State(hub): State<Hub>, UrlPath((name, id)): UrlPath<(String, u64)>) -> ApiResult {
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), TodoCall::Done(id)).await?)
}

async fn todo_remove(State(hub): State<Hub>, UrlPath((name, id)): UrlPath<(String, u64)>) -> ApiResult {
    todos_value(hub.daemon.todo(&ChamberRef::Name(name), TodoCall::Remove(id)).await?)
}

async fn plan(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = view(&hub, &name)?;
    Ok(axum::Json(json!({ "text": hub.daemon.read_chamber_file(&v, "plan.md").await? })))
}

#[derive(Deserialize)]
struct PlanBody {
    text: String,
}

async fn plan_put(
    State(hub): State<Hub>,
    UrlPath(name): UrlPath<String>,
    axum::Json(b): axum::Json<PlanBody>,
) -> ApiResult {
    let v = view(&hub, &name)?;
    hub.daemon.write_plan(&v, &b.text).await?;
    Ok(axum::Json(json!({ "saved": true })))
}

async fn notes(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let v = view(&hub, &name)?;
    Ok(axum::Json(json!({ "text": hub.daemon.read_chamber_file(&v, "NOTES.md").await? })))
}

#[derive(Deserialize)]
struct LogQuery {
    #[serde(default)]
    agent: bool,
    #[serde(default)]
    lines: Option<usize>,
}

async fn log(State(hub): State<Hub>, UrlPath(name): UrlPath<String>, Query(q): Query<LogQuery>) -> ApiResult {
    let v = view(&hub, &name)?;
    let rel = if q.agent { crate::agent::launch::AGENT_LOG } else { crate::chamber::log::LOG };
    let root = std::path::PathBuf::from(&v.record.path);
    let n = q.lines.unwrap_or(200).min(5000);
    let (lines, _) =
        crate::chamber::blocking(move || crate::chamber::log::tail(&root, rel, n)).await?.unwrap_or_default();
    Ok(axum::Json(json!({ "lines": lines })))
}

/// One SSE stream of everything: `status` (a chamber changed), `message`,
/// `log` (a cryo.log line), `index` (chambers added or removed) and `resync`
/// (this client fell behind: re-read everything). It ends on shutdown.
async fn events(State(hub): State<Hub>, axum::Extension(role): Who) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(256);
    let daemon = hub.daemon.clone();
    let shared = daemon.shared().clone();
    let mut notices = shared.notices.subscribe();
    let mut revoked = hub.invites.watch();
    tokio::spawn(async move {
        let _ = tx.send(": cryo hub events\n\n".to_string()).await;
        loop {
            let n = tokio::select! {
                _ = shared.shutdown.cancelled() => return,
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
    sse(conn::with_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

fn sse(body: Body) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /api/chambers/NAME/transcript`: the agent's transcript
/// (`cryo-agent.log`) as an event stream: its last lines, then each line as
/// the agent writes it (`event: lines`, `{lines}`), until the page goes.
async fn transcript(State(hub): State<Hub>, UrlPath(name): UrlPath<String>) -> Response {
    use tokio_stream::StreamExt;
    let v = match view(&hub, &name) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let frames = crate::rpc::follow::log(&hub.daemon, v, true, true, 200).map(|r| match r {
        Ok(l) => format!("event: lines\ndata: {}\n\n", json!({ "lines": l.lines })),
        Err(s) => format!("event: error\ndata: {}\n\n", json!({ "error": s.message() })),
    });
    sse(conn::with_keep_alive(frames))
}

fn sse_frame(daemon: &Daemon, role: &Role, n: crate::runtime::Notice) -> Option<String> {
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
        NoticeKind::Removed => ("index", json!({})),
    };
    Some(format!("event: {event}\ndata: {data}\n\n"))
}
