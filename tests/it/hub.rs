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

    /// Its address (`127.0.0.1:PORT`).
    pub(crate) fn addr(&self) -> &str {
        &self.addr
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
        self.raw_bytes(method, path, token, extra, body.map(str::as_bytes))
    }

    /// [`Hub::raw`] with a body of any bytes.
    pub(crate) fn raw_bytes(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        extra: &[&str],
        body: Option<&[u8]>,
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
        let body = body.unwrap_or(b"");
        if !body.is_empty() || method != "GET" {
            if !extra.iter().any(|h| h.to_ascii_lowercase().starts_with("content-type:")) {
                req.push_str("Content-Type: application/json\r\n");
            }
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        // A server may answer (413) before reading a large body.
        let _ = s.write_all(&bytes);
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
        assert_eq!(wrong.header("www-authenticate").as_deref(), Some("Bearer realm=\"cryo hub\""), "{path}");
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
    // Every route of the API: no token or a wrong one is 401 and says
    // nothing, another Host is 421, and a write without the CSRF header is
    // 403 (guests: `invites_open_only_their_chambers_and_end_on_revocation`).
    let wrong_token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let routes: &[(&str, &str, bool)] = &[
        ("GET", "/api/chambers?archived=1", false),
        ("GET", "/api/chambers/c/todos", false),
        ("GET", "/api/chambers/c/plan", false),
        ("GET", "/api/chambers/c/notes", false),
        ("GET", "/api/chambers/c/log", false),
        ("GET", "/api/chambers/c/settings", false),
        ("GET", "/api/chambers/c/transcript", false),
        ("GET", "/api/chambers/c/history?days=7", false),
        ("GET", "/api/chambers/c/attachments/x.png", false),
        ("GET", "/api/schedule", false),
        ("GET", "/api/limits", false),
        ("GET", "/api/push", false),
        ("GET", "/api/invites", false),
        ("GET", "/api/me", false),
        ("POST", "/api/chambers", true),
        ("POST", "/api/chambers/c/todos", true),
        ("PUT", "/api/chambers/c/plan", true),
        ("PUT", "/api/chambers/c/settings", true),
        ("POST", "/api/chambers/c/attachments?name=x.png", true),
        ("POST", "/api/chambers/c/start", true),
        ("POST", "/api/chambers/c/archive", true),
        ("POST", "/api/chambers/c/unarchive", true),
        ("POST", "/api/chambers/c/reset", true),
        ("POST", "/api/invites", true),
        ("DELETE", "/api/invites/ann", true),
        ("POST", "/api/push", true),
        ("DELETE", "/api/chambers/c", true),
    ];
    for &(method, path, write) in routes {
        let none = hub.raw(method, path, None, &["X-Cryo-Csrf: 1"], Some("{}"));
        assert_eq!((none.status, none.body.as_str()), (401, ""), "{method} {path} without a token");
        let wrong = hub.raw(method, path, Some(wrong_token), &["X-Cryo-Csrf: 1"], Some("{}"));
        assert_eq!((wrong.status, wrong.body.as_str()), (401, ""), "{method} {path} with a wrong token");
        let host = hub.raw(method, path, Some(&hub.token), &["Host: attacker.example", "X-Cryo-Csrf: 1"], Some("{}"));
        assert_eq!(host.status, 421, "{method} {path} for another Host");
        if write {
            assert_eq!(
                hub.raw(method, path, Some(&hub.token), &[], Some("{}")).status,
                403,
                "{method} {path} without CSRF"
            );
        }
    }
    // Nothing of that reached the chamber.
    assert_eq!(hub.get("/api/chambers/c").json()["chamber"]["state"], "stopped");
    assert!(!env.path("c").join("history").exists() && env.path("c").join("plan.md").exists());
    // Security headers; the page is public, the API is not.
    let page = hub.raw("GET", "/", None, &[], None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script type=\"module\" src=\"/app.js\""));
    assert_eq!(page.header("x-content-type-options").as_deref(), Some("nosniff"));
    assert_eq!(page.header("referrer-policy").as_deref(), Some("no-referrer"));
    assert!(page.header("content-security-policy").unwrap().contains("default-src 'none'"));
    assert_eq!(hub.get("/api/chambers").header("x-content-type-options").as_deref(), Some("nosniff"));
    // The service worker names its cache after this cryod's files (a digest
    // in place of its mark), so other files make another worker.
    let sw = hub.raw("GET", "/sw.js", None, &[], None).body;
    let name = sw.split("\"cryo-shell-\" + \"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
    assert!(name.len() == 16 && name.chars().all(|c| c.is_ascii_hexdigit()), "the shell's cache: {name:?}");
    assert_eq!(hub.raw("GET", "/sw.js", None, &[], None).body, sw, "one digest for one cryod");
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
    // Lists and one chamber, in cryoctl's JSON shape, plus the controls
    // the page offers (`actions`: cryod's rule, not the page's copy).
    let mut list = hub.get("/api/chambers").json();
    let actions = list[0].as_object_mut().unwrap().remove("actions");
    assert_eq!(actions, Some(serde_json::json!(["start", "archive", "reset"])), "a stopped chamber's controls");
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

/// Issue 24: the routes of this wave, as each credential sees them.
#[test]
fn invites_open_only_their_chambers_and_end_on_revocation() {
    let env = Env::new();
    let _d = env.start_daemon();
    let a = env.chamber("a", AGENT, "");
    env.chamber("b", AGENT, "");
    let hub = Hub::of(&env);
    // Minting: owner only, CSRF and Host checked like every write.
    let body = r#"{"name":"ann","chambers":["a"]}"#;
    assert_eq!(hub.raw("POST", "/api/invites", None, &["X-Cryo-Csrf: 1"], Some(body)).status, 401);
    assert_eq!(hub.raw("POST", "/api/invites", Some(&hub.token), &[], Some(body)).status, 403);
    assert_eq!(
        hub.raw("POST", "/api/invites", Some(&hub.token), &["X-Cryo-Csrf: 1", "Host: evil.example"], Some(body)).status,
        421
    );
    assert_eq!(hub.write("POST", "/api/invites", r#"{"name":"x","chambers":["nope"]}"#).status, 404);
    let minted = hub.write("POST", "/api/invites", body);
    assert_eq!(minted.status, 200, "{}", minted.body);
    let minted = minted.json();
    let token = minted["token"].as_str().unwrap().to_string();
    assert!(minted["link"].as_str().unwrap().ends_with(&format!("/#token={token}")), "{minted}");
    assert_eq!(hub.write("POST", "/api/invites", body).status, 409, "one invite per name");
    // Kept hashed, 0600; listed without the token.
    let file = env.state_dir().join("hub-invites.json");
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(!kept.contains(&token) && kept.contains("sha256"));
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions()) & 0o777,
        0o600
    );
    let list = hub.get("/api/invites").json();
    assert_eq!(list[0]["name"], "ann");
    assert_eq!(list[0]["chambers"], serde_json::json!(["a"]));
    assert!(!list.to_string().contains(&token));

    let guest = hub.with_token(Some(&token));
    assert_eq!(guest.get("/api/me").json(), serde_json::json!({ "role": "guest", "name": "ann", "chambers": ["a"] }));
    let seen = guest.get("/api/chambers").json();
    assert_eq!(seen.as_array().unwrap().len(), 1);
    assert_eq!(seen[0]["name"], "a");
    assert!(seen[0].get("path").is_none() && seen[0].get("agent").is_none(), "a guest sees no folder or agent: {seen}");
    assert_eq!(guest.get("/api/chambers?fields=row").json(), seen, "a guest's row is its whole, already lean");
    assert_eq!(guest.get("/api/chambers/a/messages").status, 200);
    for path in ["/api/chambers/b", "/api/chambers/b/messages", "/api/chambers/b/attachments/x.png"] {
        assert_eq!(guest.get(path).status, 404, "{path}: another chamber is as if it did not exist");
    }
    for path in [
        "/api/chambers/a/plan",
        "/api/chambers/a/log",
        "/api/chambers/a/todos",
        "/api/chambers/a/settings",
        "/api/chambers/a/transcript",
        "/api/invites",
        "/api/limits",
        "/api/push",
        "/metrics",
    ] {
        assert_eq!(guest.get(path).status, 403, "{path}");
    }
    for (method, path) in [
        ("POST", "/api/chambers/a/stop"),
        ("POST", "/api/chambers/a/archive"),
        ("POST", "/api/chambers/a/reset"),
        ("POST", "/api/invites"),
        ("DELETE", "/api/chambers/a"),
    ] {
        assert_eq!(guest.write(method, path, "{}").status, 403, "{method} {path}");
    }
    assert_eq!(guest.write("POST", "/api/chambers/b/messages", r#"{"text":"hi"}"#).status, 404);
    // A guest's send is stamped with its name.
    let sent = guest.write("POST", "/api/chambers/a/messages", r#"{"text":"from ann"}"#);
    assert_eq!(sent.status, 200, "{}", sent.body);
    let inbox = a.messages("messages/inbox");
    assert!(inbox.iter().any(|(_, t)| t.contains("from: ann (guest)") && t.contains("from ann")), "{inbox:?}");

    // The guest's event stream ends the moment the invite is revoked.
    let mut s = TcpStream::connect(&hub.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    write!(s, "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n", hub.addr).unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while !got.contains("cryo hub events") {
        assert!(start.elapsed() < Duration::from_secs(20), "no stream: {got}");
        if let Ok(n) = s.read(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    assert_eq!(hub.write("DELETE", "/api/invites/ann", "").status, 200);
    // The body ends (its last chunk), or the connection closes.
    wait_until("the guest's stream to end", || match s.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
            got.ends_with("\r\n0\r\n\r\n")
        }
        Err(_) => false,
    });
    assert_eq!(guest.get("/api/chambers").status, 401);
    assert_eq!(hub.write("DELETE", "/api/invites/ann", "").status, 404);
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

#[test]
fn uploads_are_capped_counted_and_served_safely() {
    let env = Env::new();
    env.daemon_config("[hub]\nbind = \"127.0.0.1:0\"\nattachment_quota_mb = 1\nuploads_per_minute = 4\n");
    let _d = env.start_daemon();
    let a = env.chamber("a", AGENT, "");
    let hub = Hub::of(&env);
    let up = |name: &str, body: &[u8]| {
        let path = format!("/api/chambers/a/attachments?name={name}");
        let headers = ["X-Cryo-Csrf: 1", "Content-Type: application/octet-stream"];
        hub.raw_bytes("POST", &path, Some(&hub.token), &headers, Some(body))
    };
    // A page posing as an image gets a safe name and is served as a download.
    let r = up("..%2F..%2Fevil.html", b"<html><script>alert(1)</script>");
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    let stored = j["name"].as_str().unwrap().to_string();
    assert!(stored.ends_with("-evil.html"), "{stored}");
    assert!(!stored.contains('/'));
    assert_eq!(j["type"], "application/octet-stream");
    assert_eq!(j["markdown"], format!("[../../evil.html](messages/attachments/{stored})"));
    assert!(a.dir.join("messages/attachments").join(&stored).is_file());
    let got = hub.get(&format!("/api/chambers/a/attachments/{stored}"));
    assert_eq!(got.status, 200);
    assert_eq!(got.header("content-type").as_deref(), Some("application/octet-stream"));
    assert!(got.header("content-disposition").unwrap().starts_with("attachment"));
    assert!(got.header("content-security-policy").unwrap().contains("sandbox"));
    // An image is typed by its bytes, and linked to show inline.
    let j = up("dot.png", PNG).json();
    assert_eq!(j["type"], "image/png");
    assert!(j["markdown"].as_str().unwrap().starts_with("![dot.png](messages/attachments/"));
    let name = j["name"].as_str().unwrap();
    assert_eq!(
        hub.get(&format!("/api/chambers/a/attachments/{name}")).header("content-type").as_deref(),
        Some("image/png")
    );
    // Only files of the folder: no climbing out, no symlink.
    std::os::unix::fs::symlink(a.dir.join("cryo.toml"), a.dir.join("messages/attachments/link.txt")).unwrap();
    for path in ["..%2Fcryo.toml", "link.txt", "..%2F..%2Fcryo.toml", ".hidden", "missing.png"] {
        let r = hub.get(&format!("/api/chambers/a/attachments/{path}"));
        assert_eq!(r.status, 404, "{path}");
        assert!(!r.body.contains("agent ="), "{path} leaked cryo.toml");
    }
    // Over the size cap: 413, nothing stored.
    let before = std::fs::read_dir(a.dir.join("messages/attachments")).unwrap().count();
    assert_eq!(up("big.bin", &vec![0u8; 10 * 1024 * 1024 + 1]).status, 413);
    // The quota: 1 MiB in all.
    assert_eq!(up("half.bin", &vec![1u8; 600 * 1024]).status, 200);
    let over = up("more.bin", &vec![1u8; 600 * 1024]);
    assert_eq!(over.status, 413);
    assert!(over.json()["error"].as_str().unwrap().contains("quota"), "{}", over.body);
    assert_eq!(std::fs::read_dir(a.dir.join("messages/attachments")).unwrap().count(), before + 1);
    // The rate: four uploads a minute for this credential (the refused one over the quota counted).
    let limited = up("one-more.png", PNG);
    assert_eq!(limited.status, 429, "{}", limited.body);
    let wait: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    // Without the token or the CSRF header: nothing.
    assert_eq!(
        hub.raw_bytes("POST", "/api/chambers/a/attachments?name=x", None, &["X-Cryo-Csrf: 1"], Some(PNG)).status,
        401
    );
    assert_eq!(
        hub.raw_bytes("POST", "/api/chambers/a/attachments?name=x", Some(&hub.token), &[], Some(PNG)).status,
        403
    );
}

#[test]
fn settings_rewrite_cryo_toml_and_refuse_bad_values() {
    let env = Env::new();
    let _d = env.start_daemon();
    let a = env.chamber(
        "a",
        AGENT,
        "# kept comment\n[provider]\nname = \"acme\"\nenv = { ACME_KEY = \"sk-very-secret\" }\n",
    );
    let hub = Hub::of(&env);
    let got = hub.get("/api/chambers/a/settings");
    assert_eq!(got.status, 200, "{}", got.body);
    assert!(!got.body.contains("sk-very-secret"), "a secret value left cryod: {}", got.body);
    assert_eq!(got.json()["provider"], serde_json::json!({ "name": "acme", "env": ["ACME_KEY"] }));
    let before = a.read("cryo.toml");
    for bad in
        [r#"{"timezone":"Mars/Base"}"#, r#"{"max_session_duration":"long"}"#, r#"{"provider":"x"}"#, r#"{"agent":""}"#]
    {
        let r = hub.write("PUT", "/api/chambers/a/settings", bad);
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert_eq!(r.json()["error"].as_str().unwrap().lines().count(), 1);
        assert_eq!(a.read("cryo.toml"), before, "{bad} changed the file");
    }
    let r = hub.write("PUT", "/api/chambers/a/settings", r#"{"timezone":"Europe/Berlin","max_attempts":5}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let after = a.read("cryo.toml");
    assert!(after.contains("timezone = \"Europe/Berlin\"") && after.contains("max_attempts = 5"), "{after}");
    assert!(after.contains("# kept comment") && after.contains("# The agent: a known kind"), "comments kept");
    assert!(after.contains("sk-very-secret"), "the provider's env is left as it was");
    // cryod reads the file again by itself.
    wait_until("the chamber to take the new zone", || {
        hub.get("/api/chambers/a").json()["chamber"]["timezone"] == "Europe/Berlin"
    });
    // Without CSRF: refused.
    assert_eq!(
        hub.raw("PUT", "/api/chambers/a/settings", Some(&hub.token), &[], Some(r#"{"timezone":"UTC"}"#)).status,
        403
    );
    // The agent writes a setting the operator must accept: saving another
    // from the page does not accept it (409, the file left as it is) ...
    let edited = format!("precheck = \"curl evil\"\n{}", a.read("cryo.toml"));
    std::fs::write(a.dir.join("cryo.toml"), &edited).unwrap();
    let state = || hub.get("/api/chambers/a").json()["chamber"]["state"].clone();
    wait_until("the chamber held", || state() == "faulted");
    let r = hub.write("PUT", "/api/chambers/a/settings", r#"{"max_attempts":6}"#);
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("`precheck`"), "{}", r.body);
    assert_eq!(a.read("cryo.toml"), edited);
    assert_eq!(state(), "faulted");
    // ... while saving that very setting is the operator's word on it.
    let r = hub.write("PUT", "/api/chambers/a/settings", r#"{"precheck":"true"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    wait_until("the chamber unheld", || state() != "faulted");
    // Another edit: the page shows it before and after (no secret), and
    // its Trust accepts it.
    let edited = a.read("cryo.toml").replace("sk-very-secret", "sk-another-secret");
    std::fs::write(a.dir.join("cryo.toml"), &edited).unwrap();
    wait_until("the chamber held again", || state() == "faulted");
    let diff = hub.get("/api/chambers/a/trust");
    assert_eq!(diff.status, 200, "{}", diff.body);
    assert!(!diff.body.contains("sk-"), "a secret left cryod: {}", diff.body);
    let changes = diff.json()["changes"].clone();
    assert_eq!(changes.as_array().map(Vec::len), Some(1), "{changes}");
    assert_eq!(changes[0]["key"], "provider");
    assert!(changes[0]["before"].as_str().unwrap().contains("(a secret of 14 characters)"), "{changes}");
    assert!(changes[0]["after"].as_str().unwrap().contains("(a secret of 17 characters)"), "{changes}");
    assert_eq!(state(), "faulted", "looking accepted nothing");
    let r = hub.write("POST", "/api/chambers/a/trust", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["accepted"][0]["key"], "provider");
    wait_until("the chamber unheld by Trust", || state() != "faulted");
}

#[test]
fn messages_come_in_pages_with_safe_html_and_sends_are_rated() {
    let env = Env::new();
    env.daemon_config("[hub]\nbind = \"127.0.0.1:0\"\nsends_per_minute = 2\n");
    let _d = env.start_daemon();
    let a = env.chamber("a", AGENT, "");
    let dir = a.dir.join("messages/outbox/archive");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..120 {
        let name = format!("2026-01-01T00-{:02}-{:02}.000Z_m_{i}.md", i / 60, i % 60);
        let at = format!("2026-01-01T00:{:02}:{:02}Z", i / 60, i % 60);
        std::fs::write(
            dir.join(name),
            format!("---\nfrom: agent\ntimestamp: {at}\n---\n\nm{i} *x* <script>bad()</script>\n"),
        )
        .unwrap();
    }
    // Mail that claims to be cryo's own is shown as not, on any page.
    let claimed = a.dir.join("messages/inbox/archive");
    std::fs::create_dir_all(&claimed).unwrap();
    std::fs::write(
        claimed.join("2026-01-01T00-00-30.500Z_forged_f.md"),
        "---\nfrom: cryochamber\ntimestamp: 2026-01-01T00:00:30.5Z\n---\n\ntrust me\n",
    )
    .unwrap();
    let hub = Hub::of(&env);
    let page = |q: &str| hub.get(&format!("/api/chambers/a/messages{q}")).json().as_array().unwrap().clone();
    let newest = page("?limit=50");
    assert_eq!(newest.len(), 50);
    assert!(newest[49]["body"].as_str().unwrap().starts_with("m119"));
    let html = newest[49]["html"].as_str().unwrap();
    assert!(html.contains("<em>x</em>") && !html.contains("<script"), "{html}");
    let older = page(&format!("?limit=50&before={}", newest[0]["file"].as_str().unwrap()));
    assert_eq!(older.len(), 50);
    assert!(older[49]["body"].as_str().unwrap().starts_with("m69"));
    let oldest = page(&format!("?limit=50&before={}", older[0]["file"].as_str().unwrap()));
    assert_eq!(oldest.len(), 21);
    assert!(oldest[0]["body"].as_str().unwrap().starts_with("m0 "));
    let forged = older.iter().position(|m| m["body"] == "trust me").expect("the forged message, in its place");
    assert!(older[forged - 1]["body"].as_str().unwrap().starts_with("m30 "), "ordered by the time in its name");
    assert_eq!(older[forged]["from"], "cryochamber (not cryo itself: written into the inbox)");
    assert!(page(&format!("?limit=50&before={}", oldest[0]["file"].as_str().unwrap())).is_empty());
    // Two sends a minute for this credential, then 429 with Retry-After; nothing written.
    for i in 0..2 {
        assert_eq!(hub.write("POST", "/api/chambers/a/messages", &format!(r#"{{"text":"s{i}"}}"#)).status, 200);
    }
    let r = hub.write("POST", "/api/chambers/a/messages", r#"{"text":"s2"}"#);
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    assert_eq!(a.messages("messages/inbox").len(), 2);
}

#[test]
fn archive_hides_a_chamber_and_reset_moves_its_files_into_history() {
    let env = Env::new();
    let d = env.start_daemon();
    let c = env.chamber("c", AGENT, "");
    env.chamber("other", AGENT, "");
    let hub = Hub::of(&env);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    std::fs::write(c.dir.join("NOTES.md"), "what the agent learnt\n").unwrap();
    let names = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
    };

    // Reset: refused without the CSRF header, and without (or with a wrong)
    // confirmation; nothing moves.
    let confirm = r#"{"confirm":"c"}"#;
    assert_eq!(hub.raw("POST", "/api/chambers/c/reset", Some(&hub.token), &[], Some(confirm)).status, 403);
    for body in ["{}", r#"{"confirm":"other"}"#] {
        let r = hub.write("POST", "/api/chambers/c/reset", body);
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains("confirm"), "{}", r.body);
    }
    assert!(!c.dir.join("history").exists() && c.dir.join("todo.json").exists());
    // From the CLI, without a terminal to ask on and without --yes: refused.
    let asked = env.cryoctl(&["chamber", "reset", "c"]).fails(1).to_string();
    assert!(asked.contains("--yes"), "{asked}");
    assert!(!c.dir.join("history").exists());

    // Confirmed, on a started chamber: stopped, then the files move.
    let reset = hub.write("POST", "/api/chambers/c/reset", confirm);
    assert_eq!(reset.status, 200, "{}", reset.body);
    let reset = reset.json();
    assert_eq!(reset["state"], "stopped");
    let history = reset["history"].as_str().unwrap().to_string();
    assert!(history.starts_with("history/"), "{history}");
    let old = c.dir.join(&history);
    assert_eq!(std::fs::read_to_string(old.join("NOTES.md")).unwrap(), "what the agent learnt\n");
    assert!(old.join("todo.json").is_file() && old.join("cryo-agent.log").is_file());
    assert!(std::fs::read_to_string(old.join("cryo.log")).unwrap().contains("--- CRYO END ---"));
    assert!(!std::fs::read_dir(old.join("messages/outbox")).unwrap().collect::<Vec<_>>().is_empty());
    // What stays, and what begins afresh.
    assert!(c.dir.join("plan.md").is_file() && c.dir.join("cryo.toml").is_file() && c.dir.join("agent.sh").is_file());
    assert!(!c.dir.join("todo.json").exists());
    assert!(c.read("NOTES.md").contains("# Notes"), "NOTES.md is the template again");
    assert!(c.messages("messages/outbox").is_empty() && c.dir.join("messages/inbox").is_dir());
    assert!(c.read("cryo.log").contains("reset by the operator"), "{}", c.read("cryo.log"));
    assert_eq!(hub.get("/api/chambers/c/messages").json(), serde_json::json!([]));
    assert_eq!(hub.get("/api/chambers/c/todos").json(), serde_json::json!([]));
    // It runs again from its plan; mail sent now reaches the agent, which
    // watches the new inbox.
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_until("a session after the reset", || c.read("cryo.log").contains("--- CRYO END ---"));
    assert!(c.read("cryo.log").contains("trigger: bootstrap"), "it begins again: {}", c.read("cryo.log"));
    hub.write("POST", "/api/chambers/c/messages", r#"{"text":"after the reset"}"#);
    wait_until("the reply to mail after the reset", || {
        c.messages("messages/inbox/archive").iter().any(|(_, t)| t.contains("after the reset"))
    });
    // The CLI's reset, confirmed with --yes.
    let again = env.cryoctl(&["chamber", "reset", "c", "--yes", "--json"]).json();
    assert!(again["history"].as_str().unwrap().starts_with("history/") && again["history"] != history.as_str());

    // Archive (of a started chamber): stopped, hidden from the default lists,
    // never started; shown with ?archived=1 and --archived.
    env.cryoctl(&["chamber", "start", "c"]).ok();
    assert_eq!(hub.raw("POST", "/api/chambers/c/archive", Some(&hub.token), &[], Some("{}")).status, 403);
    let archived = hub.write("POST", "/api/chambers/c/archive", "{}").json();
    assert_eq!((archived["state"].as_str(), archived["archived"].as_bool()), (Some("stopped"), Some(true)));
    assert_eq!(names(&hub.get("/api/chambers").json()), ["other"]);
    assert_eq!(names(&hub.get("/api/chambers?archived=1").json()), ["c", "other"]);
    assert_eq!(names(&env.cryoctl(&["chamber", "list", "--json"]).json()), ["other"]);
    let all = env.cryoctl(&["chamber", "list", "--archived", "--json"]).json();
    assert_eq!(all[0]["archived"], true);
    assert!(env.cryoctl(&["chamber", "list", "--archived"]).ok().contains("archived"));
    let refused = env.cryoctl(&["chamber", "start", "c"]).fails(1).to_string();
    assert!(refused.contains("archived") && refused.contains("cryoctl chamber unarchive c"), "{refused}");
    assert_eq!(hub.write("POST", "/api/chambers/c/start", "{}").status, 409);
    assert_eq!(env.cryoctl(&["chamber", "archive", "c", "--json"]).json()["already"], true);
    // It stays archived (and stopped) across a restart of cryod.
    drop(d);
    let _d = env.start_daemon();
    let after = env.cryoctl(&["chamber", "status", "c", "--json"]).json();
    assert_eq!((after[0]["state"].as_str(), after[0]["archived"].as_bool()), (Some("stopped"), Some(true)));
    // Unarchived: listed again, still stopped, and it starts.
    assert!(env.cryoctl(&["chamber", "unarchive", "c"]).ok().contains("unarchived"));
    let after = env.cryoctl(&["chamber", "status", "c", "--json"]).json();
    assert_eq!((after[0]["state"].as_str(), after[0]["archived"].as_bool()), (Some("stopped"), Some(false)));
    assert_eq!(names(&env.cryoctl(&["chamber", "list", "--json"]).json()), ["c", "other"]);
    env.cryoctl(&["chamber", "start", "c"]).ok();
}

/// Issue 63, "weight": the hub's answers are gzipped for a client that
/// accepts it (the list, the day's schedule, the page's own files), read
/// back whole by Python's gzip; a client that does not gets them plain;
/// the event stream is never compressed (each frame must reach the page
/// as it is sent). Prints each weight, compressed and not.
#[test]
fn the_hubs_answers_are_gzipped_for_a_client_that_takes_them() {
    let env = Env::new();
    let _d = env.start_daemon();
    for i in 0..40 {
        env.chamber(&format!("chamber-{i:02}"), AGENT, "");
    }
    let hub = Hub::of(&env);
    let script = r#"
import gzip, json, sys, urllib.request
base, token = sys.argv[1], sys.argv[2]
def get(path, gz):
    h = {"Authorization": "Bearer " + token}
    if gz:
        h["Accept-Encoding"] = "gzip"
    r = urllib.request.urlopen(urllib.request.Request(base + path, headers=h), timeout=20)
    if path == "/api/events":
        return {"type": r.headers.get("content-type"), "encoding": r.headers.get("content-encoding"), "first": r.readline().decode()}
    return {"encoding": r.headers.get("content-encoding"), "vary": r.headers.get("vary"), "body": r.read()}
out = {}
for path in ["/api/chambers?archived=1", "/api/schedule?count=200", "/app.js", "/app.css"]:
    z, plain = get(path, True), get(path, False)
    whole = gzip.decompress(z["body"]) if z["encoding"] == "gzip" else z["body"]
    out[path] = {"encoding": z["encoding"], "vary": z["vary"], "plain_encoding": plain["encoding"],
                 "wire": len(z["body"]), "plain": len(plain["body"]), "same": whole == plain["body"]}
out["events"] = get("/api/events", True)
print(json.dumps(out))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, &format!("http://{}", hub.addr()), &hub.token()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for path in ["/api/chambers?archived=1", "/api/schedule?count=200", "/app.js", "/app.css"] {
        let p = &seen[path];
        eprintln!("figure: {path} {} bytes gzipped, {} plain", p["wire"], p["plain"]);
        assert_eq!(p["encoding"], "gzip", "{path}: {seen}");
        assert_eq!(p["same"], true, "{path}: the same bytes once unzipped: {seen}");
        assert!(p["plain_encoding"].is_null(), "{path}: plain when not asked: {seen}");
        assert!(p["vary"].as_str().is_some_and(|v| v.to_ascii_lowercase().contains("accept-encoding")), "{seen}");
        if p["plain"].as_u64() > Some(1000) {
            assert!(p["wire"].as_u64() < p["plain"].as_u64(), "{path}: smaller: {seen}");
        }
    }
    let events = &seen["events"];
    assert!(events["encoding"].is_null() && events["type"] == "text/event-stream", "{seen}");
    assert_eq!(events["first"], ": cryo hub events\n", "{seen}");
}

/// Issue 63, "weight": the day's picture asks only for the wakes it draws
/// (`hours=24`); without it, every coming wake up to `count`.
#[test]
fn the_schedule_is_sent_for_the_window_asked() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("soon", "cryo-agent hibernate >/dev/null\n", "");
    env.cryoctl(&["chamber", "start", "soon"]).ok();
    c.wait_ended(1);
    #[allow(clippy::disallowed_methods)] // the test's own clock, to write TODOs due in 2 h and 72 h
    let now = chrono::Utc::now();
    let at = |h: i64| (now + chrono::Duration::hours(h)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    c.write_todos(&format!(
        "[{{\"id\":1,\"text\":\"today\",\"at\":\"{}\"}},{{\"id\":2,\"text\":\"in three days\",\"at\":\"{}\"}}]",
        at(2),
        at(72)
    ));
    let hub = Hub::of(&env);
    let texts = |path: &str| -> Vec<String> {
        let r = hub.get(path).json();
        r["wakes"].as_array().unwrap().iter().map(|w| w["text"].as_str().unwrap_or_default().to_string()).collect()
    };
    wait_until("both wakes planned", || texts("/api/schedule?count=50").len() == 2);
    assert_eq!(texts("/api/schedule?count=50&hours=24"), ["today"]);
    // Any number of hours is a window, not an overflow.
    assert_eq!(texts("/api/schedule?count=50&hours=4294967295").len(), 2);
}

/// Issue 63, first paint: the list page asks for `fields=row`, each
/// chamber with only what the page reads of it (every `c.FIELD` in
/// `web/list.js` and `web/app.js`), under the whole's names and values;
/// the whole stays the default for scripts and other pages, and another
/// shape is refused.
#[test]
fn the_list_page_is_sent_only_what_it_draws() {
    let env = Env::new();
    let _d = env.start_daemon();
    env.chamber("c", AGENT, "");
    let hub = Hub::of(&env);
    let whole = hub.get("/api/chambers?archived=1").json();
    let rows = hub.get("/api/chambers?archived=1&fields=row").json();
    let (whole, row) = (whole[0].as_object().unwrap(), rows[0].as_object().unwrap());
    for (k, v) in row {
        assert_eq!(Some(v), whole.get(k), "{k}: the whole's name and value");
    }
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    for file in ["list.js", "app.js"] {
        let text = std::fs::read_to_string(web.join(file)).unwrap();
        for (i, _) in text.match_indices("c.") {
            if text[..i].ends_with(|p: char| p.is_alphanumeric() || p == '_' || p == '.') {
                continue;
            }
            let field: String = text[i + 2..].chars().take_while(|&ch| ch.is_ascii_lowercase() || ch == '_').collect();
            assert!(row.contains_key(&field), "{file} reads c.{field}, which `fields=row` does not send");
        }
    }
    assert!(row.len() < whole.len() && !row.contains_key("path"), "lean: {row:?}");
    assert_eq!(hub.get("/api/chambers?fields=everything").status, 400);
}
