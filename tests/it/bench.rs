//! Issue 11: `cryo-bench` runs every scenario end to end (tiny sizes, no
//! timing asserted: speed is measured by the bench itself, not by tests) and
//! its JSON carries the figures. What the bench checks beyond speed is
//! asserted: every wake measured, a burst ran each chamber exactly once
//! within the session limit, recovery re-ran the interrupted sessions and
//! left no agent of the killed daemon behind.

use std::process::Command;

/// Runs `cryo-bench ARGS --json` and returns its figures (the JSON object
/// printed last).
fn bench(args: &[&str]) -> serde_json::Map<String, serde_json::Value> {
    let out =
        Command::new(env!("CARGO_BIN_EXE_cryo-bench")).args(args).arg("--json").output().expect("cryo-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "cryo-bench {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("machine: "), "the machine comes first:\n{stdout}");
    let json = &stdout[stdout.rfind("\n{").expect("a JSON object at the end") + 1..];
    match serde_json::from_str(json).expect("the figures parse") {
        serde_json::Value::Object(m) => m,
        other => panic!("figures are not an object: {other}"),
    }
}

fn num(f: &serde_json::Map<String, serde_json::Value>, key: &str) -> f64 {
    f.get(key).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("no figure {key} in {f:?}"))
}

#[test]
fn lateness_measures_every_wake() {
    let f = bench(&["lateness", "--wakes", "6", "--chambers", "3", "--spread", "4"]);
    assert_eq!(num(&f, "wakes"), 6.0);
    // The earliest too: a chamber is told a head start before its due
    // instant (scheduler::HEAD_START), and its agent still starts at it.
    for k in ["lateness_min_ms", "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms"] {
        assert!(num(&f, k) >= 0.0, "{k} is a lateness, never early: {f:?}");
    }
}

/// Issue 18's figures: the same lateness with the PostgreSQL store, and a
/// fleet's statements per idle node and per wake.
#[test]
fn the_fleet_reports_its_statements_and_lateness() {
    if !cryo_tests::pg::installed() {
        return;
    }
    let f = bench(&["lateness", "--wakes", "4", "--chambers", "2", "--spread", "3", "--postgres"]);
    assert_eq!(num(&f, "wakes"), 4.0);
    let f = bench(&[
        "fleet",
        "--nodes",
        "2",
        "--chambers",
        "4",
        "--seconds",
        "1",
        "--wakes",
        "4",
        "--spread",
        "3",
        "--heartbeat-ms",
        "250",
        "--lease-ms",
        "1500",
    ]);
    assert_eq!(num(&f, "wakes"), 4.0);
    assert!(num(&f, "statements_per_idle_node_per_second") >= 0.0, "{f:?}");
    // The per-wake figure is an estimate (the heartbeats' share taken out),
    // noisy at this size; what the wakes ran is counted as it is.
    assert!(num(&f, "statements_per_wake").is_finite(), "{f:?}");
    // The killed node's chambers were all taken over, and counted.
    assert!(num(&f, "takeover_s") > 0.0, "{f:?}");
    assert!(num(&f, "handover_chambers") >= 1.0 && num(&f, "takeover_chambers") >= 1.0, "{f:?}");
    assert!(num(&f, "database_mb") > 0.0, "{f:?}");
    assert!(num(&f, "statements_during_wakes") >= 4.0 * 3.0, "each wake writes its ledger row, start and end: {f:?}");
}

#[test]
fn burst_runs_each_chamber_once_within_the_limit() {
    let f = bench(&["burst", "--chambers", "12", "--limit", "3"]);
    assert_eq!(num(&f, "ran_twice"), 0.0);
    assert_eq!(num(&f, "never_ran"), 0.0);
    let most = num(&f, "max_concurrent");
    assert!((1.0..=3.0).contains(&most), "at most 3 at once, got {most}");
}

#[test]
fn a_storm_answers_every_message_within_the_derived_limit() {
    let f = bench(&["storm", "--chambers", "6", "--messages", "3", "--work-ms", "50"]);
    let limit = num(&f, "limit");
    assert!(limit >= 2.0, "a limit derived from the machine: {f:?}");
    let (sessions, most) = (num(&f, "sessions"), num(&f, "max_concurrent"));
    assert!((6.0..=18.0).contains(&sessions), "each chamber ran, at most once a message: {f:?}");
    assert!(most >= 1.0 && most <= limit, "within the limit: {f:?}");
    assert!(num(&f, "storm_seconds") > 0.0);
}

#[test]
fn recovery_reruns_the_interrupted_sessions_and_leaves_no_agent_behind() {
    let f = bench(&["recovery", "--chambers", "6", "--running", "2"]);
    assert_eq!(num(&f, "rerun"), 2.0);
    assert_eq!(num(&f, "survivors"), 0.0);
    assert!(num(&f, "recovery_ms") > 0.0);
}

