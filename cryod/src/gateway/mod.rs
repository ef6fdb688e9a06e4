//! The provider gateway: the one place a known kind's agent reaches its
//! model provider through, so that the agent never holds the key, every
//! token is counted where it is spent, and the provider's limits are read
//! from its own headers.
//!
//! cryod listens on a loopback port. Each session through the gateway gets
//! a [`Ticket`]: a base URL holding a credential of 256 random bits
//! (`http://127.0.0.1:PORT/cryo/TOKEN`), worth nothing once the session's
//! agent exits (the ticket is dropped then). The agent's CLI is pointed at
//! that base, with the token where its key would be (see
//! `agent::kinds::gateway`); the gateway forwards each model call to the
//! session's upstream with the real credential, and reads what passes:
//! - the usage each response reports ([`wire::Meter`]), summed per session
//!   and priced with cryod's table, so budgets and `max_session_usd` hold
//!   on every request: once the session's line is reached, requests are
//!   refused with an API error and the session ends `over budget`;
//! - the rate-limit headers ([`wire::pressure`]): a 429 holds the account
//!   until the reset the provider gave (a long one ends the session, as a
//!   limit the CLI reports does); capacity near zero holds new wakes.
//!
//! Only the calls the known CLIs make are forwarded ([`wire::allowed`]):
//! the real key reaches no other endpoint. Nothing here logs a request's
//! path (it holds the token), a header or a body.

pub mod kept;
mod redact;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::agent_events::{Limited, Prices, Usage};
pub use wire::Api;

/// The largest request body forwarded (a prompt with images is large; a
/// hostile agent's flood is not read past this).
const MAX_REQUEST: usize = 64 * 1024 * 1024;

/// A refusal waited out longer than this ends the session (the CLIs give
/// up on long waits, see `notes/agent-clis.md`); a shorter one is the
/// CLI's to wait out, and only holds new wakes of the account.
pub const IN_SESSION_WAIT: Duration = Duration::from_secs(60);

/// How long the gateway waits for an upstream to answer (headers); a
/// stream then runs as long as the session does.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once (every session's CLI keeps a few), and how
/// long one may say nothing: a model may think for minutes before a
/// whole (not streamed) answer.
const MAX_CONNECTIONS: usize = 512;
const IDLE: Duration = Duration::from_secs(600);

/// The path prefix of every session's base URL.
const PREFIX: &str = "/cryo/";

/// cryod's provider gateway (cheap to clone: one registry).
#[derive(Clone)]
pub struct Gateway(Arc<Inner>);

struct Inner {
    routes: Mutex<HashMap<String, Arc<Route>>>,
    client: reqwest::Client,
    /// Where it listens, once it does.
    addr: OnceLock<SocketAddr>,
    /// Its Unix socket, once it listens there too.
    unix: OnceLock<std::path::PathBuf>,
    clock: crate::clock::Clock,
}

/// The credential the upstream gets.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `x-api-key` (Anthropic's API keys).
    ApiKey(String),
    /// `Authorization: Bearer` (OpenAI's keys, Anthropic's auth tokens).
    Bearer(String),
    /// `x-goog-api-key` (Google's Gemini API keys).
    GoogKey(String),
}

impl Auth {
    /// The key itself.
    pub fn secret(&self) -> &str {
        match self {
            Auth::ApiKey(k) | Auth::Bearer(k) | Auth::GoogKey(k) => k,
        }
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::ApiKey(_) => "ApiKey(…)",
            Auth::Bearer(_) => "Bearer(…)",
            Auth::GoogKey(_) => "GoogKey(…)",
        })
    }
}

