//! GitHub: the comments of one Issue (REST) or one Discussion (GraphQL),
//! with a token sent as `Authorization: Bearer`.
//!
//! - connect: `GET /user` (the token), then `GET /repos/{owner}/{repo}/issues/{n}`
//!   or the discussion's node id by GraphQL (the conversation exists and the
//!   token can read it).
//! - Issue: `GET /repos/{owner}/{repo}/issues/{n}/comments?since=…&per_page=100`,
//!   following `Link: rel="next"`, with `If-None-Match` on the ETag of the
//!   last answer (a 304 costs no rate limit); `POST …/comments` to post.
//!   Comment ids only grow, so `id > last_id` tells what is new.
//! - Discussion: `repository.discussion.comments(first: 100, after: CURSOR)`
//!   pages; `addDiscussionComment` to post.
//!
//! GitHub has no long poll for these, so the bridge polls every
//! `poll_interval` seconds. Its API has no attachment uploads: links stay as
//! they are.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::http::{check, client, network};
use crate::{Error, Incoming, Outgoing, Remote, Result};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    Issue(u64),
    Discussion(u64),
}

#[derive(Debug, Clone)]
pub struct Config {
    /// `https://api.github.com`, or a GitHub Enterprise `https://HOST/api/v3`.
    pub api_url: String,
    pub owner: String,
    pub repo: String,
    pub target: Target,
    pub token: String,
    pub poll_interval: Duration,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Cursor {
    /// Issue: the newest comment id seen.
    #[serde(default)]
    pub last_id: u64,
    /// Issue: the `since` of the next listing (the newest comment's time).
    #[serde(default)]
    pub since: Option<String>,
    /// Issue: the ETag of the last listing's first page, and its URL.
    #[serde(default)]
    pub etag: Option<(String, String)>,
    /// Discussion: the end cursor of the comments read so far.
    #[serde(default)]
    pub after: Option<String>,
}

pub struct Github {
    cfg: Config,
    api: String,
    http: reqwest::Client,
    discussion_id: Option<String>,
}

const DISCUSSION_COMMENTS: &str = "query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    discussion(number: $number) {
      comments(first: 100, after: $after) {
        nodes { id databaseId body createdAt author { login } }
        pageInfo { endCursor hasNextPage }
      }
    }
  }
}";

const DISCUSSION_ID: &str = "query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) { discussion(number: $number) { id } }
}";

const ADD_COMMENT: &str = "mutation($id: ID!, $body: String!) {
  addDiscussionComment(input: { discussionId: $id, body: $body }) { comment { id databaseId } }
}";

impl Github {
    pub fn new(cfg: Config) -> Github {
        let api = cfg.api_url.trim_end_matches('/').to_string();
        Github { cfg, api, http: client(), discussion_id: None }
    }

