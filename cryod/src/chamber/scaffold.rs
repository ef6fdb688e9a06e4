//! `cryoctl chamber init`: lay out a chamber's files, keeping what exists.

use std::path::Path;

use super::{Dir, FileError, NewFile};
use crate::config::Sandbox;

/// Folders every chamber has, relative to its root.
pub const FOLDERS: &[&str] =
    &["messages/inbox", "messages/inbox/archive", "messages/outbox", "messages/outbox/archive", "messages/attachments"];

/// What init did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scaffolded {
    pub created: Vec<String>,
    pub kept: Vec<String>,
    /// The sandbox a new `cryo.toml` was given (none if one was kept).
    pub sandbox: Option<Sandbox>,
}

/// Scaffolds `dir` (created if missing). `agent` and `sandbox` go into a
/// new `cryo.toml`.
pub fn init(dir: &Path, agent: Option<&str>, sandbox: Sandbox) -> std::io::Result<Scaffolded> {
    let mut out = Scaffolded::default();
    std::fs::create_dir_all(dir)?;
    // The folder is the operator's; nothing in it is followed.
    let d = Dir::open(dir)?;
    let agent = agent.filter(|a| !a.trim().is_empty()).unwrap_or(super::config::DEFAULT_AGENT);
    let toml = include_str!("templates/cryo.toml")
        .replace("{{agent}}", &toml_escape(agent))
        .replace("{{sandbox}}", sandbox.as_str())
        .replace("{{provider}}", provider_example(agent));
    let files: [(&str, &str); 4] = [
        ("plan.md", include_str!("templates/plan.md")),
        ("cryo.toml", &toml),
        ("NOTES.md", include_str!("templates/NOTES.md")),
        (".gitignore", include_str!("templates/gitignore")),
    ];
    for (name, content) in files {
        if d.kind(Path::new(name))?.is_some() {
            out.kept.push(name.to_string());
        } else {
            d.write(Path::new(name), content.as_bytes(), NewFile::DURABLE)?;
            out.created.push(name.to_string());
            if name == "cryo.toml" {
                out.sandbox = Some(sandbox);
            }
        }
    }
    for folder in FOLDERS {
        let rel = Path::new(folder);
        if d.kind(rel)? == Some(cryo_files::Kind::Folder) {
            out.kept.push(format!("{folder}/"));
        } else {
            d.make_dirs(rel).map_err(|e: FileError| std::io::Error::from(e))?;
            out.created.push(format!("{folder}/"));
        }
    }
    Ok(out)
}

/// The commented `[provider]` example for the chamber's kind (the agent
/// line's program, behind `acp:` too, as `cryo_session::Kind` names them):
/// the keys its CLI reads.
fn provider_example(agent: &str) -> &'static str {
    let agent = agent.trim_start();
    let program = agent.strip_prefix("acp:").unwrap_or(agent).split_whitespace().next().unwrap_or("");
    match std::path::Path::new(program).file_name().and_then(|n| n.to_str()).unwrap_or("") {
        "codex" => "# [provider]\n# name = \"openai\"\n# env = { OPENAI_API_KEY = \"sk-...\" }",
        "opencode" => {
            "# [provider]\n# name = \"opencode\"\n\
             # env = { OPENCODE_CONFIG = \"/home/me/.config/opencode/opencode.json\", OPENAI_API_KEY = \"sk-...\" }"
        }
        "qwen" => {
            "# [provider]\n# name = \"dashscope\"\n\
             # env = { OPENAI_API_KEY = \"sk-...\", OPENAI_BASE_URL = \"https://dashscope-intl.aliyuncs.com/compatible-mode/v1\", OPENAI_MODEL = \"qwen3-coder-plus\" }"
        }
        "gemini" => "# [provider]\n# name = \"gemini\"\n# env = { GEMINI_API_KEY = \"AIza...\" }",
        "pi" => {
            "# [provider]\n# name = \"pi\"\n\
             # env = { PI_CODING_AGENT_DIR = \"/home/me/.pi/agent\", ANTHROPIC_API_KEY = \"sk-...\" }"
        }
        _ => "# [provider]\n# name = \"anthropic\"\n# env = { ANTHROPIC_API_KEY = \"sk-...\" }",
    }
}

fn toml_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_idempotent_and_keeps_files() {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("c");
        let first = init(&c, Some("claude"), Sandbox::Bwrap).unwrap();
        assert_eq!(first.sandbox, Some(Sandbox::Bwrap));
        assert!(first.kept.is_empty());
        assert!(first.created.contains(&"cryo.toml".to_string()));
        std::fs::write(c.join("plan.md"), "my plan").unwrap();
        let second = init(&c, Some("codex"), Sandbox::Off).unwrap();
        assert!(second.created.is_empty() && second.sandbox.is_none(), "{second:?}");
        assert_eq!(std::fs::read_to_string(c.join("plan.md")).unwrap(), "my plan");
        let toml = std::fs::read_to_string(c.join("cryo.toml")).unwrap();
        assert!(toml.contains("agent = \"claude\"") && toml.contains("\nsandbox = \"bwrap\"\n"), "{toml}");
        assert!(toml.contains("# env = { ANTHROPIC_API_KEY"), "{toml}");
        let loaded = super::super::config::load(&c, chrono_tz::UTC).unwrap();
        assert_eq!(loaded.config.sandbox, Some(Sandbox::Bwrap));
    }

    /// `chamber init --agent KIND`: a cryo.toml that loads as that kind,
    /// and still loads with its `[provider]` example uncommented.
    #[test]
    fn each_kind_gets_a_working_cryo_toml() {
        assert!(provider_example("acp:qwen --acp").contains("OPENAI_MODEL"));
        for kind in ["claude", "codex", "opencode", "qwen", "gemini", "pi"] {
            let dir = tempfile::tempdir().unwrap();
            init(dir.path(), Some(kind), Sandbox::Off).unwrap();
            let l = super::super::config::load(dir.path(), chrono_tz::UTC).unwrap();
            assert_eq!(l.config.agent, kind);
            let toml = std::fs::read_to_string(dir.path().join("cryo.toml")).unwrap();
            let example = provider_example(kind);
            assert!(toml.contains(example), "{kind}");
            let on = toml.replace(example, &example.replace("# ", ""));
            std::fs::write(dir.path().join("cryo.toml"), on).unwrap();
            let l = super::super::config::load(dir.path(), chrono_tz::UTC).unwrap();
            assert!(!l.config.provider_env.is_empty(), "{kind}: {:?}", l.config);
        }
    }

    #[test]
    fn an_odd_agent_string_stays_valid_toml() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), Some("my \"agent\" \\ --flag"), Sandbox::Off).unwrap();
        let l = super::super::config::load(dir.path(), chrono_tz::UTC).unwrap();
        assert_eq!(l.config.agent, "my \"agent\" \\ --flag");
    }
}
