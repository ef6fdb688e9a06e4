//! A GitHub API server on 127.0.0.1, for the sync bridge's tests: the REST
//! and GraphQL calls the bridge makes, as GitHub's documentation describes
//! them. Every call needs `Authorization: Bearer TOKEN` (401 "Bad
//! credentials" otherwise) and a `User-Agent` (403 otherwise, as GitHub).
//!
//! - `GET /user`
//! - `GET /repos/{owner}/{repo}/issues/{n}`
//! - `GET /repos/{owner}/{repo}/issues/{n}/comments?since=&per_page=&page=`
//!   (pages linked with `Link: <…>; rel="next"`, an `ETag`, and 304 for a
//!   matching `If-None-Match`)
//! - `POST /repos/{owner}/{repo}/issues/{n}/comments` (`{"body"}`, 201)
//! - `POST /graphql`: `repository.discussion.id`, `discussion.comments(first,
//!   after)` with `pageInfo`, and the `addDiscussionComment` mutation.
//! - `GET /repos/{owner}/{repo}/pulls?head=OWNER:BRANCH&state=open`, `POST
//!   …/pulls` (`{title, head, base, body, draft}`, 201), `PATCH …/pulls/{n}`.
//! - Git over HTTP at `/{owner}/{repo}.git/…` once [`FakeGithub::serve_git`]
//!   made the repository: the real `git http-backend` (smart HTTP), behind
//!   `Authorization: Basic` with the token as its password, as GitHub takes
//!   it (401 with `WWW-Authenticate` otherwise).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

pub const TOKEN: &str = "ghp_cryoTestToken0123456789";
pub const LOGIN: &str = "cryo-bot";
pub const OWNER: &str = "acme";
pub const REPO: &str = "widgets";
pub const ISSUE: u64 = 12;
pub const DISCUSSION: u64 = 34;

#[derive(Clone, Debug)]
pub struct Comment {
    pub id: u64,
    pub login: String,
    pub body: String,
    pub created_at: String,
}

#[derive(Default)]
pub struct World {
    pub issue: Vec<Comment>,
    pub discussion: Vec<Comment>,
    next_id: u64,
    /// The largest page the server hands out (GitHub: 100).
    pub max_page: usize,
    fails: Vec<(String, u16, Option<u64>, u32)>,
    pub calls: Vec<(String, String, std::time::Instant)>,
    pub not_modified: u32,
    pub unauthenticated: u32,
    pub pulls: Vec<Pull>,
    /// Where `{owner}/{repo}.git` is served from (none: no git).
    git_root: Option<std::path::PathBuf>,
}

/// A pull request as made through the API.
#[derive(Clone, Debug, PartialEq)]
pub struct Pull {
    pub number: u64,
    pub title: String,
    pub head: String,
    pub base: String,
    pub body: String,
    pub draft: bool,
}

pub struct FakeGithub {
    pub addr: SocketAddr,
    world: Arc<Mutex<World>>,
    _runtime: tokio::runtime::Runtime,
}

type Shared = Arc<Mutex<World>>;

