//! Approvals (`[approvals]`): the real Claude Code, against the scripted
//! model server, asks cryod before each tool call through its permission
//! prompt tool; a call the policy marks `ask` waits for a person, parks the
//! session past `approval_wait`, survives a restart of cryod, and the
//! resumed conversation runs exactly the approved call. A denial reaches
//! the agent as a denial; a deny rule never reaches a person. An ACP
//! agent's permission requests are answered from the same policy.

use std::time::Instant;

use cryo_tests::model::{ModelServer, Script};
use cryo_tests::{Chamber, Env, wait_until_telling, wait_until_within};
use serde_json::Value;

use crate::agents::{SESSION_DEADLINE, claude_provider, cli};

/// The chamber's policy: `touch pushed.txt` asks, `rm -rf` is denied,
/// `ls` is allowed.
fn policy(wait: &str) -> String {
    format!(
        "\n[approvals]\nallow = [\"Read\", \"Bash(ls*)\"]\nask = [\"Bash(touch pushed*)\"]\n\
         deny = [\"Bash(rm -rf*)\"]\napproval_wait = \"{wait}\"\n"
    )
}

/// A chamber running the real Claude Code on `script`, with `extra` in
/// its `cryo.toml`.
fn claude_chamber(env: &Env, model: &ModelServer, name: &str, extra: &str) -> Option<Chamber> {
    let path = cli("claude")?;
    let toml = format!("agent = \"{}\"\n\n[provider]\n{}\n{extra}", path.display(), claude_provider(env, model));
    Some(env.chamber(name, "", &toml))
}

fn approvals(env: &Env, all: bool) -> Vec<Value> {
    let mut args = vec!["approvals", "list"];
    if all {
        args.push("--all");
    }
    args.push("--json");
    env.cryoctl(&args).json().as_array().cloned().unwrap_or_default()
}

fn status(env: &Env, name: &str) -> Value {
    env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone()
}

/// The texts the model was sent back as tool results, in order.
fn tool_results(model: &ModelServer) -> String {
    model.seen().iter().map(|s| s.body.to_string()).collect::<Vec<_>>().join("\n")
}

/// Session 1 asks to push (`touch pushed.txt`, which the policy asks a
/// person about); session 2, resumed with the answer, pushes and finishes.
fn ask_then_push() -> Script {
    Script::new()
        .on("- session: 1\n", &["touch pushed.txt"])
        .on("- session: 2\n", &["touch pushed.txt", "cryo-agent hibernate --complete --summary pushed"])
}

/// The issue's scenario: ask, park, restart cryod, approve from the CLI,
/// and the resumed session runs exactly that command and finishes.
#[test]
fn an_ask_parks_the_session_survives_a_restart_and_the_approval_resumes_it() {
    let model = ModelServer::start(ask_then_push());
    let env = Env::new();
    let d = env.start_daemon();
    let Some(c) = claude_chamber(&env, &model, "ask", &policy("1s")) else { return };
    env.cryoctl(&["chamber", "start", "ask"]).ok();
    let diag = |c: &Chamber| format!("cryo.log:\n{}\nmodel:\n{}", c.cryo_log(), model.transcript());

    // The request is kept, the session parks, the chamber waits.
    wait_until_telling(SESSION_DEADLINE, "the request to appear", || !approvals(&env, false).is_empty(), || diag(&c));
    let pending = approvals(&env, false);
    assert_eq!(pending.len(), 1, "{pending:?}");
    let a = &pending[0];
    assert_eq!(
        (a["chamber"].as_str(), a["tool"].as_str(), a["state"].as_str()),
        (Some("ask"), Some("Bash"), Some("pending"))
    );
    assert_eq!(a["subject"], "touch pushed.txt");
    assert_eq!(a["input"]["command"], "touch pushed.txt", "the exact arguments are kept: {a}");
    assert_eq!(a["rule"], "the rule ask Bash(touch pushed*)");
    let id = a["id"].as_str().unwrap().to_string();
    wait_until_telling(SESSION_DEADLINE, "session 1 to end", || c.ended() >= 1, || diag(&c));
    let s = status(&env, "ask");
    assert_eq!(s["state"], "awaiting approval", "a parked chamber says what it waits for: {s}");
    assert_eq!(s["desired"], "started", "{s}");
    assert!(s["attention"].as_str().unwrap_or("").starts_with(&format!("awaiting approval: {id}")), "{s}");
    assert!(c.cryo_log().contains("session ended: awaiting approval"), "{}", diag(&c));
    assert!(!c.dir.join("pushed.txt").exists(), "the call ran before it was approved");
    // The agent was told to stop and wait.
    assert!(tool_results(&model).contains("needs a person's approval"), "{}", model.transcript());

    // cryod goes down hard and comes back: the request and the wait stay.
    drop(d);
    let _d = env.start_daemon();
    let pending = approvals(&env, false);
    assert_eq!(pending.iter().map(|a| a["id"].as_str().unwrap()).collect::<Vec<_>>(), [id.as_str()]);
    let s = status(&env, "ask");
    assert_eq!(s["state"], "awaiting approval", "the wait is told after a restart: {s}");
    assert!(s["attention"].as_str().unwrap_or("").contains(&id), "the wait is told after a restart: {s}");
    assert_eq!(c.ended(), 1, "nothing ran while it waited");

    // The approval: the next session resumes the conversation and runs it.
    let asked_before = model.seen().len();
    let t = Instant::now();
    let out = env.cryoctl(&["approvals", "approve", &id]);
    assert!(out.ok().contains(&format!("approved {id}")), "{out:?}");
    wait_until_telling(
        SESSION_DEADLINE,
        "the resumed session's first step",
        || model.seen().len() > asked_before,
        || diag(&c),
    );
    let to_next_step = t.elapsed();
    wait_until_telling(SESSION_DEADLINE, "session 2 to end", || c.ended() >= 2, || diag(&c));
    assert!(c.dir.join("pushed.txt").exists(), "the approved command ran\n{}", diag(&c));
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c));
    let log = c.cryo_log();
    assert!(log.contains(&format!("Approval {id} was given by operator")), "the decision is in the log: {log}");
    assert!(log.contains(&format!("approval {id} used")), "{log}");
    // And in the sessions' transcript, where a person reads them.
    let transcript = c.read("cryo-agent.log");
    for line in [
        format!("cryo: approval {id} asked: Bash: touch pushed.txt"),
        format!("cryo: Approval {id} was given by operator"),
    ] {
        assert!(transcript.contains(&line), "{line:?} not in the transcript:\n{transcript}");
    }
    let s = status(&env, "ask");
    let sessions = s["sessions"].as_array().cloned().unwrap_or_default();
    let second = sessions.iter().find(|r| r["number"] == 2).expect("session 2's row");
    assert_eq!(second["resumed_from"], 1, "session 2 continues the conversation that asked: {s}");
    // The resumed request carries session 1's turn (the same conversation).
    let resumed = model.seen().into_iter().filter(|r| r.turn.as_deref() == Some("- session: 2\n")).collect::<Vec<_>>();
    assert!(resumed.iter().any(|r| r.earlier.iter().any(|e| e == "- session: 1\n")), "{}", model.transcript());
    let all = approvals(&env, true);
    let done = all.iter().find(|a| a["id"] == id.as_str()).expect("the request is kept");
    assert_eq!((done["state"].as_str(), done["decided_by"].as_str()), (Some("approved"), Some("operator")), "{done}");
    assert!(done["used_at"].is_string(), "{done}");
    // Once decided, it cannot be decided again.
    let again = env.cryoctl(&["approvals", "deny", &id]);
    assert!(again.fails(1).contains("was approved already (by operator"), "{again:?}");
    eprintln!("approval to the agent's next step: {} ms", to_next_step.as_millis());
}

