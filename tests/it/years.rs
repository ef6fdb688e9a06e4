//! Issue 41: a chamber that has lived for years wakes and answers as a new
//! one does. Done TODOs leave `todo.json` for an append-only archive (listed
//! a page at a time), the cap counts only open TODOs, and the ledger's
//! history is pruned with its usage kept.

use cryo_tests::{Env, wait_until};

/// `todo.json` holding `done` done TODOs and one due now.
fn aged_todos(done: usize) -> String {
    let mut items: Vec<String> = (1..=done).map(|i| format!(r#"{{"id":{i},"text":"job {i}","done":true}}"#)).collect();
    items.push(format!(r#"{{"id":{},"text":"today's work","done":false,"at":"2000-01-01T00:00:00Z"}}"#, done + 1));
    format!("[{}]", items.join(","))
}

/// 10,001 done TODOs (an hourly chamber after fourteen months) no longer
/// fault the chamber: it wakes, and its session's end moves all but the
/// newest `keep_done` done ones to the archive, where `todo list --all`
/// pages through them, newest first, each once.
#[test]
fn a_chamber_with_ten_thousand_done_todos_wakes_and_archives_them() {
    let env = Env::new();
    let _d = env.start_daemon();
    let script = "cryo-agent todo add 'next' --at +1h >/dev/null\ncryo-agent hibernate\n";
    let c = env.chamber("c", script, "[history]\nkeep_done = 10");
    c.seed_history();
    c.write_todos(&aged_todos(10_001));
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    // The session's end settles its claim (10,002 done), and one more leaves.
    wait_until("the settled TODO's archive", || {
        let todos = c.todos();
        let list = todos.as_array().unwrap();
        list.iter().any(|t| t["id"] == 10_002 && t["done"] == true)
            && list.iter().filter(|t| t["done"] == true).count() == 10
    });
    let todos = c.todos();
    let ids: Vec<u64> = todos.as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, (9_993..=10_003).collect::<Vec<_>>(), "the newest done ones, the one just done and the new one");
    let archive = c.read(".cryo/todo-done.jsonl");
    assert_eq!(archive.lines().count(), 9_992, "every other done TODO is archived, once");
    // Paged from the newest: a page, then the one before it, no overlap.
    let page = env.cryoctl(&["chamber", "todo", "c", "list", "--all", "--limit", "3", "--json"]);
    let shown = page.json();
    let first: Vec<u64> = shown.as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(first[..3], [9_990, 9_991, 9_992], "the newest archived first, then todo.json's");
    assert_eq!(first.len(), 3 + 11);
    let cursor = page.stderr.split("--before ").nth(1).expect("a cursor to the older page").trim().to_string();
    let older = env.cryoctl(&["chamber", "todo", "c", "list", "--all", "--limit", "2", "--before", &cursor, "--json"]);
    let ids: Vec<u64> = older.json().as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [9_988, 9_989], "the page before, alone");
    // The plain list shows what is open.
    let open = env.cryoctl(&["chamber", "todo", "c", "list"]);
    assert!(open.ok().contains("next") && !open.stdout.contains("job 1 "), "{}", open.stdout);
    // The hub pages the same history: todo.json's done ones after the
    // archive's newest, then the page before.
    let hub = crate::hub::Hub::of(&env);
    let first = hub.get("/api/chambers/c/todos/done?limit=2").json();
    let ids: Vec<u64> = first["todos"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids[..2], [9_991, 9_992]);
    assert_eq!(ids.len(), 2 + 10, "and the ten done ones todo.json keeps");
    let before = first["before"].as_u64().expect("an older page");
    let older = hub.get(&format!("/api/chambers/c/todos/done?limit=2&before={before}")).json();
    let ids: Vec<u64> = older["todos"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [9_989, 9_990]);
}

/// A crash between the archive's append and `todo.json`'s rewrite leaves
/// done TODOs in both; the next archive skips those it already holds, and a
/// torn last line is closed, not glued to the next.
#[test]
fn an_archive_cut_short_is_neither_doubled_nor_glued() {
    let env = Env::new();
    let _d = env.start_daemon();
    let script = "cryo-agent todo add 'next' --at +1h >/dev/null\ncryo-agent hibernate\n";
    let c = env.chamber("c", script, "[history]\nkeep_done = 0");
    c.seed_history();
    c.write_todos(&aged_todos(5));
    // As if a cryod died after archiving 4 and 5 (one torn) but before
    // rewriting todo.json.
    std::fs::create_dir_all(c.dir.join(".cryo")).unwrap();
    let line = |id: u32| format!(r#"{{"id":{id},"text":"job {id}","done":true,"archived":"2026-11-01T00:00:00Z"}}"#);
    std::fs::write(c.dir.join(".cryo/todo-done.jsonl"), format!("{}\n{}\n{{\"id\":9,\"te", line(4), line(5))).unwrap();
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    wait_until("the settled TODO to leave todo.json", || c.todos().as_array().unwrap().iter().all(|t| t["id"] != 6));
    let archive = c.read(".cryo/todo-done.jsonl");
    let ids: Vec<u64> = archive
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [4, 5, 1, 2, 3, 6], "4 and 5 once each, the torn line left alone: {archive}");
}

/// The cap counts open TODOs: at 10,000 a `todo add` is refused with one
/// line, and the chamber goes on.
#[test]
fn a_full_list_refuses_an_add_and_does_not_fault() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", "cryo-agent hibernate\n", "");
    c.seed_history();
    let items: Vec<String> = (1..=10_000)
        .map(|i| format!(r#"{{"id":{i},"text":"t{i}","done":false,"at":"2099-01-01T00:00:00Z"}}"#))
        .collect();
    c.write_todos(&format!("[{}]", items.join(",")));
    env.cryoctl(&["chamber", "start", "c"]).ok();
    let e = env.cryoctl(&["chamber", "todo", "c", "add", "one more", "--at", "+1h"]);
    let line = e.fails(1);
    assert!(line.contains("10000 TODOs not done") && line.lines().count() == 1, "{line}");
    let s = env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0].clone();
    assert_ne!(s["state"], "faulted", "{s}");
}

/// `cryoctl history prune` deletes what `--keep` does not keep and says so;
/// `usage` counts the same afterwards; a bad `--keep` is one line.
#[test]
fn history_prune_keeps_usage_and_the_newest_session() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", "cryo-agent hibernate\n", "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let before = env.cryoctl(&["usage", "--since", "all", "--json"]).json();
    let pruned = env.cryoctl(&["history", "prune", "--keep", "1d", "--json"]).json();
    assert_eq!(pruned["sessions"], 0, "the only session is its chamber's newest: {pruned}");
    assert!(pruned["before"].as_str().is_some_and(|d| d.len() == 10), "{pruned}");
    assert_eq!(env.cryoctl(&["usage", "--since", "all", "--json"]).json(), before);
    let e = env.cryoctl(&["history", "prune", "--keep", "forever-ish"]);
    assert!(e.fails(1).contains("not how long to keep history"), "{}", e.stderr);
}

/// When admission is what holds wakes back, `chamber list`, `status` and
/// `doctor` say so, with the limit and where it comes from.
#[test]
fn wakes_waiting_for_a_session_slot_are_shown() {
    let env = Env::new();
    env.daemon_config("max_concurrent_sessions = 1\n");
    let _d = env.start_daemon();
    let script = "sleep 30\ncryo-agent hibernate\n";
    for name in ["a", "b"] {
        env.chamber(name, script, "");
        env.cryoctl(&["chamber", "start", name, "--no-wait"]).ok();
    }
    let want = "1 wake waits for a session slot: 1 of 1 in use (max_concurrent_sessions, set in cryod.toml)";
    wait_until("a wake to wait for the one slot", || env.cryoctl(&["chamber", "list"]).stdout.contains(want));
    let status = env.cryoctl(&["chamber", "status", "a"]);
    assert!(status.ok().contains(&format!("slots     {want}")), "{}", status.stdout);
    let doctor = env.cryoctl(&["doctor"]);
    assert!(doctor.stdout.contains(want), "{}", doctor.stdout);
}

/// An agent that plants a link as its journal or a FIFO as its archive
/// breaks only its own writes: the add is refused with one line, the file
/// outside is never written, cryod does not block.
#[test]
fn a_planted_journal_or_archive_writes_nothing_outside() {
    let env = Env::new();
    let _d = env.start_daemon();
    let outside = env.path("outside.txt");
    std::fs::write(&outside, "keep me\n").unwrap();
    let script = format!(
        "ln -s {} .cryo/todo-journal.jsonl\ncryo-agent todo add one --at +1h > add.txt 2>&1; echo \"rc=$?\" >> add.txt\n\
         rm .cryo/todo-journal.jsonl .cryo/todo-done.jsonl; mkfifo .cryo/todo-done.jsonl\ncryo-agent hibernate --complete\n",
        outside.display()
    );
    let c = env.chamber("c", &script, "[history]\nkeep_done = 0");
    c.seed_history();
    c.write_todos(
        r#"[{"id":1,"text":"old","done":true},{"id":2,"text":"now","done":false,"at":"2000-01-01T00:00:00Z"}]"#,
    );
    env.cryoctl(&["chamber", "start", "c"]).ok();
    wait_until("the add's answer", || c.read("add.txt").contains("rc="));
    let add = c.read("add.txt");
    assert!(add.contains("rc=1") && add.contains("todo-journal.jsonl"), "{add}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    // The FIFO as archive: the settlement cannot archive, says so, and
    // cryod still answers.
    cryo_tests::wait_until_telling(
        cryo_tests::DEADLINE,
        "the chamber to say why",
        || {
            let s = env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0].clone();
            s.to_string().contains("todo-done.jsonl")
        },
        || format!("{}\n{}", env.cryoctl(&["chamber", "status", "c", "--json"]).json(), c.cryo_log()),
    );
    env.cryoctl(&["chamber", "list"]).ok();
}

/// 20,000 messages in the inbox's archive (a chamber mailed hourly for two
/// years and more), with the agent's replies among them: `cryoctl chamber
/// messages` prints the newest 20, in order, the hub pages back from them,
/// and `cryo-agent dialog --last` gets the newest few. Each reads only its
/// page of files (the figures are in the commit that made it so).
#[test]
fn twenty_thousand_archived_messages_show_their_newest_page() {
    let script = "cryo-agent dialog --last 3 > dialog.txt\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n";
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", script, "");
    let start = chrono::DateTime::parse_from_rfc3339("2024-01-01T00:00:00Z").unwrap().to_utc();
    // Written beside the chamber's mail, then moved in whole (one event
    // for cryod's watch, not 20,000).
    let write = |folder: &str, i: i64, from: &str, text: String| {
        let at = start + chrono::Duration::hours(i);
        let name = format!("{}_m_{i:05}.md", at.format("%Y-%m-%dT%H-%M-%S%.3fZ"));
        let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        std::fs::write(
            c.dir.join(folder).join(name),
            format!("---\nfrom: {from}\ntimestamp: {stamp}\n---\n\n{text}\n"),
        )
        .unwrap();
    };
    std::fs::create_dir_all(c.dir.join("new/inbox")).unwrap();
    std::fs::create_dir_all(c.dir.join("new/outbox")).unwrap();
    for i in 0..20_000 {
        write("new/inbox", i * 2, "op", format!("m{i}"));
    }
    // Replies, each an hour after its question.
    let replied = |i: &i64| [19_990, 19_995, 19_998].contains(i);
    for i in (19_990..20_000).filter(replied) {
        write("new/outbox", i * 2 + 1, "agent", format!("re m{i}"));
    }
    for f in ["inbox", "outbox"] {
        let archive = c.dir.join(format!("messages/{f}/archive"));
        let _ = std::fs::remove_dir(&archive);
        std::fs::rename(c.dir.join("new").join(f), archive).unwrap();
    }
    let json = |args: &[&str]| -> Vec<serde_json::Value> {
        env.cryoctl(args).ok().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let bodies = |msgs: &[serde_json::Value]| {
        msgs.iter().map(|m| m["body"].as_str().unwrap().trim().to_string()).collect::<Vec<_>>()
    };
    let newest: Vec<String> = (19_983..20_000)
        .flat_map(|i| std::iter::once(format!("m{i}")).chain(replied(&i).then(|| format!("re m{i}"))))
        .collect();
    assert_eq!(newest.len(), 20);
    let msgs = json(&["chamber", "messages", "c", "--json"]);
    assert_eq!(bodies(&msgs), newest);
    assert_eq!(msgs[19]["direction"], "in");
    assert_eq!(msgs[18]["direction"], "out");
    assert_eq!(bodies(&json(&["chamber", "messages", "c", "--json", "--last", "2"])), ["re m19998", "m19999"]);

    // The hub's pages: the newest 50, then the 50 before them.
    let hub = crate::hub::Hub::of(&env);
    let page = |q: &str| hub.get(&format!("/api/chambers/c/messages{q}")).json().as_array().unwrap().clone();
    let first = page("?limit=50");
    assert_eq!(first.len(), 50);
    assert_eq!(bodies(&first[30..]), newest);
    let older = page(&format!("?limit=50&before={}", first[0]["file"].as_str().unwrap()));
    assert_eq!(bodies(&older), (19_903..19_953).map(|i| format!("m{i}")).collect::<Vec<_>>());

    // The agent's dialog: its last three.
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let d = c.read("dialog.txt");
    let order = ["re m19998", "m19999"];
    assert!(d.contains("message 3 of 3") && !d.contains("m19997\n"), "{d}");
    assert!(d.find(order[0]).unwrap() < d.find(order[1]).unwrap(), "{d}");
}
