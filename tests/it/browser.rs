//! Issue 7: the hub in a real browser (Debian's headless Chromium, driven by
//! playwright-core from `tests/browser/hub.mjs`). `.ci/run` installs both; a
//! machine without them skips with the reason printed.

use std::path::PathBuf;

use cryo_tests::{ANSWERING_AGENT, Env};

/// Answers every message, and keeps answering while mail arrives (hibernate is
/// refused while mail is unread).
fn driver() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser");
    let ready = dir.join("node_modules/playwright-core").exists()
        && std::process::Command::new("node").arg("--version").output().is_ok()
        && std::path::Path::new("/usr/bin/chromium").exists();
    ready.then_some(dir)
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
    let _d = env.start_daemon();
    let c = env.chamber("alpha", ANSWERING_AGENT, "");
    env.chamber("beta", ANSWERING_AGENT, "");
    env.cryoctl(&["chamber", "start", "alpha"]).ok();
    c.wait_ended(1);
    let hub = env.cryoctl(&["hub", "--json"]).json();
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/hub-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let out = std::process::Command::new("node")
        .arg(dir.join("hub.mjs"))
        .env("HUB_URL", hub["url"].as_str().unwrap())
        .env("HUB_TOKEN", hub["token"].as_str().unwrap())
        .env("CHAMBER", "alpha")
        .env("SHOTS", &shots)
        .env("MEASURE", "50")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("driver output ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(seen["error"].is_null(), "the browser run failed: {}", seen["error"]);
    // Without the token: the sign-in screen, and nothing read.
    assert_eq!(seen["signin_shown"], true);
    assert_eq!(seen["leaked_without_token"], false);
    // The list shows both chambers.
    assert_eq!(seen["list"], serde_json::json!(["alpha", "beta"]));
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
    let weight: u64 = ["index.html", "app.js", "app.css"]
        .iter()
        .map(|f| std::fs::metadata(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../web").join(f)).unwrap().len())
        .sum();
    eprintln!("measured: page weight {weight} bytes uncompressed (all assets)");
    for shot in ["list-desktop", "list-phone", "chamber-desktop", "chamber-phone"] {
        let p = shots.join(format!("{shot}.png"));
        assert!(std::fs::metadata(&p).map(|m| m.len() > 1000).unwrap_or(false), "{} missing", p.display());
    }
}
