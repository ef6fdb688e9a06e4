//! What the agent reaches beyond its chamber: `[provider]`'s environment
//! and key files (read at each spawn, or a fallback account's instead),
//! the `writable` and `readable` folders, and the links on the way to them
//! ([`Reach`]), which hold the chamber when they move.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ChamberConfig;
use super::error::{ConfigError, Lines, PathError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
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
pub(super) struct RawEnvFile {
    file: String,
}

/// `[provider]`: its name, the env values written in the file, and those
/// kept in files (absolute).
#[derive(Default)]
pub(super) struct Provider {
    pub(super) name: Option<String>,
    pub(super) gateway: Option<bool>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) env_files: BTreeMap<String, PathBuf>,
}

/// The first entry of the seed system's `[[providers]]` (`name` and `env`),
/// which is what it ran with, as a `[provider]`.
pub(super) fn seed_provider(
    providers: Option<&toml::Value>,
    lines: &Lines,
) -> Result<Option<RawProvider>, ConfigError> {
    let Some(first) = providers.and_then(|p| p.as_array()).and_then(|a| a.first()) else { return Ok(None) };
    first.clone().try_into::<RawProvider>().map(Some).map_err(|e| {
        lines.invalid("providers", format!("[[providers]] (the seed system's), its first entry: {}", e.message()))
    })
}

pub(super) fn provider(raw: Option<RawProvider>, dir: &Path, lines: &Lines) -> Result<Provider, ConfigError> {
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
pub(super) fn inline_keys(provider: &Provider, lines: &Lines) -> Vec<String> {
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
pub(super) fn folders(
    key: &str,
    list: Option<Vec<String>>,
    dir: &Path,
    lines: &Lines,
) -> Result<Vec<PathBuf>, ConfigError> {
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
pub(super) fn reach(dir: &Path, writable: &[PathBuf], readable: &[PathBuf], provider: &Provider) -> Vec<Reach> {
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

/// A path `cryo.toml` names for the agent's reach (`writable`, `readable`,
/// a `[provider].env` file or path) that lies where the agent may write
/// links (its chamber, a `writable` folder), and where it led when the
/// file was read. One that leads elsewhere at the next spawn than it did
/// when the operator accepted it holds the chamber
/// ([`ChamberConfig::moved`]), and where it leads is part of what the
/// operator accepts ([`crate::chamber::trust`]). Paths elsewhere may pass links the
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

/// A path from `cryo.toml`: `~/…` under the user's home, a relative one
/// under the chamber.
pub(super) fn expand_home(raw: &str, dir: &Path) -> Result<PathBuf, PathError> {
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

impl ChamberConfig {
    /// The provider account a chamber's sessions bill: `[provider] name`, else
    /// the kind with a hash of its `[provider].env` (two API keys, or two
    /// endpoints, are two accounts): `claude`, `claude-3f9a1c2e`.
    pub fn provider_account(&self) -> String {
        let c = self;
        if let Some(n) = c.provider_name.as_deref().filter(|n| !n.trim().is_empty()) {
            return n.trim().to_string();
        }
        let kind = cryo_session::Kind::of_agent(&c.agent).name();
        if c.provider_env.is_empty() && c.provider_env_files.is_empty() {
            return kind.to_string();
        }
        // FNV-1a: stable across builds (std's hasher is not promised to be). A
        // key kept in a file counts by the file's path.
        let files = c.provider_env_files.iter().map(|(k, p)| (k.clone(), format!("file:{}", p.display())));
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (k, v) in c.provider_env.iter().map(|(k, v)| (k.clone(), v.clone())).chain(files) {
            for b in k.bytes().chain([b'=']).chain(v.bytes()).chain([b'\n']) {
                h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        format!("{kind}-{:08x}", h >> 32)
    }
}
