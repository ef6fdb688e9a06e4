//! `cryod.toml`: the daemon's own settings. Every key is optional; an unknown
//! key or a bad value is an error naming the file, the line and the key.

use std::path::Path;

use serde::Deserialize;

use crate::store::postgres::LeaseTimes;

/// The daemon's settings, with defaults for everything.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Agent sessions running at once across all chambers; unset, derived
    /// from the machine's memory ([`machine_session_limit`]).
    #[serde(deserialize_with = "some_limit")]
    pub max_concurrent_sessions: Option<usize>,
    /// Seconds between SIGTERM and SIGKILL when a session is ended.
    pub stop_grace_seconds: u64,
    /// `cryo.log` and `cryo-agent.log` are rotated when a session starts and
    /// they are larger than this (bytes).
    pub log_max_bytes: u64,
    /// Rotated logs kept (`cryo.log.1` ... `cryo.log.N`).
    pub log_keep: u32,
    /// The web hub.
    pub hub: HubConfig,
    /// `GET /metrics` on an address of its own.
    pub metrics: MetricsConfig,
    /// Where the registry and the ledger live (SQLite here, or a fleet's
    /// PostgreSQL).
    pub store: StoreConfig,
    /// `[prices."MODEL"]`: USD per million tokens (`input`, `output`,
    /// `cached`), for agents whose CLI reports no cost; over the shipped
    /// table (`agent_events::default_prices`).
    pub prices: std::collections::BTreeMap<String, crate::agent_events::Price>,
    /// `[providers.NAME]`: what one provider account may do (its name is a
    /// chamber's `[provider] name`, or what `cryoctl usage --by provider`
    /// shows).
    pub providers: std::collections::BTreeMap<String, ProviderConfig>,
    /// How long a provider's limit holds its account when the CLI said no
    /// reset time (seconds).
    pub limit_hold_seconds: u64,
    /// `[[notify]]`: who hears of the events worth a person's attention.
    pub notify: Vec<NotifierConfig>,
    /// `[heartbeat]`: an external monitor pinged while cryod is healthy.
    pub heartbeat: Option<HeartbeatConfig>,
    /// How agents are confined when their `cryo.toml` does not say.
    pub sandbox: Sandbox,
    /// `[history]`: how long the ledger keeps each session's row.
    pub history: HistoryConfig,
    /// `[telemetry]`: where each wake's trace goes.
    pub telemetry: TelemetryConfig,
}

/// `[telemetry]` in `cryod.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// An OTLP/HTTP receiver (`http://127.0.0.1:4318`): each wake is
    /// exported to `{otlp_endpoint}/v1/traces` as a trace.
    pub otlp_endpoint: Option<String>,
}

/// `[history]` in `cryod.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Ended sessions, passed slots and answered claims older than this are
    /// deleted daily ("2y", "90d", or "all" to keep everything); what they
    /// used stays in the per-day rollups that usage and budgets read.
    pub keep_sessions: String,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { keep_sessions: "2y".into() }
    }
}

/// How much history a keep setting ("2y", "18 months" is not one: give
/// years, weeks or days; "all") keeps: `None` for all of it.
pub fn parse_keep(s: &str) -> Result<Option<chrono::Duration>, String> {
    let t = s.trim();
    if t == "all" {
        return Ok(None);
    }
    let years = t.strip_suffix("years").or_else(|| t.strip_suffix("year")).or_else(|| t.strip_suffix('y'));
    let d = match years.map(|n| n.trim().parse::<i64>()) {
        Some(Ok(n)) if (0..=100).contains(&n) => Some(chrono::Duration::days(365 * n)),
        Some(_) => None,
        None => cryo_core::time::parse_duration(t),
    };
    match d {
        Some(d) if d >= chrono::Duration::days(1) => Ok(Some(d)),
        // A length, but too short: say so, not "give days" to one who did.
        Some(_) => Err(format!("{s:?} keeps less than a day of history: keep at least 1d (or all)")),
        None => Err(format!("{s:?} is not how long to keep history: give years, weeks or days (2y, 26w, 90d) or all")),
    }
}

/// Where a session's processes may connect (`network` in `cryo.toml`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Anywhere the machine reaches.
    #[default]
    Open,
    /// cryod's provider gateway only: under bubblewrap, a network of the
    /// session's own whose one way out is the gateway (never Landlock's
    /// port rules, see [`NETWORK_LANDLOCK`]).
    Gateway,
}

