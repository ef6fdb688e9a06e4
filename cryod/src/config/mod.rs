//! `cryod.toml`: the daemon's own settings. Every key is optional; an unknown
//! key or a bad value is an error naming the file, the line and the key.
//!
//! Its rooms: the keys and their defaults (`keys.rs`: [`Config`] and the
//! daemon's small tables), `[providers.NAME]` and budgets
//! (`providers.rs`), `[[notify]]` (`notify.rs`), and the reading of the
//! file (`parse.rs`), whose one-line errors every TOML file of cryo's uses.
//! A session's confinement (`sandbox`, `network`, limits), which
//! `cryo.toml` shares, is `cryo_session`'s.

mod keys;
mod notify;
mod parse;
mod providers;

pub use cryo_session::{Limits, NETWORK_LANDLOCK, Network, Sandbox};
pub use keys::{
    Config, HeartbeatConfig, HistoryConfig, HubConfig, MetricsConfig, SESSION_FOOTPRINT, StoreConfig, TelemetryConfig,
    default_hub_port, machine_session_limit, parse_keep,
};
pub use notify::{NotifierConfig, NotifyConfigError, parse_quiet_hours};
pub(crate) use parse::one_line_toml_error;
pub use parse::{ConfigError, LEGACY_KEYS, fields_of, key_lists, toml_from_str};
pub use providers::{Budget, EnvValue, ProviderConfig};