/// An answer written to the store that never reached the chamber (cryod
/// died between the two): at restart the chamber goes on with it, as if it
/// had come, rather than waiting, paused, for a request already decided.
/// (The decision is written into the SQLite file while cryod is down: the
/// crash's window, made wide.)
#[test]
fn an_answer_the_chamber_never_heard_of_resumes_it_at_restart() {
    let model = ModelServer::start(ask_then_push());
    let env = Env::new();
    let mut d = env.start_daemon();
    let Some(c) = claude_chamber(&env, &model, "lost", &policy("1s")) else { return };
    env.cryoctl(&["chamber", "start", "lost"]).ok();
    let diag = |c: &Chamber| format!("cryo.log:\n{}\nmodel:\n{}", c.cryo_log(), model.transcript());
    wait_until_telling(SESSION_DEADLINE, "session 1 to park", || c.ended() >= 1, || diag(&c));
    let id = approvals(&env, false)[0]["id"].as_str().unwrap().to_string();
    assert_eq!(status(&env, "lost")["state"], "awaiting approval");
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let db = rusqlite::Connection::open(env.state_dir().join("cryod.db")).unwrap();
    let decided = db
        .execute(
            "UPDATE approvals SET state = 'approved', decided_by = 'operator', decided_at = ?2 WHERE id = ?1",
            rusqlite::params![id, cryo_tests::date_utc("now")],
        )
        .unwrap();
    assert_eq!(decided, 1);
    drop(db);

    let _d = env.start_daemon();
    wait_until_telling(SESSION_DEADLINE, "session 2 to end", || c.ended() >= 2, || diag(&c));
    assert!(c.dir.join("pushed.txt").exists(), "the approved command ran\n{}", diag(&c));
    let s = status(&env, "lost");
    assert_ne!(s["state"], "awaiting approval", "{s}");
    assert!(!s["attention"].as_str().unwrap_or("").contains(&id), "the stale line is gone: {s}");
    let sessions = s["sessions"].as_array().cloned().unwrap_or_default();
    let second = sessions.iter().find(|r| r["number"] == 2).expect("session 2's row");
    assert_eq!(second["resumed_from"], 1, "session 2 continues the conversation that asked: {s}");
    assert!(c.cryo_log().contains(&format!("approval {id} used")), "{}", diag(&c));
}