/// How an agent's session is confined (`sandbox` in `cryo.toml`, its
/// default in `cryod.toml`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Sandbox {
    /// Unconfined: the agent reaches what the user does.
    #[default]
    Off,
    /// Linux's Landlock (see `sandbox`).
    Landlock,
    /// Bubblewrap: private mount, process and IPC namespaces (see `sandbox`).
    Bwrap,
}

impl Sandbox {
    /// Its name in `cryo.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Sandbox::Off => "off",
            Sandbox::Landlock => "landlock",
            Sandbox::Bwrap => "bwrap",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Sandbox> {
        [Sandbox::Off, Sandbox::Landlock, Sandbox::Bwrap].into_iter().find(|m| m.as_str() == s)
    }
}

/// Why `network = "gateway"` is refused under Landlock.
pub const NETWORK_LANDLOCK: &str = "network = \"gateway\" needs sandbox = \"bwrap\": Landlock limits the ports a \
                                    session connects to, not the addresses, so any host on the gateway's port (and any \
                                    over MPTCP) would be reachable";

/// A session's resource limits (`memory_max`, `cpu_weight` in
/// `cryo.toml`), applied through a transient systemd scope when cryod runs
/// under systemd (see `sandbox::scope_args`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// systemd's `MemoryMax=`: bytes with an optional K, M, G or T, a
    /// percentage of the machine's memory, or `infinity`.
    pub memory_max: Option<String>,
    /// systemd's `CPUWeight=`: 1 to 10000 (100 is everyone's default).
    pub cpu_weight: Option<u32>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.memory_max.is_none() && self.cpu_weight.is_none()
    }

    /// The key that is wrong, and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(m) = &self.memory_max {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let ok = m == "infinity"
                || m.strip_suffix('%').is_some_and(|p| digits(p) && p.parse::<u32>().is_ok_and(|p| p <= 100))
                || digits(m.strip_suffix(['K', 'M', 'G', 'T']).unwrap_or(m));
            if !ok {
                return Err((
                    "memory_max",
                    format!("{m:?}: expected bytes with K, M, G or T (\"2G\"), a percentage or \"infinity\""),
                ));
            }
        }
        if let Some(w) = self.cpu_weight
            && !(1..=10_000).contains(&w)
        {
            return Err(("cpu_weight", format!("{w} is outside 1..=10000 (100 is the default weight)")));
        }
        Ok(())
    }
}

/// `[heartbeat]`: a healthchecks-style URL that cryod POSTs to every
/// `interval` (default `5m`) while its store answers, so that something
/// outside the machine notices when cryod (or the machine) is gone.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    pub url: String,
    pub interval: Option<String>,
}

impl HeartbeatConfig {
    pub fn every(&self) -> Option<std::time::Duration> {
        let d = cryo_core::time::parse_duration(self.interval.as_deref().unwrap_or("5m"))?;
        d.to_std().ok().filter(|d| *d >= std::time::Duration::from_secs(1))
    }
}

/// `[providers.NAME]` in `cryod.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Sessions of this account running at once (beside the global limit).
    pub max_concurrent: Option<usize>,
    /// Where the gateway sends this account's model calls (the base URL:
    /// `https://api.anthropic.com`, `https://api.openai.com/v1`); default
    /// what the chamber's kind names, else the provider's public endpoint.
    pub upstream: Option<String>,
    /// `[providers.NAME.budget]`: the account's, over all its chambers.
    #[serde(default)]
    pub budget: Budget,
    /// The accounts this one's chambers turn to, in order, while it is
    /// held at its provider's limit.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// As a fallback: its provider variables (its key, its base URL), which
    /// replace those of the chamber's `[provider] env`; a value may be kept
    /// in a file only its owner reads, `{ file = "PATH" }`.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, EnvValue>,
    /// As a fallback: another agent to run (`codex`, a command line), which
    /// starts a fresh conversation; none: the chamber's own agent.
    pub agent: Option<String>,
}

/// A provider variable's value in `cryod.toml`: the text, or a file that
/// holds it (read at each spawn).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged, expecting = "a string, or a table { file = \"PATH\" } naming a file that holds the value")]
pub enum EnvValue {
    Text(String),
    File { file: std::path::PathBuf },
}

