//! `cryo.toml`: one chamber's configuration.
//!
//! Unknown keys are errors (most are typos), except the keys only the seed
//! system used, which are accepted with a one-line warning so its chambers run
//! unchanged. A malformed file is reported with file, line and key, and the
//! chamber is marked faulted; cryod never rewrites it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono_tz::Tz;
use serde::Deserialize;

use super::FileError;
use crate::config::one_line_toml_error;
use cryo_core::chamber::handoff::OnEnd;

/// The seed system's default agent, kept so its chambers behave the same.
pub const DEFAULT_AGENT: &str = "opencode";
pub const DEFAULT_MAX_SESSION_SECS: u64 = 3600;
/// `loop_after` unless set: an agent that makes one tool call this many
/// times in a row is not getting anywhere (one that waits should hibernate).
pub const DEFAULT_LOOP_AFTER: u32 = 20;
/// `precheck_timeout` unless set: a check is meant to be cheap.
pub const DEFAULT_PRECHECK_SECS: u64 = cryo_core::chamber::DEFAULT_PRECHECK_TIMEOUT.as_secs();
pub use cryo_core::todo::DEFAULT_MAX_ATTEMPTS;

use crate::config::LEGACY_KEYS;

/// Every table of `cryo.toml` and the keys it takes (the seed system's
/// legacy keys left out: [`LEGACY_KEYS`]), from the code's own definitions
/// (the reference's list is checked against this).
pub fn key_lists() -> Vec<(&'static str, Vec<String>)> {
    use crate::config::fields_of;
    let top = fields_of::<Raw>().into_iter().filter(|k| !LEGACY_KEYS.contains(&k.as_str())).collect();
    vec![
        ("", top),
        ("[provider]", fields_of::<RawProvider>()),
        ("[provider.env] NAME = { ... }", fields_of::<RawEnvFile>()),
        ("[budget]", fields_of::<crate::config::Budget>()),
        ("[approvals]", fields_of::<RawApprovals>()),
        ("[git]", fields_of::<git::RawGit>()),
        ("[history]", fields_of::<RawHistory>()),
        ("[[on_end]]", fields_of::<RawOnEnd>()),
        ("[sync.zulip]", fields_of::<ZulipSync>()),
        ("[sync.github]", fields_of::<GithubSync>()),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    agent: Option<String>,
    max_session_duration: Option<u64>,
    stall_after: Option<String>,
    loop_after: Option<u32>,
    keep_exchanges: Option<bool>,
    timezone: Option<String>,
    watch_dirs: Option<Vec<String>>,
    provider: Option<RawProvider>,
    max_attempts: Option<u32>,
    mcp: Option<bool>,
    budget: Option<crate::config::Budget>,
    session: Option<String>,
    resume_max_age: Option<String>,
    resume_max_sessions: Option<u32>,
    resume_max_tokens: Option<u64>,
    precheck: Option<String>,
    precheck_timeout: Option<u64>,
    on_end: Option<Vec<RawOnEnd>>,
    expect_activity_within: Option<String>,
    sandbox: Option<crate::config::Sandbox>,
    network: Option<crate::config::Network>,
    writable: Option<Vec<String>>,
    readable: Option<Vec<String>>,
    memory_max: Option<String>,
    cpu_weight: Option<u32>,
    sync: Option<RawSync>,
    history: Option<RawHistory>,
    approvals: Option<RawApprovals>,
    git: Option<git::RawGit>,
    // Legacy keys (see LEGACY_KEYS): any value is accepted.
    max_retries: Option<toml::Value>,
    watch_inbox: Option<toml::Value>,
    fallback_alert: Option<toml::Value>,
    report_time: Option<toml::Value>,
    report_interval: Option<toml::Value>,
    rotate_on: Option<toml::Value>,
    providers: Option<toml::Value>,
    zulip_poll_interval: Option<toml::Value>,
    gh_poll_interval: Option<toml::Value>,
    web_host: Option<toml::Value>,
    web_port: Option<toml::Value>,
    wait_timeout: Option<toml::Value>,
    timeout: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnEnd {
    chamber: toml::Spanned<String>,
    when: toml::Spanned<String>,
    message: Option<toml::Spanned<String>>,
    max_per_hour: Option<toml::Spanned<u32>>,
}

/// One `[[on_end]]` table, and where it names its chamber (`file:line`,
/// for the error if no such chamber is registered).
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    pub link: OnEnd,
    pub at: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    name: Option<String>,
    gateway: Option<bool>,
    #[serde(default)]
    env: BTreeMap<String, RawEnvValue>,
}

/// A `[provider].env` value: the text itself, or `{ file = "PATH" }`, a
/// file only its owner may read, read at each spawn.
#[derive(Deserialize)]
#[serde(untagged, expecting = "a string, or a table { file = \"PATH\" } naming a file that holds the value")]
enum RawEnvValue {
    Text(String),
    File(RawEnvFile),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvFile {
    file: String,
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

/// `[history]` in `cryo.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHistory {
    keep_done: Option<u32>,
}

/// `[approvals]` in `cryo.toml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApprovals {
    allow: Option<Vec<String>>,
    ask: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    default: Option<String>,
    approval_wait: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSync {
    zulip: Option<ZulipSync>,
    github: Option<GithubSync>,
}

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
    pub approvals: Option<cryo_core::approvals::Policy>,
    /// `[git]`: the repository the sessions work in, each in a worktree on
    /// the chamber's branch (`None`: the chamber folder is the working
    /// folder, as before).
    pub git: Option<Git>,
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
    /// with this file (set by the supervisor, see `agent::gateway::pin`):
    /// part of what the operator accepts, and what the gateway may send
    /// the key to.
    pub file_upstream: Option<String>,
    /// `memory_max` and `cpu_weight`: the session's systemd scope limits
    /// (when cryod runs under systemd).
    pub limits: crate::config::Limits,
    pub zulip: Option<ZulipSync>,
    pub github: Option<GithubSync>,
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

/// A path `cryo.toml` names for the agent's reach (`writable`, `readable`,
/// a `[provider].env` file or path) that lies where the agent may write
/// links (its chamber, a `writable` folder), and where it led when the
/// file was read. One that leads elsewhere at the next spawn than it did
/// when the operator accepted it holds the chamber
/// ([`ChamberConfig::moved`]), and where it leads is part of what the
/// operator accepts ([`super::trust`]). Paths elsewhere may pass links the
/// operator keeps (a key rotated behind `/run/agenix`): they are resolved
/// afresh at each spawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach {
    pub key: String,
    pub named: PathBuf,
    pub resolved: PathBuf,
}

impl Reach {
    fn new(key: &str, named: PathBuf) -> Reach {
        let resolved = resolve(&named);
        Reach { key: key.to_string(), named, resolved }
    }
}

/// Where `path` leads now: its absolute form with every link followed, or
/// itself if it does not exist (yet).
fn resolve(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The result of reading `cryo.toml`: the config, one-line warnings, and
/// the digests of the settings the operator must accept
/// ([`super::trust`]).
pub struct Loaded {
    pub config: ChamberConfig,
    pub warnings: Vec<String>,
    pub trust: BTreeMap<String, String>,
}

pub use self::error::ConfigError;
use self::error::{Lines, PathError};
pub use self::git::{Git, Mode as GitMode, Repo};

/// Largest `cryo.toml` read (a configuration, not a data file).
pub const MAX_CONFIG_BYTES: usize = 256 * 1024;

/// A path from `cryo.toml`: `~/…` under the user's home, a relative one
/// under the chamber.
fn expand_home(raw: &str, dir: &Path) -> Result<PathBuf, PathError> {
    if raw.trim().is_empty() {
        return Err(PathError::Empty);
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or(PathError::NoHome)?;
        return Ok(PathBuf::from(home).join(rest));
    }
    let p = Path::new(raw);
    Ok(if p.is_absolute() { p.to_path_buf() } else { dir.join(p) })
}

/// The longest secret file read (a key, a token: not a document).
const MAX_SECRET_BYTES: u64 = 64 * 1024;

impl ChamberConfig {
    /// The first path of [`Reach`] that leads elsewhere now than when the
    /// file was read (a link planted or moved since), as one line.
    pub fn moved(&self) -> Option<String> {
        self.reach.iter().find_map(|r| {
            let now = resolve(&r.named);
            (now != r.resolved).then(|| {
                format!(
                    "cryo.toml: `{}` names {}, which now leads to {} (it led to {} when read): a link on the way \
                     changed, and the chamber is held until the operator accepts it",
                    r.key,
                    r.named.display(),
                    now.display(),
                    r.resolved.display()
                )
            })
        })
    }

    /// `[provider].env` for a spawn: the values written in `cryo.toml`, and
    /// those kept in files, read now. A file that is missing, not a plain
    /// file, too large, or readable by anyone but its owner is refused with
    /// one line naming the key (its value is never in the line).
    pub fn agent_env(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        use std::os::unix::fs::MetadataExt;
        let mut env = self.provider_env.clone();
        for (key, path) in &self.provider_env_files {
            let refuse = |why: String| ConfigError::KeyFile { key: key.clone(), path: path.clone(), why };
            let meta = std::fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
            if !meta.is_file() {
                return Err(refuse("not a file".into()));
            }
            if meta.mode() & 0o077 != 0 {
                return Err(refuse(format!(
                    "readable by others (mode {:o}): `chmod 600 {}`",
                    meta.mode() & 0o777,
                    path.display()
                )));
            }
            if meta.len() > MAX_SECRET_BYTES {
                return Err(refuse(format!("over {} KiB: not a key", MAX_SECRET_BYTES / 1024)));
            }
            // Resolved now, then read without following a link: one planted
            // meanwhile is refused.
            let bytes =
                cryo_files::read_resolved(&resolve(path), MAX_SECRET_BYTES).map_err(|e| refuse(e.to_string()))?;
            let text = String::from_utf8(bytes).map_err(|_| refuse("not UTF-8 text".into()))?;
            env.insert(key.clone(), text.trim_end_matches(['\n', '\r']).to_string());
        }
        Ok(env)
    }
}

/// The variables that name a provider account's key and endpoint, which a
/// fallback account's own replace.
const ACCOUNT_VARS: &[&str] =
    &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"];

impl ChamberConfig {
    /// These settings for a session on the fallback account `name`
    /// (`[providers.NAME]` in `cryod.toml`: `p`): it bills `name`; its
    /// `env` replaces the chamber's key and endpoint variables; with an
    /// `agent` of its own, that agent runs with that `env` alone (the
    /// chamber's belong to its own agent), and what its CLI's file names
    /// is not the operator's to have accepted.
    pub fn on_account(&self, name: &str, p: &crate::config::ProviderConfig) -> ChamberConfig {
        let mut c = self.clone();
        c.provider_name = Some(name.to_string());
        if let Some(agent) = &p.agent {
            c.agent = agent.clone();
            c.provider_env.clear();
            c.provider_env_files.clear();
            c.file_upstream = None;
        }
        for var in ACCOUNT_VARS {
            c.provider_env.remove(*var);
            c.provider_env_files.remove(*var);
        }
        for (k, v) in &p.env {
            match v {
                crate::config::EnvValue::Text(t) => {
                    c.provider_env_files.remove(k);
                    c.provider_env.insert(k.clone(), t.clone());
                }
                crate::config::EnvValue::File { file } => {
                    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
                    let path = file.strip_prefix("~").map(|rest| home.join(rest)).unwrap_or_else(|_| file.clone());
                    c.provider_env.remove(k);
                    c.provider_env_files.insert(k.clone(), path);
                }
            }
        }
        c
    }
}

/// Reads `<dir>/cryo.toml`. A missing file gives the defaults.
pub fn load(dir: &Path, system_tz: Tz) -> Result<Loaded, ConfigError> {
    let text = read_text(dir)?;
    parse(&dir.join(FILE), &text, dir, system_tz)
}

/// The file's name in a chamber.
pub const FILE: &str = "cryo.toml";

/// The text of the chamber `dir`'s `cryo.toml`, within
/// [`MAX_CONFIG_BYTES`]; a missing file is empty (the defaults). A link, a
/// FIFO or a folder in its place is refused without being followed or
/// opened. Errors are one line naming it.
pub fn read_text(dir: &Path) -> Result<String, ConfigError> {
    use crate::chamber::Dir;
    let d = Dir::open(dir).map_err(|e| match e {
        FileError::Missing(_) => ConfigError::FolderMissing(dir.to_path_buf()),
        FileError::NotPlain { .. } => ConfigError::FolderReplaced(dir.to_path_buf()),
        e => ConfigError::File(e),
    })?;
    match d.read_if(Path::new(FILE), MAX_CONFIG_BYTES as u64) {
        Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8(dir.join(FILE))),
        Ok(None) => Ok(String::new()),
        Err(e @ FileError::Io { .. }) => Err(ConfigError::Unreadable(e)),
        Err(e) => Err(ConfigError::File(e)),
    }
}

/// Parses the text of a `cryo.toml` at `path` for the chamber in `dir`.
pub fn parse(path: &Path, text: &str, dir: &Path, system_tz: Tz) -> Result<Loaded, ConfigError> {
    let lines = Lines { path, text };
    let table: toml::Table = lines.toml()?;
    // `[[on_end]]` keeps its spans (where each names its chamber): only the
    // text has them.
    let mut raw: Raw = if table.contains_key("on_end") { lines.toml()? } else { lines.toml_of_table(&table)? };
    let mut trust = super::trust::digests(&table);
    drop(table);
    let mut warnings = legacy_warnings(&raw, &lines);
    let (timezone, timezone_set) = timezone(raw.timezone.as_deref(), system_tz, &lines)?;
    let continuity = continuity(&raw, &lines)?;
    let (precheck, precheck_timeout) = precheck(&raw, &lines)?;
    let limits = crate::config::Limits { memory_max: raw.memory_max.take(), cpu_weight: raw.cpu_weight };
    if let Err((key, why)) = limits.check() {
        return Err(lines.invalid(key, format!("key `{key}`: {why}")));
    }
    if raw.sandbox == Some(crate::config::Sandbox::Landlock) && raw.network == Some(crate::config::Network::Gateway) {
        return Err(lines.invalid("network", format!("key `network`: {}", crate::config::NETWORK_LANDLOCK)));
    }
    let on_end = on_end(raw.on_end.take().unwrap_or_default(), path, text)?;
    let expect_activity_within = expect_activity_within(raw.expect_activity_within.as_deref(), &lines)?;
    let watch = watch(&raw, &lines)?;
    let agent = agent(raw.agent.take(), &lines)?;
    let watch_dirs = watch_dirs(raw.watch_dirs.take(), dir, &lines)?;
    check_sync(raw.sync.as_ref(), &lines)?;
    let max_attempts = max_attempts(raw.max_attempts, &lines)?;
    let keep_done = keep_done(raw.history.take(), &lines)?;
    let approvals = raw.approvals.take().map(|a| approvals(a, &lines)).transpose()?;
    // The seed system's `[[providers]]` (it used the first): `[provider]`.
    let seed_provider = raw.provider.is_none().then(|| seed_provider(raw.providers.as_ref(), &lines)).transpose()?;
    let provider = provider(raw.provider.take().or(seed_provider.flatten()), dir, &lines)?;
    warnings.extend(inline_keys(&provider, &lines));
    let writable = folders("writable", raw.writable.take(), dir, &lines)?;
    let readable = folders("readable", raw.readable.take(), dir, &lines)?;
    let github = raw.sync.as_ref().is_some_and(|s| s.github.is_some());
    let git = raw.git.take().map(|g| git::parse(g, dir, github, &lines)).transpose()?;
    if let Some(Git { repo: Repo::Path(p), .. }) = &git {
        git::beyond_the_agent(p, dir, &writable)
            .map_err(|why| lines.invalid("repo", format!("key `git.repo`: {why}")))?;
    }
    let reach = reach(dir, &writable, &readable, &provider);
    super::trust::fold_resolved(&mut trust, &reach);
    let sync = raw.sync;
    Ok(Loaded {
        config: ChamberConfig {
            agent,
            max_session_duration: raw.max_session_duration.unwrap_or(DEFAULT_MAX_SESSION_SECS),
            watch,
            keep_exchanges: raw.keep_exchanges.unwrap_or(false),
            timezone,
            timezone_set,
            watch_dirs,
            provider_name: provider.name,
            provider_env: provider.env,
            provider_env_files: provider.env_files,
            gateway: provider.gateway.unwrap_or(true),
            max_attempts,
            keep_done,
            mcp: raw.mcp.unwrap_or(true),
            budget: raw.budget.unwrap_or_default(),
            approvals,
            git,
            continuity,
            precheck,
            precheck_timeout,
            on_end,
            expect_activity_within,
            sandbox: raw.sandbox,
            network: raw.network.unwrap_or_default(),
            writable,
            readable,
            reach,
            file_upstream: None,
            limits,
            zulip: sync.as_ref().and_then(|s| s.zulip.clone()),
            github: sync.and_then(|s| s.github),
        },
        warnings,
        trust,
    })
}

/// One warning for each key only the seed system used.
fn legacy_warnings(raw: &Raw, lines: &Lines) -> Vec<String> {
    let present = [
        raw.max_retries.is_some(),
        raw.watch_inbox.is_some(),
        raw.fallback_alert.is_some(),
        raw.report_time.is_some(),
        raw.report_interval.is_some(),
        raw.rotate_on.is_some(),
        raw.providers.is_some(),
        raw.zulip_poll_interval.is_some(),
        raw.gh_poll_interval.is_some(),
        raw.web_host.is_some(),
        raw.web_port.is_some(),
        raw.wait_timeout.is_some(),
        raw.timeout.is_some(),
    ];
    LEGACY_KEYS
        .iter()
        .zip(present)
        .filter(|(_, on)| *on)
        .map(|(key, _)| match *key {
            "providers" if raw.provider.is_none() => format!(
                "{}: `[[providers]]` is the seed system's (cryochamber's): its first entry is used as [provider]",
                lines.at(key)
            ),
            _ => format!("{}: key `{key}` is from an older cryochamber and is ignored", lines.at(key)),
        })
        .collect()
}

/// `timezone`, and whether the file set it (else the system's zone).
fn timezone(name: Option<&str>, system_tz: Tz, lines: &Lines) -> Result<(Tz, bool), ConfigError> {
    match name {
        None | Some("") => Ok((system_tz, false)),
        Some(name) => name.parse::<Tz>().map(|tz| (tz, true)).map_err(|_| {
            lines.invalid(
                "timezone",
                format!("key `timezone`: {name:?} is not an IANA time zone (such as \"Europe/Berlin\" or \"UTC\")"),
            )
        }),
    }
}

/// `precheck` (trimmed; none if empty) and `precheck_timeout`.
fn precheck(raw: &Raw, lines: &Lines) -> Result<(Option<String>, u64), ConfigError> {
    let precheck = raw.precheck.clone().map(|p| p.trim().to_string()).filter(|p| !p.is_empty());
    let timeout = raw.precheck_timeout.unwrap_or(DEFAULT_PRECHECK_SECS);
    if !(1..=3600).contains(&timeout) {
        return Err(
            lines.invalid("precheck_timeout", format!("key `precheck_timeout`: {timeout} seconds is outside 1..=3600"))
        );
    }
    Ok((precheck, timeout))
}

/// `expect_activity_within`: a duration of at least a second.
fn expect_activity_within(raw: Option<&str>, lines: &Lines) -> Result<Option<chrono::Duration>, ConfigError> {
    let Some(w) = raw else { return Ok(None) };
    let d = cryo_core::time::parse_duration(w).filter(|d| *d >= chrono::Duration::seconds(1)).ok_or_else(|| {
        lines.invalid(
            "expect_activity_within",
            format!("key `expect_activity_within`: {w:?} is not a duration (such as \"2d\")"),
        )
    })?;
    Ok(Some(d))
}

/// `stall_after` (a duration) and `loop_after` (0: never).
fn watch(raw: &Raw, lines: &Lines) -> Result<Watch, ConfigError> {
    let stall_after = match raw.stall_after.as_deref() {
        None => None,
        Some(w) => {
            let d =
                cryo_core::time::parse_duration(w).filter(|d| *d >= chrono::Duration::seconds(1)).ok_or_else(|| {
                    lines
                        .invalid("stall_after", format!("key `stall_after`: {w:?} is not a duration (such as \"20m\")"))
                })?;
            Some(d.to_std().unwrap_or_default())
        }
    };
    let loop_after = match raw.loop_after {
        None => Some(DEFAULT_LOOP_AFTER),
        Some(0) => None,
        Some(1) => {
            return Err(lines.invalid(
                "loop_after",
                "key `loop_after`: 1 would end a session at its first tool call (say 0 for never)".into(),
            ));
        }
        Some(n) => Some(n),
    };
    Ok(Watch { stall_after, loop_after })
}

/// `agent`: the agent's command, [`DEFAULT_AGENT`] unless set.
fn agent(raw: Option<String>, lines: &Lines) -> Result<String, ConfigError> {
    let agent = raw.unwrap_or_else(|| DEFAULT_AGENT.to_string());
    if agent.trim().is_empty() {
        return Err(lines.invalid("agent", "key `agent` is empty: name the agent command".into()));
    }
    Ok(agent)
}

/// `watch_dirs`, absolute: a chamber watches only its own folders.
fn watch_dirs(raw: Option<Vec<String>>, dir: &Path, lines: &Lines) -> Result<Vec<PathBuf>, ConfigError> {
    let watch_dirs = raw.unwrap_or_else(|| vec!["messages/inbox".to_string()]);
    if let Some(bad) = watch_dirs.iter().find(|d| {
        let p = Path::new(d.as_str());
        d.trim().is_empty() || p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir))
    }) {
        return Err(lines.invalid(
            "watch_dirs",
            format!("key `watch_dirs`: {bad:?} is not a folder inside the chamber (give a relative path without `..`)"),
        ));
    }
    Ok(watch_dirs.into_iter().map(|d| dir.join(d)).collect())
}