    /// GraphQL lives beside the REST root: `/graphql` on api.github.com,
    /// `/api/graphql` on an Enterprise server (REST at `/api/v3`).
    fn graphql_url(&self) -> String {
        match self.api.strip_suffix("/api/v3") {
            Some(host) => format!("{host}/api/graphql"),
            None => format!("{}/graphql", self.api),
        }
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, url)
            .bearer_auth(&self.cfg.token)
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
    }

    fn repo_path(&self) -> String {
        format!("{}/repos/{}/{}", self.api, self.cfg.owner, self.cfg.repo)
    }

    fn where_(&self) -> String {
        match self.cfg.target {
            Target::Issue(n) => format!("{}/{}#{n}", self.cfg.owner, self.cfg.repo),
            Target::Discussion(n) => format!("{}/{} discussion #{n}", self.cfg.owner, self.cfg.repo),
        }
    }

    async fn graphql(&self, query: &str, variables: Value, what: &str) -> Result<Value> {
        let req = self.request(reqwest::Method::POST, &self.graphql_url()).json(&json!({
            "query": query, "variables": variables,
        }));
        let resp = check(req.send().await.map_err(|e| network(what, e))?, what).await?;
        let v: Value = resp.json().await.map_err(|e| network(what, e))?;
        if let Some(errors) = v["errors"].as_array().filter(|e| !e.is_empty()) {
            let first = &errors[0];
            let msg = format!("{what}: {}", first["message"].as_str().unwrap_or("GraphQL error"));
            return Err(match first["type"].as_str() {
                Some("RATE_LIMITED") => Error::Transient { message: msg, retry_after: Some(Duration::from_secs(60)) },
                _ => Error::Fatal(msg),
            });
        }
        Ok(v["data"].clone())
    }

    /// Every page of a REST listing, following `Link: rel="next"` within the
    /// API's own origin. The first page is conditional on `etag`; `None`
    /// means it did not change (304).
    async fn list_pages(&self, first: String, etag: Option<&str>) -> Result<Option<(Vec<Value>, Option<String>)>> {
        let what = "listing the issue's comments";
        let mut url = first;
        let mut items = Vec::new();
        let mut new_etag = None;
        let mut page = 0;
        loop {
            let mut req = self.request(reqwest::Method::GET, &url);
            if page == 0
                && let Some(tag) = etag
            {
                req = req.header("If-None-Match", tag);
            }
            let resp = check(req.send().await.map_err(|e| network(what, e))?, what).await?;
            if resp.status() == reqwest::StatusCode::NOT_MODIFIED {
                return Ok(None);
            }
            if page == 0 {
                new_etag = resp.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_string);
            }
            let next = resp.headers().get("link").and_then(|v| v.to_str().ok()).and_then(next_link);
            let batch: Vec<Value> = resp.json().await.map_err(|e| network(what, e))?;
            items.extend(batch);
            page += 1;
            match next {
                Some(n) if n.starts_with(&self.api) && page < 100 => url = n,
                _ => break,
            }
        }
        Ok(Some((items, new_etag)))
    }

    async fn pull_issue(&mut self, n: u64, cursor: Option<&Cursor>) -> Result<(Vec<Incoming>, Cursor)> {
        let mut url = format!("{}/issues/{n}/comments?per_page=100", self.repo_path());
        let mut cur = cursor.cloned().unwrap_or_default();
        if let Some(since) = &cur.since {
            url.push_str(&format!("&since={since}"));
        }
        let etag = cur.etag.as_ref().filter(|(u, _)| *u == url).map(|(_, t)| t.as_str());
        let Some((items, etag)) = self.list_pages(url.clone(), etag).await? else {
            return Ok((Vec::new(), cur));
        };
        let mut fresh: Vec<&Value> =
            items.iter().filter(|c| c["id"].as_u64().is_some_and(|id| id > cur.last_id)).collect();
        fresh.sort_by_key(|c| c["id"].as_u64());
        if let Some(newest) = fresh.last() {
            cur.last_id = newest["id"].as_u64().unwrap_or(cur.last_id);
            cur.since = newest["created_at"].as_str().map(str::to_string).or(cur.since);
        }
        cur.etag = etag.map(|t| (url, t));
        let msgs = match cursor {
            // The first pull: history is not delivered.
            None => Vec::new(),
            Some(_) => fresh
                .into_iter()
                .map(|c| {
                    self.incoming(c["id"].as_u64().unwrap_or(0), &c["user"]["login"], &c["body"], &c["created_at"])
                })
                .collect(),
        };
        Ok((msgs, cur))
    }

    async fn pull_discussion(&mut self, n: u64, cursor: Option<&Cursor>) -> Result<(Vec<Incoming>, Cursor)> {
        let mut cur = cursor.cloned().unwrap_or_default();
        let mut msgs = Vec::new();
        loop {
            let vars = json!({
                "owner": self.cfg.owner, "name": self.cfg.repo, "number": n, "after": cur.after,
            });
            let data = self.graphql(DISCUSSION_COMMENTS, vars, "reading the discussion's comments").await?;
            let comments = &data["repository"]["discussion"]["comments"];
            for c in comments["nodes"].as_array().into_iter().flatten() {
                if cursor.is_some() {
                    let id = c["databaseId"].as_u64().unwrap_or(0);
                    msgs.push(self.incoming(id, &c["author"]["login"], &c["body"], &c["createdAt"]));
                }
            }
            if let Some(end) = comments["pageInfo"]["endCursor"].as_str() {
                cur.after = Some(end.to_string());
            }
            if comments["pageInfo"]["hasNextPage"].as_bool() != Some(true) {
                break;
            }
        }
        Ok((msgs, cur))
    }

    fn incoming(&self, id: u64, login: &Value, body: &Value, at: &Value) -> Incoming {
        Incoming {
            remote_id: id.to_string(),
            from: login.as_str().unwrap_or("ghost").to_string(),
            subject: self.where_(),
            body: body.as_str().unwrap_or("").to_string(),
            at: at
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc))
                .unwrap_or_default(),
        }
    }
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (url, rel) = part.split_once(';')?;
        rel.contains("rel=\"next\"").then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

impl Remote for Github {
    type Cursor = Cursor;

