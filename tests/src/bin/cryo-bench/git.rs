//! What a `[git]` chamber's worktree adds to a wake (cryo only: the seed
//! system has no git). Two chambers woken by hand in turn, one plain and
//! one on a repository of `--files` files; each wake's lateness is the
//! ledger's (from the wake's record to its agent's start), so the
//! difference is the worktree's preparation (a fetch of the base, and in
//! `session` mode a fresh clone).

use std::path::Path;
use std::process::Command;

use cryo_tests::{Env, wait_until_within};

use crate::measure::*;

fn sh(dir: &Path, script: &str) {
    let ok = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .status();
    assert!(ok.is_ok_and(|s| s.success()), "{script}");
}

/// The ledger's lateness of a chamber's sessions after the first.
fn lateness(env: &Env, name: &str) -> Vec<f64> {
    let s = env.cryoctl(&["--json", "chamber", "status", name]).json();
    let sessions = s[0]["sessions"].as_array().cloned().unwrap_or_default();
    sessions.iter().filter(|x| x["number"].as_u64() > Some(1)).filter_map(|x| x["lateness_ms"].as_f64()).collect()
}

pub fn git(files: usize, wakes: usize, session_mode: bool) -> Figures {
    let env = Env::new();
    let _d = env.start_daemon();
    let repo = env.path("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    for i in 0..files {
        let dir = repo.join(format!("src/m{:03}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:05}.txt")), format!("file {i}\n")).unwrap();
    }
    let t = std::time::Instant::now();
    sh(&repo, "git init -q -b main . && git add -A && git commit -q -m files");
    println!(
        "\ncryo: a [git] chamber's worktree ({files} files, committed in {:.1} s; {wakes} wakes each)",
        t.elapsed().as_secs_f64()
    );
    let script = "echo $CRYO_SESSION > touched.txt\ncryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n";
    let mode = if session_mode { "mode = \"session\"\n" } else { "" };
    for (name, git) in [("plain", false), ("git", true)] {
        let dir = env.path(name);
        let extra = match git {
            true => format!(
                "agent = \"sh {}\"\n[git]\nrepo = \"{}\"\n{mode}",
                dir.join("agent.sh").display(),
                repo.display()
            ),
            false => String::new(),
        };
        let c = env.chamber(name, script, &extra);
        env.cryoctl(&["chamber", "start", name]).ok();
        c.wait_ended(1);
    }
    let first = std::time::Instant::now();
    for n in 2..=wakes + 1 {
        for name in ["plain", "git"] {
            env.cryoctl(&["chamber", "wake", name]).ok();
            let log = env.path(name).join("cryo.log");
            let ended = || std::fs::read_to_string(&log).unwrap_or_default().matches("--- CRYO END ---").count() >= n;
            wait_until_within(std::time::Duration::from_secs(120), "the wake to end", ended);
        }
    }
    let took = first.elapsed().as_secs_f64();
    let mut f = Figures::new();
    p50_p95(&mut f, "plain_wake", "a plain chamber's wake", lateness(&env, "plain"));
    p50_p95(&mut f, "git_wake", "a [git] chamber's wake", lateness(&env, "git"));
    let added = f["git_wake_p50_ms"].as_f64().unwrap_or(0.0) - f["plain_wake_p50_ms"].as_f64().unwrap_or(0.0);
    println!("  the worktree's preparation adds  p50 {added:.1} ms ({took:.1} s for all the wakes)");
    f.insert("prepare_p50_ms".into(), added.into());
    f
}
