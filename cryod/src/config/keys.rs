//! The keys of `cryod.toml`, each with its default: [`Config`] (the top
//! level, with the sessions a machine runs at once when it does not say),
//! and the daemon's own tables: `[hub]`, `[metrics]`, `[store]`,
//! `[history]`, `[telemetry]`, `[heartbeat]`.

use serde::Deserialize;

use super::notify::NotifierConfig;
use super::providers::ProviderConfig;
use crate::store::postgres::LeaseTimes;
use cryo_session::Sandbox;

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
    /// table (`cryo_session`'s `default_prices`).
    pub prices: std::collections::BTreeMap<String, cryo_session::Price>,
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

impl Config {
    /// Sessions at once: the setting, else [`machine_session_limit`].
    pub fn session_limit(&self) -> usize {
        self.max_concurrent_sessions.unwrap_or_else(machine_session_limit)
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
pub(super) fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
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

/// `[metrics]`: the OpenMetrics endpoint. It is always on the hub's
/// listener (with the hub's token); `listen` also serves it, without a
/// token, on a loopback address of its own (for a local Prometheus).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// For example `127.0.0.1:9464`; loopback only.
    pub listen: Option<String>,
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

/// `[telemetry]` in `cryod.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// An OTLP/HTTP receiver (`http://127.0.0.1:4318`): each wake is
    /// exported to `{otlp_endpoint}/v1/traces` as a trace.
    pub otlp_endpoint: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keep_too_short_says_so() {
        for short in ["0d", "0y", "12h"] {
            let e = parse_keep(short).unwrap_err();
            assert!(e.contains("keeps less than a day"), "{short}: {e}");
        }
        assert!(parse_keep("soon").unwrap_err().contains("give years, weeks or days"));
        assert_eq!(parse_keep("2y").unwrap(), Some(chrono::Duration::days(730)));
    }
}
