//! `cryo.toml`: one chamber's configuration.
//!
//! Unknown keys are errors (most are typos), except the keys only the seed
//! system used, which are accepted with a one-line warning so its chambers run
//! unchanged. A malformed file is reported with file, line and key, and the
//! chamber is marked faulted; cryod never rewrites it.
//!
//! Its rooms: the settings, defaults applied (here); the file read and its
//! keys checked (`parse.rs`); what the agent reaches beyond its chamber
//! (`reach.rs`: `[provider]`, `writable`, `readable`, the links on the
//! way); `[approvals]` (`approvals.rs`); `[git]` ([`git`]); and the errors
//! and the lines they name (`error.rs`).

mod approvals;
mod error;
pub mod git;
mod parse;
mod reach;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono_tz::Tz;
use serde::Deserialize;

use cryo_core::chamber::handoff::OnEnd;

pub use self::error::ConfigError;
pub use self::git::{Git, Mode as GitMode, Repo};
pub use self::parse::{FILE, MAX_CONFIG_BYTES, key_lists, load, load_in, open, parse, read_text, read_text_in};
pub use self::reach::Reach;

/// The seed system's default agent, kept so its chambers behave the same.
pub const DEFAULT_AGENT: &str = "opencode";
pub const DEFAULT_MAX_SESSION_SECS: u64 = 3600;
/// `loop_after` unless set: an agent that makes one tool call this many
/// times in a row is not getting anywhere (one that waits should hibernate).
pub const DEFAULT_LOOP_AFTER: u32 = 20;
/// `precheck_timeout` unless set: a check is meant to be cheap.
pub const DEFAULT_PRECHECK_SECS: u64 = cryo_core::chamber::DEFAULT_PRECHECK_TIMEOUT.as_secs();
pub use cryo_core::todo::DEFAULT_MAX_ATTEMPTS;

/// A chamber's settings, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ChamberConfig {
    pub agent: String,
    /// 0 = no limit.
    pub max_session_duration: u64,
    /// `stall_after` and `loop_after`: what ends a session that stalls or
    /// loops.
    pub watch: Watch,
    /// `keep_exchanges`: each model request through the gateway, and its
    /// response, kept redacted in `.cryo/exchanges/SESSION.jsonl`.
    pub keep_exchanges: bool,
    pub timezone: Tz,
    /// Whether `timezone` came from the file (else the system's zone).
    pub timezone_set: bool,
    /// Absolute folders whose new files wake the agent.
    pub watch_dirs: Vec<PathBuf>,
    pub provider_name: Option<String>,
    /// Secret: never printed, logged or returned by an API.
    pub provider_env: BTreeMap<String, String>,
    /// `[provider].env` values kept in files (absolute), read at each spawn
    /// ([`ChamberConfig::agent_env`]).
    pub provider_env_files: BTreeMap<String, PathBuf>,
    /// `[provider] gateway` (default true): a known kind reaches its
    /// provider through cryod's gateway, and holds no key of its own.
    pub gateway: bool,
    pub max_attempts: u32,
    /// `[history] keep_done`: done TODOs `todo.json` keeps (the newest);
    /// older ones move to `.cryo/todo-done.jsonl`.
    pub keep_done: usize,
    /// Offer `cryo-agent mcp` to a known agent CLI as its `cryo` MCP server
    /// (`mcp`, default true; no effect on other agent commands).
    pub mcp: bool,
    /// `[budget]`: what this chamber may spend.
    pub budget: crate::config::Budget,
    /// `[approvals]`: which tool calls run, wait for a person, or are
    /// refused (`None`: the section is absent, and the agent's CLI runs
    /// with its permission prompts off, as before).
    pub approvals: Option<Box<cryo_core::approvals::Policy>>,
    /// `[git]`: the repository the sessions work in, each in a worktree on
    /// the chamber's branch (`None`: the chamber folder is the working
    /// folder, as before).
    pub git: Option<Box<Git>>,
    /// `session` and `resume_max_*`: whether sessions continue one
    /// provider conversation.
    pub continuity: cryo_core::session::Continuity,
    /// `precheck`: run before each scheduled wake of a TODO without its own.
    pub precheck: Option<String>,
    /// `precheck_timeout`, seconds (default 60).
    pub precheck_timeout: u64,
    /// `[[on_end]]`: the chambers a session's end is handed on to.
    pub on_end: Vec<Chain>,
    /// `expect_activity_within`: the dead man's switch.
    pub expect_activity_within: Option<chrono::Duration>,
    /// `sandbox`; `None`: cryod.toml's default.
    pub sandbox: Option<crate::config::Sandbox>,
    /// `network`: where the session's processes may connect (default
    /// `open`; `gateway`: the provider gateway only).
    pub network: crate::config::Network,
    /// `writable` and `readable`: folders a sandboxed agent may also write,
    /// or read (absolute; resolved at each spawn, see [`Reach`]).
    pub writable: Vec<PathBuf>,
    pub readable: Vec<PathBuf>,
    /// The paths deciding the agent's reach that the agent could put a
    /// link on, with where each led when the file was read.
    pub reach: Vec<Reach>,
    /// The upstream the agent's CLI names in its own config file, as read
    /// with this file (set by the supervisor, see [`Loaded::pin_upstream`]):
    /// part of what the operator accepts, and what the gateway may send
    /// the key to.
    pub file_upstream: Option<String>,
    /// `memory_max` and `cpu_weight`: the session's systemd scope limits
    /// (when cryod runs under systemd).
    pub limits: crate::config::Limits,
    pub zulip: Option<Box<ZulipSync>>,
    pub github: Option<Box<GithubSync>>,
}

