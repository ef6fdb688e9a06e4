//! Agent processes: the command line for each agent kind, the session's
//! environment, process groups, and ending them.
//!
//! Known kinds get their unattended, headless form. Flags checked against the
//! `--help` of the releases installed from npm on 2026-11-22:
//! `@anthropic-ai/claude-code@2.1.330`, `@openai/codex@0.169.0`,
//! `opencode-ai@1.18.33`.
//! - `claude -p [ARGS] --allowedTools LIST --`: the `--` ends
//!   `--allowedTools`, which takes several values. The same list as root
//!   and as a normal user. An agent line that
//!   chooses `--dangerously-skip-permissions` keeps it (and gets
//!   `IS_SANDBOX=1` as root, where Claude Code refuses the flag otherwise);
//!   one that names its own `--allowedTools` or `--permission-mode` keeps
//!   those.
//! - `codex exec -C DIR --skip-git-repo-check
//!   --dangerously-bypass-approvals-and-sandbox -c shell_environment_policy.inherit=all
//!   -c allow_login_shell=false [ARGS] -`: without `inherit=all` the tool
//!   calls lose our `CRYO_*` variables, and a login shell (`bash -lc`, Codex's
//!   default) runs `/etc/profile`, which resets `PATH` and loses `cryo-agent`.
//!   An agent line that picks its own `--sandbox` keeps it instead of the
//!   bypass; with `workspace-write`, cryod adds
//!   `-c sandbox_workspace_write.network_access=true`, without which the
//!   sandbox refuses every socket, cryod's too.
//! - `opencode run --dir DIR --auto [ARGS]`: `--auto` approves the tool
//!   permissions an unattended run needs (those not explicitly denied).
//!
//! Every known kind reads its prompt on standard input (each CLI does when
//! its stdin is not a terminal and no prompt argument is given; checked on
//! the pinned releases), never from its arguments, which every process of
//! the machine may read in `/proc/PID/cmdline`; an ACP agent's prompt goes to
//! cryod's client in its environment. Any other `agent` command runs as
//! given, with the prompt as its last argument (and on its standard input
//! too). A prompt too long for one argument is written to a file and the
//! agent is told to read it.
//!
//! With an `[approvals]` policy each kind asks cryod before its tool calls
//! instead of running with its prompts off (`approvals`): Claude
//! Code through `--permission-prompt-tool`, Codex, Qwen Code and Gemini
//! CLI through a pre-tool hook running `cryo-agent approval --hook`, Pi
//! through cryo's extension, OpenCode through cryo's plugin
//! (`opencode-cryo.mjs`), an ACP agent through cryod's client. What was
//! verified of each is in `agent-events.md`.
//!
//! Unless the chamber says `mcp = false`, each known kind also gets
//! `cryo-agent mcp` as an MCP server named `cryo`, without touching the
//! user's own configuration files. What was verified on the pinned CLIs, and
//! how each exposes the tools, is in `kinds-mcp.md` beside this file.

use super::Error;
use approvals::{asks_approvals, claude_asking_line, hook_command, hook_timeout, qwen_defaults};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Longest prompt passed as one argument (Linux caps one at 128 KiB).
pub(crate) const MAX_PROMPT_ARG: usize = 100 * 1024;

/// A resolved command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub program: String,
    pub args: Vec<String>,
    /// Extra environment the kind needs; it wins over `[provider].env`
    /// (whose `OPENCODE_CONFIG_CONTENT` it merges).
    pub env: BTreeMap<String, String>,
    /// Files to write first (path relative to the chamber, contents): the
    /// MCP configuration a kind reads from a file.
    pub files: Vec<(String, String)>,
    /// The kind whose event stream it writes on stdout (known kinds).
    pub events: Option<Kind>,
    /// The model the agent line names (`--model`/`-m`), if any.
    pub model: Option<String>,
    /// Its stderr carries log lines to read (OpenCode's provider limit).
    pub read_logs: bool,
    /// A JSON settings file in the chamber (path relative to it) and the
    /// keys cryod sets there; the file's other keys are kept (Gemini CLI's
    /// workspace settings).
    pub settings: Option<(String, serde_json::Value)>,
    /// cryod's own arguments that drive the agent (`cryod __acp …
    /// -- PROGRAM ARGS`), outside its confinement: an ACP agent.
    pub bridge: Option<Vec<String>>,
    /// What the agent reads on its standard input: its prompt.
    pub stdin: Option<String>,
}

