//! A Zulip server on 127.0.0.1, for the sync bridge's tests: the endpoints
//! the bridge uses, as Zulip's API documentation describes them
//! (<https://zulip.com/api/>), with HTTP basic auth on every `/api/v1/` call.
//!
//! - `GET /api/v1/users/me`, `GET /api/v1/get_stream_id?stream=`
//! - `POST /api/v1/register` (form: `event_types`, `narrow` as JSON), then
//!   `GET /api/v1/events?queue_id=&last_event_id=` (a long poll; a dropped
//!   queue answers 400 `BAD_EVENT_QUEUE_ID`)
//! - `GET /api/v1/messages?anchor=&num_before=&num_after=&narrow=&include_anchor=`
//! - `POST /api/v1/messages` (form: `type`, `to`, `topic`, `content`)
//! - `POST /api/v1/user_uploads` (multipart), `GET /api/v1/user_uploads/{path}`
//!   (a temporary URL), `GET /user_uploads/temporary/{token}` (no auth)
//!
//! Tests add messages as people ([`FakeZulip::say`]), expire queues, make
//! calls fail, and read what the bridge did.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Form, Multipart, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

pub const EMAIL: &str = "cryo-bot@zulip.test";
pub const KEY: &str = "zulip-test-key-0123456789";
pub const STREAM: &str = "agents";
pub const STREAM_ID: u64 = 7;

#[derive(Clone, Debug)]
pub struct Msg {
    pub id: u64,
    pub sender_email: String,
    pub sender_full_name: String,
    pub stream: String,
    pub topic: String,
    pub content: String,
    pub timestamp: i64,
}

impl Msg {
    fn json(&self) -> Value {
        json!({
            "id": self.id, "type": "stream", "sender_email": self.sender_email,
            "sender_full_name": self.sender_full_name, "sender_id": if self.sender_email == EMAIL { 5 } else { 9 },
            "display_recipient": self.stream, "stream_id": if self.stream == STREAM { STREAM_ID } else { 99 },
            "subject": self.topic, "content": self.content, "timestamp": self.timestamp,
            "flags": [], "reactions": [],
        })
    }
}

/// A failure to answer with, for the next `count` calls to `path`.
#[derive(Clone, Debug)]
struct Fail {
    path: String,
    status: u16,
    retry_after: Option<u64>,
    count: u32,
}

#[derive(Default)]
struct Queue {
    /// (event id, event), not yet acknowledged.
    events: Vec<(i64, Value)>,
    next_id: i64,
}

#[derive(Default)]
pub struct World {
    pub messages: Vec<Msg>,
    queues: HashMap<String, Queue>,
    next_queue: u64,
    fails: Vec<Fail>,
    /// Every call: method, path, and the time it came (for back-off checks).
    pub calls: Vec<(String, String, std::time::Instant)>,
    /// Calls that came without valid credentials.
    pub unauthenticated: u32,
    uploads: HashMap<String, Vec<u8>>,
    /// A person who answers the bot's next post the moment it lands:
    /// (name, content).
    quick: Option<(String, String)>,
}

pub struct FakeZulip {
    pub addr: SocketAddr,
    world: Arc<Mutex<World>>,
    notify: Arc<tokio::sync::Notify>,
    _runtime: tokio::runtime::Runtime,
}

type Shared = (Arc<Mutex<World>>, Arc<tokio::sync::Notify>);

