//! Issue 12: the real agent CLIs (Claude Code, Codex, OpenCode, installed
//! from npm at the versions pinned in `tests/agents/package.json`) run whole
//! sessions under cryod, offline, against the scripted model server of
//! `cryo_tests::model`. cryo adds nothing for the test: the chamber's agent is
//! the bare CLI name, and only `[provider].env` points it at the local model.
//!
//! The plan, for each CLI: session 1 sends a message, adds a TODO a few
//! seconds out and hibernates; the test then writes an inbox message; session
//! 2 (woken by the message, or by the TODO if the CLI is slow) receives it,
//! replies, marks the TODO done and hibernates with `--complete`.
//!
//! `.ci/run` installs the CLIs (`npm ci --prefix tests/agents`) and sets
//! The same plan runs again through cryo's MCP tools only (issue 20): the
//! model server calls `send`, `todo_add`, `hibernate`, ... under the names
//! each CLI gives them, and never the shell.
//!
//! `CRYO_REQUIRE_AGENT_CLIS=1`, so there a missing CLI fails the test; on a
//! machine without them each test says it skipped, and why. With
//! `CRYO_MODEL_DUMP=DIR`, each test writes the requests its CLI made to
//! `DIR/<cli>.json` (to see what a new CLI release sends).

use std::path::PathBuf;
use std::time::Duration;

use cryo_tests::model::{ModelServer, Script};
use cryo_tests::{Chamber, Env, wait_until_telling, wait_until_within};

/// Real CLIs start slowly (a JavaScript runtime, a config scan); under a
/// loaded CI machine a session can take many seconds.
pub(crate) const SESSION_DEADLINE: Duration = Duration::from_secs(120);

/// The folder holding the installed CLIs' launchers, or why there is none.
pub(crate) fn cli(bin: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("agents/node_modules/.bin").join(bin);
    if p.exists() {
        return Some(p);
    }
    let why = format!("{} is not installed; run `npm ci --prefix tests/agents` (.ci/run does)", p.display());
    assert!(std::env::var_os("CRYO_REQUIRE_AGENT_CLIS").is_none(), "{why}");
    eprintln!("SKIPPED: {why}");
    None
}

/// The two-session plan through MCP tools only.
fn two_session_plan_by_tools() -> Script {
    use serde_json::json;
    Script::new()
        .on_tools(
            "- session: 1\n",
            &[
                ("send", json!({ "text": "hello from session 1, through MCP" })),
                ("todo_add", json!({ "text": "read the reply", "at": "+5s" })),
                ("hibernate", json!({ "summary": "said hello" })),
            ],
        )
        .on_tools(
            "- session: 2\n",
            &[
                ("receive", json!({})),
                ("send", json!({ "text": "thanks, got your note (MCP)" })),
                ("todo_done", json!({ "id": 1 })),
                ("hibernate", json!({ "complete": true, "summary": "plan complete" })),
            ],
        )
}

fn two_session_plan() -> Script {
    Script::new()
        .on(
            "- session: 1\n",
            &[
                "cryo-agent send 'hello from session 1'",
                "cryo-agent todo add 'read the reply' --at +5s",
                "cryo-agent hibernate --summary 'said hello'",
            ],
        )
        .on(
            "- session: 2\n",
            &[
                "cryo-agent receive",
                "cryo-agent send 'thanks, got your note'",
                "cryo-agent todo done 1",
                "cryo-agent hibernate --complete --summary 'plan complete'",
            ],
        )
}

/// Who runs cryod (and so the agent): this test process's user, or the
/// unprivileged `nobody` (when the tests run as root, as in CI).
#[derive(Clone, Copy, PartialEq)]
enum As {
    Me,
    Nobody,
}

/// Runs the two-session plan with the CLI `bin` (plus `args` on the agent
/// line), `[provider].env` and any files it needs arranged by `setup`, and
/// checks the chamber's files.
fn run_plan(bin: &str, args: &str, who: As, setup: impl FnOnce(&Env, &ModelServer) -> String) {
    run_script(bin, args, who, setup, two_session_plan(), ("hello from session 1", "thanks, got your note"), "");
}

/// Why this machine cannot provide the sandbox `mode`, if it cannot.
fn sandbox_missing(mode: &str) -> Option<String> {
    cryo_session::Sandbox::parse(mode).and_then(cryo_session::Sandbox::unavailable)
}

/// [`run_plan`] confined by `sandbox` (issue 25), skipped with the reason
/// where this machine cannot provide it.
fn run_plan_confined(bin: &str, sandbox: &str, who: As, setup: impl FnOnce(&Env, &ModelServer) -> String) {
    run_plan_confined_with(bin, "", sandbox, who, setup)
}

/// [`run_plan_confined`] with `args` on the agent line.
fn run_plan_confined_with(
    bin: &str,
    args: &str,
    sandbox: &str,
    who: As,
    setup: impl FnOnce(&Env, &ModelServer) -> String,
) {
    if let Some(why) = sandbox_missing(sandbox) {
        eprintln!("SKIPPED {bin} under sandbox = {sandbox:?}: {why}");
        return;
    }
    let sent = ("hello from session 1", "thanks, got your note");
    run_script(bin, args, who, setup, two_session_plan(), sent, &format!("sandbox = \"{sandbox}\"\n"));
}

/// [`run_plan`] with the MCP tools instead of the shell.
fn run_plan_by_tools(bin: &str, args: &str, who: As, setup: impl FnOnce(&Env, &ModelServer) -> String) {
    let sent = ("hello from session 1, through MCP", "thanks, got your note (MCP)");
    run_script(bin, args, who, setup, two_session_plan_by_tools(), sent, "");
}

