//! Agent processes: the command line for each agent kind, the session's
//! environment, process groups, and ending them.
//!
//! Known kinds get their unattended, headless form. Flags checked against the
//! `--help` of the releases installed from npm on 2026-11-22:
//! `@anthropic-ai/claude-code@2.1.330`, `@openai/codex@0.169.0`,
//! `opencode-ai@1.18.33`.
//! - `claude -p [ARGS] --allowedTools LIST -- PROMPT`: the prompt goes after
//!   `--`, because `--allowedTools` takes several values and would swallow
//!   it. The same list as root and as a normal user. An agent line that
//!   chooses `--dangerously-skip-permissions` keeps it (and gets
//!   `IS_SANDBOX=1` as root, where Claude Code refuses the flag otherwise);
//!   one that names its own `--allowedTools` or `--permission-mode` keeps
//!   those.
//! - `codex exec -C DIR --skip-git-repo-check
//!   --dangerously-bypass-approvals-and-sandbox -c shell_environment_policy.inherit=all
//!   -c allow_login_shell=false [ARGS] PROMPT`: without `inherit=all` the tool
//!   calls lose our `CRYO_*` variables, and a login shell (`bash -lc`, Codex's
//!   default) runs `/etc/profile`, which resets `PATH` and loses `cryo-agent`.
//!   An agent line that picks its own `--sandbox` keeps it instead of the
//!   bypass; with `workspace-write`, cryod adds
//!   `-c sandbox_workspace_write.network_access=true`, without which the
//!   sandbox refuses every socket, cryod's too.
//! - `opencode run --dir DIR --auto [ARGS] PROMPT`: `--auto` approves the tool
//!   permissions an unattended run needs (those not explicitly denied).
//!
//! Any other `agent` command runs as given, with the prompt as its last
//! argument. A prompt too long for one argument is written to a file and the
//! agent is told to read it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Longest prompt passed as one argument (Linux caps one at 128 KiB).
pub const MAX_PROMPT_ARG: usize = 100 * 1024;

/// A resolved command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
    /// Extra environment the kind needs (never secrets).
    pub env: BTreeMap<String, String>,
}

/// The agent kinds cryo knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Claude,
    Codex,
    OpenCode,
    Other,
}

impl Kind {
    pub fn of(program: &str) -> Kind {
        match Path::new(program).file_name().and_then(|n| n.to_str()) {
            Some("claude") => Kind::Claude,
            Some("codex") => Kind::Codex,
            Some("opencode") => Kind::OpenCode,
            _ => Kind::Other,
        }
    }
}

/// Splits a command line into words: whitespace separates, single and double
/// quotes group, a backslash escapes the next character.
pub fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("unbalanced quote in agent command {s:?}"));
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err("the agent command is empty".into());
    }
    Ok(words)
}