/// `[sync.github]` names exactly one discussion or issue.
fn check_sync(sync: Option<&RawSync>, lines: &Lines) -> Result<(), ConfigError> {
    match sync.and_then(|s| s.github.as_ref()) {
        Some(gh) if gh.discussion.is_some() == gh.issue.is_some() => {
            Err(lines.invalid("[sync.github]", "[sync.github] needs exactly one of `discussion` and `issue`".into()))
        }
        _ => Ok(()),
    }
}

/// `[history] keep_done`: how many done TODOs `todo.json` keeps before they
/// move to its archive (at most [`MAX_TODOS`](cryo_core::todo::MAX_TODOS)).
fn keep_done(raw: Option<RawHistory>, lines: &Lines) -> Result<usize, ConfigError> {
    let Some(keep) = raw.and_then(|h| h.keep_done) else { return Ok(cryo_core::todo::DEFAULT_KEEP_DONE) };
    let max = cryo_core::todo::MAX_TODOS;
    if keep as usize > max {
        return Err(lines.invalid("keep_done", format!("key `history.keep_done`: {keep} is over the limit of {max}")));
    }
    Ok(keep as usize)
}

/// `[approvals]`: its rules, its default (`ask` unless set) and
/// `approval_wait` (a duration of at most a day, default two minutes).
fn approvals(raw: RawApprovals, lines: &Lines) -> Result<cryo_core::approvals::Policy, ConfigError> {
    use cryo_core::approvals::{Action, Policy, Rule};
    let rules = |key: &str, list: Option<Vec<String>>| -> Result<Vec<Rule>, ConfigError> {
        let rules: Result<Vec<Rule>, String> = list.unwrap_or_default().iter().map(|r| Rule::parse(r)).collect();
        rules.map_err(|why| lines.invalid(key, format!("key `approvals.{key}`: {why}")))
    };
    let default = match raw.default.as_deref() {
        None => Action::Ask,
        Some(d) => Action::parse(d).ok_or_else(|| {
            lines.invalid(
                "default",
                format!("key `approvals.default`: {d:?} is not one of \"allow\", \"ask\", \"deny\""),
            )
        })?,
    };
    let wait = match raw.approval_wait.as_deref() {
        None => cryo_core::approvals::DEFAULT_WAIT,
        Some(w) => cryo_core::time::parse_duration(w)
            .filter(|d| *d >= chrono::Duration::zero() && *d <= chrono::Duration::days(1))
            .and_then(|d| d.to_std().ok())
            .ok_or_else(|| {
                lines.invalid(
                    "approval_wait",
                    format!("key `approvals.approval_wait`: {w:?} is not a duration of at most a day (such as \"2m\")"),
                )
            })?,
    };
    Ok(Policy {
        allow: rules("allow", raw.allow)?,
        ask: rules("ask", raw.ask)?,
        deny: rules("deny", raw.deny)?,
        default,
        wait,
    })
}