fn run_script(
    bin: &str,
    args: &str,
    who: As,
    setup: impl FnOnce(&Env, &ModelServer) -> String,
    script: Script,
    sent: (&str, &str),
    top: &str,
) {
    // `acp:qwen`: the CLI driven over the Agent Client Protocol.
    let (acp, bin) = match bin.strip_prefix("acp:") {
        Some(b) => ("acp:", b),
        None => ("", bin),
    };
    let name = if acp.is_empty() { bin.to_string() } else { format!("acp-{bin}") };
    let name = name.as_str();
    let Some(path) = cli(bin) else { return };
    let expected: Vec<String> = ["- session: 1\n", "- session: 2\n"].iter().flat_map(|m| script.commands(m)).collect();
    let model = ModelServer::start(script);
    let mut env = Env::new();
    if who == As::Nobody
        && let Err(why) = env.run_as(65534, 65534, &[&path])
    {
        eprintln!("SKIPPED running {bin} as a normal user: {why}");
        return;
    }
    let provider = setup(&env, &model);
    let toml = format!("agent = \"{acp}{} {args}\"\n{top}\n[provider]\n{provider}\n", path.display());
    // A price for the scripted model, for the CLIs that report no cost.
    env.daemon_config("[prices.m1]\ninput = 1000.0\noutput = 2000.0\n");
    env.give_to_user();
    let _d = env.start_daemon();
    let c = env.chamber(name, "", &toml);
    env.give_to_user();
    env.cryoctl(&["chamber", "start", name]).ok();
    let diag = |c: &Chamber| {
        format!(
            "cryo.log:\n{}\ncryo-agent.log:\n{}\nmodel requests:\n{}",
            c.cryo_log(),
            c.read("cryo-agent.log"),
            model.transcript()
        )
    };
    wait_until_within(SESSION_DEADLINE, "session 1 to end", || c.ended() >= 1);
    assert!(c.cryo_log().contains("hibernate accepted"), "session 1 did not hibernate\n{}", diag(&c));
    c.write_inbox(1, "a note from the operator: the build is green");
    wait_until_within(SESSION_DEADLINE, "session 2 to end", || c.ended() >= 2);

    let log = c.cryo_log();
    assert!(log.contains("hibernate --complete accepted"), "session 2 did not complete the plan\n{}", diag(&c));
    assert_eq!(c.ended(), 2, "{}", diag(&c));
    assert!(c.fallbacks().is_empty(), "cryod had to write a fallback: {:?}\n{}", c.fallbacks(), diag(&c));
    let outbox = c.outbox();
    assert!(outbox.iter().any(|m| m.contains(sent.0)), "{outbox:?}");
    assert!(outbox.iter().any(|m| m.contains(sent.1)), "{outbox:?}");
    let claimed = c.messages("messages/inbox/archive");
    assert!(claimed.iter().any(|(_, t)| t.contains("the build is green")), "the inbox message was not received");
    if who == As::Nobody {
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(c.dir.join("todo.json")).unwrap());
        assert_eq!(owner, 65534, "cryod did not run as the normal user");
    }
    let todos = c.todos().to_string();
    assert!(todos.contains("read the reply"), "session 1's TODO is missing: {todos}");
    // The CLI ran each scripted step: a command through its own shell tool,
    // or a call of cryo's MCP tool; nothing else.
    assert_eq!(model.answered(), expected, "{}", diag(&c));
    let by_tools = expected.iter().any(|s| s.starts_with("tool "));
    if by_tools && bin == "claude" {
        // Claude Code defers MCP tools: each was fetched by a search first.
        assert!(!model.searches().is_empty(), "no ToolSearch call: {}", model.transcript());
        assert!(c.read(".cryo/mcp.json").contains("\"mcpServers\""), "{}", c.read(".cryo/mcp.json"));
    }
    // Every answered request was a streamed one, and carried the key the
    // way its API says (`x-api-key` for Anthropic, a bearer token for OpenAI's).
    for seen in model.seen().iter().filter(|s| s.answered.is_some()) {
        // Gemini's API streams by its path (`:streamGenerateContent`).
        let streamed = seen.body["stream"] == true || seen.path.ends_with(":streamGenerateContent");
        assert!(streamed, "{} was not streamed", seen.path);
        let key = seen.headers.iter().any(|(k, v)| {
            ((k == "x-api-key" || k == "x-goog-api-key") && v == "sk-cryo-test")
                || (k == "authorization" && v == "Bearer sk-cryo-test")
        });
        assert!(key, "{} carried no API key: {:?}", seen.path, seen.headers);
    }
    if let Some(p) = std::env::var_os("CRYO_MODEL_DUMP") {
        let dump: Vec<serde_json::Value> = model
            .seen()
            .into_iter()
            .map(|s| serde_json::json!({ "path": s.path, "headers": s.headers, "body": s.body }))
            .collect();
        std::fs::write(PathBuf::from(p).join(format!("{name}.json")), serde_json::to_string_pretty(&dump).unwrap())
            .unwrap();
    }
    // The ledger has what each session used, from the CLI's own stream.
    let status = env.cryoctl(&["chamber", "status", name, "--json"]).json();
    let sessions = status[0]["sessions"].as_array().cloned().unwrap_or_default();
    assert_eq!(sessions.len(), 2, "{status}");
    for s in &sessions {
        assert!(s["input_tokens"].as_u64() > Some(0) && s["output_tokens"].as_u64() > Some(0), "{s}");
        assert!(s["provider_session"].as_str().is_some_and(|p| !p.is_empty()), "{s}");
        assert!(s["cost_usd"].as_f64().is_some_and(|c| c > 0.0), "{s}");
        // The account it billed, as `usage --by provider` names it.
        assert!(s["account"].as_str().is_some_and(|a| !a.is_empty()), "{s}");
        let model = s["model"].as_str().unwrap_or_default();
        assert!(model.ends_with("m1") || model.starts_with("claude"), "{s}");
    }
    // `cryoctl usage` sums them, by chamber and by provider account (the
    // kind and a hash of its `[provider].env`); list and status show cost.
    let by_chamber = env.cryoctl(&["usage", "--json"]).json();
    assert_eq!(by_chamber["rows"][0]["key"], name, "{by_chamber}");
    assert_eq!(by_chamber["total"]["sessions"], 2, "{by_chamber}");
    let by_provider = env.cryoctl(&["usage", "--by", "provider", "--since", "today", "--json"]).json();
    let kind = if bin == "claude" {
        "claude-"
    } else if acp.is_empty() {
        bin
    } else {
        "acp-"
    };
    assert!(by_provider["rows"][0]["key"].as_str().unwrap().starts_with(kind), "{by_provider}");
    assert_eq!(sessions[0]["account"], by_provider["rows"][0]["key"], "a session's account is usage's");
    let table = env.cryoctl(&["usage", "--by", "model"]);
    assert!(table.ok().contains("TOTAL"), "{}", table.ok());
    // (Only the plain plan's run: the MCP one's requests differ.)
    if bin == "claude" && args.is_empty() && who == As::Me && top.is_empty() && sent.0 == "hello from session 1" {
        // The book's example (docs/src/cost.md) is this run's.
        cryo_tests::examples::check("docs/src/cost.md", "cryoctl usage --by model", table.ok());
    }
    eprintln!("cryoctl usage --by model ({name}):\n{}", table.ok());
    assert!(env.cryoctl(&["chamber", "list"]).ok().contains("COST"));
    assert!(env.cryoctl(&["chamber", "status", name]).ok().contains("over 30 days (2 sessions)"));
    // The transcript: each tool call and its result, readable; the raw
    // events beside it.
    let transcript = c.read("cryo-agent.log");
    assert!(transcript.lines().any(|l| l.starts_with("→ ") && l.contains("send")), "{transcript}");
    assert!(transcript.lines().any(|l| l.starts_with("← ") && l.contains("messages/outbox/")), "{transcript}");
    assert!(transcript.contains("[usage: "), "{transcript}");
    let raw = c.read(".cryo/agent-events.jsonl");
    assert!(raw.lines().count() > 4 && raw.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    if let Some(mode) = top.strip_prefix("sandbox = \"").and_then(|t| t.split('"').next()) {
        let header = format!(", sandbox {mode}) at ");
        assert_eq!(transcript.matches(&header).count(), 2, "each session ran confined: {transcript}");
    }
    // Every known kind goes through cryo's gateway.
    assert!(!log.contains("not through cryo's gateway"), "{log}");
    // The provider's key reached the model (the gateway sent it) but not cryo's logs.
    assert!(!log.contains("sk-cryo-test") && !c.read("cryo-agent.log").contains("sk-cryo-test"));
}

pub(crate) fn claude_provider(_: &Env, model: &ModelServer) -> String {
    format!(
        "env = {{ ANTHROPIC_BASE_URL = \"{}\", ANTHROPIC_API_KEY = \"sk-cryo-test\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\" }}",
        model.url()
    )
}

/// Codex reads its model provider from `$CODEX_HOME/config.toml`.
pub(crate) fn codex_provider(env: &Env, model: &ModelServer) -> String {
    let home = env.path("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"m1\"\nmodel_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\n\
             base_url = \"{}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n",
            model.url()
        ),
    )
    .unwrap();
    format!("env = {{ CODEX_HOME = \"{}\", OPENAI_API_KEY = \"sk-cryo-test\" }}", home.display())
}

/// OpenCode reads an OpenAI-compatible provider from the file `OPENCODE_CONFIG` names.
pub(crate) fn opencode_provider(env: &Env, model: &ModelServer) -> String {
    let config = env.path("opencode.json");
    let provider = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "model": "local/m1",
        "provider": { "local": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "local",
            "options": { "baseURL": format!("{}/v1", model.url()), "apiKey": "sk-cryo-test" },
            "models": { "m1": { "name": "m1" } },
        } },
    });
    std::fs::write(&config, provider.to_string()).unwrap();
    format!("env = {{ OPENCODE_CONFIG = \"{}\" }}", config.display())
}