impl ProviderConfig {
    /// Why `[providers.NAME] fallback` cannot work, if it cannot: each it
    /// names is an account of its own, with a key or an agent.
    fn check_fallbacks(
        &self,
        name: &str,
        all: &std::collections::BTreeMap<String, ProviderConfig>,
    ) -> Result<(), String> {
        for f in &self.fallback {
            if f == name {
                return Err(format!("`{name}` cannot be its own fallback"));
            }
            let Some(other) = all.get(f) else {
                return Err(format!("names `{f}`, but there is no [providers.{f}] with its key (env) or agent"));
            };
            if other.env.is_empty() && other.agent.is_none() {
                return Err(format!("[providers.{f}] has no env (its key) and no agent: it cannot take a wake"));
            }
        }
        for (k, v) in &self.env {
            if let EnvValue::File { file } = v
                && !(file.is_absolute() || file.starts_with("~"))
            {
                return Err(format!("env.{k}: {} is neither an absolute path nor one under ~/", file.display()));
            }
        }
        if self.agent.as_deref().is_some_and(|a| a.trim().is_empty()) {
            return Err("key `agent` is empty: name the agent command".into());
        }
        Ok(())
    }
}

/// A budget (`[budget]` in `cryo.toml`, `[providers.NAME.budget]` in
/// `cryod.toml`):
/// days and months are UTC's. At 80% cryo says so once; at 100% the chamber
/// is paused with attention; a session past `max_session_usd` is stopped.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub daily_usd: Option<f64>,
    pub monthly_usd: Option<f64>,
    pub daily_sessions: Option<u32>,
    pub max_session_usd: Option<f64>,
}

impl Budget {
    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }
}

/// `[[notify]]`: one notifier. `kind` says how it delivers; `events` and
/// `chambers` (default: all) say what it hears of.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NotifierConfig {
    /// Shown in `cryoctl notify log` and named by `notify test NAME`
    /// (default: the kind and its place in the list).
    pub name: Option<String>,
    /// `webhook`, `ntfy` or `command`.
    pub kind: String,
    #[serde(default)]
    pub events: Vec<String>,
    #[serde(default)]
    pub chambers: Vec<String>,
    /// `webhook`: where the JSON goes; `ntfy`: the topic's URL.
    pub url: Option<String>,
    /// `webhook`: the HMAC-SHA256 key (a 0600 file).
    pub secret_file: Option<String>,
    /// `ntfy`: a bearer token (a 0600 file).
    pub token_file: Option<String>,
    /// `command`: run with `sh -c`, the event in its environment and as
    /// JSON on its standard input.
    pub command: Option<String>,
    /// `email`: the SMTP server, `host:port` (587 with STARTTLS, 465 with TLS).
    pub smtp: Option<String>,
    /// `email`: `starttls` (default), `tls`, or `none` (a server on this
    /// machine only).
    pub tls: Option<String>,
    /// `email`: the sender and the recipients.
    pub from: Option<String>,
    #[serde(default)]
    pub to: Vec<String>,
    /// `email`: `user` and `password` on two lines (a 0600 file); none: no
    /// login.
    pub credentials_file: Option<String>,
    /// `webpush`: who runs this cryod, for push services (VAPID's `sub`,
    /// `mailto:` or `https:`; default `mailto:cryo@localhost`).
    pub contact: Option<String>,
    /// `"22:00-07:00"` in the system's zone: all but `question` and
    /// `daemon` wait until it ends.
    pub quiet_hours: Option<String>,
    /// Notices per chamber per hour (default 20); more are dropped, and
    /// `notify log` says so.
    pub max_per_hour: Option<u32>,
    /// Attempts after the first, with back-off from `retry_seconds`
    /// (default 5 and 2: 2, 4, 8, 16, 32 s).
    pub retries: Option<u32>,
    pub retry_seconds: Option<u64>,
}

