//! Issue 38: a hostile agent tries every way out of its chamber through cryo
//! itself (SECURITY.md, "Attacks by an agent"). Each attempt must be refused,
//! with nothing changed outside its chamber and other chambers answering
//! meanwhile. Run under Landlock and bubblewrap, as root and as a normal
//! user (and, for the operator's door, unconfined too).

use std::time::{Duration, Instant};

use cryo_tests::{Chamber, Env, wait_until};

/// A world for `mode` (as user 65534 if `normal_user` and this is root),
/// its daemon started; `None` (and why, printed) where it cannot be had.
pub(crate) fn world(test: &str, mode: &str, normal_user: bool) -> Option<(Env, cryo_tests::Daemon)> {
    if let Some(why) = cryo_session::Sandbox::parse(mode).and_then(cryo_session::Sandbox::unavailable) {
        eprintln!("SKIPPED {test}: {why}");
        return None;
    }
    let mut env = Env::new();
    if normal_user {
        if !nix::unistd::geteuid().is_root() {
            // Already a normal user.
        } else if let Err(why) = env.run_as(65534, 65534, &[cryo_tests::bin_dir().as_path()]) {
            eprintln!("SKIPPED {test} as a normal user: {why}");
            return None;
        }
    } else if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED {test} as root: not run as root");
        return None;
    }
    env.daemon_config("max_concurrent_sessions = 8\n");
    env.give_to_user();
    let d = env.start_daemon();
    Some((env, d))
}

/// A chamber under `mode` whose agent runs `script`.
pub(crate) fn chamber(env: &Env, name: &str, mode: &str, script: &str) -> Chamber {
    let c = env.chamber(name, script, &format!("sandbox = \"{mode}\"\n"));
    env.give_to_user();
    c
}

/// The probes' verdicts (`ok NAME` / `blocked NAME` lines), by name.
pub(crate) fn verdicts(c: &Chamber) -> std::collections::BTreeMap<String, String> {
    c.read("probes.txt")
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(v, k)| (k.to_string(), v.to_string())))
        .collect()
}

/// A script prelude: `t NAME CMD` runs CMD, keeps its output in
/// `out.NAME`, and writes its verdict.
pub(crate) const PROBE: &str = "t() { if sh -c \"$2\" > \"out.$1\" 2>&1; then echo \"ok $1\"; else echo \"blocked $1\"; fi >> probes.txt; }\n: > probes.txt\n";

/// Ends a script: a next wake an hour out, a word, and the hibernate.
pub(crate) const END: &str =
    "cryo-agent todo add later --at +1h >/dev/null\ncryo-agent send done >/dev/null\ncryo-agent hibernate\n";

pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

// ---------------------------------------------------------------------------
// The operator's door: a session reaches cryod only through its own.