/// A person who answers within `approval_wait` answers in the session:
/// the same session runs each call and ends. Five asks, each approved as
/// soon as it is listed: prints the time from an approval to the agent's
/// next model request (the closing note's p50).
#[test]
fn approvals_within_the_wait_are_answered_in_the_session() {
    const ASKS: usize = 5;
    let steps: Vec<String> = (1..=ASKS).map(|n| format!("touch pushed{n}.txt")).collect();
    let mut steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    steps.push("cryo-agent hibernate --complete --summary pushed");
    let model = ModelServer::start(Script::new().on("- session: 1\n", &steps));
    let env = Env::new();
    let _d = env.start_daemon();
    let Some(c) = claude_chamber(&env, &model, "quick", &policy("2m")) else { return };
    env.cryoctl(&["chamber", "start", "quick"]).ok();
    let diag = |c: &Chamber| format!("cryo.log:\n{}\nmodel:\n{}", c.cryo_log(), model.transcript());
    let mut took = Vec::new();
    for n in 1..=ASKS {
        let pending = || approvals(&env, false).into_iter().find(|a| a["subject"] == format!("touch pushed{n}.txt"));
        wait_until_telling(SESSION_DEADLINE, "the next request", || pending().is_some(), || diag(&c));
        let id = pending().unwrap()["id"].as_str().unwrap().to_string();
        if n == 1 {
            // A session waiting in place is not "running": every view says what it waits for.
            let s = status(&env, "quick");
            assert_eq!(s["state"], "awaiting approval", "{s}");
            let list = env.cryoctl(&["chamber", "list"]).ok().to_string();
            assert!(list.contains("awaiting approval"), "{list}");
        }
        let before = model.seen().len();
        let t = Instant::now();
        env.cryoctl(&["approvals", "approve", &id]).ok();
        wait_until_within(SESSION_DEADLINE, "the next step", || model.seen().len() > before);
        took.push(t.elapsed());
    }
    wait_until_telling(SESSION_DEADLINE, "the session to end", || c.ended() >= 1, || diag(&c));
    for n in 1..=ASKS {
        assert!(c.dir.join(format!("pushed{n}.txt")).exists(), "{}", diag(&c));
    }
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c));
    assert_eq!(c.begun(), 1, "one session: nothing parked");
    took.sort();
    let ms: Vec<u128> = took.iter().map(|d| d.as_millis()).collect();
    eprintln!("approval in the session to the agent's next model request: p50 {} ms (all: {ms:?})", ms[ASKS / 2]);
}

/// The agent cannot loosen its own policy: an `[approvals]` it writes into
/// `cryo.toml` holds the chamber until the operator accepts it.
#[test]
fn an_agent_that_rewrites_its_approvals_is_held() {
    let env = Env::new();
    let _d = env.start_daemon();
    let loosen = "if [ ! -e first ]; then touch first; printf '\\n[approvals]\\ndefault = \"allow\"\\n' >> cryo.toml; \
                  cryo-agent todo add again --at +1s >/dev/null; cryo-agent hibernate; exit; fi\n\
                  cryo-agent hibernate --complete\n";
    let c = env.chamber("loosen", loosen, "");
    env.cryoctl(&["chamber", "start", "loosen"]).ok();
    c.wait_ended(1);
    let status = || status(&env, "loosen");
    wait_until_within(SESSION_DEADLINE, "the chamber held", || status()["state"] == "faulted");
    let fault = status()["fault"].as_str().unwrap_or("").to_string();
    assert!(fault.contains("`approvals`") && fault.contains("cryoctl chamber trust loosen"), "{fault}");
    assert_eq!(c.begun(), 1, "a held chamber ran a session");
    assert!(c.read("cryo.toml").contains("default = \"allow\""), "the file is left as the agent wrote it");
}

/// A denial (with a reason) reaches the resumed agent as a denial of that
/// very call; the command never runs.
#[test]
fn a_denial_is_seen_by_the_agent_as_a_denial() {
    let script = Script::new()
        .on("- session: 1\n", &["touch pushed.txt"])
        .on("- session: 2\n", &["touch pushed.txt", "cryo-agent hibernate --complete --summary refused"]);
    let model = ModelServer::start(script);
    let env = Env::new();
    let _d = env.start_daemon();
    let Some(c) = claude_chamber(&env, &model, "deny", &policy("1s")) else { return };
    env.cryoctl(&["chamber", "start", "deny"]).ok();
    let diag = |c: &Chamber| format!("cryo.log:\n{}\nmodel:\n{}", c.cryo_log(), model.transcript());
    wait_until_telling(SESSION_DEADLINE, "session 1 to park", || c.ended() >= 1, || diag(&c));
    let id = approvals(&env, false)[0]["id"].as_str().unwrap().to_string();
    let out = env.cryoctl(&["approvals", "deny", &id, "--reason", "not on a Friday"]);
    assert!(out.ok().contains(&format!("denied {id}")), "{out:?}");
    wait_until_telling(SESSION_DEADLINE, "session 2 to end", || c.ended() >= 2, || diag(&c));
    assert!(!c.dir.join("pushed.txt").exists(), "a denied command ran\n{}", diag(&c));
    let results = tool_results(&model);
    assert!(results.contains("A person refused this call") && results.contains("not on a Friday"), "{results}");
    let log = c.cryo_log();
    assert!(log.contains(&format!("Approval {id} was refused by operator")), "{log}");
    let done = approvals(&env, true).into_iter().find(|a| a["id"] == id.as_str()).unwrap();
    assert_eq!((done["state"].as_str(), done["answer"].as_str()), (Some("denied"), Some("not on a Friday")));
}