impl FakeGithub {
    pub fn start() -> FakeGithub {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let world = Arc::new(Mutex::new(World { next_id: 5000, max_page: 100, ..World::default() }));
        let app = axum::Router::new()
            .route("/user", get(user))
            .route("/repos/{owner}/{repo}/issues/{n}", get(issue))
            .route("/repos/{owner}/{repo}/issues/{n}/comments", get(list_comments).post(create_comment))
            .route("/graphql", post(graphql))
            .route("/repos/{owner}/{repo}/pulls", get(list_pulls).post(create_pull))
            .route("/repos/{owner}/{repo}/pulls/{n}", axum::routing::patch(update_pull))
            .route("/{owner}/{repo}/{*rest}", axum::routing::any(git_http))
            .with_state(world.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("listen");
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeGithub { addr, world, _runtime: runtime }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A comment by `login` on the issue (or the discussion).
    pub fn comment(&self, discussion: bool, login: &str, body: &str) -> u64 {
        add(&self.world, discussion, login, body)
    }

    pub fn comments(&self, discussion: bool) -> Vec<Comment> {
        let w = self.world.lock().unwrap();
        if discussion { w.discussion.clone() } else { w.issue.clone() }
    }

    pub fn set_max_page(&self, n: usize) {
        self.world.lock().unwrap().max_page = n;
    }

    /// The next `count` calls whose path starts with `path` answer `status`.
    pub fn fail(&self, path: &str, status: u16, retry_after: Option<u64>, count: u32) {
        self.world.lock().unwrap().fails.push((path.into(), status, retry_after, count));
    }

    pub fn calls(&self, path: &str) -> Vec<std::time::Instant> {
        self.world.lock().unwrap().calls.iter().filter(|c| c.1.starts_with(path)).map(|c| c.2).collect()
    }

    /// Serves `OWNER/REPO.git` over HTTP from a bare repository under
    /// `root`; returns its folder (to look into with git).
    pub fn serve_git(&self, root: &std::path::Path) -> std::path::PathBuf {
        let bare = root.join(OWNER).join(format!("{REPO}.git"));
        std::fs::create_dir_all(&bare).unwrap();
        let ok = std::process::Command::new("git").args(["init", "-q", "--bare", "-b", "main"]).arg(&bare).status();
        assert!(ok.is_ok_and(|s| s.success()), "git init --bare");
        self.world.lock().unwrap().git_root = Some(root.to_path_buf());
        bare
    }

    /// The repository's URL, as a clone would name it.
    pub fn git_url(&self) -> String {
        format!("http://{}/{OWNER}/{REPO}.git", self.addr)
    }

    /// Calls refused for their credentials.
    pub fn unauthenticated(&self) -> u32 {
        self.world.lock().unwrap().unauthenticated
    }

    pub fn pulls(&self) -> Vec<Pull> {
        self.world.lock().unwrap().pulls.clone()
    }

    pub fn not_modified(&self) -> u32 {
        self.world.lock().unwrap().not_modified
    }
}

fn add(world: &Mutex<World>, discussion: bool, login: &str, body: &str) -> u64 {
    let mut w = world.lock().unwrap();
    let id = w.next_id;
    w.next_id += 7;
    let c = Comment {
        id,
        login: login.into(),
        body: body.into(),
        created_at: format!("2026-11-22T10:{:02}:{:02}Z", (id / 60) % 60, id % 60),
    };
    if discussion {
        w.discussion.push(c)
    } else {
        w.issue.push(c)
    }
    id
}

fn message(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(json!({ "message": msg, "documentation_url": "https://docs.github.com/rest" }))).into_response()
}

fn gate(world: &Mutex<World>, method: &str, path: &str, h: &HeaderMap) -> Option<Response> {
    let mut w = world.lock().unwrap();
    w.calls.push((method.into(), path.into(), std::time::Instant::now()));
    if h.get("user-agent").is_none() {
        return Some(message(
            StatusCode::FORBIDDEN,
            "Request forbidden by administrative rules. Please make sure your request has a User-Agent header",
        ));
    }
    let auth = h.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    if auth != format!("Bearer {TOKEN}") && auth != format!("token {TOKEN}") {
        w.unauthenticated += 1;
        return Some(message(StatusCode::UNAUTHORIZED, "Bad credentials"));
    }
    if let Some(f) = w.fails.iter_mut().find(|f| path.starts_with(&f.0) && f.3 > 0) {
        f.3 -= 1;
        let mut r = message(StatusCode::from_u16(f.1).unwrap(), "Server Error");
        if let Some(s) = f.2 {
            r.headers_mut().insert("retry-after", s.to_string().parse().unwrap());
        }
        return Some(r);
    }
    None
}

fn comment_json(c: &Comment) -> Value {
    json!({
        "id": c.id, "node_id": format!("IC_{}", c.id), "body": c.body,
        "user": { "login": c.login, "id": 1, "type": "User" },
        "created_at": c.created_at, "updated_at": c.created_at,
        "html_url": format!("https://github.com/{OWNER}/{REPO}/issues/{ISSUE}#issuecomment-{}", c.id),
    })
}

fn right_repo(owner: &str, repo: &str, n: u64) -> bool {
    owner == OWNER && repo == REPO && n == ISSUE
}

async fn user(State(w): State<Shared>, h: HeaderMap) -> Response {
    if let Some(r) = gate(&w, "GET", "/user", &h) {
        return r;
    }
    axum::Json(json!({ "login": LOGIN, "id": 1, "type": "User" })).into_response()
}

async fn issue(State(w): State<Shared>, h: HeaderMap, Path((owner, repo, n)): Path<(String, String, u64)>) -> Response {
    if let Some(r) = gate(&w, "GET", &format!("/repos/{owner}/{repo}/issues/{n}"), &h) {
        return r;
    }
    if !right_repo(&owner, &repo, n) {
        return message(StatusCode::NOT_FOUND, "Not Found");
    }
    axum::Json(json!({ "number": n, "title": "Widgets", "state": "open" })).into_response()
}

async fn list_comments(
    State(w): State<Shared>,
    h: HeaderMap,
    Path((owner, repo, n)): Path<(String, String, u64)>,
    Query(q): Query<HashMap<String, String>>,
    uri: axum::http::Uri,
) -> Response {
    let path = format!("/repos/{owner}/{repo}/issues/{n}/comments");
    if let Some(r) = gate(&w, "GET", &path, &h) {
        return r;
    }
    if !right_repo(&owner, &repo, n) {
        return message(StatusCode::NOT_FOUND, "Not Found");
    }
    let mut world = w.lock().unwrap();
    let per_page = q.get("per_page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(30).clamp(1, world.max_page);
    let page = q.get("page").and_then(|v| v.parse::<usize>().ok()).unwrap_or(1).max(1);
    let since = q.get("since").cloned();
    let all: Vec<&Comment> =
        world.issue.iter().filter(|c| since.as_ref().is_none_or(|s| c.created_at.as_str() >= s.as_str())).collect();
    let chunk: Vec<Value> = all.iter().skip((page - 1) * per_page).take(per_page).map(|c| comment_json(c)).collect();
    let body = Value::Array(chunk).to_string();
    let etag = format!("W/\"{:x}\"", fnv(&format!("{uri}{body}")));
    if h.get("if-none-match").and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        world.not_modified += 1;
        return (StatusCode::NOT_MODIFIED, [("etag", etag)]).into_response();
    }
    let mut resp =
        (StatusCode::OK, [("content-type", "application/json"), ("etag", etag.as_str())], body).into_response();
    if page * per_page < all.len() {
        let host = h.get("host").and_then(|v| v.to_str().ok()).unwrap_or("127.0.0.1");
        let mut next = format!("http://{host}{path}?per_page={per_page}&page={}", page + 1);
        if let Some(s) = since {
            next.push_str(&format!("&since={s}"));
        }
        resp.headers_mut().insert("link", format!("<{next}>; rel=\"next\"").parse().unwrap());
    }
    resp
}

async fn create_comment(
    State(w): State<Shared>,
    h: HeaderMap,
    Path((owner, repo, n)): Path<(String, String, u64)>,
    body: String,
) -> Response {
    if let Some(r) = gate(&w, "POST", &format!("/repos/{owner}/{repo}/issues/{n}/comments"), &h) {
        return r;
    }
    if !right_repo(&owner, &repo, n) {
        return message(StatusCode::NOT_FOUND, "Not Found");
    }
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let Some(text) = v["body"].as_str() else {
        return message(StatusCode::UNPROCESSABLE_ENTITY, "Invalid request.\n\n\"body\" wasn't supplied.");
    };
    let id = add(&w, false, LOGIN, text);
    let c = w.lock().unwrap().issue.iter().find(|c| c.id == id).cloned().unwrap();
    (StatusCode::CREATED, axum::Json(comment_json(&c))).into_response()
}

async fn graphql(State(w): State<Shared>, h: HeaderMap, body: String) -> Response {
    if let Some(r) = gate(&w, "POST", "/graphql", &h) {
        return r;
    }
    let req: Value = serde_json::from_str(&body).unwrap_or_default();
    let query = req["query"].as_str().unwrap_or("");
    let vars = &req["variables"];
    let found = vars["owner"] == OWNER && vars["name"] == REPO && vars["number"] == DISCUSSION;
    if query.contains("addDiscussionComment") {
        if vars["id"] != "D_kwDOcryo34" {
            return axum::Json(
                json!({ "data": null, "errors": [{ "type": "NOT_FOUND", "message": "Could not resolve to a node" }] }),
            )
            .into_response();
        }
        let id = add(&w, true, LOGIN, vars["body"].as_str().unwrap_or(""));
        return axum::Json(json!({ "data": { "addDiscussionComment": { "comment": { "id": format!("DC_{id}"), "databaseId": id } } } })).into_response();
    }
    if !found {
        return axum::Json(json!({
            "data": { "repository": { "discussion": null } },
            "errors": [{ "type": "NOT_FOUND", "path": ["repository", "discussion"],
                         "message": format!("Could not resolve to a Discussion with the number of {}.", vars["number"]) }],
        }))
        .into_response();
    }
    if query.contains("comments(") {
        let w = w.lock().unwrap();
        let per = w.max_page.min(100);
        let start = vars["after"]
            .as_str()
            .and_then(|c| c.strip_prefix("cursor:"))
            .and_then(|n| n.parse::<usize>().ok())
            .map(|n| n + 1)
            .unwrap_or(0);
        let page: Vec<(usize, &Comment)> = w.discussion.iter().enumerate().skip(start).take(per).collect();
        let nodes: Vec<Value> = page
            .iter()
            .map(|(_, c)| json!({ "id": format!("DC_{}", c.id), "databaseId": c.id, "body": c.body, "createdAt": c.created_at, "author": { "login": c.login } }))
            .collect();
        let end = page.last().map(|(i, _)| format!("cursor:{i}"));
        let more = start + page.len() < w.discussion.len();
        return axum::Json(json!({ "data": { "repository": { "discussion": { "comments": {
            "nodes": nodes, "pageInfo": { "endCursor": end, "hasNextPage": more } } } } } }))
        .into_response();
    }
    axum::Json(json!({ "data": { "repository": { "discussion": { "id": "D_kwDOcryo34" } } } })).into_response()
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

fn pull_json(p: &Pull) -> Value {
    json!({
        "number": p.number, "title": p.title, "body": p.body, "draft": p.draft, "state": "open",
        "head": { "ref": p.head, "label": format!("{OWNER}:{}", p.head) },
        "base": { "ref": p.base },
        "html_url": format!("https://github.com/{OWNER}/{REPO}/pull/{}", p.number),
    })
}

async fn list_pulls(
    State(w): State<Shared>,
    h: HeaderMap,
    Path((owner, repo)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = gate(&w, "GET", &format!("/repos/{owner}/{repo}/pulls"), &h) {
        return r;
    }
    let head = q.get("head").cloned().unwrap_or_default();
    let w = w.lock().unwrap();
    let found: Vec<Value> =
        w.pulls.iter().filter(|p| head.is_empty() || format!("{OWNER}:{}", p.head) == head).map(pull_json).collect();
    axum::Json(Value::Array(found)).into_response()
}

async fn create_pull(
    State(w): State<Shared>,
    h: HeaderMap,
    Path((owner, repo)): Path<(String, String)>,
    body: String,
) -> Response {
    if let Some(r) = gate(&w, "POST", &format!("/repos/{owner}/{repo}/pulls"), &h) {
        return r;
    }
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let mut world = w.lock().unwrap();
    // GitHub refuses a pull request from a branch it does not have.
    let pushed = world.git_root.as_ref().is_some_and(|root| {
        let bare = root.join(OWNER).join(format!("{REPO}.git"));
        std::process::Command::new("git")
            .args([
                "--git-dir",
                &bare.to_string_lossy(),
                "rev-parse",
                "--verify",
                "-q",
                &format!("refs/heads/{}", text("head")),
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !pushed {
        return message(StatusCode::UNPROCESSABLE_ENTITY, "Validation Failed: head does not exist");
    }
    let number = world.pulls.len() as u64 + 1;
    let p = Pull {
        number,
        title: text("title"),
        head: text("head"),
        base: text("base"),
        body: text("body"),
        draft: v["draft"] == true,
    };
    world.pulls.push(p.clone());
    (StatusCode::CREATED, axum::Json(pull_json(&p))).into_response()
}

async fn update_pull(
    State(w): State<Shared>,
    h: HeaderMap,
    Path((owner, repo, n)): Path<(String, String, u64)>,
    body: String,
) -> Response {
    if let Some(r) = gate(&w, "PATCH", &format!("/repos/{owner}/{repo}/pulls/{n}"), &h) {
        return r;
    }
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let mut world = w.lock().unwrap();
    let Some(p) = world.pulls.iter_mut().find(|p| p.number == n) else {
        return message(StatusCode::NOT_FOUND, "Not Found");
    };
    if let Some(b) = v["body"].as_str() {
        p.body = b.to_string();
    }
    axum::Json(pull_json(p)).into_response()
}

/// Git's smart HTTP through the real `git http-backend` (a CGI program).
async fn git_http(
    State(w): State<Shared>,
    method: axum::http::Method,
    h: HeaderMap,
    uri: axum::http::Uri,
    body: axum::body::Bytes,
) -> Response {
    use base64::Engine;
    let root = w.lock().unwrap().git_root.clone();
    let Some(root) = root else { return message(StatusCode::NOT_FOUND, "Not Found") };
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN}"));
    let auth = h.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    if auth != format!("Basic {basic}") {
        w.lock().unwrap().unauthenticated += 1;
        let mut r = (StatusCode::UNAUTHORIZED, "Authentication failed").into_response();
        r.headers_mut().insert("www-authenticate", "Basic realm=\"GitHub\"".parse().unwrap());
        return r;
    }
    let header = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REMOTE_USER", LOGIN)
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("git http-backend");
    let mut stdin = child.stdin.take().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.expect("git http-backend");
    // CGI: headers, a blank line, the body.
    let split = out.stdout.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    let split = split.or_else(|| out.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, gap)) = split else { return (StatusCode::INTERNAL_SERVER_ERROR, "bad CGI output").into_response() };
    let mut response = axum::http::Response::builder().status(200);
    for line in String::from_utf8_lossy(&out.stdout[..at]).lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        if k.eq_ignore_ascii_case("status") {
            let code = v.trim().split(' ').next().and_then(|c| c.parse().ok()).unwrap_or(200);
            response = response.status(code);
        } else {
            response = response.header(k.trim(), v.trim());
        }
    }
    response.body(axum::body::Body::from(out.stdout[at + gap..].to_vec())).unwrap().into_response()
}
