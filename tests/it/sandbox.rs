//! Issue 25: what an agent can reach. A scripted agent under each mode tries
//! what it must not do and what it must; keys kept outside the chamber
//! (`[provider].env` values read from a file at each spawn).

use cryo_tests::receiver::Receiver;
use cryo_tests::{Env, wait_until};

/// An agent that tries each thing, writes `ok NAME` or `blocked NAME` to
/// `probes.txt` in its chamber, then hibernates. `outside` holds cryod's
/// state and config folders and a peer chamber, outside `/tmp` (which
/// hides the test's world whole).
fn prober(env: &Env, outside: &std::path::Path, daemon_pid: u32, http: &str) -> String {
    let world = env.root().display().to_string();
    let outside = outside.display();
    let probes: Vec<(&str, String)> = vec![
        // Must be blocked.
        ("ssh_key", "cat \"$HOME/.ssh/id_test\"".into()),
        ("other_chambers_mail", format!("cat {outside}/peer/messages/inbox/*.md")),
        ("write_outside", format!("touch {outside}/outside-file")),
        ("write_home", "touch \"$HOME/made-by-agent\"".into()),
        ("read_tmp", format!("cat {world}/tmp-secret.txt")),
        ("write_tmp", format!("touch /tmp/{}", tmp_probe(env))),
        ("database", format!("cat {outside}/state/cryo/cryod.db")),
        ("hub_token", format!("cat {outside}/state/cryo/hub-token")),
        ("cryod_config", format!("cat {outside}/config/cryo/cryod.toml")),
        ("cryod_environ", format!("cat /proc/{daemon_pid}/environ")),
        ("cryods_secret", "test -n \"$AWS_SECRET_ACCESS_KEY\"".into()),
        (
            "runtime_socket",
            format!(
                "/usr/bin/python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' {world}/run/bus"
            ),
        ),
        // Must work.
        ("write_chamber", "touch made-inside".into()),
        ("write_project", format!("touch {world}/project/made-here")),
        ("read_readable", format!("cat {world}/docs/readme.txt")),
        ("write_readable", format!("touch {world}/docs/new")),
        ("tmpdir", "touch \"$TMPDIR/scratch\"".into()),
        (
            "git",
            format!(
                "cd {world}/project && git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x"
            ),
        ),
        (
            "http",
            format!(
                "/usr/bin/python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], data=b\"{{}}\").read()' {http}"
            ),
        ),
        ("send", "cryo-agent send 'hello from the sandbox'".into()),
        ("todo_add", "cryo-agent todo add later --at +1h".into()),
        ("todo_list", "cryo-agent todo list".into()),
        ("time", "cryo-agent time".into()),
        ("receive", "cryo-agent receive".into()),
        ("dialog", "cryo-agent dialog".into()),
    ];
    let mut script = String::from(
        "t() { if sh -c \"$2\" >/dev/null 2>&1; then echo \"ok $1\"; else echo \"blocked $1\"; fi >> probes.txt; }\n: > probes.txt\n",
    );
    for (name, cmd) in probes {
        script.push_str(&format!("t {name} '{}'\n", cmd.replace('\'', "'\\''")));
    }
    script.push_str("cryo-agent hibernate\n");
    script
}

/// The file the prober makes in `/tmp`: blocked (Landlock), or made in a
/// private `/tmp` (bwrap); never in the real one.
fn tmp_probe(env: &Env) -> String {
    format!("cryo-probe-{}", env.root().file_name().unwrap().to_string_lossy())
}

/// What the probes said, by name.
fn probes(c: &cryo_tests::Chamber) -> std::collections::BTreeMap<String, String> {
    c.read("probes.txt")
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(v, k)| (k.to_string(), v.to_string())))
        .collect()
}

#[test]
fn landlock_confines_an_agent_to_its_chamber_and_projects() {
    // As a normal user: run as root, Landlock's ptrace rule does not keep
    // the agent out of cryod's /proc/PID/environ (bwrap's namespace does).
    confines("landlock", true);
}

#[test]
fn bwrap_confines_an_agent_as_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED bwrap_confines_an_agent_as_root: not run as root");
        return;
    }
    confines("bwrap", false);
}

#[test]
fn bwrap_confines_an_agent_as_a_normal_user() {
    confines("bwrap", true);
}

