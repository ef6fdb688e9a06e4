//! A chamber's approval policy (`[approvals]` in `cryo.toml`): which of an
//! agent's tool calls run, which wait for a person, and which are refused.
//!
//! A rule names a tool, and optionally a pattern its subject must match:
//! `Read`, `Bash(git status*)`, `Edit(src/*)`, `*`. The subject is the part
//! of the call a person reads: a shell tool's command, a file tool's path, a
//! fetch's URL, a search's pattern; any other tool's input as compact JSON.
//! In a pattern `*` stands for any text (none included); everything else
//! stands for itself, and the whole subject must match.
//!
//! Tool names are those Claude Code uses; each known kind's own names for
//! the same tools are mapped to them ([`canonical_tool`]), so one rule
//! `Bash(git push*)` holds whichever CLI runs the command.
//!
//! A shell command is judged by its parts: it is split at `;`, `&&`, `||`,
//! `|`, `&` and line breaks, and a deny or ask rule that matches any part
//! (or the whole) applies. An allow rule allows a command only when every
//! part is allowed, none substitutes another command (`$(`, a backtick,
//! `<(`, `>(`), none redirects (`>`, `<`), and nothing in it is what the
//! scanner does not read as the shell does (`$'…'`, a comment, a
//! backslash, a control character): `git status; rm -rf ~` is not `git
//! status`, nor is `git status > ~/.bashrc`.
//!
//! Deny and ask rules match text: they stop an agent's mistakes, not an
//! adversary, who can spell a command another way (`/bin/rm`, quotes); the
//! sandbox is what confines an agent. Allow rules are strict: what they do
//! not match exactly is asked.
//!
//! Deny wins over ask, ask over allow; a call no rule names gets `default`
//! (`ask` unless set). cryo's own tools (its MCP server's, by their exact
//! names, and `cryo-agent VERB` run as a plain shell command) are always
//! allowed: the agent must be able to hibernate, and they act only within
//! its own chamber (a TODO's pre-check, which runs a command, is judged by
//! the shell that receives the call: `supervisor::approve`).

use std::fmt;

pub mod request;

/// What becomes of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "allow" => Some(Action::Allow),
            "ask" => Some(Action::Ask),
            "deny" => Some(Action::Deny),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// One rule: a tool (or `*`) and an optional pattern of its subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub tool: String,
    pub pattern: Option<String>,
}

/// Why a rule does not read, with the rule as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("rule {0:?} opens a pattern with '(' but does not end with ')'")]
    Unclosed(String),
    #[error("rule {0:?} names no tool (write `Bash(git status*)`, `Read`, or `*`)")]
    NoTool(String),
    #[error("rule {0:?}: a tool's name has only letters, digits, '_', '-', '.', ':' or is '*'")]
    BadTool(String),
}

impl Rule {
    /// Reads `Tool` or `Tool(pattern)`.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let text = text.trim();
        let (tool, pattern) = match text.find('(') {
            None => (text, None),
            Some(i) => {
                let Some(inner) = text[i + 1..].strip_suffix(')') else {
                    return Err(RuleError::Unclosed(text.to_string()));
                };
                (&text[..i], Some(inner.to_string()))
            }
        };
        let tool = tool.trim();
        if tool.is_empty() {
            return Err(RuleError::NoTool(text.to_string()));
        }
        if tool.chars().any(|c| !(c.is_ascii_alphanumeric() || "_-.*:".contains(c))) {
            return Err(RuleError::BadTool(text.to_string()));
        }
        // Another kind's name (or `bash` for `Bash`) means the same tool.
        Ok(Rule { tool: canonical_tool(tool).to_string(), pattern })
    }

    fn names(&self, tool: &str) -> bool {
        self.tool == "*" || glob(&self.tool, tool)
    }

    /// Whether the rule matches `subject` of `tool`.
    fn matches(&self, tool: &str, subject: &str) -> bool {
        self.names(tool) && self.pattern.as_deref().is_none_or(|p| glob(p, subject))
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "{}({p})", self.tool),
            None => f.write_str(&self.tool),
        }
    }
}

/// The policy of one chamber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub allow: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// What a call no rule names gets.
    pub default: Action,
    /// How long an ask waits in the session for a person before the
    /// session ends `awaiting approval`.
    pub wait: std::time::Duration,
}