/// Qwen Code reads an OpenAI-compatible provider from its environment
/// (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_MODEL`).
pub(crate) fn qwen_provider(_: &Env, model: &ModelServer) -> String {
    format!(
        "env = {{ OPENAI_API_KEY = \"sk-cryo-test\", OPENAI_BASE_URL = \"{}/v1\", OPENAI_MODEL = \"m1\" }}",
        model.url()
    )
}

/// Gemini CLI with an API key, its base URL the scripted model's.
pub(crate) fn gemini_provider(_: &Env, model: &ModelServer) -> String {
    format!(
        "env = {{ GEMINI_API_KEY = \"sk-cryo-test\", GOOGLE_GEMINI_BASE_URL = \"{}\", GEMINI_MODEL = \"m1\" }}",
        model.url()
    )
}

/// Pi reads its providers from `models.json` in `PI_CODING_AGENT_DIR`; the
/// key from the variable its `apiKey` names.
pub(crate) fn pi_provider(env: &Env, model: &ModelServer) -> String {
    let dir = env.path("pi-agent");
    std::fs::create_dir_all(&dir).unwrap();
    let models = serde_json::json!({ "providers": { "local": {
        "baseUrl": format!("{}/v1", model.url()),
        "api": "openai-completions",
        "apiKey": "LOCAL_API_KEY",
        "models": [{ "id": "m1" }],
    } } });
    std::fs::write(dir.join("models.json"), models.to_string()).unwrap();
    format!("env = {{ PI_CODING_AGENT_DIR = \"{}\", LOCAL_API_KEY = \"sk-cryo-test\" }}", dir.display())
}

#[test]
fn claude_code_runs_a_two_session_plan() {
    run_plan("claude", "", As::Me, claude_provider);
}

#[test]
fn claude_code_runs_a_two_session_plan_as_a_normal_user() {
    run_plan("claude", "", As::Nobody, claude_provider);
}

/// The user's explicit choice of `--dangerously-skip-permissions` works as
/// root too (cryod adds `IS_SANDBOX=1`, without which Claude Code refuses).
#[test]
fn claude_code_with_skip_permissions_chosen_by_the_user() {
    run_plan("claude", "--dangerously-skip-permissions", As::Me, claude_provider);
}

#[test]
fn codex_runs_a_two_session_plan() {
    run_plan("codex", "", As::Me, codex_provider);
}

#[test]
fn codex_runs_a_two_session_plan_as_a_normal_user() {
    run_plan("codex", "", As::Nobody, codex_provider);
}

#[test]
fn opencode_runs_a_two_session_plan() {
    run_plan("opencode", "", As::Me, opencode_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_as_a_normal_user() {
    run_plan("opencode", "", As::Nobody, opencode_provider);
}

#[test]
fn qwen_code_runs_a_two_session_plan() {
    run_plan("qwen", "", As::Me, qwen_provider);
}

#[test]
fn qwen_code_runs_a_two_session_plan_as_a_normal_user() {
    run_plan("qwen", "", As::Nobody, qwen_provider);
}

#[test]
fn gemini_cli_runs_a_two_session_plan() {
    run_plan("gemini", "", As::Me, gemini_provider);
}

#[test]
fn gemini_cli_runs_a_two_session_plan_as_a_normal_user() {
    run_plan("gemini", "", As::Nobody, gemini_provider);
}

#[test]
fn gemini_cli_runs_a_two_session_plan_under_landlock_as_a_normal_user() {
    run_plan_confined("gemini", "landlock", As::Nobody, gemini_provider);
}

#[test]
fn gemini_cli_runs_a_two_session_plan_under_bwrap() {
    run_plan_confined("gemini", "bwrap", As::Me, gemini_provider);
}

#[test]
fn gemini_cli_runs_a_two_session_plan_through_mcp_tools() {
    run_plan_by_tools("gemini", "", As::Me, gemini_provider);
}

#[test]
fn gemini_cli_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("gemini", "", As::Nobody, gemini_provider);
}

#[test]
fn pi_runs_a_two_session_plan() {
    run_plan("pi", "", As::Me, pi_provider);
}

#[test]
fn pi_runs_a_two_session_plan_as_a_normal_user() {
    run_plan("pi", "", As::Nobody, pi_provider);
}

#[test]
fn pi_runs_a_two_session_plan_under_landlock() {
    run_plan_confined("pi", "landlock", As::Me, pi_provider);
}

#[test]
fn pi_runs_a_two_session_plan_under_bwrap_as_a_normal_user() {
    run_plan_confined("pi", "bwrap", As::Nobody, pi_provider);
}

#[test]
fn pi_runs_a_two_session_plan_through_mcp_tools() {
    run_plan_by_tools("pi", "", As::Me, pi_provider);
}

#[test]
fn pi_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("pi", "", As::Nobody, pi_provider);
}

/// Issue 44: any agent that speaks the Agent Client Protocol, here Qwen
/// Code's `--acp` in its `default` approval mode (it asks before a shell
/// command or an MCP tool: cryod's client allows it once).
#[test]
fn an_acp_agent_runs_a_two_session_plan() {
    run_plan("acp:qwen", "--acp --approval-mode default", As::Me, qwen_provider);
}

#[test]
fn an_acp_agent_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("acp:qwen", "--acp --approval-mode default", As::Nobody, qwen_provider);
}

#[test]
fn an_acp_agent_runs_a_two_session_plan_under_bwrap() {
    run_plan_confined_with("acp:qwen", "--acp", "bwrap", As::Me, qwen_provider);
}

