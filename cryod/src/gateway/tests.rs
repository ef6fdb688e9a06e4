//! The gateway against a small upstream on a loopback port: what it
//! forwards, what it refuses, and what it counts.

use super::forward::MAX_REQUEST;
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;

use cryo_session::{Auth, Limited, Prices};

/// An upstream that answers every call with a streamed Messages answer
/// (10 in, 5 out) and remembers the headers it got.
struct Upstream {
    url: String,
    seen: Arc<Mutex<Vec<(String, HeaderMap)>>>,
}

async fn upstream(status: u16, extra: &'static [(&'static str, &'static str)]) -> Upstream {
    let seen: Arc<Mutex<Vec<(String, HeaderMap)>>> = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let kept = kept.clone();
        async move {
            kept.lock().unwrap().push((req.uri().to_string(), req.headers().clone()));
            let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m1\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n\
                        event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n";
            let mut r = Response::builder().status(status).header("content-type", "text/event-stream");
            for (k, v) in extra {
                r = r.header(*k, *v);
            }
            r.body(Body::from(body)).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { url, seen }
}

struct Told {
    limits: Arc<Mutex<Vec<Limited>>>,
    holds: Arc<Mutex<Vec<(Duration, String)>>>,
    over: Arc<AtomicUsize>,
}

fn tell() -> (Tell, Told) {
    let told = Told { limits: Arc::default(), holds: Arc::default(), over: Arc::default() };
    let (l, h, o) = (told.limits.clone(), told.holds.clone(), told.over.clone());
    let tell = Tell {
        limit: Arc::new(move |x| l.lock().unwrap().push(x)),
        hold: Arc::new(move |d, s| h.lock().unwrap().push((d, s))),
        over: Arc::new(move || {
            o.fetch_add(1, Ordering::SeqCst);
        }),
        alive: Arc::new(|| {}),
        answered: Arc::new(|_| {}),
    };
    (tell, told)
}

async fn gateway() -> Gateway {
    let g = Gateway::new(crate::base::clock::Clock::system());
    g.serve(SocketAddr::from(([127, 0, 0, 1], 0)), tokio_util::sync::CancellationToken::new()).await.unwrap();
    g
}

fn spec(up: &Upstream, line: Option<f64>, tell: Tell) -> Spec {
    let mut prices = std::collections::BTreeMap::new();
    prices.insert(
        "m1".to_string(),
        cryo_session::Price { input: 1000.0, output: 2000.0, cached: None, cache_write: None },
    );
    Spec {
        chamber: "c".into(),
        account: "acct".into(),
        session: 1,
        upstream: up.url.clone(),
        auth: Auth::ApiKey("sk-real".into()),
        line,
        prices: Arc::new(Prices::new(&prices)),
        tell,
        trace: None,
        kept: None,
    }
}

async fn post(url: &str, key: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(url)
        .header("x-api-key", key)
        .body(r#"{"model":"m1","stream":true}"#)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn forwards_with_the_real_key_and_counts_what_came_back() {
    let (up, g) = (upstream(200, &[]).await, gateway().await);
    let (tell, _) = tell();
    let t = g.open(spec(&up, None, tell)).unwrap();
    let (status, body) = post(&format!("{}/v1/messages?beta=true", t.base()), t.token()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("message_delta"), "the stream passed through: {body}");
    let seen = up.seen.lock().unwrap().clone();
    assert_eq!(seen[0].0, "/v1/messages?beta=true");
    assert_eq!(seen[0].1["x-api-key"], "sk-real");
    assert!(!seen[0].1.values().any(|v| v.to_str().unwrap_or("").contains("cryo-gw-")), "{:?}", seen[0].1);
    let used = t.route().used();
    assert_eq!((used.requests, used.usage.input_tokens, used.usage.output_tokens), (1, 10, 5));
    assert!((used.usage.cost_usd.unwrap() - 0.02).abs() < 1e-12);
}

#[tokio::test]
async fn refuses_unknown_and_dead_tokens_and_other_endpoints() {
    let (up, g) = (upstream(200, &[]).await, gateway().await);
    let (tell, _) = tell();
    let t = g.open(spec(&up, None, tell)).unwrap();
    let base = t.base();
    let root = base.rsplit_once("/cryo/").unwrap().0.to_string();
    for path in ["/v1/files", "/v1/organizations/api_keys", "/v1/batches"] {
        let (status, body) = post(&format!("{base}{path}"), t.token()).await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    for url in [format!("{root}/cryo/cryo-gw-guess/v1/messages"), format!("{root}/v1/messages"), format!("{root}/")] {
        assert_eq!(post(&url, "anything").await.0, 401, "{url}");
    }
    drop(t);
    assert_eq!(post(&format!("{base}/v1/messages"), "x").await.0, 401, "a dropped ticket is worthless");
    assert!(up.seen.lock().unwrap().is_empty(), "nothing reached the upstream");
    assert_eq!(g.open_tickets(), 0);
}

#[tokio::test]
async fn the_request_past_the_line_is_refused_and_told_once() {
    let (up, g) = (upstream(200, &[]).await, gateway().await);
    let (tell, told) = tell();
    let t = g.open(spec(&up, Some(0.015), tell)).unwrap();
    let url = format!("{}/v1/messages", t.base());
    assert_eq!(post(&url, "x").await.0, 200);
    let (status, body) = post(&url, "x").await;
    assert_eq!(status, 402, "{body}");
    assert!(body.contains("spending line"), "{body}");
    assert_eq!(post(&url, "x").await.0, 402);
    assert_eq!(up.seen.lock().unwrap().len(), 1, "only the first was sent");
    assert_eq!(told.over.load(Ordering::SeqCst), 1, "told once");
    assert_eq!(t.route().used().refused, 2);
}

#[tokio::test]
async fn a_long_429_ends_the_session_and_a_short_one_only_holds() {
    let (long, g) = (upstream(429, &[("retry-after", "90")]).await, gateway().await);
    let (tell_a, told_a) = tell();
    let t = g.open(spec(&long, None, tell_a)).unwrap();
    assert_eq!(post(&format!("{}/v1/messages", t.base()), "x").await.0, 429);
    let limits = told_a.limits.lock().unwrap().clone();
    assert_eq!((limits.len(), limits[0].retry_after_ms, limits[0].exact), (1, Some(90_000), true));
    assert_eq!(told_a.holds.lock().unwrap()[0].0, Duration::from_secs(90));
    let short = upstream(429, &[("retry-after", "5")]).await;
    let (tell_b, told_b) = tell();
    let t = g.open(spec(&short, None, tell_b)).unwrap();
    assert_eq!(post(&format!("{}/v1/messages", t.base()), "x").await.0, 429);
    assert!(told_b.limits.lock().unwrap().is_empty(), "the CLI waits 5 s itself");
    assert_eq!(told_b.holds.lock().unwrap()[0].0, Duration::from_secs(5));
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_unread() {
    let (up, g) = (upstream(200, &[]).await, gateway().await);
    let (tell, _) = tell();
    let t = g.open(spec(&up, None, tell)).unwrap();
    let big = vec![b'x'; MAX_REQUEST + 1];
    let r = reqwest::Client::new().post(format!("{}/v1/messages", t.base())).body(big).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(up.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_flood_of_silent_connections_gives_way_to_a_session() {
    let up = upstream(200, &[]).await;
    let g = Gateway::new(crate::base::clock::Clock::system());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let capped = crate::base::conn::Capped::with(listener, 4, Duration::from_secs(600));
    let addr = g.serve_on(capped, tokio_util::sync::CancellationToken::new()).unwrap();
    // An agent's flood: connections that never say a word, past the cap.
    let mut flood = Vec::new();
    for _ in 0..16 {
        flood.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let (tell, _) = tell();
    let t = g.open(spec(&up, None, tell)).unwrap();
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), post(&format!("{}/v1/messages", t.base()), "x"))
        .await
        .expect("the session's request is served despite the flood");
    assert_eq!(status, 200, "{body}");
    assert_eq!(t.route().used().requests, 1);
    // The gateway held no more than its cap: the flood's others were closed.
    let mut closed = 0;
    for mut c in flood {
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(2), tokio::io::AsyncReadExt::read(&mut c, &mut buf));
        if matches!(read.await, Ok(Ok(0)) | Ok(Err(_))) {
            closed += 1;
        }
    }
    assert!(closed >= 16 - 4, "only {closed} of the flood's connections were closed");
}

/// An upstream that quotes the key it was given, in a header and in its
/// body (an error that says which key was wrong).
async fn echoing() -> Upstream {
    let seen: Arc<Mutex<Vec<(String, HeaderMap)>>> = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let kept = kept.clone();
        async move {
            let key = req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
            kept.lock().unwrap().push((req.uri().to_string(), req.headers().clone()));
            let body =
                format!("{{\"type\":\"error\",\"error\":{{\"message\":\"invalid x-api-key: {key} (key {key})\"}}}}");
            Response::builder()
                .status(401)
                .header("content-type", "application/json")
                .header("x-echo", format!("key={key}"))
                .body(Body::from(body))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { url, seen }
}

/// Issue 59, case 8: the real key never reaches the agent, even when the
/// upstream echoes it back, in a header or in the body.
#[tokio::test]
async fn an_upstream_that_echoes_the_key_never_shows_it_to_the_agent() {
    let (up, g) = (echoing().await, gateway().await);
    let (tell, _) = tell();
    let t = g.open(spec(&up, None, tell)).unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", t.base()))
        .header("x-api-key", t.token())
        .body("{}")
        .send()
        .await
        .unwrap();
    let header = r.headers().get("x-echo").map(|v| v.to_str().unwrap().to_string());
    let body = r.text().await.unwrap();
    assert_eq!(up.seen.lock().unwrap()[0].1["x-api-key"], "sk-real", "the upstream got the real key");
    assert!(!body.contains("sk-real") && body.matches(redact::REDACTED).count() == 2, "{body}");
    assert_eq!(header.as_deref(), Some("key=[redacted by cryo]"));
}

/// Sends `head` (a request line and headers) to the gateway as it is, on a
/// socket of its own: no client library mends the path on the way.
async fn raw(base: &str, request_line: &str, headers: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!("{request_line}\r\nHost: {addr}\r\n{headers}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Issue 59, case 7: a path that a URL parser would walk elsewhere (a
/// backslash, an escape, a dot segment) or that only ends like a model
/// call is refused before anything reaches the upstream; headers naming
/// another host or client are not passed on.
#[tokio::test]
async fn paths_are_matched_whole_and_forwarded_headers_dropped() {
    let (up, g) = (upstream(200, &[]).await, gateway().await);
    let (tell, _) = tell();
    let t = g.open(spec(&up, None, tell)).unwrap();
    let base = t.base();
    let prefix = base.split_once("://").unwrap().1.split_once('/').unwrap().1;
    let key = format!("x-api-key: {}\r\n", t.token());
    for path in [
        "/v1\\..\\..\\tenant-b/v1/messages",
        "/v1/%2e%2e/tenant-b/v1/messages",
        "/tenant-b/v1/messages",
        "/v1/files/../messages",
        "/v1//messages",
    ] {
        let status = raw(&base, &format!("POST /{prefix}{path} HTTP/1.1"), &key).await;
        assert!(status == 403 || status == 400, "{path}: {status}");
    }
    assert!(up.seen.lock().unwrap().is_empty(), "nothing reached the upstream");
    let forwarded = format!(
        "{key}X-Forwarded-Host: evil.example\r\nForwarded: host=evil.example\r\nVia: 1.1 evil\r\nX-Real-IP: 6.6.6.6\r\nConnection: close, x-hop\r\nX-Hop: 1\r\n"
    );
    assert_eq!(raw(&base, &format!("POST /{prefix}/v1/messages HTTP/1.1"), &forwarded).await, 200);
    let seen = up.seen.lock().unwrap().clone();
    let h = &seen[0].1;
    for name in ["x-forwarded-host", "forwarded", "via", "x-real-ip", "x-hop"] {
        assert!(!h.contains_key(name), "{name} reached the upstream: {h:?}");
    }
}

/// A ticket on `up` whose answered requests' fingerprints are kept.
fn fingerprinted(g: &Gateway, up: &Upstream) -> (Ticket, Arc<Mutex<Vec<u64>>>) {
    let (mut told, _) = tell();
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let kept = seen.clone();
    told.answered = Arc::new(move |h| kept.lock().unwrap().push(h));
    (g.open(spec(up, None, told)).unwrap(), seen)
}

/// The same request answered again and again is told each time with the
/// same fingerprint (the session's watch counts them); another body, or a
/// refused repeat, is not the same.
#[tokio::test]
async fn an_answered_request_is_told_by_its_fingerprint() {
    let (up, g) = (upstream(200, &[]).await, gateway().await);
    let (t, seen) = fingerprinted(&g, &up);
    let url = format!("{}/v1/messages", t.base());
    for _ in 0..3 {
        assert_eq!(post(&url, t.token()).await.0, 200);
    }
    let other = reqwest::Client::new()
        .post(&url)
        .header("x-api-key", t.token())
        .body(r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"more"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 200);
    let _ = other.text().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen[0] == seen[1] && seen[1] == seen[2] && seen[3] != seen[2], "{seen:?}");
    // A refused request is not an answered one.
    let (up, g) = (upstream(529, &[]).await, gateway().await);
    let (t, none) = fingerprinted(&g, &up);
    assert_eq!(post(&format!("{}/v1/messages", t.base()), t.token()).await.0, 529);
    assert!(none.lock().unwrap().is_empty());
}