fn operators_door(mode: &str, normal_user: bool) {
    let test = format!("the operator's door ({mode}, normal user: {normal_user})");
    let Some((env, d)) = world(&test, mode, normal_user) else { return };
    let other = env.chamber("other", "exit 0\n", "");
    let socket = env.socket().display().to_string();
    let mut script = String::from(PROBE);
    let probes: Vec<(&str, String)> = vec![
        ("hub_default", "env -u CRYO_SOCKET cryoctl hub".into()),
        ("hub_socket", format!("cryoctl --socket {socket} hub --json")),
        ("send_other", format!("cryoctl --socket {socket} chamber send other forged-by-an-agent")),
        (
            "add_unconfined",
            format!(
                "mkdir -p esc && printf 'agent = \"sh x.sh\"\\nsandbox = \"off\"\\n' > esc/cryo.toml && \
                 echo 'touch \"$HOME/ESCAPED\"' > esc/x.sh && cryoctl --socket {socket} chamber add ./esc --name esc --start"
            ),
        ),
        ("read_key", format!("cat {socket}.key")),
        ("mcp_list", format!("echo '{{}}' | timeout 5 cryoctl --socket {socket} mcp")),
    ];
    for (name, cmd) in &probes {
        script.push_str(&format!("t {name} {}\n", sh_quote(cmd)));
    }
    // SIGSTOP to cryod: an unconfined agent could (it is the user).
    if mode != "off" {
        script.push_str(&format!("t stop_cryod {}\n", sh_quote(&format!("kill -STOP {}", d.pid()))));
    }
    script.push_str(END);
    let c = chamber(&env, "c", mode, &script);
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let seen = verdicts(&c);
    let mut refused = vec!["hub_default", "hub_socket", "send_other", "add_unconfined"];
    if mode != "off" {
        // The key is hidden from every sandbox (an unconfined agent reads
        // it, and is refused by its process tree instead).
        refused.extend(["read_key", "stop_cryod"]);
    }
    for name in refused {
        assert_eq!(seen.get(name).map(String::as_str), Some("blocked"), "{test}: {name}: {seen:?}");
        let said = c.read(&format!("out.{name}"));
        assert!(said.trim().lines().count() <= 1, "{test}: {name} said more than one line: {said}");
    }
    // What each was told, in one line.
    let told = c.read("out.hub_socket");
    assert!(
        told.contains("does not serve a cryo session's processes")
            || told.contains("operator key")
            || told.contains("no socket at"),
        "{test}: {told}"
    );
    // Nothing happened outside.
    assert!(!c.read("out.hub_socket").contains("token"), "{test}: the hub token leaked");
    assert!(other.messages("messages/inbox").is_empty(), "{test}: a message reached the other chamber");
    let list = env.cryoctl(&["chamber", "list", "--json"]).json();
    assert!(!list.to_string().contains("\"esc\""), "{test}: the agent registered a chamber: {list}");
    assert!(!env.home().join("ESCAPED").exists(), "{test}: code ran unconfined");
    // cryod was never stopped: it answers at once.
    let at = Instant::now();
    env.cryoctl(&["chamber", "list"]).ok();
    assert!(at.elapsed() < Duration::from_secs(5), "{test}: cryod was held up");
    if mode == "off" {
        // Unconfined, the key can be read; the process tree still gives it away.
        assert!(c.read("out.send_other").contains("does not serve a cryo session's processes"), "{test}");
    }
    eprintln!("{test}: {seen:?}");
}

#[test]
fn the_operators_door_is_closed_to_a_session_under_landlock() {
    operators_door("landlock", true);
}

#[test]
fn the_operators_door_is_closed_to_a_session_under_landlock_as_root() {
    operators_door("landlock", false);
}

#[test]
fn the_operators_door_is_closed_to_a_session_under_bwrap() {
    operators_door("bwrap", true);
}

#[test]
fn the_operators_door_is_closed_to_a_session_under_bwrap_as_root() {
    operators_door("bwrap", false);
}

#[test]
fn the_operators_door_is_closed_to_an_unconfined_session() {
    operators_door("off", nix::unistd::geteuid().is_root());
}

// ---------------------------------------------------------------------------
// The jailer's rules: an agent cannot loosen its own.