/// Under Landlock a new terminal cannot be opened (`/dev/pts` holds the
/// operator's own): Qwen Code's ACP mode runs its shell on one unless its
/// `tools.shell.enableInteractiveShell` is off, as here.
#[test]
fn an_acp_agent_runs_a_two_session_plan_under_landlock_as_a_normal_user() {
    let setup = |env: &Env, model: &ModelServer| {
        let home = env.path("qwen-home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("settings.json"), r#"{"tools":{"shell":{"enableInteractiveShell":false}}}"#).unwrap();
        let line = qwen_provider(env, model);
        line.replace("env = {", &format!("env = {{ QWEN_HOME = \"{}\",", home.display()))
    };
    run_plan_confined_with("acp:qwen", "--acp", "landlock", As::Nobody, setup);
}

#[test]
fn qwen_code_runs_a_two_session_plan_under_landlock() {
    run_plan_confined("qwen", "landlock", As::Me, qwen_provider);
}

#[test]
fn qwen_code_runs_a_two_session_plan_under_bwrap_as_a_normal_user() {
    run_plan_confined("qwen", "bwrap", As::Nobody, qwen_provider);
}

#[test]
fn claude_code_runs_a_two_session_plan_under_landlock() {
    run_plan_confined("claude", "landlock", As::Me, claude_provider);
}

#[test]
fn claude_code_runs_a_two_session_plan_under_landlock_as_a_normal_user() {
    run_plan_confined("claude", "landlock", As::Nobody, claude_provider);
}

#[test]
fn claude_code_runs_a_two_session_plan_under_bwrap() {
    run_plan_confined("claude", "bwrap", As::Me, claude_provider);
}

#[test]
fn claude_code_runs_a_two_session_plan_under_bwrap_as_a_normal_user() {
    run_plan_confined("claude", "bwrap", As::Nobody, claude_provider);
}

#[test]
fn codex_runs_a_two_session_plan_under_landlock() {
    run_plan_confined("codex", "landlock", As::Me, codex_provider);
}

#[test]
fn codex_runs_a_two_session_plan_under_landlock_as_a_normal_user() {
    run_plan_confined("codex", "landlock", As::Nobody, codex_provider);
}

#[test]
fn codex_runs_a_two_session_plan_under_bwrap() {
    run_plan_confined("codex", "bwrap", As::Me, codex_provider);
}

#[test]
fn codex_runs_a_two_session_plan_under_bwrap_as_a_normal_user() {
    run_plan_confined("codex", "bwrap", As::Nobody, codex_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_under_landlock() {
    run_plan_confined("opencode", "landlock", As::Me, opencode_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_under_landlock_as_a_normal_user() {
    run_plan_confined("opencode", "landlock", As::Nobody, opencode_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_under_bwrap() {
    run_plan_confined("opencode", "bwrap", As::Me, opencode_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_under_bwrap_as_a_normal_user() {
    run_plan_confined("opencode", "bwrap", As::Nobody, opencode_provider);
}

/// The user may keep Codex's own sandbox (`--sandbox workspace-write`):
/// cryo-agent still reaches cryod's socket from inside it (cryod turns on
/// the sandbox's network access; without it every socket is refused).
#[test]
fn codex_in_its_workspace_write_sandbox() {
    run_plan("codex", "--sandbox workspace-write", As::Nobody, |e, m| codex_provider_outside_tmp(e, m, "off"));
}

/// As root, a session holds no capability, and Codex's own sandbox (a
/// bubblewrap of its own) cannot be made: the start is refused with one
/// line that says what to change (issue 59).
#[test]
fn codex_in_its_own_sandbox_as_root_is_refused_with_one_line() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: not run as root");
        return;
    }
    let Some(path) = cli("codex") else { return };
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("codex", "", &format!("agent = \"{} --sandbox workspace-write\"\n", path.display()));
    let said = env.cryoctl(&["chamber", "start", "codex"]).fails(1).to_string();
    assert!(said.contains("take --sandbox out of `agent`"), "{said}");
    assert!(!c.cryo_log().contains("agent started"), "{}", c.cryo_log());
}

/// Codex's own sandbox inside cryo's bubblewrap one. (Not inside Landlock:
/// Landlock forbids the mounts of Codex's bubblewrap helper, so its tool
/// calls fail there; README says so.)
#[test]
fn codex_in_its_workspace_write_sandbox_under_bwrap() {
    codex_sandboxed_twice("bwrap");
}

fn codex_sandboxed_twice(mode: &str) {
    if let Some(why) = sandbox_missing(mode) {
        eprintln!("SKIPPED codex's workspace-write under sandbox = {mode:?}: {why}");
        return;
    }
    let sent = ("hello from session 1", "thanks, got your note");
    let setup = |e: &Env, m: &ModelServer| codex_provider_outside_tmp(e, m, mode);
    let top = format!("sandbox = \"{mode}\"\n");
    run_script("codex", "--sandbox workspace-write", As::Nobody, setup, two_session_plan(), sent, &top);
}

/// [`codex_provider`], with `CODEX_HOME` outside the temporary folders:
/// where bubblewrap is installed, Codex's sandbox runs its helper through
/// links it makes in `CODEX_HOME`, and it refuses to make them under a
/// temporary folder (the helper is then not found inside the sandbox, and
/// every tool call fails).
fn codex_provider_outside_tmp(env: &Env, model: &ModelServer, mode: &str) -> String {
    let line = codex_provider(env, model);
    let home = env.path("codex-home");
    // One test per mode uses it: made afresh on each run.
    let outside = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("codex-home-workspace-write-{mode}"));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).unwrap();
    for entry in std::fs::read_dir(&home).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), outside.join(entry.file_name())).unwrap();
    }
    // The user the world's commands run as owns it (a normal user's Codex
    // writes there).
    if let Ok(meta) = std::fs::metadata(env.root()) {
        use std::os::unix::fs::MetadataExt;
        let (uid, gid) = (nix::unistd::Uid::from_raw(meta.uid()), nix::unistd::Gid::from_raw(meta.gid()));
        for p in
            std::iter::once(outside.clone()).chain(std::fs::read_dir(&outside).unwrap().flatten().map(|e| e.path()))
        {
            let _ = nix::unistd::chown(&p, Some(uid), Some(gid));
        }
    }
    line.replace(&home.display().to_string(), &outside.display().to_string())
}

#[test]
fn claude_code_runs_a_two_session_plan_through_mcp_tools() {
    run_plan_by_tools("claude", "", As::Me, claude_provider);
}

#[test]
fn claude_code_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("claude", "", As::Nobody, claude_provider);
}

/// A user's own `--allowedTools` stands, and cryo's tools are allowed
/// beside it (a second `--allowedTools mcp__cryo`: the lists add up).
#[test]
fn claude_code_with_its_own_allowed_tools_still_reaches_cryo_tools() {
    run_plan_by_tools("claude", "--allowedTools Read", As::Me, claude_provider);
}

#[test]
fn codex_runs_a_two_session_plan_through_mcp_tools() {
    run_plan_by_tools("codex", "", As::Me, codex_provider);
}

#[test]
fn codex_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("codex", "", As::Nobody, codex_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_through_mcp_tools() {
    run_plan_by_tools("opencode", "", As::Me, opencode_provider);
}

#[test]
fn qwen_code_runs_a_two_session_plan_through_mcp_tools() {
    run_plan_by_tools("qwen", "", As::Me, qwen_provider);
}

#[test]
fn qwen_code_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("qwen", "", As::Nobody, qwen_provider);
}

#[test]
fn opencode_runs_a_two_session_plan_through_mcp_tools_as_a_normal_user() {
    run_plan_by_tools("opencode", "", As::Nobody, opencode_provider);
}

/// `cryoctl doctor` finds each configured CLI, reports its version against
/// the one cryo is tested with, and explains the root pitfall of
/// `--dangerously-skip-permissions`.
#[test]
fn doctor_reports_each_agent_cli() {
    let (Some(claude), Some(codex), Some(opencode)) = (cli("claude"), cli("codex"), cli("opencode")) else { return };
    let (Some(qwen), Some(gemini), Some(pi)) = (cli("qwen"), cli("gemini"), cli("pi")) else { return };
    let env = Env::new();
    // cryod's PATH holds the CLIs: the `kinds` check finds them there.
    let bins = claude.parent().unwrap().display().to_string();
    let path = format!("{bins}:{}:/usr/bin:/bin", cryo_tests::bin_dir().display());
    let d = env.spawn_daemon_with(&[], &[("PATH", &path)]);
    d.wait_ready(&env);
    env.chamber("e", "", &format!("agent = \"{}\"", qwen.display()));
    env.chamber("f", "", &format!("agent = \"{}\"", gemini.display()));
    env.chamber("g", "", &format!("agent = \"{}\"", pi.display()));
    env.chamber("a", "", &format!("agent = \"{}\"", claude.display()));
    env.chamber("b", "", &format!("agent = \"{} --dangerously-skip-permissions\"", claude.display()));
    env.chamber("c", "", &format!("agent = \"{}\"", codex.display()));
    env.chamber("d", "", &format!("agent = \"{}\"", opencode.display()));
    let r = env.cryoctl(&["doctor", "--json"]);
    let checks: Vec<serde_json::Value> = serde_json::from_str(&r.stdout).unwrap();
    let agent = |chamber: &str| {
        checks
            .iter()
            .find(|c| c["check"] == "agent" && c["detail"].as_str().unwrap().starts_with(&format!("{chamber}:")))
            .unwrap_or_else(|| panic!("no agent check for {chamber}: {checks:?}"))
            .clone()
    };
    let kinds = checks.iter().find(|c| c["check"] == "kinds").expect("a kinds check");
    let tested = [
        ("claude", "2.1.330"),
        ("codex", "0.169.0"),
        ("opencode", "1.18.33"),
        ("qwen", "0.24.4"),
        ("gemini", "0.61.0"),
    ];
    for (kind, version) in tested {
        let detail = kinds["detail"].as_str().unwrap();
        let said = detail.split(": ").nth(1).unwrap_or_default().split(", ");
        assert!(said.into_iter().any(|k| k.starts_with(kind) && k.contains(version)), "{kinds}");
    }
    assert_eq!(kinds["level"], "ok", "{kinds}");
    let chambers =
        [("a", "2.1.330"), ("c", "0.169.0"), ("d", "1.18.33"), ("e", "0.24.4"), ("f", "0.61.0"), ("g", "0.73.1")];
    for (chamber, version) in chambers {
        let c = agent(chamber);
        assert_eq!(c["level"], "ok", "{c}");
        let detail = c["detail"].as_str().unwrap();
        assert!(detail.contains(version) && detail.contains("the version cryo is tested with"), "{detail}");
    }
    let b = agent("b");
    if nix::unistd::geteuid().is_root() {
        assert!(b["detail"].as_str().unwrap().contains("IS_SANDBOX=1"), "{b}");
    }
}

/// Issue 21: a provider's limit is not a failure. The CLI meets a 429 (the
/// scripted model refuses its key for a while, with a `retry-after` too long
/// for it to wait): its session ends `limited`, its TODO waits for the reset
/// as the same attempt, a second chamber on the same key is held (no agent,
/// no request), a chamber on another key runs meanwhile, and after the hold
/// both run; nobody is asked to look. With no reset time named (Claude Code
/// with an API key names none), the hold is `limit_hold_seconds`.
fn limit_scenario(bin: &str, provider: impl Fn(&Env, &ModelServer, &str) -> String) {
    limit_scenario_by(bin, Seen::ByTheCli, provider)
}

/// Who sees the provider's 429: the CLI (`gateway = false`: what its own
/// output says), or cryod's gateway (the provider's own headers), for a
/// CLI whose output says nothing of it.
#[derive(Clone, Copy, PartialEq)]
enum Seen {
    ByTheCli,
    ByTheGateway,
}

fn limit_scenario_by(bin: &str, seen: Seen, provider: impl Fn(&Env, &ModelServer, &str) -> String) {
    // `acp:qwen`: the CLI driven over the Agent Client Protocol.
    let (agent_pre, agent_post, bin) = match bin.strip_prefix("acp:") {
        Some(b) => ("acp:", " --acp", b),
        None => ("", "", bin),
    };
    let Some(path) = cli(bin) else { return };
    let done = |name: &str| -> Vec<String> {
        vec![format!("cryo-agent send 'hello from {name}'"), "cryo-agent hibernate --complete --summary done".into()]
    };
    let script = ["lim-a", "lim-b", "other"].iter().fold(Script::new(), |s, n| {
        let steps = done(n);
        let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
        s.on(&format!("- chamber: {n}\n"), &steps)
    });
    let script = script.on(
        "- chamber: lim-mail\n",
        &["cryo-agent receive", "cryo-agent send 'read it'", "cryo-agent hibernate --complete"],
    );
    let model = ModelServer::start(script);
    let env = Env::new();
    // The gateway leaves a wait of a minute or less to the CLI (within
    // its session): the provider's must be longer to end one.
    let hold: u64 = if seen == Seen::ByTheGateway { 61 } else { 20 };
    env.daemon_config(&format!("limit_hold_seconds = {hold}\n"));
    let _d = env.start_daemon();
    let chamber = |name: &str, key: &str| {
        let provider = provider(&env, &model, key);
        // What the CLI itself says of the limit (the gateway reads the
        // provider's own headers: `gateway::a_429_…`).
        let gateway = if seen == Seen::ByTheCli { "gateway = false\n" } else { "" };
        let toml =
            format!("agent = \"{agent_pre}{}{agent_post}\"\n\n[provider]\n{gateway}{provider}\n", path.display());
        let c = env.chamber(name, "", &toml);
        c.seed_history();
        c
    };
    let (a, b, other) = (chamber("lim-a", "sk-limited"), chamber("lim-b", "sk-limited"), chamber("other", "sk-fine"));
    match seen {
        Seen::ByTheCli => model.limit("sk-limited", Duration::from_secs(hold)),
        // The gateway holds the account for the provider's own retry-after.
        Seen::ByTheGateway => model.limit_saying("sk-limited", Duration::from_secs(hold), hold),
    }
    let diag = |c: &Chamber| {
        format!(
            "cryo.log:\n{}\ncryo-agent.log:\n{}\nmodel:\n{}",
            c.cryo_log(),
            c.read("cryo-agent.log"),
            model.transcript()
        )
    };
    a.write_todos(r#"[{"id":1,"text":"work","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    env.cryoctl(&["chamber", "start", "lim-a"]).ok();
    wait_until_within(SESSION_DEADLINE, "a's limited session to end", || a.ended() >= 2);
    let status = env.cryoctl(&["chamber", "status", "lim-a", "--json"]).json();
    let outcome = status[0]["sessions"][0]["outcome"].as_str().unwrap_or_default().to_string();
    let keys: Vec<String> = model
        .seen()
        .iter()
        .flat_map(|s| {
            s.headers.iter().filter(|(k, _)| k == "authorization" || k == "x-api-key").map(|(_, v)| v.clone())
        })
        .collect();
    assert!(outcome.starts_with("limited"), "{status}\n{}\nkeys: {keys:?}", diag(&a));
    assert!(status[0]["attention"].is_null(), "{status}");
    let todos = a.todos();
    let waiting = todos.as_array().unwrap().iter().find(|t| t["done"] == false).expect("the TODO waits again");
    assert_eq!(waiting["text"], "work", "the same attempt waits, not a retry: {todos}");
    assert!(waiting.get("attempt").is_none_or(|n| n == 0), "{todos}");
    assert!(a.cryo_log().contains("the provider's limit was reached"), "{}", a.cryo_log());
    // Claude Code with an API key names no reset: the hold says it is a default.
    if bin == "claude" {
        assert!(a.cryo_log().contains("the provider named no reset"), "{}", a.cryo_log());
    }
    let refused = model.refused().len();
    assert!(refused >= 1);

    // During the hold: b (same key) is due but gets no agent; the other key runs.
    b.write_todos(r#"[{"id":1,"text":"work","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    other.write_todos(r#"[{"id":1,"text":"work","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    env.cryoctl(&["chamber", "start", "lim-b", "--no-wait"]).ok();
    env.cryoctl(&["chamber", "start", "other", "--no-wait"]).ok();
    wait_until_within(SESSION_DEADLINE, "the other key's session", || other.ended() >= 2);
    assert_eq!(b.begun(), 1, "b was held: no agent started\n{}", b.cryo_log());
    assert_eq!(model.refused().len(), refused, "no request was made for the held account");
    // The hold is shown: list, status, doctor, the hub.
    let list = env.cryoctl(&["chamber", "list"]).ok().to_string();
    assert!(list.contains(": limited until ") && list.contains("(waiting: lim-b)"), "{list}");
    let shown = env.cryoctl(&["chamber", "status", "lim-b"]).ok().to_string();
    assert!(shown.contains("limit     "), "status shows the hold: {shown}");
    assert!(shown.contains("state     held (desired: started)"), "the held chamber says so: {shown}");
    assert!(shown.contains("held      by account "), "{shown}");
    // Issue 62, case 7: its wake waits for the reset, not for a slot; and
    // the other key's chamber lists no hold of another account.
    assert!(!shown.contains("for a session slot"), "held, not waiting for a slot: {shown}");
    let others = env.cryoctl(&["chamber", "status", "other"]).ok().to_string();
    assert!(!others.contains("limit     "), "another account's hold is not the other's: {others}");
    let limits = crate::hub::Hub::of(&env).get("/api/limits").json();
    if bin == "claude" {
        // No reset named: status says the hold is cryod's default.
        assert!(shown.contains("cryod's default hold (`limit_hold_seconds`"), "{shown}");
        assert_eq!(limits[0]["default_hold"], true, "{limits}");
    }
    let doctor = env.cryoctl(&["doctor", "--json"]).json();
    assert!(doctor.as_array().unwrap().iter().any(|c| c["check"] == "provider" && c["level"] == "warn"), "{doctor}");
    assert_eq!(limits[0]["waiting"], 1, "{limits}");
    assert_eq!(limits[0]["chambers"], serde_json::json!(["lim-b"]), "the banner names who waits: {limits}");
    if bin == "claude"
        && let Some(dir) = crate::browser::driver()
    {
        let seen = crate::browser::run_driver(&dir, "holds.mjs", &env, &[]);
        crate::browser::assert_everywhere_clean(&seen);
        let text = seen["holds"][0]["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("held by ") && text.ends_with(", 1 chamber: lim-b."),
            "the banner names the held chamber: {seen}"
        );
        // Issue 63, case 3: its page says held, by whom and until when, in
        // the hold's colour (not a failure's), the zone on hover.
        let page = &seen["page"];
        assert!(page["badge"].as_str().unwrap().starts_with("held"), "{seen}");
        assert!(
            page["held"].as_str().unwrap().starts_with("by ") && page["held"].as_str().unwrap().contains(" until "),
            "{seen}"
        );
        assert_ne!(page["colour"], page["failure_colour"], "{seen}");
        assert!(!page["zone_on_hover"].as_str().unwrap().is_empty(), "{seen}");
        assert_ne!(page["next_wake"], "-", "{seen}");
    }
    // Mail to a chamber of the held account: its sender is told when it
    // will be read.
    let mail = chamber("lim-mail", "sk-limited");
    env.cryoctl(&["chamber", "start", "lim-mail", "--no-wait"]).ok();
    mail.write_inbox(1, "are you there?");
    wait_until_within(SESSION_DEADLINE, "the sender to be told", || {
        mail.outbox().iter().any(|m| m.contains("your message will be read after"))
    });
    assert_eq!(mail.begun(), 1, "no agent for the held account\n{}", mail.cryo_log());
    // An operator's message says so at once.
    let sent = env.cryoctl(&["chamber", "send", "lim-mail", "still there?", "--json"]).json();
    assert!(
        sent["waits"].as_str().is_some_and(|w| w.contains("at its provider's limit: its agent reads it after")),
        "{sent}"
    );
    assert!(other.outbox().iter().any(|m| m.contains("hello from other")), "{}", diag(&other));

    // After the hold: both run, and complete.
    let ran = |c: &Chamber| c.outbox().iter().any(|m| m.contains(&format!("hello from {}", c.name)));
    wait_until_telling(SESSION_DEADLINE, "a's deferred work", || ran(&a), || diag(&a));
    wait_until_telling(SESSION_DEADLINE, "b's held work", || ran(&b), || diag(&b));
    wait_until_within(SESSION_DEADLINE, "the held mail's answer", || {
        mail.outbox().iter().any(|m| m.contains("read it"))
    });
    // Nobody is asked to look (once the answering session has hibernated:
    // a CLI that stumbled at its start meanwhile is cleared by it).
    for c in [&a, &b, &mail] {
        let attention = || env.cryoctl(&["chamber", "status", &c.name, "--json"]).json()[0]["attention"].clone();
        wait_until_within(SESSION_DEADLINE, "no attention", || attention().is_null());
    }
}

#[test]
fn claude_code_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario("claude", |_, model, key| {
        format!(
            "env = {{ ANTHROPIC_BASE_URL = \"{}\", ANTHROPIC_API_KEY = \"{key}\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\" }}",
            model.url()
        )
    });
}

#[test]
fn codex_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario("codex", |env, model, key| codex_provider(env, model).replace("sk-cryo-test", key));
}

/// Qwen Code says nothing of a 429 on its output (it waits out
/// `retry-after`, noting it only in its debug log): cryod's gateway sees it.
#[test]
fn qwen_code_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario_by("qwen", Seen::ByTheGateway, |env, model, key| {
        qwen_provider(env, model).replace("sk-cryo-test", key)
    });
}