#[test]
fn idle_control_and_inbox_report_their_figures() {
    let idle = bench(&["idle", "--chambers", "3", "--todos", "5", "--seconds", "1"]);
    for k in ["rss_mb", "startup_ms", "wakeups_per_minute", "cpu_seconds_per_minute"] {
        num(&idle, k);
    }
    let control = bench(&["control", "--chambers", "3", "--runs", "3"]);
    for k in [
        "list_median_ms",
        "status_median_ms",
        "agent_call_median_ms",
        "mcp_start_median_ms",
        "mcp_call_median_ms",
        "rtt_open_median_ms",
        "rtt_connect_median_ms",
    ] {
        assert!(num(&control, k) > 0.0, "{k}: {control:?}");
    }
    let inbox = bench(&["inbox", "--messages", "4", "--chambers", "2"]);
    for k in ["inbox_to_start_p50_ms", "inbox_to_receive_p99_ms"] {
        assert!(num(&inbox, k) > 0.0, "{k}: {inbox:?}");
    }
}

/// Issue 41: the history scenario, tiny, on both worlds: every wake
/// measured and none early, each figure of the table on both, the aged
/// ledger written.
#[test]
fn history_measures_the_empty_and_the_aged_store() {
    let f = bench(&[
        "history",
        "--sessions",
        "2000",
        "--chambers",
        "10",
        "--done-todos",
        "500",
        "--messages",
        "200",
        "--wakes",
        "3",
        "--every",
        "1",
        "--runs",
        "2",
        "--starts",
        "2",
    ]);
    for side in ["empty", "aged"] {
        assert_eq!(num(&f, &format!("{side}_wakes")), 3.0, "{f:?}");
        assert!(num(&f, &format!("{side}_lateness_min_ms")) >= 0.0, "no agent starts early: {f:?}");
        for k in ["todo_list", "todo_add", "hibernate", "status", "list", "usage", "startup"] {
            assert!(num(&f, &format!("{side}_{k}_p50_ms")) > 0.0, "{side} {k}: {f:?}");
        }
        assert!(num(&f, &format!("{side}_rss_after_mb")) > 0.0, "{f:?}");
    }
    assert!(num(&f, "aged_ledger_bytes") > num(&f, "empty_ledger_bytes"), "the aged ledger is written: {f:?}");
    num(&f, "ratio_status_p50_ms");
}

#[test]
fn git_measures_what_a_worktree_adds_to_a_wake() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("SKIPPED the git bench: no git on this machine");
        return;
    }
    for mode in [&[][..], &["--session"][..]] {
        let mut args = vec!["git", "--files", "30", "--wakes", "2"];
        args.extend(mode);
        let f = bench(&args);
        for k in ["plain_wake_p50_ms", "git_wake_p50_ms", "prepare_p50_ms"] {
            assert!(num(&f, k).is_finite(), "{k}: {f:?}");
        }
    }
}

/// Issue 63: the hub's paint and weight at a few chambers (skipped without
/// a browser, as the browser tests are): the page and the list are smaller
/// gzipped than plain, and the first paint was measured.
#[test]
fn paint_measures_the_hubs_first_paint_and_weight() {
    if crate::browser::driver_for("paint_measures_the_hubs_first_paint_and_weight").is_none() {
        return;
    }
    let f = bench(&["paint", "--chambers", "3", "--runs", "1"]);
    for what in ["page", "list"] {
        assert!(num(&f, &format!("{what}_gzip_kb")) < num(&f, &format!("{what}_kb")), "{f:?}");
    }
    assert!(num(&f, "paint_list_ms_p50") > 0.0 && num(&f, "paint_list_nav_ms_p50") > 0.0, "{f:?}");
}

/// Issue 65's growth curve: one world grown through two sizes, each
/// measured at rest after a restart, with the probe's wakes among them.
#[test]
fn scale_grows_one_world_and_measures_each_size() {
    let f = bench(&["scale", "--sizes", "3,6", "--todos", "2", "--runs", "1", "--warm-only"]);
    for n in [3, 6] {
        for k in ["rss_mb", "anon_mb", "startup_warm_ms", "first_answer_warm_ms", "list_median_ms", "status_median_ms"]
        {
            assert!(num(&f, &format!("{k}_{n}")) > 0.0, "{k} at {n} chambers: {f:?}");
        }
        assert!(num(&f, &format!("lateness_p50_ms_{n}")) >= 0.0, "the probe never starts early: {f:?}");
        assert!(!f.contains_key(&format!("startup_cold_ms_{n}")), "--warm-only leaves the page cache alone");
    }
    assert!(f.contains_key("kb_per_chamber_6"), "what each chamber added is told from the second size on");
}
