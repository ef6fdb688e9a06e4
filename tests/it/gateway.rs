//! Issue 43: the provider gateway. The real CLIs reach the scripted model
//! server only through cryod's gateway: their environment holds no key, the
//! ledger holds what the upstream said each response used, a 429 holds the
//! account exactly as long as the provider said, and a session's spending
//! line refuses the request past it.

use std::time::Duration;

use cryo_tests::model::{ModelServer, Script};
use cryo_tests::{Chamber, Env, wait_until_within};

use crate::agents::{SESSION_DEADLINE, claude_provider, cli, codex_provider, opencode_provider};

/// What the session's shell, and the CLI that started it, hold in their
/// environment: written by the agent's own tool call.
const LOOK: &str = "cat /proc/self/environ /proc/$PPID/environ | tr '\\000' '\\n' > seen-env.txt";

pub(crate) fn diag(c: &Chamber, model: &ModelServer) -> String {
    format!(
        "cryo.log:\n{}\ncryo-agent.log:\n{}\nmodel:\n{}",
        c.cryo_log(),
        c.read("cryo-agent.log"),
        model.transcript()
    )
}

/// One session of `bin` through the gateway: it looks at its environment
/// and completes. The key is nowhere in it; the upstream got the real key;
/// the ledger holds exactly what the upstream reported.
fn keyless_and_counted(bin: &str, setup: impl FnOnce(&Env, &ModelServer) -> String) {
    let Some(path) = cli(bin) else { return };
    let model = ModelServer::start(
        Script::new().on("- session: 1\n", &[LOOK, "cryo-agent hibernate --complete --summary looked"]),
    );
    let env = Env::new();
    let provider = setup(&env, &model);
    // $0.01 per 10 input tokens and per 5 output tokens: each response of
    // the scripted model costs $0.02, whatever its model's name.
    let price = "input = 1000.0\noutput = 2000.0\n";
    env.daemon_config(&format!("[prices.m1]\n{price}[prices.\"claude-opus-5-5\"]\n{price}"));
    let _d = env.start_daemon();
    let toml = format!("agent = \"{}\"\nkeep_exchanges = true\n\n[provider]\n{provider}\n", path.display());
    let c = env.chamber(bin, "", &toml);
    env.cryoctl(&["chamber", "start", bin]).ok();
    wait_until_within(SESSION_DEADLINE, "the session to end", || c.ended() >= 1);
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c, &model));
    let seen = c.read("seen-env.txt");
    assert!(seen.contains("CRYO_SESSION_TOKEN="), "the look ran: {seen}\n{}", diag(&c, &model));
    assert!(!seen.contains("sk-cryo-test"), "the key reached the agent:\n{seen}");
    // Its key variable holds the session's token instead (Codex gets the
    // gateway's address by `-c`, the others in their environment).
    assert!(seen.contains("cryo-gw-"), "the CLI holds the session's token:\n{seen}");
    if bin != "codex" {
        assert!(seen.contains("/cryo/cryo-gw-"), "the CLI was pointed at the gateway:\n{seen}");
    }
    // The upstream got the real key, on every request.
    let requests = model.seen();
    assert!(!requests.is_empty());
    for s in &requests {
        let key = s.headers.iter().any(|(k, v)| {
            (k == "x-api-key" && v == "sk-cryo-test") || (k == "authorization" && v == "Bearer sk-cryo-test")
        });
        assert!(key, "{} reached the upstream without the real key: {:?}", s.path, s.headers);
        assert!(!s.headers.iter().any(|(_, v)| v.contains("cryo-gw-")), "the session's token went upstream");
    }
    // The ledger: what the upstream sent (10 in and 5 out a response), priced.
    let n = requests.len() as u64;
    let status = env.cryoctl(&["chamber", "status", bin, "--json"]).json();
    let s = &status[0]["sessions"][0];
    assert_eq!((s["input_tokens"].as_u64(), s["output_tokens"].as_u64()), (Some(10 * n), Some(5 * n)), "{s}");
    let cost = s["cost_usd"].as_f64().unwrap_or_default();
    assert!((cost - 0.02 * n as f64).abs() < 1e-9, "cost {cost} for {n} requests: {s}");
    assert!(s["provider_session"].as_str().is_some_and(|p| !p.is_empty()), "{s}");
    // `/metrics` has the same, by chamber, account and model, as an
    // independent OpenMetrics parser reads it.
    let metrics = crate::metrics::parse(&crate::metrics::get_openmetrics(&crate::hub::Hub::of(&env)).body);
    let sum = |name: &str, kind: &str| -> f64 {
        let mine = format!("chamber=\"{bin}\"");
        metrics
            .iter()
            .filter(|(k, _)| k.starts_with(name) && k.contains(&mine) && k.contains(kind))
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(sum("cryo_model_tokens_total{", "type=\"input\""), (10 * n) as f64, "{metrics:#?}");
    assert_eq!(sum("cryo_model_tokens_total{", "type=\"output\""), (5 * n) as f64, "{metrics:#?}");
    assert_eq!(sum("cryo_model_responses_total{", "model="), n as f64, "{metrics:#?}");
    assert!((sum("cryo_model_cost_usd_total{", "model=") - 0.02 * n as f64).abs() < 1e-9, "{metrics:#?}");
    // Each exchange kept, with neither the key nor the token in it
    // (`gateway::kept::tests` redacts one that a body carries).
    let kept = c.read(".cryo/exchanges/1.jsonl");
    let lines: Vec<serde_json::Value> = kept.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len() as u64, n, "{kept}");
    assert!(lines.iter().all(|l| l["status"] == 200 && l["request"]["model"].is_string()), "{kept}");
    assert!(!kept.contains("sk-cryo-test") && !kept.contains("cryo-gw-"), "{kept}");
    // Nothing of the token or the key in cryo's own logs.
    let logs = format!("{}{}", c.cryo_log(), std::fs::read_to_string(env.path("state/cryod.log")).unwrap_or_default());
    assert!(!logs.contains("sk-cryo-test") && !logs.contains("cryo-gw-"), "{logs}");
}