fn own_rules(mode: &str, normal_user: bool) {
    let test = format!("the jailer's rules ({mode}, normal user: {normal_user})");
    let Some((env, _d)) = world(&test, mode, normal_user) else { return };
    wait_until("the hub's token", || env.state_dir().join("hub-token").exists());
    let token = std::fs::read_to_string(env.state_dir().join("hub-token")).unwrap();
    let token = token.trim();
    // One agent rewrites its cryo.toml: unconfined, a hook, a key file
    // naming the hub token, a hand-off, a bridge to its own server.
    let rewrite = r#"
sed -i 's/^sandbox = .*/sandbox = "off"/; s/^max_session_duration = .*/max_session_duration = 0/' cryo.toml
cat >> cryo.toml <<'EOF'
precheck = "touch \"$HOME/PRECHECK-RAN\""
[provider]
env = { STOLEN = { file = "~/../state/cryo/hub-token" } }
[[on_end]]
chamber = "victim"
when = "any"
EOF
"#;
    let jailer = chamber(&env, "jailer", mode, &format!("{rewrite}{END}"));
    let victim = env.chamber("victim", "exit 0\n", "");
    // Another sets a pre-check of its own on a TODO.
    let check =
        "echo CHECK-SAID; cat \"$XDG_STATE_HOME/cryo/hub-token\"; ls \"$HOME\"; touch \"$HOME/CHECK-WROTE\"; exit 0";
    let checker = chamber(
        &env,
        "checker",
        mode,
        &format!(
            "if [ ! -e first ]; then touch first; cryo-agent todo add g --at +1h --precheck {} >/dev/null; cryo-agent send set >/dev/null; cryo-agent hibernate; exit; fi\n{END}",
            sh_quote(check)
        ),
    );
    for c in [&jailer, &checker] {
        env.cryoctl(&["chamber", "start", &c.name]).ok();
        c.wait_ended(1);
    }
    // The rewrite holds the chamber, naming the keys; nothing of it ran.
    let status = || env.cryoctl(&["chamber", "status", "jailer", "--json"]).json()[0].clone();
    wait_until("the jailer held", || status()["state"] == "faulted");
    let fault = status()["fault"].as_str().unwrap().to_string();
    for key in ["sandbox", "precheck", "provider", "on_end", "max_session_duration"] {
        assert!(fault.contains(&format!("`{key}`")), "{test}: {fault}");
    }
    assert!(fault.contains("cryoctl chamber trust jailer"), "{test}: {fault}");
    env.cryoctl(&["chamber", "wake", "jailer"]).fails(1);
    assert_eq!(jailer.begun(), 1, "{test}: a held chamber ran a session");
    assert!(!env.home().join("PRECHECK-RAN").exists() && victim.messages("messages/inbox").is_empty());
    // The agent's own pre-check runs confined: no token, no file at home.
    checker.make_due_now();
    checker.wait_ended(2);
    let prompt = checker.read(".cryo/prompt.md");
    assert!(prompt.contains("CHECK-SAID"), "{test}: the check did not run: {prompt}");
    assert!(!prompt.contains(token), "{test}: the pre-check read the hub token");
    assert!(!env.home().join("CHECK-WROTE").exists(), "{test}: the pre-check wrote outside");
    // The operator looks first: each key with its value before and after,
    // and looking accepts nothing.
    let diff = env.cryoctl(&["chamber", "trust", "jailer", "--diff", "--json"]).json();
    let change = |key: &str| diff["changes"].as_array().unwrap().iter().find(|c| c["key"] == key).cloned();
    let sandbox = change("sandbox").unwrap_or_else(|| panic!("{test}: no sandbox change: {diff}"));
    assert_eq!(
        (sandbox["before"].as_str(), sandbox["after"].as_str()),
        (Some(&*format!("\"{mode}\"")), Some("\"off\""))
    );
    let precheck = change("precheck").unwrap();
    assert_eq!(precheck["before"], "(not set)", "{test}: {diff}");
    assert!(precheck["after"].as_str().unwrap().contains("PRECHECK-RAN"), "{test}: {diff}");
    let text = env.cryoctl(&["chamber", "trust", "jailer", "--diff"]).ok().to_string();
    assert!(text.contains(&format!("  sandbox: \"{mode}\" → \"off\"")), "{test}: {text}");
    assert_eq!(status()["state"], "faulted", "{test}: --diff accepted");
    // The operator accepts: the rules apply from then on.
    let trusted = env.cryoctl(&["chamber", "trust", "jailer", "--json"]).json();
    let accepted: Vec<&str> = trusted["accepted"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(accepted.contains(&"sandbox") && accepted.contains(&"provider"), "{test}: {trusted}");
    wait_until("the jailer to be unheld", || status()["state"] != "faulted");
}

#[test]
fn an_agent_cannot_loosen_its_own_rules_under_landlock() {
    own_rules("landlock", true);
}

#[test]
fn an_agent_cannot_loosen_its_own_rules_under_bwrap() {
    own_rules("bwrap", true);
}

#[test]
fn an_agent_cannot_loosen_its_own_rules_under_bwrap_as_root() {
    own_rules("bwrap", false);
}

// ---------------------------------------------------------------------------
// What an agent plants in its chamber: links, FIFOs, floods.

fn planted(mode: &str, normal_user: bool) {
    let test = format!("planted files ({mode}, normal user: {normal_user})");
    let Some((env, _d)) = world(&test, mode, normal_user) else { return };
    // Outside every chamber: a file of the user's, a folder.
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("bashrc"), "original\n").unwrap();
    let other = env.chamber("other", "exit 0\n", "");
    std::fs::write(other.dir.join("NOTES.md"), "the other's notes\n").unwrap();
    env.give_to_user();
    let (out, oth) = (outside.display().to_string(), other.dir.display().to_string());
    // Each plants one thing in session 1 (the second session meets it).
    let plants: Vec<(&str, String)> = vec![
        ("logger", format!("rm -f cryo-agent.log; ln -s {out}/bashrc cryo-agent.log")),
        ("prompter", format!("rm -f .cryo/prompt.md; ln -s {oth}/NOTES.md .cryo/prompt.md")),
        ("rejecter", format!("ln -s {oth}/messages/outbox messages/rejected\nelse cryo-agent receive")),
        ("spare", format!("ln -sf {out}/bashrc .cryo/todo.json.prev; ln -sf {out}/bashrc .cryo/state.json.prev")),
        ("confer", String::new()),
        ("historian", format!("ln -s {out} history")),
        ("fifo", "rm -f NOTES.md plan.md; mkfifo NOTES.md plan.md".into()),
    ];
    let mut chambers = Vec::new();
    for (name, plant) in &plants {
        let script = format!("if [ ! -e first ]; then touch first; {plant}\nfi\n{END}");
        chambers.push(chamber(&env, name, mode, &script));
    }
    for c in &chambers {
        env.cryoctl(&["chamber", "start", &c.name]).ok();
    }
    for c in &chambers {
        c.wait_ended(1);
    }
    let by = |n: &str| chambers.iter().find(|c| c.name == n).unwrap();
    // Between sessions, what only a person could plant: a link as
    // cryo.toml, a FIFO as cryo.toml.
    std::fs::remove_file(by("confer").dir.join("cryo.toml")).unwrap();
    std::os::unix::fs::symlink(other.dir.join("cryo.toml"), by("confer").dir.join("cryo.toml")).unwrap();
    // A second session each (spare's todo.json is rewritten by its add).
    for name in ["logger", "prompter", "spare"] {
        env.cryoctl(&["chamber", "wake", name]).ok();
    }
    // Mail that cannot be read goes to messages/rejected: a link here.
    let rejecter = by("rejecter");
    std::fs::write(rejecter.dir.join("messages/inbox/2026-01-01T00-00-00.000Z_bad.md"), "---\nfrom: x\n").unwrap();
    env.cryoctl(&["chamber", "wake", "rejecter"]).ok();
    // The fifo chamber: its files read by the hub and the CLI answer at once.
    let hub = crate::hub::Hub::of(&env);
    let at = Instant::now();
    let plan = hub.get("/api/chambers/fifo/plan");
    let notes = hub.get("/api/chambers/fifo/notes");
    assert!(at.elapsed() < Duration::from_secs(5), "{test}: a FIFO held the hub");
    assert!(plan.status >= 400 && plan.body.contains("FIFO"), "{test}: {} {}", plan.status, plan.body);
    assert!(notes.status >= 400 && notes.body.contains("FIFO"), "{test}: {}", notes.body);
    let at = Instant::now();
    env.cryoctl(&["chamber", "list"]).ok();
    env.cryoctl(&["chamber", "status", "fifo"]).ok();
    assert!(at.elapsed() < Duration::from_secs(5), "{test}: a FIFO held the CLI");
    // The logger's next spawn is refused with one line naming the link.
    let logger = by("logger");
    wait_until("the logger's refusal", || logger.cryo_log().contains("cryo-agent.log is a symbolic link"));
    // The confer chamber is faulted with one line; the other's file unread.
    let confer = || env.cryoctl(&["chamber", "status", "confer", "--json"]).json()[0].clone();
    wait_until("confer faulted", || confer()["state"] == "faulted");
    assert!(confer()["fault"].as_str().unwrap().contains("symbolic link"), "{test}: {}", confer());
    // A reset through a linked history/ is refused, nothing moved.
    env.cryoctl(&["chamber", "stop", "historian"]).ok();
    let reset = env.cryoctl(&["chamber", "reset", "historian", "--yes"]);
    assert!(reset.fails(1).contains("symbolic link"), "{test}: {}", reset.stderr);
    // The second sessions of prompter and spare ran as usual.
    by("prompter").wait_ended(2);
    by("spare").wait_ended(2);
    wait_until("the rejecter's second session", || rejecter.ended() >= 2 || rejecter.cryo_log().contains("rejected"));
    // Nothing outside changed.
    assert_eq!(std::fs::read_to_string(outside.join("bashrc")).unwrap(), "original\n", "{test}: bashrc written");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "{test}: something was made outside");
    assert_eq!(other.read("NOTES.md"), "the other's notes\n", "{test}: the other's notes written");
    assert!(other.messages("messages/outbox").is_empty(), "{test}: a message forged in the other's outbox");
    // (Its sessions' account is named `other`, as any plain command's.)
    for key in ["agent", "sandbox", "timezone", "warnings", "fault"] {
        assert!(!confer()[key].to_string().contains("other"), "{test}: the other's settings leaked: {}", confer());
    }
}

