//! How each kind asks cryod before its tool calls under a chamber's
//! `[approvals]` (see `agent-events.md` for what was verified of each):
//! Claude Code's permission prompt tool, the pre-tool hooks of Codex, Qwen
//! Code and Gemini CLI (`cryo-agent approval --hook`), Qwen Code's defaults
//! file, OpenCode's plugin; Pi's extension and the ACP client ask in their
//! own files (`pi-cryo.mjs`, `acp`).

use std::path::Path;

use super::{CLAUDE_MCP_TOOLS, Error, Kind, KindLine, Mcp, SESSION_VARS, chose, claude_line};

/// Whether `kind` can ask cryod before its tool calls (an `[approvals]`
/// policy), each through `cryo-agent`: Claude Code through its permission
/// prompt tool, an ACP agent through cryod's client, Codex, Qwen Code and
/// Gemini CLI through a pre-tool hook (`cryo-agent approval --hook`), Pi
/// through cryo's extension, OpenCode through a plugin; a command of the
/// user's own asks itself (`cryo-agent approval`). What each was verified
/// to do is in `agent-events.md`. All but the last need cryo's tools.
pub(super) fn asks_approvals(kind: Kind, extra: &[String], mcp: Option<&Mcp>) -> crate::Result<()> {
    match kind {
        _ if mcp.is_none() && kind != Kind::Other => Err(Error::Setting(
            "[approvals] needs cryo's own tools for the agent to ask through: set `mcp = true` (and check that \
             cryo-agent is installed beside cryod)"
                .into(),
        )),
        Kind::Claude if chose(extra, &["--dangerously-skip-permissions", "--permission-prompt-tool"]) => {
            Err(Error::Setting(
                "[approvals] decides Claude Code's permissions: remove --dangerously-skip-permissions and \
                 --permission-prompt-tool from `agent`"
                    .into(),
            ))
        }
        _ => Ok(()),
    }
}

/// The command a CLI's pre-tool hook runs (`cryo-agent approval --hook`),
/// for a shell.
pub(super) fn hook_command(m: &Mcp, more: &str) -> String {
    let quoted = format!("'{}'", m.program.replace('\'', "'\\''"));
    format!("{quoted} approval --hook{more}")
}

/// How long a CLI lets its hook run: the in-session wait and a margin.
pub(super) fn hook_timeout(policy: &cryo_core::approvals::Policy) -> u64 {
    policy.wait.as_secs() + 60
}

/// Claude Code's line under an `[approvals]` policy: every tool call but
/// cryo's own goes to cryo's permission prompt tool (`approval`), which
/// asks cryod; the tools a rule denies outright are disallowed as well.
pub(super) fn claude_asking_line(
    extra: Vec<String>,
    chamber: &Path,
    resume: Option<&str>,
    mcp: &Mcp,
    policy: &cryo_core::approvals::Policy,
) -> KindLine {
    let mut line = claude_line(extra, chamber, resume, false, Some(mcp));
    let at = line.args.iter().position(|a| a == "--").unwrap_or(line.args.len());
    // cryo's tools only: the rest is the prompt tool's to judge.
    if let Some(i) = line.args.iter().position(|a| a == "--allowedTools") {
        line.args[i + 1] = CLAUDE_MCP_TOOLS.into();
    }
    let mut more = vec!["--permission-mode".into(), "default".into()];
    more.extend(["--permission-prompt-tool".into(), format!("{CLAUDE_MCP_TOOLS}__approval")]);
    let denied: Vec<String> =
        policy.deny.iter().filter(|r| r.pattern.is_none() && r.tool != "*").map(|r| r.tool.clone()).collect();
    if !denied.is_empty() {
        more.extend(["--disallowedTools".into(), denied.join(",")]);
    }
    line.args.splice(at..at, more);
    line
}

/// Where Qwen Code's system defaults holding cryo's pre-tool hook are
/// written, in the chamber (named by `QWEN_CODE_SYSTEM_DEFAULTS_PATH`: the
/// layer below every other, read without the folder's trust; its hooks
/// add to the user's).
pub(crate) const QWEN_DEFAULTS: &str = ".cryo/qwen-defaults.json";

/// Qwen Code's hook seconds: it ends a hook after a minute whatever its
/// timeout says (and then runs the call), so the hook asks for at most 50
/// seconds in the session and is given 55.
const QWEN_HOOK_SECS: u64 = 55;

/// Qwen Code's system defaults under `[approvals]`: every tool call asks
/// cryod first (`cryo-agent approval --hook`, waiting at most 50 s: past
/// that the session parks, as it would past `approval_wait`).
pub(super) fn qwen_defaults(m: &Mcp) -> serde_json::Value {
    let env: serde_json::Map<String, serde_json::Value> =
        SESSION_VARS.iter().map(|v| (v.to_string(), serde_json::json!(format!("${{{v}}}")))).collect();
    let hook = serde_json::json!({ "type": "command", "command": hook_command(m, " --wait-at-most 50"),
        "timeout": QWEN_HOOK_SECS, "env": env });
    serde_json::json!({ "hooks": { "PreToolUse": [{ "matcher": ".*", "hooks": [hook] }] } })
}

/// Where cryo's OpenCode plugin (`[approvals]`) is written, in the chamber.
pub(crate) const OPENCODE_PLUGIN: &str = ".cryo/opencode-cryo.mjs";
