//! `agent = "acp:COMMAND ARGS"`: an agent that speaks the Agent Client
//! Protocol (JSON-RPC 2.0, one message a line, on its stdin and stdout).
//!
//! cryod's own binary drives it (`cryod __acp [--resume ID] [--mcp PROGRAM]
//! -- COMMAND ARGS`, the prompt in its environment, [`PROMPT_VAR`], which
//! no other process reads and the agent does not get), outside the agent's confinement (it
//! reads and writes nothing but the two pipes) and inside its process
//! group: it initializes the agent (protocol 1, no file system and no
//! terminal offered: the agent uses its own tools), opens a session
//! (`session/load` of the one named by `--resume` where the agent can load
//! sessions, else `session/new`) with cryo's MCP server, sends the prompt,
//! answers what the agent asks, and writes one JSON line per thing that
//! happened on its stdout, which cryod reads as the kind's event stream
//! (`events`):
//!
//! - `{"type":"session","sessionId":…,"model":…,"resumed":bool}`
//! - `{"type":"update","update":{…}}`: each `session/update` (not those a
//!   loaded session replays)
//! - `{"type":"permission","tool":…,"chose":…}`: a permission request and
//!   the option chosen. With `--approve PROGRAM` (the chamber has an
//!   `[approvals]` policy) cryod judges each one (`PROGRAM approval --tool
//!   KIND --input RAW`, the same question Claude Code's permission prompt
//!   asks): allowed, the first "allow once" option; refused (a deny rule, a
//!   person's denial, an ask still waiting), the first "reject" option.
//!   Without a policy, the first "allow once" option (cryo runs unattended).
//! - `{"type":"result","result":{…}}`: the prompt's end (`stopReason`, and
//!   any usage the agent reports with it)
//! - `{"type":"error","message":…}`
//!
//! Verified with Qwen Code 0.24.4 (`qwen --acp`); what each agent does is in
//! `agent-events.md`. Written by hand over std rather than with the
//! `agent-client-protocol` crate: the client side needs five methods, the
//! agents' usage lives in `_meta` fields a typed client drops, and the
//! crate's process support would bring a second async runtime.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// The bridge's first argument.
pub(crate) const ARG: &str = "__acp";

/// The session's variables cryo's MCP server needs (the agent starts it
/// with the environment its `session/new` names).
const SESSION_VARS: &[&str] =
    &["CRYO_SOCKET", "CRYO_CHAMBER", "CRYO_SESSION", "CRYO_WAKE_ID", "CRYO_SESSION_TOKEN", "TZ", "PATH", "HOME"];

/// What one session asks of the bridge.
#[derive(Debug, Default, PartialEq)]
struct Asked {
    prompt: String,
    resume: Option<String>,
    mcp: Option<String>,
    /// `cryo-agent`, to ask cryod about each permission request.
    approve: Option<String>,
    command: Vec<OsString>,
}

/// The bridge's arguments, before the agent's command.
pub(crate) fn args(resume: Option<&str>, mcp: Option<&str>, approve: Option<&str>) -> Vec<String> {
    let mut out = vec![ARG.to_string()];
    if let Some(id) = resume {
        out.extend(["--resume".into(), id.to_string()]);
    }
    if let Some(m) = mcp {
        out.extend(["--mcp".into(), m.to_string()]);
    }
    if let Some(a) = approve {
        out.extend(["--approve".into(), a.to_string()]);
    }
    out
}