/// A deny rule refuses at once: no request, no person, the files stay;
/// an allow rule runs without asking.
#[test]
fn a_deny_rule_never_reaches_a_person() {
    let script = Script::new().on(
        "- session: 1\n",
        &["ls", "rm -rf keep", "ls; rm -rf keep", "cryo-agent hibernate --complete --summary kept"],
    );
    let model = ModelServer::start(script);
    let env = Env::new();
    let _d = env.start_daemon();
    let Some(c) = claude_chamber(&env, &model, "rules", &policy("2m")) else { return };
    std::fs::create_dir_all(c.dir.join("keep")).unwrap();
    env.cryoctl(&["chamber", "start", "rules"]).ok();
    let diag = |c: &Chamber| format!("cryo.log:\n{}\nmodel:\n{}", c.cryo_log(), model.transcript());
    wait_until_telling(SESSION_DEADLINE, "the session to end", || c.ended() >= 1, || diag(&c));
    assert!(c.dir.join("keep").is_dir(), "a denied command ran\n{}", diag(&c));
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c));
    assert!(approvals(&env, true).is_empty(), "a deny rule reached a person: {:?}", approvals(&env, true));
    let log = c.cryo_log();
    assert_eq!(log.matches("refused by the rule deny Bash(rm -rf*)").count(), 2, "{log}");
    assert!(tool_results(&model).contains("policy refuses this call"), "{}", model.transcript());
}

/// Bad `[approvals]` settings hold the chamber with one line, and a known
/// kind without cryo's tools to ask through is refused rather than run
/// with its prompts off.
#[test]
fn bad_approvals_settings_say_what_is_wrong() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("bad", "", "agent = \"sh agent.sh\"\n\n[approvals]\nask = [\"Bash(git push\"]\n");
    let out = env.cryoctl(&["chamber", "start", "bad"]);
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(text.contains("approvals.ask") && text.contains("does not end with ')'"), "{out:?}");
    let toml = std::fs::read_to_string(c.dir.join("cryo.toml")).unwrap();
    assert!(toml.contains("Bash(git push\""), "the file is left as it was");
    let Some(codex) = cli("codex") else { return };
    let toml = format!("agent = \"{}\"\nmcp = false\n\n[approvals]\nallow = [\"Read\"]\n", codex.display());
    env.chamber("codex", "", &toml);
    let out = env.cryoctl(&["chamber", "start", "codex"]);
    assert!(out.fails(1).contains("[approvals] needs cryo's own tools"), "{out:?}");
}

/// Issue 44's last part: an ACP agent's permission requests are answered
/// from the chamber's policy. Qwen Code (`--acp`) asks before its shell
/// commands: the deny rule's call is rejected, and the agent is told so
/// (Qwen Code then ends its turn: it takes a rejection as the user's
/// cancel).
#[test]
fn an_acp_agent_sees_a_deny_rule_as_a_rejection() {
    let Some(qwen) = cli("qwen") else { return };
    let script = Script::new().on("- session: 1\n", &["rm -rf keep"]);
    let model = ModelServer::start(script);
    let env = Env::new();
    let _d = env.start_daemon();
    let provider = crate::agents::qwen_provider(&env, &model);
    let toml = format!(
        "agent = \"acp:{} --acp\"\n\n[provider]\n{provider}\n\n[approvals]\nallow = [\"Bash(ls*)\"]\ndeny = [\"Bash(rm -rf*)\"]\n",
        qwen.display()
    );
    let c = env.chamber("acp", "", &toml);
    std::fs::create_dir_all(c.dir.join("keep")).unwrap();
    env.cryoctl(&["chamber", "start", "acp"]).ok();
    let diag = |c: &Chamber| {
        format!(
            "cryo.log:\n{}\ncryo-agent.log:\n{}\nmodel:\n{}",
            c.cryo_log(),
            c.read("cryo-agent.log"),
            model.transcript()
        )
    };
    wait_until_telling(SESSION_DEADLINE, "the session to end", || c.ended() >= 1, || diag(&c));
    assert!(c.dir.join("keep").is_dir(), "a denied command ran\n{}", diag(&c));
    assert!(
        c.cryo_log().contains("approval: Bash: rm -rf keep refused by the rule deny Bash(rm -rf*)"),
        "{}",
        diag(&c)
    );
    let transcript = c.read("cryo-agent.log");
    let refused = transcript.lines().find(|l| l.starts_with("permission: ")).unwrap_or_default();
    assert!(refused.contains("policy refuses this call"), "the rejection and its reason: {}", diag(&c));
    assert!(transcript.contains("was canceled by the user"), "the agent saw the rejection: {}", diag(&c));
    assert!(approvals(&env, true).is_empty());
}

