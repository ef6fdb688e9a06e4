//! Reading `cryod.toml`: the file checked whole (each error one line
//! naming the file, the line and the key), and what the reading of any
//! TOML file of cryo's shares: serde's report made one line, an unknown
//! key answered with the closest known one, the keys each table takes.

use std::path::{Path, PathBuf};

use super::keys::{
    Config, HeartbeatConfig, HistoryConfig, HubConfig, MetricsConfig, StoreConfig, TelemetryConfig, parse_keep,
};
use super::notify::NotifierConfig;
use super::providers::{Budget, ProviderConfig};

/// Why `cryod.toml` cannot be used: one line, naming the file (and the
/// key, or the line).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is there but cannot be read.
    #[error("{}: cannot read: {error}", path.display())]
    Unreadable { path: PathBuf, error: std::io::Error },
    /// Not TOML, or not the file's shape (an unknown key, a value of the
    /// wrong type): the parser's report, made one line `FILE:LINE: …`.
    #[error("{0}")]
    Toml(String),
    /// A value cryod does not take; `at` names where it is, as the file
    /// does (``key `hub.bind` ``, `[[notify]] #2 (ops)`, `[providers.work]`).
    #[error("{}: {at}: {message}", path.display())]
    Invalid { path: PathBuf, at: String, message: String },
}

impl Config {
    /// Reads `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(error) => return Err(ConfigError::Unreadable { path: path.to_path_buf(), error }),
        };
        Config::parse(path, &text)
    }

    /// Parses the text of `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml_from_str(path, text)?;
        let invalid =
            |at: &str, message: String| ConfigError::Invalid { path: path.to_path_buf(), at: at.into(), message };
        if config.max_concurrent_sessions == Some(0) {
            return Err(invalid("key `max_concurrent_sessions`", "must be at least 1".into()));
        }
        if let Some(bind) = &config.hub.bind
            && bind.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(invalid("key `hub.bind`", format!("{bind:?} is not an address like 127.0.0.1:8765")));
        }
        if let Some(listen) = &config.metrics.listen
            && !listen.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback())
        {
            return Err(invalid(
                "key `metrics.listen`",
                format!(
                    "{listen:?} is not a loopback address like 127.0.0.1:9464 (the endpoint has no token; elsewhere, use the hub's /metrics)"
                ),
            ));
        }
        if let Some(url) = &config.store.url
            && let Err(e) = crate::store::Location::parse(url)
        {
            return Err(invalid("key `store.url`", e.to_string()));
        }
        let (hb, ttl) = (config.store.heartbeat_ms, config.store.lease_ms);
        if hb < 10 || ttl < hb * 4 {
            return Err(invalid(
                "key `store.lease_ms`",
                format!("the lease ({ttl} ms) must last at least four heartbeats ({hb} ms each, at least 10)"),
            ));
        }
        if let Err(e) = parse_keep(&config.history.keep_sessions) {
            return Err(invalid("key `history.keep_sessions`", e.to_string()));
        }
        for (i, n) in config.notify.iter().enumerate() {
            n.check().map_err(|e| invalid(&format!("[[notify]] #{} ({})", i + 1, n.name(i)), e.to_string()))?;
        }
        if let Some(h) = &config.heartbeat {
            if !(h.url.starts_with("http://") || h.url.starts_with("https://")) {
                return Err(invalid("key `heartbeat.url`", format!("{:?} is not an http(s) URL", h.url)));
            }
            if h.every().is_none() {
                return Err(invalid(
                    "key `heartbeat.interval`",
                    format!(
                        "{:?} is not a duration of a second or more (such as \"5m\")",
                        h.interval.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
        if let Some(url) = &config.telemetry.otlp_endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid(
                "key `telemetry.otlp_endpoint`",
                format!("{url:?} is not an http(s) URL (such as \"http://127.0.0.1:4318\")"),
            ));
        }
        for (name, p) in &config.providers {
            p.check_fallbacks(path, name, &config.providers)?;
        }
        if config.log_max_bytes < 4096 {
            return Err(invalid("key `log_max_bytes`", "must be at least 4096".into()));
        }
        Ok(config)
    }
}

/// Parses TOML into `T`, turning the parser's multi-line report into one line:
/// `FILE:LINE: message`.
pub fn toml_from_str<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Toml(one_line_toml_error(path, text, &e)))
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
        ("[prices.\"MODEL\"]", fields_of::<cryo_session::Price>()),
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
    use super::super::keys::{SESSION_FOOTPRINT, machine_memory};
    use super::*;

    #[test]
    fn every_table_names_its_keys() {
        for (table, keys) in key_lists() {
            assert!(!keys.is_empty(), "{table} names no keys");
        }
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
        let memory = machine_memory().expect("/proc/meminfo");
        assert_eq!(derived as u64, (memory / 4 * 3 / SESSION_FOOTPRINT).clamp(2, 64));
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