#[test]
fn claude_code_through_the_gateway_holds_no_key_and_is_counted_at_the_source() {
    keyless_and_counted("claude", claude_provider);
}

#[test]
fn codex_through_the_gateway_holds_no_key_and_is_counted_at_the_source() {
    keyless_and_counted("codex", codex_provider);
}

#[test]
fn opencode_through_the_gateway_holds_no_key_and_is_counted_at_the_source() {
    keyless_and_counted("opencode", opencode_provider);
}

/// A 429 with `retry-after: 90`: the session ends limited, the account is
/// held 90 s (not cryod's default), status says why, and the work runs
/// after it.
#[test]
fn a_429_with_retry_after_90_holds_the_account_exactly_that_long() {
    let Some(path) = cli("claude") else { return };
    let steps = ["cryo-agent send 'after the wait'", "cryo-agent hibernate --complete --summary done"];
    let model = ModelServer::start(Script::new().on("- chamber: held\n", &steps));
    let env = Env::new();
    // cryod's own default would be 20 s: the provider's 90 s stands.
    env.daemon_config("limit_hold_seconds = 20\n[hub]\nbind = \"127.0.0.1:0\"\n");
    let _d = env.start_daemon();
    let provider = claude_provider(&env, &model);
    let c = env.chamber("held", "", &format!("agent = \"{}\"\n\n[provider]\n{provider}\n", path.display()));
    c.seed_history();
    c.write_todos(r#"[{"id":1,"text":"work","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
    model.limit_saying("sk-cryo-test", Duration::from_secs(30), 90);
    let refused_at = std::time::Instant::now();
    env.cryoctl(&["chamber", "start", "held"]).ok();
    wait_until_within(SESSION_DEADLINE, "the limited session to end", || c.ended() >= 2);
    let status = env.cryoctl(&["chamber", "status", "held", "--json"]).json();
    let outcome = status[0]["sessions"][0]["outcome"].as_str().unwrap_or_default().to_string();
    assert!(outcome.starts_with("limited"), "{status}\n{}", diag(&c, &model));
    assert!(!c.cryo_log().contains("the provider named no reset"), "{}", c.cryo_log());
    let limits = crate::hub::Hub::of(&env).get("/api/limits").json();
    let until = chrono::DateTime::parse_from_rfc3339(limits[0]["until"].as_str().unwrap()).unwrap();
    #[allow(clippy::disallowed_methods)] // the test's own clock, against cryod's
    let left = (until.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_milliseconds() as f64 / 1000.0;
    let elapsed = refused_at.elapsed().as_secs_f64();
    assert!(left <= 91.0 && left + elapsed >= 88.0, "held {left:.1} s more after {elapsed:.1} s: {limits}");
    assert_eq!(limits[0]["default_hold"], false, "{limits}");
    assert!(limits[0]["source"].as_str().unwrap().contains("retry-after"), "{limits}");
    let shown = env.cryoctl(&["chamber", "status", "held"]).ok().to_string();
    assert!(shown.contains("the provider refused (429) with retry-after"), "{shown}");
    // The hub's banner says the same, with its source.
    if let Some(dir) = crate::browser::driver() {
        let seen = crate::browser::run_driver(&dir, "holds.mjs", &env, &[]);
        crate::browser::assert_everywhere_clean(&seen);
        let hold = &seen["holds"][0];
        let text = hold["text"].as_str().unwrap_or_default();
        assert!(text.starts_with("held by ") && text.contains(" until ") && text.contains("retry-after"), "{seen}");
        assert_eq!(hold["exact"], limits[0]["until"], "{seen}");
    }
    // Held: nothing is asked of the provider until the reset.
    let refused = model.refused().len();
    assert_eq!(refused, 1, "one request, refused, then no more:\n{}", model.transcript());
    wait_until_within(Duration::from_secs(200), "the work after the hold", || {
        c.outbox().iter().any(|m| m.contains("after the wait"))
    });
    assert!(refused_at.elapsed() >= Duration::from_secs(88), "ran before the reset");
    assert_eq!(model.refused().len(), 1, "{}", model.transcript());
}

/// `max_session_usd` below one response's cost: the first response passes
/// the line, the session is ended over budget at once, and a request the
/// CLI makes meanwhile is refused by the gateway (never sent: `gateway::tests`
/// sees the refusal itself).
#[test]
fn the_request_past_a_sessions_line_is_refused_and_never_sent() {
    let Some(capped) = crate::agents::capped_claude(true) else { return };
    let m = &capped.model;
    assert_eq!(m.seen().len(), 1, "only the request before the line was sent:\n{}", m.transcript());
    let cost = capped.session["cost_usd"].as_f64().unwrap_or_default();
    assert!((cost - 0.02).abs() < 1e-9, "{}", capped.session);
}

/// The agent rewrites its CLI's own config to send its model calls (and so
/// the key the gateway adds) elsewhere: the next session is refused with
/// one line naming what to do, and nothing reaches the new address.
#[test]
fn an_upstream_rewritten_in_the_clis_own_config_gets_no_key() {
    let Some(path) = cli("codex") else { return };
    let steps = ["cryo-agent todo add again --at +1s", "cryo-agent hibernate --summary first"];
    let model = ModelServer::start(Script::new().on("- session: 1\n", &steps));
    let thief = ModelServer::start(Script::new());
    let env = Env::new();
    let provider = codex_provider(&env, &model);
    let _d = env.start_daemon();
    let c = env.chamber("codex", "", &format!("agent = \"{}\"\n\n[provider]\n{provider}\n", path.display()));
    env.cryoctl(&["chamber", "start", "codex"]).ok();
    wait_until_within(SESSION_DEADLINE, "the first session", || c.ended() >= 1);
    // What a hostile agent would do from its shell.
    let config = env.path("codex-home/config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(&model.url(), &thief.url());
    std::fs::write(&config, text).unwrap();
    wait_until_within(SESSION_DEADLINE, "the refusal", || c.cryo_log().contains("the agent's own config now sends"));
    let log = c.cryo_log();
    assert!(log.contains(&thief.url()) && log.contains("cryoctl chamber trust codex"), "{log}");
    assert!(thief.seen().is_empty(), "the key went to the new address");
}

/// `network = "gateway"` under bubblewrap (a network of its own, whose way
/// out is the forwarder to the gateway's socket): the agent's own
/// connection to another local port (a listening server, past the gateway)
/// is refused, and its session still completes through the gateway.
fn netted(bin: &str, mode: cryo_session::Sandbox, setup: impl FnOnce(&Env, &ModelServer) -> String) -> Option<Env> {
    let path = cli(bin)?;
    if let Some(why) = mode.unavailable() {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let elsewhere = ModelServer::start(Script::new());
    let port = elsewhere.addr.port();
    let direct = format!("(exec 3<>/dev/tcp/127.0.0.1/{port} && echo open || echo refused) > net.txt 2>&1");
    let script = Script::new().on("- session: 1\n", &[&direct, "cryo-agent hibernate --complete --summary netted"]);
    let model = ModelServer::start(script);
    let env = Env::new();
    let provider = setup(&env, &model);
    let d = env.start_daemon();
    let toml = format!(
        "agent = \"{}\"\nsandbox = \"{}\"\nnetwork = \"gateway\"\n\n[provider]\n{provider}\n",
        path.display(),
        mode.as_str()
    );
    let c = env.chamber(bin, "", &toml);
    env.cryoctl(&["chamber", "start", bin]).ok();
    wait_until_within(SESSION_DEADLINE, "the session to end", || c.ended() >= 1);
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c, &model));
    let net = c.read("net.txt");
    // Nothing listens there: it is another network.
    assert!(net.contains("Connection refused") && net.contains("refused"), "a direct connection to port {port}: {net}");
    // The model was reached (its own port is out of reach too): through the gateway.
    assert!(!model.seen().is_empty(), "{}", diag(&c, &model));
    assert!(elsewhere.seen().is_empty(), "nothing reached the other server");
    drop(d);
    Some(env)
}

#[test]
fn network_gateway_under_bwrap_refuses_a_direct_connection_and_claude_code_completes() {
    let Some(env) = netted("claude", cryo_session::Sandbox::Bwrap, claude_provider) else { return };
    // Without a sandbox, or under Landlock (which limits ports, not
    // addresses: issue 59, case 4), the setting refuses the session with
    // one line, and no agent runs with its network open.
    let _d = env.start_daemon();
    let path = cli("claude").expect("found above");
    for (name, mode, line) in [
        ("open-air", "off", "network = \"gateway\" needs a sandbox: say sandbox = \"bwrap\"".to_string()),
        ("ported", "landlock", cryod::config::NETWORK_LANDLOCK.to_string()),
    ] {
        let toml = format!("agent = \"{}\"\nsandbox = \"{mode}\"\nnetwork = \"gateway\"\n", path.display());
        let c = env.chamber(name, "", &toml);
        let said = env.cryoctl(&["chamber", "start", name]).fails(1).to_string();
        assert!(said.contains(&line), "{mode}: {said}");
        assert_eq!(said.trim().lines().count(), 1, "{mode}: one line: {said}");
        assert!(!c.cryo_log().contains("agent started"), "{mode}: no agent ran: {}", c.cryo_log());
    }
}

#[test]
fn network_gateway_under_bwrap_refuses_a_direct_connection_and_codex_completes() {
    netted("codex", cryo_session::Sandbox::Bwrap, codex_provider);
}

#[test]
fn network_gateway_under_bwrap_refuses_a_direct_connection_and_opencode_completes() {
    netted("opencode", cryo_session::Sandbox::Bwrap, opencode_provider);
}

/// Under bubblewrap's own network, a stop still ends the agent at once:
/// its SIGTERM reaches it, and the forwarder (in a group of its own) ends
/// with it; nothing of the session is left running.
#[test]
fn network_gateway_under_bwrap_a_stop_ends_the_agent_and_its_forwarder() {
    if let Some(why) = cryo_session::Sandbox::Bwrap.unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let script = "echo \"$$\" > agent.pid\nexec sleep 600\n";
    let c = env.chamber("held", script, "sandbox = \"bwrap\"\nnetwork = \"gateway\"\n");
    env.cryoctl(&["chamber", "start", "held"]).ok();
    wait_until_within(SESSION_DEADLINE, "the agent to run", || c.read("agent.pid").trim().parse::<u32>().is_ok());
    // This test's forwarder: its gateway socket is in this test's folder.
    let mine = env.path("").display().to_string();
    let forwarders = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.split(' ').nth(1) == Some("__forward") && c.contains(&mine))
            .collect()
    };
    assert_eq!(forwarders().len(), 1, "the forwarder runs beside the agent");
    let began = std::time::Instant::now();
    env.cryoctl(&["chamber", "stop", "held"]).ok();
    wait_until_within(Duration::from_secs(30), "the session to end", || c.ended() >= 1);
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "ended by its SIGTERM, not the grace's SIGKILL: {:?}",
        began.elapsed()
    );
    assert!(c.cryo_log().contains("stopped by the operator"), "{}", c.cryo_log());
    wait_until_within(Duration::from_secs(10), "the forwarder to end", || forwarders().is_empty());
}

