//! Issue 43: failover. `[providers.NAME] fallback = [...]` in `cryod.toml`:
//! while a chamber's account is held at its provider's limit, its next
//! wakes go to the first fallback account not held (same API: the same CLI
//! with the fallback's key, through the gateway; another agent: a fresh
//! conversation), the switch is logged and told once, and the wakes come
//! back to the chamber's own account once its limit resets.

use std::time::{Duration, Instant};

use cryo_tests::model::{ModelServer, Script};
use cryo_tests::{Chamber, Env, wait_until_telling, wait_until_within};

use crate::agents::{SESSION_DEADLINE, claude_provider, cli};
use crate::gateway::diag;

/// The keys each request reached the upstream with, in order.
fn keys(model: &ModelServer) -> Vec<String> {
    model
        .seen()
        .iter()
        .filter_map(|s| {
            s.headers
                .iter()
                .find(|(k, _)| k == "x-api-key" || k == "authorization")
                .map(|(_, v)| v.trim_start_matches("Bearer ").to_string())
        })
        .collect()
}

/// One overdue TODO, `first-task`: its first session meets the limit.
fn overdue(c: &Chamber) {
    c.seed_history();
    c.write_todos(r#"[{"id":1,"text":"first-task","done":false,"claimed":false,"at":"2000-01-01T00:00"}]"#);
}

#[test]
fn a_held_account_hands_the_next_wake_to_its_fallback_and_takes_the_work_back_at_its_reset() {
    let Some(path) = cli("claude") else { return };
    let script = Script::new()
        .on("come-back", &["cryo-agent send 'back home'", "cryo-agent hibernate --complete --summary home"])
        .on(
            "first-task",
            &[
                "cryo-agent send 'on the spare'",
                "cryo-agent todo add come-back --at +80s",
                "cryo-agent hibernate --summary spared",
            ],
        );
    let model = ModelServer::start(script);
    let env = Env::new();
    // The spare names its upstream: the chamber's base URL is work's, and
    // a fallback's key goes only where the operator says.
    env.daemon_config(&format!(
        "[hub]\nbind = \"127.0.0.1:0\"\n\n[providers.work]\nfallback = [\"spare\"]\n\n\
         [providers.spare]\nupstream = \"{}\"\nenv = {{ ANTHROPIC_API_KEY = \"sk-spare\" }}\n",
        model.url()
    ));
    let _d = env.start_daemon();
    let provider = claude_provider(&env, &model);
    let c =
        env.chamber("fb", "", &format!("agent = \"{}\"\n\n[provider]\nname = \"work\"\n{provider}\n", path.display()));
    overdue(&c);
    // work's key is refused for 40 s, and told to wait 70 s: past the
    // minute a session waits out, so its session ends limited.
    model.limit_saying("sk-cryo-test", Duration::from_secs(40), 70);
    let refused_at = Instant::now();
    env.cryoctl(&["chamber", "start", "fb"]).ok();
    let on_spare = || c.outbox().iter().any(|m| m.contains("on the spare"));
    wait_until_telling(SESSION_DEADLINE, "the session on the spare", on_spare, || diag(&c, &model));
    assert!(refused_at.elapsed() < Duration::from_secs(60), "the spare took the wake at once, not after the hold");
    let status = env.cryoctl(&["chamber", "status", "fb", "--json"]).json();
    let first = status[0]["sessions"].as_array().unwrap().last().unwrap()["outcome"].as_str().unwrap().to_string();
    assert!(first.starts_with("limited"), "{status}\n{}", diag(&c, &model));
    let log = c.cryo_log();
    assert!(
        log.contains("work is at its provider's limit until") && log.contains("this session bills the fallback spare"),
        "{log}"
    );
    // The spare's key reached the upstream; the agent held neither.
    let used = keys(&model);
    assert!(used.iter().any(|k| k == "sk-spare"), "{used:?}");
    // Told once.
    let told: Vec<String> = c.fallbacks().into_iter().filter(|m| m.contains("sessions go to spare")).collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    // Its reset passed: the work comes back to work's own key.
    let home = || c.outbox().iter().any(|m| m.contains("back home"));
    wait_until_telling(Duration::from_secs(200), "the session back home", home, || diag(&c, &model));
    assert!(refused_at.elapsed() >= Duration::from_secs(70), "back before work's reset");
    let used = keys(&model);
    let last_spare = used.iter().rposition(|k| k == "sk-spare").unwrap();
    assert!(used[last_spare + 1..].iter().any(|k| k == "sk-cryo-test"), "back on work's key: {used:?}");
    assert!(c.cryo_log().contains("back on work: its limit reset"), "{}", c.cryo_log());
    // `/metrics` counts each response under the account it billed.
    let metrics = crate::metrics::parse(&crate::metrics::get_openmetrics(&crate::hub::Hub::of(&env)).body);
    let billed = |account: &str| {
        metrics
            .iter()
            .filter(|(k, _)| {
                k.starts_with("cryo_model_responses_total{") && k.contains(&format!("account=\"{account}\""))
            })
            .map(|(_, v)| v)
            .sum::<f64>()
    };
    assert!(billed("spare") >= 1.0 && billed("work") >= 1.0, "{metrics:#?}");
}

/// A fallback of another kind: Codex takes the wake of a Claude Code
/// chamber, in a conversation of its own (its prompt says why).
#[test]
fn a_fallback_of_another_kind_starts_a_fresh_conversation() {
    let (Some(claude), Some(codex)) = (cli("claude"), cli("codex")) else { return };
    let script =
        Script::new().on("first-task", &["cryo-agent send 'codex was here'", "cryo-agent hibernate --complete"]);
    let model = ModelServer::start(script);
    let env = Env::new();
    let home = env.path("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("config.toml"), "model = \"m1\"\n").unwrap();
    env.daemon_config(&format!(
        "[providers.work]\nfallback = [\"openai\"]\n\n[providers.openai]\nagent = \"{}\"\nupstream = \"{}/v1\"\n\
         env = {{ CODEX_HOME = \"{}\", OPENAI_API_KEY = \"sk-openai\" }}\n",
        codex.display(),
        model.url(),
        home.display()
    ));
    let _d = env.start_daemon();
    let provider = claude_provider(&env, &model);
    let toml =
        format!("agent = \"{}\"\nsession = \"resume\"\n\n[provider]\nname = \"work\"\n{provider}\n", claude.display());
    let c = env.chamber("kinds", "", &toml);
    overdue(&c);
    model.limit_saying("sk-cryo-test", Duration::from_secs(600), 600);
    env.cryoctl(&["chamber", "start", "kinds"]).ok();
    wait_until_within(SESSION_DEADLINE, "Codex's session", || c.outbox().iter().any(|m| m.contains("codex was here")));
    let prompt = c.read(".cryo/prompt.md");
    assert!(prompt.contains("FRESH CONVERSATION: it runs") && prompt.contains("fallback account openai"), "{prompt}");
    let responses: Vec<_> = model.seen().into_iter().filter(|s| s.path.ends_with("/responses")).collect();
    assert!(!responses.is_empty(), "Codex spoke: {}", diag(&c, &model));
    assert!(keys(&model).iter().any(|k| k == "sk-openai"), "{:?}", keys(&model));
    assert!(c.cryo_log().contains("this session bills the fallback openai"), "{}", c.cryo_log());
}
