//! Where a session's model calls go (its upstream and credential), and
//! how each known kind is pointed at cryod's gateway (cryod's `gateway`)
//! to reach it there, verified on the pinned CLIs
//! (`gateway.md` in `cryod/src/gateway/` holds what was checked and how):
//!
//! - Claude Code: `ANTHROPIC_BASE_URL` is the session's base;
//!   `ANTHROPIC_API_KEY` (or `ANTHROPIC_AUTH_TOKEN`, whichever the chamber
//!   used) the session's token. The upstream is what the chamber's
//!   `ANTHROPIC_BASE_URL` named, the credential what its key variable held.
//! - Codex: a model provider `cryo` given by `-c` settings (`base_url` the
//!   session's base, `env_key` the variable the chamber's provider used,
//!   which then holds the token; its `wire_api` kept). The upstream is the
//!   chamber's `OPENAI_BASE_URL`, else its provider's `base_url` in
//!   `$CODEX_HOME/config.toml`; the credential the variable its `env_key`
//!   names.
//! - OpenCode: `OPENCODE_CONFIG_CONTENT` sets the chosen model's provider's
//!   `options.baseURL` to the session's base and `options.apiKey` to the
//!   token. The upstream is that provider's `baseURL` in the chamber's
//!   OpenCode config, the credential its `apiKey` (or `{env:NAME}`, or the
//!   provider's usual variable).
//!
//! - Qwen Code: `OPENAI_BASE_URL` is the session's base, `OPENAI_API_KEY`
//!   the token; the upstream is the chamber's `OPENAI_BASE_URL`.
//! - Gemini CLI: `GOOGLE_GEMINI_BASE_URL` is the session's base,
//!   `GEMINI_API_KEY` the token (sent as `x-goog-api-key`); the upstream is
//!   the chamber's `GOOGLE_GEMINI_BASE_URL`. Its settings file (see
//!   `kinds::gemini_settings`) says to use the key.
//!
//! `[providers.NAME] upstream` in `cryod.toml` names the upstream when the
//! chamber does not. A kind with no key cryod can keep (Claude Code's or
//! Codex's own login) reaches its provider itself, as before the gateway:
//! there is no key to keep from it, and `cryo.log` says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::kinds::{Kind, Launch};

/// Anthropic's public API.
pub(crate) const ANTHROPIC: &str = "https://api.anthropic.com";
/// Google's Gemini API (its clients add the version).
pub(crate) const GEMINI: &str = "https://generativelanguage.googleapis.com";
/// OpenAI's public API (with its version, as OpenAI's clients name it).
pub(crate) const OPENAI: &str = "https://api.openai.com/v1";

/// The credential the upstream gets (the gateway sends it as the provider
/// expects).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `x-api-key` (Anthropic's API keys).
    ApiKey(String),
    /// `Authorization: Bearer` (OpenAI's keys, Anthropic's auth tokens).
    Bearer(String),
    /// `x-goog-api-key` (Google's Gemini API keys).
    GoogKey(String),
}

impl Auth {
    /// The key itself.
    pub fn secret(&self) -> &str {
        match self {
            Auth::ApiKey(k) | Auth::Bearer(k) | Auth::GoogKey(k) => k,
        }
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::ApiKey(_) => "ApiKey(…)",
            Auth::Bearer(_) => "Bearer(…)",
            Auth::GoogKey(_) => "GoogKey(…)",
        })
    }
}

/// Where one session's model calls go, and how its CLI is pointed there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub upstream: String,
    pub auth: Auth,
    /// The upstream came from the CLI's own config file (which the agent
    /// may be able to write): it must be the one the operator accepted
    /// (see [`file_upstream`]).
    pub from_file: bool,
    how: How,
}

/// The upstream a kind's own config file names for the chamber (Codex's
/// provider `base_url`, OpenCode's provider `baseURL`), when neither
/// `[provider] env` nor cryod.toml names one first: read when `cryo.toml`
/// is, and part of what the operator accepts. A file the agent rewrites to
/// send the key elsewhere then holds the chamber instead.
pub(crate) fn file_upstream(
    kind: Kind,
    chamber: &Path,
    var: &dyn Fn(&str) -> Option<String>,
    model: Option<&str>,
) -> Option<String> {
    match plan(kind, chamber, var, None, model) {
        Ok(Way::Gateway(p)) if p.from_file => Some(p.upstream),
        _ => None,
    }
}