/// When cryod ends a running session that gets nowhere (a known kind's:
/// cryod reads its events and its model requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    /// `stall_after`: no model request and no agent event for this long
    /// (none unless set: a long build makes no events).
    pub stall_after: Option<std::time::Duration>,
    /// `loop_after`: the same tool call (or answered model request) this many times in a row
    /// ([`DEFAULT_LOOP_AFTER`] unless set; 0: never).
    pub loop_after: Option<u32>,
}

impl Default for Watch {
    fn default() -> Watch {
        Watch { stall_after: None, loop_after: Some(DEFAULT_LOOP_AFTER) }
    }
}

/// One `[[on_end]]` table, and where it names its chamber (`file:line`,
/// for the error if no such chamber is registered).
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub link: OnEnd,
    pub at: String,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ZulipSync {
    pub site: Option<String>,
    pub stream: String,
    pub topic: String,
    pub credentials: String,
}

#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GithubSync {
    pub repo: String,
    pub discussion: Option<u64>,
    pub issue: Option<u64>,
    pub token_file: Option<String>,
    pub api_url: Option<String>,
    /// Seconds between polls (GitHub has no long poll); default 30.
    pub poll_interval: Option<u64>,
}

/// The result of reading `cryo.toml`: the config, one-line warnings, and
/// the digests of the settings the operator must accept
/// ([`super::trust`]).
pub struct Loaded {
    pub config: ChamberConfig,
    pub warnings: Vec<String>,
    pub trust: BTreeMap<String, String>,
}

impl Loaded {
    /// Reads, with `cryo.toml`, the upstream the agent's CLI names in its
    /// own config file into `file_upstream`, and folds it into the digest
    /// of `[provider]` the operator accepts (a chamber that does not use
    /// the gateway has none).
    pub fn pin_upstream(&mut self, root: &std::path::Path) {
        if !self.config.gateway {
            return;
        }
        let upstream = cryo_session::agent_file_upstream(&self.config.agent, &self.config.provider_env, root);
        super::trust::fold_upstream(&mut self.trust, upstream.as_deref());
        self.config.file_upstream = upstream;
    }
}

impl ChamberConfig {
    /// What the session wing reads of these settings, for whatever runs
    /// for the chamber (its agent, its pre-checks).
    pub fn setup(&self) -> cryo_session::Setup {
        cryo_session::Setup {
            agent: self.agent.clone(),
            network: self.network,
            limits: self.limits.clone(),
            writable: self.writable.clone(),
            readable: self.readable.clone(),
            mcp: self.mcp,
            gateway: self.gateway,
            file_upstream: self.file_upstream.clone(),
            keep_exchanges: self.keep_exchanges,
            timezone: self.timezone_set.then(|| self.timezone.name().to_string()),
        }
    }
}