/// Runs the prober under `mode` (as user 65534 if `normal_user` and this
/// is root) and checks each probe.
fn confines(mode: &str, normal_user: bool) {
    if let Some(why) = cryo_session::Sandbox::parse(mode).and_then(cryo_session::Sandbox::unavailable) {
        eprintln!("SKIPPED {mode} confinement: {why}");
        return;
    }
    let mut env = Env::new();
    let root = nix::unistd::geteuid().is_root();
    let as_nobody = root && normal_user;
    if as_nobody {
        let bin = cryo_tests::bin_dir();
        if let Err(why) = env.run_as(65534, 65534, &[bin.as_path()]) {
            eprintln!("SKIPPED {mode} as a normal user: {why}");
            return;
        }
    }
    let http = Receiver::start();
    // cryod's state and config folders, its TMPDIR and a peer chamber lie
    // outside /tmp, where the world is (hidden whole): each probe of them
    // tests its own rule.
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = outside.path();
    for dir in ["state", "config/cryo", "tmp"] {
        std::fs::create_dir_all(out.join(dir)).unwrap();
    }
    std::fs::copy(env.config_file(), out.join("config/cryo/cryod.toml")).unwrap();
    if as_nobody {
        let owned = std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(out).status();
        assert!(owned.is_ok_and(|s| s.success()));
    }
    let var = |dir: &str| out.join(dir).display().to_string();
    let (state, config, tmp) = (var("state"), var("config"), var("tmp"));
    let vars = [
        ("AWS_SECRET_ACCESS_KEY", "leaked"),
        ("XDG_STATE_HOME", state.as_str()),
        ("XDG_CONFIG_HOME", config.as_str()),
        ("TMPDIR", tmp.as_str()),
    ];
    let d = env.spawn_daemon_with(&[], &vars);
    d.wait_ready(&env);
    let made = |rel: &str| out.join(rel).is_file();
    wait_until("cryod's database and hub token", || made("state/cryo/cryod.db") && made("state/cryo/hub-token"));
    std::fs::create_dir_all(env.home().join(".ssh")).unwrap();
    env.write_secret(".ssh/id_test", "PRIVATE KEY", 0o600);
    for dir in ["project", "docs"] {
        std::fs::create_dir_all(env.path(dir)).unwrap();
    }
    std::fs::write(env.path("docs/readme.txt"), "read me").unwrap();
    std::fs::write(env.path("tmp-secret.txt"), "under /tmp").unwrap();
    // A socket in the user's runtime folder, as the session bus is.
    let bus = std::os::unix::net::UnixListener::bind(env.path("run/bus")).unwrap();
    std::fs::set_permissions(env.path("run/bus"), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    env.give_to_user();
    let peer = out.join("peer");
    env.cryoctl(&["chamber", "add", peer.to_str().unwrap(), "--init"]).ok();
    std::fs::write(peer.join("messages/inbox/2026-01-01T00-00-00.000Z_private.md"), "the peer's private mail\n")
        .unwrap();
    let script = prober(&env, out, d.pid(), &http.url("/reach"));
    let world = env.root().display().to_string();
    let c = env.chamber(
        "c",
        &script,
        &format!("sandbox = \"{mode}\"\nwritable = [\"{world}/project\"]\nreadable = [\"{world}/docs\"]\n"),
    );
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let seen = probes(&c);
    for blocked in [
        "ssh_key",
        "other_chambers_mail",
        "write_outside",
        "write_home",
        "read_tmp",
        "database",
        "hub_token",
        "cryod_config",
        "cryod_environ",
        "cryods_secret",
        "write_readable",
    ] {
        assert_eq!(seen.get(blocked).map(String::as_str), Some("blocked"), "{blocked}: {seen:?}");
    }
    let mut worked =
        vec!["write_chamber", "write_project", "read_readable", "tmpdir", "http", "send", "todo_add", "todo_list"];
    worked.extend(["time", "receive", "dialog"]);
    if std::process::Command::new("git").arg("--version").output().is_ok() {
        worked.push("git");
    } else {
        eprintln!("SKIPPED the git probe: no git on this machine");
    }
    for ok in worked {
        assert_eq!(seen.get(ok).map(String::as_str), Some("ok"), "{ok}: {seen:?}");
    }
    // The runtime folder's sockets: bwrap hides them; Landlock cannot
    // refuse a connect to a named socket (SECURITY.md).
    let runtime = if mode == "bwrap" { "blocked" } else { "ok" };
    assert_eq!(seen.get("runtime_socket").map(String::as_str), Some(runtime), "runtime_socket: {seen:?}");
    drop(bus);
    // /tmp: Landlock keeps the agent out of it; bwrap gives it a private one.
    let private_tmp = if mode == "bwrap" { "ok" } else { "blocked" };
    assert_eq!(seen.get("write_tmp").map(String::as_str), Some(private_tmp), "write_tmp: {seen:?}");
    assert!(!std::path::Path::new("/tmp").join(tmp_probe(&env)).exists(), "the real /tmp was written");
    assert!(!http.got("/reach").is_empty(), "the local HTTP server was reached");
    assert!(c.read("cryo.log").contains("hibernated"), "{}", c.read("cryo.log"));
    assert!(!out.join("outside-file").exists() && !env.home().join("made-by-agent").exists());
    eprintln!("{mode}: {seen:?}");
}

#[test]
fn without_landlock_a_confined_session_does_not_start() {
    refused("landlock", ("CRYO_LANDLOCK", "0"), "this kernel has no Landlock");
}

#[test]
fn without_bubblewrap_a_confined_session_does_not_start() {
    refused("bwrap", ("CRYO_BWRAP", "/nonexistent/bwrap"), "cannot run /nonexistent/bwrap");
}

/// A chamber confined by `mode`, on a cryod told by `var` that the mode is
/// missing: the start says `why` in one line, as does the chamber's status,
/// and the agent never runs.
fn refused(mode: &str, var: (&str, &str), why: &str) {
    let env = Env::new();
    let d = env.spawn_daemon_with(&[], &[var]);
    d.wait_ready(&env);
    let c = env.chamber("c", "touch ran\ncryo-agent hibernate\n", &format!("sandbox = \"{mode}\"\n"));
    let refused = env.cryoctl(&["chamber", "start", "c"]).fails(1).to_string();
    assert!(refused.contains(why) && refused.contains("sandbox = \"off\""), "{refused}");
    assert_eq!(refused.trim_end().lines().count(), 1, "{refused}");
    let log = || std::fs::read_to_string(c.dir.join("cryo.log")).unwrap_or_default();
    wait_until("the refusal", || log().contains(why));
    assert!(!c.dir.join("ran").exists(), "the agent never ran");
    // The log line is written before the machine hears of the refusal:
    // the attention follows it.
    let attention = || env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0]["attention"].clone();
    wait_until("the refusal in the chamber's attention", || attention().as_str().is_some_and(|a| a.contains(why)));
}