impl FakeZulip {
    pub fn start() -> FakeZulip {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let world = Arc::new(Mutex::new(World { next_queue: 1, ..World::default() }));
        let notify = Arc::new(tokio::sync::Notify::new());
        let app = axum::Router::new()
            .route("/api/v1/users/me", get(users_me))
            .route("/api/v1/get_stream_id", get(get_stream_id))
            .route("/api/v1/register", post(register))
            .route("/api/v1/events", get(events))
            .route("/api/v1/messages", get(get_messages).post(send_message))
            .route("/api/v1/user_uploads", post(upload))
            .route("/api/v1/user_uploads/{*path}", get(upload_url))
            .route("/user_uploads/temporary/{token}", get(temporary))
            .with_state((world.clone(), notify.clone()));
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("listen");
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeZulip { addr, world, notify, _runtime: runtime }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A person (or anyone using `email`) says `content` on `topic`.
    pub fn say_as(&self, email: &str, name: &str, topic: &str, content: &str) -> u64 {
        let id = add_message(&self.world, email, name, STREAM, topic, content);
        self.notify.notify_waiters();
        id
    }

    pub fn say(&self, name: &str, topic: &str, content: &str) -> u64 {
        self.say_as(&format!("{}@people.test", name.to_lowercase()), name, topic, content)
    }

    /// Messages on a topic, oldest first.
    pub fn topic(&self, topic: &str) -> Vec<Msg> {
        self.world.lock().unwrap().messages.iter().filter(|m| m.topic == topic).cloned().collect()
    }

    /// Failures set with `fail` and not yet used up are dropped.
    pub fn heal(&self) {
        self.world.lock().unwrap().fails.clear();
    }

    /// `name` answers the bot's next post at once, before the bot's next call.
    pub fn answer_next_post(&self, name: &str, content: &str) {
        self.world.lock().unwrap().quick = Some((name.into(), content.into()));
    }

    /// Zulip drops every event queue (as it does after ~10 minutes idle).
    pub fn expire_queues(&self) {
        self.world.lock().unwrap().queues.clear();
        self.notify.notify_waiters();
    }

    /// The next `count` calls to `path` answer `status` (with `Retry-After`).
    pub fn fail(&self, path: &str, status: u16, retry_after: Option<u64>, count: u32) {
        self.world.lock().unwrap().fails.push(Fail { path: path.into(), status, retry_after, count });
        self.notify.notify_waiters();
    }

    pub fn calls(&self, path: &str) -> Vec<std::time::Instant> {
        self.world.lock().unwrap().calls.iter().filter(|c| c.1 == path).map(|c| c.2).collect()
    }

    pub fn registrations(&self) -> usize {
        self.calls("/api/v1/register").len()
    }

    pub fn unauthenticated(&self) -> u32 {
        self.world.lock().unwrap().unauthenticated
    }

    pub fn upload(&self, name: &str, bytes: &[u8]) -> String {
        let path = format!("2/ab/{name}");
        self.world.lock().unwrap().uploads.insert(path.clone(), bytes.to_vec());
        format!("/user_uploads/{path}")
    }

    pub fn uploaded(&self, link: &str) -> Option<Vec<u8>> {
        self.world.lock().unwrap().uploads.get(link.trim_start_matches("/user_uploads/")).cloned()
    }
}

fn add_message(world: &Mutex<World>, email: &str, name: &str, stream: &str, topic: &str, content: &str) -> u64 {
    let mut w = world.lock().unwrap();
    let id = 100 + w.messages.len() as u64 * 3;
    let m = Msg {
        id,
        sender_email: email.into(),
        sender_full_name: name.into(),
        stream: stream.into(),
        topic: topic.into(),
        content: content.into(),
        timestamp: 1_790_000_000 + id as i64,
    };
    for q in w.queues.values_mut() {
        let eid = q.next_id;
        q.next_id += 1;
        q.events.push((eid, json!({ "type": "message", "id": eid, "message": m.json(), "flags": [] })));
    }
    w.messages.push(m);
    id
}

fn error(status: StatusCode, code: &str, msg: &str) -> Response {
    (status, axum::Json(json!({ "result": "error", "code": code, "msg": msg }))).into_response()
}

fn ok(mut v: Value) -> Response {
    v["result"] = json!("success");
    v["msg"] = json!("");
    axum::Json(v).into_response()
}

/// Records the call, checks basic auth, and applies an injected failure.
fn gate(world: &Mutex<World>, method: &str, path: &str, headers: &HeaderMap) -> Option<Response> {
    let mut w = world.lock().unwrap();
    w.calls.push((method.into(), path.into(), std::time::Instant::now()));
    let expected = format!("Basic {}", base64(&format!("{EMAIL}:{KEY}")));
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        w.unauthenticated += 1;
        return Some(error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "Invalid API key"));
    }
    if let Some(f) = w.fails.iter_mut().find(|f| f.path == path && f.count > 0) {
        f.count -= 1;
        let mut resp = if f.status == 429 {
            error(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMIT_HIT", "API usage exceeded rate limit")
        } else {
            error(StatusCode::from_u16(f.status).unwrap(), "INTERNAL", "Internal server error")
        };
        if let Some(s) = f.retry_after {
            resp.headers_mut().insert("retry-after", s.to_string().parse().unwrap());
        }
        return Some(resp);
    }
    None
}

async fn users_me(State((w, _)): State<Shared>, h: HeaderMap) -> Response {
    if let Some(r) = gate(&w, "GET", "/api/v1/users/me", &h) {
        return r;
    }
    ok(json!({ "email": EMAIL, "full_name": "Cryo Bot", "user_id": 5, "is_bot": true }))
}

