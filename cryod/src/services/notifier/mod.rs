//! Reaching people: the notifiers of `cryod.toml` (`[[notify]]`) deliver
//! the events a chamber's machine raises (`cryo_core::chamber::notice`) and
//! the daemon's own. Each notifier delivers an event once (by its id), at
//! most `max_per_hour` per chamber, holds all but `question` and `daemon`
//! through its quiet hours, and retries with back-off; every delivery runs
//! in a task of its own, so no wake ever waits for a person's phone.
//! `cryoctl notify log` reads the recent deliveries kept here.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::config::NotifierConfig;

mod error;
pub mod webpush;

pub use error::{Error, Refused};

/// Deliveries kept for `notify log`.
const LOG_KEPT: usize = 500;
/// Event ids a notifier remembers, to deliver each once.
const SEEN_KEPT: usize = 10_000;
/// One attempt's time limit (an HTTP request, a command).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// Kinds quiet hours never hold.
const URGENT: &[&str] = &["question", "approval", "daemon"];

/// An event for people.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Event {
    pub id: String,
    /// `question`, `failed`, … (`cryo_core::chamber::notice::KINDS`), or `test`.
    #[serde(rename = "event")]
    pub kind: String,
    pub chamber: String,
    pub title: String,
    pub body: String,
    /// The chamber's page on the hub (empty without a hub).
    pub url: String,
    pub at: DateTime<Utc>,
    /// What a person can do from the notice in one step (an approval's
    /// approve and deny links: each is a POST to its URL).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
}

/// One action of a notice: a label and the URL a POST to which does it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Action {
    pub label: String,
    pub url: String,
}

/// What one notifier did with one event.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub at: DateTime<Utc>,
    pub notifier: String,
    pub event: String,
    pub kind: String,
    pub chamber: String,
    pub ok: bool,
    /// `delivered (HTTP 200)`, `failed: …`, `held by quiet hours until …`,
    /// `dropped: …`.
    pub outcome: String,
    pub attempts: u32,
    /// From the event to its delivery (or the last attempt).
    pub latency_ms: u64,
}

struct One {
    name: String,
    config: NotifierConfig,
    seen: Mutex<(HashSet<String>, VecDeque<String>)>,
    /// Deliveries per chamber in the last hour.
    sent: Mutex<Window>,
}

/// At most `limit` per key in any `span`: a sliding window of counts.
pub struct Window {
    span: Duration,
    limit: usize,
    hits: HashMap<String, VecDeque<Instant>>,
}

impl Window {
    pub fn new(span: Duration, limit: usize) -> Window {
        Window { span, limit, hits: HashMap::new() }
    }

    /// How many the window holds.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Counts one for `key` if the window has room; else says how long
    /// until it has.
    pub fn take(&mut self, key: &str) -> Result<(), Duration> {
        let now = Instant::now();
        let q = self.hits.entry(key.to_string()).or_default();
        while q.front().is_some_and(|t| now.duration_since(*t) >= self.span) {
            q.pop_front();
        }
        if q.len() >= self.limit {
            let oldest = *q.front().expect("full");
            return Err(self.span.saturating_sub(now.duration_since(oldest)));
        }
        q.push_back(now);
        Ok(())
    }
}

/// Every notifier, and the log of what they did.
#[derive(Clone)]
pub struct Notifiers {
    list: Arc<Vec<One>>,
    log: Arc<Mutex<VecDeque<Delivery>>>,
    http: reqwest::Client,
    clock: crate::base::clock::Clock,
    /// Where the VAPID key and the devices' subscriptions are kept.
    state_dir: std::path::PathBuf,
    /// Held while the subscriptions file is read and rewritten.
    devices: Arc<Mutex<()>>,
}