/// Says what `MY_KEY` held, then hibernates.
const SAYS_KEY: &str = "cryo-agent send \"key=${MY_KEY:-none}\" >/dev/null\ncryo-agent hibernate\n";

#[test]
fn a_provider_key_is_read_from_its_file_at_each_spawn() {
    let env = Env::new();
    let _d = env.start_daemon();
    let keys = env.home().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    env.write_secret("keys/k", "sk-from-a-file\n", 0o600);
    let c = env.chamber("c", SAYS_KEY, "[provider]\nenv = { MY_KEY = { file = \"~/keys/k\" }, OTHER = \"plain\" }\n");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let said: Vec<String> = c.messages("messages/outbox").into_iter().map(|(_, t)| t).collect();
    assert!(said.iter().any(|t| t.contains("key=sk-from-a-file\n")), "the key, without its newline: {said:?}");
    assert!(!c.read("cryo.toml").contains("sk-from"), "the key is not in the chamber");

    // Rotated: the next session has the new key.
    env.write_secret("keys/k", "sk-rotated", 0o600);
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    c.wait_ended(2);
    assert!(c.messages("messages/outbox").iter().any(|(_, t)| t.contains("key=sk-rotated")));

    // Readable by others: the session does not start, and says why (never the key).
    env.write_secret("keys/k", "sk-exposed", 0o644);
    env.cryoctl(&["chamber", "wake", "c"]).ok();
    wait_until("the refused spawn", || c.read("cryo.log").contains("readable by others"));
    let log = c.read("cryo.log");
    assert!(log.contains("[provider].env.MY_KEY") && log.contains("chmod 600"), "{log}");
    assert!(!log.contains("sk-exposed") && !c.read("cryo-agent.log").contains("sk-exposed"));
    assert!(!c.messages("messages/outbox").iter().any(|(_, t)| t.contains("sk-exposed")));
}