/// `cryo-agent mcp` as this session's MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mcp {
    /// The `cryo-agent` binary (absolute when found).
    pub program: String,
}

/// Where Claude Code's MCP configuration is written, in the chamber.
pub(crate) const CLAUDE_MCP_CONFIG: &str = ".cryo/mcp.json";

/// The session's variables an MCP server needs (Codex filters a server's
/// environment to a few variables plus those it is told to forward).
const SESSION_VARS: &[&str] =
    &["CRYO_SOCKET", "CRYO_CHAMBER", "CRYO_SESSION", "CRYO_WAKE_ID", "CRYO_SESSION_TOKEN", "TZ"];

/// What makes an `agent` line an Agent Client Protocol agent.
pub(crate) const ACP_PREFIX: &str = "acp:";

/// The agent kinds cryo knows, each with the event stream it writes on
/// stdout (read by `events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Claude Code: `-p --output-format stream-json --verbose`.
    Claude,
    /// Codex: `exec --json`.
    Codex,
    /// OpenCode: `run --format json`.
    OpenCode,
    /// Qwen Code: `--output-format stream-json`, Claude Code's events.
    Qwen,
    /// Gemini CLI: `--output-format stream-json`.
    Gemini,
    /// Pi: `--mode json`.
    Pi,
    /// `acp:COMMAND`: any agent speaking the Agent Client Protocol; its
    /// events are what cryod's client (`acp`) writes of it.
    Acp,
    /// Any other command: no stream cryod reads.
    Other,
}

impl Kind {
    pub fn of(program: &str) -> Kind {
        match Path::new(program).file_name().and_then(|n| n.to_str()) {
            Some("claude") => Kind::Claude,
            Some("codex") => Kind::Codex,
            Some("opencode") => Kind::OpenCode,
            Some("qwen") => Kind::Qwen,
            Some("gemini") => Kind::Gemini,
            Some("pi") => Kind::Pi,
            _ => Kind::Other,
        }
    }

    /// The folders this kind's CLI keeps its own state in, which a confined
    /// session may write: `var` looks a variable up (`[provider].env`
    /// first, then cryod's environment).
    pub fn state_dirs(self, home: &Path, var: impl Fn(&str) -> Option<String>) -> Vec<std::path::PathBuf> {
        let dir =
            |name: &str, default: &str| var(name).filter(|v| !v.is_empty()).map_or(home.join(default), Into::into);
        match self {
            Kind::Claude => vec![dir("CLAUDE_CONFIG_DIR", ".claude")],
            Kind::Codex => vec![dir("CODEX_HOME", ".codex")],
            Kind::OpenCode => [
                ("XDG_CONFIG_HOME", ".config"),
                ("XDG_DATA_HOME", ".local/share"),
                ("XDG_CACHE_HOME", ".cache"),
                ("XDG_STATE_HOME", ".local/state"),
            ]
            .iter()
            .map(|(name, default)| dir(name, default).join("opencode"))
            .collect(),
            Kind::Qwen => vec![dir("QWEN_HOME", ".qwen")],
            Kind::Gemini => vec![dir("GEMINI_CLI_HOME", "").join(".gemini")],
            Kind::Pi => vec![dir("PI_CODING_AGENT_DIR", ".pi/agent")],
            // Its program's kind decides (`Kind::of` the program).
            Kind::Acp => Vec::new(),
            Kind::Other => Vec::new(),
        }
    }

