//! Issue 20: cryo as MCP servers. `cryo-agent mcp` inside a real session,
//! `cryoctl mcp` over a real cryod's socket, and the hub's `/mcp` over real
//! HTTP, each driven by the tests' own JSON-RPC client
//! (`cryo_tests::mcp`). The real agent CLIs calling the tools are in
//! `agents.rs`.

use serde_json::{Value, json};

use crate::hub::Hub;
use cryo_tests::mcp::{StdioClient, is_error, text};
use cryo_tests::{ANSWERING_AGENT, Chamber, Env, bin, wait_until};

/// An agent that publishes its session's environment, then waits (with a
/// deadline) for the test to say it is done.
const PUBLISH_AND_WAIT: &str = r#"
env | grep -e '^CRYO_' -e '^TZ=' > session.env.tmp && mv session.env.tmp session.env
i=0
while [ ! -f go ] && [ $i -lt 2400 ]; do i=$((i + 1)); sleep 0.05; done
"#;

const AGENT_TOOLS: &[&str] = &[
    "approval",
    "dialog",
    "hibernate",
    "receive",
    "send",
    "time",
    "todo_add",
    "todo_done",
    "todo_list",
    "todo_remove",
];

const OPERATOR_TOOLS: &[&str] = &[
    "approvals",
    "approve",
    "chamber_status",
    "deny",
    "list_chambers",
    "pause",
    "read_messages",
    "resume",
    "send_message",
    "todo_add",
    "todo_list",
    "wake",
];

/// `cryo-agent ARGS` with the session's environment read from `session.env`.
fn agent_command(env: &Env, c: &Chamber, args: &[&str]) -> std::process::Command {
    let mut cmd = env.command(bin("cryo-agent"));
    cmd.args(args).current_dir(&c.dir);
    for line in c.read("session.env").lines() {
        if let Some((k, v)) = line.split_once('=') {
            cmd.env(k, v);
        }
    }
    cmd
}

fn mail_waiting(env: &Env, chamber: &str) -> u64 {
    let list = env.cryoctl(&["chamber", "list", "--json"]).json();
    list.as_array().unwrap().iter().find(|c| c["name"] == chamber).and_then(|c| c["mail_waiting"].as_u64()).unwrap_or(0)
}

/// The properties of a tool's input schema, sorted.
fn properties(tools: &[Value], name: &str) -> Vec<String> {
    let t = tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no tool {name}"));
    assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    assert!(t["description"].as_str().is_some_and(|d| d.len() > 20), "{name} has no description: {t}");
    let mut p: Vec<String> =
        t["inputSchema"]["properties"].as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    p.sort();
    p
}