/// The request reaches a phone by Web Push with approve and deny links;
/// the hub lists it; the approve link's POST (what the service worker's
/// action does) answers it once. A GET only shows the page; the same link
/// again, the other link, a changed link and an expired one are refused.
#[test]
fn a_web_push_links_approval_works_once_and_expires() {
    use cryo_tests::receiver::Receiver;
    let model = ModelServer::start(ask_then_push());
    let env = Env::new();
    let r = Receiver::start();
    env.daemon_config("[[notify]]\nname = \"phone\"\nkind = \"webpush\"\nevents = [\"approval\"]\n");
    let _d = env.start_daemon();
    let hub = crate::hub::Hub::of(&env);
    let device = crate::people::Device::new();
    let sub = device.subscription(&r.url("/push/dev1"), "my phone");
    let token = hub.token();
    let added = hub.raw("POST", "/api/push", Some(&token), &["X-Cryo-Csrf: 1"], Some(&sub.to_string()));
    assert_eq!(added.status, 200, "{}", added.body);
    let Some(c) = claude_chamber(&env, &model, "push", &policy("1s")) else { return };
    env.cryoctl(&["chamber", "start", "push"]).ok();
    let diag = |c: &Chamber| {
        format!("cryo.log:\n{}\nmodel:\n{}\ncryod:\n{}", c.cryo_log(), model.transcript(), env.daemon_log())
    };
    wait_until_telling(SESSION_DEADLINE, "the push", || !r.got("/push/dev1").is_empty(), || diag(&c));
    let notice: Value = serde_json::from_str(&device.open(&r.got("/push/dev1")[0].body)).unwrap();
    assert_eq!(notice["event"], "approval", "{notice}");
    assert_eq!(notice["title"], "push asks: Bash: touch pushed.txt", "{notice}");
    let actions = notice["actions"].as_array().cloned().unwrap_or_default();
    let labels: Vec<&str> = actions.iter().filter_map(|a| a["label"].as_str()).collect();
    assert_eq!(labels, ["Approve", "Deny"], "{notice}");
    let path = |url: &Value| url.as_str().unwrap().split_once(hub.addr()).unwrap().1.to_string();
    let (approve, deny) = (path(&actions[0]["url"]), path(&actions[1]["url"]));

    // The hub's "needs you" reads the same request.
    let listed: Value = serde_json::from_str(&hub.get("/api/approvals").body).unwrap();
    let id = listed["approvals"][0]["id"].as_str().expect("the hub lists it").to_string();
    assert_eq!(listed["approvals"][0]["what"], "Bash: touch pushed.txt", "{listed}");
    wait_until_telling(SESSION_DEADLINE, "session 1 to park", || c.ended() >= 1, || diag(&c));

    // A GET (a preview, a prefetch) changes nothing.
    let page = hub.raw("GET", &approve, None, &[], None);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Approve this call?") && page.body.contains("touch pushed.txt"), "{}", page.body);
    assert_eq!(approvals(&env, false).len(), 1, "a GET answered the request");
    // A changed link, and an expired one (signed as cryod signs, with a
    // past expiry), are refused.
    let forged = approve.replacen(".a.", ".d.", 1);
    let r403 = hub.raw("POST", &forged, None, &[], None);
    assert_eq!(r403.status, 403, "{}", r403.body);
    let expired = expired_link(&token, &id);
    let old = hub.raw("POST", &format!("/approve/{expired}"), None, &[], None);
    assert_eq!(old.status, 403, "{}", old.body);
    assert!(old.body.contains("expired"), "{}", old.body);
    assert_eq!(approvals(&env, false).len(), 1);

    // The action: a POST of the link, with no other credential.
    let t = Instant::now();
    let ok = hub.raw("POST", &approve, None, &[], None);
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(ok.body.contains("Approved"), "{}", ok.body);
    // Used once: the same link again, and the deny link, are refused.
    let again = hub.raw("POST", &approve, None, &[], None);
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("was approved already (by link"), "{}", again.body);
    assert_eq!(hub.raw("POST", &deny, None, &[], None).status, 409);

    wait_until_telling(SESSION_DEADLINE, "session 2 to end", || c.ended() >= 2, || diag(&c));
    assert!(c.dir.join("pushed.txt").exists(), "{}", diag(&c));
    let done = approvals(&env, true).into_iter().find(|a| a["id"] == id.as_str()).unwrap();
    assert_eq!(done["decided_by"], "link", "{done}");
    eprintln!("approval by link to the session's end: {} ms", t.elapsed().as_millis());
}

/// A link as cryod makes one (`ID.a.EXPIRY.SIG`, SIG the first 16 bytes of
/// HMAC-SHA256 under the hub's token), expired a minute ago.
fn expired_link(key: &str, id: &str) -> String {
    let now = cryod::base::clock::Clock::system().now().timestamp();
    let body = format!("{id}.a.{}", now - 60);
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes());
    let sig: String = ring::hmac::sign(&k, body.as_bytes()).as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{body}.{sig}")
}

/// An agent that loosens its policy mid-session gets nothing from it: the
/// edit is held for the operator, and meanwhile nothing is allowed.
#[test]
fn a_policy_loosened_mid_session_allows_nothing() {
    let env = Env::new();
    let _d = env.start_daemon();
    let loosen = r#"sed -i 's/^default = "deny"/default = "allow"/' cryo.toml
i=0
while [ $i -lt 80 ]; do
  out=$(cryo-agent approval --tool Bash --input '{"command":"make"}')
  printf '%s\n' "$out" >> answers.out
  case "$out" in *"does not load now"*) break ;; esac
  i=$((i+1)); sleep 0.25
done
"#;
    let c = env.chamber("loosen", loosen, "\n[approvals]\ndefault = \"deny\"\n");
    env.cryoctl(&["chamber", "start", "loosen"]).ok();
    c.wait_ended(1);
    let answers = c.read("answers.out");
    assert!(answers.contains("does not load now"), "the edit was never held: {answers}");
    assert!(!answers.contains("\"allow\""), "the loosened policy allowed a call: {answers}");
}