    /// Files outside the chamber that this kind's CLI reads its setup from
    /// (`OPENCODE_CONFIG`), which a confined session may read.
    pub fn config_files(self, var: impl Fn(&str) -> Option<String>) -> Vec<std::path::PathBuf> {
        match self {
            Kind::OpenCode => var("OPENCODE_CONFIG").filter(|v| !v.is_empty()).map(Into::into).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The kind's name, as `cryo.toml`, the logs and `CRYO_AGENT_KIND` say it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Claude => "claude",
            Kind::Codex => "codex",
            Kind::OpenCode => "opencode",
            Kind::Qwen => "qwen",
            Kind::Gemini => "gemini",
            Kind::Pi => "pi",
            Kind::Acp => "acp",
            Kind::Other => "other",
        }
    }

    /// Whether it writes an event stream cryod reads (a known kind).
    pub fn writes_events(self) -> bool {
        self != Kind::Other
    }

    /// The kind of an `agent` command line (its first word; `acp:` before
    /// it makes any command an ACP agent).
    pub fn of_agent(agent: &str) -> Kind {
        if agent.trim_start().starts_with(ACP_PREFIX) {
            return Kind::Acp;
        }
        agent_words(agent).ok().and_then(|w| w.into_iter().next()).map(|p| Kind::of(&p)).unwrap_or(Kind::Other)
    }
}

/// The model an agent line's arguments name (`--model M`, `-m M`,
/// `--model=M`), if any.
pub(crate) fn named_model(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| match a.as_str() {
        "--model" | "-m" => args.get(i + 1).cloned(),
        a => a.strip_prefix("--model=").map(str::to_string),
    })
}

/// What one session asks of the agent.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    pub prompt: &'a str,
    /// Where a long prompt is written (relative to the chamber).
    pub prompt_file: &'a str,
    /// The provider conversation to continue (a known kind's own id), if any.
    pub resume: Option<&'a str>,
    /// The chamber's `[approvals]` policy, if it has one: the agent's CLI
    /// asks cryod before each tool call the policy does not leave to it.
    pub approvals: Option<&'a cryo_core::approvals::Policy>,
    /// Where the agent works, if not in its chamber (a `[git]` worktree):
    /// the folder a CLI is told to work in (`codex -C`, `opencode --dir`).
    pub workdir: Option<&'a Path>,
}

