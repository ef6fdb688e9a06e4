//! `[providers.NAME]`: what one provider account may do (sessions at
//! once, its upstream, its budget, the accounts it falls back to), and the
//! [`Budget`] a chamber's `[budget]` shares.

use serde::Deserialize;

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
    /// `path` is the file's, named in the error.
    pub(super) fn check_fallbacks(
        &self,
        path: &std::path::Path,
        name: &str,
        all: &std::collections::BTreeMap<String, ProviderConfig>,
    ) -> Result<(), super::ConfigError> {
        let invalid = |message: String| super::ConfigError::Invalid {
            path: path.to_path_buf(),
            at: format!("[providers.{name}]"),
            message,
        };
        for f in &self.fallback {
            if f == name {
                return Err(invalid(format!("`{name}` cannot be its own fallback")));
            }
            let Some(other) = all.get(f) else {
                return Err(invalid(format!(
                    "names `{f}`, but there is no [providers.{f}] with its key (env) or agent"
                )));
            };
            if other.env.is_empty() && other.agent.is_none() {
                return Err(invalid(format!(
                    "[providers.{f}] has no env (its key) and no agent: it cannot take a wake"
                )));
            }
        }
        for (k, v) in &self.env {
            if let EnvValue::File { file } = v
                && !(file.is_absolute() || file.starts_with("~"))
            {
                return Err(invalid(format!(
                    "env.{k}: {} is neither an absolute path nor one under ~/",
                    file.display()
                )));
            }
        }
        if self.agent.as_deref().is_some_and(|a| a.trim().is_empty()) {
            return Err(invalid("key `agent` is empty: name the agent command".into()));
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
