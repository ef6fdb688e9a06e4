//! Issue 2: the daemon, its socket and lock, the registry, and the first
//! cryoctl verbs, all through the real binaries.

use std::os::unix::fs::PermissionsExt;

use cryo_tests::{Env, wait_until};
use nix::sys::signal::Signal;

#[test]
fn init_is_idempotent_and_reports_kept_files() {
    let env = Env::new();
    let _d = env.start_daemon();
    let dir = env.path("work");
    let first = env.cryoctl(&["chamber", "init", dir.to_str().unwrap(), "--agent", "claude"]);
    let out = first.ok();
    for f in ["plan.md", "cryo.toml", "NOTES.md", ".gitignore", "messages/inbox/", "messages/outbox/archive/"] {
        assert!(out.contains(&format!("created  {f}")), "{f} not created:\n{out}");
    }
    std::fs::write(dir.join("plan.md"), "my own plan\n").unwrap();
    let second = env.cryoctl(&["--json", "chamber", "init", dir.to_str().unwrap()]).json();
    assert_eq!(second["created"], serde_json::json!([]));
    assert_eq!(second["kept"].as_array().unwrap().len(), 9);
    assert_eq!(std::fs::read_to_string(dir.join("plan.md")).unwrap(), "my own plan\n");
    let toml = std::fs::read_to_string(dir.join("cryo.toml")).unwrap();
    assert!(toml.contains("agent = \"claude\""), "{toml}");
    // The template documents every key of DESIGN.md.
    for key in [
        "max_session_duration",
        "timezone",
        "watch_dirs",
        "[provider]",
        "max_attempts",
        "[sync.zulip]",
        "[sync.github]",
    ] {
        assert!(toml.contains(key), "cryo.toml template lacks {key}");
    }
    // `init` with no DIR scaffolds the current folder.
    let here = env.path("here");
    std::fs::create_dir(&here).unwrap();
    env.cryoctl_in(Some(&here), &["chamber", "init"]).ok();
    assert!(here.join("cryo.toml").is_file());
}

#[test]
fn add_list_status_remove() {
    let env = Env::new();
    let _d = env.start_daemon();
    let a = env.path("alpha");
    // A folder that is not a chamber is refused unless --init.
    std::fs::create_dir(&a).unwrap();
    let err = env.cryoctl(&["chamber", "add", a.to_str().unwrap()]).fails(1).to_string();
    assert!(err.contains("--init"), "{err}");
    env.cryoctl(&["chamber", "add", a.to_str().unwrap(), "--init"]).ok();
    // The same canonical path again (through a symlink) is a no-op that says so.
    std::os::unix::fs::symlink(&a, env.path("alias")).unwrap();
    let again = env.cryoctl(&["chamber", "add", env.path("alias").to_str().unwrap()]);
    assert!(again.ok().contains("already registered"), "{}", again.stdout);
    // Names are made unique.
    let b = env.path("other/alpha");
    env.cryoctl(&["chamber", "add", b.to_str().unwrap(), "--init"]).ok();
    let list = env.cryoctl(&["chamber", "list", "--json"]).json();
    let names: Vec<_> = list.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["alpha", "alpha-2"]);
    assert_eq!(list[0]["state"], "stopped");
    assert_eq!(list[0]["path"], a.canonicalize().unwrap().to_str().unwrap());
    let table = env.cryoctl(&["chamber", "list"]);
    let table = table.ok();
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("alpha-2") && table.contains("stopped"), "{table}");
    // An explicit name that is taken is refused.
    let c = env.path("gamma");
    let taken = env.cryoctl(&["chamber", "add", c.to_str().unwrap(), "--init", "--name", "alpha"]);
    assert!(taken.fails(1).contains("taken"));
    // Status by name, by path, and from inside the chamber with no argument.
    let by_name = env.cryoctl(&["chamber", "status", "alpha", "--json"]).json();
    let by_path = env.cryoctl(&["chamber", "status", b.to_str().unwrap(), "--json"]).json();
    assert_eq!(by_name[0]["name"], "alpha");
    assert_eq!(by_path[0]["name"], "alpha-2");
    let inside = env.cryoctl_in(Some(&a.join("messages/inbox")), &["chamber", "status", "--json"]).json();
    assert_eq!(inside[0]["name"], "alpha");
    // A folder name that is not a registered name is tried as a path.
    let rel = env.cryoctl_in(Some(&env.path("other")), &["chamber", "status", "alpha", "--json"]).json();
    assert_eq!(rel[0]["name"], "alpha", "a registered name wins over a folder of the same name");
    let missing = env.cryoctl(&["chamber", "status", "nope"]);
    assert!(missing.fails(4).contains("no chamber named"));
    // Remove unregisters and keeps every file.
    env.cryoctl(&["chamber", "remove", "alpha"]).ok();
    assert!(a.join("plan.md").is_file() && a.join("cryo.toml").is_file());
    let list = env.cryoctl(&["chamber", "list", "--json"]).json();
    assert_eq!(list.as_array().unwrap().len(), 1);
}

