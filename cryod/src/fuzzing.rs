//! Entry points for the fuzz targets in `fuzz/` (cargo fuzz, libFuzzer) and
//! for the stable test that feeds them the committed corpus. Each takes
//! arbitrary bytes and panics only when a property does not hold, so the
//! fuzzer reports a broken rule, not just a crash.

use std::path::Path;
use std::sync::OnceLock;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A fixed "now" (2026-03-29 00:30 UTC, an hour before Europe's spring
/// change) and a zone with DST, so gaps and folds are near.
fn fixed() -> (DateTime<Utc>, Tz) {
    (Utc.with_ymd_and_hms(2026, 3, 29, 0, 30, 0).unwrap(), chrono_tz::Europe::Berlin)
}

/// The time grammar: parsing never panics, accepted times land in the years
/// cryo supports, durations are never negative, and a repeat is at least a
/// minute.
pub fn time_grammar(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let (now, tz) = fixed();
    if let Ok(t) = cryo_core::time::parse_time(s, now, tz) {
        let year = chrono::Datelike::year(&t);
        assert!((1970..=9999).contains(&year), "{s:?} parsed to {t}");
    }
    if let Some(d) = cryo_core::time::parse_duration(s) {
        assert!(d >= chrono::Duration::zero(), "{s:?} parsed to a duration of {d}");
    }
    if let Ok(Some(cryo_core::todo::Repeat::Every(d))) = cryo_core::todo::parse_repeat(Some(s), None) {
        assert!(d >= chrono::Duration::minutes(1), "--every {s:?} repeats every {d}");
    }
    let _ = cryo_core::todo::parse_repeat(None, Some(s));
}

/// Message files: parsing never panics; what parses renders and parses
/// back to the same message (so front matter cannot grow or change in a
/// round trip, and a rendered header cannot start another).
pub fn message(data: &[u8]) {
    let (_, tz) = fixed();
    let Ok(m) = cryo_core::message::parse(data, tz) else { return };
    let text = cryo_core::message::render(&m, tz);
    let back = cryo_core::message::parse(text.as_bytes(), tz)
        .unwrap_or_else(|e| panic!("a rendered message does not parse ({e}):\n{text}"));
    assert_eq!(back.from, cryo_core::message::sanitize_header(&m.from));
    assert_eq!(back.subject, cryo_core::message::sanitize_header(&m.subject));
    assert_eq!(back.body.trim_end(), m.body.trim_end());
    assert_eq!(back.question, m.question);
}

/// `todo.json`: loading never panics; what loads renders and loads back to
/// the same list.
pub fn todo_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (_, tz) = fixed();
    let Ok(list) = cryo_core::todo::parse_file(text, tz, 0) else { return };
    let rendered = cryo_core::todo::render_file(&list, tz);
    let back = cryo_core::todo::parse_file(&rendered, tz, 0)
        .unwrap_or_else(|e| panic!("a rendered todo.json does not load ({e}):\n{rendered}"));
    assert_eq!(cryo_core::todo::render_file(&back, tz), rendered, "a second round trip changed the file");
}

/// `cryo.toml` and `cryod.toml`: loading never panics, and every error is
/// one line.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (_, tz) = fixed();
    let dir = Path::new("/nonexistent/chamber");
    if let Err(e) = crate::chamber::config::parse(&dir.join("cryo.toml"), text, dir, tz) {
        let e = e.to_string();
        assert!(!e.contains('\n'), "a cryo.toml error of several lines: {e:?}");
    }
    if let Err(e) = crate::config::Config::parse(Path::new("/nonexistent/cryod.toml"), text) {
        let e = e.to_string();
        assert!(!e.contains('\n'), "a cryod.toml error of several lines: {e:?}");
    }
}

/// A secret planted beside the chamber, outside it: no response may carry it.
pub const OUTSIDE_CANARY: &str = "CRYO-CANARY-OUTSIDE-THE-CHAMBER";

