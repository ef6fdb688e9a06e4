//! The readers, on lines captured from the pinned CLIs.

use super::*;

fn read(kind: Kind, model: Option<&str>, text: &str) -> (Vec<String>, Usage) {
    let mut r = Reader::new(kind, model.map(str::to_string));
    let lines = text.lines().flat_map(|l| r.line(l)).collect();
    (lines, r.usage)
}

/// Lines captured from Claude Code 2.1.330 against the scripted model.
#[test]
fn claude_stream() {
    let (t, u) = read(Kind::Claude, None, include_str!("../testdata/claude-stream.jsonl"));
    assert_eq!(u.model.as_deref(), Some("claude-opus-5-5"));
    assert_eq!(u.provider_session.as_deref(), Some("67d0929e-d211-4e51-954a-22e4a92a1a9a"));
    assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens), (70, 35, 0), "the result's totals");
    assert_eq!(u.cost_usd, Some(0.0009800000000000002));
    // Before the result, what the messages so far used.
    let mut r = Reader::new(Kind::Claude, None);
    for l in include_str!("../testdata/claude-stream.jsonl").lines().filter(|l| !l.contains("\"total_cost_usd\"")) {
        r.line(l);
    }
    assert!(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, "{:?}", r.usage);
    assert_eq!(r.usage.cost_usd, None);
    assert!(t.iter().any(|l| l.starts_with("[session 67d0929e")), "{t:?}");
    assert!(t.contains(&"→ mcp__cryo__send: {\"text\":\"hello from session 1, through MCP\"}".to_string()), "{t:?}");
    assert!(t.iter().any(|l| l.starts_with("← (loaded mcp__cryo__send)")), "{t:?}");
    assert!(t.iter().any(|l| l == "→ Bash: cryo-agent send 'hello from session 1'"), "{t:?}");
    assert!(t.iter().any(|l| l.starts_with("← sent: messages/outbox/")), "{t:?}");
    assert!(t.iter().any(|l| l == "[usage: 70 in (0 cached), 35 out, $0.0010]"), "{t:?}");
}

/// Lines captured from Codex 0.169.0.
#[test]
fn codex_events() {
    let (t, u) = read(Kind::Codex, Some("m1"), include_str!("../testdata/codex-events.jsonl"));
    assert_eq!(u.provider_session.as_deref(), Some("01a2099b-b164-71a3-a92a-210aefd3ddcd"));
    assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens, u.cost_usd), (40, 20, 0, None));
    assert!(t.contains(&"[thread 01a2099b-b164-71a3-a92a-210aefd3ddcd · model m1]".to_string()), "{t:?}");
    assert!(t.iter().any(|l| l.starts_with("error: Model metadata for `m1` not found")), "{t:?}");
    assert!(t.iter().any(|l| l.starts_with("→ cryo.send: {\"text\"")), "{t:?}");
    assert!(t.iter().any(|l| l.starts_with("→ $ /bin/bash -c \"cryo-agent send")), "{t:?}");
    assert!(t.iter().any(|l| l.starts_with("← sent: messages/outbox/")), "{t:?}");
}

/// Lines captured from OpenCode 1.18.33.
#[test]
fn opencode_events() {
    let (t, u) = read(Kind::OpenCode, None, include_str!("../testdata/opencode-events.jsonl"));
    assert_eq!(u.provider_session.as_deref(), Some("ses_df66415c7ffe43h2zsKRwpH3bI"));
    assert_eq!((u.input_tokens, u.output_tokens), (30, 15), "{u:?}");
    assert_eq!(u.cost_usd, None, "a reported cost of 0 is no cost");
    assert!(t.iter().any(|l| l.starts_with("→ cryo_send: {\"text\"")), "{t:?}");
    assert!(t.iter().any(|l| l == "→ bash: cryo-agent send 'hello from session 1'"), "{t:?}");
    assert!(t.iter().any(|l| l == "← hibernating: next wake at 2026-11-23T18:12:30+00:00"), "{t:?}");
}