/// The command line that runs `agent` in `chamber` for `turn`.
pub(crate) fn command_line(
    agent: &str,
    chamber: &Path,
    turn: &Turn<'_>,
    as_root: bool,
    mcp: Option<&Mcp>,
    provider_env: &BTreeMap<String, String>,
) -> super::Result<Launch> {
    let (prompt, prompt_file) = (turn.prompt, turn.prompt_file);
    let acp = agent.trim_start().strip_prefix(ACP_PREFIX);
    let mut words = agent_words(agent)?;
    let program = words.remove(0);
    let extra = words;
    let model = named_model(&extra);
    let prompt_arg = if prompt.len() > MAX_PROMPT_ARG {
        // Whole: the agent may work elsewhere than its chamber (a worktree).
        let file = chamber.join(prompt_file);
        format!(
            "Your instructions for this session are in the file {} (too long to pass here). Read it now and follow it.",
            file.display()
        )
    } else {
        prompt.to_string()
    };
    let dir = turn.workdir.unwrap_or(chamber).to_string_lossy().into_owned();
    let kind = if acp.is_some() { Kind::Acp } else { Kind::of(&program) };
    let mcp = mcp.filter(|_| kind != Kind::Other);
    if turn.approvals.is_some() {
        asks_approvals(kind, &extra, mcp)?;
    }
    if kind == Kind::Codex
        && as_root
        && codex_sandbox(&extra).is_some_and(|s| !["none", "danger-full-access"].contains(&s))
    {
        // Its sandbox is a bubblewrap of its own, which needs capabilities
        // (or a user's namespace) a session started by root never holds.
        return Err(super::Error::Setting(
            "Codex's own --sandbox cannot run in a session cryod starts as root (a session holds no capability): \
             take --sandbox out of `agent` in cryo.toml; cryo's sandbox confines the agent"
                .into(),
        ));
    }
    let line = match kind {
        Kind::Claude if turn.approvals.is_some() => {
            let mcp = mcp.expect("asks_approvals checked");
            claude_asking_line(extra, chamber, turn.resume, mcp, turn.approvals.expect("checked"))
        }
        Kind::Claude => claude_line(extra, chamber, turn.resume, as_root, mcp),
        Kind::Codex => {
            let hook = turn.approvals.zip(mcp).map(|(p, m)| (hook_command(m, ""), hook_timeout(p)));
            KindLine { args: codex_args(extra, dir, turn.resume, mcp, hook), ..KindLine::default() }
        }
        Kind::OpenCode => {
            // Made first (it reads only `provider_env`), so that making
            // the line itself cannot fail.
            let plugin = turn.approvals.map(|_| chamber.join(OPENCODE_PLUGIN));
            let config = mcp.map(|m| opencode_config(m, provider_env, plugin.as_deref())).transpose()?;
            let mut line = opencode_line(extra, dir, turn.resume, config);
            if let (Some(_), Some(m)) = (plugin, mcp) {
                line.files.push((OPENCODE_PLUGIN.to_string(), include_str!("opencode-cryo.mjs").to_string()));
                line.env.insert("CRYO_AGENT_BIN".into(), m.program.clone());
            }
            line
        }
        Kind::Qwen => {
            let mut line = qwen_line(extra, turn.resume, mcp);
            if let (Some(_), Some(m)) = (turn.approvals, mcp) {
                line.files.push((QWEN_DEFAULTS.to_string(), format!("{:#}\n", qwen_defaults(m))));
                let path = chamber.join(QWEN_DEFAULTS).to_string_lossy().into_owned();
                line.env.insert("QWEN_CODE_SYSTEM_DEFAULTS_PATH".into(), path);
            }
            line
        }
        Kind::Gemini => {
            let hook = turn.approvals.map(hook_timeout);
            gemini_line(extra, turn.resume, mcp, provider_env, hook)
        }
        Kind::Pi => {
            let mut line = pi_line(extra, chamber, turn.resume, mcp);
            if turn.approvals.is_some() {
                line.env.insert("CRYO_APPROVALS".into(), "1".into());
            }
            line
        }
        // The agent's own line; cryod's ACP client (`acp::args`) runs it.
        // The prompt reaches cryod's client in its environment, which it
        // keeps from the agent.
        Kind::Acp => KindLine {
            args: extra,
            env: BTreeMap::from([(super::acp::PROMPT_VAR.to_string(), prompt_arg.clone())]),
            bridge: Some(super::acp::args(
                turn.resume,
                mcp.map(|m| m.program.as_str()),
                turn.approvals.and(mcp).map(|m| m.program.as_str()),
            )),
            ..KindLine::default()
        },
        Kind::Other => {
            let mut args = in_chamber(extra, chamber, turn.workdir);
            args.push(prompt_arg.clone());
            KindLine { args, ..KindLine::default() }
        }
    };
    let KindLine { args, mut env, files, read_logs, settings, bridge } = line;
    env.insert("CRYO_AGENT_KIND".into(), kind.name().into());
    // Its prompt on standard input (an ACP agent's stdin is its client's).
    let stdin = (kind != Kind::Acp).then_some(prompt_arg);
    Ok(Launch {
        program,
        args,
        env,
        files,
        events: kind.writes_events().then_some(kind),
        model,
        read_logs,
        settings,
        bridge,
        stdin,
    })
}

/// The part of a launch one kind's command line decides: `command_line`
/// adds the program, the kind's name, its event format and the model.
#[derive(Default)]
struct KindLine {
    args: Vec<String>,
    env: BTreeMap<String, String>,
    files: Vec<(String, String)>,
    read_logs: bool,
    settings: Option<(String, serde_json::Value)>,
    bridge: Option<Vec<String>>,
}