/// Whom a session's findings are told.
#[derive(Clone)]
pub struct Tell {
    /// A refusal too long to wait out in the session: it ends, the account
    /// is held (`Limited::retry_after_ms` is the provider's wait).
    pub limit: Arc<dyn Fn(Limited) + Send + Sync>,
    /// Hold new wakes of the account this long, for this reason.
    pub hold: Arc<dyn Fn(Duration, String) + Send + Sync>,
    /// The session reached its line: it ends over budget.
    pub over: Arc<dyn Fn() + Send + Sync>,
    /// A sign of the session's life: a request came, a response's bytes
    /// passed (its stall clock starts again).
    pub alive: Arc<dyn Fn() + Send + Sync>,
    /// A request the provider answered (2xx), by its fingerprint (method,
    /// path, body): the same one answered again and again, with nothing
    /// new in it, is a loop whatever the CLI prints. (A retry after a
    /// refusal or an error is not an answered repeat.)
    pub answered: Arc<dyn Fn(u64) + Send + Sync>,
}

/// What a session asks of the gateway.
pub struct Spec {
    pub chamber: String,
    /// The provider account it bills (for `/metrics`).
    pub account: String,
    pub session: u64,
    /// The upstream's base (`https://api.anthropic.com`,
    /// `https://api.openai.com/v1`); a request's path below the session's
    /// base goes below it.
    pub upstream: String,
    pub auth: Auth,
    /// What the session may spend in all (USD): the lowest of
    /// `max_session_usd` and what is left of each budget when it starts.
    pub line: Option<f64>,
    pub prices: Arc<Prices>,
    pub tell: Tell,
    /// The wake's trace: each request forwarded is a span of it.
    pub trace: Option<Arc<crate::otlp::Trace>>,
    /// Where its exchanges are kept, redacted (`keep_exchanges`).
    pub kept: Option<kept::Kept>,
}

/// One session's way through the gateway.
pub struct Route {
    spec: Spec,
    used: Mutex<Used>,
    told_over: AtomicBool,
}

/// What a session's requests used, as the provider reported it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Used {
    pub requests: u64,
    /// Tokens of every response, the last model named, and the cost of
    /// those whose model has a price.
    pub usage: Usage,
    /// Requests refused by the gateway itself (over the line).
    pub refused: u64,
    /// The provider's answer to the last request was a refusal (429), with
    /// the wait it asked for: an agent that ends now gave up on a limit.
    pub last_refusal: Option<Duration>,
}

impl Route {
    /// What the session used so far.
    pub fn used(&self) -> Used {
        self.used.lock().expect("gateway lock").clone()
    }

    fn over_line(&self) -> bool {
        let Some(line) = self.spec.line else { return false };
        self.used.lock().expect("gateway lock").usage.cost_usd.is_some_and(|c| c >= line)
    }

    fn tell_over(&self) {
        if !self.told_over.swap(true, Ordering::SeqCst) {
            (self.spec.tell.over)();
        }
    }

    /// One response's usage, added to the session's.
    fn count(&self, c: &wire::Counted) {
        let mut used = self.used.lock().expect("gateway lock");
        used.requests += 1;
        if c.is_empty() && c.model.is_none() {
            return;
        }
        let u = &mut used.usage;
        if c.model.is_some() {
            u.model = c.model.clone();
        }
        u.input_tokens += c.input;
        u.output_tokens += c.output;
        u.cached_tokens += c.cached;
        u.cache_write_tokens += c.written;
        let one = Usage {
            model: c.model.clone(),
            input_tokens: c.input,
            output_tokens: c.output,
            cached_tokens: c.cached,
            cache_write_tokens: c.written,
            ..Usage::default()
        };
        let cost = self.spec.prices.cost(&one);
        if let Some(cost) = cost {
            u.cost_usd = Some(u.cost_usd.unwrap_or(0.0) + cost);
        }
        let model = c.model.as_deref().unwrap_or("unknown");
        let tokens = [c.input, c.output, c.cached];
        crate::metrics::get().model_response(&self.spec.chamber, &self.spec.account, model, tokens, cost);
        let over = self.spec.line.is_some_and(|line| u.cost_usd.is_some_and(|c| c >= line));
        drop(used);
        if over {
            self.tell_over();
        }
    }