/// Qwen Code 0.24.4's stream-json is Claude Code's; a deferred (MCP)
/// tool called through its `tool_call` shows as that tool.
#[test]
fn qwen_stream() {
    let lines = [
        r#"{"type":"system","subtype":"init","session_id":"e653","cwd":"/c","mcp_servers":[{"name":"cryo","status":"connected"}],"model":"m1","permission_mode":"yolo","qwen_code_version":"0.24.4"}"#,
        r#"{"type":"assistant","session_id":"e653","parent_tool_use_id":null,"message":{"id":"a1","type":"message","role":"assistant","model":"m1","content":[{"type":"tool_use","id":"call_1","name":"tool_call","input":{"name":"mcp__cryo__send","arguments":{"text":"hi"}}}],"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":0,"total_tokens":15}}}"#,
        r#"{"type":"user","session_id":"e653","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","is_error":false,"content":"sent: messages/outbox/x.md"}]}}"#,
        r#"{"type":"result","subtype":"success","session_id":"e653","is_error":false,"result":"Done.","usage":{"input_tokens":20,"output_tokens":10,"cache_read_input_tokens":0,"total_tokens":30}}"#,
    ];
    let (t, u) = read(Kind::Qwen, None, &lines.join("\n"));
    assert_eq!((u.model.as_deref(), u.provider_session.as_deref()), (Some("m1"), Some("e653")));
    assert_eq!((u.input_tokens, u.output_tokens, u.cost_usd), (20, 10, None), "no cost: the price table's");
    assert!(t.contains(&"→ mcp__cryo__send: {\"text\":\"hi\"}".to_string()), "{t:?}");
    assert!(t.contains(&"← sent: messages/outbox/x.md".to_string()), "{t:?}");
}