/// How a session's CLI reaches its provider.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Way {
    /// Through the gateway, as planned.
    Gateway(Plan),
    /// By itself, as before the gateway: an unknown command (`None`), or
    /// a known kind with no key cryod could keep (its own login), and why.
    Own(Option<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum How {
    /// A base-URL variable (now the session's base) and the variables
    /// that held the credential (now the token): Claude Code, Qwen Code.
    Env {
        base: &'static str,
        vars: Vec<&'static str>,
    },
    Codex {
        env_key: String,
        wire_api: String,
    },
    OpenCode {
        provider: String,
    },
    /// Pi: its provider, redirected by cryo's extension (`pi-cryo.mjs`).
    Pi {
        provider: String,
    },
}

/// The most of a kind's config file read.
const MAX_CONFIG: u64 = 1024 * 1024;

/// The plan for a session of `kind`: `var` looks a variable up
/// (`[provider].env`, then cryod's environment), `upstream` is
/// `[providers.NAME] upstream`, `model` what the agent line names.
/// `Err`: why its session cannot start, in one line.
pub(crate) fn plan(
    kind: Kind,
    chamber: &Path,
    var: &dyn Fn(&str) -> Option<String>,
    upstream: Option<&str>,
    model: Option<&str>,
) -> crate::Result<Way> {
    let own = |who: &str, vars: &str| {
        Ok(Way::Own(Some(format!(
            "{who} has no key in {vars} for cryod to keep (its own login?): it reaches its provider itself, \
             not through cryo's gateway, and its usage is what it reports"
        ))))
    };
    let named = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    match kind {
        Kind::Claude => match anthropic_env(var, upstream) {
            Some(plan) => Ok(Way::Gateway(plan)),
            None => own("Claude Code", "ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"),
        },
        Kind::Codex => {
            let home = named(var("CODEX_HOME"))
                .map(PathBuf::from)
                .or_else(|| named(var("HOME")).map(|h| Path::new(&h).join(".codex")));
            let config = home.and_then(|h| read_toml(&chamber.join(h).join("config.toml"))).unwrap_or_default();
            let id = config.get("model_provider").and_then(|v| v.as_str()).unwrap_or("openai").to_string();
            let table = config.get("model_providers").and_then(|p| p.get(&id)).and_then(|t| t.as_table()).cloned();
            let field = |k: &str| table.as_ref().and_then(|t| t.get(k)).and_then(|v| v.as_str()).map(str::to_string);
            let env_key = field("env_key").unwrap_or_else(|| "OPENAI_API_KEY".into());
            let wire_api = field("wire_api").unwrap_or_else(|| "responses".into());
            let Some(key) = named(var(&env_key)) else {
                return own(&format!("Codex's provider `{id}`"), &env_key);
            };
            let named_first = named(var("OPENAI_BASE_URL")).or(upstream.map(str::to_string));
            let from_file = named_first.is_none() && field("base_url").is_some();
            let upstream = named_first.or_else(|| field("base_url")).unwrap_or(OPENAI.into());
            let how = How::Codex { env_key, wire_api };
            Ok(Way::Gateway(Plan { upstream, auth: Auth::Bearer(key), from_file, how }))
        }
        Kind::OpenCode => {
            let config = opencode_config(chamber, var);
            let model = model.map(str::to_string).or_else(|| config["model"].as_str().map(str::to_string));
            let Some(provider) = model.as_deref().and_then(|m| m.split_once('/')).map(|(p, _)| p.to_string()) else {
                return Err(crate::Error::Setting(
                    "OpenCode's model is not named as PROVIDER/MODEL (in its config's `model` or `--model`): \
                            cryo's gateway cannot tell which provider to stand in for"
                        .into(),
                ));
            };
            let entry = &config["provider"][&provider];
            let npm = entry["npm"].as_str().unwrap_or("");
            let anthropic = provider == "anthropic" || npm.contains("anthropic");
            let resolve = |v: &str| match v.strip_prefix("{env:").and_then(|r| r.strip_suffix('}')) {
                Some(name) => named(var(name)),
                None => named(Some(v.to_string())),
            };
            let usual = if anthropic { "ANTHROPIC_API_KEY" } else { "OPENAI_API_KEY" };
            let key = entry["options"]["apiKey"].as_str().and_then(resolve).or_else(|| named(var(usual)));
            let public = match provider.as_str() {
                "anthropic" => Some(format!("{ANTHROPIC}/v1")),
                "openai" => Some(OPENAI.to_string()),
                _ => None,
            };
            let in_file = entry["options"]["baseURL"].as_str().map(str::to_string);
            let from_file = upstream.is_none() && in_file.is_some();
            let Some(upstream) = upstream.map(str::to_string).or(in_file).or(public) else {
                return Err(crate::Error::Setting(format!(
                    "OpenCode's provider `{provider}` names no baseURL: set `upstream` under [providers.NAME] in \
                     cryod.toml, or say `gateway = false` under [provider]"
                )));
            };
            let auth = match key {
                Some(k) if anthropic => Auth::ApiKey(k),
                Some(k) => Auth::Bearer(k),
                None => return own(&format!("OpenCode's provider `{provider}`"), &format!("its apiKey or {usual}")),
            };
            Ok(Way::Gateway(Plan { upstream, auth, from_file, how: How::OpenCode { provider } }))
        }
        // Its OpenAI-compatible provider, from the environment (a provider
        // set in its own settings.json keeps its own key).
        Kind::Qwen => match openai_env(var, upstream) {
            Some(plan) => Ok(Way::Gateway(plan)),
            None => own("Qwen Code", "OPENAI_API_KEY"),
        },
        Kind::Gemini => {
            // An API key (a Google login or Vertex AI keeps its own way).
            let Some(key) = named(var("GEMINI_API_KEY")) else {
                return own("Gemini CLI", "GEMINI_API_KEY");
            };
            let upstream =
                named(var("GOOGLE_GEMINI_BASE_URL")).or(upstream.map(str::to_string)).unwrap_or(GEMINI.into());
            let how = How::Env { base: "GOOGLE_GEMINI_BASE_URL", vars: vec!["GEMINI_API_KEY"] };
            Ok(Way::Gateway(Plan { upstream, auth: Auth::GoogKey(key), from_file: false, how }))
        }
        Kind::Pi => pi_plan(chamber, var, upstream, model),
        // Planned by its program's kind (the launch asks `Kind::of` it).
        Kind::Acp => Ok(Way::Own(None)),
        // Any other command: through the gateway when it is given one
        // provider's key by the variables of that provider's official SDKs
        // (which also read its base URL from the environment); with both
        // (or neither) it reaches them itself, as before the gateway.
        Kind::Other => match (anthropic_env(var, upstream), openai_env(var, upstream)) {
            (Some(plan), None) | (None, Some(plan)) => Ok(Way::Gateway(plan)),
            _ => Ok(Way::Own(None)),
        },
    }
}

/// A base URL and key given by Anthropic's variables (Claude Code's, and
/// Anthropic's SDKs'), if a key is given.
fn anthropic_env(var: &dyn Fn(&str) -> Option<String>, upstream: Option<&str>) -> Option<Plan> {
    let named = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let (auth, vars) = match (named(var("ANTHROPIC_API_KEY")), named(var("ANTHROPIC_AUTH_TOKEN"))) {
        (Some(k), Some(_)) => (Auth::ApiKey(k), vec!["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"]),
        (Some(k), None) => (Auth::ApiKey(k), vec!["ANTHROPIC_API_KEY"]),
        (None, Some(t)) => (Auth::Bearer(t), vec!["ANTHROPIC_AUTH_TOKEN"]),
        (None, None) => return None,
    };
    let upstream = named(var("ANTHROPIC_BASE_URL")).or(upstream.map(str::to_string)).unwrap_or(ANTHROPIC.into());
    Some(Plan { upstream, auth, from_file: false, how: How::Env { base: "ANTHROPIC_BASE_URL", vars } })
}

/// A base URL and key given by OpenAI's variables (Qwen Code's, and
/// OpenAI's SDKs'), if a key is given.
fn openai_env(var: &dyn Fn(&str) -> Option<String>, upstream: Option<&str>) -> Option<Plan> {
    let named = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let key = named(var("OPENAI_API_KEY"))?;
    let upstream = named(var("OPENAI_BASE_URL")).or(upstream.map(str::to_string)).unwrap_or(OPENAI.into());
    let how = How::Env { base: "OPENAI_BASE_URL", vars: vec!["OPENAI_API_KEY"] };
    Some(Plan { upstream, auth: Auth::Bearer(key), from_file: false, how })
}

/// The upstream the CLI of `agent` names in its own config file, read
/// when `cryo.toml` is (`provider_env` is its `[provider] env`): what the
/// operator accepts with the file, and later [`Setup::file_upstream`].
///
/// [`Setup::file_upstream`]: crate::Setup::file_upstream
pub fn agent_file_upstream(agent: &str, provider_env: &BTreeMap<String, String>, root: &Path) -> Option<String> {
    // The program's own kind, behind `acp:` too (as the launch plans it).
    let words = super::kinds::agent_words(agent).unwrap_or_default();
    let kind = words.first().map_or(Kind::Other, |p| Kind::of(p));
    let model = super::kinds::named_model(&words);
    let var = |name: &str| provider_env.get(name).cloned().or_else(|| std::env::var(name).ok());
    file_upstream(kind, root, &var, model.as_deref())
}

/// Points `launch` (a kind's command line and environment) at the
/// gateway: `base` is the session's base URL, `token` its credential.
/// `provider_env` is the chamber's, whose key variables the token replaces.
pub(crate) fn point(
    plan: &Plan,
    launch: &mut Launch,
    base: &str,
    token: &str,
    provider_env: &BTreeMap<String, String>,
) {
    let env = &mut launch.env;
    match &plan.how {
        How::Env { base: base_var, vars } => {
            env.insert(base_var.to_string(), base.to_string());
            for v in vars {
                env.insert(v.to_string(), token.to_string());
            }
        }
        How::Codex { env_key, wire_api } => {
            let string = |s: &str| toml::Value::String(s.to_string()).to_string();
            let settings = [
                "model_provider=\"cryo\"".to_string(),
                "model_providers.cryo.name=\"cryo gateway\"".to_string(),
                format!("model_providers.cryo.base_url={}", string(base)),
                format!("model_providers.cryo.env_key={}", string(env_key)),
                format!("model_providers.cryo.wire_api={}", string(wire_api)),
            ];
            // After `exec`: its options, before the prompt and any `resume`.
            let at = launch.args.iter().position(|a| a == "exec").map_or(0, |i| i + 1);
            let pairs = settings.into_iter().flat_map(|s| ["-c".to_string(), s]);
            launch.args.splice(at..at, pairs);
            env.insert(env_key.clone(), token.to_string());
        }
        How::Pi { provider } => {
            env.insert("CRYO_PI_PROVIDER".into(), provider.clone());
            env.insert("CRYO_PI_BASE".into(), base.to_string());
            env.insert("CRYO_PI_TOKEN".into(), token.to_string());
        }
        How::OpenCode { provider } => {
            let mut config = env
                .get("OPENCODE_CONFIG_CONTENT")
                .or_else(|| provider_env.get("OPENCODE_CONFIG_CONTENT"))
                .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| serde_json::json!({}));
            let slot = |v: &mut serde_json::Value, key: &str| {
                let o = v.as_object_mut().expect("an object");
                let s = o.entry(key).or_insert_with(|| serde_json::json!({}));
                if !s.is_object() {
                    *s = serde_json::json!({});
                }
            };
            slot(&mut config, "provider");
            slot(&mut config["provider"], provider);
            slot(&mut config["provider"][provider], "options");
            let options = &mut config["provider"][provider]["options"];
            options["baseURL"] = base.into();
            options["apiKey"] = token.into();
            env.insert("OPENCODE_CONFIG_CONTENT".into(), config.to_string());
            for usual in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"] {
                if provider_env.contains_key(usual) || std::env::var_os(usual).is_some() {
                    env.insert(usual.into(), token.to_string());
                }
            }
        }
    }
}

