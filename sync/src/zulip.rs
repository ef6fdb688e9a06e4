//! Zulip: one stream and topic, through Zulip's REST API
//! (<https://zulip.com/api/>), authenticated with HTTP basic auth (the
//! account's email and API key from a zuliprc).
//!
//! - connect: `GET /api/v1/users/me` (credentials), `GET
//!   /api/v1/get_stream_id` (the stream exists and the account sees it).
//! - pull: a real-time event queue (`POST /api/v1/register` narrowed to the
//!   stream, then long-polling `GET /api/v1/events`). A queue Zulip has
//!   garbage-collected answers `BAD_EVENT_QUEUE_ID`: register again and
//!   back-fill with `GET /api/v1/messages` from the last message id, so
//!   nothing is missed and nothing doubled (ids only grow).
//! - post: `POST /api/v1/messages`.
//! - attachments: `GET /api/v1/user_uploads/{path}` gives a temporary URL for
//!   a linked upload; `POST /api/v1/user_uploads` uploads one.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::http::{check, client, network, service_message};
use crate::{Error, Incoming, Outgoing, Remote, Result};

/// Zulip rejects longer messages (its limit is 10,000 characters).
const MAX_CONTENT_CHARS: usize = 9_500;

/// Messages fetched per back-fill request.
const BATCH: u32 = 100;

#[derive(Debug, Clone)]
pub struct Config {
    /// `https://example.zulipchat.com`
    pub site: String,
    pub email: String,
    pub key: String,
    pub stream: String,
    pub topic: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Cursor {
    /// The newest message id seen on the topic.
    pub last_id: u64,
}

pub struct Zulip {
    cfg: Config,
    site: String,
    http: reqwest::Client,
    stream_id: Option<u64>,
    /// The event queue: its id and the last event id read from it.
    queue: Option<(String, i64)>,
}

impl Zulip {
    pub fn new(cfg: Config) -> Zulip {
        let site = cfg.site.trim_end_matches('/').to_string();
        Zulip { cfg, site, http: client(), stream_id: None, queue: None }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1/{path}", self.site)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).basic_auth(&self.cfg.email, Some(&self.cfg.key))
    }

    fn post_form(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(self.url(path)).basic_auth(&self.cfg.email, Some(&self.cfg.key))
    }

    /// Sends a request and parses Zulip's JSON answer.
    async fn call(&self, req: reqwest::RequestBuilder, what: &str) -> Result<Value> {
        let resp = req.send().await.map_err(|e| network(what, e))?;
        let resp = check(resp, what).await?;
        resp.json::<Value>().await.map_err(|e| network(what, e))
    }

    fn narrow(&self) -> String {
        json!([
            { "operator": "stream", "operand": self.cfg.stream },
            { "operator": "topic", "operand": self.cfg.topic },
        ])
        .to_string()
    }