/// `max_attempts`, at most 100.
fn max_attempts(raw: Option<u32>, lines: &Lines) -> Result<u32, ConfigError> {
    let max_attempts = raw.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if max_attempts > 100 {
        return Err(
            lines.invalid("max_attempts", format!("key `max_attempts`: {max_attempts} is over the limit of 100"))
        );
    }
    Ok(max_attempts)
}

/// `[provider]`: its name, the env values written in the file, and those
/// kept in files (absolute).
#[derive(Default)]
struct Provider {
    name: Option<String>,
    gateway: Option<bool>,
    env: BTreeMap<String, String>,
    env_files: BTreeMap<String, PathBuf>,
}

/// The first entry of the seed system's `[[providers]]` (`name` and `env`),
/// which is what it ran with, as a `[provider]`.
fn seed_provider(providers: Option<&toml::Value>, lines: &Lines) -> Result<Option<RawProvider>, ConfigError> {
    let Some(first) = providers.and_then(|p| p.as_array()).and_then(|a| a.first()) else { return Ok(None) };
    first.clone().try_into::<RawProvider>().map(Some).map_err(|e| {
        lines.invalid("providers", format!("[[providers]] (the seed system's), its first entry: {}", e.message()))
    })
}

fn provider(raw: Option<RawProvider>, dir: &Path, lines: &Lines) -> Result<Provider, ConfigError> {
    let Some(p) = raw else { return Ok(Provider::default()) };
    let mut out = Provider { name: p.name, gateway: p.gateway, ..Provider::default() };
    for (k, v) in p.env {
        match v {
            RawEnvValue::Text(t) => drop(out.env.insert(k, t)),
            RawEnvValue::File(f) => {
                let path = expand_home(&f.file, dir)
                    .map_err(|e| lines.invalid("[provider]", format!("[provider].env.{k}: {e}")))?;
                out.env_files.insert(k, path);
            }
        }
    }
    Ok(out)
}