/// The command line that runs `agent` in `chamber` with `prompt`.
/// `prompt_file` is where a long prompt is written (relative to the chamber).
pub fn command_line(
    agent: &str,
    chamber: &Path,
    prompt: &str,
    prompt_file: &str,
    as_root: bool,
) -> Result<Launch, String> {
    let mut words = split_words(agent)?;
    let program = words.remove(0);
    let extra = words;
    let prompt_arg = if prompt.len() > MAX_PROMPT_ARG {
        format!(
            "Your instructions for this session are in the file {prompt_file} (too long to pass here). Read it now and follow it."
        )
    } else {
        prompt.to_string()
    };
    let dir = chamber.to_string_lossy().into_owned();
    let mut env = BTreeMap::new();
    let mut args: Vec<String> = Vec::new();
    match Kind::of(&program) {
        Kind::Claude => {
            args.push("-p".into());
            let chose =
                |flags: &[&str]| extra.iter().any(|a| flags.iter().any(|f| a == f || a.starts_with(&format!("{f}="))));
            let skip = chose(&["--dangerously-skip-permissions"]);
            let own_tools = chose(&["--allowedTools", "--allowed-tools", "--permission-mode"]);
            args.extend(extra);
            if skip && as_root {
                // The user's explicit choice; as root Claude Code refuses it
                // unless told it runs in a sandbox.
                env.insert("IS_SANDBOX".into(), "1".into());
            }
            if !skip && !own_tools {
                args.extend(["--allowedTools".into(), CLAUDE_TOOLS.into()]);
            }
            args.push("--".into());
            args.push(prompt_arg);
        }
        Kind::Codex => {
            args.extend(["exec".into(), "-C".into(), dir, "--skip-git-repo-check".into()]);
            // The sandbox the agent line picks, if any.
            let sandbox = extra.iter().enumerate().find_map(|(i, a)| match a.as_str() {
                "-s" | "--sandbox" => Some(extra.get(i + 1).map(String::as_str).unwrap_or("")),
                "--dangerously-bypass-approvals-and-sandbox" => Some("none"),
                a => a.strip_prefix("--sandbox="),
            });
            match sandbox {
                None => args.push("--dangerously-bypass-approvals-and-sandbox".into()),
                // Its seccomp filter refuses every socket, cryod's too,
                // unless network access is on.
                Some("workspace-write") => {
                    args.extend(["-c".into(), "sandbox_workspace_write.network_access=true".into()])
                }
                Some(_) => {}
            }
            args.extend(["-c".into(), "shell_environment_policy.inherit=all".into()]);
            args.extend(["-c".into(), "allow_login_shell=false".into()]);
            args.extend(extra);
            args.push(prompt_arg);
        }
        Kind::OpenCode => {
            args.extend(["run".into(), "--dir".into(), dir, "--auto".into()]);
            args.extend(extra);
            args.push(prompt_arg);
        }
        Kind::Other => {
            args.extend(extra);
            args.push(prompt_arg);
        }
    }
    env.insert("CRYO_AGENT_KIND".into(), format!("{:?}", Kind::of(&program)).to_lowercase());
    Ok(Launch { program, args, env })
}

/// Tools Claude Code may use unattended: what an agent needs to work in its
/// chamber, `Bash` among them for `cryo-agent`.
const CLAUDE_TOOLS: &str = "Bash,Read,Edit,Write,Glob,Grep,WebFetch,WebSearch,TodoWrite";

/// The folder holding `cryo-agent` (beside the running binary).
pub fn agent_bin_dir() -> Option<PathBuf> {
    std::env::current_exe().ok()?.parent().map(Path::to_path_buf)
}

/// Whether `program` can be found (absolute, relative to `cwd`, or on `path`).
pub fn find_program(program: &str, cwd: &Path, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if program.contains('/') {
        let p = cwd.join(program);
        return executable(&p).then_some(p);
    }
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| executable(p))
}

/// Sends `signal` to the whole process group `pgid`.
pub fn signal_group(pgid: i32, signal: nix::sys::signal::Signal) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal).is_ok()
}

/// Whether any process of group `pgid` is alive.
pub fn group_alive(pgid: i32) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), None).is_ok()
}

/// Whether `pid` runs (a zombie, dead but not yet reaped by its parent, does
/// not).
pub fn pid_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).is_some_and(|state| state != 'Z'),
        Err(_) => nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok() && !cfg!(target_os = "linux"),
    }
}