impl NotifierConfig {
    pub const KINDS: &'static [&'static str] = &["webhook", "ntfy", "command", "email", "webpush"];

    pub fn name(&self, index: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("{}-{}", self.kind, index + 1))
    }

    /// `email`: the SMTP server's host (without brackets) and port.
    pub fn smtp_addr(&self) -> Result<(&str, u16), NotifyConfigError> {
        let smtp = self.smtp.as_deref().ok_or(NotifyConfigError::NoSmtp)?;
        let bad = || NotifyConfigError::Smtp(smtp.to_string());
        let (host, port) = smtp.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match port.parse::<u16>() {
            Ok(port) if !host.is_empty() => Ok((host, port)),
            _ => Err(bad()),
        }
    }

    /// What only a person can fix, in one line.
    pub fn check(&self) -> Result<(), NotifyConfigError> {
        if !Self::KINDS.contains(&self.kind.as_str()) {
            return Err(NotifyConfigError::Kind(self.kind.clone()));
        }
        if let Some(bad) = self.events.iter().find(|e| !cryo_core::chamber::notice::KINDS.contains(&e.as_str())) {
            return Err(NotifyConfigError::Event(bad.clone()));
        }
        match self.kind.as_str() {
            "webhook" => {
                self.check_url("webhook")?;
                if self.secret_file.is_none() {
                    return Err(NotifyConfigError::NoSecretFile);
                }
            }
            "ntfy" => self.check_url("ntfy notifier")?,
            "email" => self.check_email()?,
            "webpush" => {
                if let Some(c) = &self.contact
                    && !(c.starts_with("mailto:") || c.starts_with("https://"))
                {
                    return Err(NotifyConfigError::Contact(c.clone()));
                }
            }
            _ => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(NotifyConfigError::NoCommand);
                }
            }
        }
        if let Some(q) = &self.quiet_hours {
            parse_quiet_hours(q).ok_or_else(|| NotifyConfigError::QuietHours(q.clone()))?;
        }
        if self.max_per_hour == Some(0) {
            return Err(NotifyConfigError::NoneAnHour);
        }
        Ok(())
    }

    /// `url`, which a `what` needs, is http(s).
    fn check_url(&self, what: &'static str) -> Result<(), NotifyConfigError> {
        match self.url.as_deref() {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => Ok(()),
            Some(u) => Err(NotifyConfigError::Url(u.to_string())),
            None => Err(NotifyConfigError::NoUrl(what)),
        }
    }

    /// `smtp`, `tls`, `from` and `to` of an email notifier.
    fn check_email(&self) -> Result<(), NotifyConfigError> {
        let (host, _) = self.smtp_addr()?;
        match self.tls.as_deref().unwrap_or("starttls") {
            "starttls" | "tls" => {}
            "none" if matches!(host, "127.0.0.1" | "localhost" | "::1") => {}
            "none" => return Err(NotifyConfigError::PlainRemote),
            other => return Err(NotifyConfigError::Tls(other.to_string())),
        }
        let from = self.from.as_deref().ok_or(NotifyConfigError::NoFrom)?;
        if !from.contains('@') || self.to.is_empty() || self.to.iter().any(|t| !t.contains('@')) {
            return Err(NotifyConfigError::Addresses);
        }
        Ok(())
    }
}

/// What is wrong with one `[[notify]]` table: one line a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    /// `kind` is not one cryod knows.
    #[error("`kind`: {0:?} is none of {kinds}", kinds = NotifierConfig::KINDS.join(", "))]
    Kind(String),
    /// `events` names one that is not an event.
    #[error("`events`: {0:?} is not an event (use {kinds})", kinds = cryo_core::chamber::notice::KINDS.join(", "))]
    Event(String),
    /// `url` is not http(s).
    #[error("`url`: {0:?} is not an http(s) URL")]
    Url(String),
    /// A webhook or ntfy notifier without `url`.
    #[error("a {0} needs `url`")]
    NoUrl(&'static str),
    /// A webhook without its key.
    #[error("a webhook needs `secret_file` (its HMAC-SHA256 key, mode 0600)")]
    NoSecretFile,
    /// An email notifier without `smtp`.
    #[error("an email notifier needs `smtp` (host:port)")]
    NoSmtp,
    /// `smtp` is not `host:port`.
    #[error("`smtp`: {0:?} is not host:port")]
    Smtp(String),
    /// `tls = "none"` to a server elsewhere.
    #[error("`tls = \"none\"` is for a server on this machine only")]
    PlainRemote,
    /// `tls` is not one cryod knows.
    #[error("`tls`: {0:?} is none of starttls, tls, none")]
    Tls(String),
    /// An email notifier without `from`.
    #[error("an email notifier needs `from`")]
    NoFrom,
    /// `from` or `to` is not an address, or `to` is empty.
    #[error("an email notifier needs `from` and `to` (a list) as addresses")]
    Addresses,
    /// `contact` is neither mailto: nor https:.
    #[error("`contact`: {0:?} is neither a mailto: nor an https: URL")]
    Contact(String),
    /// A command notifier without `command`.
    #[error("a command notifier needs `command`")]
    NoCommand,
    /// `quiet_hours` is not `HH:MM-HH:MM`.
    #[error("`quiet_hours`: {0:?} is not like \"22:00-07:00\"")]
    QuietHours(String),
    /// `max_per_hour = 0`.
    #[error("`max_per_hour`: 0 would drop every notice")]
    NoneAnHour,
}

