//! One model call forwarded: the request checked and sent upstream with
//! the real credential, and the answer streamed back to the agent,
//! metered, redacted and kept as it passes.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

use super::route::{Route, Spec};
use super::{Inner, PREFIX, kept, redact, wire};
use cryo_session::{Auth, Limited};
use wire::Api;

/// The largest request body forwarded (a prompt with images is large; a
/// hostile agent's flood is not read past this).
pub(super) const MAX_REQUEST: usize = 64 * 1024 * 1024;

/// Serves one request of a session's agent: admitted, sent upstream, and
/// its answer streamed back through the meter.
pub(super) async fn handle(
    axum::extract::State(inner): axum::extract::State<Arc<Inner>>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let (token, below) = session_path(parts.uri.path());
    let api = Api::of(&below);
    let route = match admit(&inner, &parts.method, token, &below) {
        Ok(route) => route,
        Err((status, kind, message)) => return refuse(status, api, kind, &message),
    };
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
    let fingerprint = fingerprint(parts.method.as_str(), &below, &body);
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
    let up = upstream_request(&inner.client, &route, &parts, &below, body);
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
    let headers = resp.headers().clone();
    heed_limits(&route, status, &headers, inner.clock.now());
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

/// A path's session token and the path below the session's base
/// (`/cryo/TOKEN/v1/messages`: `TOKEN` and `/v1/messages`); an empty
/// token for a path outside every session's base.
fn session_path(path: &str) -> (&str, String) {
    path.strip_prefix(PREFIX)
        .map(|rest| rest.split_once('/').map(|(t, p)| (t, format!("/{p}"))).unwrap_or((rest, "/".to_string())))
        .unwrap_or(("", String::new()))
}

/// The session `token` names, if its request may be forwarded: a live
/// ticket's, to a model call, under the session's spending line. Else
/// why not: the status, the error's kind and its message.
fn admit(
    inner: &Inner,
    method: &axum::http::Method,
    token: &str,
    below: &str,
) -> Result<Arc<Route>, (StatusCode, &'static str, String)> {
    let route = inner.routes.lock().expect("gateway lock").get(token).cloned();
    let Some(route) = route else {
        return Err((
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "cryo's gateway: this credential belongs to no running session".into(),
        ));
    };
    if !wire::allowed(method.as_str(), below) {
        return Err((
            StatusCode::FORBIDDEN,
            "permission_error",
            format!("cryo's gateway forwards model calls only, not {method} {below}"),
        ));
    }
    if route.over_line() {
        route.used.lock().expect("gateway lock").refused += 1;
        route.tell_over();
        return Err((
            StatusCode::PAYMENT_REQUIRED,
            "budget_exceeded",
            format!(
                "cryo: this session reached its spending line (${:.4}); the request was not sent",
                route.spec.line.unwrap_or(0.0)
            ),
        ));
    }
    Ok(route)
}

/// A request by what it asks (method, path, body): the same one answered
/// again and again is a loop ([`super::Tell::answered`]).
fn fingerprint(method: &str, below: &str, body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (method, below, body).hash(&mut h);
    h.finish()
}

/// The request to the session's upstream: the agent's query, the headers
/// that are not this hop's, and the real credential.
fn upstream_request(
    client: &reqwest::Client,
    route: &Route,
    parts: &axum::http::request::Parts,
    below: &str,
    body: axum::body::Bytes,
) -> reqwest::RequestBuilder {
    let mut url = format!("{}{below}", route.spec.upstream.trim_end_matches('/'));
    if let Some(q) = parts.uri.query() {
        url.push('?');
        url.push_str(q);
    }
    let mut up = client.request(parts.method.clone(), url);
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
    up.header("accept-encoding", "identity").body(body)
}

/// What the response's rate-limit headers said of the account, told on.
fn heed_limits(route: &Route, status: StatusCode, headers: &HeaderMap, now: chrono::DateTime<chrono::Utc>) {
    let now_unix = now.timestamp() as f64 + f64::from(now.timestamp_subsec_millis()) / 1000.0;
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
fn request_span(trace: &crate::base::otlp::Trace, spec: &Spec, s: RequestSpan, c: &wire::Counted) {
    use crate::base::otlp::Value;
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
    trace.child(name, crate::base::otlp::Kind::Client, (s.start, trace.now()), attributes, error);
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