#[test]
fn gemini_cli_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario("gemini", |env, model, key| gemini_provider(env, model).replace("sk-cryo-test", key));
}

/// An ACP agent waits out a 429 without a word; a known CLI behind `acp:`
/// goes through the gateway, which sees it.
#[test]
fn an_acp_agent_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario_by("acp:qwen", Seen::ByTheGateway, |env, model, key| {
        qwen_provider(env, model).replace("sk-cryo-test", key)
    });
}

/// Pi waits out a 429's `retry-after` without a word (its OpenAI client
/// honours it, uncapped): cryod's gateway sees it.
#[test]
fn pi_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario_by("pi", Seen::ByTheGateway, |env, model, key| {
        let dir = env.path(&format!("pi-agent-{key}"));
        if !dir.exists() {
            let shared = env.path("pi-agent");
            let line = pi_provider(env, model);
            std::fs::rename(&shared, &dir).unwrap();
            return line
                .replace(&shared.display().to_string(), &dir.display().to_string())
                .replace("sk-cryo-test", key);
        }
        format!("env = {{ PI_CODING_AGENT_DIR = \"{}\", LOCAL_API_KEY = \"{key}\" }}", dir.display())
    });
}

/// OpenCode names its limit only in its logs (`--print-logs`, read on
/// stderr): each key has its own config file, so two keys are two accounts.
#[test]
fn opencode_at_its_providers_limit_holds_the_account_not_the_others() {
    limit_scenario("opencode", |env, model, key| {
        let config = env.path(&format!("opencode-{key}.json"));
        if !config.exists() {
            assert!(opencode_provider(env, model).contains("OPENCODE_CONFIG"));
            // Not left as `opencode.json` above the chambers: OpenCode merges
            // every one it finds walking up from its folder.
            let shared = env.path("opencode.json");
            let body = std::fs::read_to_string(&shared).unwrap().replace("sk-cryo-test", key);
            std::fs::remove_file(shared).unwrap();
            std::fs::write(&config, body).unwrap();
        }
        format!("env = {{ OPENCODE_CONFIG = \"{}\" }}", config.display())
    });
}