    /// What a response's headers said of the account.
    fn pressure(&self, p: wire::Pressure) {
        tracing::info!(chamber = %self.spec.chamber, session = self.spec.session, wait = ?p.wait, source = %p.source,
            "provider limit seen by the gateway");
        (self.spec.tell.hold)(p.wait, p.source.clone());
        if p.refused {
            self.used.lock().expect("gateway lock").last_refusal = Some(p.wait);
        }
        if p.refused && p.wait > IN_SESSION_WAIT {
            (self.spec.tell.limit)(Limited {
                resets_at: None,
                retry_after_ms: Some(p.wait.as_millis() as u64),
                text: p.source,
                exact: true,
            });
        }
    }
}

/// A session's credential at the gateway: valid while this lives.
pub struct Ticket {
    gateway: Gateway,
    addr: SocketAddr,
    token: String,
    route: Arc<Route>,
}

impl Ticket {
    /// The base URL the agent's CLI is given.
    pub fn base(&self) -> String {
        format!("http://{}{PREFIX}{}", self.addr, self.token)
    }

    /// The credential the agent's CLI is given where its key would be.
    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn route(&self) -> Arc<Route> {
        self.route.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gateway.0.routes.lock().expect("gateway lock").remove(&self.token);
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticket")
    }
}

impl Gateway {
    pub fn new(clock: crate::clock::Clock) -> Gateway {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            // A redirect would carry the key elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with rustls");
        Gateway(Arc::new(Inner {
            routes: Mutex::default(),
            client,
            addr: OnceLock::new(),
            unix: OnceLock::new(),
            clock,
        }))
    }

    /// Listens on `bind` (a loopback address; port 0 picks one) and serves
    /// until `shutdown`.
    pub async fn serve(
        &self,
        bind: SocketAddr,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(bind).await?;
        self.serve_on(crate::conn::Capped::with(listener, MAX_CONNECTIONS, IDLE), shutdown)
    }

    /// Serves on `listener` (bounded: a flood of connections from an agent
    /// must not take cryod's file descriptors).
    fn serve_on(
        &self,
        listener: crate::conn::Capped,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<SocketAddr> {
        let addr = axum::serve::Listener::local_addr(&listener)?;
        let _ = self.0.addr.set(addr);
        let app = axum::Router::new().fallback(handle).with_state(self.0.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        });
        Ok(addr)
    }

    /// Where it listens, once it does.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.0.addr.get().copied()
    }

    /// Listens on the Unix socket `path` too (0600), relaying each
    /// connection to its own port: the way out of a session's network
    /// namespace (`agent::forward`). Bounded as the port is; past
    /// 512 relays at once (`MAX_CONNECTIONS`), a new one is closed.
    pub fn serve_unix(
        &self,
        path: &std::path::Path,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let addr = self.addr().ok_or_else(|| std::io::Error::other("the gateway's port is not open"))?;
        // A stale one of an earlier run (cryod holds its instance lock).
        let _ = std::fs::remove_file(path);
        let listener = std::os::unix::net::UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let _ = self.0.unix.set(path.to_path_buf());
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let path = path.to_path_buf();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    a = listener.accept() => a,
                };
                let Ok((mut unix, _)) = accepted else {
                    // Out of descriptors, say: not a spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
                tokio::spawn(async move {
                    let _slot = slot;
                    if let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await {
                        let _ = tcp.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
                    }
                });
            }
            let _ = std::fs::remove_file(&path);
        });
        Ok(())
    }

    /// Its Unix socket, once it listens there.
    pub fn unix_path(&self) -> Option<std::path::PathBuf> {
        self.0.unix.get().cloned()
    }

    /// A ticket for one session; `None` while the gateway does not listen.
    pub fn open(&self, spec: Spec) -> Option<Ticket> {
        let addr = self.addr()?;
        let token = format!("cryo-gw-{}", crate::random::hex(32));
        let route = Arc::new(Route { spec, used: Mutex::default(), told_over: AtomicBool::new(false) });
        self.0.routes.lock().expect("gateway lock").insert(token.clone(), route.clone());
        Some(Ticket { gateway: self.clone(), addr, token, route })
    }

    /// Sessions with a live ticket.
    pub fn open_tickets(&self) -> usize {
        self.0.routes.lock().expect("gateway lock").len()
    }
}