/// One warning for each secret written straight into `[provider] env`:
/// `cryo.toml` is in the chamber, where the agent reads it (the gateway
/// keeps a key out of the agent's environment, not out of its files).
fn inline_keys(provider: &Provider, lines: &Lines) -> Vec<String> {
    let secret = |k: &str| {
        let upper = k.to_ascii_uppercase();
        ["KEY", "TOKEN", "SECRET", "PASSWORD"].iter().any(|w| upper.contains(w))
    };
    provider
        .env
        .iter()
        .filter(|(k, v)| secret(k) && !v.is_empty())
        .map(|(k, _)| {
            format!(
                "{}: [provider] env holds {k} in cryo.toml, which the agent can read: keep it in a file outside \
                 the chamber, {k} = {{ file = \"~/.config/cryo/keys/{}\" }}",
                lines.at("env"),
                k.to_ascii_lowercase()
            )
        })
        .collect()
}

/// `writable` or `readable` (`key`): folders, absolute.
fn folders(key: &str, list: Option<Vec<String>>, dir: &Path, lines: &Lines) -> Result<Vec<PathBuf>, ConfigError> {
    list.unwrap_or_default()
        .iter()
        .map(|f| expand_home(f, dir).map_err(|e| lines.invalid(key, format!("key `{key}`: {e}"))))
        .collect()
}