impl Notifiers {
    pub fn new(
        configs: &[NotifierConfig],
        clock: crate::base::clock::Clock,
        state_dir: std::path::PathBuf,
    ) -> Notifiers {
        let list = configs
            .iter()
            .enumerate()
            .map(|(i, c)| One {
                name: c.name(i),
                config: c.clone(),
                seen: Default::default(),
                sent: Mutex::new(Window::new(Duration::from_secs(3600), c.max_per_hour.unwrap_or(20) as usize)),
            })
            .collect();
        // TLS by rustls with ring, installed once per process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().timeout(ATTEMPT_TIMEOUT).build().expect("an HTTP client with rustls");
        Notifiers { list: Arc::new(list), log: Default::default(), http, clock, state_dir, devices: Default::default() }
    }

    /// Hands `event` to every notifier that wants it, each in a task of its
    /// own; returns at once.
    pub fn notify(&self, event: Event, tz: Tz) {
        for i in 0..self.list.len() {
            if !self.list[i].wants(&event) {
                continue;
            }
            let (me, event) = (self.clone(), event.clone());
            tokio::spawn(async move {
                me.deliver(i, event, tz, false).await;
            });
        }
    }

    /// Sends `event` through the notifier named `name` (or all), past
    /// quiet hours, rate and filters; waits for each result.
    pub async fn test(&self, name: Option<&str>, event: Event, tz: Tz) -> Result<Vec<Delivery>, Error> {
        let chosen: Vec<usize> =
            (0..self.list.len()).filter(|i| name.is_none_or(|n| self.list[*i].name == n)).collect();
        if chosen.is_empty() {
            return Err(match name {
                Some(n) => Error::NoNotifier(n.to_string()),
                None => Error::NoNotifiers,
            });
        }
        let runs = chosen.into_iter().map(|i| {
            let (me, event) = (self.clone(), event.clone());
            tokio::spawn(async move { me.deliver(i, event, tz, true).await })
        });
        let mut out = Vec::new();
        for r in runs.collect::<Vec<_>>() {
            out.extend(r.await.ok().flatten());
        }
        Ok(out)
    }

    /// The wall clock, never before the event.
    fn now_after(&self, e: &Event) -> DateTime<Utc> {
        self.clock.now().max(e.at)
    }

    /// The VAPID public key (made on first use): a page's
    /// `applicationServerKey`.
    pub fn push_key(&self) -> Result<String, Error> {
        Ok(webpush::Vapid::load_or_make(&self.state_dir)?.public())
    }

    /// The devices subscribed to Web Push.
    pub fn devices(&self) -> Vec<webpush::Subscription> {
        let _one = self.devices.lock().expect("devices lock");
        webpush::subscriptions(&self.state_dir)
    }

    /// Subscribes a device (replacing one with the same endpoint); returns
    /// how many there are.
    pub fn subscribe(&self, sub: webpush::Subscription) -> Result<usize, Error> {
        webpush::check(&sub).map_err(Error::Subscription)?;
        self.change_devices(|subs| {
            subs.retain(|s| s.endpoint != sub.endpoint);
            subs.push(sub);
        })
    }

    /// Forgets the devices at these endpoints; returns how many are left,
    /// or `None` if none of them was subscribed.
    pub fn unsubscribe(&self, endpoints: &[String]) -> Result<Option<usize>, Error> {
        let mut found = false;
        let left = self.change_devices(|subs| {
            let before = subs.len();
            subs.retain(|s| !endpoints.contains(&s.endpoint));
            found = subs.len() < before;
        })?;
        Ok(found.then_some(left))
    }

    fn change_devices(&self, change: impl FnOnce(&mut Vec<webpush::Subscription>)) -> Result<usize, Error> {
        let _one = self.devices.lock().expect("devices lock");
        let mut subs = webpush::subscriptions(&self.state_dir);
        change(&mut subs);
        webpush::save_subscriptions(&self.state_dir, &subs)?;
        Ok(subs.len())
    }