/// Asks cryod (through `cryo-agent approval`, with the session's
/// environment) whether the agent's tool call may run: the tool is the
/// call's ACP kind (`execute`, `edit`, …; its title when it has none), its
/// input the call's raw input. Whether it may, and what cryod said; a
/// question that gets no answer is a refusal.
fn ask_cryod(program: &str, call: &Value) -> (bool, String) {
    let tool = call["kind"].as_str().filter(|k| !k.is_empty() && *k != "other");
    let tool = tool.or_else(|| call["title"].as_str()).unwrap_or("?");
    let input = match &call["rawInput"] {
        Value::Object(m) => Value::Object(m.clone()),
        _ => json!({ "title": call["title"] }),
    };
    let out = Command::new(program)
        .args(["approval", "--tool", tool, "--input", &input.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let answer: Option<Value> = out.ok().and_then(|o| serde_json::from_slice(&o.stdout).ok());
    match answer {
        Some(a) if a["behavior"] == "allow" => (true, String::new()),
        Some(a) => (false, a["message"].as_str().unwrap_or("refused").to_string()),
        None => (false, "cryo could not judge this call".into()),
    }
}

/// `cryod __acp …`: drives the agent, then exits (with the agent's code if
/// it ended before its turn did).
pub(crate) fn intercept() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    let code = match parse(args.collect()).and_then(run) {
        Ok(code) => code,
        Err(why) => {
            say(&json!({ "type": "error", "message": why }));
            eprintln!("cryo ACP client: {why}");
            1
        }
    };
    std::process::exit(code)
}

/// The variable that carries the prompt to cryod's client.
pub(crate) const PROMPT_VAR: &str = "CRYO_ACP_PROMPT";

fn parse(args: Vec<OsString>) -> Result<Asked, String> {
    let mut asked = Asked { prompt: std::env::var(PROMPT_VAR).unwrap_or_default(), ..Asked::default() };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().and_then(|v| v.into_string().ok()).ok_or(format!("{a:?} needs a value"));
        match a.to_str() {
            Some("--resume") => asked.resume = Some(value()?),
            Some("--mcp") => asked.mcp = Some(value()?),
            Some("--approve") => asked.approve = Some(value()?),
            Some("--") => {
                asked.command = it.by_ref().collect();
                break;
            }
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    if asked.command.is_empty() {
        return Err("no agent command after --".into());
    }
    Ok(asked)
}

/// The longest message read from the agent (a turn's history replayed in
/// one update can be large); a longer line is skipped whole.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Reads the next line of at most [`MAX_LINE`] bytes into `line` (without
/// its newline), skipping longer ones; `false` at the end.
fn next_line(r: &mut impl BufRead, line: &mut Vec<u8>) -> bool {
    loop {
        line.clear();
        match r.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', line) {
            Ok(0) | Err(_) => return false,
            Ok(_) if line.last() == Some(&b'\n') => {
                line.pop();
                return true;
            }
            Ok(_) if line.len() <= MAX_LINE => return true,
            Ok(_) => {
                // Too long: the rest of it is dropped as it comes.
                let mut rest = Vec::new();
                loop {
                    rest.clear();
                    match r.by_ref().take(64 * 1024).read_until(b'\n', &mut rest) {
                        Ok(0) | Err(_) => return false,
                        Ok(_) if rest.last() == Some(&b'\n') => break,
                        Ok(_) => {}
                    }
                }
            }
        }
    }
}

/// One line of the bridge's output.
fn say(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The agent at the other end of the pipes.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    next: u64,
    /// A loaded session's replay is not this session's work.
    quiet: bool,
    /// `cryo-agent`, to ask cryod about permission requests (`--approve`).
    approve: Option<String>,
}

impl Peer {
    fn send(&mut self, v: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("the agent's stdin is closed")?;
        writeln!(stdin, "{v}").and_then(|_| stdin.flush()).map_err(|e| format!("cannot write to the agent: {e}"))
    }

    /// Sends a request and waits for its answer, handling what the agent
    /// sends meanwhile. `Err` when the agent ends first.
    fn call(&mut self, method: &str, params: Value) -> Result<Result<Value, Value>, String> {
        let id = self.next;
        self.next += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        loop {
            let Ok(msg) = self.lines.recv() else {
                // Its stdout closed: whatever is left of it is ended.
                let _ = self.child.kill();
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(format!("the agent ended before answering {method} ({status})"));
            };
            if msg.get("method").is_some() {
                self.incoming(&msg)?;
            } else if msg["id"] == id {
                return Ok(match msg.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(msg["result"].clone()),
                });
            }
        }
    }

    /// A notification or a request from the agent.
    fn incoming(&mut self, msg: &Value) -> Result<(), String> {
        let method = msg["method"].as_str().unwrap_or("");
        match (method, msg.get("id")) {
            ("session/update", None) if !self.quiet => {
                say(&json!({ "type": "update", "update": msg["params"]["update"] }));
            }
            ("session/request_permission", Some(id)) => {
                let options = msg["params"]["options"].as_array().cloned().unwrap_or_default();
                let tool = &msg["params"]["toolCall"];
                let (allowed, message) = match &self.approve {
                    Some(program) => ask_cryod(program, tool),
                    None => (true, String::new()),
                };
                let kinds: &[&str] =
                    if allowed { &["allow_once", "allow_always"] } else { &["reject_once", "reject_always"] };
                let pick = kinds.iter().find_map(|k| options.iter().find(|o| o["kind"] == *k));
                let pick = if allowed { pick.or(options.first()) } else { pick };
                // The call as asked about, with its input (its own updates
                // may carry none).
                if let Some(call) = tool.as_object() {
                    let mut call = call.clone();
                    call.insert("sessionUpdate".into(), json!("tool_call"));
                    say(&json!({ "type": "update", "update": call }));
                }
                let name = tool["title"].as_str().or_else(|| tool["_meta"]["toolName"].as_str()).unwrap_or("?");
                let answer = match pick.and_then(|o| o["optionId"].as_str()) {
                    Some(option) => {
                        say(&json!({ "type": "permission", "tool": name, "chose": option, "message": message }));
                        json!({ "outcome": { "outcome": "selected", "optionId": option } })
                    }
                    None => {
                        say(&json!({ "type": "permission", "tool": name, "chose": "cancelled", "message": message }));
                        json!({ "outcome": { "outcome": "cancelled" } })
                    }
                };
                self.send(&json!({ "jsonrpc": "2.0", "id": id, "result": answer }))?;
            }
            // Offered nothing else: files and terminals are the agent's own.
            (_, Some(id)) => self.send(&json!({ "jsonrpc": "2.0", "id": id,
                "error": { "code": -32601, "message": format!("cryo's client does not offer {method}") } }))?,
            (_, None) => {}
        }
        Ok(())
    }

    /// Closes the agent's stdin and gives it a moment to end, then ends it.
    fn finish(mut self) {
        drop(self.stdin.take());
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(asked: Asked) -> Result<i32, String> {
    let mut child = Command::new(&asked.command[0])
        .args(&asked.command[1..])
        .env_remove(PROMPT_VAR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", asked.command[0]))?;
    // A few messages ahead at most (each up to MAX_LINE; this client runs
    // outside the session's memory limit): an agent that floods waits.
    let (tx, lines) = mpsc::sync_channel(4);
    let out = child.stdout.take().ok_or("the agent has no stdout")?;
    std::thread::spawn(move || {
        let mut out = BufReader::new(out);
        let mut line = Vec::new();
        while next_line(&mut out, &mut line) {
            match serde_json::from_slice::<Value>(&line) {
                Ok(v) if v.is_object() => {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                // Not the protocol: the agent's own words, kept as a log.
                _ => eprintln!("{}", String::from_utf8_lossy(&line)),
            }
        }
    });
    let stdin = child.stdin.take();
    let mut peer = Peer { child, stdin, lines, next: 1, quiet: false, approve: asked.approve.clone() };
    let hello = peer.call(
        "initialize",
        json!({
            "protocolVersion": 1,
            "clientCapabilities": { "fs": { "readTextFile": false, "writeTextFile": false }, "terminal": false },
            "clientInfo": { "name": "cryo", "version": env!("CARGO_PKG_VERSION") },
        }),
    )?;
    let hello = hello.map_err(|e| format!("the agent refused to initialize: {}", e["message"]))?;
    let can_load = hello["agentCapabilities"]["loadSession"] == true;
    let cwd = std::env::current_dir().map_err(|e| format!("no working folder: {e}"))?;
    let servers = match &asked.mcp {
        Some(program) => {
            let env: Vec<Value> = SESSION_VARS
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| json!({ "name": k, "value": v })))
                .collect();
            json!([{ "name": "cryo", "command": program, "args": ["mcp"], "env": env }])
        }
        None => json!([]),
    };
    let mut opened = None;
    let mut resumed = false;
    if let Some(id) = asked.resume.as_deref() {
        if can_load {
            peer.quiet = true;
            let loaded = peer.call("session/load", json!({ "sessionId": id, "cwd": cwd, "mcpServers": servers }))?;
            peer.quiet = false;
            match loaded {
                Ok(r) => {
                    opened = Some((id.to_string(), r));
                    resumed = true;
                }
                Err(e) => say(
                    &json!({ "type": "error", "message": format!("could not load session {id}: {}", e["message"]) }),
                ),
            }
        } else {
            say(&json!({ "type": "error", "message": "the agent cannot load a session: this one starts afresh" }));
        }
    }
    let (session, opened) = match opened {
        Some(o) => o,
        None => {
            let r = peer.call("session/new", json!({ "cwd": cwd, "mcpServers": servers }))?;
            let r = r.map_err(|e| format!("the agent refused a new session: {}", e["message"]))?;
            let id = r["sessionId"].as_str().ok_or("the agent's new session has no sessionId")?.to_string();
            (id, r)
        }
    };
    say(&json!({ "type": "session", "sessionId": session, "model": model_of(&opened), "resumed": resumed }));
    let prompt = json!({ "sessionId": session, "prompt": [{ "type": "text", "text": asked.prompt }] });
    let code = match peer.call("session/prompt", prompt)? {
        Ok(result) => {
            say(&json!({ "type": "result", "result": result }));
            0
        }
        Err(e) => {
            say(&json!({ "type": "error", "message": e["message"].as_str().unwrap_or("the prompt failed") }));
            1
        }
    };
    peer.finish();
    Ok(code)
}

/// The model a session opened with: the name of its current model, if the
/// agent lists its models.
fn model_of(opened: &Value) -> Option<String> {
    let models = &opened["models"];
    let current = models["currentModelId"].as_str()?;
    let listed = models["availableModels"].as_array().into_iter().flatten().find(|m| m["modelId"] == current);
    Some(listed.and_then(|m| m["name"].as_str()).unwrap_or(current).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let mut a: Vec<OsString> =
            args(Some("s1"), Some("/bin/cryo-agent"), Some("/bin/cryo-agent"))[1..].iter().map(Into::into).collect();
        a.extend(["--".into(), "qwen".into(), "--acp".into()]);
        let asked = parse(a).unwrap();
        assert_eq!((asked.resume.as_deref(), asked.mcp.as_deref()), (Some("s1"), Some("/bin/cryo-agent")));
        assert_eq!(asked.approve.as_deref(), Some("/bin/cryo-agent"));
        assert_eq!(asked.command, [OsString::from("qwen"), "--acp".into()]);
        assert!(parse(vec!["--mcp".into(), "p".into()]).unwrap_err().contains("no agent command"));
        assert!(parse(vec!["--bogus".into()]).is_err());
    }

    /// An agent's lines: a line too long is skipped whole, bytes that are
    /// not UTF-8 do not end the reading, the last line may lack its newline.
    #[test]
    fn lines_are_bounded() {
        let long = vec![b'x'; MAX_LINE + 10];
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(&long);
        input.extend(b"\n\xff\xfe\n{\"b\":2}");
        let mut r = std::io::Cursor::new(input);
        let mut line = Vec::new();
        let mut seen = Vec::new();
        while next_line(&mut r, &mut line) {
            seen.push(line.clone());
        }
        assert_eq!(seen, [b"{\"a\":1}".to_vec(), b"\xff\xfe".to_vec(), b"{\"b\":2}".to_vec()]);
    }

    #[test]
    fn the_model_is_named_as_the_agent_lists_it() {
        let opened = json!({ "models": { "currentModelId": "$runtime|openai|m1(openai)",
            "availableModels": [{ "modelId": "$runtime|openai|m1(openai)", "name": "m1" }] } });
        assert_eq!(model_of(&opened).as_deref(), Some("m1"));
        assert_eq!(model_of(&json!({})), None);
    }
}