/// Issue 21: budgets, with OpenCode through the gateway (each response
/// reports its tokens; `[prices.m1]` makes each cost $0.02, the title
/// OpenCode asks for at a session's start too). A daily budget of $0.12:
/// the first session ($0.10, five responses) earns the 80% notice, the second pauses
/// the chamber with attention, and a resume releases it. A chamber with
/// `max_session_usd = 0.03` is refused its third request (the title and one step cost $0.04), as over budget,
/// its TODO waiting for the next day.
#[test]
fn opencode_budgets_notice_pause_and_stop_an_expensive_session() {
    let Some(path) = cli("opencode") else { return };
    let script = Script::new()
        .on(
            "- chamber: thrifty\n- session: 1\n",
            &["cryo-agent send 'one'", "cryo-agent todo add again --at +2s", "cryo-agent hibernate"],
        )
        .on("- chamber: thrifty\n- session: 2\n", &["cryo-agent send 'two'", "cryo-agent hibernate --complete"])
        .on(
            "- chamber: capped\n",
            &["cryo-agent send 'a'", "cryo-agent send 'b'", "cryo-agent send 'c'", "cryo-agent hibernate --complete"],
        );
    let model = ModelServer::start(script);
    let env = Env::new();
    env.daemon_config("[prices.m1]\ninput = 1000.0\noutput = 2000.0\n");
    let provider = opencode_provider(&env, &model);
    // Kept out of the chambers' parent folder (OpenCode merges it).
    let config = env.path("oc/opencode.json");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::rename(env.path("opencode.json"), &config).unwrap();
    let provider = provider.replace(&env.path("opencode.json").display().to_string(), &config.display().to_string());
    let _d = env.start_daemon();
    let toml =
        |budget: &str| format!("agent = \"{}\"\n\n[provider]\n{provider}\n\n[budget]\n{budget}\n", path.display());
    let thrifty = env.chamber("thrifty", "", &toml("daily_usd = 0.12"));
    let capped = env.chamber("capped", "", &toml("max_session_usd = 0.03"));
    let status = |name: &str| env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone();

    env.cryoctl(&["chamber", "start", "thrifty"]).ok();
    let diag = |c: &Chamber| {
        format!(
            "cryo.log:\n{}\ncryo-agent.log:\n{}\noutbox: {:?}\nmodel:\n{}\nstatus: {}",
            c.cryo_log(),
            c.read("cryo-agent.log"),
            c.outbox(),
            model.transcript(),
            status(&c.name)
        )
    };
    let noticed = || thrifty.outbox().iter().any(|m| m.contains("of this chamber's daily_usd ($0.12) is used"));
    wait_until_within(SESSION_DEADLINE, "the pause", || status("thrifty")["state"] == "paused");
    // The notice came at the first session's end, before the second ran.
    assert!(noticed(), "{}", diag(&thrifty));
    let s = status("thrifty");
    assert!(s["attention"].as_str().unwrap().starts_with("budget reached (this chamber's daily_usd = $0.12"), "{s}");
    assert_eq!(thrifty.ended(), 2, "{}", thrifty.cryo_log());
    env.cryoctl(&["chamber", "resume", "thrifty"]).ok();
    let s = status("thrifty");
    assert!(s["state"] != "paused" && s["attention"].is_null(), "a resume releases it: {s}");

    capped.seed_history();
    capped.write_todos(r#"[{"id":1,"text":"work","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    env.cryoctl(&["chamber", "start", "capped"]).ok();
    wait_until_within(SESSION_DEADLINE, "the capped session to end", || capped.ended() >= 2);
    let s = status("capped");
    let outcome = s["sessions"][0]["outcome"].as_str().unwrap_or_default().to_string();
    assert!(outcome.starts_with("over budget"), "{s}\n{}", capped.cryo_log());
    assert!(
        !capped.cryo_log().contains("hibernate --complete accepted"),
        "stopped before its end\n{}",
        capped.cryo_log()
    );
    let todos = capped.todos();
    let waiting = todos.as_array().unwrap().iter().find(|t| t["done"] == false).expect("the TODO waits");
    let tomorrow = cryo_tests::date_utc("tomorrow")[..10].to_string();
    assert!(waiting["at"].as_str().unwrap().starts_with(&tomorrow), "it waits for the next day: {todos}");
    assert!(s["attention"].is_null(), "{s}");
}

/// A Claude Code chamber whose `max_session_usd` ($0.015) is below what one
/// response of the scripted model costs ($0.02 at `[prices]`), through the
/// gateway or not, run until its capped session ended: that session's
/// outcome must be `over budget`, its work unfinished.
pub(crate) struct Capped {
    // The daemon stops before its folders go.
    _daemon: cryo_tests::Daemon,
    _env: Env,
    pub model: ModelServer,
    pub session: serde_json::Value,
}

pub(crate) fn capped_claude(gateway: bool) -> Option<Capped> {
    let path = cli("claude")?;
    let steps =
        ["cryo-agent send 'a'", "cryo-agent send 'b'", "cryo-agent send 'c'", "cryo-agent hibernate --complete"];
    let model = ModelServer::start(Script::new().on("- chamber: capped\n", &steps));
    let env = Env::new();
    env.daemon_config("[prices.\"claude-opus-5-5\"]\ninput = 1000.0\noutput = 2000.0\n");
    let daemon = env.start_daemon();
    let provider = claude_provider(&env, &model);
    let toml = format!(
        "agent = \"{}\"\n\n[provider]\ngateway = {gateway}\n{provider}\n\n[budget]\nmax_session_usd = 0.015\n",
        path.display()
    );
    let c = env.chamber("capped", "", &toml);
    c.seed_history();
    c.write_todos(r#"[{"id":1,"text":"work","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    env.cryoctl(&["chamber", "start", "capped"]).ok();
    wait_until_within(SESSION_DEADLINE, "the capped session to end", || c.ended() >= 2);
    let s = env.cryoctl(&["chamber", "status", "capped", "--json"]).json();
    let session = s[0]["sessions"][0].clone();
    let outcome = session["outcome"].as_str().unwrap_or_default().to_string();
    assert!(outcome.starts_with("over budget"), "{s}\n{}\n{}", c.cryo_log(), c.read("cryo-agent.log"));
    assert!(!c.cryo_log().contains("hibernate --complete accepted"), "{}", c.cryo_log());
    Some(Capped { _daemon: daemon, _env: env, model, session })
}

/// Without the gateway, Claude Code says a session's cost only at its end;
/// while it runs, its messages' usage, priced by `[prices."MODEL"]`, stops a
/// session that passes `max_session_usd`.
#[test]
fn claude_code_is_stopped_over_max_session_usd_while_it_runs() {
    capped_claude(false);
}

/// What one session of a continuity run sent the model.
#[derive(Debug)]
struct Turned {
    session: u64,
    resumed_from: Option<u64>,
    /// Requests answered in this session, and the largest one's size.
    requests: usize,
    max_bytes: usize,
    /// Earlier sessions' markers its requests carried.
    earlier: Vec<String>,
}

/// Issue 22: `sessions` sessions of `bin`, each woken by the TODO the one
/// before it left, with `session = "resume"` (capped at `max_sessions`) or
/// `"fresh"`; returns what each sent the model, checked against the ledger.
fn continuity_run(
    bin: &str,
    resume: bool,
    sessions: u64,
    max_sessions: u32,
    setup: impl FnOnce(&Env, &ModelServer) -> String,
) -> Option<Vec<Turned>> {
    let (acp, bin) = match bin.strip_prefix("acp:") {
        Some(b) => ("acp:", b),
        None => ("", bin),
    };
    let name = if acp.is_empty() { bin.to_string() } else { format!("acp-{bin}") };
    let acp_flag = if acp.is_empty() { "" } else { " --acp" };
    let path = cli(bin)?;
    let script = (1..=sessions).fold(Script::new(), |s, n| {
        let send = format!("cryo-agent send 'note {n}'");
        let last = n == sessions;
        let steps: Vec<String> = if last {
            vec![send, "cryo-agent hibernate --complete --summary done".into()]
        } else {
            vec![send, "cryo-agent todo add 'go on' --at +2s".into(), format!("cryo-agent hibernate --summary s{n}")]
        };
        let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
        s.on(&format!("- session: {n}\n"), &steps)
    });
    let model = ModelServer::start(script);
    let env = Env::new();
    let provider = setup(&env, &model);
    let mode = if resume { "resume" } else { "fresh" };
    let toml = format!(
        "agent = \"{acp}{}{acp_flag}\"\nsession = \"{mode}\"\nresume_max_sessions = {max_sessions}\n\n[provider]\n{provider}\n",
        path.display()
    );
    let _d = env.start_daemon();
    let c = env.chamber(&name, "", &toml);
    env.cryoctl(&["chamber", "start", &name]).ok();
    let diag = |c: &Chamber| format!("cryo.log:\n{}\nmodel requests:\n{}", c.cryo_log(), model.transcript());
    let deadline = SESSION_DEADLINE * sessions as u32;
    wait_until_telling(deadline, "every session to end", || c.ended() >= sessions as usize, || diag(&c));
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c));
    let status = env.cryoctl(&["chamber", "status", &name, "--json"]).json();
    let rows = status[0]["sessions"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), sessions as usize, "{status}");
    let seen = model.seen();
    let turned = (1..=sessions)
        .map(|n| {
            let marker = format!("- session: {n}\n");
            let mine: Vec<_> =
                seen.iter().filter(|s| s.answered.is_some() && s.turn.as_deref() == Some(&marker)).collect();
            assert!(!mine.is_empty(), "session {n} made no scripted request\n{}", diag(&c));
            let row = rows.iter().find(|r| r["number"] == n).expect("a ledger row");
            let mut earlier: Vec<String> = mine.iter().flat_map(|s| s.earlier.clone()).collect();
            earlier.sort();
            earlier.dedup();
            Turned {
                session: n,
                resumed_from: row["resumed_from"].as_u64(),
                requests: mine.len(),
                max_bytes: mine.iter().map(|s| s.bytes).max().unwrap_or(0),
                earlier,
            }
        })
        .collect::<Vec<_>>();
    // The ledger, the CLI's requests and the prompt agree: a session
    // resumed from N carries session N's turns (and so every earlier one of
    // its conversation); a fresh one carries none.
    for t in &turned {
        match t.resumed_from {
            Some(from) => {
                assert_eq!(from, t.session - 1, "{turned:?}");
                let marker = format!("- session: {from}\n");
                assert!(t.earlier.contains(&marker), "session {} did not carry session {from}: {turned:?}", t.session);
            }
            None => assert!(t.earlier.is_empty(), "a fresh session carried earlier turns: {turned:?}"),
        }
    }
    // Past a cap, the agent was told why its conversation is new (the
    // last session's prompt is the one kept).
    if resume && turned.last().is_some_and(|t| t.resumed_from.is_none()) && sessions > 1 {
        let prompt = c.read(".cryo/prompt.md");
        assert!(prompt.contains("FRESH CONVERSATION: the last conversation spans"), "{prompt}");
    }
    Some(turned)
}

