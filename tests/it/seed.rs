//! Issue 62, case 2: the seed system's users move over. A chamber the real
//! cryochamber 0.2.8 (`cargo install cryochamber@0.2.8`, into
//! `tests/seed/` by `.ci/run`) made and ran, its daemon still running, is
//! refused by `add` and `adopt` (both daemons would serve it); `adopt
//! --stop-seed` stops that daemon and carries over what it ran with
//! (`[[providers]]`, `timer.json`'s agent override, the TODOs); cryo runs
//! it; `release` hands it back in files the seed reads, and the real seed
//! runs it again without skipping a TODO.

use std::path::{Path, PathBuf};
use std::process::Output;

use cryo_tests::{Env, wait_until_telling};
use serde_json::Value;

/// The seed's binaries, if installed (required where CI installs them).
fn seed_bin() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("seed/bin");
    if bin.join("cryo").is_file() {
        return Some(bin);
    }
    let why = "cryochamber 0.2.8 is not installed in tests/seed (cargo install cryochamber@0.2.8 --locked --debug \
               --root tests/seed)";
    assert!(std::env::var_os("CRYO_REQUIRE_INTEROP").is_none(), "{why}");
    eprintln!("SKIPPED: {why}");
    None
}

/// Runs the seed's `cryo ARGS` in `dir`, as its user would: its binaries
/// first on PATH, no system service (`CRYO_NO_SERVICE`: a background
/// process, as on a machine without a user manager).
fn seed(env: &Env, bin: &Path, dir: &Path, args: &[&str]) -> Output {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    env.command(bin.join("cryo"))
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .env("CRYO_NO_SERVICE", "1")
        .output()
        .unwrap()
}

