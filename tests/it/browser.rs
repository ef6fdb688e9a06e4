//! Issue 7: the hub in a real browser (Debian's headless Chromium, driven by
//! playwright-core from `tests/browser/hub.mjs`). `.ci/run` installs both; a
//! machine without them skips with the reason printed.

use std::path::{Path, PathBuf};

use cryo_tests::{ANSWERING_AGENT, Env, wait_until};

/// The browser drivers' folder, when node, Debian's Chromium and
/// playwright-core (`npm ci --prefix tests/browser`) are all there.
pub(crate) fn driver() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser");
    let ready = dir.join("node_modules/playwright-core").exists()
        && std::process::Command::new("node").arg("--version").output().is_ok()
        && std::path::Path::new("/usr/bin/chromium").exists();
    ready.then_some(dir)
}

/// [`driver`], or `None` with the line that says `test` was skipped and why.
pub(crate) fn driver_for(test: &str) -> Option<PathBuf> {
    let dir = driver();
    if dir.is_none() {
        eprintln!(
            "SKIPPED {test}: needs node, /usr/bin/chromium and `npm ci --prefix tests/browser` (.ci/run installs them)"
        );
    }
    dir
}

/// Runs the driver `script` of `dir` against `env`'s hub (its address and
/// token in `HUB_URL` and `HUB_TOKEN`, plus `vars`) and returns the JSON
/// object it prints last, once it has said it met no error.
pub(crate) fn run_driver(dir: &Path, script: &str, env: &Env, vars: &[(&str, String)]) -> serde_json::Value {
    let hub = env.cryoctl(&["hub", "--json"]).json();
    let out = std::process::Command::new("node")
        .arg(dir.join(script))
        .env("HUB_URL", hub["url"].as_str().expect("the hub's url"))
        .env("HUB_TOKEN", hub["token"].as_str().expect("the hub's token"))
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("{script} ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(seen["error"].is_null(), "{script} failed: {}\n{seen}", seen["error"]);
    seen
}

/// Issue 63: what a driver's `everywhere` saw (a page at 360 and 1280 px, in
/// the light and the dark theme): no axe violation, nothing wider than the
/// screen.
pub(crate) fn assert_everywhere_clean(seen: &serde_json::Value) {
    let wide = seen["wide"].as_object().unwrap_or_else(|| panic!("the driver looked nowhere: {seen}"));
    assert!(wide.len() >= 4 && wide.len().is_multiple_of(4), "{seen}");
    for (key, over) in wide {
        assert_eq!(seen["axe"][key], serde_json::json!([]), "{key}: {}", seen["axe"][key]);
        assert!(over.as_i64() <= Some(0), "{key}: {over} px wider than the screen");
    }
}

#[test]
fn the_hub_in_headless_chromium() {
    let Some(dir) = driver() else {
        eprintln!(
            "SKIPPED the_hub_in_headless_chromium: needs node, /usr/bin/chromium and `npm ci --prefix tests/browser` (.ci/run installs them)"
        );
        return;
    };
    let env = Env::new();
    env.daemon_config("[hub]\nbind = \"127.0.0.1:0\"\nattachment_quota_mb = 1\nsends_per_minute = 500\n");
    let _d = env.start_daemon();
    let c = env.chamber("alpha", ANSWERING_AGENT, "");
    // Never started; reset and archived on the page.
    let beta = env.chamber("beta", ANSWERING_AGENT, "");
    std::fs::write(beta.dir.join("NOTES.md"), "beta's notes\n").unwrap();
    // Says which zone its session has; its settings change on the page.
    let tzc = env.chamber(
        "tzc",
        "cryo-agent send \"tz=${TZ:-none}\" >/dev/null\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n",
        "# my own comment, kept\n",
    );
    // 10,000 messages, never started.
    let many = env.chamber("many", ANSWERING_AGENT, "");
    let archive = many.dir.join("messages/outbox/archive");
    std::fs::create_dir_all(&archive).unwrap();
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().to_utc();
    for i in 0..10_000 {
        let at = start + chrono::Duration::seconds(i * 60);
        let name = format!("{}_note-{i}_x{i}.md", at.format("%Y-%m-%dT%H-%M-%S%.3fZ"));
        let text =
            format!("---\nfrom: agent\nsubject: note {i}\ntimestamp: {}\n---\n\nnote number {i}\n", at.to_rfc3339());
        std::fs::write(archive.join(name), text).unwrap();
    }
    env.chamber("q", ANSWERING_AGENT, "");
    // Crashes: its session is red on the timeline.
    let crash = env.chamber("crash", "echo dying >&2\nexit 3\n", "");
    for name in ["alpha", "tzc", "q", "crash"] {
        env.cryoctl(&["chamber", "start", name]).ok();
    }
    c.wait_ended(1);
    tzc.wait_ended(1);
    crash.wait_ended(1);
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/hub-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let vars = [
        ("CHAMBER", "alpha"),
        ("SHOTS", shots.to_str().expect("a UTF-8 path")),
        ("MEASURE", "50"),
        ("MANY", "many"),
        ("TZ_CHAMBER", "tzc"),
        ("QUOTA_CHAMBER", "q"),
    ]
    .map(|(k, v)| (k, v.to_string()));
    let seen = run_driver(&dir, "hub.mjs", &env, &vars);
    // Without the token: the sign-in screen, and nothing read.
    assert_eq!(seen["signin_shown"], true);
    assert_eq!(seen["leaked_without_token"], false);
    // The list shows every chamber.
    assert_eq!(seen["list"], serde_json::json!(["alpha", "beta", "crash", "many", "q", "tzc"]));
    assert_eq!(seen["token_kept_out_of_url"], true);
    // Sending from the page put a file in the inbox (the agent claimed it) ...
    let archived: Vec<String> = c.messages("messages/inbox/archive").into_iter().map(|(_, t)| t).collect();
    assert!(archived.iter().any(|t| t.contains("hello from the browser")), "{archived:?}");
    // ... and the agent's reply appeared without a reload.
    assert_eq!(seen["reply_without_reload"], true);
    eprintln!("measured: a reply appeared on the page {} ms after Send", seen["reply_ms"]);
    // A TODO added on the page is in cryoctl's list.
    assert_eq!(seen["todo_shown"], true);
    assert!(env.cryoctl(&["chamber", "todo", "alpha", "list"]).ok().contains("from the page"));
    // Stop and start changed the state shown.
    assert_eq!(seen["stopped_shown"], true);
    assert_eq!(seen["started_shown"], true);
    // The send while stopped said it waits, and how to have it read now.
    let waits = seen["waits_shown"].as_str().unwrap_or_default();
    assert!(
        waits.starts_with("Not read yet: alpha is stopped") && waits.contains("cryoctl chamber start alpha"),
        "{waits}"
    );
    let m = &seen["outbox_to_page_ms"];
    assert_eq!(m["count"], 50, "{m}");
    eprintln!(
        "measured: outbox file to the open page, over 50 replies: median {} ms, p99 {} ms",
        m["median"], m["p99"]
    );
    let weight: u64 =
        ["index.html", "app.js", "lib.js", "chamber.js", "owner.js", "list.js", "timeline.js", "sw.js", "app.css"]
            .iter()
            .map(|f| std::fs::metadata(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web").join(f)).unwrap().len())
            .sum();
    eprintln!("measured: page weight {weight} bytes uncompressed (all assets)");
    // Controls follow the state.
    assert_eq!(seen["controls_idle"], serde_json::json!(["wake", "pause", "stop"]));
    assert_eq!(seen["controls_stopped"], serde_json::json!(["start", "archive", "reset"]));
    // Reset asked for the name first, then moved the files into history/.
    assert_eq!(seen["controls_beta"], serde_json::json!(["start", "archive", "reset"]));
    assert_eq!(seen["reset_locked"], true, "the reset button waits for the name");
    let done = seen["reset_done"].as_str().unwrap_or_default();
    let history = done.trim_start_matches("Reset: the earlier files are in ").trim_end_matches("/.");
    assert!(history.starts_with("history/"), "{done}");
    assert_eq!(std::fs::read_to_string(beta.dir.join(history).join("NOTES.md")).unwrap(), "beta's notes\n");
    assert!(beta.read("NOTES.md").contains("# Notes") && beta.dir.join("plan.md").is_file());
    // Archived: its controls, hidden from the list until asked for.
    assert_eq!(seen["controls_archived"], serde_json::json!(["unarchive", "reset"]));
    assert_eq!(seen["list_archived_hidden"], serde_json::json!(["alpha", "crash", "many", "q", "tzc"]));
    assert_eq!(seen["list_archived_shown"], serde_json::json!(["alpha", "beta", "crash", "many", "q", "tzc"]));
    assert_eq!(seen["archived_badge"], "archived");
    assert_eq!(env.cryoctl(&["chamber", "status", "beta", "--json"]).json()[0]["archived"], true);
    // Markdown renders; a script, an onerror image and a javascript: link stay inert.
    assert_eq!(seen["inert"], serde_json::json!({ "pwned": 0, "scripts": 0, "handlers": 0, "bold": true }));
    assert!(seen["js_link"].is_null(), "a javascript: link reached the page: {}", seen["js_link"]);
    // An image upload shows inline; it sits in the chamber's attachments folder.
    assert_eq!(seen["image_inline"], true);
    let stored: Vec<String> = std::fs::read_dir(c.dir.join("messages/attachments"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(stored.iter().any(|n| n.ends_with("-dot.png")), "{stored:?}");
    assert_eq!(seen["phone_overflow"], false, "the chamber page is wider than a 360 px phone");
    // The quota: the second 700 KiB upload is refused.
    let quota = seen["quota_error"].as_str().unwrap_or_default();
    assert!(quota.contains("over the chamber's attachment quota (1 MiB"), "{quota}");
    // Settings: cryo.toml rewritten with its comments, and the next session has the zone.
    assert_eq!(seen["settings_used"], true);
    let toml = tzc.read("cryo.toml");
    assert!(toml.contains("timezone = \"Europe/Berlin\"") && toml.contains("# my own comment, kept"), "{toml}");
    assert!(toml.contains("# The agent: a known kind"), "the template's comments are kept");
    // 10,000 messages: the newest page first, older pages on scroll.
    assert_eq!(seen["first_page"], 50);
    assert_eq!(seen["after_scrolls"], 200);
    assert!(
        seen["oldest_after_scrolls"].as_str().unwrap().contains("note number 9800"),
        "{}",
        seen["oldest_after_scrolls"]
    );
    eprintln!(
        "measured: first paint of a chamber with 10,000 messages {} ms, of a small one {} ms",
        seen["first_paint_many_ms"], seen["first_paint_small_ms"]
    );
    // Timelines: the crashed session in the failure colour, the digest counts it,
    // and the fleet's next wakes include alpha's.
    assert_eq!(
        seen["crash_bar"]["outcome"].as_str().map(|o| o.starts_with("crashed")),
        Some(true),
        "{}",
        seen["crash_bar"]
    );
    assert_eq!(seen["crash_bar"]["fill"], seen["crash_bar"]["bad"], "{}", seen["crash_bar"]);
    assert_eq!(seen["crash_digest_failures"], "1");
    assert_eq!(seen["fleet_wake_alpha"], true);
    // Installable.
    assert_eq!(seen["sw_registered"], true);
    assert_eq!(seen["manifest"]["display"], "standalone");
    // Sharing: the invite opens only its chamber, without log, plan, settings or controls.
    assert_eq!(seen["invite_link_has_token"], true);
    assert_eq!(seen["guest_list"], serde_json::json!(["alpha"]));
    assert_eq!(
        seen["guest_sees"],
        serde_json::json!({ "log": false, "plan": false, "settings": false, "controls": false })
    );
    assert_eq!(seen["guest_reply"], true);
    let from_guest = c.messages("messages/inbox/archive").into_iter().find(|(_, t)| t.contains("hello from a guest"));
    assert!(from_guest.as_ref().is_some_and(|(_, t)| t.contains("from: ann (guest)")), "{from_guest:?}");
    assert_eq!(seen["guest_stream_ended"], true);
    assert_eq!(seen["guest_signed_out"], true);
    // Web Push as far as a headless browser goes: the button answers, and
    // the device list is shown (no push service is reachable here).
    assert_eq!(seen["devices_panel"], true);
    eprintln!("the browser's answer to \"Notify this device\": {}", seen["push_status"]);
    // axe-core: no serious or critical violation on any page.
    for (page, found) in seen["axe"].as_object().expect("axe ran") {
        assert_eq!(found, &serde_json::json!([]), "accessibility violations on {page}");
    }
    for shot in [
        "list-desktop",
        "list-phone",
        "chamber-desktop",
        "chamber-phone",
        "guest-list-phone",
        "guest-chamber-phone",
        "reset-dialog",
    ] {
        let p = shots.join(format!("{shot}.png"));
        assert!(std::fs::metadata(&p).map(|m| m.len() > 1000).unwrap_or(false), "{} missing", p.display());
    }
}

/// Issue 42: the hub as a console, at 1280 px and 360 px: failures and
/// questions shown first, runs as a CI console lists them, times that do
/// not wrap, feedback where the user is, settings checked field by field
/// and comments kept around a removed key, checkboxes by their labels, and
/// timelines with a legend. Screenshots of each state are saved.
#[test]
fn the_hub_as_a_console() {
    let Some(dir) = driver() else {
        eprintln!("SKIPPED the_hub_as_a_console: needs node, /usr/bin/chromium and `npm ci --prefix tests/browser`");
        return;
    };
    let env = Env::new();
    env.daemon_config("[hub]\nbind = \"127.0.0.1:0\"\n");
    let _d = env.start_daemon();
    let crash = env.chamber("crash", "echo dying >&2\nexit 3\n", "");
    let asker = env.chamber(
        "asker",
        "cryo-agent send --question \"Which branch should I use?\" >/dev/null\ncryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n",
        "",
    );
    let set = env.chamber("set", ANSWERING_AGENT, "# Longest session, in seconds\nmax_session_duration = 3600\n");
    env.chamber("idle", ANSWERING_AGENT, "");
    let busy = env.chamber("busy", "sleep 600\n", "");
    for name in ["crash", "asker", "busy"] {
        env.cryoctl(&["chamber", "start", name]).ok();
    }
    crash.wait_ended(1);
    asker.wait_ended(1);
    // The agent names its files: seven dated years ahead must not push the
    // crash out of the last seven days' bars.
    for d in 1..=7 {
        let name = format!("messages/outbox/archive/2099-01-0{d}T00-00-00.000Z-future.md");
        std::fs::write(crash.dir.join(name), "---\nfrom: agent\n---\nfrom the future\n").unwrap();
    }
    wait_until("busy's session to run", || busy.cryo_log().contains("CRYO SESSION 1"));
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/hub-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let vars = [
        ("SHOTS", shots.to_str().expect("a UTF-8 path")),
        ("CRASH", "crash"),
        ("ASKER", "asker"),
        ("SET", "set"),
        ("BUSY", "busy"),
    ]
    .map(|(k, v)| (k, v.to_string()));
    let seen = run_driver(&dir, "console.mjs", &env, &vars);
    assert_everywhere_clean(&seen);
    for wide in ["desktop", "phone"] {
        let s = &seen[wide];
        // A crashed chamber is not dressed as a healthy one.
        assert_eq!(s["crash_badge"], "crashed", "{wide}: {s}");
        assert_eq!(s["crash_badge_colour"], "rgb(180, 35, 24)", "{wide}: the failure colour");
        assert_eq!(s["questions"], "1 question", "{wide}");
        // Needs you, across chambers: the failure and the question with its text.
        assert_eq!(s["needs_all"], serde_json::json!(["asker", "crash"]), "{wide}");
        assert_eq!(s["question_text"], "Which branch should I use?", "{wide}");
        // Search, the state filter, the shortcuts.
        assert_eq!(s["slash_focuses"], "filter", "{wide}");
        assert_eq!(s["searched"], serde_json::json!(["asker"]), "{wide}");
        assert_eq!(s["needing"], serde_json::json!(["asker", "crash"]), "{wide}");
        assert_eq!(s["shortcuts"].as_array().map(Vec::len), Some(9), "{wide}: {}", s["shortcuts"]);
        // Nothing is cut inside a word; times carry the exact one on hover.
        assert_eq!(s["list_wrapped"], serde_json::json!([]), "{wide}: wrapped on the list");
        assert_eq!(s["chamber_wrapped"], serde_json::json!([]), "{wide}: wrapped on the chamber page");
        assert_eq!(s["list_times_have_exact"], true, "{wide}");
        assert_eq!(s["phone_overflow"], false, "{wide}: wider than the screen");
        // Timelines: a legend, and the last hour label whole.
        assert!(s["fleet_legend"].as_u64() >= Some(3) && s["chamber_legend"].as_u64() >= Some(4), "{wide}: {s}");
        assert_eq!(s["last_label_inside"], serde_json::json!({ "text": "+24h", "inside": true }), "{wide}");
        // What needs the person comes first, then the conversation: on a
        // phone above the tabs, on a desktop the wider column beside them.
        let l = &s["layout"];
        let at = |k: &str, f: &str| l[k][f].as_i64().unwrap();
        assert!(at("needs", "top") < at("conversation", "top"), "{wide}: {l}");
        if wide == "phone" {
            assert!(at("conversation", "top") < at("tabs", "top"), "{wide}: the conversation first: {l}");
        } else {
            assert!(
                at("centre", "left") < at("side", "left") && at("centre", "width") > at("side", "width"),
                "{wide}: {l}"
            );
            assert!((at("conversation", "top") - at("tabs", "top")).abs() < 40, "{wide}: side by side: {l}");
        }
        assert_eq!(s["tab_open"], "tab-status", "{wide}");
        assert_eq!(
            s["tabs"],
            serde_json::json!(["status", "runs", "todos", "plan", "notes", "settings", "log", "transcript"]),
            "{wide}"
        );
        assert_eq!(s["arrow_tab"], serde_json::json!({ "focused": "tab-runs", "shown": ["panel-runs"] }), "{wide}");
        assert_eq!(
            s["keys_tab"],
            serde_json::json!(["tab-transcript", "tab-status", "tab-transcript", "tab-status"]),
            "{wide}: End, Home, a left arrow round from the first, a right one back"
        );
        // The last days as small bars, the crash among them.
        assert_eq!(
            (&s["day_bars"]["days"], &s["day_bars"]["bad"]),
            (&7.into(), &1.into()),
            "{wide}: {}",
            s["day_bars"]
        );
        assert!(s["day_bars"]["said"].as_str().unwrap().contains("1 failed"), "{wide}: {}", s["day_bars"]);
        // A running session: its status and the time it has run.
        let running = s["running"].as_str().unwrap();
        assert!(running.contains("running") && running.ends_with('s'), "{wide}: {running}");
        assert!(s["needs"].as_str().unwrap().contains("(exit 3)"), "{wide}: {}", s["needs"]);
        assert!(
            s["asker_needs"].as_str().unwrap().contains("1 open question"),
            "{wide}: {}\n{}",
            s["asker_needs"],
            asker.cryo_log()
        );
        let run = &s["runs"][0];
        assert!(run["status"].as_str().unwrap().contains("crashed") && run["kind"] == "run run-bad", "{wide}: {run}");
        assert!(!run["started"].as_str().unwrap().is_empty(), "{wide}: the exact start on hover");
        let detail = &s["run_detail"];
        assert!(detail[0].as_str().unwrap().starts_with("--- CRYO SESSION 1 |"), "{wide}: {detail}");
        assert!(detail[1].as_str().unwrap().contains("dying"), "{wide}: the run's transcript: {detail}");
        let refused = s["server_error"].as_str().unwrap();
        assert!(
            refused.ends_with("key `max_attempts`: 101 is over the limit of 100") && !refused.contains("cryo.toml"),
            "{wide}: cryod's refusal beside the field, without a server path: {refused}"
        );
        // Issue 63, case 7: two refused fields at once, each line once.
        let two = &s["two_bad"];
        assert!(two["attempts"].as_str().unwrap().contains("over the limit of 100"), "{wide}: {two}");
        assert!(two["timezone"].as_str().unwrap().contains("Mars/Olympus"), "{wide}: {two}");
        assert_eq!(two["invalid"], serde_json::json!(["timezone", "max_attempts"]), "{wide}: {two}");
        assert_eq!(two["status"], "Not saved: 2 fields need another value.", "{wide}: {two}");
        assert_eq!((&two["toasts"], &two["page_error"]), (&0.into(), &"".into()), "{wide}: {two}");
        assert_eq!(
            s["guarded"],
            serde_json::json!(["agent", "max_session_duration", "precheck", "sandbox", "memory_max", "cpu_weight"]),
            "{wide}"
        );
        // Feedback where the user is.
        assert_eq!(s["todo_error"]["visible"], true, "{wide}: {}", s["todo_error"]);
        assert!(s["todo_error"]["text"].as_str().unwrap().contains("whenever it suits"), "{}", s["todo_error"]);
        assert_eq!(s["plan_saved"], true);
        assert_eq!(s["answer_focus"], true, "{wide}: a question's notice opens the reply box");
        // A bad number: beside its field, focused, nothing sent.
        let e = &s["settings_error"];
        assert!(e["text"].as_str().unwrap().contains("“ten minutes” is not a whole number"), "{wide}: {e}");
        assert_eq!((&e["invalid"], &e["focused"], &e["puts"]), (&"true".into(), &"set-max_attempts".into(), &0.into()));
        assert!(e["status"].as_str().unwrap().starts_with("Not saved"), "{e}");
        // Checkboxes sit beside their labels.
        let gaps: Vec<i64> = std::iter::once(&s["new_check_gap"][0])
            .chain(s["share_check_gaps"].as_array().unwrap())
            .map(|g| g.as_i64().unwrap())
            .collect();
        assert!(gaps.iter().all(|g| (0..=24).contains(g)), "{wide}: label gaps {gaps:?}");
    }
    // Under cryod's content policy: nothing refused, the bars drawn.
    assert_eq!(seen["csp"]["refused"], serde_json::json!([]), "{}", seen["csp"]);
    assert!(seen["csp"]["bad_bar_px"].as_i64() > Some(20), "the crash's bar has its height: {}", seen["csp"]);
    // The answer given on the list is in the asker's inbox.
    assert_eq!(seen["desktop"]["answered"], "Answer sent to asker.");
    wait_until("the answer in the inbox", || {
        ["messages/inbox", "messages/inbox/archive"]
            .iter()
            .flat_map(|f| asker.messages(f))
            .any(|(_, t)| t.contains("Use main, from the list"))
    });
    // The good save: the number written, the removed key's comment kept.
    assert_eq!(seen["desktop"]["settings_saved"], "Saved to cryo.toml: max_session_duration, max_attempts.");
    let toml = set.read("cryo.toml");
    assert!(toml.contains("# Longest session, in seconds\n") && !toml.contains("max_session_duration ="), "{toml}");
    assert!(toml.contains("max_attempts = 4\n"), "{toml}");
    for (page, found) in seen["axe"].as_object().expect("axe ran") {
        assert_eq!(found, &serde_json::json!([]), "accessibility violations on {page}");
    }
    for shot in ["list", "crash", "chamber", "running", "question", "settings-error"] {
        for wide in ["desktop", "phone"] {
            let p = shots.join(format!("console-{shot}-{wide}.png"));
            assert!(std::fs::metadata(&p).is_ok_and(|m| m.len() > 1000), "{} missing", p.display());
        }
    }
    eprintln!("screenshots: {}/console-*.png", shots.display());
    // Issue 63, case 8: the queue: the question (an agent waits on it)
    // before the crash, each with its kind and age; j, k and Enter.
    let queue = run_driver(&dir, "queue.mjs", &env, &[]);
    let kinds: Vec<(&str, &str)> = queue["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["kind"].as_str().unwrap(), i["name"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("question", "asker"), ("failure", "crash")], "{queue}");
    assert!(
        queue["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["age"].as_str().is_some_and(|a| a.ends_with("ago") || a == "now")),
        "{queue}"
    );
    assert_eq!(
        (&queue["j1"], &queue["j2"], &queue["k1"]),
        (&"asker".into(), &"crash".into(), &"asker".into()),
        "{queue}"
    );
    assert_eq!(queue["opened"], "#/c/asker", "{queue}");
    assert!(queue["wake_buttons"].as_array().unwrap().contains(&"crash".into()), "{queue}");
    // Issue 63, case 10: each page at 360 and 1280 px, light and dark:
    // axe-clean (contrast too), nothing wider than the screen, no text
    // under 12 px (a picture's labels as drawn), every control of a phone
    // at least 44 px. Shots: PAGE-WIDTH-THEME.png.
    // Each case's page: the queue (the list), a crash, a question, a run
    // running, the runs tab and a run's own page, TODOs, settings, the log.
    let pages = [
        "list:#/",
        "crash:#/c/crash",
        "asker:#/c/asker",
        "busy:#/c/busy",
        "new:#/new",
        "share:#/share",
        "runs:#/c/crash@runs",
        "run:#/c/crash/run/1",
        "todos:#/c/asker@todos",
        "settings:#/c/asker@settings",
        "log:#/c/crash@log",
    ];
    let audit = run_driver(
        &dir,
        "themes.mjs",
        &env,
        &[("PAGES", pages.join(",")), ("SHOTS", shots.to_str().expect("a UTF-8 path").to_string())],
    );
    for page in pages.map(|p| p.split(':').next().unwrap()) {
        for width in [360, 1280] {
            for theme in ["light", "dark"] {
                let key = format!("{page}_{width}_{theme}");
                let a = &audit[&key];
                assert_eq!(audit["axe"][&key], serde_json::json!([]), "{key}: {}", audit["axe"][&key]);
                for what in ["small", "wide", "targets"] {
                    assert_eq!(a[what], serde_json::json!([]), "{key}: {what}: {a}");
                }
                assert!(a["page_width"].as_i64() <= a["width"].as_i64(), "{key}: {a}");
                let shot = shots.join(format!("{page}-{width}-{theme}.png"));
                assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000), "{} missing", shot.display());
            }
        }
    }
}

/// Issue 63, case 6: 200 TODOs on a 360 px phone: the add form first, a
/// count, 50 at a time, a search; a removal is undone (nothing changes in
/// `todo.json`), another is sent once its Undo has passed.
#[test]
fn two_hundred_todos_page_search_and_undo_on_a_phone() {
    let Some(dir) = driver_for("two_hundred_todos_page_search_and_undo_on_a_phone") else { return };
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("many", ANSWERING_AGENT, "");
    let items: Vec<String> = (1..=200)
        .map(|i| format!("{{\"id\":{i},\"text\":\"item {i}\",\"at\":\"2030-01-01T{:02}:{:02}:00Z\"}}", i / 60, i % 60))
        .collect();
    c.write_todos(&format!("[{}]", items.join(",")));
    wait_until("the TODOs loaded", || {
        env.cryoctl(&["chamber", "todo", "many", "list", "--json"]).json().as_array().map(Vec::len) == Some(200)
    });
    let seen = run_driver(&dir, "todos.mjs", &env, &[("CHAMBER", "many".into())]);
    assert_everywhere_clean(&seen);
    eprintln!("figure: 200 TODOs, the page at 360 px is {} px high", seen["page_height"]);
    assert_eq!(seen["first"], serde_json::json!({ "items": 50, "count": "200 to do, the first 50 shown." }), "{seen}");
    assert_eq!(seen["form_first"], true, "{seen}");
    assert_eq!(seen["more"], serde_json::json!({ "items": 100, "count": "200 to do, the first 100 shown." }), "{seen}");
    // "item 17" and "item 170" to "item 179".
    assert_eq!(seen["search"], serde_json::json!({ "items": 11, "count": "11 of 200 match." }), "{seen}");
    assert_eq!((&seen["removed_hidden"], &seen["undone_back"]), (&true.into(), &true.into()), "{seen}");
    assert!(seen["undo_text"].as_str().unwrap_or_default().starts_with("Removed “item"), "{seen}");
    assert_eq!(seen["axe"]["todos_360"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["delete_status"], 200, "{seen}");
    assert!(seen["delete_after_ms"].as_u64() >= Some(5500), "sent after its Undo passed: {seen}");
    let gone = seen["removed_for_good"].as_str().unwrap().parse::<u64>().unwrap();
    wait_until("the removal in todo.json", || {
        let list = env.cryoctl(&["chamber", "todo", "many", "list", "--json"]).json();
        let ids: Vec<u64> = list.as_array().unwrap().iter().filter_map(|t| t["id"].as_u64()).collect();
        ids.len() == 199 && !ids.contains(&gone)
    });
}

/// Issue 63, case 9: a failed run on a page of its own (its URL, a reload
/// is the same page): its facts, Run again, its lines opened at the newest
/// and searchable; the runs tab's failed filter; Run again wakes the
/// chamber, and the good run's page is titled by the summary it gave.
#[test]
fn a_run_has_a_page_of_its_own_and_a_failed_one_runs_again() {
    let Some(dir) = driver_for("a_run_has_a_page_of_its_own_and_a_failed_one_runs_again") else { return };
    let env = Env::new();
    let _d = env.start_daemon();
    // The first session crashes after 80 lines; any later one succeeds.
    let script = "if [ \"$CRYO_SESSION\" = 1 ]; then for i in $(seq 1 80); do echo \"line $i of the build\"; done; exit 3; fi\n\
                  cryo-agent hibernate --complete --summary \"built and tested\"\n";
    let c = env.chamber("job", script, "max_attempts = 1\n");
    env.cryoctl(&["chamber", "start", "job"]).ok();
    c.wait_ended(1);
    let seen = run_driver(&dir, "run.mjs", &env, &[("CHAMBER", "job".into())]);
    assert_everywhere_clean(&seen);
    for width in [360, 1280] {
        let run = &seen[format!("failed_run_{width}")];
        assert!(seen[format!("failed_filter_{width}")].as_str().unwrap().starts_with("1 of "), "{seen}");
        assert_eq!(run["url"], "#/c/job/run/1", "{run}");
        assert_eq!(run["title"], "job · run 1", "{run}");
        assert!(run["summary"].as_str().unwrap().starts_with("crashed"), "{run}");
        assert!(run["facts"]["outcome"].as_str().unwrap().contains("crashed"), "{run}");
        assert_eq!(run["again"], 1, "a failed run offers Run again: {run}");
        assert!(run["at_newest"].as_array().unwrap().iter().all(|b| b == true), "{run}");
        // "line 7" and "line 70" to "line 79", of 80 and the two header lines.
        assert_eq!(run["search"], "11 of 82 lines", "{run}");
        assert!(run["found"].as_str().unwrap().starts_with("line 7 of the build"), "{run}");
        assert!(run["page_width"].as_i64() <= Some(width), "{run}");
        assert_eq!(seen["axe"][format!("run_{width}")], serde_json::json!([]), "{seen}");
    }
    // The chamber page's tabs (360 px, dark): "line 7" and "line 70" to
    // "line 79" of the transcript; the log's lines of session 1.
    assert_eq!((&seen["tab_transcript_newest"], &seen["tab_log_newest"]), (&true.into(), &true.into()), "{seen}");
    assert!(seen["tab_transcript_search"].as_str().unwrap().starts_with("11 of "), "{seen}");
    assert!(seen["tab_log_search"].as_str().unwrap().contains(" of "), "{seen}");
    assert_eq!(seen["axe"]["tabs_360_dark"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["reloaded_title"], "job · run 1", "{seen}");
    assert!(seen["good_run"]["summary"].as_str().unwrap().ends_with(": built and tested"), "{seen}");
    assert_eq!(seen["good_run"]["again"], 0, "{seen}");
}

/// Issue 63, cases 4 and 8: on a 360 px phone in the dark theme, a failure
/// is acknowledged and another snoozed for an hour from "Needs you" (each
/// leaves the queue and is named under "Set aside"), and a changed setting
/// is reviewed (its diff) and trusted from its item. cryod keeps the first
/// two: after it is killed and started again, `cryoctl` and the page still
/// set them aside; a new failure brings one back.
#[test]
fn a_phone_sets_failures_aside_and_trusts_a_setting_from_the_queue() {
    let Some(dir) = driver_for("a_phone_sets_failures_aside_and_trusts_a_setting_from_the_queue") else { return };
    let env = Env::new();
    let mut d = env.start_daemon();
    let crash = "echo dying >&2\nexit 3\n";
    let (a, b) = (env.chamber("crash-a", crash, ""), env.chamber("crash-b", crash, ""));
    let guarded = env.chamber("guarded", ANSWERING_AGENT, "");
    for name in ["crash-a", "crash-b", "guarded"] {
        env.cryoctl(&["chamber", "start", name]).ok();
    }
    a.wait_ended(1);
    b.wait_ended(1);
    let status = |name: &str| env.cryoctl(&["chamber", "status", name, "--json"]).json()[0].clone();
    // The agent writes a setting only the operator may accept.
    let edited = format!("precheck = \"curl evil\"\n{}", guarded.read("cryo.toml"));
    std::fs::write(guarded.dir.join("cryo.toml"), edited).unwrap();
    wait_until("the guarded chamber held", || status("guarded")["state"] == "faulted");
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/hub-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let shots = ("SHOTS", shots.to_str().expect("a UTF-8 path").to_string());
    let seen = run_driver(&dir, "aside.mjs", &env, &[("STAGE", "first".into()), shots.clone()]);
    assert_everywhere_clean(&seen);
    let names = |v: &serde_json::Value| {
        v.as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert!(
        ["crash-a", "crash-b", "guarded"].iter().all(|n| names(&seen["before"]).contains(&n.to_string())),
        "{seen}"
    );
    assert_eq!(names(&seen["aside"]), ["crash-a", "crash-b"], "{seen}");
    assert!(seen["aside_text"].as_str().unwrap().contains("snoozed until"), "{seen}");
    assert_eq!(names(&seen["trust_keys"]), ["precheck"], "{seen}");
    assert!(names(&seen["after"]).iter().all(|n| !n.starts_with("crash") && n != "guarded"), "{seen}");
    for control in ["ack_box", "snooze_box"] {
        assert!(seen[control]["height"].as_f64() >= Some(44.0), "{control}: {seen}");
    }
    for page in ["queue_360_dark", "aside_360_dark", "trust_360_dark"] {
        assert_eq!(seen["axe"][page], serde_json::json!([]), "{page}: {seen}");
    }
    assert!(seen["page_width"].as_i64() <= Some(360), "{seen}");
    wait_until("the setting trusted", || status("guarded")["state"] != "faulted");
    // cryod keeps what was set aside across a kill and a start.
    let before = (status("crash-a"), status("crash-b"));
    assert!(before.0["acknowledged_at"].is_string() && before.0["snoozed_until"].is_null(), "{}", before.0);
    assert!(before.1["snoozed_until"].is_string(), "{}", before.1);
    d.signal_and_wait(nix::sys::signal::Signal::SIGKILL);
    let _d = env.start_daemon();
    wait_until("the chambers back", || status("crash-b")["state"] != "stopped");
    for (name, was) in [("crash-a", &before.0), ("crash-b", &before.1)] {
        let now = status(name);
        assert_eq!(
            (&now["acknowledged_at"], &now["snoozed_until"]),
            (&was["acknowledged_at"], &was["snoozed_until"]),
            "{name}: {now}"
        );
    }
    let text = env.cryoctl(&["chamber", "status", "crash-b"]).ok().to_string();
    assert!(text.contains("set aside") && text.contains("snoozed until"), "{text}");
    let seen = run_driver(&dir, "aside.mjs", &env, &[("STAGE", "after".into()), shots]);
    assert_eq!(names(&seen["aside"]), ["crash-a", "crash-b"], "{seen}");
    assert!(names(&seen["queue"]).iter().all(|n| !n.starts_with("crash")), "{seen}");
    // A chamber that needs nothing has nothing to set aside; a bad snooze
    // is one line; a new failure is the person's again.
    let refused = env.cryoctl(&["chamber", "acknowledge", "guarded"]);
    assert!(refused.fails(1).contains("needs nothing of you"), "{}", refused.stderr);
    let bad = env.cryoctl(&["chamber", "acknowledge", "crash-a", "--for", "soon"]);
    assert!(bad.fails(2).contains("not a duration"), "{}", bad.stderr);
    env.cryoctl(&["chamber", "wake", "crash-a"]).ok();
    a.wait_ended(2);
    wait_until("the new failure back in the queue", || status("crash-a")["acknowledged_at"].is_null());
}