/// Claude Code's line: `-p` with stream-json events, cryo's tools allowed
/// unless the user chose their own permissions, and the MCP server given
/// by a config file in the chamber.
fn claude_line(extra: Vec<String>, chamber: &Path, resume: Option<&str>, as_root: bool, mcp: Option<&Mcp>) -> KindLine {
    let mut line = KindLine::default();
    let args = &mut line.args;
    args.push("-p".into());
    args.extend(["--output-format".into(), "stream-json".into(), "--verbose".into()]);
    let skip = chose(&extra, &["--dangerously-skip-permissions"]);
    let own_tools = chose(&extra, &["--allowedTools", "--allowed-tools", "--permission-mode"]);
    args.extend(extra);
    if skip && as_root {
        // The user's explicit choice; as root Claude Code refuses it
        // unless told it runs in a sandbox.
        line.env.insert("IS_SANDBOX".into(), "1".into());
    }
    if let Some(m) = mcp {
        let config = serde_json::json!({ "mcpServers": { "cryo": { "command": m.program, "args": ["mcp"] } } });
        line.files.push((CLAUDE_MCP_CONFIG.to_string(), format!("{config:#}\n")));
        let path = chamber.join(CLAUDE_MCP_CONFIG).to_string_lossy().into_owned();
        args.extend(["--mcp-config".into(), path, "--strict-mcp-config".into()]);
    }
    match (skip, own_tools, mcp.is_some()) {
        (false, false, true) => args.extend(["--allowedTools".into(), format!("{CLAUDE_TOOLS},{CLAUDE_MCP_TOOLS}")]),
        (false, false, false) => args.extend(["--allowedTools".into(), CLAUDE_TOOLS.into()]),
        // The user's own list stands; cryo's tools are allowed beside it.
        (false, true, true) => args.extend(["--allowedTools".into(), CLAUDE_MCP_TOOLS.into()]),
        (true, _, _) | (false, true, false) => {}
    }
    if let Some(id) = resume {
        args.extend(["--resume".into(), id.into()]);
    }
    // No prompt after it: Claude Code reads it on stdin.
    args.push("--".into());
    line
}

/// Codex's line: `exec --json` in the chamber, without its sandbox unless
/// the agent line picks one, and the MCP server given by `-c` settings.
fn codex_args(
    extra: Vec<String>,
    dir: String,
    resume: Option<&str>,
    mcp: Option<&Mcp>,
    hook: Option<(String, u64)>,
) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    args.extend(["exec".into(), "--json".into(), "-C".into(), dir, "--skip-git-repo-check".into()]);
    match codex_sandbox(&extra) {
        None => args.push("--dangerously-bypass-approvals-and-sandbox".into()),
        // Its seccomp filter refuses every socket, cryod's too,
        // unless network access is on.
        Some("workspace-write") => args.extend(["-c".into(), "sandbox_workspace_write.network_access=true".into()]),
        Some(_) => {}
    }
    args.extend(["-c".into(), "shell_environment_policy.inherit=all".into()]);
    args.extend(["-c".into(), "allow_login_shell=false".into()]);
    if let Some(m) = mcp {
        for setting in codex_mcp_settings(m) {
            args.extend(["-c".into(), setting]);
        }
    }
    if let Some((command, timeout)) = hook {
        // Every tool call asks cryod first (`[approvals]`); a hook of the
        // command line is not run unless its trust is bypassed (it is
        // cryod's own, not the workspace's).
        let command = toml::Value::String(command).to_string();
        args.extend([
            "-c".into(),
            format!(
                "hooks.PreToolUse=[{{matcher=\".*\",hooks=[{{type=\"command\",command={command},timeout={timeout}}}]}}]"
            ),
            "--dangerously-bypass-hook-trust".into(),
        ]);
    }
    args.extend(extra);
    if let Some(id) = resume {
        // `exec`'s options stand before its `resume` subcommand.
        args.extend(["resume".into(), id.into()]);
    }
    // The prompt: on stdin.
    args.push("-".into());
    args
}