#[test]
fn agent_tools_speak_the_protocol_inside_a_session() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("m", PUBLISH_AND_WAIT, "");
    env.cryoctl(&["chamber", "start", "m"]).ok();
    wait_until("the session's environment", || c.read("session.env").contains("CRYO_SESSION_TOKEN="));
    let mut m = StdioClient::start(agent_command(&env, &c, &["mcp"]));
    assert_eq!(m.info["serverInfo"]["name"], "cryo", "{}", m.info);
    let instructions = m.info["instructions"].as_str().unwrap_or_default();
    assert!(instructions.contains("hibernate") && instructions.contains("answer every received message"));

    // Tools named and shaped after the CLI.
    assert_eq!(m.tool_names(), AGENT_TOOLS);
    let tools = m.request("tools/list", json!({}))["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(properties(&tools, "hibernate"), ["complete", "exit_code", "linger_secs", "summary"]);
    assert_eq!(properties(&tools, "send"), ["question", "subject", "text"]);
    assert_eq!(properties(&tools, "dialog"), ["all", "last"]);
    assert_eq!(properties(&tools, "todo_add"), ["at", "cron", "every", "missed", "precheck", "text"]);
    assert_eq!(properties(&tools, "todo_done"), ["id"]);
    assert_eq!(properties(&tools, "todo_remove"), ["id"]);
    assert_eq!(properties(&tools, "time"), ["expr"]);
    assert!(properties(&tools, "receive").is_empty() && properties(&tools, "todo_list").is_empty());
    let send = tools.iter().find(|t| t["name"] == "send").unwrap();
    assert_eq!(send["inputSchema"]["required"], json!(["text"]));
    let hibernate = tools.iter().find(|t| t["name"] == "hibernate").unwrap();
    assert!(hibernate["description"].as_str().unwrap().contains("LAST thing you do"));

    let r = m.call("time", json!({ "expr": "+2h" }));
    assert!(!is_error(&r) && r["structuredContent"]["in"] == "2h", "{r}");

    // A bad `at` is a tool error with the CLI's own line.
    let r = m.call("todo_add", json!({ "text": "x", "at": "not a time" }));
    assert!(is_error(&r), "{r}");
    let cli = agent_command(&env, &c, &["todo", "add", "x", "--at", "not a time"]).output().unwrap();
    let line = String::from_utf8_lossy(&cli.stderr).trim().to_string();
    assert!(!cli.status.success());
    assert_eq!(Some(text(&r).as_str()), line.strip_prefix("cryo-agent: "), "{r}");

    let r = m.call("todo_add", json!({ "text": "later", "at": "+1h" }));
    assert!(!is_error(&r), "{r}");
    assert_eq!(r["structuredContent"]["todo"]["id"], 1, "{r}");
    assert_eq!(r["structuredContent"]["todo"]["state"], "pending", "{r}");
    assert!(text(&r).starts_with("added TODO 1: later (at "), "{r}");

    // Unread mail refuses the hibernate, as a tool error that says why.
    c.write_inbox(1, "are you there?");
    wait_until("cryod to see the mail", || mail_waiting(&env, "m") == 1);
    let r = m.call("hibernate", json!({ "summary": "too early" }));
    assert!(is_error(&r) && text(&r).contains("unread"), "{r}");

    let r = m.call("receive", json!({}));
    assert!(!is_error(&r), "{r}");
    assert!(r["structuredContent"]["messages"][0]["body"].as_str().unwrap().contains("are you there?"), "{r}");
    let r = m.call("send", json!({ "text": "yes, here: \"quotes\" and $HOME stay as typed", "question": true }));
    assert!(!is_error(&r) && r["structuredContent"]["reply"] == true, "{r}");
    assert!(r["structuredContent"]["file"].as_str().unwrap().starts_with("messages/outbox/"), "{r}");
    let r = m.call("dialog", json!({ "last": 2 }));
    let messages = r["structuredContent"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{r}");
    assert_eq!(messages[1]["direction"], "out");
    assert_eq!(messages[1]["question"], true);
    let r = m.call("todo_list", json!({}));
    assert_eq!(r["structuredContent"]["todos"].as_array().unwrap().len(), 1, "{r}");
    let r = m.call("todo_remove", json!({ "id": 99 }));
    assert!(is_error(&r) && text(&r).contains("99"), "{r}");
    let r = m.call("hibernate", json!({ "exit_code": 0 }));
    assert!(is_error(&r), "{r}");
    // Arguments of the wrong shape: a tool error the model can act on.
    let r = m.call("todo_done", json!({ "id": "one" }));
    assert!(is_error(&r) && text(&r).contains("expected u64"), "{r}");
    let r = m.call("send", json!({ "text": "x", "cc": "someone" }));
    assert!(is_error(&r) && text(&r).contains("unknown field"), "{r}");

    let r = m.call("hibernate", json!({ "summary": "answered through MCP" }));
    assert!(!is_error(&r) && r["structuredContent"]["accepted"] == true, "{r}");
    std::fs::write(c.dir.join("go"), "").unwrap();
    c.wait_ended(1);
    assert!(c.cryo_log().contains("hibernate accepted"), "{}", c.cryo_log());
    assert!(c.outbox().iter().any(|m| m.contains("\"quotes\" and $HOME stay as typed")), "{:?}", c.outbox());
    assert!(m.finish().success());
}

#[test]
fn agent_tools_outside_a_session_refuse_all_but_time() {
    let env = Env::new();
    let mut m = StdioClient::start({
        let mut c = env.command(bin("cryo-agent"));
        c.arg("mcp");
        c
    });
    let r = m.call("send", json!({ "text": "hello" }));
    assert!(is_error(&r) && text(&r).contains("not inside a cryo session"), "{r}");
    let r = m.call("time", json!({}));
    assert!(!is_error(&r) && r["structuredContent"]["zone"] == "UTC", "{r}");
    assert!(m.finish().success());
}

#[test]
fn cryoctl_mcp_lists_sends_wakes_and_reads() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("a", ANSWERING_AGENT, "");
    std::fs::write(c.dir.join("plan.md"), "# The plan\n\nShip it.\n").unwrap();
    env.cryoctl(&["chamber", "start", "a"]).ok();
    c.wait_ended(1);
    let mut m = StdioClient::start({
        let mut cmd = env.command(bin("cryoctl"));
        cmd.arg("mcp");
        cmd
    });
    assert_eq!(m.info["serverInfo"]["name"], "cryo", "{}", m.info);
    assert_eq!(m.tool_names(), OPERATOR_TOOLS);

    let r = m.call("list_chambers", json!({}));
    assert_eq!(r["structuredContent"]["chambers"][0]["name"], "a", "{r}");
    assert!(text(&r).starts_with("a: "), "{r}");
    let r = m.call("chamber_status", json!({ "chamber": "a" }));
    assert_eq!(r["structuredContent"]["chamber"]["name"], "a", "{r}");
    assert!(!r["structuredContent"]["sessions"].as_array().unwrap().is_empty(), "{r}");
    let r = m.call("chamber_status", json!({ "chamber": "nope" }));
    assert!(is_error(&r) && text(&r).contains("nope"), "{r}");

    // A message lands in the inbox and wakes the agent, which answers.
    let r = m.call("send_message", json!({ "chamber": "a", "text": "ping from mcp" }));
    assert!(!is_error(&r), "{r}");
    wait_until("the agent's answer", || c.outbox().iter().any(|m| m.contains("got: ping from mcp")));
    assert!(c.messages("messages/inbox/archive").iter().any(|(_, t)| t.contains("ping from mcp")));
    let r = m.call("read_messages", json!({ "chamber": "a", "last": 2 }));
    let bodies: Vec<&str> =
        r["structuredContent"]["messages"].as_array().unwrap().iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert!(bodies.iter().any(|b| b.contains("got: ping from mcp")), "{r}");
    // A count sent as text (some clients send every argument so) is taken.
    let r = m.call("read_messages", json!({ "chamber": "a", "last": "1" }));
    assert_eq!(r["structuredContent"]["messages"].as_array().map(Vec::len), Some(1), "{r}");

    let r = m.call("todo_add", json!({ "chamber": "a", "text": "check later", "at": "+3h" }));
    assert!(!is_error(&r) && text(&r).contains("check later"), "{r}");
    let r = m.call("todo_list", json!({ "chamber": "a" }));
    assert!(r["structuredContent"]["todos"].as_array().unwrap().iter().any(|t| t["text"] == "check later"), "{r}");
    let r = m.call("todo_add", json!({ "chamber": "a", "text": "x", "at": "not a time" }));
    assert!(is_error(&r), "{r}");

    let r = m.call("pause", json!({ "chamber": "a" }));
    assert_eq!(r["structuredContent"]["chamber"]["state"], "paused", "{r}");
    let r = m.call("resume", json!({ "chamber": "a" }));
    assert!(!is_error(&r) && r["structuredContent"]["already"] == false, "{r}");
    let ended = c.ended();
    let r = m.call("wake", json!({ "chamber": "a", "message": "wake note" }));
    assert!(!is_error(&r), "{r}");
    wait_until("the woken agent's answer", || c.outbox().iter().any(|m| m.contains("got: wake note")));
    c.wait_ended(ended + 1);

    // Resources: every chamber's plan, notes and log.
    let r = m.request("resources/list", json!({}));
    let uris: Vec<&str> =
        r["result"]["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["cryo://a/plan.md", "cryo://a/NOTES.md", "cryo://a/log"], "{r}");
    let r = m.request("resources/read", json!({ "uri": "cryo://a/plan.md" }));
    assert_eq!(r["result"]["contents"][0]["text"], "# The plan\n\nShip it.\n", "{r}");
    let r = m.request("resources/read", json!({ "uri": "cryo://a/log" }));
    assert!(r["result"]["contents"][0]["text"].as_str().unwrap().contains("hibernate accepted"), "{r}");
    let r = m.request("resources/read", json!({ "uri": "cryo://a/../../etc/passwd" }));
    assert!(r.get("error").is_some(), "{r}");
    assert!(m.finish().success());
}

#[test]
fn cryoctl_mcp_read_only_offers_only_reading_tools() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("a", ANSWERING_AGENT, "");
    let mut m = StdioClient::start({
        let mut cmd = env.command(bin("cryoctl"));
        cmd.args(["mcp", "--read-only"]);
        cmd
    });
    assert_eq!(m.tool_names(), ["approvals", "chamber_status", "list_chambers", "read_messages", "todo_list"]);
    let r = m.request("tools/call", json!({ "name": "send_message", "arguments": { "chamber": "a", "text": "x" } }));
    let refused = r.get("error").is_some() || r["result"]["isError"] == true;
    assert!(refused, "send_message was not refused: {r}");
    assert!(c.messages("messages/inbox").is_empty(), "a message landed anyway");
    let r = m.call("list_chambers", json!({}));
    assert_eq!(r["structuredContent"]["chambers"][0]["name"], "a", "{r}");
    assert!(m.finish().success());
}