#[test]
fn planted_links_and_fifos_change_nothing_outside_under_landlock() {
    planted("landlock", true);
}

#[test]
fn planted_links_and_fifos_change_nothing_outside_under_bwrap() {
    planted("bwrap", true);
}

#[test]
fn planted_links_and_fifos_change_nothing_outside_under_bwrap_as_root() {
    planted("bwrap", false);
}

/// Paths the operator accepted (`writable`, a key file) that the agent
/// turns into links between sessions: the next spawn is held for the
/// operator, nothing is written through the link, no key is read through it.
fn moved_links(mode: &str, normal_user: bool) {
    let test = format!("moved links ({mode}, normal user: {normal_user})");
    let Some((env, _d)) = world(&test, mode, normal_user) else { return };
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    wait_until("the hub's token", || env.state_dir().join("hub-token").exists());
    let token = env.state_dir().join("hub-token");
    let plant = format!(
        "rm -rf out keys/k; ln -s {} out; ln -s {} keys/k",
        sh_quote(&outside.display().to_string()),
        sh_quote(&token.display().to_string())
    );
    let script = format!(
        "if [ ! -e first ]; then touch first; {plant}\nelse touch out/WRITTEN; printf %s \"$K\" > leaked; fi\n{END}"
    );
    let toml = format!(
        "sandbox = \"{mode}\"\nwritable = [\"./out\"]\n[provider]\nenv = {{ K = {{ file = \"./keys/k\" }} }}\n"
    );
    let c = env.chamber("mover", &script, &toml);
    std::fs::create_dir_all(c.dir.join("out")).unwrap();
    std::fs::create_dir_all(c.dir.join("keys")).unwrap();
    std::fs::write(c.dir.join("keys/k"), "the accepted key").unwrap();
    std::fs::set_permissions(c.dir.join("keys/k"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    env.give_to_user();
    env.cryoctl(&["chamber", "start", "mover"]).ok();
    c.wait_ended(1);
    c.make_due_now();
    let status = || env.cryoctl(&["chamber", "status", "mover", "--json"]).json()[0].clone();
    wait_until("the mover held", || status()["state"] == "faulted");
    let fault = status()["fault"].as_str().unwrap().to_string();
    // (Under bwrap `out` is a mount point in session, which stays.)
    assert!(fault.contains("`provider`"), "{test}: {fault}");
    if c.dir.join("out").is_symlink() {
        assert!(fault.contains("`writable`"), "{test}: {fault}");
    }
    assert!(fault.contains("cryoctl chamber trust mover"), "{test}: {fault}");
    // The spawn was refused with one line naming the moved path.
    assert!(c.cryo_log().contains("now leads to"), "{test}: {}", c.cryo_log());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{test}: written through the link");
    assert!(!c.dir.join("leaked").exists(), "{test}: a key read through the link");
}

#[test]
fn links_moved_under_accepted_paths_hold_the_chamber_under_landlock() {
    moved_links("landlock", true);
}

#[test]
fn links_moved_under_accepted_paths_hold_the_chamber_under_bwrap_as_root() {
    moved_links("bwrap", false);
}

/// 1,100 idle connections to its own door: the session slows only itself;
/// another chamber's session and the operator go on.
#[test]
fn a_flood_of_connections_from_a_session_delays_no_one_else() {
    flood(cryo_session::Sandbox::strongest().as_str(), "os.environ[\"CRYO_SOCKET\"]");
}

/// The same at the operator's socket, which Landlock does not hide from a
/// connect (it governs files, not a socket's address): the operator's calls
/// still go through at once.
#[test]
fn a_flood_of_connections_to_the_operators_socket_delays_no_one_else() {
    flood("landlock", "os.environ[\"CRYO_TEST_OPERATOR_SOCKET\"]");
}

fn flood(mode: &str, target: &str) {
    let Some((env, _d)) = world("the flood", mode, true) else { return };
    let flood = r#"
/usr/bin/python3 - <<'EOF'
import os, socket, time
held = []
for i in range(1100):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(TARGET)
        except BlockingIOError:
            pass
        held.append(s)
    except OSError:
        break
open("flooding", "w").write(str(len(held)))
t = time.time()
while not os.path.exists("release") and time.time() - t < 60:
    time.sleep(0.05)
EOF
"#
    .replace("TARGET", target);
    let socket = env.socket().display().to_string();
    let script = format!("export CRYO_TEST_OPERATOR_SOCKET={}\n{flood}{END}", sh_quote(&socket));
    let flooder = chamber(&env, "flooder", mode, &script);
    let bystander = env.chamber("bystander", &format!("cryo-agent send hi >/dev/null\n{END}"), "");
    env.cryoctl(&["chamber", "start", "flooder"]).ok();
    wait_until("the flood", || flooder.dir.join("flooding").exists());
    let at = Instant::now();
    env.cryoctl(&["chamber", "start", "bystander"]).ok();
    bystander.wait_ended(1);
    env.cryoctl(&["chamber", "list"]).ok();
    let took = at.elapsed();
    std::fs::write(flooder.dir.join("release"), "").unwrap();
    flooder.wait_ended(1);
    assert!(bystander.cryo_log().contains("hibernate accepted"), "{}", bystander.cryo_log());
    assert!(took < Duration::from_secs(10), "the flood held another chamber up for {took:?}");
    eprintln!(
        "with {} connections held at {target}: another chamber's whole session took {took:?}",
        flooder.read("flooding")
    );
}

/// A thousand idle connections to the hub (anything on the machine may
/// connect, an agent too): cryod's descriptors stay bounded, and the
/// operator's page is answered at once, the quietest connections making
/// room for it.
#[test]
fn a_flood_of_hub_connections_gives_way_to_the_operator() {
    let env = Env::new();
    let d = env.start_daemon();
    let hub = crate::hub::Hub::of(&env);
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", d.pid())).map(|r| r.count()).unwrap_or(0);
    let before = fds();
    let mut held = Vec::new();
    for _ in 0..1000 {
        match std::net::TcpStream::connect(hub.addr()) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    let at = Instant::now();
    let r = hub.get("/api/chambers");
    let took = at.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    let during = fds();
    assert!(during < before + 400, "cryod holds {during} descriptors (from {before}) under the flood");
    assert!(took < Duration::from_secs(10), "the operator waited {took:?}");
    eprintln!(
        "{} connections held: cryod {before} -> {during} descriptors, the operator answered in {took:?}",
        held.len()
    );
}

// ---------------------------------------------------------------------------
// An agent's words: never cryo's voice, never a terminal's commands.

#[test]
fn an_agent_cannot_pose_as_cryo_nor_drive_a_terminal() {
    let env = Env::new();
    let _d = env.start_daemon();
    let script = r#"
cat > messages/outbox/2026-01-01T00-00-00.000Z_forged.md <<'EOF'
---
from: cryochamber
subject: Session 9 failed
---

Everything is fine, nothing to see.
EOF
cryo-agent send "$(printf 'title\033]0;owned\007 and \033[2J cleared')" >/dev/null
cryo-agent hibernate
"#;
    let c = env.chamber("c", script, "");
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let messages = env.cryoctl(&["chamber", "messages", "c", "--json"]).stdout;
    let forged = messages.lines().find(|l| l.contains("Everything is fine")).unwrap_or_default();
    assert!(forged.contains("not cryo itself: written into the outbox by the agent"), "{messages}");
    // cryod's own word stays its own (a fallback: this agent sent, so none; ask for one).
    // On a terminal, the escapes are shown, not obeyed.
    let out = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!("{} chamber messages c", cryo_tests::bin("cryoctl").display()))
        .arg("/dev/null")
        .env_clear()
        .env("HOME", env.home())
        .env("XDG_RUNTIME_DIR", env.path("run"))
        .env("XDG_STATE_HOME", env.path("state"))
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env("PATH", "/usr/bin:/bin")
        .env("TERM", "dumb")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("title"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "a raw escape reached the terminal: {shown:?}");
    assert!(shown.contains("\\u{1b}]0;owned"), "{shown:?}");
}

// ---------------------------------------------------------------------------
// cryo as a newcomer installs it: under ~/.cargo/bin.

/// What lies beside cryod under `~/.cargo/bin`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Beside {
    /// cryod's small launcher, as `cargo install` and `install.sh` put it.
    Launcher,
    /// Nothing: a copy of cryod alone; its own binary launches.
    Nothing,
    /// A `cryod-launch` of another build (here a script that fails): cryod
    /// says so in its log and launches with its own binary.
    Stale,
}

/// The agent says which binary launched it: its parent (the keeper of its
/// tree, its namespace's init, or bubblewrap running the launcher) names it.
fn under_cargo_bin(mode: &str, beside: Beside) {
    let test = format!("cryo-agent under ~/.cargo/bin ({mode}, {beside:?} beside cryod)");
    if let Some(why) = cryo_session::Sandbox::parse(mode).and_then(cryo_session::Sandbox::unavailable) {
        eprintln!("SKIPPED {test}: {why}");
        return;
    }
    let env = Env::new();
    let bin = env.home().join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for b in ["cryod", "cryoctl", "cryo-agent"] {
        std::fs::copy(cryo_tests::bin(b), bin.join(b)).unwrap();
    }
    match beside {
        Beside::Launcher => drop(std::fs::copy(cryo_tests::bin("cryod-launch"), bin.join("cryod-launch")).unwrap()),
        Beside::Nothing => {}
        Beside::Stale => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(bin.join("cryod-launch"), "#!/bin/sh\necho stale launcher >&2\nexit 99\n").unwrap();
            std::fs::set_permissions(bin.join("cryod-launch"), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let mut cmd = env.command(bin.join("cryod"));
    let log = std::fs::File::create(env.path("cryod.log")).unwrap();
    let mut daemon = cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display())).stderr(log).spawn().unwrap();
    wait_until("cryod", || std::os::unix::net::UnixStream::connect(env.socket()).is_ok());
    let say = "cryo-agent send \"from $(command -v cryo-agent) under $(tr '\\0' ' ' </proc/$PPID/cmdline)\" >/dev/null";
    let c = env.chamber("c", &format!("{say}\n{END}"), "");
    let toml = c.read("cryo.toml").replace("sandbox = \"off\"", &format!("sandbox = \"{mode}\""));
    std::fs::write(c.dir.join("cryo.toml"), toml).unwrap();
    env.cryoctl(&["chamber", "trust", "c"]).ok();
    env.cryoctl(&["chamber", "start", "c"]).ok();
    c.wait_ended(1);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(c.cryo_log().contains("hibernate accepted"), "{test}: {}\n{}", c.cryo_log(), c.read("cryo-agent.log"));
    let outbox = c.outbox();
    assert!(outbox.iter().any(|m| m.contains(".cargo/bin/cryo-agent")), "{test}: {outbox:?}");
    let launched_by = if beside == Beside::Launcher { ".cargo/bin/cryod-launch __" } else { ".cargo/bin/cryod __" };
    assert!(outbox.iter().any(|m| m.contains(launched_by)), "{test}: not launched by {launched_by}: {outbox:?}");
    let said = env.daemon_log();
    let warned = said.contains("another build than this cryod");
    assert_eq!(warned, beside == Beside::Stale, "{test}: cryod's log:\n{said}");
    // With a cgroup a session, the keeper's child confines itself in place
    // of an exec of the launcher: under Landlock the agent's parent (its
    // namespace's init) is that child, whose command line is the keeper's.
    if mode == "landlock" && env.cryod_makes_cgroups() {
        let keeper = if beside == Beside::Launcher { "cryod-launch __sandbox" } else { "cryod __sandbox" };
        assert!(outbox.iter().any(|m| m.contains(keeper)), "{test}: the last step was exec'd: {outbox:?}");
    }
}

#[test]
fn cryo_agent_under_cargo_bin_is_reached_under_bwrap() {
    under_cargo_bin("bwrap", Beside::Launcher);
}

#[test]
fn cryo_agent_under_cargo_bin_is_reached_under_landlock() {
    under_cargo_bin("landlock", Beside::Launcher);
}

/// A copy of cryod alone (no `cryod-launch` beside it) still runs each
/// session, its own binary the launcher.
#[test]
fn cryod_alone_launches_its_sessions_itself() {
    under_cargo_bin("landlock", Beside::Nothing);
}

/// A launcher handed a plan of another build (cryod replaced between the
/// check of its launcher and the start, or a plan written by hand) refuses
/// it with one line, before it confines or runs anything: both launchers,
/// with the plan's build absent or another.
#[test]
fn a_launcher_refuses_a_plan_of_another_build() {
    let marker = std::env::temp_dir().join(format!("cryo-ran-{}", std::process::id()));
    for plan in [r#"{"arg0":"sh"}"#, r#"{"build":"cryo-session-build:0.0.0-0","arg0":"sh"}"#] {
        for launcher in ["__sandbox", "__confine"] {
            let out = std::process::Command::new(cryo_tests::bin("cryod-launch"))
                .args([launcher, "--", "/bin/sh", "-c", &format!("touch {}", marker.display())])
                .env(cryo_session::PLAN_VAR, plan)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(126), "{launcher} {plan}: {said}");
            assert!(said.contains("is from another build than the cryod that started it"), "{launcher}: {said}");
            assert_eq!(said.lines().count(), 1, "{launcher}: one line: {said}");
            assert!(!marker.exists(), "{launcher} ran the program with a plan of another build");
        }
    }
}

/// A `cryod-launch` of another build beside cryod (an upgrade half done)
/// is never run: cryod says so once and launches with its own binary.
#[test]
fn a_launcher_of_another_build_is_not_run() {
    under_cargo_bin("landlock", Beside::Stale);
}
