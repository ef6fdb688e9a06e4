//! Issue 6: the human output of cryoctl, as snapshots. Paths, times, pids
//! and wake ids are replaced by placeholders so the snapshots are stable.

use cryo_tests::Env;

fn settings(env: &Env) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    let root = env.root().to_string_lossy().into_owned();
    s.add_filter(&regex_escape(&root), "[ROOT]");
    s.add_filter(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?", "[TIME]");
    s.add_filter(r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{2}:\d{2}", "[TIME]");
    s.add_filter(r"\b\d+h( \d+m)?\b", "[DURATION]");
    s.add_filter(r"\b\d+ms\b", "[MS]");
    s.add_filter(r"\b\d+s\b", "[S]");
    s.add_filter(r"\b\d+m( \d+s)?\b", "[DURATION]");
    s.add_filter(r"pid \d+", "pid [PID]");
    s.add_filter(r"w\d+-\d+-[0-9a-f]{12}", "[WAKE]");
    s.add_filter(r"_[0-9a-f]{8}\.md", "_[ID].md");
    // Run as root (CI), the tests' unconfined chambers are warned about.
    s.add_filter(r#"(?m)^ *warning +sandbox = "off" while cryod runs as root[^\n]*\n"#, "");
    // Column widths follow the (filtered) values: compare the cells, not the padding.
    s.add_filter(r" {2,}", "  ");
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    s
}

fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if "\\.+*?()|[]{}^$".contains(c) { format!("\\{c}") } else { c.to_string() }).collect()
}

const AGENT: &str = "cryo-agent receive >/dev/null\ncryo-agent send --question \"Shall I merge PR 7?\" >/dev/null\ncryo-agent todo list | grep -q 'check CI' || cryo-agent todo add 'check CI' --at +2h >/dev/null\ncryo-agent hibernate --summary 'asked about PR 7'\n";

#[test]
fn human_output() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("builds", AGENT, "");
    env.chamber("docs", "exit 0\n", "");
    c.write_inbox(1, "How is the build?");
    env.cryoctl(&["chamber", "start", "builds"]).ok();
    c.wait_ended(1);
    cryo_tests::wait_until("the status to settle", || {
        env.cryoctl(&["chamber", "status", "builds", "--json"]).json()[0]["state"] == "idle"
    });
    let s = settings(&env);
    s.bind(|| {
        insta::assert_snapshot!("chamber_list", env.cryoctl(&["chamber", "list"]).ok());
        insta::assert_snapshot!("chamber_status", env.cryoctl(&["chamber", "status", "builds"]).ok());
        insta::assert_snapshot!("chamber_todo_list", env.cryoctl(&["chamber", "todo", "builds", "list"]).ok());
        insta::assert_snapshot!("chamber_messages", env.cryoctl(&["chamber", "messages", "builds"]).ok());
        insta::assert_snapshot!("error_unknown_chamber", env.cryoctl(&["chamber", "status", "nope"]).fails(4));
        insta::assert_snapshot!(
            "error_bad_time",
            env.cryoctl(&["chamber", "todo", "builds", "add", "x", "--at", "soonish"]).fails(1)
        );
    });
}

#[test]
fn no_daemon_output() {
    let env = Env::new();
    let s = settings(&env);
    s.bind(|| {
        insta::assert_snapshot!("error_no_daemon", env.cryoctl(&["chamber", "list"]).fails(3));
    });
}