/// Why `policy` refuses `command` as a TODO's own pre-check, if it does: a
/// pre-check runs unattended (it cannot wait for a person), so only a
/// command an allow rule names may be one. One rule for every door a
/// pre-check comes through: `todo add --precheck` (cryo-agent, MCP, the
/// operator) and `todo.json` or its journal, written straight.
pub fn precheck_refusal(policy: &Policy, command: &str) -> Option<String> {
    if command.trim().is_empty() {
        return None;
    }
    let verdict = policy.judge("Bash", &serde_json::json!({ "command": command }));
    (verdict.action != Action::Allow).then(|| {
        format!(
            "this chamber's [approvals] does not allow that pre-check ({}): a pre-check runs unattended, so only a \
             command an allow rule names may be one",
            verdict.why()
        )
    })
}

/// The default of `approval_wait`.
pub const DEFAULT_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

impl Default for Policy {
    fn default() -> Policy {
        Policy { allow: Vec::new(), ask: Vec::new(), deny: Vec::new(), default: Action::Ask, wait: DEFAULT_WAIT }
    }
}

/// What the policy says of one call, and by which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub action: Action,
    /// The rule that decided (`None`: the default, or cryo's own tool).
    pub rule: Option<String>,
}

impl Verdict {
    /// Why, for a person and for the agent: "the rule deny Bash(rm -rf*)"
    /// or "the default (ask)".
    pub fn why(&self) -> String {
        match &self.rule {
            Some(r) => format!("the rule {} {r}", self.action.name()),
            None => format!("the default ({})", self.action.name()),
        }
    }
}

impl Policy {
    /// Judges a call of `tool` (any kind's name) with `input` (its JSON).
    pub fn judge(&self, tool: &str, input: &serde_json::Value) -> Verdict {
        // Qwen Code reaches deferred tools through a tool of its own: the
        // search reads their definitions, the call is judged as the tool
        // it calls.
        match (tool, input.get("name").and_then(|n| n.as_str())) {
            ("tool_search", _) => return Verdict { action: Action::Allow, rule: None },
            ("tool_call", Some(inner)) if inner != "tool_call" => {
                let args = input.get("arguments").cloned().unwrap_or_else(|| serde_json::json!({}));
                return self.judge(inner, &args);
            }
            _ => {}
        }
        let tool = canonical_tool(tool);
        if is_cryo_tool(tool) {
            return Verdict { action: Action::Allow, rule: None };
        }
        if tool == "Bash" {
            // Each field a CLI might run is judged; the strictest answer
            // stands (a call naming both `command` and `cmd`).
            let commands = commands(input);
            if commands.is_empty() {
                return self.judge_command(&input.to_string());
            }
            return commands.iter().map(|c| self.judge_command(c)).max_by_key(|v| strictness(v.action)).expect("one");
        }
        let subject = subject(tool, input);
        for (action, rules) in [(Action::Deny, &self.deny), (Action::Ask, &self.ask), (Action::Allow, &self.allow)] {
            if let Some(r) = rules.iter().find(|r| r.matches(tool, &subject)) {
                return Verdict { action, rule: Some(r.to_string()) };
            }
        }
        Verdict { action: self.default, rule: None }
    }

    fn judge_command<'a>(&'a self, command: &str) -> Verdict {
        let parts = command_parts(command);
        let any = |rules: &'a [Rule]| -> Option<&'a Rule> {
            rules.iter().find(|r| r.matches("Bash", command.trim()) || parts.iter().any(|p| r.matches("Bash", p)))
        };
        if let Some(r) = any(&self.deny) {
            return Verdict { action: Action::Deny, rule: Some(r.to_string()) };
        }
        if let Some(r) = any(&self.ask) {
            return Verdict { action: Action::Ask, rule: Some(r.to_string()) };
        }
        // A substitution runs another command, a redirection writes (or
        // reads) a file the rule does not name: neither is allowed by one;
        // nor is anything the scanner does not read as the shell would
        // (`$'…'`, comments, escapes, control characters).
        let substitutes = substitutes_or_redirects(command) || !plain(command);
        if !substitutes && !parts.is_empty() {
            let mut deciding = None;
            let all = parts.iter().all(|p| {
                if is_cryo_command(p) {
                    return true;
                }
                match self.allow.iter().find(|r| r.matches("Bash", p)) {
                    Some(r) => {
                        deciding.get_or_insert_with(|| r.to_string());
                        true
                    }
                    None => false,
                }
            });
            if all {
                return Verdict { action: Action::Allow, rule: deciding };
            }
        }
        Verdict { action: self.default, rule: None }
    }
}