/// The paths the agent may have links on: those under its chamber or a
/// `writable` folder (named or resolved), among every path that decides
/// its reach: `writable`, `readable`, key files, and `[provider].env`
/// values that are paths (`CODEX_HOME`, `OPENCODE_CONFIG`: a CLI's state
/// is made writable, its config readable).
fn reach(dir: &Path, writable: &[PathBuf], readable: &[PathBuf], provider: &Provider) -> Vec<Reach> {
    let places: Vec<PathBuf> =
        std::iter::once(dir.to_path_buf()).chain(writable.iter().flat_map(|w| [w.clone(), resolve(w)])).collect();
    let is_path = |v: &&String| ["/", "~/", "./", "../"].iter().any(|p| v.starts_with(p));
    let env_paths = provider.env.values().filter(is_path).filter_map(|v| expand_home(v, dir).ok());
    [("writable", writable.to_vec()), ("readable", readable.to_vec())]
        .into_iter()
        .chain([("provider", provider.env_files.values().cloned().chain(env_paths).collect())])
        .flat_map(|(key, paths): (&str, Vec<PathBuf>)| paths.into_iter().map(move |p| Reach::new(key, p)))
        .filter(|r| places.iter().any(|w| r.named.starts_with(w) || r.resolved.starts_with(w)))
        .collect()
}