#[test]
fn a_malformed_key_value_is_one_line_naming_it() {
    let env = Env::new();
    let _d = env.start_daemon();
    let c = env.chamber("c", SAYS_KEY, "");
    let before = c.read("cryo.toml");
    let bad = format!("{before}\n[provider]\nenv = {{ MY_KEY = {{ path = \"/x\" }} }}\n");
    std::fs::write(c.dir.join("cryo.toml"), &bad).unwrap();
    wait_until("the fault", || env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0]["state"] == "faulted");
    let status = env.cryoctl(&["chamber", "status", "c", "--json"]).json();
    let fault = status[0]["fault"].as_str().unwrap();
    assert!(fault.contains("cryo.toml") && fault.contains("{ file = \"PATH\" }"), "{fault}");
    assert_eq!(fault.lines().count(), 1, "{fault}");
    assert_eq!(c.read("cryo.toml"), bad, "the file is left as it was");
}

/// A new chamber gets the strongest sandbox this machine provides, written
/// into its `cryo.toml` (where the user sees and changes it), and its
/// sessions run under it; `doctor` says which; a mode cryo does not know is
/// refused with one line and writes nothing.
#[test]
fn a_new_chamber_gets_the_strongest_sandbox_and_doctor_says_which() {
    let env = Env::new();
    let _d = env.start_daemon();
    let strongest = cryo_session::Sandbox::strongest().as_str();
    let dir = env.path("c");
    let out =
        env.cryoctl(&["chamber", "add", dir.to_str().unwrap(), "--init", "--agent", "sh agent.sh"]).ok().to_string();
    assert!(out.contains(&format!("sandbox  {strongest}")), "{out}");
    assert!(
        std::fs::read_to_string(dir.join("cryo.toml")).unwrap().contains(&format!("\nsandbox = \"{strongest}\"\n"))
    );
    assert_eq!(env.cryoctl(&["chamber", "status", "c", "--json"]).json()[0]["sandbox"], strongest);
    assert!(env.cryoctl(&["chamber", "status", "c"]).ok().contains(&format!("  sandbox   {strongest}\n")));
    let doctor = env.cryoctl(&["doctor", "--json"]).json();
    let check = doctor.as_array().unwrap().iter().find(|c| c["check"] == "sandbox").cloned().unwrap_or_default();
    assert!(check["detail"].as_str().unwrap_or_default().contains(&format!("new chambers get {strongest}")), "{check}");
    // Its session is confined: home is out of reach, the chamber is not.
    std::fs::create_dir_all(env.home().join(".ssh")).unwrap();
    env.write_secret(".ssh/id_test", "PRIVATE KEY", 0o600);
    let probe = "if cat \"$HOME/.ssh/id_test\" >/dev/null 2>&1; then echo read > seen; else echo blocked > seen; fi\n";
    std::fs::write(dir.join("agent.sh"), format!("{probe}cryo-agent hibernate\n")).unwrap();
    let c = cryo_tests::Chamber { name: "c".into(), dir: dir.clone() };
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let expected = if strongest == "off" { "read" } else { "blocked" };
    assert_eq!(c.read("seen").trim(), expected, "{}", c.read("cryo-agent.log"));
    if strongest != "off" {
        assert!(c.read("cryo-agent.log").contains(&format!(", sandbox {strongest}) at ")));
    }
    // A mode cryo does not know: one line, nothing written.
    let other = env.path("d");
    let r = env.cryoctl(&["chamber", "init", other.to_str().unwrap(), "--sandbox", "chroot"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.lines().next().is_some_and(|l| l.contains("'chroot'")), "{}", r.stderr);
    assert!(!other.exists());
}

/// Without a systemd user manager, a chamber's resource limits cannot be
/// applied: the session runs, and cryo.log says so.
#[test]
fn session_limits_outside_systemd_are_reported_not_silently_dropped() {
    let env = Env::new();
    let d = env.spawn_daemon_with(&[], &[("INVOCATION_ID", "")]);
    d.wait_ready(&env);
    let c = env.chamber("c", "cryo-agent hibernate --complete\n", "memory_max = \"1G\"\ncpu_weight = 20\n");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let log = c.read("cryo.log");
    assert!(log.contains("memory_max and cpu_weight are not applied: cryod does not run under a systemd user manager"));
    assert!(log.contains("hibernate --complete accepted"), "{log}");
}