/// `"22:00-07:00"`: the start and end of quiet hours (wall clock).
pub fn parse_quiet_hours(s: &str) -> Option<(chrono::NaiveTime, chrono::NaiveTime)> {
    let (a, b) = s.split_once('-')?;
    let t = |x: &str| chrono::NaiveTime::parse_from_str(x.trim(), "%H:%M").ok();
    Some((t(a)?, t(b)?))
}

/// `[store]`: the database, and this node's place in a fleet.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://…` or `host=/path …` runs this cryod as a node of a
    /// fleet; unset (or `sqlite:///path`) keeps the local SQLite file.
    pub url: Option<String>,
    /// The storage domain: the root path this node shares with the nodes
    /// that can run the same chambers. Default: this machine
    /// (`/etc/machine-id`), so nodes on one machine share their chambers.
    pub domain: Option<String>,
    /// This node's stable name, a chamber's "home" (default: the host name).
    pub node: Option<String>,
    /// How often the lease is renewed, in milliseconds.
    pub heartbeat_ms: u64,
    /// How long a renewal lasts on the database's clock, in milliseconds.
    pub lease_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            domain: None,
            node: None,
            heartbeat_ms: LeaseTimes::default().heartbeat.as_millis() as u64,
            lease_ms: LeaseTimes::default().ttl.as_millis() as u64,
        }
    }
}

/// `[metrics]`: the OpenMetrics endpoint. It is always on the hub's
/// listener (with the hub's token); `listen` also serves it, without a
/// token, on a loopback address of its own (for a local Prometheus).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// For example `127.0.0.1:9464`; loopback only.
    pub listen: Option<String>,
}

/// `[hub]`: the web pages and JSON API served by cryod.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HubConfig {
    pub enabled: bool,
    /// Address to listen on; port 0 picks a free one. Unset: loopback on
    /// this user's own port ([`HubConfig::bind`]).
    pub bind: Option<String>,
    /// What each chamber's `messages/attachments/` may hold of uploads
    /// from the hub, in MiB.
    pub attachment_quota_mb: u64,
    /// Messages one credential (the owner's token, each invite) may send a
    /// minute through the hub.
    pub sends_per_minute: usize,
    /// Files one credential may upload a minute.
    pub uploads_per_minute: usize,
}

/// The hub's usual port: 8765 for the first user of a machine (uid 1000)
/// and for root, the next ones for the users after (a second user's cryod
/// does not find it taken by the first's).
pub fn default_hub_port() -> u16 {
    8765 + (nix::unistd::getuid().as_raw() % 1000) as u16
}

impl HubConfig {
    /// Where the hub listens: `bind`, else loopback on
    /// [`default_hub_port`]; and whether that was the operator's choice.
    pub fn bind(&self) -> (String, bool) {
        match &self.bind {
            Some(b) => (b.clone(), true),
            None => (format!("127.0.0.1:{}", default_hub_port()), false),
        }
    }
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig { enabled: true, bind: None, attachment_quota_mb: 100, sends_per_minute: 30, uploads_per_minute: 10 }
    }
}

fn some_limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    usize::deserialize(d).map(Some)
}

/// Memory planned for one agent session: the largest known kind's (Claude
/// Code and OpenCode, on Node and Bun, hold about 300 MB each while they
/// work; Codex about 100 MB).
pub const SESSION_FOOTPRINT: u64 = 300 * 1024 * 1024;

/// Sessions at once when `cryod.toml` does not say: as many as three
/// quarters of the machine's memory holds at [`SESSION_FOOTPRINT`] each,
/// from 2 to 64 (4 where the memory cannot be read). Agents mostly wait on
/// their provider, so memory, not cores, is what bounds them.
pub fn machine_session_limit() -> usize {
    match machine_memory() {
        Some(bytes) => ((bytes / 4 * 3) / SESSION_FOOTPRINT).clamp(2, 64) as usize,
        None => 4,
    }
}