/// Ends the processes `procs` (pid, group): SIGTERM to every group at once,
/// then SIGKILL to what still runs after `grace`.
pub async fn end_groups(procs: &[(i32, i32)], grace: std::time::Duration) {
    if procs.is_empty() {
        return;
    }
    let mut groups: Vec<i32> = procs.iter().map(|p| p.1).collect();
    groups.sort_unstable();
    groups.dedup();
    for g in &groups {
        signal_group(*g, nix::sys::signal::Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while procs.iter().any(|p| pid_running(p.0)) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for g in &groups {
        signal_group(*g, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Processes (pid, process group) that carry `CRYO_WAKE_ID`, by wake id: the
/// agents (and their children) of sessions. Used at start-up to find agents a
/// killed cryod left behind; the wake id in the environment proves a process
/// is ours even if its pid was reused.
pub fn processes_by_wake() -> std::collections::HashMap<String, Vec<(i32, i32)>> {
    let mut out: std::collections::HashMap<String, Vec<(i32, i32)>> = Default::default();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        let Some(wake) = env
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"CRYO_WAKE_ID="))
            .and_then(|v| std::str::from_utf8(v).ok())
        else {
            continue;
        };
        let pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid))).map(|p| p.as_raw()).unwrap_or(pid);
        out.entry(wake.to_string()).or_default().push((pid, pgid));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(split_words("sh ./agent.sh").unwrap(), ["sh", "./agent.sh"]);
        assert_eq!(split_words(r#"my\ agent "a b" 'c "d"' e\"f"#).unwrap(), ["my agent", "a b", "c \"d\"", "e\"f"]);
        assert_eq!(split_words("x ''").unwrap(), ["x", ""]);
        assert!(split_words("'open").is_err());
        assert!(split_words("   ").is_err());
    }

    #[test]
    fn known_kinds() {
        let c = Path::new("/c");
        for as_root in [false, true] {
            let l = command_line("claude", c, "P", "f", as_root).unwrap();
            assert_eq!(l.args, ["-p", "--allowedTools", CLAUDE_TOOLS, "--", "P"]);
            assert!(!l.env.contains_key("IS_SANDBOX"));
        }
        let l = command_line("claude --model opus", c, "P", "f", true).unwrap();
        assert_eq!(l.args, ["-p", "--model", "opus", "--allowedTools", CLAUDE_TOOLS, "--", "P"]);
        // The user's explicit choices stand.
        let l = command_line("claude --dangerously-skip-permissions", c, "P", "f", true).unwrap();
        assert_eq!(l.args, ["-p", "--dangerously-skip-permissions", "--", "P"]);
        assert_eq!(l.env.get("IS_SANDBOX").map(String::as_str), Some("1"));
        let l = command_line("claude --dangerously-skip-permissions", c, "P", "f", false).unwrap();
        assert!(!l.env.contains_key("IS_SANDBOX"));
        let l = command_line("claude --permission-mode acceptEdits", c, "P", "f", false).unwrap();
        assert_eq!(l.args, ["-p", "--permission-mode", "acceptEdits", "--", "P"]);

        let l = command_line("/usr/bin/codex", c, "P", "f", false).unwrap();
        assert_eq!(l.program, "/usr/bin/codex");
        assert_eq!(l.args[..4], ["exec", "-C", "/c", "--skip-git-repo-check"]);
        assert!(l.args.contains(&"--dangerously-bypass-approvals-and-sandbox".to_string()));
        assert!(l.args.contains(&"shell_environment_policy.inherit=all".to_string()));
        assert!(l.args.contains(&"allow_login_shell=false".to_string()));
        assert_eq!(l.args.last().unwrap(), "P");
        let l = command_line("codex --sandbox workspace-write", c, "P", "f", false).unwrap();
        assert!(!l.args.contains(&"--dangerously-bypass-approvals-and-sandbox".to_string()));
        assert!(l.args.contains(&"sandbox_workspace_write.network_access=true".to_string()));
        assert_eq!(l.args[l.args.len() - 3..], ["--sandbox", "workspace-write", "P"]);

        let l = command_line("opencode", c, "P", "f", false).unwrap();
        assert_eq!(l.args, ["run", "--dir", "/c", "--auto", "P"]);
        let l = command_line("sh agent.sh --fast", c, "P", "f", false).unwrap();
        assert_eq!(
            (l.program.as_str(), l.args.as_slice()),
            ("sh", &["agent.sh".to_string(), "--fast".into(), "P".into()][..])
        );
    }

    #[test]
    fn long_prompts_go_through_a_file() {
        let long = "x".repeat(MAX_PROMPT_ARG + 1);
        let l = command_line("sh a.sh", Path::new("/c"), &long, ".cryo/prompt.md", false).unwrap();
        assert!(l.args.last().unwrap().contains(".cryo/prompt.md"));
        assert!(l.args.last().unwrap().len() < 1000);
    }
}