/// `[[on_end]]` tables, each checked where it stands (`file:line`). Whether
/// its chamber exists is for the caller, which knows the registry.
fn on_end(raw: Vec<RawOnEnd>, path: &Path, text: &str) -> Result<Vec<Chain>, ConfigError> {
    let at = |span: std::ops::Range<usize>| {
        let line = text.get(..span.start).unwrap_or("").matches('\n').count() + 1;
        format!("{}:{line}", path.display())
    };
    let mut out = Vec::new();
    for r in raw {
        let here = at(r.chamber.span());
        let chamber = r.chamber.into_inner().trim().to_string();
        if chamber.is_empty() {
            let message = "[[on_end]] `chamber` is empty: name the chamber to hand on to".into();
            return Err(ConfigError::Invalid { at: here, message });
        }
        let when =
            cryo_core::chamber::handoff::When::parse(r.when.get_ref().trim()).ok_or_else(|| ConfigError::Invalid {
                at: at(r.when.span()),
                message: format!(
                    "[[on_end]] `when`: {:?} is none of \"completed\", \"hibernated\", \"failed\", \"any\"",
                    r.when.get_ref()
                ),
            })?;
        let message = match r.message {
            Some(m) => {
                if let Some(bad) = cryo_core::chamber::handoff::unknown_placeholder(m.get_ref()) {
                    let known: Vec<String> =
                        cryo_core::chamber::handoff::PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
                    return Err(ConfigError::Invalid {
                        at: at(m.span()),
                        message: format!(
                            "[[on_end]] `message`: {{{bad}}} is not a placeholder (use {})",
                            known.join(", ")
                        ),
                    });
                }
                Some(m.into_inner())
            }
            None => None,
        };
        let max_per_hour = match r.max_per_hour {
            Some(n) if *n.get_ref() == 0 || *n.get_ref() > 60 => {
                let message = format!("[[on_end]] `max_per_hour`: {} is outside 1..=60", n.get_ref());
                return Err(ConfigError::Invalid { at: at(n.span()), message });
            }
            Some(n) => n.into_inner(),
            None => cryo_core::chamber::handoff::DEFAULT_HANDOFFS_PER_HOUR,
        };
        out.push(Chain { link: OnEnd { chamber, when, message, max_per_hour }, at: here });
    }
    Ok(out)
}