/// An error in the API's own shape (the CLI shows it as an API error).
fn refuse(status: StatusCode, api: Option<Api>, kind: &str, message: &str) -> Response {
    (status, axum::Json(Api::error(api, kind, message))).into_response()
}

/// Headers a hop does not pass on, those the gateway sets itself, and
/// those that would tell the upstream (or a proxy before it) another host
/// or client than the gateway's: `X-Forwarded-*`, `Forwarded`, `Via`.
fn own_request_header(name: &HeaderName) -> bool {
    let n = name.as_str();
    n.starts_with("x-forwarded-")
        || matches!(n, "forwarded" | "via" | "x-real-ip" | "x-client-ip" | "true-client-ip" | "cookie")
        || matches!(
            n,
            "host"
                | "authorization"
                | "x-api-key"
                | "x-goog-api-key"
                | "content-length"
                | "accept-encoding"
                | "connection"
                | "keep-alive"
                | "proxy-authorization"
                | "proxy-connection"
                | "te"
                | "trailer"
                | "transfer-encoding"
                | "upgrade"
        )
}

fn hop_response_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "content-length" | "connection" | "keep-alive" | "transfer-encoding" | "trailer" | "upgrade"
    )
}

async fn handle(
    axum::extract::State(inner): axum::extract::State<Arc<Inner>>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    let (token, below) = path
        .strip_prefix(PREFIX)
        .map(|rest| rest.split_once('/').map(|(t, p)| (t, format!("/{p}"))).unwrap_or((rest, "/".to_string())))
        .unwrap_or(("", String::new()));
    let api = Api::of(&below);
    let route = inner.routes.lock().expect("gateway lock").get(token).cloned();
    let Some(route) = route else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            api,
            "authentication_error",
            "cryo's gateway: this credential belongs to no running session",
        );
    };
    if !wire::allowed(parts.method.as_str(), &below) {
        return refuse(
            StatusCode::FORBIDDEN,
            api,
            "permission_error",
            &format!("cryo's gateway forwards model calls only, not {} {below}", parts.method),
        );
    }
    if route.over_line() {
        route.used.lock().expect("gateway lock").refused += 1;
        route.tell_over();
        return refuse(
            StatusCode::PAYMENT_REQUIRED,
            api,
            "budget_exceeded",
            &format!(
                "cryo: this session reached its spending line (${:.4}); the request was not sent",
                route.spec.line.unwrap_or(0.0)
            ),
        );
    }
    let body = match axum::body::to_bytes(body, MAX_REQUEST).await {
        Ok(b) => b,
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                api,
                "request_too_large",
                &format!("cryo's gateway: a request body over {MAX_REQUEST} bytes is not forwarded"),
            );
        }
    };
    // A sign of the session's life: a request the provider will see (not
    // a refused one, which any loop could send for nothing).
    (route.spec.tell.alive)();
    let fingerprint = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (parts.method.as_str(), &below, &body[..]).hash(&mut h);
        h.finish()
    };
    let sent_at = route.spec.trace.as_ref().map(|t| (t.now(), wire::requested_model(api, &below, &body)));
    // Usage asked for, when a streamed chat did not: its event is then held
    // back from the client, which sees the stream it asked for.
    let asked = wire::ask_usage(api, &body);
    let unasked = asked.is_some().then(wire::Unasked::default);
    let body = asked.map(axum::body::Bytes::from).unwrap_or(body);
    let exchange = route.spec.kept.as_ref().map(|_| {
        let x = kept::Exchange::new(inner.clock.now(), parts.method.as_str(), &below, &parts.headers, &body);
        (x, token.to_string())
    });
    let mut url = format!("{}{below}", route.spec.upstream.trim_end_matches('/'));
    if let Some(q) = parts.uri.query() {
        url.push('?');
        url.push_str(q);
    }
    let mut up = inner.client.request(parts.method.clone(), url);
    // What `Connection` names is this hop's too (RFC 9110, 7.6.1).
    let named: Vec<String> = parts
        .headers
        .get_all("connection")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|n| n.trim().to_ascii_lowercase()))
        .collect();
    for (name, value) in &parts.headers {
        if !own_request_header(name) && !named.iter().any(|n| n == name.as_str()) {
            up = up.header(name, value);
        }
    }
    up = match &route.spec.auth {
        Auth::ApiKey(k) => up.header("x-api-key", k),
        Auth::Bearer(k) => up.bearer_auth(k),
        Auth::GoogKey(k) => up.header("x-goog-api-key", k),
    };
    // The body is read as it passes: no compression.
    let up = up.header("accept-encoding", "identity").body(body);
    let resp = match up.send().await {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "could not connect"
            } else {
                "failed"
            };
            tracing::warn!(chamber = %route.spec.chamber, upstream = %route.spec.upstream, error = %e.without_url(), "gateway: the upstream {why}");
            return refuse(
                StatusCode::BAD_GATEWAY,
                api,
                "api_error",
                &format!("cryo's gateway: the request to {} {why}", route.spec.upstream),
            );
        }
    };
    let status = resp.status();
    if status.is_success() {
        route.used.lock().expect("gateway lock").last_refusal = None;
        (route.spec.tell.answered)(fingerprint);
    }
    let now = inner.clock.now();
    let now_unix = now.timestamp() as f64 + f64::from(now.timestamp_subsec_millis()) / 1000.0;
    let headers = resp.headers().clone();
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(p) = wire::pressure(status.as_u16(), get, now_unix) {
        route.pressure(p);
    } else if status == StatusCode::TOO_MANY_REQUESTS {
        // A refusal without a word of when: the supervisor's default hold.
        (route.spec.tell.limit)(Limited {
            text: "the provider refused (429) and named no reset".into(),
            ..Limited::default()
        });
    }
    let streamed =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/event-stream"));
    let meter = api.filter(|_| status.is_success()).map(|a| wire::Meter::new(a, streamed));
    let mut out = Response::builder().status(status);
    let secret = route.spec.auth.secret().to_string();
    if let Some(h) = out.headers_mut() {
        copy_response_headers(&headers, h, &secret);
    }
    let span = sent_at.map(|(start, model)| RequestSpan { start, api, status: status.as_u16(), model });
    let exchange = exchange.map(|(mut x, token)| {
        x.answered(status.as_u16());
        (x, token)
    });
    let redact = redact::Redact::new(&secret);
    let metered = Metered {
        inner: Box::pin(resp.bytes_stream()),
        meter,
        route: Some(route),
        span,
        exchange,
        redact,
        unasked,
        ended: false,
    };
    out.body(Body::from_stream(metered)).unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// The upstream's headers, but this hop's own, with the real key taken
