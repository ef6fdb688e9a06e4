//! The model a session runs on when its stream does not say: what a
//! kind's own configuration names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Kind;

/// The model a kind's own configuration names, for a stream that does not
/// say (Codex: `model` in `$CODEX_HOME/config.toml`; OpenCode: `model` in
/// the file `OPENCODE_CONFIG` names). Claude Code's stream names it.
pub(crate) fn configured_model(kind: Kind, chamber: &Path, provider_env: &BTreeMap<String, String>) -> Option<String> {
    let var = |k: &str| provider_env.get(k).cloned().or_else(|| std::env::var(k).ok()).filter(|v| !v.is_empty());
    let file = match kind {
        Kind::Claude => return None,
        Kind::Codex => var("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| Path::new(&h).join(".codex")))?
            .join("config.toml"),
        Kind::OpenCode => PathBuf::from(var("OPENCODE_CONFIG")?),
        // Its `init` event names the model.
        Kind::Qwen | Kind::Gemini | Kind::Pi | Kind::Acp | Kind::Other => return None,
    };
    // Never blocking on a FIFO, nor reading a huge file, whoever put it there.
    let text = String::from_utf8(cryo_files::read_file(&chamber.join(file), 1024 * 1024).ok()?).ok()?;
    let model = match kind {
        Kind::Codex => toml::from_str::<toml::Table>(&text).ok()?.get("model")?.as_str()?.to_string(),
        _ => serde_json::from_str::<serde_json::Value>(&text).ok()?.get("model")?.as_str()?.to_string(),
    };
    Some(model)
}
