//! Issue 46: git-aware chambers. Real repositories made here (a checkout
//! the user works in, a bare "remote"), real sessions of scripted agents
//! that run the real git in their worktrees.

use std::path::{Path, PathBuf};
use std::process::Command;

use cryo_tests::{Chamber, Env, wait_until};

/// `sh -c script` in `dir` with a git identity; its stdout, or a panic
/// with what it said.
fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether git is here at all (every test needs it).
fn have_git() -> bool {
    let here = Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success());
    if !here {
        eprintln!("SKIPPED: no git on this machine");
    }
    here
}

/// The user's checkout: `main` with one file committed, and work of
/// their own left uncommitted (which no chamber may touch).
fn checkout(env: &Env) -> PathBuf {
    let main = env.path("project");
    std::fs::create_dir_all(&main).unwrap();
    sh(&main, "git init -q -b main . && echo hello > README && git add README && git commit -q -m first");
    std::fs::write(main.join("wip.txt"), "the user's own unfinished work\n").unwrap();
    main
}

/// An agent that writes down where it works and what it was told, runs
/// `work` there, and hibernates.
fn agent(work: &str) -> String {
    format!(
        "pwd > \"$CRYO_CHAMBER_DIR/where-$CRYO_SESSION.txt\"\nprintf '%s' \"$1\" > \"$CRYO_CHAMBER_DIR/prompt-$CRYO_SESSION.txt\"\n{work}\ncryo-agent todo list | grep -q later || cryo-agent todo add later --at +1h >/dev/null\ncryo-agent hibernate\n"
    )
}

/// `cryo.toml`'s lines for chamber `name` on `repo`: its agent named by
/// its whole path (the session runs in the worktree, not the chamber).
fn git_toml(env: &Env, name: &str, repo: &Path, extra: &str) -> String {
    let script = env.path(name).join("agent.sh");
    format!("agent = \"sh {}\"\n[git]\nrepo = \"{}\"\n{extra}", script.display(), repo.display())
}

/// `cryoctl chamber diff ARGS --json`.
fn diff(env: &Env, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "chamber", "diff"];
    all.extend(args);
    env.cryoctl(&all).json()
}

/// The paths of a diff's files.
fn paths(d: &serde_json::Value) -> Vec<String> {
    d["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_string()).collect()
}

fn status(env: &Env, c: &Chamber) -> serde_json::Value {
    env.cryoctl(&["--json", "chamber", "status", &c.name]).json()[0].clone()
}

#[test]
fn two_chambers_on_one_repository_work_apart_and_leave_the_checkout_alone() {
    if !have_git() {
        return;
    }
    let env = Env::new();
    let _d = env.start_daemon();
    let main = checkout(&env);
    let head = sh(&main, "git rev-parse HEAD");
    let work = |who: &str| {
        format!(
            "echo {who} > {who}-only.txt && git add {who}-only.txt && git commit -q -m \"{who}'s work\"\necho left by {who} > left.txt"
        )
    };
    let a = env.chamber("a", &agent(&work("a")), &git_toml(&env, "a", &main, ""));
    let b = env.chamber("b", &agent(&work("b")), &git_toml(&env, "b", &main, ""));
    env.cryoctl(&["chamber", "start", "a"]).ok();
    env.cryoctl(&["chamber", "start", "b"]).ok();
    a.wait_ended(1);
    b.wait_ended(1);
    for (c, other) in [(&a, "b"), (&b, "a")] {
        let wt = c.dir.join("worktree");
        assert_eq!(
            c.read("where-1.txt").trim(),
            wt.display().to_string(),
            "the session works in its worktree: {}",
            c.cryo_log()
        );
        assert!(wt.join(format!("{}-only.txt", c.name)).is_file());
        assert!(!wt.join(format!("{other}-only.txt")).exists(), "{}'s worktree holds {other}'s work", c.name);
        let prompt = c.read("prompt-1.txt");
        assert!(prompt.contains(&format!("on branch `cryo/{}`", c.name)), "{prompt}");
        assert!(prompt.contains("The base is `main`"), "{prompt}");
        assert!(prompt.contains(&c.dir.display().to_string()), "the chamber's folder is named: {prompt}");
        // What the agent left uncommitted is a commit naming the session.
        let last = sh(&wt, "git log -1 --format=%s");
        assert!(last.contains("what session 1 left uncommitted"), "{last}");
        assert_eq!(sh(&wt, "git status --porcelain"), "", "nothing is left uncommitted");
        let d = diff(&env, &[&c.name, "--session", "1"]);
        let mut want = vec!["left.txt".to_string(), format!("{}-only.txt", c.name)];
        want.sort();
        assert_eq!(paths(&d), want, "{d}");
        assert_eq!(
            (d["commits"].as_u64(), d["additions"].as_u64(), d["deletions"].as_u64()),
            (Some(2), Some(2), Some(0))
        );
        assert!(d["patch"].as_str().unwrap().contains(&format!("+left by {}", c.name)), "{d}");
        let whole = diff(&env, &[&c.name]);
        assert_eq!((whole["base"].as_str(), paths(&whole)), (Some("main"), paths(&d)));
        let log = c.cryo_log();
        assert!(log.contains(&format!("git: 2 commits on cryo/{} (2 files, +2 -0)", c.name)), "{log}");
        // The ledger and the status have it too.
        let s = status(&env, c);
        assert_eq!(s["git"]["commits"].as_u64(), Some(2), "{s}");
        assert_eq!(s["sessions"][0]["git"]["files"].as_u64(), Some(2), "{s}");
    }
    // The user's checkout: not a file, branch or commit of theirs changed.
    assert_eq!(sh(&main, "git status --porcelain"), "?? wip.txt\n");
    assert_eq!(sh(&main, "git rev-parse HEAD"), head);
    assert_eq!(sh(&main, "git branch --format='%(refname:short)'"), "main\n", "no branch pushed without `push`");
    assert_eq!(std::fs::read_to_string(main.join("wip.txt")).unwrap(), "the user's own unfinished work\n");
}