    /// `webpush`: the notice to every subscribed device, encrypted for
    /// each; a device its push service no longer knows (404, 410) is
    /// forgotten.
    async fn push(&self, c: &NotifierConfig, e: &Event) -> Result<String, Error> {
        let subs = self.devices();
        if subs.is_empty() {
            return Err(Error::NoDevice);
        }
        let vapid = webpush::Vapid::load_or_make(&self.state_dir)?;
        let mut body: String = e.body.chars().take(1000).collect();
        let mut payload = serde_json::json!({ "title": e.title, "body": body, "url": e.url, "event": e.kind, "chamber": e.chamber, "id": e.id });
        if !e.actions.is_empty() {
            payload["actions"] = serde_json::to_value(&e.actions)?;
        }
        while payload.to_string().len() > webpush::MAX_PAYLOAD && !body.is_empty() {
            body.truncate(body.len() / 2);
            payload["body"] = body.clone().into();
        }
        let payload = payload.to_string();
        let contact = c.contact.clone().unwrap_or_else(|| "mailto:cryo@localhost".into());
        let urgency = if priority(&e.kind) == "high" { "high" } else { "normal" };
        let (mut sent, mut gone, mut errors) = (0, Vec::new(), Vec::new());
        for s in &subs {
            let auth = vapid.authorization(&s.endpoint, self.clock.now().timestamp(), &contact)?;
            let sealed = webpush::encrypt(s, payload.as_bytes())?;
            let r = self
                .http
                .post(&s.endpoint)
                .header("Content-Encoding", "aes128gcm")
                .header("Content-Type", "application/octet-stream")
                .header("TTL", "86400")
                .header("Urgency", urgency)
                .header("Authorization", auth)
                .body(sealed)
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_success() => sent += 1,
                Ok(r) if matches!(r.status().as_u16(), 404 | 410) => gone.push(s.endpoint.clone()),
                Ok(r) => errors.push(format!("{}: HTTP {}", s.name, r.status().as_u16())),
                Err(x) => errors.push(format!("{}: {}", s.name, x.without_url())),
            }
        }
        if !gone.is_empty() {
            self.unsubscribe(&gone)?;
        }
        match (sent, errors.is_empty()) {
            (_, true) => Ok(format!(
                "{sent} device(s){}",
                if gone.is_empty() { String::new() } else { format!(", {} gone and forgotten", gone.len()) }
            )),
            (0, false) => Err(Error::Devices(errors)),
            (_, false) => Ok(format!("{sent} device(s); failed: {}", errors.join("; "))),
        }
    }

    /// One heartbeat: a POST to `url`; whether it was taken.
    pub async fn ping(&self, url: &str) -> Result<(), Error> {
        let r = self.http.post(url).body("").send().await.map_err(http)?;
        status(r.status()).map(|_| ())
    }

    /// The newest deliveries first.
    pub fn log(&self, limit: usize) -> Vec<Delivery> {
        self.log.lock().expect("log lock").iter().rev().take(limit).cloned().collect()
    }

    fn record(&self, d: Delivery) -> Delivery {
        tracing::info!(notifier = %d.notifier, event = %d.event, ok = d.ok, outcome = %d.outcome, "notice");
        let mut log = self.log.lock().expect("log lock");
        if log.len() == LOG_KEPT {
            log.pop_front();
        }
        log.push_back(d.clone());
        d
    }

    async fn deliver(&self, i: usize, event: Event, tz: Tz, test: bool) -> Option<Delivery> {
        let one = &self.list[i];
        let entry = |ok: bool, outcome: String, attempts: u32| Delivery {
            at: self.now_after(&event),
            notifier: one.name.clone(),
            event: event.id.clone(),
            kind: event.kind.clone(),
            chamber: event.chamber.clone(),
            ok,
            outcome,
            attempts,
            latency_ms: 0,
        };
        if !test {
            if !one.first_time(&event.id) {
                return None;
            }
            if one.sent.lock().expect("rate lock").take(&event.chamber).is_err() {
                let limit = one.config.max_per_hour.unwrap_or(20);
                let why = format!("dropped: over max_per_hour ({limit}) for {}", event.chamber);
                return Some(self.record(entry(false, why, 0)));
            }
            if let Some(wait) = one.quiet_for(&event.kind, self.clock.now(), tz) {
                let until = self.now_after(&event) + chrono::Duration::from_std(wait).unwrap_or_default();
                let at = cryo_core::time::format_in(until, tz);
                self.record(entry(false, format!("held by quiet hours until {at}"), 0));
                tokio::time::sleep(wait).await;
            }
        }
        let retries = if test { 0 } else { one.config.retries.unwrap_or(5) };
        let base = Duration::from_secs(one.config.retry_seconds.unwrap_or(2));
        let mut attempts = 0;
        let outcome = loop {
            attempts += 1;
            match self.send(one, &event).await {
                Ok(how) => break Ok(how),
                Err(e) if attempts > retries => break Err(e),
                Err(e) => {
                    tracing::debug!(notifier = %one.name, error = %e, attempts, "notice not delivered; retrying");
                    tokio::time::sleep(base * 2u32.saturating_pow(attempts - 1)).await;
                }
            }
        };
        let latency = (self.now_after(&event) - event.at).num_milliseconds().max(0) as u64;
        let mut d = match outcome {
            Ok(how) => entry(true, format!("delivered ({how})"), attempts),
            Err(e) => entry(false, format!("failed after {attempts} attempt(s): {e}"), attempts),
        };
        d.latency_ms = latency;
        Some(self.record(d))
    }

    async fn send(&self, one: &One, e: &Event) -> Result<String, Error> {
        let c = &one.config;
        match c.kind.as_str() {
            "webhook" => {
                let body = serde_json::to_vec(e)?;
                let key = read_secret(c.secret_file.as_deref().unwrap_or_default())?;
                let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes()), &body);
                let sig = hex::encode(tag);
                let r = self
                    .http
                    .post(c.url.as_deref().unwrap_or_default())
                    .header("Content-Type", "application/json")
                    .header("User-Agent", concat!("cryod/", env!("CARGO_PKG_VERSION")))
                    .header("X-Cryo-Event", &e.kind)
                    .header("X-Cryo-Delivery", &e.id)
                    .header("Idempotency-Key", &e.id)
                    .header("X-Cryo-Signature-256", format!("sha256={sig}"))
                    .body(body)
                    .send()
                    .await
                    .map_err(http)?;
                status(r.status())
            }
            "ntfy" => {
                let mut r = self
                    .http
                    .post(c.url.as_deref().unwrap_or_default())
                    .header("Title", header_text(&e.title))
                    .header("Priority", priority(&e.kind))
                    .header("Tags", format!("cryo,{}", e.kind))
                    .body(e.body.clone());
                if !e.url.is_empty() {
                    r = r.header("Click", &e.url);
                }
                if !e.actions.is_empty() {
                    // ntfy's `http` actions: one tap POSTs from the phone.
                    let actions: Vec<String> = e
                        .actions
                        .iter()
                        .map(|a| {
                            format!("http, {}, {}, method=POST, headers.X-Cryo-Csrf=1, clear=true", a.label, a.url)
                        })
                        .collect();
                    r = r.header("Actions", actions.join("; "));
                }
                if let Some(f) = c.token_file.as_deref() {
                    r = r.bearer_auth(read_secret(f)?);
                }
                let r = r.send().await.map_err(http)?;
                status(r.status())
            }
            "email" => send_email(c, e).await,
            "webpush" => self.push(c, e).await,
            _ => run_command(c.command.as_deref().unwrap_or_default(), e).await,
        }
    }
}

