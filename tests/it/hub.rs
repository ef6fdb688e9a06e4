//! Issue 7: the hub's API, over real HTTP to a real cryod (no browser).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use cryo_tests::{Env, wait_until};

pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) headers: String,
    pub(crate) body: String,
}

impl Resp {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

pub(crate) struct Hub {
    addr: String,
    /// Empty: no Authorization header.
    token: String,
}

impl Hub {
    pub(crate) fn of(env: &Env) -> Hub {
        let j = env.cryoctl(&["hub", "--json"]).json();
        assert_eq!(j["up"], true, "{j}");
        let url = j["url"].as_str().unwrap();
        let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
        Hub { addr, token: j["token"].as_str().unwrap().to_string() }
    }

    /// The same listener, with another token (`None`: none at all).
    pub(crate) fn with_token(&self, token: Option<&str>) -> Hub {
        Hub { addr: self.addr.clone(), token: token.unwrap_or("").to_string() }
    }

    /// The owner's token.
    pub(crate) fn token(&self) -> String {
        self.token.clone()
    }

    /// A listener at `addr`, asked without a token.
    pub(crate) fn at(addr: &str) -> Hub {
        Hub { addr: addr.to_string(), token: String::new() }
    }

    /// A request with `extra` header lines; `token` None sends none.
    pub(crate) fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        extra: &[&str],
        body: Option<&str>,
    ) -> Resp {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !extra.iter().any(|h| h.to_ascii_lowercase().starts_with("host:")) {
            req.push_str(&format!("Host: {}\r\n", self.addr));
        }
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        for h in extra {
            req.push_str(&format!("{h}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() || method != "GET" {
            req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            dechunk(rest)
        } else {
            rest.to_string()
        };
        Resp { status, headers: head.to_string(), body }
    }

    pub(crate) fn get(&self, path: &str) -> Resp {
        let token = (!self.token.is_empty()).then_some(self.token.as_str());
        self.raw("GET", path, token, &[], None)
    }

    fn write(&self, method: &str, path: &str, body: &str) -> Resp {
        self.raw(method, path, Some(&self.token), &["X-Cryo-Csrf: 1"], Some(body))
    }
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((len, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(len.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

const AGENT: &str = "cryo-agent receive >/dev/null\ncryo-agent send \"reply $CRYO_SESSION\" >/dev/null\ncryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n";

#[test]
fn the_auth_matrix_host_and_csrf_checks() {
    let env = Env::new();
    let _d = env.start_daemon();
    env.chamber("c", AGENT, "");
    let hub = Hub::of(&env);
    for path in ["/api/chambers", "/api/chambers/c", "/api/chambers/c/messages", "/api/events"] {
        assert_eq!(hub.raw("GET", path, None, &[], None).status, 401, "{path} without a token");
        let wrong =
            hub.raw("GET", path, Some("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), &[], None);
        assert_eq!(wrong.status, 401, "{path} with a wrong token");
        assert!(wrong.body.is_empty(), "a refusal says nothing: {}", wrong.body);
    }
    assert_eq!(hub.get("/api/chambers").status, 200);
    // Host allowlist (DNS rebinding): another name is refused, loopback names pass.
    assert_eq!(hub.raw("GET", "/api/chambers", Some(&hub.token), &["Host: attacker.example"], None).status, 421);
    let port = hub.addr.rsplit(':').next().unwrap();
    let localhost = format!("Host: localhost:{port}");
    assert_eq!(hub.raw("GET", "/api/chambers", Some(&hub.token), &[&localhost], None).status, 200);
    // Writes need the CSRF header or a same-origin fetch.
    let body = r#"{"text":"hello"}"#;
    assert_eq!(hub.raw("POST", "/api/chambers/c/messages", Some(&hub.token), &[], Some(body)).status, 403);
    assert_eq!(
        hub.raw("POST", "/api/chambers/c/messages", Some(&hub.token), &["Sec-Fetch-Site: same-origin"], Some(body))
            .status,
        200
    );
    assert_eq!(
        hub.raw("POST", "/api/chambers/c/messages", Some(&hub.token), &["Sec-Fetch-Site: cross-site"], Some(body))
            .status,
        403
    );
    // Security headers; the page is public, the API is not.
    let page = hub.raw("GET", "/", None, &[], None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script src=\"/app.js\""));
    assert_eq!(page.header("x-content-type-options").as_deref(), Some("nosniff"));
    assert_eq!(page.header("referrer-policy").as_deref(), Some("no-referrer"));
    assert!(page.header("content-security-policy").unwrap().contains("default-src 'none'"));
    assert_eq!(hub.get("/api/chambers").header("x-content-type-options").as_deref(), Some("nosniff"));
}

#[test]
fn oversized_bodies_and_paths_outside_a_chamber_are_refused() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", AGENT, "");
    let hub = Hub::of(&env);
    let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(300 * 1024));
    assert_eq!(hub.write("POST", "/api/chambers/c/messages", &big).status, 413);
    assert!(c.messages("messages/inbox").is_empty(), "nothing was written");
    for path in [
        "/api/chambers/..%2F..%2Fetc/plan",
        "/api/chambers/c/..%2F..%2F..%2Fetc%2Fpasswd",
        "/api/chambers/c/../../../etc/passwd",
        "/api/chambers/%2E%2E/notes",
        "/../../etc/passwd",
        "/api/chambers/c/files/..%2Fcryo.toml",
    ] {
        let r = hub.get(path);
        assert!(matches!(r.status, 400 | 404 | 405), "{path}: {} {}", r.status, r.body);
        assert!(!r.body.contains("root:"), "{path} leaked a file");
    }
}

#[test]
fn every_route_does_what_the_cli_does() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", AGENT, "");
    let hub = Hub::of(&env);
    // Lists and one chamber, in cryoctl's JSON shape.
    let list = hub.get("/api/chambers").json();
    assert_eq!(list, env.cryoctl(&["chamber", "list", "--json"]).json());
    // Control.
    let started = hub.write("POST", "/api/chambers/c/start", "{}").json();
    assert!(started["state"] == "running" || started["state"] == "idle", "{started}");
    c.wait_ended(1);
    let one = hub.get("/api/chambers/c").json();
    assert_eq!(one["chamber"]["name"], "c");
    assert_eq!(one["sessions"][0]["trigger"], "bootstrap");
    // Messages: send puts a file in the inbox; the reply shows in the conversation.
    let sent = hub.write("POST", "/api/chambers/c/messages", r#"{"text":"from the hub"}"#).json();
    assert!(sent["file"].as_str().unwrap().starts_with("messages/inbox/"));
    c.wait_ended(2);
    let conv = hub.get("/api/chambers/c/messages").json();
    let bodies: Vec<&str> = conv.as_array().unwrap().iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert!(bodies.ends_with(&["from the hub", "reply 2"]), "{bodies:?}");
    // TODOs: add (shows in cryoctl), done, remove.
    let added = hub.write("POST", "/api/chambers/c/todos", r#"{"text":"from the page","at":"+3h"}"#).json();
    let id = added[0]["id"].as_u64().unwrap();
    assert!(env.cryoctl(&["chamber", "todo", "c", "list"]).ok().contains("from the page"));
    hub.write("POST", &format!("/api/chambers/c/todos/{id}/done"), "{}");
    let todos = hub.get("/api/chambers/c/todos").json();
    assert!(todos.as_array().unwrap().iter().any(|t| t["id"] == id && t["state"] == "done"));
    assert_eq!(hub.write("DELETE", &format!("/api/chambers/c/todos/{id}"), "").status, 200);
    assert_eq!(hub.write("DELETE", "/api/chambers/c/todos/999", "").status, 404);
    // Plan and notes.
    assert_eq!(hub.write("PUT", "/api/chambers/c/plan", r##"{"text":"# New plan\n"}"##).status, 200);
    assert_eq!(c.read("plan.md"), "# New plan\n");
    assert_eq!(hub.get("/api/chambers/c/plan").json()["text"], "# New plan\n");
    assert!(hub.get("/api/chambers/c/notes").json()["text"].as_str().unwrap().contains("# Notes"));
    assert!(hub.get("/api/chambers/c/log").json()["lines"].as_array().unwrap().iter().any(|l| l == "--- CRYO END ---"));
    assert!(hub.get("/api/chambers/c/log?agent=true").json()["lines"].is_array());
    // Pause, resume, wake, stop; an unknown action is 404; a refused one 409.
    assert_eq!(hub.write("POST", "/api/chambers/c/pause", "{}").json()["state"], "paused");
    assert_eq!(hub.write("POST", "/api/chambers/c/wake", "{}").status, 409);
    assert_eq!(hub.write("POST", "/api/chambers/c/resume", "{}").json()["state"], "idle");
    assert_eq!(hub.write("POST", "/api/chambers/c/wake", r#"{"message":"now please"}"#).status, 200);
    c.wait_ended(3);
    assert_eq!(hub.write("POST", "/api/chambers/c/stop", "{}").json()["state"], "stopped");
    assert_eq!(hub.write("POST", "/api/chambers/c/frobnicate", "{}").status, 404);
    // A new chamber, then removed (its files stay).
    let dir = env.path("fresh");
    let made = hub.write(
        "POST",
        "/api/chambers",
        &format!(r#"{{"dir":"{}","name":"fresh","agent":"sh agent.sh"}}"#, dir.display()),
    );
    assert_eq!(made.json()["chamber"]["name"], "fresh", "{}", made.body);
    assert!(dir.join("plan.md").exists());
    assert_eq!(hub.write("DELETE", "/api/chambers/fresh", "").status, 200);
    assert!(dir.join("plan.md").exists());
    assert_eq!(hub.get("/api/chambers/fresh").status, 404);
}

#[test]
fn the_event_stream_carries_messages_and_ends_on_shutdown() {
    let env = Env::new();
    let mut d = env.start_daemon();
    let c = env.chamber("c", AGENT, "");
    let hub = Hub::of(&env);
    let mut s = TcpStream::connect(&hub.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    write!(s, "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n", hub.addr, hub.token).unwrap();
    let mut got = String::new();
    let mut read_until = |want: &str, got: &mut String| {
        let start = Instant::now();
        let mut buf = [0u8; 8192];
        while !got.contains(want) {
            assert!(start.elapsed() < Duration::from_secs(20), "no {want:?} in:\n{got}");
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => {}
            }
        }
    };
    read_until("text/event-stream", &mut got);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    read_until("event: status", &mut got);
    read_until("\"body\":\"reply 1\"", &mut got);
    assert!(got.contains("event: message"));
    read_until("event: log", &mut got);
    c.wait_ended(1);
    // Shutdown ends the stream promptly.
    let start = Instant::now();
    d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    assert!(start.elapsed() < Duration::from_secs(5), "an open event stream held up shutdown");
    wait_until("the stream to close", || {
        let mut buf = [0u8; 1024];
        matches!(s.read(&mut buf), Ok(0))
    });
}

#[test]
fn cryoctl_hub_prints_the_url_with_the_token_in_the_fragment() {
    let env = Env::new();
    let _d = env.start_daemon();
    let out = env.cryoctl(&["hub"]);
    let line = out.ok().trim().to_string();
    assert!(line.starts_with("http://127.0.0.1:") && line.contains("/#token="), "{line}");
    let token_file = env.state_dir().join("hub-token");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&token_file).unwrap().permissions()) & 0o777;
    assert_eq!(mode, 0o600);
    assert!(line.ends_with(std::fs::read_to_string(&token_file).unwrap().trim()));
}