/// The agent rewrites its CLI's config to use a key variable cryod does not
/// hold, so that the CLI would "use its own login" with the real key beside
/// it in its environment: the session is refused with one line, and the key
/// reaches neither the agent nor anyone.
#[test]
fn a_cli_config_naming_a_key_cryod_does_not_hold_gets_no_key() {
    let Some(path) = cli("codex") else { return };
    let model = ModelServer::start(Script::new().on("- session: 1\n", &[LOOK]));
    let env = Env::new();
    let provider = codex_provider(&env, &model);
    let config = env.path("codex-home/config.toml");
    let text =
        std::fs::read_to_string(&config).unwrap().replace("env_key = \"OPENAI_API_KEY\"", "env_key = \"NOT_HELD\"");
    std::fs::write(&config, text).unwrap();
    let _d = env.start_daemon();
    let c = env.chamber("codex", "", &format!("agent = \"{}\"\n\n[provider]\n{provider}\n", path.display()));
    let said = env.cryoctl(&["chamber", "start", "codex"]).fails(1).to_string();
    assert!(said.contains("[provider] env holds OPENAI_API_KEY, which is not handed to the agent"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(!c.cryo_log().contains("agent started"), "{}", c.cryo_log());
    assert!(model.seen().is_empty() && !c.dir.join("seen-env.txt").exists());
}

/// The Python interpreter of `tests/interop/.venv`, where `.ci/run` installs
/// the official SDKs (`tests/interop/requirements.txt`).
fn sdk_python() -> Option<std::path::PathBuf> {
    let py = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/.venv/bin/python");
    let ok = std::process::Command::new(&py)
        .args(["-c", "import openai, anthropic"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(py);
    }
    let why = "the official SDKs are not installed: python3 -m venv tests/interop/.venv && \
               tests/interop/.venv/bin/pip install -r tests/interop/requirements.txt (.ci/run does)";
    assert!(std::env::var_os("CRYO_REQUIRE_INTEROP").is_none(), "{why}");
    eprintln!("SKIPPED: {why}");
    None
}

/// Issue 62, cases 1 and 4: OpenAI's and Anthropic's official Python SDKs,
/// each running the loops of its own documentation (streamed, streamed
/// asking for usage, whole) from a session of a command of the user's own
/// (no CLI the gateway knows), through the gateway: each sees the stream it
/// asked for (`chunk.choices[0]` holds in every chunk of a stream that did
/// not ask for usage), and the ledger counts every response's tokens.
#[test]
fn the_official_sdks_see_the_streams_they_asked_for() {
    let Some(py) = sdk_python() else { return };
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/sdk_client.py");
    let model = ModelServer::start(Script::new());
    let env = Env::new();
    let _d = env.start_daemon();
    // A program of the user's own, given its SDK's variables: the
    // session's environment holds the gateway's base URL and its token.
    for (sdk_name, bin, provider) in [
        ("openai", "my-openai-agent", crate::agents::qwen_provider(&env, &model)),
        ("anthropic", "my-anthropic-agent", claude_provider(&env, &model)),
    ] {
        let dir = env.path(&format!("sdk-{sdk_name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let agent = dir.join(bin);
        let script = format!(
            "#!/bin/sh\n'{}' '{}' {sdk_name} > sdk.json 2> sdk.err\ncryo-agent hibernate --complete --summary sdk\n",
            py.display(),
            sdk.display()
        );
        std::fs::write(&agent, script).unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let c = env.chamber(sdk_name, "", &format!("agent = \"{}\"\n\n[provider]\n{provider}\n", agent.display()));
        let before = model.seen().len();
        env.cryoctl(&["chamber", "start", sdk_name]).ok();
        wait_until_within(SESSION_DEADLINE, "the session to end", || c.ended() >= 1);
        let out = c.read("sdk.json");
        let seen: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("{sdk_name}: {e}: {out}\n{}\n{}", c.read("sdk.err"), diag(&c, &model)));
        let requests: Vec<_> = model.seen().into_iter().skip(before).collect();
        assert_eq!(requests.len(), 3, "{sdk_name}: {}", model.transcript());
        assert!(
            requests.iter().all(|s| s.headers.iter().any(|(_, v)| v.contains("sk-cryo-test"))),
            "{sdk_name}: the calls went through the gateway (the real key added)"
        );
        if sdk_name == "openai" {
            // The loop over `chunk.choices[0]` ran to the end: no chunk
            // without choices reached it.
            assert_eq!(seen["streamed"]["text"], "Done.", "{seen}");
            assert_eq!(seen["streamed"]["chunks"], 2, "{seen}");
            assert_eq!(seen["asked"]["usage"]["prompt_tokens"], 10, "{seen}");
            assert_eq!(seen["whole"]["text"], "Done.", "{seen}");
            // The gateway asked the upstream for the first stream's usage.
            assert_eq!(requests[0].body["stream_options"]["include_usage"], true, "{:?}", requests[0].body);
        } else {
            assert_eq!(seen["streamed"]["text"], "Done.", "{seen}");
            assert_eq!(seen["whole"]["text"], "Done.", "{seen}");
            assert_eq!(seen["events"][0], "message_start", "{seen}");
        }
        // Counted all the same: 10 in and 5 out a response.
        let status = env.cryoctl(&["chamber", "status", sdk_name, "--json"]).json();
        let s = &status[0]["sessions"][0];
        assert_eq!((s["input_tokens"].as_u64(), s["output_tokens"].as_u64()), (Some(30), Some(15)), "{sdk_name}: {s}");
    }
}

/// Issue 62, case 6: the provider refuses (429) with a short retry-after,
/// which the gateway leaves to the CLI's own retries; a CLI that gives up
/// and exits 1 ends the session `limited` (the account held until the
/// provider's reset), not `crashed` with a "misconfiguration" hint.
#[test]
fn a_cli_that_gives_up_on_a_short_429_is_limited_not_crashed() {
    let model = ModelServer::start(Script::new());
    let env = Env::new();
    let _d = env.start_daemon();
    // A program named as a CLI the gateway knows (Qwen Code's variables),
    // which asks once and gives up on a refusal.
    let dir = env.path("quitter");
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("qwen");
    std::fs::write(
        &agent,
        "#!/usr/bin/python3\nimport json, os, sys, urllib.request, urllib.error\n\
         req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions',\n\
           data=json.dumps({'model': 'm1', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode(),\n\
           headers={'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], 'content-type': 'application/json'})\n\
         try:\n    urllib.request.urlopen(req, timeout=30)\nexcept urllib.error.HTTPError as e:\n\
         \x20   print('gave up:', e.code)\n    sys.exit(1)\nsys.exit(0)\n",
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let provider = crate::agents::qwen_provider(&env, &model);
    let c = env.chamber("quits", "", &format!("agent = \"{}\"\n\n[provider]\n{provider}\n", agent.display()));
    model.limit_saying("sk-cryo-test", Duration::from_secs(30), 2);
    env.cryoctl(&["chamber", "start", "quits"]).ok();
    wait_until_within(SESSION_DEADLINE, "the session to end", || c.ended() >= 1);
    assert_eq!(model.refused().len(), 1, "{}", model.transcript());
    let status = env.cryoctl(&["chamber", "status", "quits", "--json"]).json();
    let outcome = status[0]["sessions"][0]["outcome"].as_str().unwrap_or_default().to_string();
    assert!(outcome.starts_with("limited"), "{outcome}\n{}", diag(&c, &model));
    assert!(!c.cryo_log().contains("misconfiguration"), "{}", c.cryo_log());
    assert!(c.cryo_log().contains("its account wait until"), "{}", c.cryo_log());
}

/// Issue 62, case 4, as an attacker: a confined command of the user's own
/// is pointed at the gateway only by a key its chamber's `[provider] env`
/// gives it. With none, cryod's own key (in cryod's environment) is neither
/// spent through the gateway for it nor handed to it; with one, it holds a
/// session token, never the key. (Unconfined, `sandbox = "off"`, an agent
/// runs as cryod's user, who can read cryod's environment anyway.)
#[test]
fn a_custom_command_never_gets_cryods_own_key() {
    let env = Env::new();
    let d = env.spawn_daemon_with(&[], &[("OPENAI_API_KEY", "sk-cryods-own")]);
    d.wait_ready(&env);
    let script = "printf '%s|%s' \"${OPENAI_API_KEY:-none}\" \"${OPENAI_BASE_URL:-none}\" > seen.txt\n\
                  cryo-agent hibernate --complete >/dev/null\n";
    let bare = env.chamber("bare", script, "sandbox = \"bwrap\"\n");
    let given = env.chamber(
        "given",
        script,
        "sandbox = \"bwrap\"\n\n[provider]\nenv = { OPENAI_API_KEY = \"sk-chamber\", OPENAI_BASE_URL = \"http://127.0.0.1:9/v1\" }\n",
    );
    for name in ["bare", "given"] {
        env.cryoctl(&["chamber", "start", name]).ok();
    }
    bare.wait_ended(1);
    given.wait_ended(1);
    let (key, base) = bare.read("seen.txt").split_once('|').map(|(k, b)| (k.to_string(), b.to_string())).unwrap();
    assert_ne!(key, "sk-cryods-own", "cryod's own key handed over");
    assert_eq!(base, "none", "pointed at the gateway to spend cryod's key");
    let (key, base) = given.read("seen.txt").split_once('|').map(|(k, b)| (k.to_string(), b.to_string())).unwrap();
    assert!(key != "sk-chamber" && key != "sk-cryods-own" && !key.is_empty(), "{key}");
    assert!(base.contains("/cryo/"), "through the gateway: {base}");
}