/// The machine's memory in bytes (Linux: `/proc/meminfo`'s `MemTotal`).
fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Config {
    /// Sessions at once: the setting, else [`machine_session_limit`].
    pub fn session_limit(&self) -> usize {
        self.max_concurrent_sessions.unwrap_or_else(machine_session_limit)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_sessions: None,
            stop_grace_seconds: 10,
            log_max_bytes: 8 * 1024 * 1024,
            log_keep: 3,
            hub: HubConfig::default(),
            metrics: MetricsConfig::default(),
            store: StoreConfig::default(),
            prices: Default::default(),
            providers: Default::default(),
            limit_hold_seconds: 300,
            notify: Vec::new(),
            heartbeat: None,
            sandbox: Sandbox::Off,
            history: HistoryConfig::default(),
            telemetry: TelemetryConfig::default(),
        }
    }
}

/// A config file that could not be used; `Display` is one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Reads `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(ConfigError(format!("{}: cannot read: {e}", path.display()))),
        };
        Config::parse(path, &text)
    }

    /// Parses the text of `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml_from_str(path, text)?;
        if config.max_concurrent_sessions == Some(0) {
            return Err(ConfigError(format!("{}: key `max_concurrent_sessions`: must be at least 1", path.display())));
        }
        if let Some(bind) = &config.hub.bind
            && bind.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(ConfigError(format!(
                "{}: key `hub.bind`: {bind:?} is not an address like 127.0.0.1:8765",
                path.display(),
            )));
        }
        if let Some(listen) = &config.metrics.listen
            && !listen.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback())
        {
            return Err(ConfigError(format!(
                "{}: key `metrics.listen`: {listen:?} is not a loopback address like 127.0.0.1:9464 (the endpoint has no token; elsewhere, use the hub's /metrics)",
                path.display()
            )));
        }
        if let Some(url) = &config.store.url
            && let Err(e) = crate::store::Location::parse(url)
        {
            return Err(ConfigError(format!("{}: key `store.url`: {e}", path.display())));
        }
        let (hb, ttl) = (config.store.heartbeat_ms, config.store.lease_ms);
        if hb < 10 || ttl < hb * 4 {
            return Err(ConfigError(format!(
                "{}: key `store.lease_ms`: the lease ({ttl} ms) must last at least four heartbeats ({hb} ms each, at least 10)",
                path.display()
            )));
        }
        if let Err(e) = parse_keep(&config.history.keep_sessions) {
            return Err(ConfigError(format!("{}: key `history.keep_sessions`: {e}", path.display())));
        }
        for (i, n) in config.notify.iter().enumerate() {
            n.check()
                .map_err(|e| ConfigError(format!("{}: [[notify]] #{} ({}): {e}", path.display(), i + 1, n.name(i))))?;
        }
        if let Some(h) = &config.heartbeat {
            if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                return Err(ConfigError(format!(
                    "{}: key `heartbeat.url`: {:?} is not an http(s) URL",
                    path.display(),
                    h.url
                )));
            }
            if h.every().is_none() {
                return Err(ConfigError(format!(
                    "{}: key `heartbeat.interval`: {:?} is not a duration of a second or more (such as \"5m\")",
                    path.display(),
                    h.interval.as_deref().unwrap_or_default()
                )));
            }
        }
        if let Some(url) = &config.telemetry.otlp_endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ConfigError(format!(
                "{}: key `telemetry.otlp_endpoint`: {url:?} is not an http(s) URL (such as \"http://127.0.0.1:4318\")",
                path.display()
            )));
        }
        for (name, p) in &config.providers {
            p.check_fallbacks(name, &config.providers)
                .map_err(|e| ConfigError(format!("{}: [providers.{name}]: {e}", path.display())))?;
        }
        if config.log_max_bytes < 4096 {
            return Err(ConfigError(format!("{}: key `log_max_bytes`: must be at least 4096", path.display())));
        }
        Ok(config)
    }
}

/// Parses TOML into `T`, turning the parser's multi-line report into one line:
/// `FILE:LINE: message`.
pub fn toml_from_str<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError(one_line_toml_error(path, text, &e)))
}