/// Gemini CLI 0.61.0's stream-json, in the shapes its source emits and
/// the scripted model's runs showed: the assistant's words come in
/// pieces and are gathered into one line.
#[test]
fn gemini_stream() {
    let lines = [
        r#"{"type":"init","timestamp":"2026-11-27T04:50:26.274Z","session_id":"6310a789","model":"m1"}"#,
        r#"{"type":"message","timestamp":"t","role":"user","content":"- session: 1"}"#,
        r#"{"type":"tool_use","timestamp":"t","tool_name":"mcp_cryo_send","tool_id":"c1","parameters":{"text":"hi"}}"#,
        r#"{"type":"tool_result","timestamp":"t","tool_id":"c1","status":"success","output":"sent: messages/outbox/x.md"}"#,
        r#"{"type":"tool_use","timestamp":"t","tool_name":"run_shell_command","tool_id":"c2","parameters":{"command":"false"}}"#,
        r#"{"type":"tool_result","timestamp":"t","tool_id":"c2","status":"error","error":{"type":"TOOL_EXECUTION_ERROR","message":"exit 1"}}"#,
        r#"{"type":"message","timestamp":"t","role":"assistant","content":"All ","delta":true}"#,
        r#"{"type":"message","timestamp":"t","role":"assistant","content":"done.","delta":true}"#,
        r#"{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":45,"input_tokens":30,"output_tokens":15,"cached":4,"input":26,"duration_ms":67,"tool_calls":2}}"#,
    ];
    let (t, u) = read(Kind::Gemini, None, &lines.join("\n"));
    assert_eq!((u.model.as_deref(), u.provider_session.as_deref()), (Some("m1"), Some("6310a789")));
    assert_eq!((u.input_tokens, u.output_tokens, u.cached_tokens, u.cost_usd), (30, 15, 4, None));
    assert_eq!(
        t,
        [
            "[session 6310a789 · model m1]",
            "→ mcp_cryo_send: {\"text\":\"hi\"}",
            "← sent: messages/outbox/x.md",
            "→ run_shell_command: false",
            "← error: exit 1",
            "assistant: All done.",
            "[usage: 30 in (4 cached), 15 out]",
        ]
    );
    let mut r = Reader::new(Kind::Gemini, None);
    r.line(r#"{"type":"result","status":"error","error":{"type":"FatalError","message":"429 Too Many Requests"},"stats":{}}"#);
    assert!(r.limited.is_some());
}

/// Lines captured from Pi 0.73.1 (`--mode json`) against a fake
/// OpenAI-compatible server: one `bash` call, then text.
#[test]
fn pi_events() {
    let (t, u) = read(Kind::Pi, None, include_str!("../testdata/pi-events.jsonl"));
    assert_eq!(u.provider_session.as_deref(), Some("01a21b6b-c06c-717c-83e1-61e36fe41fbd"));
    assert_eq!(u.model.as_deref(), Some("fake-model"));
    // Two model calls: 100 in and 10 out, then 120 in (20 cached) and 5 out.
    assert_eq!((u.input_tokens, u.cached_tokens, u.output_tokens, u.cost_usd), (220, 20, 15, None), "{u:?}");
    assert_eq!(t.first().map(String::as_str), Some("[session 01a21b6b-c06c-717c-83e1-61e36fe41fbd · model ?]"));
    assert!(t.contains(&"→ bash: echo hi".to_string()), "{t:?}");
    assert!(t.contains(&"← hi".to_string()), "{t:?}");
    assert!(t.contains(&"assistant: Done.".to_string()), "{t:?}");
    assert!(t.last().is_some_and(|l| l.starts_with("[usage: 220 in (20 cached), 15 out")), "{t:?}");
    let mut r = Reader::new(Kind::Pi, None);
    r.line(r#"{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000,"errorMessage":"429 Rate limit reached for requests. Please try again in 600s."}"#);
    assert!(r.limited.is_some(), "a 429 it would retry ends the session as limited");
}

/// An ACP agent as cryod's client writes it (Qwen Code 0.24.4's
/// `session/update`s, captured over ACP): usage per model request in
/// `_meta.usage`; a tool call shown once, with its input, whichever
/// update carries it; a shell's own output.
#[test]
fn acp_lines() {
    let lines = [
        r#"{"type":"session","sessionId":"ce32","model":"m1","resumed":false}"#,
        r#"{"type":"update","update":{"sessionUpdate":"tool_call","toolCallId":"call_61","status":"pending","title":"Shell","rawInput":{},"_meta":{"toolName":"run_shell_command","phase":"preparing"}}}"#,
        r#"{"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":""},"_meta":{"usage":{"inputTokens":161,"outputTokens":7,"totalTokens":168,"thoughtTokens":0,"cachedReadTokens":100}}}}"#,
        r#"{"type":"update","update":{"sessionUpdate":"tool_call","toolCallId":"call_61","status":"pending","title":"touch x","rawInput":{"command":"touch x"},"_meta":{"toolName":"run_shell_command"}}}"#,
        r#"{"type":"permission","tool":"touch x","chose":"proceed_once"}"#,
        r#"{"type":"update","update":{"sessionUpdate":"tool_call_update","toolCallId":"call_61","status":"in_progress","title":"Shell: touch x","rawInput":{"command":"touch x"}}}"#,
        r#"{"type":"update","update":{"sessionUpdate":"tool_call_update","toolCallId":"call_61","status":"completed","content":[{"type":"content","content":{"type":"text","text":"Command: touch x\nOutput: (empty)"}}],"rawOutput":{"type":"shell_result","output":"made x"}}}"#,
        r#"{"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Do"}}}"#,
        r#"{"type":"update","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"ne."}}}"#,
        r#"{"type":"result","result":{"stopReason":"end_turn"}}"#,
    ];
    let (t, u) = read(Kind::Acp, None, &lines.join("\n"));
    assert_eq!((u.provider_session.as_deref(), u.model.as_deref()), (Some("ce32"), Some("m1")));
    assert_eq!((u.input_tokens, u.cached_tokens, u.output_tokens), (161, 100, 7));
    assert_eq!(
        t,
        [
            "[session ce32 · model m1]",
            "→ run_shell_command: touch x",
            "permission: touch x (proceed_once)",
            "← made x",
            "assistant: Done.",
            "[usage: 161 in (100 cached), 7 out]",
        ]
    );
    // An agent that reports usage with its result only (OpenCode).
    let (_, u) = read(
        Kind::Acp,
        None,
        r#"{"type":"result","result":{"stopReason":"end_turn","usage":{"inputTokens":103,"outputTokens":7}}}"#,
    );
    assert_eq!((u.input_tokens, u.output_tokens), (103, 7));
}

/// Claude Code 2.1.330 against a Messages API answering 429 with
/// `retry-after: 20` (it retries) and then `600` (it gives up).
#[test]
fn claude_at_the_providers_limit() {
    let mut r = Reader::new(Kind::Claude, None);
    let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":20553,"error_status":429,"error":"rate_limit","session_id":"s1"}"#;
    assert_eq!(r.line(retry), ["limit: the provider refused (429); Claude Code retries in 20 s"]);
    assert_eq!(r.limited, None, "a retry inside the session is not the end");
    let result = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error_type":"rate_limit_error","terminal_reason":"api_error","result":"API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later.","session_id":"s1","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}"#;
    r.line(result);
    let l = r.limited.clone().expect("limited");
    assert_eq!((l.resets_at, l.retry_after_ms), (None, Some(20553)));
    assert!(l.text.starts_with("API Error: Request rejected (429)"));
    let mut r = Reader::new(Kind::Claude, None);
    let window = r#"{"type":"result","is_error":true,"api_error":"usage_limit_reached","api_error_params":{"rate_limit_info":{"status":"rejected","resetsAt":1795460000}},"result":"limit reached"}"#;
    r.line(window);
    assert_eq!(r.limited.expect("limited").resets_at, Some(1795460000));
}

/// Codex 0.169.0 against a Responses API answering 429 (`retry-after:
/// 600`): it says so once, then waits.
#[test]
fn codex_at_the_providers_limit() {
    let mut r = Reader::new(Kind::Codex, None);
    r.line(r#"{"type":"turn.started"}"#);
    assert_eq!(r.limited, None);
    let t = r.line(
        r#"{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)"}"#,
    );
    assert!(t[0].starts_with("error: Reconnecting... 1/5"), "{t:?}");
    assert!(r.limited.expect("limited").text.contains("429 Too Many Requests"));
}

/// OpenCode 1.18.33 with `--print-logs` against a Chat Completions API
/// answering 429.
#[test]
fn opencode_at_the_providers_limit() {
    let line = r#"timestamp=2026-11-23T18:54:56.547Z level=ERROR run=4e8ac471 message="stream error" providerID=local modelID=m1 session.id=ses_x small=false agent=build mode=primary error.error="AI_APICallError: Rate limit reached. Please try again later.""#;
    let l = opencode_log_limit(line).expect("limited");
    assert_eq!(l.text, "AI_APICallError: Rate limit reached. Please try again later.");
    assert_eq!(opencode_log_limit("timestamp=… level=WARN message=\"slow\""), None);
    assert_eq!(opencode_log_limit("level=ERROR message=\"stream error\" error.error=\"disk full\""), None);
    // A timestamp's milliseconds are not a status (a chamber was held for one).
    let models = r#"timestamp=2026-11-23T19:54:29.429Z level=ERROR run=c182c9d2 message="Failed to fetch models.dev" cause="Unable to connect""#;
    assert_eq!(opencode_log_limit(models), None);
    let gemini = r#"Attempt 1 failed with status 429. Retrying with backoff... _ApiError: {"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
    assert!(log_limit(Kind::Gemini, gemini).expect("limited").text.starts_with("Attempt 1 failed"));
    assert_eq!(log_limit(Kind::Gemini, "Attempt 2 failed with status 503. Retrying"), None);
    assert_eq!(log_limit(Kind::Claude, gemini), None, "only the kinds whose logs are read");
    assert!(!says_limit("request 14291 failed") && says_limit("last status: 429 Too Many Requests"));
}

#[test]
fn other_lines_pass_through_and_results_are_clipped() {
    let (t, _) = read(Kind::Codex, None, "WARNING: something\n\n");
    assert_eq!(t, ["WARNING: something"]);
    let mut out = Vec::new();
    result(&mut out, "a\nb\nc\nd\ne", true);
    assert_eq!(out, ["← error: a", "  b", "  c", "  … 2 more line(s)"]);
    let long = "x".repeat(500);
    assert_eq!(clip(&long).chars().count(), LINE_CHARS + 1);
}

#[test]
fn prices_cost_the_tokens() {
    let p = Price { input: 3.0, output: 15.0, cached: Some(0.3), cache_write: None };
    let mut u = Usage { input_tokens: 1_000_000, cached_tokens: 500_000, output_tokens: 100_000, ..Usage::default() };
    assert!((p.cost(&u) - (1.5 + 0.15 + 1.5)).abs() < 1e-9);
    // Issue 62: Anthropic's cache writes at $3.75 a million for Sonnet, not $3.
    let sonnet = crate::events::default_prices().into_iter().find(|(m, _)| *m == "claude-sonnet-4-5").unwrap().1;
    let writes = Usage { input_tokens: 1_000_000, cache_write_tokens: 1_000_000, ..Usage::default() };
    assert!((sonnet.cost(&writes) - 3.75).abs() < 1e-9, "{}", sonnet.cost(&writes));
    let mut mine = std::collections::BTreeMap::new();
    mine.insert("m1".to_string(), Price { input: 1.0, output: 2.0, cached: None, cache_write: None });
    let prices = Prices::new(&mine);
    assert_eq!(prices.cost(&u), None, "no model, no cost");
    u.model = Some("local/m1".into());
    assert!((prices.cost(&u).unwrap() - (1.0 + 0.2)).abs() < 1e-9);
    u.model = Some("gpt-5".into());
    assert!(prices.cost(&u).is_some(), "a shipped price");
    u.model = Some("unknown".into());
    assert_eq!(prices.cost(&u), None);
}