impl One {
    fn wants(&self, e: &Event) -> bool {
        let c = &self.config;
        (c.events.is_empty() || c.events.contains(&e.kind))
            && (c.chambers.is_empty() || c.chambers.contains(&e.chamber))
    }

    /// Whether this notifier has not had this event yet (and now has).
    fn first_time(&self, id: &str) -> bool {
        let mut seen = self.seen.lock().expect("seen lock");
        if !seen.0.insert(id.to_string()) {
            return false;
        }
        seen.1.push_back(id.to_string());
        if seen.1.len() > SEEN_KEPT
            && let Some(old) = seen.1.pop_front()
        {
            seen.0.remove(&old);
        }
        true
    }

    /// How long quiet hours hold an event of this kind now.
    fn quiet_for(&self, kind: &str, now: DateTime<Utc>, tz: Tz) -> Option<Duration> {
        if URGENT.contains(&kind) {
            return None;
        }
        let (start, end) = crate::config::parse_quiet_hours(self.config.quiet_hours.as_deref()?)?;
        let now = now.with_timezone(&tz);
        let t = now.time();
        let inside = if start <= end { t >= start && t < end } else { t >= start || t < end };
        if !inside {
            return None;
        }
        let next = cryo_core::time::next_occurrence(end, now.with_timezone(&Utc), tz);
        (next - now.with_timezone(&Utc)).to_std().ok()
    }
}