/// Claude Code (`--resume ID`): five sessions resumed, against five fresh;
/// prints the request sizes (the closing note's figure).
#[test]
fn claude_code_continues_its_conversation_across_wakes() {
    let Some(resumed) = continuity_run("claude", true, 5, 5, claude_provider) else { return };
    let resumed_from: Vec<_> = resumed.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), Some(2), Some(3), Some(4)]);
    let fresh = continuity_run("claude", false, 5, 5, claude_provider).expect("the CLI is there");
    assert!(fresh.iter().all(|t| t.resumed_from.is_none()));
    eprintln!("claude: largest request per session (bytes), resumed vs fresh:");
    for (r, f) in resumed.iter().zip(&fresh) {
        eprintln!(
            "  session {}: resumed {:>7} ({} requests, carries {} earlier)  fresh {:>7} ({} requests)",
            r.session,
            r.max_bytes,
            r.requests,
            r.earlier.len(),
            f.max_bytes,
            f.requests
        );
    }
}

/// Codex (`codex exec resume ID`): past `resume_max_sessions` the next
/// session starts afresh and is told why.
#[test]
fn codex_continues_its_conversation_within_the_cap() {
    let Some(t) = continuity_run("codex", true, 3, 2, codex_provider) else { return };
    let resumed_from: Vec<_> = t.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), None], "{t:?}");
}