/// The name Claude Code gives the tool another kind calls `tool` (the same
/// name when it has none).
pub fn canonical_tool(tool: &str) -> &str {
    match tool {
        // Codex, Qwen Code and Gemini CLI, Pi, an ACP agent's tool kinds.
        "exec_command" | "shell" | "local_shell" | "run_shell_command" | "bash" | "Shell" | "execute" => "Bash",
        "read_file" | "read_many_files" | "read" => "Read",
        "write_file" | "write" => "Write",
        "replace" | "edit" | "apply_patch" | "delete" | "move" => "Edit",
        "glob" | "list_directory" | "ls" | "find" => "Glob",
        "grep_search" | "search_file_content" | "grep" | "search" => "Grep",
        "web_fetch" | "webfetch" | "fetch" => "WebFetch",
        "google_web_search" | "web_search" => "WebSearch",
        t => t,
    }
}

/// cryo's own verbs (`cryo-agent VERB`, its MCP server's tools).
pub const VERBS: &[&str] = &[
    "hibernate",
    "send",
    "receive",
    "dialog",
    "todo",
    "todo_add",
    "todo_list",
    "todo_done",
    "todo_remove",
    "time",
    "approval",
];

/// cryo's own MCP tools, as each kind names them: exactly its verbs (a
/// server of the agent's own named `cryo_x` is not cryo's).
fn is_cryo_tool(tool: &str) -> bool {
    ["mcp__cryo__", "cryo_", "mcp_cryo_"]
        .iter()
        .any(|prefix| tool.strip_prefix(prefix).is_some_and(|verb| VERBS.contains(&verb) && verb != "todo"))
}

/// `cryo-agent VERB …` run as a plain shell command: its first word is
/// `cryo-agent`, its second one of cryo's verbs, and nothing in it
/// defines, groups or substitutes (`cryo-agent () { … }` is a function).
fn is_cryo_command(part: &str) -> bool {
    let mut words = part.split_whitespace();
    let (first, verb) = (words.next(), words.next());
    first == Some("cryo-agent")
        && verb.is_some_and(|v| VERBS.contains(&v))
        && plain(part)
        && !substitutes_or_redirects(part)
        && !outside_quotes(part).contains(['(', ')', '{', '}', '='])
}

/// Whether the scanner reads `command` as the shell would: no `$'…'` or
/// `$"…"` quoting, no comment (`#`), no backslash, no control character
/// but the line breaks it splits at.
fn plain(command: &str) -> bool {
    !command.contains("$'")
        && !command.contains("$\"")
        && !command.contains(['#', '\\'])
        && !command.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// `command` with its quoted text left out.
fn outside_quotes(command: &str) -> String {
    let (mut out, mut quote) = (String::new(), None);
    for c in command.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, c) => out.push(c),
            _ => {}
        }
    }
    out
}

/// How strict an answer is (deny above ask above allow).
fn strictness(a: Action) -> u8 {
    match a {
        Action::Allow => 0,
        Action::Ask => 1,
        Action::Deny => 2,
    }
}

/// The commands a shell call's arguments hold (`command` or `cmd`, as a
/// string or a list of words).
fn commands(input: &serde_json::Value) -> Vec<String> {
    ["command", "cmd"]
        .iter()
        .filter_map(|n| match input.get(*n)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(a) => Some(
                a.iter()
                    .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            other => Some(other.to_string()),
        })
        .collect()
}

/// What a person reads of a call: see the module documentation.
pub fn subject(tool: &str, input: &serde_json::Value) -> String {
    let field = |names: &[&str]| names.iter().find_map(|n| input.get(*n).and_then(|v| v.as_str()).map(str::to_string));
    let found = match canonical_tool(tool) {
        "Bash" => field(&["command", "cmd"]).or_else(|| {
            // Codex's exec_command may carry the command as a list.
            input
                .get("command")
                .and_then(|c| c.as_array())
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(" "))
        }),
        "Read" | "Write" | "Edit" => field(&["file_path", "path", "absolute_path", "filePath"]),
        "WebFetch" => field(&["url"]),
        "Glob" | "Grep" => field(&["pattern", "path"]),
        _ => None,
    };
    found.unwrap_or_else(|| input.to_string())
}

/// A shell command's simple parts: split at `;`, `&&`, `||`, `|`, `&` and
/// line breaks outside quotes.
pub fn command_parts(command: &str) -> Vec<String> {
    scan(command).0
}

/// Whether a command substitutes another (`$(`, a backtick, `<(`, `>(`,
/// outside single quotes: inside double quotes they still run) or
/// redirects (`>`, `<` outside quotes).
fn substitutes_or_redirects(command: &str) -> bool {
    scan(command).1
}

