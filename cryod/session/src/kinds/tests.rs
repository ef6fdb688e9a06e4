//! Each kind's command line, as cryod spawns it.

use super::*;

#[test]
fn words() {
    assert_eq!(split_words("sh ./agent.sh").unwrap(), ["sh", "./agent.sh"]);
    assert_eq!(split_words(r#"my\ agent "a b" 'c "d"' e\"f"#).unwrap(), ["my agent", "a b", "c \"d\"", "e\"f"]);
    assert_eq!(split_words("x ''").unwrap(), ["x", ""]);
    assert!(split_words("'open").is_err());
    assert!(split_words("   ").is_err());
}

/// A command line without MCP (`mcp = false`), in chamber `/c`.
fn line(agent: &str, as_root: bool) -> crate::Result<Launch> {
    command_line(agent, Path::new("/c"), &turn("P"), as_root, None, &BTreeMap::new())
}

fn turn(prompt: &str) -> Turn<'_> {
    Turn { prompt, prompt_file: ".cryo/prompt.md", resume: None, approvals: None, workdir: None }
}

/// Each kind continues a conversation with its own flag.
#[test]
fn resuming_a_conversation() {
    let t = Turn { resume: Some("ID"), ..turn("P") };
    let line = |agent| command_line(agent, Path::new("/c"), &t, false, None, &BTreeMap::new()).unwrap().args;
    assert_eq!(line("claude")[6..], ["--resume", "ID", "--"]);
    assert_eq!(line("codex -m x")[line("codex -m x").len() - 5..], ["-m", "x", "resume", "ID", "-"]);
    assert_eq!(line("opencode")[line("opencode").len() - 2..], ["--session", "ID"]);
    assert_eq!(line("qwen")[line("qwen").len() - 2..], ["--resume", "ID"]);
    assert_eq!(line("gemini")[line("gemini").len() - 2..], ["--resume", "ID"]);
    assert_eq!(line("pi")[line("pi").len() - 2..], ["--session", "ID"]);
    assert_eq!(line("sh a.sh"), ["a.sh", "P"], "an unknown command has no conversation to resume");
}

#[test]
fn known_kinds() {
    for as_root in [false, true] {
        let l = line("claude", as_root).unwrap();
        assert_eq!(l.args, ["-p", "--output-format", "stream-json", "--verbose", "--allowedTools", CLAUDE_TOOLS, "--"]);
        assert!(!l.env.contains_key("IS_SANDBOX"));
    }
    let l = line("claude --model opus", true).unwrap();
    assert_eq!(l.args[4..], ["--model", "opus", "--allowedTools", CLAUDE_TOOLS, "--"]);
    assert_eq!(l.model.as_deref(), Some("opus"));
    // The user's explicit choices stand.
    let l = line("claude --dangerously-skip-permissions", true).unwrap();
    assert_eq!(l.args[4..], ["--dangerously-skip-permissions", "--"]);
    assert_eq!(l.env.get("IS_SANDBOX").map(String::as_str), Some("1"));
    let l = line("claude --dangerously-skip-permissions", false).unwrap();
    assert!(!l.env.contains_key("IS_SANDBOX"));
    let l = line("claude --permission-mode acceptEdits", false).unwrap();
    assert_eq!(l.args[4..], ["--permission-mode", "acceptEdits", "--"]);

    let l = line("/usr/bin/codex", false).unwrap();
    assert_eq!(l.program, "/usr/bin/codex");
    assert_eq!(l.args[..5], ["exec", "--json", "-C", "/c", "--skip-git-repo-check"]);
    assert!(!l.args.iter().any(|a| a.contains("mcp")));
    assert!(l.args.contains(&"--dangerously-bypass-approvals-and-sandbox".to_string()));
    assert!(l.args.contains(&"shell_environment_policy.inherit=all".to_string()));
    assert!(l.args.contains(&"allow_login_shell=false".to_string()));
    assert_eq!(l.args.last().unwrap(), "-", "the prompt on stdin");
    let l = line("codex --sandbox workspace-write", false).unwrap();
    assert!(!l.args.contains(&"--dangerously-bypass-approvals-and-sandbox".to_string()));
    assert!(l.args.contains(&"sandbox_workspace_write.network_access=true".to_string()));
    assert_eq!(l.args[l.args.len() - 3..], ["--sandbox", "workspace-write", "-"]);

    let l = line("opencode", false).unwrap();
    assert_eq!(l.args, ["run", "--format", "json", "--print-logs", "--log-level", "WARN", "--dir", "/c", "--auto"]);
    assert!(!l.env.contains_key("OPENCODE_CONFIG_CONTENT") && l.files.is_empty());
    let l = line("sh agent.sh --fast", false).unwrap();
    assert_eq!(
        (l.program.as_str(), l.args.as_slice()),
        ("sh", &["agent.sh".to_string(), "--fast".into(), "P".into()][..])
    );
    assert_eq!((l.events, l.read_logs), (None, false), "an unknown command's output is kept as it is");
}

/// Every kind's command line with and without cryo's MCP server, as
/// cryod spawns it (`mcp = false` must stay the line of before).
#[test]
fn command_lines_with_and_without_mcp() {
    let m = Mcp { program: "/opt/cryo/cryo-agent".into() };
    let mut out = String::new();
    for agent in [
        "claude",
        "claude --allowedTools Bash",
        "claude --dangerously-skip-permissions",
        "codex",
        "codex --sandbox workspace-write",
        "opencode",
        "qwen",
        "qwen --approval-mode auto-edit",
        "gemini",
        "pi",
        "acp:qwen --acp",
        "sh agent.sh",
    ] {
        for (name, mcp) in [("mcp = false", None), ("mcp = true", Some(&m))] {
            let l = command_line(agent, Path::new("/c"), &turn("P"), false, mcp, &BTreeMap::new()).unwrap();
            out.push_str(&format!("# {agent} ({name})\n{} {}\n", l.program, l.args.join(" ")));
            for (k, v) in &l.env {
                out.push_str(&format!("  env {k}={v}\n"));
            }
            for (path, text) in &l.files {
                out.push_str(&format!("  file {path}: {}\n", text.replace('\n', " ")));
            }
            if let Some((path, keys)) = &l.settings {
                out.push_str(&format!("  settings {path}: {keys}\n"));
            }
        }
    }
    insta::assert_snapshot!(out);
}

/// OpenCode's inline config merges the user's own, and keeps a single
/// permission answer the user gave for every tool.
#[test]
fn opencode_config_merges_the_users() {
    let m = Mcp { program: "cryo-agent".into() };
    let mut env = BTreeMap::new();
    env.insert(
        "OPENCODE_CONFIG_CONTENT".to_string(),
        r#"{"model":"local/m1","mcp":{"other":{"type":"local","command":["x"]}},"permission":{"bash":"ask"}}"#
            .to_string(),
    );
    let v: serde_json::Value = serde_json::from_str(&opencode_config(&m, &env, None).unwrap()).unwrap();
    assert_eq!(v["model"], "local/m1");
    assert_eq!(v["mcp"]["other"]["command"][0], "x");
    assert_eq!(v["mcp"]["cryo"]["command"], serde_json::json!(["cryo-agent", "mcp"]));
    assert_eq!(v["permission"], serde_json::json!({ "bash": "ask", "cryo_*": "allow" }));
    env.insert("OPENCODE_CONFIG_CONTENT".to_string(), r#"{"permission":"allow"}"#.to_string());
    let v: serde_json::Value = serde_json::from_str(&opencode_config(&m, &env, None).unwrap()).unwrap();
    assert_eq!(v["permission"], "allow");
    env.insert("OPENCODE_CONFIG_CONTENT".to_string(), "[1]".to_string());
    assert!(opencode_config(&m, &env, None).unwrap_err().to_string().contains("not a JSON object"));
}

/// Issue 59, case 9: a known kind's prompt is never an argument, which
/// any process of the machine reads in `/proc/PID/cmdline`: it goes on
/// standard input, as it is (one that begins with `-` needs no mending);
/// an ACP agent's to cryod's client in its environment.
#[test]
fn a_known_kinds_prompt_goes_on_stdin_never_in_its_arguments() {
    for agent in ["claude", "codex", "opencode", "qwen", "gemini", "pi"] {
        let l = command_line(agent, Path::new("/c"), &turn("- session: 1"), false, None, &BTreeMap::new()).unwrap();
        assert!(!l.args.iter().any(|a| a.contains("session: 1")), "{agent}: {:?}", l.args);
        assert_eq!(l.stdin.as_deref(), Some("- session: 1"), "{agent}");
    }
    let l = command_line("acp:x", Path::new("/c"), &turn("- session: 1"), false, None, &BTreeMap::new()).unwrap();
    assert!(!l.args.iter().chain(l.bridge.iter().flatten()).any(|a| a.contains("session: 1")));
    assert_eq!(l.env.get(crate::acp::PROMPT_VAR).map(String::as_str), Some("- session: 1"));
    assert_eq!(l.stdin, None, "an ACP agent's stdin is its client's");
    // A command of one's own keeps it as its last argument, and gets it on stdin too.
    let l = command_line("sh a.sh", Path::new("/c"), &turn("P"), false, None, &BTreeMap::new()).unwrap();
    assert_eq!((l.args.last().map(String::as_str), l.stdin.as_deref()), (Some("P"), Some("P")));
    let l = command_line("qwen", Path::new("/c"), &turn("- session: 1"), false, None, &BTreeMap::new()).unwrap();
    assert_eq!(l.events, Some(Kind::Qwen));
    assert_eq!(l.env.get("CRYO_AGENT_KIND").map(String::as_str), Some("qwen"));
}

#[test]
fn long_prompts_go_through_a_file() {
    let long = "x".repeat(MAX_PROMPT_ARG + 1);
    let l = command_line("sh a.sh", Path::new("/c"), &turn(&long), false, None, &BTreeMap::new()).unwrap();
    assert!(l.args.last().unwrap().contains(".cryo/prompt.md"));
    assert!(l.args.last().unwrap().len() < 1000);
}

/// Under `[approvals]` each kind asks cryod before its tool calls, through
/// `cryo-agent`; one without cryo's tools, or with Claude Code's prompts
/// turned off by the agent line, is refused.
#[test]
fn each_kind_asks_under_approvals() {
    let policy = cryo_core::approvals::Policy {
        deny: vec![cryo_core::approvals::Rule::parse("WebFetch").unwrap()],
        wait: std::time::Duration::from_secs(120),
        ..Default::default()
    };
    let m = Mcp { program: "/bin/cryo agent".into() };
    let t = Turn { approvals: Some(&policy), ..turn("P") };
    let line = |agent: &str, mcp: Option<&Mcp>| command_line(agent, Path::new("/c"), &t, false, mcp, &BTreeMap::new());
    let claude = line("claude", Some(&m)).unwrap().args.join(" ");
    assert!(claude.ends_with("--allowedTools mcp__cryo --permission-mode default --permission-prompt-tool mcp__cryo__approval --disallowedTools WebFetch --"), "{claude}");
    let codex = line("codex", Some(&m)).unwrap().args.join(" ");
    assert!(codex.contains(r#"hooks.PreToolUse=[{matcher=".*",hooks=[{type="command",command="'/bin/cryo agent' approval --hook",timeout=180}]}]"#), "{codex}");
    assert!(codex.contains("--dangerously-bypass-hook-trust"), "{codex}");
    let oc = line("opencode", Some(&m)).unwrap();
    assert!(
        oc.env["OPENCODE_CONFIG_CONTENT"].contains(r#""plugin":["file:///c/.cryo/opencode-cryo.mjs"]"#),
        "{:?}",
        oc.env
    );
    assert_eq!(oc.env["CRYO_AGENT_BIN"], "/bin/cryo agent");
    assert!(oc.files.iter().any(|(p, text)| p == OPENCODE_PLUGIN && text.contains("tool.execute.before")));
    let qwen = line("qwen", Some(&m)).unwrap();
    assert_eq!(qwen.env["QWEN_CODE_SYSTEM_DEFAULTS_PATH"], "/c/.cryo/qwen-defaults.json");
    let defaults = &qwen.files.iter().find(|(p, _)| p == QWEN_DEFAULTS).unwrap().1;
    assert!(
        defaults.contains("approval --hook --wait-at-most 50") && defaults.contains("\"timeout\": 55"),
        "{defaults}"
    );
    let gemini = line("gemini", Some(&m)).unwrap();
    let hooks = &gemini.settings.unwrap().1["hooks"]["BeforeTool"][0]["hooks"][0];
    assert_eq!(
        (hooks["command"].as_str(), hooks["timeout"].as_u64()),
        (Some("'/bin/cryo agent' approval --hook"), Some(180_000))
    );
    assert_eq!(hooks["env"]["CRYO_SESSION_TOKEN"], "${CRYO_SESSION_TOKEN}");
    assert_eq!(line("pi", Some(&m)).unwrap().env["CRYO_APPROVALS"], "1");
    let acp = line("acp:qwen --acp", Some(&m)).unwrap().bridge.unwrap().join(" ");
    assert!(acp.contains("--approve /bin/cryo agent"), "{acp}");
    assert!(line("sh agent.sh", None).is_ok(), "a command of one's own asks itself");
    for agent in ["claude", "codex", "opencode", "qwen", "gemini", "pi", "acp:qwen --acp"] {
        let e = line(agent, None).unwrap_err().to_string();
        assert!(e.contains("[approvals] needs cryo's own tools"), "{agent}: {e}");
    }
    let e = line("claude --dangerously-skip-permissions", Some(&m)).unwrap_err().to_string();
    assert!(e.contains("remove --dangerously-skip-permissions"), "{e}");
}

/// A command of one's own in a `[git]` chamber names the chamber's files
/// as before: relative words that are the chamber's files are made whole.
#[test]
fn a_command_of_ones_own_finds_its_chamber_files_from_a_worktree() {
    let chamber = tempfile::tempdir().unwrap();
    let wt = chamber.path().join("worktree");
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::write(chamber.path().join("agent.sh"), "").unwrap();
    std::fs::write(chamber.path().join("both.txt"), "").unwrap();
    std::fs::write(wt.join("both.txt"), "").unwrap();
    let t = Turn { workdir: Some(&wt), ..turn("P") };
    let line = command_line("sh agent.sh both.txt -x missing.sh", chamber.path(), &t, false, None, &BTreeMap::new());
    let args = line.unwrap().args;
    let whole = chamber.path().join("agent.sh").to_string_lossy().into_owned();
    assert_eq!(args, vec![whole, "both.txt".into(), "-x".into(), "missing.sh".into(), "P".into()]);
    // Without a worktree, the line is as written.
    let line = command_line("sh agent.sh", chamber.path(), &turn("P"), false, None, &BTreeMap::new()).unwrap();
    assert_eq!(line.args, vec!["agent.sh".to_string(), "P".into()]);
}