/// Pi's plan: the provider of its model (the agent line's `--model
/// PROVIDER/ID`, else `defaultProvider` in its settings.json, else the one
/// provider its models.json names), with the base URL and key its
/// models.json gives it (`apiKey`: a variable's name, else the key itself),
/// or Anthropic's and OpenAI's own. Pi has no variable or flag for a base
/// URL: cryo's extension redirects the provider (`CRYO_PI_PROVIDER`,
/// `CRYO_PI_BASE`).
fn pi_plan(
    chamber: &Path,
    var: &dyn Fn(&str) -> Option<String>,
    upstream: Option<&str>,
    model: Option<&str>,
) -> crate::Result<Way> {
    let named = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let dir = named(var("PI_CODING_AGENT_DIR"))
        .map(PathBuf::from)
        .or_else(|| named(var("HOME")).map(|h| Path::new(&h).join(".pi/agent")));
    let json = |name: &str| {
        dir.as_ref()
            .and_then(|d| cryo_files::read_file(&chamber.join(d).join(name), MAX_CONFIG).ok())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .unwrap_or(serde_json::Value::Null)
    };
    let (models, settings) = (json("models.json"), json("settings.json"));
    let providers = models["providers"].as_object();
    let provider = model
        .and_then(|m| m.split_once('/'))
        .map(|(p, _)| p.to_string())
        .or_else(|| settings["defaultProvider"].as_str().map(str::to_string))
        .or_else(|| providers.filter(|p| p.len() == 1).and_then(|p| p.keys().next().cloned()));
    let Some(provider) = provider else {
        return Ok(Way::Own(Some(
            "cryo cannot tell Pi's provider (no --model PROVIDER/ID, no defaultProvider, several in models.json): \
             it reaches its provider itself, not through cryo's gateway"
                .into(),
        )));
    };
    let entry = &models["providers"][&provider];
    let api = entry["api"].as_str().unwrap_or(if provider == "anthropic" { "anthropic-messages" } else { "" });
    let anthropic = api.starts_with("anthropic");
    let usual = if anthropic { "ANTHROPIC_API_KEY" } else { "OPENAI_API_KEY" };
    let key = match entry["apiKey"].as_str() {
        // A command Pi would run for the key: not cryod's to run.
        Some(cmd) if cmd.starts_with('!') => None,
        Some(name) => named(var(name)).or_else(|| named(Some(name.to_string()))),
        None => named(var(usual)),
    };
    let public = match provider.as_str() {
        "anthropic" => Some(ANTHROPIC.to_string()),
        "openai" => Some(OPENAI.to_string()),
        _ => None,
    };
    let in_file = entry["baseUrl"].as_str().map(str::to_string);
    let from_file = upstream.is_none() && in_file.is_some();
    let Some(upstream) = upstream.map(str::to_string).or(in_file).or(public) else {
        return Err(crate::Error::Setting(format!(
            "Pi's provider `{provider}` names no baseUrl: set `upstream` under [providers.NAME] in cryod.toml, or \
             say `gateway = false` under [provider]"
        )));
    };
    let auth = match key {
        Some(k) if anthropic => Auth::ApiKey(k),
        Some(k) => Auth::Bearer(k),
        None => {
            return Ok(Way::Own(Some(format!(
                "Pi's provider `{provider}` has no key cryod can keep (its apiKey or {usual}): it reaches its \
                 provider itself, not through cryo's gateway"
            ))));
        }
    };
    Ok(Way::Gateway(Plan { upstream, auth, from_file, how: How::Pi { provider } }))
}