fn said(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// An agent both systems run: it plans a wake two hours out and hibernates
/// (each system's `cryo-agent` takes these words).
const AGENT: &str = "#!/bin/sh\ncryo-agent todo add \"check again\" --at \"+2 hours\" >/dev/null\n\
                     cryo-agent hibernate --summary \"ran\" --linger 0 >/dev/null\n";

#[test]
fn a_chamber_the_seed_made_and_ran_moves_over_and_back() {
    let Some(bin) = seed_bin() else { return };
    let env = Env::new();
    let _d = env.start_daemon();
    let dir = env.home().join("seeded");
    std::fs::create_dir_all(&dir).unwrap();
    let out = seed(&env, &bin, &dir, &["init", "--agent", "sh agent.sh"]);
    assert!(out.status.success(), "{}", said(&out));
    std::fs::write(dir.join("agent2.sh"), AGENT).unwrap();
    // What its users wrote: the older `[[providers]]` table (which 0.2.8
    // still runs with) and a key 0.2.8 ignores.
    let mut toml = std::fs::read_to_string(dir.join("cryo.toml")).unwrap();
    toml.push_str("\nwait_timeout = 30\n\n[[providers]]\nname = \"main\"\nenv = { SEED_KEY = \"k-1\" }\n");
    std::fs::write(dir.join("cryo.toml"), &toml).unwrap();
    // `cryo start --agent …` keeps its override in timer.json.
    let out = seed(&env, &bin, &dir, &["start", "--agent", "sh agent2.sh"]);
    assert!(out.status.success(), "{}", said(&out));
    let log = || std::fs::read_to_string(dir.join("cryo.log")).unwrap_or_default();
    wait_until_telling(
        std::time::Duration::from_secs(60),
        "the seed's first session",
        || log().contains("session complete") && std::fs::read_to_string(dir.join("todo.json")).is_ok(),
        log,
    );
    let timer: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("timer.json")).unwrap()).unwrap();
    let pid = timer["pid"].as_u64().expect("the seed's daemon runs") as i32;
    // A zombie (the test's process may be its reaper) is not alive.
    let alive = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next()).unwrap_or_default();
        !stat.is_empty() && state != Some('Z')
    };
    assert!(alive(pid));

    // An agent may hide its daemon: timer.json says none runs. It is found
    // anyway (a process of the seed's `cryo` working in the folder).
    let mut hidden = timer.clone();
    hidden["pid"] = Value::Null;
    std::fs::write(dir.join("timer.json"), hidden.to_string()).unwrap();
    // While the seed's daemon runs it, cryo takes it neither way, and
    // changes nothing.
    let path = dir.to_str().unwrap();
    for args in [&["chamber", "add", path][..], &["chamber", "adopt", path]] {
        let r = env.cryoctl(args);
        let e = r.fails(1);
        assert!(e.contains(&format!("the seed system's daemon (pid {pid}) still runs")), "{e}");
        assert!(
            e.contains(&format!("`cryoctl chamber adopt {path} --stop-seed`")),
            "it names the command that mends it: {e}"
        );
    }
    assert_eq!(std::fs::read_to_string(dir.join("cryo.toml")).unwrap(), toml);
    assert!(env.cryoctl(&["chamber", "list", "--json"]).json().as_array().unwrap().is_empty());

    // Moved over: the seed's daemon stopped, what it ran with carried.
    let r = env.cryoctl(&["chamber", "adopt", path, "--stop-seed"]);
    let screen = r.ok().to_string();
    for line in [
        "moved over from the seed system",
        &format!("the seed's daemon (pid {pid}) stopped"),
        "[[providers]] \"main\" → [provider] (1 env value(s))",
        "timer.json's agent override → agent = \"sh agent2.sh\"",
        "todo.json: 1 TODO(s), 1 open",
        "`wait_timeout`: the seed's, kept in cryo.toml and ignored by cryo",
        "backup",
        "registered \"seeded\"",
    ] {
        assert!(screen.contains(line), "{line:?} is not on the screen:\n{screen}");
    }
    eprintln!("cryoctl chamber adopt:\n{screen}");
    assert!(!alive(pid), "the seed's daemon still runs");
    assert!(!dir.join("timer.json").exists());
    let kept = std::fs::read_to_string(dir.join("cryo.toml")).unwrap();
    let loaded = cryod::chamber::config::parse(&dir.join("cryo.toml"), &kept, &dir, chrono_tz::UTC).unwrap();
    assert_eq!(loaded.config.agent, "sh agent2.sh", "{kept}");
    assert_eq!(loaded.config.provider_env.get("SEED_KEY").map(String::as_str), Some("k-1"), "{kept}");
    assert!(!kept.contains("[[providers]]"), "{kept}");
    let s = env.cryoctl(&["chamber", "status", "seeded", "--json"]).json()[0].clone();
    assert!(s["fault"].is_null(), "{s}");

    // cryo keeps the seed's plan: the wake its TODO planned (a naive local
    // time, read in the chamber's zone, UTC here) is cryo's next wake.
    let todos: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("todo.json")).unwrap()).unwrap();
    let planned = todos[0]["at"].as_str().unwrap().to_string();
    env.cryoctl(&["chamber", "start", "seeded"]).ok();
    let s = env.cryoctl(&["chamber", "status", "seeded", "--json"]).json()[0].clone();
    assert_eq!(s["next_wake"].as_str(), Some(format!("{planned}:00Z").as_str()), "{s}");
    // It runs now when woken: its agent (with the key the seed ran it
    // with) works.
    std::fs::write(dir.join("agent2.sh"), format!("echo \"key=$SEED_KEY\" > key-seen\n{AGENT}")).unwrap();
    env.cryoctl(&["chamber", "wake", "seeded"]).ok();
    let status = || env.cryoctl(&["chamber", "status", "seeded", "--json"]).json()[0].clone();
    wait_until_telling(
        std::time::Duration::from_secs(60),
        "cryo's first session of it",
        || status()["last_result"].as_str().is_some_and(|r| r.starts_with("hibernated")),
        || format!("{}\n{}", status(), log()),
    );
    assert_eq!(std::fs::read_to_string(dir.join("key-seen")).unwrap_or_default().trim(), "key=k-1");

    // And back: files the seed reads, and cryo no longer runs it.
    let r = env.cryoctl(&["chamber", "release", "seeded"]);
    let screen = r.ok().to_string();
    eprintln!("cryoctl chamber release:\n{screen}");
    assert!(screen.contains("handed") && screen.contains("cryo start"), "{screen}");
    assert!(env.cryoctl(&["chamber", "list", "--json"]).json().as_array().unwrap().is_empty());
    let todos: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("todo.json")).unwrap()).unwrap();
    let open: Vec<&Value> = todos.as_array().unwrap().iter().filter(|t| t["done"] == false).collect();
    assert_eq!(open.len(), 2, "{todos}");
    for t in &open {
        let at = t["at"].as_str().unwrap();
        assert!(
            at.len() == 16 && chrono::NaiveDateTime::parse_from_str(at, "%Y-%m-%dT%H:%M").is_ok(),
            "the seed's one time form: {t}"
        );
    }
    // The real seed runs it again and reads every TODO.
    let before = log().matches("Daemon: next wake at").count();
    let out = seed(&env, &bin, &dir, &["start"]);
    assert!(out.status.success(), "{}", said(&out));
    wait_until_telling(
        std::time::Duration::from_secs(60),
        "the seed's daemon to plan its next wake",
        || log().matches("Daemon: next wake at").count() > before,
        log,
    );
    assert!(!log().contains("Skipping TODO"), "the seed skipped a TODO:\n{}", log());
    let out = seed(&env, &bin, &dir, &["cancel"]);
    assert!(out.status.success(), "{}", said(&out));
}