#[test]
fn hub_mcp_over_http_needs_the_token() {
    let env = Env::new();
    let _d = env.start_daemon();
    env.chamber("a", ANSWERING_AGENT, "");
    let hub = Hub::of(&env);
    let post = |token: Option<&str>, body: Value| {
        let body = body.to_string();
        let headers = ["Accept: application/json, text/event-stream", "MCP-Protocol-Version: 2025-06-18"];
        hub.raw("POST", "/mcp", token, &headers, Some(&body))
    };
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": cryo_tests::mcp::PROTOCOL, "capabilities": {},
        "clientInfo": { "name": "cryo-tests", "version": "1" } } });
    assert_eq!(post(None, init.clone()).status, 401);
    assert_eq!(post(Some("wrong"), init.clone()).status, 401);
    let token = hub.token();
    let r = post(Some(&token), init);
    assert_eq!(r.status, 200, "{}{}", r.headers, r.body);
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "cryo", "{}", r.body);
    let r = post(Some(&token), json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }));
    let names: Vec<String> =
        r.json()["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().into()).collect();
    assert!(names.contains(&"list_chambers".to_string()) && names.contains(&"send_message".to_string()), "{names:?}");
    let call = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": { "name": "list_chambers", "arguments": {} } });
    let r = post(Some(&token), call);
    assert_eq!(r.json()["result"]["structuredContent"]["chambers"][0]["name"], "a", "{}", r.body);
    // Streamed answers (messages, the log) and refusals come through the
    // in-process Control server as over the socket.
    let request = |id: u64, method: &str, params: Value| {
        post(Some(&token), json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })).json()
    };
    let r = request(4, "tools/call", json!({ "name": "read_messages", "arguments": { "chamber": "a" } }));
    assert!(r["result"]["structuredContent"]["messages"].is_array() && r["result"]["isError"] != true, "{r}");
    let r = request(5, "tools/call", json!({ "name": "chamber_status", "arguments": { "chamber": "nope" } }));
    assert!(
        r["result"]["isError"] == true && r["result"]["content"][0]["text"].as_str().unwrap().contains("nope"),
        "{r}"
    );
    let r = request(6, "resources/read", json!({ "uri": "cryo://a/log" }));
    assert_eq!(r["result"]["contents"][0]["mimeType"], "text/plain", "{r}");
    assert!(r["result"]["contents"][0]["text"].is_string(), "{r}");
}