/// A hostile agent floods asks in parallel, tries to answer its own, and
/// to slip a command in as a TODO's pre-check: at most 20 of a chamber's
/// requests wait, the rest are refused unasked; the operator's socket does
/// not serve the agent's processes; the pre-check is refused.
#[test]
fn an_agent_cannot_flood_asks_nor_answer_its_own() {
    let env = Env::new();
    let _d = env.start_daemon();
    let flood = r#"i=0
while [ $i -lt 30 ]; do cryo-agent approval --tool Bash --input "{\"command\":\"git push $i\"}" > "ask.$i" 2>&1 & i=$((i+1)); done
wait
cat ask.* > asks.out
cryoctl approvals approve a0123456789 > self.out 2>&1; echo "rc=$?" >> self.out
cryoctl approvals --json >> self.out 2>&1; echo "rc=$?" >> self.out
cryo-agent todo add later --at +1h --precheck "git push --force" > precheck.out 2>&1; echo "rc=$?" >> precheck.out
"#;
    let toml = "\n[approvals]\nask = [\"Bash(git push*)\"]\napproval_wait = \"2s\"\n";
    let c = env.chamber("flood", flood, toml);
    env.cryoctl(&["chamber", "start", "flood"]).ok();
    c.wait_ended(1);
    let pending = approvals(&env, false);
    assert_eq!(pending.len(), 20, "{pending:?}");
    let asks = c.read("asks.out");
    assert_eq!(asks.matches("already wait for a person").count(), 10, "{asks}");
    assert!(c.cryo_log().contains("refused unasked: 20 requests of this chamber already wait"), "{}", c.cryo_log());
    let own = c.read("self.out");
    assert!(!own.contains("rc=0"), "the agent reached the operator's socket: {own}");
    assert!(pending.iter().all(|a| a["state"] == "pending"), "{pending:?}");
    // A TODO's pre-check runs unattended: one the policy does not allow is
    // refused when the agent sets it.
    let pre = c.read("precheck.out");
    assert!(pre.contains("does not allow that pre-check") && !pre.contains("rc=0"), "{pre}");
    assert!(!c.read("todo.json").contains("git push --force"), "the TODO was kept");
}

/// Issue 59, case 6: a pre-check the agent writes straight into the TODO
/// journal or `todo.json` (not through `todo add`) meets the same policy at
/// its wake: it does not run, the wake goes ahead and says why, and the
/// one `todo add --precheck` is refused for the same reason.
#[test]
fn a_precheck_written_into_the_journal_or_todo_json_meets_the_policy() {
    let env = Env::new();
    let _d = env.start_daemon();
    let sneak = r#"if [ ! -e first ]; then touch first
cryo-agent todo add later --at +1h >/dev/null
now=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
printf '{"id":40,"text":"journaled","at":"%s","created":"%s","precheck":"touch JOURNAL-PWNED"}
' "$now" "$now" >> .cryo/todo-journal.jsonl
cryo-agent todo add check --at +1h --precheck "touch ADDED-PWNED" > add.out 2>&1; echo "rc=$?" >> add.out
cryo-agent hibernate >/dev/null
exit 0
fi
cryo-agent hibernate >/dev/null
"#;
    let toml = "\n[approvals]\nallow = [\"Bash(echo*)\"]\n";
    let c = env.chamber("sneak", sneak, toml);
    env.cryoctl(&["chamber", "start", "sneak"]).ok();
    c.wait_ended(1);
    let add = c.read("add.out");
    assert!(add.contains("does not allow that pre-check") && !add.contains("rc=0"), "{add}");
    // The journaled TODO was due at once: its wake came, without its check.
    c.wait_ended(2);
    let log = c.cryo_log();
    assert!(log.contains("TODO 40's pre-check `touch JOURNAL-PWNED` was not run"), "{log}");
    assert!(!c.dir.join("JOURNAL-PWNED").exists(), "the journaled pre-check ran");
    assert!(c.read(".cryo/prompt.md").contains("PRE-CHECK REFUSED: TODO 40's"), "{}", c.read(".cryo/prompt.md"));
    // The same through todo.json, edited by hand: the same rule.
    let mut todos = c.todos();
    let now = cryo_tests::date_utc("now");
    todos.as_array_mut().unwrap().push(serde_json::json!({
        "id": 41, "text": "edited", "at": now, "created": now, "precheck": "touch EDITED-PWNED"
    }));
    let tmp = c.dir.join(".todo.json.edit");
    std::fs::write(&tmp, serde_json::to_string_pretty(&todos).unwrap()).unwrap();
    std::fs::rename(tmp, c.dir.join("todo.json")).unwrap();
    c.wait_ended(3);
    assert!(c.cryo_log().contains("TODO 41's pre-check `touch EDITED-PWNED` was not run"), "{}", c.cryo_log());
    assert!(!c.dir.join("EDITED-PWNED").exists(), "the edited pre-check ran");
}

/// Every known kind asks before its tool calls under `[approvals]`: the
/// deny rule's command is refused unasked and the agent goes on; the ask
/// waits for a person, whose approval (within the wait) lets the same
/// session run it and finish.
fn asks_and_denies(bin: &str, setup: fn(&Env, &ModelServer) -> String) {
    let Some(path) = cli(bin) else { return };
    let script = Script::new()
        .on("- session: 1\n", &["rm -rf keep", "touch pushed.txt", "cryo-agent hibernate --complete --summary asked"]);
    let model = ModelServer::start(script);
    let env = Env::new();
    let _d = env.start_daemon();
    let toml = format!("agent = \"{}\"\n\n[provider]\n{}\n{}", path.display(), setup(&env, &model), policy("2m"));
    let c = env.chamber(bin, "", &toml);
    std::fs::create_dir_all(c.dir.join("keep")).unwrap();
    env.cryoctl(&["chamber", "start", bin]).ok();
    let diag = |c: &Chamber| {
        format!(
            "cryo.log:\n{}\ncryo-agent.log:\n{}\nmodel:\n{}",
            c.cryo_log(),
            c.read("cryo-agent.log"),
            model.transcript()
        )
    };
    let pending = || approvals(&env, false).into_iter().find(|a| a["subject"] == "touch pushed.txt");
    wait_until_telling(SESSION_DEADLINE, "the ask", || pending().is_some(), || diag(&c));
    assert!(c.dir.join("keep").is_dir(), "{bin}: a denied command ran\n{}", diag(&c));
    assert!(!c.dir.join("pushed.txt").exists(), "{bin}: the asked command ran before it was approved");
    assert!(c.cryo_log().contains("refused by the rule deny Bash(rm -rf*)"), "{}", diag(&c));
    let id = pending().unwrap()["id"].as_str().unwrap().to_string();
    env.cryoctl(&["approvals", "approve", &id]).ok();
    wait_until_telling(SESSION_DEADLINE, "the session to end", || c.ended() >= 1, || diag(&c));
    assert!(c.dir.join("pushed.txt").exists(), "{bin}: the approved command did not run\n{}", diag(&c));
    assert!(c.dir.join("keep").is_dir());
    assert!(c.cryo_log().contains("hibernate --complete accepted"), "{}", diag(&c));
    assert!(tool_results(&model).contains("policy refuses this call"), "{bin}: the agent was not told\n{}", diag(&c));
}