/// How loud an event of this kind is: `high` (a person is needed now),
/// `default`, or `low` (news); ntfy's priorities, and Web Push's urgency.
fn priority(kind: &str) -> &'static str {
    match kind {
        "question" | "approval" | "daemon" | "failed" => "high",
        "silent" | "attention" | "limited" | "budget" => "default",
        _ => "low",
    }
}

/// A request that got no answer, without its URL (a webhook's may hold a
/// token).
fn http(x: reqwest::Error) -> Error {
    Error::Http(x.without_url())
}

fn status(s: reqwest::StatusCode) -> Result<String, Error> {
    if s.is_success() { Ok(format!("HTTP {}", s.as_u16())) } else { Err(Error::Status(s.as_u16())) }
}

/// A header value of one line: printable ASCII as it is, anything else
/// RFC 2047-encoded (`=?UTF-8?B?…?=`), which ntfy decodes: in encoded words
/// of at most 75 characters (section 2), each of whole characters (section
/// 5), separated by a space, which a decoder drops between them (section 6.2).
fn header_text(s: &str) -> String {
    let line: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(200).collect();
    if line.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        return line;
    }
    use base64::Engine as _;
    // 75 less `=?UTF-8?B?` and `?=`: 63 characters of base64, 45 bytes.
    const WORD_BYTES: usize = 45;
    let mut words = Vec::new();
    let mut word = String::new();
    for c in line.chars() {
        if word.len() + c.len_utf8() > WORD_BYTES {
            words.push(std::mem::take(&mut word));
        }
        word.push(c);
    }
    words.push(word);
    let encode = |w: &String| format!("=?UTF-8?B?{}?=", base64::engine::general_purpose::STANDARD.encode(w.as_bytes()));
    words.iter().map(encode).collect::<Vec<_>>().join(" ")
}

/// A credential from a file only its owner may read (`~/` is the home).
fn read_secret(path: &str) -> Result<String, Error> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default();
    let path = cryo_sync::creds::expand(path, &home, &home);
    Ok(cryo_sync::creds::read_secret(&path).map_err(Error::Secret)?.trim().to_string())
}