#[test]
fn restart_keeps_the_registry() {
    let env = Env::new();
    let mut d = env.start_daemon();
    env.cryoctl(&["chamber", "add", env.path("keep").to_str().unwrap(), "--init"]).ok();
    let status = d.signal_and_wait(Signal::SIGTERM);
    assert!(status.success(), "cryod exited with {status}");
    assert!(!env.socket().exists(), "the socket is removed on a clean stop");
    let _d = env.start_daemon();
    let list = env.cryoctl(&["chamber", "list", "--json"]).json();
    assert_eq!(list[0]["name"], "keep");
}

#[test]
fn a_second_daemon_is_refused_and_names_the_first() {
    let env = Env::new();
    let first = env.start_daemon();
    let mut second = env.spawn_daemon(&[]);
    let status = second.wait_exit();
    assert!(!status.success());
    let log = env.daemon_log();
    assert!(log.contains(&format!("another cryod is running (pid {})", first.pid())), "{log}");
    // The first one still serves.
    env.cryoctl(&["chamber", "list"]).ok();
}

#[test]
fn a_stale_socket_is_recovered() {
    let env = Env::new();
    let mut d = env.start_daemon();
    // SIGKILL leaves the socket file behind.
    d.signal_and_wait(Signal::SIGKILL);
    assert!(env.socket().exists());
    let refused = env.cryoctl(&["chamber", "list"]);
    assert!(refused.fails(3).contains("stale socket"), "{}", refused.stderr);
    let _d = env.start_daemon();
    env.cryoctl(&["chamber", "list"]).ok();
}

#[test]
fn socket_and_folder_are_private() {
    let env = Env::new();
    let _d = env.start_daemon();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&env.socket()), 0o600);
    assert_eq!(mode(env.socket().parent().unwrap()), 0o700);
    assert_eq!(mode(&env.state_dir()), 0o700);
}

#[test]
fn sigterm_and_sigint_stop_the_daemon_promptly() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let env = Env::new();
        let mut d = env.start_daemon();
        let start = std::time::Instant::now();
        let status = d.signal_and_wait(sig);
        assert!(status.success(), "{sig:?}: {status}");
        assert!(start.elapsed() < std::time::Duration::from_secs(5), "{sig:?} took {:?}", start.elapsed());
    }
}

#[test]
fn a_bad_cryo_toml_faults_only_that_chamber() {
    let env = Env::new();
    let _d = env.start_daemon();
    let good = env.path("good");
    let bad = env.path("bad");
    env.cryoctl(&["chamber", "add", good.to_str().unwrap(), "--init"]).ok();
    env.cryoctl(&["chamber", "add", bad.to_str().unwrap(), "--init"]).ok();
    drop(_d);
    let broken = "agent = \"opencode\"\nmax_sesion_duration = 60\n";
    std::fs::write(bad.join("cryo.toml"), broken).unwrap();
    let _d = env.start_daemon();
    let status = env.cryoctl(&["chamber", "status", "bad", "--json"]).json();
    assert_eq!(status[0]["state"], "faulted");
    let fault = status[0]["fault"].as_str().unwrap();
    assert!(fault.contains("cryo.toml:2") && fault.contains("max_sesion_duration"), "{fault}");
    // The file is kept as it was; the other chamber is unaffected.
    assert_eq!(std::fs::read_to_string(bad.join("cryo.toml")).unwrap(), broken);
    let good = env.cryoctl(&["chamber", "status", "good", "--json"]).json();
    assert_eq!(good[0]["state"], "stopped");
    // Adding a chamber with a broken file registers it faulted, with the reason.
    let third = env.path("third");
    std::fs::create_dir(&third).unwrap();
    std::fs::write(third.join("cryo.toml"), "agent = [\n").unwrap();
    let added = env.cryoctl(&["chamber", "add", third.to_str().unwrap(), "--json"]).json();
    assert_eq!(added["chamber"]["state"], "faulted");
    assert!(added["chamber"]["fault"].as_str().unwrap().contains("cryo.toml:"), "{added}");
}

