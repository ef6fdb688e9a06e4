//! Issue 43: what the gateway and the stream see, cryod reports. A real
//! CLI whose tool hangs past `stall_after` (no model request, no event)
//! ends `stalled`; one that makes the same tool call `loop_after` times in
//! a row ends `looping`. Both are outcomes of their own in the ledger,
//! their TODO is retried like a failure's, and the operator is told.

use std::time::{Duration, Instant};

use cryo_tests::model::{ModelServer, Script};
use cryo_tests::{Env, wait_until_within};

use crate::agents::{SESSION_DEADLINE, claude_provider, cli, codex_provider, opencode_provider};

/// One session of `bin` doing `steps` under `settings`: its outcome as the
/// ledger has it, how long it ran, and cryod's message to the operator.
fn caught(
    bin: &str,
    setup: impl FnOnce(&Env, &ModelServer) -> String,
    steps: &[&str],
    settings: &str,
) -> Option<(String, Duration, String)> {
    let path = cli(bin)?;
    let model = ModelServer::start(Script::new().on("- session: 1\n", steps));
    let env = Env::new();
    let provider = setup(&env, &model);
    let _d = env.start_daemon();
    let toml = format!("agent = \"{}\"\n{settings}\n[provider]\n{provider}\n", path.display());
    let c = env.chamber(bin, "", &toml);
    let began = Instant::now();
    env.cryoctl(&["chamber", "start", bin]).ok();
    wait_until_within(SESSION_DEADLINE, "the session to end", || c.ended() >= 1);
    let ran = began.elapsed();
    let status = env.cryoctl(&["chamber", "status", bin, "--json"]).json();
    let outcome = status[0]["sessions"][0]["outcome"].as_str().unwrap_or_default().to_string();
    let diag = format!("{status}\ncryo.log:\n{}\nmodel:\n{}", c.cryo_log(), model.transcript());
    assert!(!c.cryo_log().contains("hibernate --complete accepted"), "it should not get that far:\n{diag}");
    wait_until_within(Duration::from_secs(10), "cryod's message", || !c.fallbacks().is_empty());
    Some((outcome, ran, c.fallbacks().join("\n---\n") + "\n" + &diag))
}

#[test]
fn a_tool_that_hangs_past_stall_after_ends_the_session_stalled() {
    // Inside a shell: Claude Code was seen not to block on a bare `sleep`.
    let steps = ["sh -c 'sleep 120'", "cryo-agent hibernate --complete --summary woke"];
    let Some((outcome, ran, told)) = caught("claude", claude_provider, &steps, "stall_after = \"3s\"\n") else {
        return;
    };
    assert_eq!(outcome, "stalled: no model request and no agent event for 3s", "{told}");
    assert!(ran < Duration::from_secs(100), "ended at the stall, not at the sleep's end ({ran:?})");
    assert!(told.contains("Session 1 stalled"), "{told}");
}

/// The same shell command, again and again: `loop_after = 3` ends the
/// session at the third, for each known kind (each tells its tool calls in
/// its own events).
fn looping(bin: &str, setup: impl FnOnce(&Env, &ModelServer) -> String) {
    let steps =
        ["echo again", "echo again", "echo again", "echo again", "echo again", "cryo-agent hibernate --complete"];
    let Some((outcome, _, told)) = caught(bin, setup, &steps, "loop_after = 3\n") else { return };
    assert!(outcome.starts_with("looping: the same call 3 times in a row ("), "{told}");
    assert!(outcome.contains("echo again"), "{told}");
    assert!(told.contains("Session 1 was caught in a loop"), "{told}");
}

#[test]
fn claude_code_repeating_one_call_loop_after_times_ends_looping() {
    looping("claude", claude_provider);
}

#[test]
fn codex_repeating_one_call_loop_after_times_ends_looping() {
    looping("codex", codex_provider);
}

#[test]
fn opencode_repeating_one_call_loop_after_times_ends_looping() {
    looping("opencode", opencode_provider);
}