/// out of any that echoes it.
fn copy_response_headers(from: &HeaderMap, to: &mut HeaderMap, secret: &str) {
    for (name, value) in from {
        if hop_response_header(name) {
            continue;
        }
        let echoes = !secret.is_empty() && value.as_bytes().windows(secret.len()).any(|w| w == secret.as_bytes());
        if echoes {
            let text = String::from_utf8_lossy(value.as_bytes()).replace(secret, redact::REDACTED);
            if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
                to.append(name.clone(), v);
            }
        } else {
            to.append(name.clone(), value.clone());
        }
    }
}

type ByteStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>;

/// A response body on its way to the agent, read by its meter; what it
/// said is counted when it ends, or when the agent stops reading.
struct Metered {
    inner: ByteStream,
    meter: Option<wire::Meter>,
    route: Option<Arc<Route>>,
    span: Option<RequestSpan>,
    /// The exchange being kept, and the session's token (redacted in it).
    exchange: Option<(kept::Exchange, String)>,
    /// The real key, taken out of what the upstream sends back.
    redact: redact::Redact,
    /// Usage the gateway asked for and the client did not, held back.
    unasked: Option<wire::Unasked>,
    /// The upstream's body has ended (what `redact` held back is sent).
    ended: bool,
}

/// What the request's span says besides what its response counted.
struct RequestSpan {
    /// When the request went upstream.
    start: chrono::DateTime<chrono::Utc>,
    api: Option<Api>,
    status: u16,
    /// The model the request asked for.
    model: Option<String>,
}