async fn get_stream_id(
    State((w, _)): State<Shared>,
    h: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = gate(&w, "GET", "/api/v1/get_stream_id", &h) {
        return r;
    }
    match q.get("stream").map(String::as_str) {
        Some(STREAM) => ok(json!({ "stream_id": STREAM_ID })),
        Some(other) => error(StatusCode::BAD_REQUEST, "BAD_REQUEST", &format!("Invalid channel name '{other}'")),
        None => error(StatusCode::BAD_REQUEST, "REQUEST_VARIABLE_MISSING", "Missing 'stream' argument"),
    }
}

async fn register(State((w, _)): State<Shared>, h: HeaderMap, Form(form): Form<HashMap<String, String>>) -> Response {
    if let Some(r) = gate(&w, "POST", "/api/v1/register", &h) {
        return r;
    }
    let types: Value =
        serde_json::from_str(form.get("event_types").map(String::as_str).unwrap_or("null")).unwrap_or_default();
    if !types.as_array().is_some_and(|t| t.iter().any(|x| x == "message")) {
        return error(StatusCode::BAD_REQUEST, "BAD_REQUEST", "event_types must include message");
    }
    let narrow: Value =
        serde_json::from_str(form.get("narrow").map(String::as_str).unwrap_or("[]")).unwrap_or_default();
    if !narrow.is_array() {
        return error(StatusCode::BAD_REQUEST, "BAD_REQUEST", "narrow is not a JSON list");
    }
    let mut w = w.lock().unwrap();
    let id = format!("q-{}", w.next_queue);
    w.next_queue += 1;
    w.queues.insert(id.clone(), Queue::default());
    ok(json!({ "queue_id": id, "last_event_id": -1, "zulip_feature_level": 300 }))
}