/// OpenCode (`run --session ID`).
#[test]
fn opencode_continues_its_conversation_within_the_cap() {
    let Some(t) = continuity_run("opencode", true, 3, 2, opencode_provider) else { return };
    let resumed_from: Vec<_> = t.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), None], "{t:?}");
}

/// Qwen Code (`--resume ID`).
#[test]
fn qwen_code_continues_its_conversation_within_the_cap() {
    let Some(t) = continuity_run("qwen", true, 3, 2, qwen_provider) else { return };
    let resumed_from: Vec<_> = t.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), None], "{t:?}");
}

/// Gemini CLI (`--resume ID`).
#[test]
fn gemini_cli_continues_its_conversation_within_the_cap() {
    let Some(t) = continuity_run("gemini", true, 3, 2, gemini_provider) else { return };
    let resumed_from: Vec<_> = t.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), None], "{t:?}");
}

/// Pi (`--session ID`).
#[test]
fn pi_continues_its_conversation_within_the_cap() {
    let Some(t) = continuity_run("pi", true, 3, 2, pi_provider) else { return };
    let resumed_from: Vec<_> = t.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), None], "{t:?}");
}

/// An ACP agent (`session/load` of the session before, where the agent can
/// load sessions: Qwen Code can).
#[test]
fn an_acp_agent_continues_its_conversation_within_the_cap() {
    let Some(t) = continuity_run("acp:qwen", true, 3, 2, qwen_provider) else { return };
    let resumed_from: Vec<_> = t.iter().map(|t| t.resumed_from).collect();
    assert_eq!(resumed_from, [None, Some(1), None], "{t:?}");
}

/// Issue 44's closing figure: every known kind, and an ACP agent, runs a
/// session in one cryod, each on a model of its own where its setup names
/// one; `cryoctl usage --by model` sums them.
#[test]
fn every_kind_runs_in_one_daemon_and_usage_sums_them_by_model() {
    type Setup = fn(&Env, &ModelServer) -> String;
    let kinds: [(&str, &str, Setup); 7] = [
        ("claude", "", claude_provider),
        ("codex", "", codex_provider),
        ("opencode", "", opencode_provider),
        ("qwen", "", |e, m| qwen_provider(e, m).replace("\"m1\"", "\"qwen-coder\"")),
        ("gemini", "", |e, m| gemini_provider(e, m).replace("\"m1\"", "\"gemini-flash\"")),
        ("pi", "", |e, m| {
            let line = pi_provider(e, m);
            let file = e.path("pi-agent/models.json");
            let text = std::fs::read_to_string(&file).unwrap().replace("\"m1\"", "\"pi-m\"");
            std::fs::write(file, text).unwrap();
            line
        }),
        ("acp:qwen", "--acp", |e, m| qwen_provider(e, m).replace("\"m1\"", "\"qwen-acp\"")),
    ];
    let mut paths = Vec::new();
    for (bin, _, _) in &kinds {
        let Some(p) = cli(bin.trim_start_matches("acp:")) else { return };
        paths.push(p);
    }
    let name = |bin: &str| bin.replace(':', "-");
    let script = kinds.iter().fold(Script::new(), |s, (bin, _, _)| {
        let n = name(bin);
        let send = format!("cryo-agent send 'hello from {n}'");
        s.on(&format!("- chamber: {n}\n"), &[send.as_str(), "cryo-agent hibernate --complete --summary done"])
    });
    let model = ModelServer::start(script);
    let env = Env::new();
    let prices: String = ["m1", "qwen-coder", "gemini-flash", "pi-m", "qwen-acp"]
        .iter()
        .map(|m| format!("[prices.\"{m}\"]\ninput = 1000.0\noutput = 2000.0\n"))
        .collect();
    env.daemon_config(&prices);
    let _d = env.start_daemon();
    let mut chambers = Vec::new();
    for ((bin, args, setup), path) in kinds.iter().zip(&paths) {
        let acp = if bin.starts_with("acp:") { "acp:" } else { "" };
        let toml = format!("agent = \"{acp}{} {args}\"\n\n[provider]\n{}\n", path.display(), setup(&env, &model));
        chambers.push(env.chamber(&name(bin), "", &toml));
    }
    for c in &chambers {
        env.cryoctl(&["chamber", "start", &c.name, "--no-wait"]).ok();
    }
    for c in &chambers {
        let diag = || format!("cryo.log:\n{}\ncryo-agent.log:\n{}", c.cryo_log(), c.read("cryo-agent.log"));
        wait_until_telling(SESSION_DEADLINE * 2, "each kind's session", || c.ended() >= 1, diag);
        assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag());
    }
    let by_chamber = env.cryoctl(&["usage", "--json"]).json();
    for c in &chambers {
        let row = by_chamber["rows"].as_array().unwrap().iter().find(|r| r["key"] == c.name.as_str());
        let row = row.unwrap_or_else(|| panic!("{} has no usage: {by_chamber}", c.name));
        assert_eq!(row["sessions"], 1, "{row}");
        assert!(row["input_tokens"].as_u64() > Some(0) && row["output_tokens"].as_u64() > Some(0), "{row}");
    }
    let by_model = env.cryoctl(&["usage", "--by", "model", "--json"]).json();
    let models: Vec<&str> = by_model["rows"].as_array().unwrap().iter().filter_map(|r| r["key"].as_str()).collect();
    for m in ["qwen-coder", "gemini-flash", "pi-m", "qwen-acp"] {
        assert!(models.contains(&m), "{m} is not among {models:?}");
    }
    eprintln!("cryoctl usage --by model:\n{}", env.cryoctl(&["usage", "--by", "model"]).ok());
    eprintln!("cryoctl usage --by provider:\n{}", env.cryoctl(&["usage", "--by", "provider"]).ok());
}
