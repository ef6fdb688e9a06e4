//! Issue 9: the sync bridges against local servers that speak Zulip's and
//! GitHub's documented APIs (`cryo_tests::fake_zulip`, `fake_github`), with
//! the real cryod and scripted agents.

use std::time::Duration;

use cryo_tests::fake_github::{self, FakeGithub};
use cryo_tests::fake_zulip::{self, FakeZulip};
use cryo_tests::{ANSWERING_AGENT, Chamber, Env, wait_until, wait_until_telling};

/// Answers every message with `got: BODY` (and checks in on its first
/// session); keeps a TODO an hour out so it always has a next wake.
fn zuliprc(env: &Env, key: &str, mode: u32) {
    env.write_secret("zuliprc", &format!("[api]\nemail={}\nkey={key}\n", fake_zulip::EMAIL), mode);
}

fn zulip_toml(z: &FakeZulip, stream: &str, topic: &str) -> String {
    format!(
        "[sync.zulip]\nsite = \"{}\"\nstream = \"{stream}\"\ntopic = \"{topic}\"\ncredentials = \"~/zuliprc\"\n",
        z.url()
    )
}

fn github_toml(g: &FakeGithub, target: &str) -> String {
    format!(
        "[sync.github]\nrepo = \"{}/{}\"\n{target}\ntoken_file = \"~/gh-token\"\napi_url = \"{}\"\npoll_interval = 1\n",
        fake_github::OWNER,
        fake_github::REPO,
        g.url()
    )
}

/// What a wait on a bridge's round trip says when it times out: the
/// chamber's `cryo.log` and mail folders and the end of cryod's log (both
/// back-off tests timed out once in a full run, and said nothing more).
fn told<'a>(env: &'a Env, c: &'a Chamber) -> impl Fn() -> String + 'a {
    move || {
        let log = env.daemon_log();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(80)..];
        let mail: Vec<String> =
            ["messages/inbox", "messages/inbox/archive", "messages/outbox", "messages/outbox/archive"]
                .iter()
                .map(|f| format!("{f}: {:?}", c.messages(f).into_iter().map(|(n, _)| n).collect::<Vec<_>>()))
                .collect();
        format!("cryo.log:\n{}\n{}\ncryod.log (end):\n{}", c.cryo_log(), mail.join("\n"), tail.join("\n"))
    }
}

/// The chamber's bridge status (`chamber sync status --json`).
fn bridge(env: &Env, chamber: &str) -> serde_json::Value {
    let r = env.cryoctl(&["chamber", "sync", chamber, "status", "--json"]);
    r.json()["bridges"][0].clone()
}

fn wait_bridge(env: &Env, chamber: &str, state: &str) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    wait_until(&format!("the bridge to be {state} (last seen: {last})"), || {
        last = bridge(env, chamber);
        last["state"] == state
    });
    last
}

/// Inbox messages (claimed or not) as (file name, text).
fn incoming(c: &Chamber) -> Vec<(String, String)> {
    let mut all = c.messages("messages/inbox");
    all.extend(c.messages("messages/inbox/archive"));
    all
}

fn bodies(msgs: &[fake_zulip::Msg]) -> Vec<String> {
    msgs.iter().map(|m| m.content.clone()).collect()
}