#[test]
fn codex_asks_before_its_tool_calls() {
    asks_and_denies("codex", crate::agents::codex_provider);
}

#[test]
fn opencode_asks_before_its_tool_calls() {
    asks_and_denies("opencode", crate::agents::opencode_provider);
}

#[test]
fn qwen_code_asks_before_its_tool_calls() {
    asks_and_denies("qwen", crate::agents::qwen_provider);
}

#[test]
fn gemini_cli_asks_before_its_tool_calls() {
    asks_and_denies("gemini", crate::agents::gemini_provider);
}

#[test]
fn pi_asks_before_its_tool_calls() {
    asks_and_denies("pi", crate::agents::pi_provider);
}

/// ntfy's action buttons and an e-mail's links answer requests: ntfy's
/// `http` action POSTs the link with the header it names; the e-mail's
/// link is the same link.
#[test]
fn ntfy_actions_and_email_links_answer_requests() {
    use cryo_tests::receiver::Receiver;
    let env = Env::new();
    let r = Receiver::start();
    let smtp = cryo_tests::smtp::Smtp::start();
    env.write_secret("smtp.creds", "cryo@example.com\nhunter2\n", 0o600);
    env.daemon_config(&format!(
        "[[notify]]\nname = \"phone\"\nkind = \"ntfy\"\nurl = \"{}\"\nevents = [\"approval\"]\n\n\
         [[notify]]\nname = \"mail\"\nkind = \"email\"\nsmtp = \"127.0.0.1:{}\"\ntls = \"none\"\n\
         from = \"cryo@example.com\"\nto = [\"me@example.com\"]\ncredentials_file = \"{}\"\nevents = [\"approval\"]\n",
        r.url("/topic"),
        smtp.port,
        env.home().join("smtp.creds").display()
    ));
    let _d = env.start_daemon();
    let hub = crate::hub::Hub::of(&env);
    let ask = r#"for n in 1 2; do cryo-agent approval --tool Bash --input "{\"command\":\"git push $n\"}" --reason "release $n" >> answers.out; echo >> answers.out; done
cryo-agent hibernate --complete
"#;
    let c = env.chamber("notices", ask, "\n[approvals]\nask = [\"Bash(git push*)\"]\napproval_wait = \"2m\"\n");
    env.cryoctl(&["chamber", "start", "notices"]).ok();
    let path = |url: &str| url.trim().split_once(hub.addr()).expect("a link to the hub").1.to_string();

    // The first ask: ntfy's Approve button.
    wait_until_within(SESSION_DEADLINE, "the ntfy notice", || !r.got("/topic").is_empty());
    let p = &r.got("/topic")[0];
    assert_eq!(p.header("Priority"), "high");
    assert!(String::from_utf8_lossy(&p.body).contains("git push 1"), "the call is in the notice");
    let actions = p.header("Actions").to_string();
    let approve = actions.split("; ").next().unwrap().split(", ").nth(2).unwrap().to_string();
    assert!(actions.starts_with("http, Approve, ") && actions.contains("; http, Deny, "), "{actions}");
    assert!(actions.contains("method=POST, headers.X-Cryo-Csrf=1, clear=true"), "{actions}");
    let ok = hub.raw("POST", &path(&approve), None, &["X-Cryo-Csrf: 1"], None);
    assert_eq!(ok.status, 200, "{}", ok.body);

    // The second ask: the e-mail's Deny link.
    wait_until_within(SESSION_DEADLINE, "the second mail", || smtp.mails().len() >= 2);
    let mail = smtp.mails()[1].data.replace("=\r\n", "").replace("=3D", "=");
    assert!(mail.contains("git push 2") && mail.contains("release 2"), "the call and the agent's reason: {mail}");
    let deny = mail.lines().find_map(|l| l.strip_prefix("Deny: ")).expect("a deny link").to_string();
    let no = hub.raw("POST", &path(&deny), None, &[], None);
    assert_eq!(no.status, 200, "{}", no.body);

    c.wait_ended(1);
    let answers: Vec<Value> =
        c.read("answers.out").lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers[0]["behavior"], "allow", "{answers:?}");
    assert_eq!(answers[1]["behavior"], "deny", "{answers:?}");
    let all = approvals(&env, true);
    assert!(all.iter().all(|a| a["decided_by"] == "link"), "{all:?}");
    assert!(all.iter().any(|a| a["reason"] == "release 1"), "{all:?}");
}