/// `email`: one message to every recipient, over SMTP with STARTTLS or
/// TLS (lettre, rustls with the system's roots), logging in with the
/// credentials file if there is one.
async fn send_email(c: &NotifierConfig, e: &Event) -> Result<String, Error> {
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let from: lettre::message::Mailbox = c.from.as_deref().unwrap_or_default().parse().map_err(Error::From)?;
    // One Message-ID per event: a mail client groups a retried delivery
    // with the first.
    let event: String = e.id.chars().map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '.' }).collect();
    let id = format!("<cryo.{event}@{}>", from.email.domain());
    let mut m = Message::builder().from(from).subject(&e.title).message_id(Some(id));
    for to in &c.to {
        m = m.to(to.parse().map_err(|error| Error::To { to: to.clone(), error })?);
    }
    let mut link = if e.url.is_empty() { String::new() } else { format!("\n\n{}", e.url) };
    for a in &e.actions {
        link.push_str(&format!("\n\n{}: {}", a.label, a.url));
    }
    let body = format!("{}\n\n{}{link}\n\n(cryo event {}, id {})\n", e.title, e.body, e.kind, e.id);
    // A MIME part: MIME-Version, text/plain in UTF-8, encoded for 7-bit relays.
    let message = m.singlepart(lettre::message::SinglePart::plain(body))?;
    let (host, port) = c.smtp_addr()?;
    let builder = match c.tls.as_deref().unwrap_or("starttls") {
        "tls" => AsyncSmtpTransport::<Tokio1Executor>::relay(host)?,
        "none" => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host),
        _ => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(host)?,
    };
    let mut builder = builder.port(port).timeout(Some(ATTEMPT_TIMEOUT));
    if let Some(f) = c.credentials_file.as_deref() {
        let text = read_secret(f)?;
        let mut lines = text.lines().map(str::trim);
        let (user, pass) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
        builder =
            builder.credentials(lettre::transport::smtp::authentication::Credentials::new(user.into(), pass.into()));
    }
    let r = builder.build().send(message).await?;
    Ok(format!("SMTP {}", r.code()))
}

/// Most bytes of a command's output kept (what it said on standard error
/// is its failure's line), as for a pre-check.
const OUTPUT_KEPT: u64 = 64 * 1024;

/// `command`: `sh -c` (through the pre-checks' runner: its own process
/// group, output captured, a time limit), the event in `CRYO_*` variables
/// and as JSON on standard input; exit 0 is delivered.
async fn run_command(command: &str, e: &Event) -> Result<String, Error> {
    let json = serde_json::to_vec(e)?;
    let env = [
        ("CRYO_EVENT", &e.kind),
        ("CRYO_EVENT_ID", &e.id),
        ("CRYO_CHAMBER", &e.chamber),
        ("CRYO_TITLE", &e.title),
        ("CRYO_BODY", &e.body),
        ("CRYO_URL", &e.url),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.clone()))
    .collect();
    match cryo_session::Prepared::shell(command, &env).run(None, Some(json), ATTEMPT_TIMEOUT, OUTPUT_KEPT).await {
        cryo_session::Ran::Exited { code: 0, .. } => Ok("exit 0".into()),
        failed => Err(Error::Command(failed.failure())),
    }
}

#[cfg(test)]
mod tests {
    use super::header_text;

    /// Issue 39, item 12: a title in any script reaches ntfy whole.
    #[test]
    fn a_title_keeps_its_letters() {
        assert_eq!(header_text("c asks: which branch?"), "c asks: which branch?");
        let t = header_text("c fragt: Übermorgen \u{2713}\nnext line");
        let b64 = t.strip_prefix("=?UTF-8?B?").and_then(|r| r.strip_suffix("?=")).expect("RFC 2047");
        use base64::Engine as _;
        let back = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
        assert_eq!(String::from_utf8(back).unwrap(), "c fragt: Übermorgen \u{2713} next line");
    }

    /// Issue 62, case 7: a long title is several encoded words, each at
    /// most 75 characters and of whole characters, which decode (joined,
    /// as RFC 2047 section 6.2 says) to the title.
    #[test]
    fn a_long_title_is_words_of_at_most_75_characters() {
        use base64::Engine as _;
        let title = "Übermorgen prüft der Agent die Änderungen: ✓✓✓ ".repeat(4);
        let encoded = header_text(&title);
        let words: Vec<&str> = encoded.split(' ').collect();
        assert!(words.len() > 1, "{encoded}");
        let mut back = String::new();
        for w in words {
            assert!(w.len() <= 75, "{w} is {} characters", w.len());
            let b64 = w.strip_prefix("=?UTF-8?B?").and_then(|r| r.strip_suffix("?=")).expect("an encoded word");
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
            back.push_str(&String::from_utf8(bytes).expect("whole characters in each word"));
        }
        assert_eq!(back, title);
    }
}