fn read_toml(path: &Path) -> Option<toml::Table> {
    let text = String::from_utf8(cryo_files::read_file(path, MAX_CONFIG).ok()?).ok()?;
    toml::from_str(&text).ok()
}

/// OpenCode's config as the session's CLI will see it: the file
/// `OPENCODE_CONFIG` names, with `OPENCODE_CONFIG_CONTENT` over it (one
/// level deep per provider, as OpenCode merges).
fn opencode_config(chamber: &Path, var: &dyn Fn(&str) -> Option<String>) -> serde_json::Value {
    use serde_json::Value;
    let parse = |t: &str| serde_json::from_str::<Value>(t).ok().filter(Value::is_object);
    let mut config = var("OPENCODE_CONFIG")
        .filter(|p| !p.is_empty())
        .and_then(|p| cryo_files::read_file(&chamber.join(p), MAX_CONFIG).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| parse(&t))
        .unwrap_or_else(|| serde_json::json!({}));
    if let Some(over) = var("OPENCODE_CONFIG_CONTENT").and_then(|t| parse(&t)) {
        merge(&mut config, over);
    }
    config
}

/// `over` merged into `base`, objects key by key.
fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    /// The plan, for a kind that goes through the gateway.
    fn through(kind: Kind, v: &dyn Fn(&str) -> Option<String>, upstream: Option<&str>, model: Option<&str>) -> Plan {
        match plan(kind, Path::new("/c"), v, upstream, model) {
            Ok(Way::Gateway(p)) => p,
            other => panic!("not through the gateway: {other:?}"),
        }
    }

    /// Why a kind reaches its provider itself.
    fn own(kind: Kind, v: &dyn Fn(&str) -> Option<String>) -> String {
        match plan(kind, Path::new("/c"), v, None, None) {
            Ok(Way::Own(Some(why))) => why,
            other => panic!("{other:?}"),
        }
    }

    fn launch(args: &[&str]) -> Launch {
        Launch {
            program: "x".into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            files: Vec::new(),
            events: None,
            model: None,
            read_logs: false,
            settings: None,
            bridge: None,
            stdin: None,
        }
    }

    #[test]
    fn claude_keeps_its_upstream_and_trades_its_key_for_the_token() {
        let v = vars(&[("ANTHROPIC_BASE_URL", "http://up:1"), ("ANTHROPIC_API_KEY", "sk-real")]);
        let p = through(Kind::Claude, &v, None, None);
        assert_eq!((p.upstream.as_str(), &p.auth), ("http://up:1", &Auth::ApiKey("sk-real".into())));
        let mut l = launch(&["-p"]);
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        assert_eq!(l.env["ANTHROPIC_BASE_URL"], "http://gw/cryo/t");
        assert_eq!(l.env["ANTHROPIC_API_KEY"], "t");
        // No key at all: its own login, by itself, and why.
        assert!(own(Kind::Claude, &vars(&[])).contains("no key in ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"));
        // An auth token is a bearer; cryod.toml's upstream when the chamber names none.
        let p = through(Kind::Claude, &vars(&[("ANTHROPIC_AUTH_TOKEN", "tok")]), Some("http://corp"), None);
        assert_eq!((p.upstream.as_str(), &p.auth), ("http://corp", &Auth::Bearer("tok".into())));
    }

    #[test]
    fn codex_reads_its_provider_and_gets_one_of_ours() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join("config.toml"),
            "model_provider = \"local\"\n[model_providers.local]\nname = \"l\"\nbase_url = \"http://up:2/v1\"\nenv_key = \"MY_KEY\"\nwire_api = \"responses\"\n",
        )
        .unwrap();
        let h = home.path().to_str().unwrap();
        let v = vars(&[("CODEX_HOME", h), ("MY_KEY", "sk-real")]);
        let p = through(Kind::Codex, &v, None, None);
        assert!(p.from_file, "its upstream came from its own file");
        assert_eq!((p.upstream.as_str(), &p.auth), ("http://up:2/v1", &Auth::Bearer("sk-real".into())));
        let mut l = launch(&["exec", "--json", "PROMPT"]);
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        assert_eq!(l.args[0], "exec");
        assert_eq!(l.args[1..3], ["-c".to_string(), "model_provider=\"cryo\"".to_string()]);
        assert!(l.args.contains(&"model_providers.cryo.base_url=\"http://gw/cryo/t\"".to_string()), "{:?}", l.args);
        assert!(l.args.contains(&"model_providers.cryo.env_key=\"MY_KEY\"".to_string()), "{:?}", l.args);
        assert_eq!(l.args.last().unwrap(), "PROMPT");
        assert_eq!(l.env["MY_KEY"], "t");
        // No key (its ChatGPT login): by itself, and why.
        let why = own(Kind::Codex, &vars(&[("CODEX_HOME", h)]));
        assert!(why.contains("`local` has no key in MY_KEY"), "{why}");
        // OPENAI_BASE_URL in [provider] env (the operator's) comes first.
        let v = vars(&[("CODEX_HOME", h), ("MY_KEY", "k"), ("OPENAI_BASE_URL", "http://mine/v1")]);
        let p = through(Kind::Codex, &v, None, None);
        assert_eq!((p.upstream.as_str(), p.from_file), ("http://mine/v1", false));
    }

    #[test]
    fn opencode_stands_in_for_the_models_provider() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("oc.json");
        std::fs::write(
            &file,
            r#"{"model":"local/m1","provider":{"local":{"npm":"@ai-sdk/openai-compatible","options":{"baseURL":"http://up:3/v1","apiKey":"{env:LOCAL_KEY}"}}}}"#,
        )
        .unwrap();
        let v = vars(&[("OPENCODE_CONFIG", file.to_str().unwrap()), ("LOCAL_KEY", "sk-real")]);
        let p = through(Kind::OpenCode, &v, None, None);
        assert_eq!((p.upstream.as_str(), &p.auth), ("http://up:3/v1", &Auth::Bearer("sk-real".into())));
        let mut l = launch(&["run"]);
        l.env.insert("OPENCODE_CONFIG_CONTENT".into(), r#"{"mcp":{"cryo":{}}}"#.into());
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        let c: serde_json::Value = serde_json::from_str(&l.env["OPENCODE_CONFIG_CONTENT"]).unwrap();
        assert_eq!(c["provider"]["local"]["options"]["baseURL"], "http://gw/cryo/t");
        assert_eq!(c["provider"]["local"]["options"]["apiKey"], "t");
        assert!(c["mcp"]["cryo"].is_object(), "the MCP server stays: {c}");
        // The model on the agent line wins; a provider without a base URL is said.
        let e = plan(Kind::OpenCode, Path::new("/c"), &v, None, Some("other/m2")).unwrap_err();
        assert!(e.to_string().contains("`other`"), "{e}");
    }

    #[test]
    fn qwen_code_through_its_openai_variables() {
        let v = vars(&[("OPENAI_API_KEY", "sk-real"), ("OPENAI_BASE_URL", "http://up:4/v1")]);
        let p = through(Kind::Qwen, &v, None, None);
        assert_eq!((p.upstream.as_str(), &p.auth), ("http://up:4/v1", &Auth::Bearer("sk-real".into())));
        let mut l = launch(&["--output-format", "stream-json"]);
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        assert_eq!(l.env["OPENAI_BASE_URL"], "http://gw/cryo/t");
        assert_eq!(l.env["OPENAI_API_KEY"], "t");
        assert_eq!(through(Kind::Qwen, &vars(&[("OPENAI_API_KEY", "k")]), None, None).upstream, OPENAI);
        assert!(own(Kind::Qwen, &vars(&[])).contains("no key in OPENAI_API_KEY"));
    }

    #[test]
    fn gemini_cli_through_its_base_url_with_a_google_key() {
        let v = vars(&[("GEMINI_API_KEY", "AIza-real")]);
        let p = through(Kind::Gemini, &v, None, None);
        assert_eq!((p.upstream.as_str(), &p.auth), (GEMINI, &Auth::GoogKey("AIza-real".into())));
        let mut l = launch(&["--output-format", "stream-json"]);
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        assert_eq!(
            (l.env["GOOGLE_GEMINI_BASE_URL"].as_str(), l.env["GEMINI_API_KEY"].as_str()),
            ("http://gw/cryo/t", "t")
        );
        let v = vars(&[("GEMINI_API_KEY", "k"), ("GOOGLE_GEMINI_BASE_URL", "http://up:5")]);
        assert_eq!(through(Kind::Gemini, &v, None, None).upstream, "http://up:5");
        assert!(own(Kind::Gemini, &vars(&[])).contains("no key in GEMINI_API_KEY"), "a Google login keeps its way");
    }

    /// Pi: the provider of its model in its models.json, redirected by
    /// cryo's extension; the upstream from the file is marked so.
    #[test]
    fn pi_stands_in_for_its_models_provider() {
        let dir = tempfile::tempdir().unwrap();
        let models = r#"{"providers":{"local":{"baseUrl":"http://up:6/v1","api":"openai-completions","apiKey":"LOCAL_KEY","models":[{"id":"m1"}]}}}"#;
        std::fs::write(dir.path().join("models.json"), models).unwrap();
        let d = dir.path().to_str().unwrap();
        let v = vars(&[("PI_CODING_AGENT_DIR", d), ("LOCAL_KEY", "sk-real")]);
        let p = through(Kind::Pi, &v, None, None);
        assert_eq!(
            (p.upstream.as_str(), &p.auth, p.from_file),
            ("http://up:6/v1", &Auth::Bearer("sk-real".into()), true)
        );
        let mut l = launch(&["--mode", "json"]);
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        assert_eq!((l.env["CRYO_PI_PROVIDER"].as_str(), l.env["CRYO_PI_BASE"].as_str()), ("local", "http://gw/cryo/t"));
        // Anthropic's own, by the agent line's model; a key Pi would get by
        // running a command is not cryod's to run.
        let v = vars(&[("PI_CODING_AGENT_DIR", d), ("ANTHROPIC_API_KEY", "sk-ant")]);
        let p = match plan(Kind::Pi, Path::new("/c"), &v, None, Some("anthropic/claude-x")) {
            Ok(Way::Gateway(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!((p.upstream.as_str(), &p.auth), (ANTHROPIC, &Auth::ApiKey("sk-ant".into())));
        std::fs::write(dir.path().join("models.json"), models.replace("LOCAL_KEY", "!pass show key")).unwrap();
        assert!(own(Kind::Pi, &vars(&[("PI_CODING_AGENT_DIR", d)])).contains("no key cryod can keep"));
    }

    /// Issue 62, case 4: a command of the user's own, given one provider's
    /// key by its SDK's variables, goes through the gateway (so its tokens
    /// are counted); given none, or both providers', it is left alone.
    #[test]
    fn any_other_command_goes_through_the_gateway_with_one_providers_key() {
        let other = |pairs: &[(&str, &str)]| plan(Kind::Other, Path::new("/c"), &vars(pairs), None, None);
        assert_eq!(other(&[]), Ok(Way::Own(None)));
        let Ok(Way::Gateway(p)) = other(&[("OPENAI_API_KEY", "sk-o"), ("OPENAI_BASE_URL", "http://up/v1")]) else {
            panic!("an OpenAI key goes through the gateway")
        };
        assert_eq!((p.upstream.as_str(), &p.auth), ("http://up/v1", &Auth::Bearer("sk-o".into())));
        let mut l = launch(&[]);
        point(&p, &mut l, "http://gw/cryo/t", "t", &BTreeMap::new());
        assert_eq!((l.env["OPENAI_BASE_URL"].as_str(), l.env["OPENAI_API_KEY"].as_str()), ("http://gw/cryo/t", "t"));
        let Ok(Way::Gateway(p)) = other(&[("ANTHROPIC_API_KEY", "sk-a")]) else {
            panic!("an Anthropic key goes through the gateway")
        };
        assert_eq!((p.upstream.as_str(), &p.auth), (ANTHROPIC, &Auth::ApiKey("sk-a".into())));
        assert_eq!(other(&[("ANTHROPIC_API_KEY", "sk-a"), ("OPENAI_API_KEY", "sk-o")]), Ok(Way::Own(None)));
    }
}