/// `session`, `resume_max_age`, `resume_max_sessions`, `resume_max_tokens`.
fn continuity(raw: &Raw, lines: &Lines) -> Result<cryo_core::session::Continuity, ConfigError> {
    use cryo_core::session::Continuity;
    let resume = match raw.session.as_deref() {
        None | Some("fresh") => false,
        Some("resume") => true,
        Some(other) => {
            return Err(
                lines.invalid("session", format!("key `session`: {other:?} is neither \"fresh\" nor \"resume\""))
            );
        }
    };
    let mut c = Continuity { resume, ..Continuity::default() };
    if let Some(age) = raw.resume_max_age.as_deref() {
        c.max_age =
            cryo_core::time::parse_duration(age).filter(|d| *d > chrono::Duration::zero()).ok_or_else(|| {
                lines.invalid(
                    "resume_max_age",
                    format!("key `resume_max_age`: {age:?} is not a duration (such as \"90m\" or \"4h\")"),
                )
            })?;
    }
    if let Some(n) = raw.resume_max_sessions {
        if n == 0 {
            return Err(lines.invalid(
                "resume_max_sessions",
                "key `resume_max_sessions`: 0 would never resume (say session = \"fresh\")".into(),
            ));
        }
        c.max_sessions = n;
    }
    c.max_tokens = raw.resume_max_tokens;
    Ok(c)
}

mod error;
pub mod git;
#[cfg(test)]
mod tests;