/// The sandbox a Codex agent line picks, if any (`none`: the bypass).
fn codex_sandbox(extra: &[String]) -> Option<&str> {
    extra.iter().enumerate().find_map(|(i, a)| match a.as_str() {
        "-s" | "--sandbox" => Some(extra.get(i + 1).map(String::as_str).unwrap_or("")),
        "--dangerously-bypass-approvals-and-sandbox" => Some("none"),
        a => a.strip_prefix("--sandbox="),
    })
}

/// Qwen Code's line: its headless mode with stream-json events, every tool
/// approved (`--approval-mode yolo`) unless the agent line chose its own
/// mode, and the MCP server given inline by `--mcp-config`. The prompt is
/// read on stdin.
fn qwen_line(extra: Vec<String>, resume: Option<&str>, mcp: Option<&Mcp>) -> KindLine {
    let mut line = KindLine::default();
    let args = &mut line.args;
    args.extend(["--output-format".into(), "stream-json".into()]);
    if !chose(&extra, &["--approval-mode", "--yolo", "-y"]) {
        args.extend(["--approval-mode".into(), "yolo".into()]);
    }
    if let Some(m) = mcp {
        let config = serde_json::json!({ "mcpServers": { "cryo": { "command": m.program, "args": ["mcp"] } } });
        args.extend(["--mcp-config".into(), config.to_string()]);
    }
    args.extend(extra);
    if let Some(id) = resume {
        args.extend(["--resume".into(), id.into()]);
    }
    line
}

/// Gemini CLI's workspace settings, in the chamber: cryod sets its own keys
/// there (see [`gemini_settings`]) and keeps the rest.
pub(crate) const GEMINI_SETTINGS: &str = ".gemini/settings.json";

/// Gemini CLI's line: headless (its prompt on stdin) with stream-json events,
/// every tool approved (`--approval-mode yolo`) unless the agent line
/// chose its own mode, and the chamber trusted for the session
/// (`GEMINI_CLI_TRUST_WORKSPACE`, without which its workspace settings are
/// not read; `--skip-trust` alone does not read them). It has no flag for
/// an MCP server, nor, with a base URL, a headless way to use an API key:
/// both go in the chamber's workspace settings. Its system settings would
/// not do: it reads them only from a root-owned path.
fn gemini_line(
    extra: Vec<String>,
    resume: Option<&str>,
    mcp: Option<&Mcp>,
    provider_env: &BTreeMap<String, String>,
    hook: Option<u64>,
) -> KindLine {
    let mut line = KindLine::default();
    let args = &mut line.args;
    args.extend(["--output-format".into(), "stream-json".into()]);
    if !chose(&extra, &["--approval-mode", "--yolo", "-y"]) {
        args.extend(["--approval-mode".into(), "yolo".into()]);
    }
    args.push("--skip-trust".into());
    // Its events say nothing of a provider's limit; its stderr does.
    line.read_logs = true;
    args.extend(extra);
    if let Some(id) = resume {
        args.extend(["--resume".into(), id.into()]);
    }
    let key = provider_env.get("GEMINI_API_KEY").cloned().or_else(|| std::env::var("GEMINI_API_KEY").ok());
    if let Some(settings) = gemini_settings(mcp, key.is_some_and(|k| !k.is_empty()), hook) {
        line.settings = Some((GEMINI_SETTINGS.to_string(), settings));
        line.env.insert("GEMINI_CLI_TRUST_WORKSPACE".into(), "true".into());
    }
    line
}