    fn name(&self) -> &'static str {
        "github"
    }

    async fn connect(&mut self) -> Result<String> {
        let what = "checking the GitHub token";
        let req = self.request(reqwest::Method::GET, &format!("{}/user", self.api));
        let resp = check(req.send().await.map_err(|e| network(what, e))?, what).await?;
        let me: Value = resp.json().await.map_err(|e| network(what, e))?;
        let login = me["login"].as_str().unwrap_or("?").to_string();
        match self.cfg.target {
            Target::Issue(n) => {
                let what = "looking up the issue";
                let req = self.request(reqwest::Method::GET, &format!("{}/issues/{n}", self.repo_path()));
                let resp = req.send().await.map_err(|e| network(what, e))?;
                if resp.status() == reqwest::StatusCode::NOT_FOUND {
                    return Err(Error::Fatal(format!("GitHub has no issue {} that {login} can read", self.where_())));
                }
                check(resp, what).await?;
            }
            Target::Discussion(n) => {
                let vars = json!({ "owner": self.cfg.owner, "name": self.cfg.repo, "number": n });
                let data = self.graphql(DISCUSSION_ID, vars, "looking up the discussion").await?;
                let id = data["repository"]["discussion"]["id"]
                    .as_str()
                    .ok_or_else(|| Error::Fatal(format!("GitHub has no {} that {login} can read", self.where_())))?;
                self.discussion_id = Some(id.to_string());
            }
        }
        Ok(format!("{} as {login}", self.where_()))
    }

    async fn pull(&mut self, cursor: Option<&Cursor>, _wait: bool) -> Result<(Vec<Incoming>, Cursor)> {
        match self.cfg.target {
            Target::Issue(n) => self.pull_issue(n, cursor).await,
            Target::Discussion(n) => self.pull_discussion(n, cursor).await,
        }
    }

    async fn post(&mut self, msg: &Outgoing, body: &str) -> Result<String> {
        let body = if msg.question { format!("**Question:** {body}") } else { body.to_string() };
        match self.cfg.target {
            Target::Issue(n) => {
                let what = "posting a comment";
                let req = self
                    .request(reqwest::Method::POST, &format!("{}/issues/{n}/comments", self.repo_path()))
                    .json(&json!({ "body": body }));
                let resp = check(req.send().await.map_err(|e| network(what, e))?, what).await?;
                let v: Value = resp.json().await.map_err(|e| network(what, e))?;
                v["id"].as_u64().map(|id| id.to_string()).ok_or_else(|| Error::transient("GitHub's answer has no id"))
            }
            Target::Discussion(_) => {
                let id = self.discussion_id.clone().ok_or_else(|| Error::transient("not connected"))?;
                let data = self
                    .graphql(ADD_COMMENT, json!({ "id": id, "body": body }), "posting a discussion comment")
                    .await?;
                data["addDiscussionComment"]["comment"]["databaseId"]
                    .as_u64()
                    .map(|id| id.to_string())
                    .ok_or_else(|| Error::transient("GitHub's answer has no comment id"))
            }
        }
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(self.cfg.poll_interval)
    }

    async fn download(&mut self, _link: &str, _cap: usize) -> Option<Result<Vec<u8>>> {
        None
    }

    async fn upload(&mut self, _file_name: &str, _bytes: Vec<u8>) -> Option<Result<String>> {
        None
    }
}

/// A draft pull request of `head` into `base` in the configured
/// repository: the open one from that branch (its body brought up to
/// date), else a new draft. Returns its number and page. (`POST /repos/{o}/{r}/pulls`
/// with `draft: true`; `GET …/pulls?head=OWNER:BRANCH&state=open`; `PATCH
/// …/pulls/{n}`.)
pub async fn draft_pull_request(
    cfg: &Config,
    head: &str,
    base: &str,
    title: &str,
    body: &str,
) -> Result<(u64, String)> {
    let gh = Github::new(cfg.clone());
    let pulls = format!("{}/pulls", gh.repo_path());
    let what = "GitHub: the branch's pull request";
    let query = [("head", format!("{}:{head}", cfg.owner)), ("state", "open".into())];
    let req = gh.request(reqwest::Method::GET, &pulls).query(&query);
    let resp = check(req.send().await.map_err(|e| network(what, e))?, what).await?;
    let open: Vec<Value> = resp.json().await.map_err(|e| network(what, e))?;
    let page = |p: &Value| p["html_url"].as_str().unwrap_or_default().to_string();
    if let Some((n, url)) = open.first().and_then(|p| Some((p["number"].as_u64()?, page(p)))) {
        let req = gh.request(reqwest::Method::PATCH, &format!("{pulls}/{n}")).json(&json!({ "body": body }));
        check(req.send().await.map_err(|e| network(what, e))?, what).await?;
        return Ok((n, url));
    }
    let made = json!({ "title": title, "head": head, "base": base, "body": body, "draft": true });
    let req = gh.request(reqwest::Method::POST, &pulls).json(&made);
    let resp = check(req.send().await.map_err(|e| network(what, e))?, what).await?;
    let v: Value = resp.json().await.map_err(|e| network(what, e))?;
    let n = v["number"].as_u64().ok_or_else(|| Error::Fatal(format!("{what}: GitHub's answer names no number")))?;
    Ok((n, page(&v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers_and_graphql_urls() {
        let h = r#"<https://api.github.com/repositories/1/issues/2/comments?page=2>; rel="next", <https://api.github.com/repositories/1/issues/2/comments?page=5>; rel="last""#;
        assert_eq!(next_link(h).unwrap(), "https://api.github.com/repositories/1/issues/2/comments?page=2");
        assert_eq!(next_link(r#"<https://x?page=1>; rel="prev""#), None);
        let cfg = |api: &str| Config {
            api_url: api.into(),
            owner: "o".into(),
            repo: "r".into(),
            target: Target::Issue(1),
            token: "t".into(),
            poll_interval: Duration::from_secs(30),
        };
        assert_eq!(Github::new(cfg("https://api.github.com/")).graphql_url(), "https://api.github.com/graphql");
        assert_eq!(Github::new(cfg("https://ghe.example/api/v3")).graphql_url(), "https://ghe.example/api/graphql");
    }
}