/// The hub's "Needs you" in headless Chromium: each waiting call shown
/// whole, axe-clean at 390 and 1280 px; Approve and Deny (with a reason)
/// answer them as `hub`.
#[test]
fn the_hubs_needs_you_answers_requests_in_chromium() {
    let Some(dir) = crate::browser::driver() else {
        eprintln!("SKIPPED the hub's approvals in Chromium: needs node, /usr/bin/chromium and tests/browser's modules");
        return;
    };
    let env = Env::new();
    let _d = env.start_daemon();
    let ask = r#"cryo-agent approval --tool Bash --input '{"command":"git push origin main"}' > one.out &
cryo-agent approval --tool Bash --input '{"command":"git push --tags\nsecond line"}' > two.out &
wait
cryo-agent hibernate --complete
"#;
    let c = env.chamber("console", ask, "\n[approvals]\nask = [\"Bash(git push*)\"]\napproval_wait = \"2m\"\n");
    env.cryoctl(&["chamber", "start", "console"]).ok();
    wait_until_within(SESSION_DEADLINE, "two requests", || approvals(&env, false).len() == 2);
    let seen = crate::browser::run_driver(
        &dir,
        "approvals.mjs",
        &env,
        &[("APPROVE", "git push origin main".into()), ("DENY", "git push --tags\nsecond line".into())],
    );
    crate::browser::assert_everywhere_clean(&seen);
    for width in [390, 1280] {
        let items = seen[format!("items_{width}")].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 2, "{seen}");
        assert!(
            items.iter().any(|i| i["call"] == "git push --tags\nsecond line"),
            "the call whole, lines kept: {seen}"
        );
        assert!(seen[format!("heading_{width}")].as_str().unwrap().contains("Needs you"), "{seen}");
        assert_eq!(seen["axe"][format!("needs_you_{width}")], serde_json::json!([]), "{seen}");
    }
    c.wait_ended(1);
    assert!(c.read("one.out").contains("\"allow\""), "{}", c.read("one.out"));
    assert!(c.read("two.out").contains("not from the hub"), "{}", c.read("two.out"));
    let all = approvals(&env, true);
    assert!(all.iter().all(|a| a["decided_by"] == "hub"), "{all:?}");
}

/// Issue 63, cases 1 and 2: the list is open in Chromium at 360 px when the
/// agent asks; the request's card appears without a reload (the event
/// stream's `approval` frame), within a second of the ask; the chamber's
/// row says `awaiting approval` and "1 approval", the "needs you" filter
/// keeps it, its own page shows the request, axe-clean; Approve there (a
/// 44 px target) answers the agent.
#[test]
fn a_request_reaches_an_open_page_and_is_approved_from_a_phone() {
    let Some(dir) = crate::browser::driver_for("a_request_reaches_an_open_page_and_is_approved_from_a_phone") else {
        return;
    };
    let env = Env::new();
    let _d = env.start_daemon();
    // It waits for the page to be open (GO_FILE), notes the time, asks.
    let ask = r#"i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
echo $(($(date +%s%N) / 1000000)) > asked.at
cryo-agent approval --tool Bash --input '{"command":"git push origin live"}' > one.out
cryo-agent hibernate --complete
"#;
    let c = env.chamber("live", ask, "\n[approvals]\nask = [\"Bash(git push*)\"]\napproval_wait = \"2m\"\n");
    env.cryoctl(&["chamber", "start", "live"]).ok();
    let seen = crate::browser::run_driver(
        &dir,
        "live-approval.mjs",
        &env,
        &[
            ("GO_FILE", c.dir.join("go").display().to_string()),
            ("ASKED_FILE", c.dir.join("asked.at").display().to_string()),
            ("CHAMBER", "live".into()),
        ],
    );
    eprintln!("figure: ask to card on an open page {} ms", seen["ask_to_card_ms"]);
    crate::browser::assert_everywhere_clean(&seen);
    assert_eq!(seen["before"], 0, "{seen}");
    assert_eq!(seen["same_document"], true, "no reload: {seen}");
    assert!(seen["ask_to_card_ms"].as_i64().is_some_and(|ms| (0..1000).contains(&ms)), "within a second: {seen}");
    assert_eq!(seen["card"]["call"], "git push origin live", "{seen}");
    assert_eq!(seen["heading"], "Needs you (1)", "{seen}");
    let row = seen["row"].as_str().unwrap_or_default();
    assert!(row.contains("awaiting approval") && row.contains("1 approval"), "{seen}");
    assert_eq!(seen["needs_rows"], serde_json::json!(["live"]), "{seen}");
    assert!(seen["page_badge"].as_str().unwrap_or_default().contains("awaiting approval"), "{seen}");
    assert_eq!(seen["page_card"], "git push origin live", "{seen}");
    assert!(seen["approve_box"]["height"].as_i64().is_some_and(|h| h >= 44), "a 44 px target: {seen}");
    assert!(seen["page_width"].as_i64().is_some_and(|w| w <= 360), "nothing wider than the phone: {seen}");
    assert_eq!(seen["axe"]["list_360"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["axe"]["chamber_360"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["after"], 0, "{seen}");
    let decided = seen["decided"][0].as_str().unwrap_or_default();
    assert!(decided.starts_with("approved by hub") && decided.contains("live Bash: git push origin live"), "{seen}");
    c.wait_ended(1);
    assert!(c.read("one.out").contains("\"allow\""), "{}", c.read("one.out"));
    let all = approvals(&env, true);
    assert!(all.iter().all(|a| a["decided_by"] == "hub"), "{all:?}");
}