pub(crate) fn one_line_toml_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    let start = e.span().map(|s| s.start.min(text.len()));
    let line = start.map(|s| text.get(..s).unwrap_or("").matches('\n').count() + 1);
    let msg = e.message().trim().replace('\n', " ");
    let msg = unknown_key(&msg).unwrap_or(msg);
    // Name the key of the line the error points at, when the message does not.
    let key = line
        .and_then(|l| text.lines().nth(l - 1))
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim().trim_matches('"'))
        .filter(|k| !k.is_empty() && k.len() <= 64 && !msg.contains(&format!("`{k}`")))
        .map(|k| format!("key `{k}`: "))
        .unwrap_or_default();
    match line {
        Some(l) => format!("{}:{l}: {key}{msg}", path.display()),
        None => format!("{}: {msg}", path.display()),
    }
}

/// `cryo.toml` keys only the seed system used: accepted, warned about, ignored.
pub const LEGACY_KEYS: &[&str] = &[
    "max_retries",
    "watch_inbox",
    "fallback_alert",
    "report_time",
    "report_interval",
    "rotate_on",
    "providers",
    "zulip_poll_interval",
    "gh_poll_interval",
    "web_host",
    "web_port",
    "wait_timeout",
    "timeout",
];

/// The keys `T` takes, from its own definition: serde names them all when
/// it meets one it does not know.
pub fn fields_of<T: serde::de::DeserializeOwned>() -> Vec<String> {
    let Err(e) = toml::from_str::<T>("__no_such_key__ = 0") else { return Vec::new() };
    let msg = e.message().to_string();
    let Some((_, rest)) = msg.split_once("expected one of ") else {
        // "expected `a`" (one key), or "there are no fields".
        return msg.split('`').skip(3).step_by(2).map(str::to_string).collect();
    };
    rest.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Every table of `cryod.toml` and the keys it takes, from the code's own
/// definitions (the reference's list is checked against this).
pub fn key_lists() -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("", fields_of::<Config>()),
        ("[hub]", fields_of::<HubConfig>()),
        ("[metrics]", fields_of::<MetricsConfig>()),
        ("[store]", fields_of::<StoreConfig>()),
        ("[telemetry]", fields_of::<TelemetryConfig>()),
        ("[history]", fields_of::<HistoryConfig>()),
        ("[heartbeat]", fields_of::<HeartbeatConfig>()),
        ("[[notify]]", fields_of::<NotifierConfig>()),
        ("[providers.NAME]", fields_of::<ProviderConfig>()),
        ("[providers.NAME.budget]", fields_of::<Budget>()),
        ("[prices.\"MODEL\"]", fields_of::<crate::agent_events::Price>()),
    ]
}