/// cryod's keys in Gemini CLI's workspace settings: cryo's MCP server (its
/// `mcpServers` merge with the user's) and, with an API key,
/// `security.auth.selectedType = "gemini-api-key"`: with a base URL set
/// (`GOOGLE_GEMINI_BASE_URL`, as the gateway does) Gemini CLI 0.61.0
/// otherwise picks an auth type its headless mode refuses ("Invalid auth
/// method selected"). `None` when there is nothing to set.
pub(crate) fn gemini_settings(mcp: Option<&Mcp>, api_key: bool, hook: Option<u64>) -> Option<serde_json::Value> {
    use serde_json::json;
    let mut settings = json!({});
    if let Some(m) = mcp {
        // It starts MCP servers with a few variables only (HOME, PATH, ...):
        // the session's are named, and it expands `${NAME}` as it reads.
        let env: serde_json::Map<String, serde_json::Value> =
            SESSION_VARS.iter().map(|v| (v.to_string(), json!(format!("${{{v}}}")))).collect();
        settings["mcpServers"] =
            json!({ "cryo": { "command": m.program, "args": ["mcp"], "env": env, "trust": true } });
        if let Some(secs) = hook {
            // `[approvals]`: every tool call asks cryod first (its
            // timeout in milliseconds; one that passes would let it run).
            let hook = json!({ "name": "cryo-approval", "type": "command", "command": hook_command(m, ""),
                "timeout": secs * 1000, "env": env });
            settings["hooks"] = json!({ "BeforeTool": [{ "matcher": ".*", "hooks": [hook] }] });
        }
    }
    if api_key {
        settings["security"] = json!({ "auth": { "selectedType": "gemini-api-key" } });
    }
    (mcp.is_some() || api_key).then_some(settings)
}