async fn events(State((w, n)): State<Shared>, h: HeaderMap, Query(q): Query<HashMap<String, String>>) -> Response {
    if let Some(r) = gate(&w, "GET", "/api/v1/events", &h) {
        return r;
    }
    let queue = q.get("queue_id").cloned().unwrap_or_default();
    let last: i64 = q.get("last_event_id").and_then(|v| v.parse().ok()).unwrap_or(-1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let notified = n.notified();
        {
            let mut w = w.lock().unwrap();
            let Some(qu) = w.queues.get_mut(&queue) else {
                return error(StatusCode::BAD_REQUEST, "BAD_EVENT_QUEUE_ID", &format!("Bad event queue ID: {queue}"));
            };
            qu.events.retain(|(id, _)| *id > last);
            if !qu.events.is_empty() {
                let evs: Vec<Value> = qu.events.iter().map(|(_, e)| e.clone()).collect();
                return ok(json!({ "events": evs, "queue_id": queue }));
            }
            if tokio::time::Instant::now() >= deadline {
                let id = qu.next_id;
                qu.next_id += 1;
                return ok(json!({ "events": [{ "type": "heartbeat", "id": id }], "queue_id": queue }));
            }
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
}

/// A message matches a narrow of `{operator, operand}` objects.
fn matches(m: &Msg, narrow: &Value) -> bool {
    narrow.as_array().into_iter().flatten().all(|t| {
        let operand = t["operand"].as_str().unwrap_or("");
        match t["operator"].as_str() {
            Some("stream" | "channel") => m.stream == operand,
            Some("topic") => m.topic.eq_ignore_ascii_case(operand),
            _ => false,
        }
    })
}

async fn get_messages(
    State((w, _)): State<Shared>,
    h: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = gate(&w, "GET", "/api/v1/messages", &h) {
        return r;
    }
    let narrow: Value = serde_json::from_str(q.get("narrow").map(String::as_str).unwrap_or("[]")).unwrap_or_default();
    let before: usize = q.get("num_before").and_then(|v| v.parse().ok()).unwrap_or(0);
    let after: usize = q.get("num_after").and_then(|v| v.parse().ok()).unwrap_or(0);
    if before + after > 5000 {
        return error(StatusCode::BAD_REQUEST, "BAD_REQUEST", "Too many messages requested (maximum 5000).");
    }
    let include = q.get("include_anchor").map(|v| v != "false").unwrap_or(true);
    let w = w.lock().unwrap();
    let on: Vec<&Msg> = w.messages.iter().filter(|m| matches(m, &narrow)).collect();
    let anchor = match q.get("anchor").map(String::as_str) {
        Some("newest") => u64::MAX,
        Some("oldest") => 0,
        Some(n) => n.parse().unwrap_or(0),
        None => return error(StatusCode::BAD_REQUEST, "REQUEST_VARIABLE_MISSING", "Missing 'anchor' argument"),
    };
    let older: Vec<&Msg> = on.iter().copied().filter(|m| m.id < anchor || (include && m.id == anchor)).collect();
    let newer: Vec<&Msg> = on.iter().copied().filter(|m| m.id > anchor).collect();
    let mut out: Vec<&Msg> = older[older.len().saturating_sub(before)..].to_vec();
    let at_anchor = on.iter().copied().find(|m| m.id == anchor && include);
    if before == 0
        && let Some(a) = at_anchor
    {
        out.push(a);
    }
    out.extend(newer.iter().take(after));
    out.dedup_by_key(|m| m.id);
    let found_newest = newer.len() <= after;
    ok(
        json!({ "messages": out.iter().map(|m| m.json()).collect::<Vec<_>>(), "found_newest": found_newest, "anchor": anchor }),
    )
}

async fn send_message(
    State((w, n)): State<Shared>,
    h: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Some(r) = gate(&w, "POST", "/api/v1/messages", &h) {
        return r;
    }
    if form.get("type").map(String::as_str) != Some("stream") {
        return error(StatusCode::BAD_REQUEST, "BAD_REQUEST", "Invalid message type");
    }
    let (Some(to), Some(topic), Some(content)) = (form.get("to"), form.get("topic"), form.get("content")) else {
        return error(StatusCode::BAD_REQUEST, "REQUEST_VARIABLE_MISSING", "Missing 'to', 'topic' or 'content'");
    };
    if to != STREAM {
        return error(StatusCode::BAD_REQUEST, "STREAM_DOES_NOT_EXIST", &format!("Channel '{to}' does not exist"));
    }
    if content.chars().count() > 10_000 {
        return error(StatusCode::BAD_REQUEST, "BAD_REQUEST", "Message too long");
    }
    let id = add_message(&w, EMAIL, "Cryo Bot", to, topic, content);
    let quick = w.lock().unwrap().quick.take();
    if let Some((name, answer)) = quick {
        add_message(&w, &format!("{}@people.test", name.to_lowercase()), &name, to, topic, &answer);
    }
    n.notify_waiters();
    ok(json!({ "id": id }))
}

async fn upload(State((w, _)): State<Shared>, h: HeaderMap, mut form: Multipart) -> Response {
    if let Some(r) = gate(&w, "POST", "/api/v1/user_uploads", &h) {
        return r;
    }
    let Ok(Some(field)) = form.next_field().await else {
        return error(StatusCode::BAD_REQUEST, "BAD_REQUEST", "You must specify a file to upload");
    };
    let name = field.file_name().unwrap_or("file").to_string();
    let bytes = field.bytes().await.unwrap_or_default().to_vec();
    let path = format!("2/cd/{name}");
    w.lock().unwrap().uploads.insert(path.clone(), bytes);
    ok(json!({ "uri": format!("/user_uploads/{path}"), "url": format!("/user_uploads/{path}"), "filename": name }))
}

async fn upload_url(
    State((w, _)): State<Shared>,
    h: HeaderMap,
    axum::extract::Path(path): axum::extract::Path<String>,
) -> Response {
    if let Some(r) = gate(&w, "GET", "/api/v1/user_uploads", &h) {
        return r;
    }
    // The router decodes the path; uploads are kept under their links.
    let path = path.replace(' ', "%20");
    if !w.lock().unwrap().uploads.contains_key(&path) {
        return error(StatusCode::NOT_FOUND, "BAD_REQUEST", "Invalid upload");
    }
    ok(json!({ "url": format!("/user_uploads/temporary/{}", hex(&path)) }))
}

async fn temporary(State((w, _)): State<Shared>, axum::extract::Path(token): axum::extract::Path<String>) -> Response {
    let w = w.lock().unwrap();
    match w.uploads.iter().find(|(p, _)| hex(p) == token) {
        Some((_, bytes)) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Standard base64 (for the expected basic-auth header).
pub fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = match chunk.len() {
            3 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8 | chunk[2] as u32,
            2 => (chunk[0] as u32) << 16 | (chunk[1] as u32) << 8,
            _ => (chunk[0] as u32) << 16,
        };
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