    /// Messages on the topic after `after`, oldest first.
    async fn backfill(&self, after: u64) -> Result<Vec<Value>> {
        let mut out: Vec<Value> = Vec::new();
        let mut anchor = after;
        loop {
            let req = self.get("messages").query(&[
                ("anchor", anchor.to_string()),
                ("include_anchor", "false".into()),
                ("num_before", "0".into()),
                ("num_after", BATCH.to_string()),
                ("narrow", self.narrow()),
                ("apply_markdown", "false".into()),
            ]);
            let v = self.call(req, "fetching Zulip messages").await?;
            let batch: Vec<Value> = v["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m["id"].as_u64().is_some_and(|id| id > anchor))
                .collect();
            let Some(newest) = batch.iter().filter_map(|m| m["id"].as_u64()).max() else { break };
            out.extend(batch);
            if v["found_newest"].as_bool().unwrap_or(true) {
                break;
            }
            anchor = newest;
        }
        Ok(out)
    }

    /// The newest message id on the topic (0 if it has none).
    async fn newest_id(&self) -> Result<u64> {
        let req = self.get("messages").query(&[
            ("anchor", "newest".to_string()),
            ("num_before", "1".into()),
            ("num_after", "0".into()),
            ("narrow", self.narrow()),
            ("apply_markdown", "false".into()),
        ]);
        let v = self.call(req, "fetching the newest Zulip message").await?;
        Ok(v["messages"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_u64()).max().unwrap_or(0))
    }

    /// Registers an event queue; returns its id and last event id.
    async fn register(&self) -> Result<(String, i64)> {
        let narrow = json!([["stream", self.cfg.stream]]).to_string();
        let req = self.post_form("register").form(&[
            ("event_types", r#"["message"]"#),
            ("narrow", narrow.as_str()),
            ("apply_markdown", "false"),
        ]);
        let v = self.call(req, "registering a Zulip event queue").await?;
        let id = v["queue_id"].as_str().ok_or_else(|| Error::transient("Zulip's register answer has no queue_id"))?;
        Ok((id.to_string(), v["last_event_id"].as_i64().unwrap_or(-1)))
    }

    /// Waits for events on the queue. `Ok(None)`: the queue is gone.
    async fn events(&mut self) -> Result<Option<Vec<Value>>> {
        let Some((queue, last)) = self.queue.clone() else { return Ok(None) };
        let req = self.get("events").query(&[("queue_id", queue), ("last_event_id", last.to_string())]);
        let what = "waiting for Zulip events";
        let resp = req.send().await.map_err(|e| network(what, e))?;
        if resp.status() == reqwest::StatusCode::BAD_REQUEST {
            let body = resp.text().await.unwrap_or_default();
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            if v["code"] == "BAD_EVENT_QUEUE_ID" {
                tracing::info!("the Zulip event queue expired; registering again and back-filling");
                self.queue = None;
                return Ok(None);
            }
            return Err(Error::Fatal(format!("{what}: HTTP 400: {}", service_message(&body))));
        }
        let v: Value = check(resp, what).await?.json().await.map_err(|e| network(what, e))?;
        let events = v["events"].as_array().cloned().unwrap_or_default();
        if let Some(max) = events.iter().filter_map(|e| e["id"].as_i64()).max()
            && let Some(q) = &mut self.queue
        {
            q.1 = q.1.max(max);
        }
        Ok(Some(events.into_iter().filter(|e| e["type"] == "message").map(|e| e["message"].clone()).collect()))
    }

    /// Whether a message is on our stream and topic (topics compare without
    /// case, as Zulip does).
    fn ours(&self, m: &Value) -> bool {
        let stream_ok = match (m["stream_id"].as_u64(), self.stream_id) {
            (Some(a), Some(b)) => a == b,
            _ => m["display_recipient"].as_str() == Some(self.cfg.stream.as_str()),
        };
        let topic = m["subject"].as_str().or_else(|| m["topic"].as_str()).unwrap_or("");
        m["type"] == "stream" && stream_ok && topic.to_lowercase() == self.cfg.topic.to_lowercase()
    }

    fn incoming(&self, m: &Value) -> Incoming {
        let at = m["timestamp"].as_i64().and_then(|t| DateTime::<Utc>::from_timestamp(t, 0)).unwrap_or_default();
        Incoming {
            remote_id: m["id"].as_u64().unwrap_or(0).to_string(),
            from: m["sender_full_name"].as_str().unwrap_or("someone on Zulip").to_string(),
            subject: self.cfg.topic.clone(),
            body: m["content"].as_str().unwrap_or("").to_string(),
            at,
        }
    }

    /// The messages among `raw` that are ours and newer than `after`, and the
    /// newest id among them.
    fn select(&self, raw: &[Value], after: u64) -> (Vec<Incoming>, u64) {
        let mut picked: Vec<&Value> =
            raw.iter().filter(|m| self.ours(m) && m["id"].as_u64().is_some_and(|id| id > after)).collect();
        picked.sort_by_key(|m| m["id"].as_u64());
        picked.dedup_by_key(|m| m["id"].as_u64());
        let newest = picked.iter().filter_map(|m| m["id"].as_u64()).max().unwrap_or(after);
        (picked.into_iter().map(|m| self.incoming(m)).collect(), newest)
    }

    /// The upload path of a link to one of this site's uploads.
    fn upload_path<'a>(&self, link: &'a str) -> Option<&'a str> {
        let rest = link.strip_prefix(self.site.as_str()).unwrap_or(link);
        rest.strip_prefix("/user_uploads/").filter(|p| !p.is_empty() && !p.starts_with("temporary/"))
    }
}

impl Remote for Zulip {
    type Cursor = Cursor;

    fn name(&self) -> &'static str {
        "zulip"
    }

    async fn connect(&mut self) -> Result<String> {
        let me = self.call(self.get("users/me"), "checking the Zulip credentials").await.map_err(|e| match e {
            Error::Fatal(m) => Error::Fatal(format!("{m} (check `email` and `key` in the zuliprc)")),
            e => e,
        })?;
        let req = self.get("get_stream_id").query(&[("stream", self.cfg.stream.as_str())]);
        let v = self.call(req, "looking up the Zulip stream").await.map_err(|e| match e {
            Error::Fatal(m) => Error::Fatal(format!(
                "Zulip has no stream {:?} that {} can see ({m})",
                self.cfg.stream,
                me["email"].as_str().unwrap_or(&self.cfg.email)
            )),
            e => e,
        })?;
        self.stream_id = v["stream_id"].as_u64();
        self.queue = None;
        Ok(format!("#{} > {} on {}", self.cfg.stream, self.cfg.topic, self.site))
    }