#[test]
fn zulip_messages_flow_both_ways_without_echo_or_doubles() {
    let z = FakeZulip::start();
    let env = Env::new();
    zuliprc(&env, fake_zulip::KEY, 0o600);
    let _d = env.start_daemon();
    // History on the topic before the bridge starts is not delivered.
    z.say("Old", "alpha", "from before the bridge");
    let c = env.chamber("alpha", ANSWERING_AGENT, &zulip_toml(&z, "agents", "alpha"));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    // The bootstrap session's report is posted, then archived.
    wait_until("the check-in on Zulip", || bodies(&z.topic("alpha")).contains(&"checked in".to_string()));
    wait_until("the outbox archived", || c.outbox().is_empty() && !c.messages("messages/outbox/archive").is_empty());
    // A person writes on the topic: it reaches the agent, whose answer comes back.
    z.say("Alice", "alpha", "hello agent");
    z.say("Bob", "elsewhere", "not for this chamber");
    wait_until("the reply on Zulip", || bodies(&z.topic("alpha")).iter().any(|b| b.contains("got: hello agent")));
    let inbox = incoming(&c);
    assert_eq!(inbox.len(), 1, "exactly Alice's message reached the inbox: {inbox:?}");
    let text = &inbox[0].1;
    assert!(text.contains("from: Alice") && text.contains("subject: alpha") && text.contains("zulip_id: "), "{text}");
    // Each message exactly once on Zulip; the bot's own posts never came back.
    let topic = bodies(&z.topic("alpha"));
    assert_eq!(topic.iter().filter(|b| *b == "checked in").count(), 1, "{topic:?}");
    assert_eq!(topic.iter().filter(|b| b.contains("got: hello agent")).count(), 1, "{topic:?}");
    assert!(!incoming(&c).iter().any(|(_, t)| t.contains("checked in")), "an echo of our own post was delivered");
    let b = bridge(&env, "alpha");
    assert_eq!(b["state"], "connected", "{b}");
    assert!(b["last_push"].is_string() && b["target"].as_str().unwrap().contains("#agents > alpha"), "{b}");
    assert_eq!(z.unauthenticated(), 0);
    // The key is never shown or logged.
    let status = env.cryoctl(&["chamber", "status", "alpha", "--json"]).stdout.clone();
    for text in [status, c.cryo_log(), env.daemon_log(), c.read("cryo-agent.log")] {
        assert!(!text.contains(fake_zulip::KEY), "the Zulip key leaked");
    }
    // The human view lists the bridge.
    let human = env.cryoctl(&["chamber", "sync", "alpha"]).ok().to_string();
    assert!(human.contains("zulip") && human.contains("connected"), "{human}");
}

#[test]
fn zulip_restart_resumes_from_the_cursor_and_an_expired_queue_backfills() {
    let z = FakeZulip::start();
    let env = Env::new();
    zuliprc(&env, fake_zulip::KEY, 0o600);
    let mut d = env.start_daemon();
    let c = env.chamber("alpha", ANSWERING_AGENT, &zulip_toml(&z, "agents", "alpha"));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    wait_bridge(&env, "alpha", "connected");
    z.say("Alice", "alpha", "one");
    wait_until("one delivered", || !incoming(&c).is_empty());
    // cryod goes down; two messages arrive meanwhile.
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    z.say("Alice", "alpha", "two");
    z.say("Alice", "alpha", "three");
    let _d = env.start_daemon();
    wait_until("two and three delivered", || incoming(&c).len() >= 3);
    // The queue expires (Zulip collects idle queues); what comes meanwhile is back-filled.
    let registered = z.registrations();
    z.expire_queues();
    z.say("Alice", "alpha", "four");
    wait_until("four delivered", || incoming(&c).len() >= 4);
    wait_until("a new queue", || z.registrations() > registered);
    z.say("Alice", "alpha", "five");
    wait_until("five delivered", || incoming(&c).len() >= 5);
    let texts: Vec<String> = incoming(&c).into_iter().map(|(_, t)| t).collect();
    for word in ["one", "two", "three", "four", "five"] {
        let n = texts.iter().filter(|t| t.trim_end().ends_with(&format!("\n{word}"))).count();
        assert_eq!(n, 1, "{word} delivered {n} times: {texts:?}");
    }
}

#[test]
fn a_person_who_answers_the_first_post_at_once_is_heard() {
    let z = FakeZulip::start();
    let env = Env::new();
    zuliprc(&env, fake_zulip::KEY, 0o600);
    let _d = env.start_daemon();
    // Zulip is down until the check-in waits in the outbox, so the bridge's
    // first act once connected is to post it. Alice answers the moment it
    // lands, before the bridge has pulled even once: the bridge marks where
    // the topic stands before it posts, so her answer is after the mark.
    z.fail("/api/v1/users/me", 500, None, 1000);
    z.answer_next_post("Alice", "already here");
    let c = env.chamber("alpha", ANSWERING_AGENT, &zulip_toml(&z, "agents", "alpha"));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    c.wait_ended(1);
    assert!(c.outbox().iter().any(|m| m.contains("checked in")), "the check-in waits: {:?}", c.outbox());
    z.heal();
    wait_until_telling(
        Duration::from_secs(60),
        "the reply to Alice",
        || bodies(&z.topic("alpha")).iter().any(|b| b.contains("got: already here")),
        told(&env, &c),
    );
    let topic = bodies(&z.topic("alpha"));
    assert_eq!(topic.iter().filter(|b| *b == "checked in").count(), 1, "{topic:?}");
    assert_eq!(incoming(&c).len(), 1, "only Alice's message came in");
}

