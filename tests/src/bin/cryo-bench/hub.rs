//! The hub's scenario: its first paint in a real browser and what it
//! weighs on the wire.

use std::path::Path;

use cryo_tests::Env;

use crate::cryo::{register, start_all, write_todos};
use crate::measure::*;

/// The hub at `chambers` chambers (one TODO each): its first paint in
/// headless Chromium (`tests/browser/paint.mjs`, `runs` times each: a cold
/// load and the way back from a chamber's page), and what the page and the
/// list weigh on the wire, plain and gzipped. Needs node, Chromium and
/// `npm ci --prefix tests/browser`; the figures come from the binaries
/// beside this one (a release build measures the release hub).
pub fn paint(chambers: usize, runs: usize) -> Figures {
    let env = Env::new();
    env.daemon_config("[hub]\nbind = \"127.0.0.1:0\"\n");
    let _d = env.start_daemon();
    let far = now_ns() + 30 * 86_400 * 1_000_000_000;
    let names = register(&env, chambers, "exit 0\n", |_, dir| write_todos(dir, &[rfc3339_ns(far)]));
    start_all(&env, &names);
    let hub = env.cryoctl(&["hub", "--json"]).json();
    let (url, token) = (hub["url"].as_str().expect("the hub's url"), hub["token"].as_str().expect("its token"));
    let base = url.trim_end_matches('/');
    let mut f = Figures::new();
    println!("\ncryo: the hub at {chambers} chambers");
    // What crosses the wire: curl's count of the bytes it received.
    let bytes = |path: &str, gzip: bool| -> u64 {
        let mut c = std::process::Command::new("curl");
        c.args(["-sS", "-o", "/dev/null", "-w", "%{size_download}", "-H"])
            .arg(format!("Authorization: Bearer {token}"));
        if gzip {
            c.args(["-H", "Accept-Encoding: gzip"]);
        }
        let out = c.arg(format!("{base}{path}")).output().expect("curl");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("curl {path}: {out:?}"))
    };
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../web");
    let mut page: Vec<String> = std::fs::read_dir(&web)
        .expect("web/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".js") || n.ends_with(".css"))
        .map(|n| format!("/{n}"))
        .collect();
    page.push("/".into());
    let sum = |gzip: bool| page.iter().map(|p| bytes(p, gzip)).sum::<u64>();
    // The whole list (scripts, other pages) and what the list page asks.
    let (list, row) = ("/api/chambers?archived=1", "/api/chambers?archived=1&fields=row");
    for (key, plain, gzipped) in [
        ("page", sum(false), sum(true)),
        ("list", bytes(list, false), bytes(list, true)),
        ("list_row", bytes(row, false), bytes(row, true)),
    ] {
        println!("  {key:<8} {:>9.1} kB, gzipped {:>7.1} kB", plain as f64 / 1000.0, gzipped as f64 / 1000.0);
        f.insert(format!("{key}_kb"), (plain as f64 / 1000.0).into());
        f.insert(format!("{key}_gzip_kb"), (gzipped as f64 / 1000.0).into());
    }
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/paint.mjs");
    let out = std::process::Command::new("node")
        .arg(&driver)
        .env("HUB_URL", url)
        .env("HUB_TOKEN", token)
        .env("RUNS", runs.to_string())
        .output()
        .expect("node");
    let seen: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or("{}"))
            .unwrap_or_default();
    if !seen["error"].is_null() || seen["list_ms"].is_null() {
        eprintln!("cryo-bench: paint.mjs failed: {seen} {}", String::from_utf8_lossy(&out.stderr));
        return f;
    }
    // `list_driver_ms`: the cold load as the driver sees it, the figure
    // before 2026-11-29 (paint.mjs says what it adds).
    for (key, label) in [("list_ms", "cold"), ("list_nav_ms", "in the app"), ("list_driver_ms", "cold, driver")] {
        let (p50, max) = (&seen[key]["p50"], &seen[key]["max"]);
        println!("  first paint, {label:<12} p50 {p50} ms (max {max}), {} rows drawn", seen["rows"]);
        f.insert(format!("paint_{key}_p50"), p50.clone());
        f.insert(format!("paint_{key}_max"), max.clone());
    }
    f
}