    async fn pull(&mut self, cursor: Option<&Cursor>, wait: bool) -> Result<(Vec<Incoming>, Cursor)> {
        let Some(cursor) = cursor else {
            // The first pull: start at the end of the topic's history.
            return Ok((Vec::new(), Cursor { last_id: self.newest_id().await? }));
        };
        let after = cursor.last_id;
        if !wait {
            let raw = self.backfill(after).await?;
            let (msgs, last_id) = self.select(&raw, after);
            return Ok((msgs, Cursor { last_id }));
        }
        if self.queue.is_none() {
            // Register first, then back-fill: what arrives in between is
            // in both, and ids tell the copies apart. The queue is kept only
            // once the back-fill is done: a pull cut short in between (the
            // bridge drops a long poll when the outbox changes) registers and
            // back-fills again, instead of waiting on a queue that never saw
            // what came before it.
            let queue = self.register().await?;
            let raw = self.backfill(after).await?;
            self.queue = Some(queue);
            let (msgs, last_id) = self.select(&raw, after);
            if !msgs.is_empty() {
                return Ok((msgs, Cursor { last_id }));
            }
        }
        match self.events().await? {
            Some(raw) => {
                let (msgs, last_id) = self.select(&raw, after);
                Ok((msgs, Cursor { last_id }))
            }
            // The queue expired: the next pull registers and back-fills.
            None => Ok((Vec::new(), cursor.clone())),
        }
    }

    async fn post(&mut self, msg: &Outgoing, body: &str) -> Result<String> {
        let mut content = if msg.question { format!("**Question:** {body}") } else { body.to_string() };
        if content.chars().count() > MAX_CONTENT_CHARS {
            content = content.chars().take(MAX_CONTENT_CHARS).collect();
            content.push_str(&format!(
                "\n\n… (cut short for Zulip; the whole message is in the chamber: messages/outbox/archive/{})",
                msg.name
            ));
        }
        let req = self.post_form("messages").form(&[
            ("type", "stream"),
            ("to", self.cfg.stream.as_str()),
            ("topic", self.cfg.topic.as_str()),
            ("content", content.as_str()),
        ]);
        let v = self.call(req, "posting to Zulip").await?;
        v["id"].as_u64().map(|id| id.to_string()).ok_or_else(|| Error::transient("Zulip's answer to a post has no id"))
    }

    fn poll_interval(&self) -> Option<Duration> {
        None
    }

    async fn download(&mut self, link: &str, cap: usize) -> Option<Result<Vec<u8>>> {
        let path = self.upload_path(link)?.to_string();
        Some(self.fetch_upload(&path, cap).await)
    }

    async fn upload(&mut self, file_name: &str, bytes: Vec<u8>) -> Option<Result<String>> {
        let part = reqwest::multipart::Part::bytes(bytes).file_name(file_name.to_string());
        let form = reqwest::multipart::Form::new().part("filename", part);
        let req = self.post_form("user_uploads").multipart(form);
        Some(self.call(req, "uploading to Zulip").await.and_then(|v| {
            v["url"]
                .as_str()
                .or_else(|| v["uri"].as_str())
                .map(str::to_string)
                .ok_or_else(|| Error::transient("Zulip's upload answer has no url"))
        }))
    }
}

impl Zulip {
    async fn fetch_upload(&self, path: &str, cap: usize) -> Result<Vec<u8>> {
        let v = self.call(self.get(&format!("user_uploads/{path}")), "asking Zulip for an upload's URL").await?;
        let url = v["url"].as_str().ok_or_else(|| Error::transient("Zulip gave no temporary URL for an upload"))?;
        let url = if url.starts_with('/') { format!("{}{url}", self.site) } else { url.to_string() };
        if !url.starts_with(&self.site) {
            return Err(Error::transient("Zulip's temporary URL points at another site; not followed"));
        }
        let what = "downloading a Zulip upload";
        let mut resp = check(self.http.get(&url).send().await.map_err(|e| network(what, e))?, what).await?;
        if resp.content_length().is_some_and(|n| n as usize > cap) {
            return Err(Error::transient(format!("the upload is larger than {cap} bytes; not downloaded")));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| network(what, e))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > cap {
                return Err(Error::transient(format!("the upload is larger than {cap} bytes; not downloaded")));
            }
        }
        Ok(bytes)
    }
}