#[test]
fn a_seed_chamber_is_accepted_as_it_is() {
    let env = Env::new();
    let _d = env.start_daemon();
    let dir = env.path("seed");
    std::fs::create_dir_all(dir.join("messages/inbox/archive")).unwrap();
    let files = [
        ("plan.md", "# Plan\nWatch the build.\n"),
        (
            "cryo.toml",
            "agent = \"opencode\"\nmax_session_duration = 3600\nwatch_dirs = [\"messages/inbox\"]\nzulip_poll_interval = 5\n",
        ),
        (
            "todo.json",
            r#"[{"id":1,"text":"check CI","done":false,"claimed":false,"at":"2026-03-05T09:00","created":"2026-03-01T10:00"}]"#,
        ),
        (
            "messages/inbox/2026-03-05T08-00-00_hello_0001.md",
            "---\nfrom: operator\nsubject: hello\ntimestamp: 2026-03-05T08:00:00\n---\n\nhi\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let added = env.cryoctl(&["chamber", "add", dir.to_str().unwrap(), "--json"]).json();
    assert_eq!(added["chamber"]["state"], "stopped");
    assert!(added["warnings"][0].as_str().unwrap().contains("zulip_poll_interval"), "{added}");
    // Nothing in the folder was rewritten.
    for (name, text) in files {
        assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), text, "{name} changed");
    }
}

#[test]
fn without_a_daemon_every_verb_says_how_to_start_it() {
    let env = Env::new();
    for args in [
        &["chamber", "list"][..],
        &["chamber", "status", "x"],
        &["chamber", "add", "/tmp"],
        &["chamber", "init", "/tmp/never"],
        &["chamber", "remove", "x"],
    ] {
        let r = env.cryoctl(args);
        let line = r.fails(3);
        assert!(line.contains(env.socket().to_str().unwrap()), "{args:?}: {line}");
        assert!(line.contains("cryoctl daemon run"), "{args:?}: {line}");
    }
    // A usage error is distinct.
    assert_eq!(env.cryoctl(&["chamber", "frobnicate"]).code, Some(2));
}

#[test]
fn a_protocol_mismatch_says_what_to_do() {
    let env = Env::new();
    let _d = env.start_daemon();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = rt.block_on(async {
        let mut c = cryo_proto::control_unchecked(&env.socket()).await.unwrap();
        c.hello(cryo_proto::v1::HelloRequest { client: "cryoctl".into(), protocol: 999, version: "9.9.9".into() })
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    let m = status.message();
    assert!(m.contains("protocol 999") && m.contains(&format!("protocol {}", cryo_proto::PROTOCOL_VERSION)), "{m}");
    assert!(m.contains("cryoctl daemon restart"), "{m}");
}

#[test]
fn a_bad_cryod_toml_names_file_line_and_key() {
    let env = Env::new();
    std::fs::create_dir_all(env.config_file().parent().unwrap()).unwrap();
    std::fs::write(env.config_file(), "# settings\nmax_concurent_sessions = 2\n").unwrap();
    let mut d = env.spawn_daemon(&[]);
    assert!(!d.wait_exit().success());
    let log = env.daemon_log();
    let line = log.lines().find(|l| l.contains("cryod.toml")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("cryod.toml:2") && line.contains("max_concurent_sessions"), "{line}");
    assert!(!env.socket().exists(), "a daemon with a bad config does not bind");
}

#[test]
fn cryoctl_daemon_run_is_the_same_daemon() {
    let env = Env::new();
    let mut c = env.command(cryo_tests::bin("cryoctl"));
    c.args(["daemon", "run"]).stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let socket = env.socket();
    wait_until("cryoctl daemon run to serve", || std::os::unix::net::UnixStream::connect(&socket).is_ok());
    env.cryoctl(&["chamber", "list"]).ok();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    assert!(child.wait().unwrap().success());
}