#[test]
fn zulip_5xx_and_429_back_off_and_a_same_account_human_gets_through() {
    let z = FakeZulip::start();
    let env = Env::new();
    zuliprc(&env, fake_zulip::KEY, 0o600);
    let _d = env.start_daemon();
    // The credentials check fails twice with 500 before it works.
    z.fail("/api/v1/users/me", 500, None, 2);
    let c = env.chamber("alpha", ANSWERING_AGENT, &zulip_toml(&z, "agents", "alpha"));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    wait_until("the check-in posted", || bodies(&z.topic("alpha")).contains(&"checked in".to_string()));
    let tries = z.calls("/api/v1/users/me");
    assert_eq!(tries.len(), 3, "two failures then success");
    assert!(tries[2] - tries[1] >= Duration::from_millis(1900), "the second wait doubled: {:?}", tries[2] - tries[1]);
    // A post refused with 429 and Retry-After: 1 waits, then posts once.
    z.fail("/api/v1/messages", 429, Some(1), 1);
    // Someone using the bot's own account writes: still a person, still delivered.
    z.say_as(fake_zulip::EMAIL, "Cryo Bot", "alpha", "same account, different person");
    // Through a wake, a session and a post after a 429: room for a loaded machine.
    wait_until_telling(
        Duration::from_secs(60),
        "the reply posted",
        || bodies(&z.topic("alpha")).iter().any(|b| b.contains("got: same account, different person")),
        told(&env, &c),
    );
    let posts: Vec<_> = z.calls("/api/v1/messages");
    assert!(
        posts.windows(2).any(|w| w[1] - w[0] >= Duration::from_millis(900)),
        "the retry waited for Retry-After: {posts:?}"
    );
    let topic = bodies(&z.topic("alpha"));
    assert_eq!(topic.iter().filter(|b| b.contains("got: same account")).count(), 1, "{topic:?}");
    assert!(incoming(&c).iter().any(|(_, t)| t.contains("same account, different person")));
}

#[test]
fn a_crash_between_post_and_archive_does_not_post_twice() {
    let z = FakeZulip::start();
    let env = Env::new();
    zuliprc(&env, fake_zulip::KEY, 0o600);
    let mut d = env.start_daemon();
    let c = env.chamber("alpha", ANSWERING_AGENT, &zulip_toml(&z, "agents", "alpha"));
    // The archive cannot be made (a file stands where the folder goes), so the
    // bridge posts, records the post, and fails to archive.
    std::fs::remove_dir_all(c.dir.join("messages/outbox/archive")).unwrap();
    std::fs::write(c.dir.join("messages/outbox/archive"), "in the way").unwrap();
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    wait_until("the check-in posted", || bodies(&z.topic("alpha")).contains(&"checked in".to_string()));
    wait_until("the archive error shown", || {
        bridge(&env, "alpha")["last_error"].as_str().is_some_and(|e| e.contains("cannot archive"))
    });
    // (The session ends first, in the ledger too: a session the kill cuts,
    // or whose end is not yet recorded, would add a fallback message.)
    c.wait_ended(1);
    wait_until("the session's end recorded", || {
        env.cryoctl(&["chamber", "status", "alpha", "--json"]).json()[0]["sessions"][0]["ended_at"].is_string()
    });
    let pending = c.outbox();
    assert!(pending.iter().any(|m| m.contains("checked in")), "the message is still in the outbox");
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    std::fs::remove_file(c.dir.join("messages/outbox/archive")).unwrap();
    let _d = env.start_daemon();
    wait_until("archived after the restart", || c.outbox().is_empty());
    assert_eq!(c.messages("messages/outbox/archive").len(), pending.len());
    let topic = bodies(&z.topic("alpha"));
    assert_eq!(topic.iter().filter(|b| *b == "checked in").count(), 1, "posted twice: {topic:?}");
    assert_eq!(topic.len(), pending.len(), "every message posted exactly once: {topic:?}");
}