/// [`command_parts`] and [`substitutes_or_redirects`] in one pass over the
/// command, minding quotes and backslashes.
fn scan(command: &str) -> (Vec<String>, bool) {
    let (mut parts, mut cur, mut risky) = (Vec::new(), String::new(), false);
    let (mut single, mut double) = (false, false);
    let mut chars = command.chars().peekable();
    let push = |cur: &mut String, parts: &mut Vec<String>| {
        let p = cur.trim();
        if !p.is_empty() {
            parts.push(p.to_string());
        }
        cur.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' if !single => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                continue;
            }
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '`' if !single => risky = true,
            '$' if !single && chars.peek() == Some(&'(') => risky = true,
            '>' | '<' if !single && !double => risky = true,
            ';' | '&' | '|' | '\n' if !single && !double => {
                push(&mut cur, &mut parts);
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    push(&mut cur, &mut parts);
    (parts, risky || single || double)
}

/// Whether `text` matches `pattern`, where `*` stands for any text.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> Policy {
        let rules = |l: &[&str]| l.iter().map(|r| Rule::parse(r).unwrap()).collect();
        Policy {
            allow: rules(&["Read", "Grep", "Bash(git status*)", "Bash(ls*)"]),
            ask: rules(&["Bash(git push*)"]),
            deny: rules(&["Bash(rm -rf*)", "Edit(/etc/*)"]),
            ..Policy::default()
        }
    }

    fn bash(cmd: &str) -> Action {
        policy().judge("Bash", &json!({ "command": cmd })).action
    }

    #[test]
    fn rules_read_as_written() {
        assert_eq!(Rule::parse("Bash(git push*)").unwrap().pattern.as_deref(), Some("git push*"));
        assert_eq!(Rule::parse(" Read ").unwrap(), Rule { tool: "Read".into(), pattern: None });
        assert_eq!(Rule::parse("Bash(a(b))").unwrap().pattern.as_deref(), Some("a(b)"));
        assert!(Rule::parse("Bash(git").unwrap_err().to_string().contains("does not end with ')'"));
        assert_eq!(Rule::parse("(x)"), Err(RuleError::NoTool("(x)".into())));
        assert!(matches!(Rule::parse("Ba sh"), Err(RuleError::BadTool(_))));
        assert_eq!(Rule::parse("Bash(git push*)").unwrap().to_string(), "Bash(git push*)");
        assert_eq!(Rule::parse("bash(git push*)").unwrap().tool, "Bash", "another kind's name is the same tool");
        assert_eq!(Rule::parse("run_shell_command").unwrap().tool, "Bash");
    }

    #[test]
    fn globs_match_the_whole_text() {
        assert!(glob("git push*", "git push origin main"));
        assert!(glob("git push*", "git push"));
        assert!(!glob("git push*", "echo git push"));
        assert!(glob("*.rs", "src/main.rs"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("*", ""));
        assert!(glob("", ""));
        assert!(!glob("", "x"));
    }

    #[test]
    fn deny_wins_then_ask_then_allow_then_the_default() {
        assert_eq!(bash("git status --short"), Action::Allow);
        assert_eq!(bash("git push origin main"), Action::Ask);
        assert_eq!(bash("rm -rf /"), Action::Deny);
        assert_eq!(bash("make"), Action::Ask, "no rule: the default, ask");
        let p = policy();
        assert_eq!(p.judge("Read", &json!({"file_path": "/x"})).action, Action::Allow);
        assert_eq!(p.judge("Edit", &json!({"file_path": "/etc/passwd"})).action, Action::Deny);
        assert_eq!(p.judge("Edit", &json!({"file_path": "/home/a"})).action, Action::Ask);
        let v = p.judge("Bash", &json!({"command": "rm -rf build"}));
        assert_eq!(v.why(), "the rule deny Bash(rm -rf*)");
        assert_eq!(p.judge("Bash", &json!({"command": "make"})).why(), "the default (ask)");
    }

    #[test]
    fn a_compound_command_is_judged_by_every_part() {
        assert_eq!(bash("git status; rm -rf ~"), Action::Deny, "a denied part denies the whole");
        assert_eq!(bash("cd x && git push"), Action::Ask, "an asked part asks");
        assert_eq!(bash("git status && make"), Action::Ask, "an allowed part does not allow the rest");
        assert_eq!(bash("git status | ls -l"), Action::Allow, "every part allowed");
        assert_eq!(bash("git status $(make)"), Action::Ask, "a substitution is never allowed by a rule");
        assert_eq!(bash("ls `make`"), Action::Ask);
        assert_eq!(bash("git status > ~/.bashrc"), Action::Ask, "a redirection is never allowed by a rule");
        assert_eq!(bash("ls < /etc/shadow"), Action::Ask);
        // Quotes: separators and redirections inside them are text; a
        // substitution inside double quotes still runs.
        assert_eq!(command_parts("git status 'a; b' && ls \"c | d\""), ["git status 'a; b'", "ls \"c | d\""]);
        assert_eq!(bash("git status 'x > y'"), Action::Allow);
        assert_eq!(bash("git status \"$(make)\""), Action::Ask);
        assert_eq!(bash("git status '$(make)'"), Action::Allow);
        assert_eq!(bash("git status \\; rm -rf x"), Action::Ask, "an escape is never allowed by a rule");
        assert_eq!(bash("git status 'unclosed"), Action::Ask, "an unclosed quote is never allowed");
        assert_eq!(bash("git status\nmake"), Action::Ask);
    }

    /// What a hostile reviewer slipped past the first scanner.
    #[test]
    fn what_the_scanner_cannot_read_is_never_allowed() {
        for cmd in [
            "git status $'\\' '; touch PWNED1 #'",
            "git status #'\ntouch PWNED3\n#'",
            "git status #\"\ntouch PWNED3\n#\"",
            "git status \\'; touch x",
            "git status \r; touch x",
        ] {
            assert_ne!(bash(cmd), Action::Allow, "{cmd:?}");
        }
        let p = Policy { default: Action::Deny, ..Policy::default() };
        let v = |cmd: &str| p.judge("Bash", &json!({ "command": cmd })).action;
        assert_eq!(v("cryo-agent () ( touch PWNED2 ) && cryo-agent"), Action::Deny);
        assert_eq!(v("cryo-agent hibernate; cryo-agent() { touch x; }"), Action::Deny);
        assert_eq!(v("cryo-agent x"), Action::Deny, "not one of cryo's verbs");
        assert_eq!(v("cryo-agent send 'done (all) = 3'"), Action::Allow, "quoted text is text");
        // Every field a CLI might run is judged.
        let both = json!({ "command": "git status", "cmd": "rm -rf /" });
        assert_eq!(policy().judge("exec_command", &both).action, Action::Deny);
        // Only cryo's own verbs are cryo's tools.
        assert_eq!(p.judge("cryo_evil_run", &json!({})).action, Action::Deny);
        assert_eq!(p.judge("mcp__cryo__hibernate", &json!({})).action, Action::Allow);
    }

    #[test]
    fn cryos_own_tools_are_always_allowed() {
        let p = Policy { default: Action::Deny, ..Policy::default() };
        assert_eq!(p.judge("mcp__cryo__hibernate", &json!({})).action, Action::Allow);
        assert_eq!(p.judge("cryo_send", &json!({})).action, Action::Allow);
        assert_eq!(p.judge("Bash", &json!({"command": "cryo-agent hibernate --summary ok"})).action, Action::Allow);
        assert_eq!(p.judge("Bash", &json!({"command": "cryo-agent x; make"})).action, Action::Deny);
        assert_eq!(p.judge("Bash", &json!({"command": "cryo-agent x > /etc/y"})).action, Action::Deny);
    }

    #[test]
    fn other_kinds_names_map_to_the_same_rules() {
        let p = policy();
        assert_eq!(p.judge("run_shell_command", &json!({"command": "git push"})).action, Action::Ask);
        assert_eq!(p.judge("exec_command", &json!({"cmd": "rm -rf x"})).action, Action::Deny);
        assert_eq!(p.judge("execute", &json!({"command": "git status"})).action, Action::Allow);
        assert_eq!(p.judge("read_file", &json!({"absolute_path": "/a"})).action, Action::Allow);
        assert_eq!(subject("exec_command", &json!({"command": ["git", "push"]})), "git push");
        assert_eq!(subject("Task", &json!({"a": 1})), r#"{"a":1}"#);
        // Qwen Code's deferred tools: judged as the tool called.
        let through = |name: &str, args| p.judge("tool_call", &json!({"name": name, "arguments": args})).action;
        assert_eq!(through("mcp__cryo__hibernate", json!({})), Action::Allow);
        assert_eq!(through("run_shell_command", json!({"command": "rm -rf /"})), Action::Deny);
        assert_eq!(p.judge("tool_search", &json!({"query": "select:x"})).action, Action::Allow);
    }
}