/// serde's "unknown field `X`, expected one of `a`, `b`, …" (every key,
/// the seed system's too) as one short line: the key and the closest
/// current key, if one is close. `None` for any other message.
fn unknown_key(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let keys: Vec<&str> = rest.split('`').skip(1).step_by(2).filter(|k| !LEGACY_KEYS.contains(k)).collect();
    if LEGACY_KEYS.contains(&key) {
        return Some(format!("`{key}` is a key of the seed system (cryochamber), not used here"));
    }
    let close = keys
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&key.to_lowercase(), k), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min();
    Some(match close {
        Some((_, k)) => format!("unknown key `{key}`: did you mean `{k}`?"),
        None if keys.is_empty() => format!("unknown key `{key}`: this table takes no keys"),
        None => format!("unknown key `{key}` (docs/src/reference.md#every-key lists them)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_names_its_keys() {
        for (table, keys) in key_lists() {
            assert!(!keys.is_empty(), "{table} names no keys");
        }
    }

    #[test]
    fn a_keep_too_short_says_so() {
        for short in ["0d", "0y", "12h"] {
            let e = parse_keep(short).unwrap_err();
            assert!(e.contains("keeps less than a day"), "{short}: {e}");
        }
        assert!(parse_keep("soon").unwrap_err().contains("give years, weeks or days"));
        assert_eq!(parse_keep("2y").unwrap(), Some(chrono::Duration::days(730)));
    }

    #[test]
    fn an_unknown_key_names_the_closest_one_in_one_short_line() {
        let msg = "unknown field `stall_afterr`, expected one of `agent`, `stall_after`, `loop_after`, `max_retries`";
        assert_eq!(unknown_key(msg).unwrap(), "unknown key `stall_afterr`: did you mean `stall_after`?");
        let msg = "unknown field `timzone`, expected `timezone` or `agent`";
        assert_eq!(unknown_key(msg).unwrap(), "unknown key `timzone`: did you mean `timezone`?");
        let far = "unknown field `colour`, expected one of `agent`, `stall_after`";
        assert_eq!(unknown_key(far).unwrap(), "unknown key `colour` (docs/src/reference.md#every-key lists them)");
        // A seed system's key is never offered, and is named as such.
        let msg = "unknown field `max_retrie`, expected one of `max_retries`, `max_attempts`";
        assert_eq!(unknown_key(msg).unwrap(), "unknown key `max_retrie` (docs/src/reference.md#every-key lists them)");
        assert!(unknown_key("invalid type: string, expected u32").is_none());
        let long = format!(
            "unknown field `x`, expected one of {}",
            (0..41).map(|i| format!("`key{i}`")).collect::<Vec<_>>().join(", ")
        );
        assert!(unknown_key(&long).unwrap().len() < 200);
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cryod.toml");
        std::fs::write(&p, text).unwrap();
        Config::load(&p)
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(load("").unwrap(), Config::default());
        assert_eq!(load("max_concurrent_sessions = 8\n").unwrap().max_concurrent_sessions, Some(8));
        // Unset: derived from the machine (this one has its memory known).
        let derived = Config::default().session_limit();
        let memory = super::machine_memory().expect("/proc/meminfo");
        assert_eq!(derived as u64, (memory / 4 * 3 / super::SESSION_FOOTPRINT).clamp(2, 64));
        assert_eq!(Config::load(Path::new("/nonexistent/cryod.toml")).unwrap(), Config::default());
        let c = load(
            "limit_hold_seconds = 20\n[prices.m1]\ninput = 1.0\noutput = 2.0\n\
             [providers.p1]\nmax_concurrent = 2\n[providers.p1.budget]\ndaily_usd = 5.0\nmax_session_usd = 1.5\n",
        )
        .unwrap();
        assert_eq!(c.limit_hold_seconds, 20);
        assert_eq!(c.prices["m1"].cached, None);
        let p1 = &c.providers["p1"];
        assert_eq!(
            (p1.max_concurrent, p1.budget.daily_usd, p1.budget.max_session_usd),
            (Some(2), Some(5.0), Some(1.5))
        );
        let e = load("[providers.p1.budget]\ndaily_usdd = 5.0\n").unwrap_err().to_string();
        assert!(e.contains(":2:") && e.contains("daily_usdd"), "{e}");
    }

    #[test]
    fn fallback_accounts_are_checked_when_read() {
        let c = load(
            "[providers.work]\nfallback = [\"spare\", \"openai\"]\n\
             [providers.spare]\nenv = { ANTHROPIC_API_KEY = { file = \"~/.config/cryo/spare.key\" } }\n\
             [providers.openai]\nagent = \"codex\"\nenv = { OPENAI_API_KEY = \"sk-x\" }\n",
        )
        .unwrap();
        assert_eq!(c.providers["work"].fallback, ["spare", "openai"]);
        assert_eq!(c.providers["openai"].agent.as_deref(), Some("codex"));
        for (bad, says) in [
            ("[providers.work]\nfallback = [\"nobody\"]\n", "names `nobody`, but there is no [providers.nobody]"),
            ("[providers.work]\nfallback = [\"work\"]\n", "cannot be its own fallback"),
            (
                "[providers.work]\nfallback = [\"x\"]\n[providers.x]\nmax_concurrent = 1\n",
                "has no env (its key) and no agent",
            ),
            ("[providers.x]\nenv = { K = { file = \"rel/key\" } }\n", "neither an absolute path nor one under ~/"),
            ("[providers.x]\nenv = { K = 3 }\n", "a string, or a table { file"),
        ] {
            let e = load(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.lines().count() == 1, "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = load("\nmax_concurrent_session = 8\n").unwrap_err().to_string();
        assert!(e.contains("cryod.toml:2:"), "{e}");
        assert!(e.contains("max_concurrent_session"), "{e}");
        assert!(!e.contains('\n'));
        let e = load("max_concurrent_sessions = \"many\"\n").unwrap_err().to_string();
        assert!(e.contains(":1:") && e.contains("invalid type"), "{e}");
        let e = load("max_concurrent_sessions = 0\n").unwrap_err().to_string();
        assert!(e.contains("max_concurrent_sessions"), "{e}");
    }
}