#[test]
fn bad_credentials_an_unknown_stream_and_loose_files_stop_only_that_bridge() {
    let z = FakeZulip::start();
    let env = Env::new();
    let _d = env.start_daemon();
    // A wrong key.
    zuliprc(&env, "wrong-key", 0o600);
    let a = env.chamber("alpha", ANSWERING_AGENT, &zulip_toml(&z, "agents", "alpha"));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    let b = wait_bridge(&env, "alpha", "stopped");
    let e = b["last_error"].as_str().unwrap();
    assert!(e.contains("credentials were refused") && e.contains("zuliprc"), "{e}");
    assert!(!e.contains("wrong-key"));
    // The chamber itself runs on.
    a.wait_ended(1);
    assert!(a.cryo_log().contains("hibernate accepted"));
    let status = env.cryoctl(&["chamber", "status", "alpha"]).ok().to_string();
    assert!(status.contains("sync      zulip stopped: checking the Zulip credentials"), "{status}");
    // The hub shows it too.
    let page = crate::hub::Hub::of(&env).get("/api/chambers/alpha").json();
    let shown = &page["chamber"]["bridges"][0];
    assert_eq!(shown["state"], "stopped", "{page}");
    assert!(shown["last_error"].as_str().unwrap().contains("credentials were refused"), "{page}");
    // Fixed: a pull starts the bridge again.
    zuliprc(&env, fake_zulip::KEY, 0o600);
    env.cryoctl(&["chamber", "sync", "alpha", "pull"]).ok();
    assert_eq!(bridge(&env, "alpha")["state"], "connected");

    // An unknown stream.
    env.chamber("beta", ANSWERING_AGENT, &zulip_toml(&z, "nope", "t"));
    env.cryoctl(&["chamber", "start", "beta"]).ok();
    let e = wait_bridge(&env, "beta", "stopped")["last_error"].as_str().unwrap().to_string();
    assert!(e.contains("no stream \"nope\"") && e.contains("Invalid channel name"), "{e}");
    let r = env.cryoctl(&["chamber", "sync", "beta", "pull"]);
    assert!(r.fails(1).contains("zulip: stopped: Zulip has no stream"), "{}", r.stderr);

    // Credentials others can read are refused, and never read.
    env.write_secret("gh-token", fake_github::TOKEN, 0o644);
    let g = FakeGithub::start();
    env.chamber("gamma", ANSWERING_AGENT, &github_toml(&g, &format!("issue = {}", fake_github::ISSUE)));
    env.cryoctl(&["chamber", "start", "gamma"]).ok();
    let e = wait_bridge(&env, "gamma", "stopped")["last_error"].as_str().unwrap().to_string();
    assert!(e.contains("has mode 644") && e.contains("chmod 600"), "{e}");
    assert!(g.calls("/").is_empty(), "nothing was sent with a loose token");
}

#[test]
fn github_issue_comments_flow_both_ways_with_pages_and_etags() {
    let g = FakeGithub::start();
    g.set_max_page(2);
    for i in 0..3 {
        g.comment(false, "someone", &format!("history {i}"));
    }
    let env = Env::new();
    env.write_secret("gh-token", &format!("{}\n", fake_github::TOKEN), 0o600);
    let _d = env.start_daemon();
    let c = env.chamber("alpha", ANSWERING_AGENT, &github_toml(&g, &format!("issue = {}", fake_github::ISSUE)));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    wait_until("the check-in commented", || g.comments(false).iter().any(|c| c.body == "checked in"));
    // Polls that find nothing new are answered 304.
    wait_until("a 304", || g.not_modified() > 0);
    // A person, and someone on the bot's own account, comment.
    g.comment(false, "alice", "please look at the flaky test");
    g.comment(false, fake_github::LOGIN, "same login, but a person");
    // (Both may reach the agent in one batch, and get one answer.)
    let answered = |text: &str| g.comments(false).iter().any(|c| c.body.starts_with("got: ") && c.body.contains(text));
    wait_until("both answered", || answered("please look") && answered("same login, but a person"));
    let texts: Vec<String> = incoming(&c).into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts.len(), 2, "history and our own comments stay out: {texts:?}");
    assert!(texts.iter().any(|t| t.contains("from: alice") && t.contains("github_id: ")));
    let bodies: Vec<String> = g.comments(false).into_iter().map(|c| c.body).collect();
    assert_eq!(bodies.iter().filter(|b| b.starts_with("got: ") && b.contains("please look")).count(), 1, "{bodies:?}");
    assert_eq!(bodies.iter().filter(|b| *b == "checked in").count(), 1, "{bodies:?}");
}