/// The hub's request handling: any path and method, with a valid token and
/// Host, gets an answer that is not a server error and never carries a
/// file from outside the chamber.
pub fn hub_path(data: &[u8]) {
    let harness = HubHarness::get();
    let (method, path) = match data.split_first() {
        Some((m, rest)) => (["GET", "POST", "PUT", "DELETE"][*m as usize % 4], rest),
        None => ("GET", data),
    };
    let Ok(path) = std::str::from_utf8(path) else { return };
    let (status, body) = harness.request(method, &format!("/{path}"));
    assert!(status < 500 || status == 503, "{method} /{path} answered {status}: {body}");
    // An answer may quote the request (an unknown chamber's name): only a
    // canary the request did not carry counts.
    if !cryo_sync::attach::percent_decoded(path).to_ascii_uppercase().contains("CANARY") {
        assert!(!body.contains(OUTSIDE_CANARY), "{method} /{path} served a file from outside the chamber");
    }
}

/// A cryod (registry, supervisors, hub router) over a private folder, made
/// once per process, answering requests in-process.
pub struct HubHarness {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    token: String,
}

impl HubHarness {
    pub fn get() -> &'static HubHarness {
        static H: OnceLock<HubHarness> = OnceLock::new();
        H.get_or_init(HubHarness::new)
    }

    fn new() -> HubHarness {
        // A static is never dropped, so the folder outlives its process:
        // each harness removes those whose process has gone.
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let pid = name.to_str().and_then(|n| n.strip_prefix("cryo-fuzz-hub-"));
                if pid.is_some_and(|p| !std::path::Path::new("/proc").join(p).exists()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let root = std::env::temp_dir().join(format!("cryo-fuzz-hub-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("state")).expect("fuzz folder");
        std::fs::write(root.join("secret.md"), OUTSIDE_CANARY).expect("canary");
        std::fs::write(root.join("plan.md"), OUTSIDE_CANARY).expect("canary");
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("fuzz runtime");
        let token = "fuzz-token".to_string();
        let router = runtime.block_on(async {
            let shared = crate::services::runtime::Shared::start(
                crate::config::Config::default(),
                crate::store::Store::open(&root.join("state/registry.sqlite")).expect("store"),
                crate::base::clock::Clock::system(),
                tokio_util::sync::CancellationToken::new(),
                &cryo_proto::paths::Paths {
                    socket: root.join("cryod.sock"),
                    state_dir: root.join("state"),
                    config_file: root.join("config/cryod.toml"),
                },
                crate::services::lease::Lease::single(),
            );
            let daemon = crate::daemon::Daemon::load(shared).await.expect("daemon");
            let chamber = root.join("alpha");
            daemon
                .add(&chamber, Some("alpha"), true, Some("true"), Some(crate::config::Sandbox::Off))
                .await
                .expect("a chamber");
            crate::fronts::hub::router(daemon, token.clone(), "127.0.0.1:8765".parse().unwrap())
        });
        HubHarness { runtime, router, token }
    }

    /// Sends one request (with the token, the Host and the CSRF header);
    /// returns the status and the body.
    pub fn request(&self, method: &str, path: &str) -> (u16, String) {
        use tower::ServiceExt;
        let Ok(req) = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1:8765")
            .header("authorization", format!("Bearer {}", self.token))
            .header("x-cryo-csrf", "1")
            .header("content-type", "application/json")
            .body(axum::body::Body::from("{}"))
        else {
            return (400, String::new());
        };
        self.runtime.block_on(async {
            let resp = self.router.clone().oneshot(req).await.expect("the router always answers");
            let status = resp.status().as_u16();
            // Event streams never end; their first bytes are enough.
            let body = tokio::time::timeout(
                std::time::Duration::from_millis(200),
                axum::body::to_bytes(resp.into_body(), 1 << 20),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
            (status, body)
        })
    }
}
