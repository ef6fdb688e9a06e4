//! What a session bills and on which model: the provider account a
//! chamber's sessions count under, and the model a kind's own
//! configuration names when its stream does not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Kind;

/// The model a kind's own configuration names, for a stream that does not
/// say (Codex: `model` in `$CODEX_HOME/config.toml`; OpenCode: `model` in
/// the file `OPENCODE_CONFIG` names). Claude Code's stream names it.
pub fn configured_model(
    format: crate::agent_events::Format,
    chamber: &Path,
    provider_env: &BTreeMap<String, String>,
) -> Option<String> {
    use crate::agent_events::Format;
    let var = |k: &str| provider_env.get(k).cloned().or_else(|| std::env::var(k).ok()).filter(|v| !v.is_empty());
    let file = match format {
        Format::Claude => return None,
        Format::Codex => var("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".codex")))?
            .join("config.toml"),
        Format::OpenCode => PathBuf::from(var("OPENCODE_CONFIG")?),
        // Its `init` event names the model.
        Format::Qwen | Format::Gemini | Format::Pi | Format::Acp => return None,
    };
    // Never blocking on a FIFO, nor reading a huge file, whoever put it there.
    let text = String::from_utf8(cryo_files::read_file(&chamber.join(file), 1024 * 1024).ok()?).ok()?;
    let model = match format {
        Format::Codex => toml::from_str::<toml::Table>(&text).ok()?.get("model")?.as_str()?.to_string(),
        _ => serde_json::from_str::<serde_json::Value>(&text).ok()?.get("model")?.as_str()?.to_string(),
    };
    Some(model)
}

/// The provider account a chamber's sessions bill: `[provider] name`, else
/// the kind with a hash of its `[provider].env` (two API keys, or two
/// endpoints, are two accounts): `claude`, `claude-3f9a1c2e`.
pub fn provider_account(c: &crate::chamber::config::ChamberConfig) -> String {
    if let Some(n) = c.provider_name.as_deref().filter(|n| !n.trim().is_empty()) {
        return n.trim().to_string();
    }
    let kind = Kind::of_agent(&c.agent).name();
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