impl Metered {
    fn settle(&mut self) {
        if let Some(route) = self.route.take() {
            let counted = self.meter.as_mut().map(|m| m.finish().clone()).unwrap_or_default();
            route.count(&counted);
            if let (Some(trace), Some(s)) = (&route.spec.trace, self.span.take()) {
                request_span(trace, &route.spec, s, &counted);
            }
            if let (Some(to), Some((x, token))) = (&route.spec.kept, self.exchange.take()) {
                let key = route.spec.auth.secret().to_string();
                to.write(x, vec![key, token]);
            }
        }
    }
}

/// A model request forwarded, as a `chat` span of the wake's trace (the
/// GenAI semantic conventions' attributes: the provider, the models asked
/// for and answered, the tokens, the server, and `error.type` for a failed
/// request; nothing of its body).
fn request_span(trace: &crate::otlp::Trace, spec: &Spec, s: RequestSpan, c: &wire::Counted) {
    use crate::otlp::Value;
    let provider = match s.api {
        Some(Api::Messages) => "anthropic",
        Some(Api::Gemini) => "gcp.gemini",
        Some(_) => "openai",
        None => "unknown",
    };
    // The upstream as a URL parser reads it (IPv6, userinfo, default ports).
    let url = reqwest::Url::parse(&spec.upstream).ok();
    let host = url.as_ref().and_then(|u| u.host_str()).unwrap_or("").to_string();
    let port = url.as_ref().and_then(|u| u.port_or_known_default()).map_or(0, u64::from);
    let mut attributes: Vec<(&'static str, Value)> = vec![
        ("gen_ai.operation.name", "chat".into()),
        ("gen_ai.provider.name", provider.into()),
        ("gen_ai.usage.input_tokens", c.input.into()),
        ("gen_ai.usage.output_tokens", c.output.into()),
        ("http.response.status_code", u64::from(s.status).into()),
        ("server.address", host.into()),
        ("server.port", port.into()),
    ];
    if let Some(m) = &s.model {
        attributes.push(("gen_ai.request.model", m.clone().into()));
    }
    if let Some(m) = &c.model {
        attributes.push(("gen_ai.response.model", m.clone().into()));
    }
    if s.status >= 400 {
        // The conventions' error.type for an HTTP failure: its status code.
        attributes.push(("error.type", s.status.to_string().into()));
    }
    let model = s.model.as_deref().or(c.model.as_deref()).unwrap_or(provider);
    let name = format!("chat {model}");
    let error = (s.status >= 400).then(|| format!("the provider answered {}", s.status));
    trace.child(name, crate::otlp::Kind::Client, (s.start, trace.now()), attributes, error);
}

impl futures_util::Stream for Metered {
    type Item = reqwest::Result<axum::body::Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(m) = self.meter.as_mut() {
                    m.feed(&chunk);
                }
                if let Some((x, _)) = self.exchange.as_mut() {
                    x.feed(&chunk);
                }
                if let Some(route) = &self.route {
                    (route.spec.tell.alive)();
                }
                let passed = match self.unasked.as_mut() {
                    Some(u) => u.feed(&chunk),
                    None => chunk.to_vec(),
                };
                Poll::Ready(Some(Ok(self.redact.feed(&passed).into())))
            }
            Poll::Ready(other) => {
                self.settle();
                self.ended = true;
                match other {
                    Some(Err(e)) => Poll::Ready(Some(Err(e))),
                    _ => {
                        let held = self.unasked.as_mut().map(wire::Unasked::finish).unwrap_or_default();
                        let mut rest = self.redact.feed(&held);
                        rest.extend(self.redact.finish());
                        Poll::Ready((!rest.is_empty()).then(|| Ok(rest.into())))
                    }
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.settle();
    }
}

#[cfg(test)]
mod tests;
