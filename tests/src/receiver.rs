//! An HTTP receiver on 127.0.0.1 for notifiers: it keeps every POST (path,
//! headers, body, when it came) and can be told to answer the next few
//! with an error, as a webhook endpoint or an ntfy server that is down.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// One request as it came.
#[derive(Debug, Clone)]
pub struct Got {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// Wall clock, ms since the epoch.
    pub at_ms: i64,
}

impl Got {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str).unwrap_or("")
    }
}

#[derive(Default)]
struct World {
    got: Vec<Got>,
    /// Requests still to refuse (with 503), and how many were refused.
    failing: u32,
    refused: u32,
    /// Paths answered 410 Gone (a push subscription that expired).
    gone: Vec<String>,
}

pub struct Receiver {
    pub addr: SocketAddr,
    world: Arc<Mutex<World>>,
    _runtime: tokio::runtime::Runtime,
}

async fn take(
    State(world): State<Arc<Mutex<World>>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let mut w = world.lock().unwrap();
    if w.gone.contains(&format!("/{path}")) {
        return StatusCode::GONE;
    }
    if w.failing > 0 {
        w.failing -= 1;
        w.refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let headers =
        headers.iter().map(|(k, v)| (k.as_str().to_ascii_lowercase(), v.to_str().unwrap_or("").to_string())).collect();
    #[allow(clippy::disallowed_methods)] // the receiver's own clock, for latency
    let at_ms = chrono::Utc::now().timestamp_millis();
    w.got.push(Got { path: format!("/{path}"), headers, body: body.to_vec(), at_ms });
    StatusCode::OK
}

impl Receiver {
    pub fn start() -> Receiver {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let world: Arc<Mutex<World>> = Default::default();
        let app = axum::Router::new().route("/{*path}", post(take)).with_state(world.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("listen");
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, world, _runtime: runtime }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What came to `path`, in order.
    pub fn got(&self, path: &str) -> Vec<Got> {
        self.world.lock().unwrap().got.iter().filter(|g| g.path == path).cloned().collect()
    }

    /// Refuses the next `n` requests with 503.
    pub fn fail_next(&self, n: u32) {
        self.world.lock().unwrap().failing = n;
    }

    /// Answers `path` with 410 Gone from now on.
    pub fn gone(&self, path: &str) {
        self.world.lock().unwrap().gone.push(path.to_string());
    }

    pub fn refused(&self) -> u32 {
        self.world.lock().unwrap().refused
    }
}