/// `over` merged into `base`: objects key by key, anything else replaced.
pub(crate) fn merge_json(base: &mut serde_json::Value, over: &serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                merge_json(b.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Where the extension that gives Pi cryo's MCP tools is written, in the
/// chamber.
pub(crate) const PI_EXTENSION: &str = ".cryo/pi-cryo.mjs";

/// Pi's line: `--mode json` (its events, one a line) and `--offline`. Pi
/// has no MCP client: the extension `pi-cryo.mjs` (loaded with `-e`)
/// starts `cryo-agent mcp` and offers its tools as `cryo_NAME` (and points
/// Pi's provider at the gateway). It never asks before a tool. Its prompt
/// is read on stdin.
fn pi_line(extra: Vec<String>, chamber: &Path, resume: Option<&str>, mcp: Option<&Mcp>) -> KindLine {
    let mut line = KindLine::default();
    line.args.extend(["--mode".into(), "json".into(), "--offline".into()]);
    // Loaded always: it also points Pi at the gateway (`upstream::point`).
    line.files.push((PI_EXTENSION.to_string(), include_str!("pi-cryo.mjs").to_string()));
    let path = chamber.join(PI_EXTENSION).to_string_lossy().into_owned();
    line.args.extend(["-e".into(), path]);
    if let Some(m) = mcp {
        line.env.insert("CRYO_AGENT_MCP".into(), m.program.clone());
    }
    line.args.extend(extra);
    if let Some(id) = resume {
        line.args.extend(["--session".into(), id.into()]);
    }
    line
}

/// Whether an agent line's own arguments name one of `flags` (`--flag`,
/// `--flag=value`).
fn chose(extra: &[String], flags: &[&str]) -> bool {
    extra.iter().any(|a| flags.iter().any(|f| a == f || a.starts_with(&format!("{f}="))))
}

/// The `-c` settings that make `cryo-agent mcp` a Codex MCP server, with
/// the session's variables forwarded and its tools approved.
fn codex_mcp_settings(m: &Mcp) -> [String; 5] {
    let string = |s: &str| toml::Value::String(s.to_string()).to_string();
    let vars = SESSION_VARS.iter().map(|v| string(v)).collect::<Vec<_>>().join(",");
    [
        format!("mcp_servers.cryo.command={}", string(&m.program)),
        "mcp_servers.cryo.args=[\"mcp\"]".to_string(),
        format!("mcp_servers.cryo.env_vars=[{vars}]"),
        // exec never asks: without this every MCP call is refused.
        "mcp_servers.cryo.default_tools_approval_mode=\"approve\"".to_string(),
        // Wait for the server before the first request (else ~1 s).
        "mcp_servers.cryo.required=true".to_string(),
    ]
}

/// OpenCode's line: `run --format json` in the chamber with its logs on
/// stderr, and `config` (the MCP server, see `opencode_config`) passed
/// inline.
fn opencode_line(extra: Vec<String>, dir: String, resume: Option<&str>, config: Option<String>) -> KindLine {
    let mut line = KindLine::default();
    let args = &mut line.args;
    args.extend(["run".into(), "--format".into(), "json".into()]);
    // Its JSON events say nothing of a provider's limit; its logs
    // (on stderr) do, and cryod reads them.
    args.extend(["--print-logs".into(), "--log-level".into(), "WARN".into()]);
    line.read_logs = true;
    args.extend(["--dir".into(), dir, "--auto".into()]);
    if let Some(config) = config {
        line.env.insert("OPENCODE_CONFIG_CONTENT".into(), config);
    }
    args.extend(extra);
    if let Some(id) = resume {
        args.extend(["--session".into(), id.into()]);
    }
    line
}

/// OpenCode's inline configuration: the user's own `OPENCODE_CONFIG_CONTENT`
/// (from `[provider].env`), if any, with the `cryo` server and the permission
/// for its tools added. OpenCode merges it over its config files.
fn opencode_config(m: &Mcp, provider_env: &BTreeMap<String, String>, plugin: Option<&Path>) -> super::Result<String> {
    use serde_json::{Value, json};
    let mut config = match provider_env.get("OPENCODE_CONFIG_CONTENT") {
        Some(text) => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| Error::Setting("[provider].env OPENCODE_CONFIG_CONTENT is not a JSON object".into()))?,
        None => json!({}),
    };
    let server = json!({ "type": "local", "command": [m.program, "mcp"], "enabled": true });
    let object = |v: &mut Value, key: &str| -> super::Result<()> {
        let slot = v.as_object_mut().expect("an object").entry(key).or_insert_with(|| json!({}));
        if !slot.is_object() {
            return Err(Error::Setting(format!("[provider].env OPENCODE_CONFIG_CONTENT: `{key}` is not an object")));
        }
        Ok(())
    };
    object(&mut config, "mcp")?;
    config["mcp"]["cryo"] = server;
    if let Some(p) = plugin {
        // `[approvals]`: cryo's plugin asks cryod before every tool call.
        let url = format!("file://{}", p.display());
        match config.get_mut("plugin") {
            Some(Value::Array(list)) => list.push(json!(url)),
            Some(_) => {
                return Err(Error::Setting("[provider].env OPENCODE_CONFIG_CONTENT: `plugin` is not a list".into()));
            }
            None => config["plugin"] = json!([url]),
        }
    }
    match config.get("permission") {
        // A single answer for every tool ("allow", "ask") stands as the user's.
        Some(Value::String(_)) => {}
        _ => {
            object(&mut config, "permission")?;
            config["permission"]["cryo_*"] = json!("allow");
        }
    }
    Ok(config.to_string())
}

/// Tools Claude Code may use unattended: what an agent needs to work in its
/// chamber, `Bash` among them for `cryo-agent`.
const CLAUDE_TOOLS: &str = "Bash,Read,Edit,Write,Glob,Grep,WebFetch,WebSearch,TodoWrite";

/// cryo's own MCP tools, as Claude Code names them (`mcp__cryo__hibernate`, ...).
const CLAUDE_MCP_TOOLS: &str = "mcp__cryo";

/// The folder holding `cryo-agent` (beside the running binary).
pub fn agent_bin_dir() -> Option<PathBuf> {
    std::env::current_exe().ok()?.parent().map(Path::to_path_buf)
}

mod account;
mod approvals;
mod settings;
mod words;
pub(crate) use account::configured_model;
pub(crate) use approvals::{OPENCODE_PLUGIN, QWEN_DEFAULTS};
pub(crate) use settings::merge_settings;
pub use words::agent_words;
use words::in_chamber;
#[cfg(test)]
use words::split_words;

#[cfg(test)]
mod tests;