#[test]
fn github_discussion_comments_flow_both_ways_and_5xx_backs_off() {
    let g = FakeGithub::start();
    g.comment(true, "someone", "history");
    let env = Env::new();
    env.write_secret("gh-token", fake_github::TOKEN, 0o600);
    let _d = env.start_daemon();
    g.fail("/graphql", 502, None, 1);
    let c =
        env.chamber("alpha", ANSWERING_AGENT, &github_toml(&g, &format!("discussion = {}", fake_github::DISCUSSION)));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    wait_until("the check-in in the discussion", || g.comments(true).iter().any(|c| c.body == "checked in"));
    g.comment(true, "alice", "what is the status?");
    // A poll, a wake, a session and a post: room for a loaded machine.
    wait_until_telling(
        Duration::from_secs(60),
        "the reply",
        || g.comments(true).iter().any(|c| c.body.contains("got: what is the status?")),
        told(&env, &c),
    );
    let texts: Vec<String> = incoming(&c).into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts.len(), 1, "{texts:?}");
    let b = bridge(&env, "alpha");
    assert!(b["target"].as_str().unwrap().contains("discussion #34"), "{b}");
    // A discussion that does not exist stops the bridge with GitHub's words.
    let d = env.chamber("beta", ANSWERING_AGENT, &github_toml(&g, "discussion = 99"));
    env.cryoctl(&["chamber", "start", "beta"]).ok();
    let e = wait_bridge(&env, "beta", "stopped")["last_error"].as_str().unwrap().to_string();
    assert!(e.contains("Could not resolve to a Discussion"), "{e}");
    drop(d);
}

#[test]
fn zulip_attachments_come_down_and_go_up_but_nothing_else_leaves() {
    let z = FakeZulip::start();
    let env = Env::new();
    zuliprc(&env, fake_zulip::KEY, 0o600);
    let _d = env.start_daemon();
    // The agent replies with links to a file it made, and to files it must not share.
    let script = r#"
cryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null
mkdir -p messages/attachments
echo "the report" > messages/attachments/report.txt
ln -sf ../../cryo.toml messages/attachments/config.txt
i=0
while [ $i -lt 50 ]; do
  i=$((i + 1))
  if cryo-agent receive | grep -q 'messages/attachments/'; then
    cryo-agent send "see [report](messages/attachments/report.txt), [config](messages/attachments/config.txt), [toml](cryo.toml)" >/dev/null
  elif [ $i = 1 ]; then
    cryo-agent send "checked in" >/dev/null
  fi
  cryo-agent hibernate >/dev/null 2>&1 && exit 0
done
exit 1
"#;
    let c = env.chamber("alpha", script, &zulip_toml(&z, "agents", "alpha"));
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    wait_until("the check-in", || bodies(&z.topic("alpha")).contains(&"checked in".to_string()));
    let link = z.upload("plot%201.png", b"PNGDATA");
    z.say("Alice", "alpha", &format!("here is [the plot]({link})"));
    wait_until("the reply", || bodies(&z.topic("alpha")).iter().any(|b| b.starts_with("see ")));
    // Down: the file is in the chamber and the message links to it.
    let files: Vec<String> = std::fs::read_dir(c.dir.join("messages/attachments"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let plot = files.iter().find(|f| f.ends_with("plot_1.png")).expect("the plot was downloaded");
    assert_eq!(std::fs::read(c.dir.join("messages/attachments").join(plot)).unwrap(), b"PNGDATA");
    let msg = incoming(&c).into_iter().map(|(_, t)| t).find(|t| t.contains("the plot")).unwrap();
    assert!(msg.contains(&format!("(messages/attachments/{plot})")), "{msg}");
    // Up: the report went to Zulip; the symlink and cryo.toml did not.
    let reply = bodies(&z.topic("alpha")).into_iter().find(|b| b.starts_with("see ")).unwrap();
    let up = reply.split("[report](").nth(1).and_then(|r| r.split(')').next()).unwrap().to_string();
    assert!(up.starts_with("/user_uploads/"), "{reply}");
    assert_eq!(z.uploaded(&up).as_deref(), Some(&b"the report\n"[..]));
    assert!(
        reply.contains("[config](messages/attachments/config.txt)") && reply.contains("[toml](cryo.toml)"),
        "{reply}"
    );
    assert_eq!(z.calls("/api/v1/user_uploads").len(), 2, "one download URL and one upload, nothing more");
}
